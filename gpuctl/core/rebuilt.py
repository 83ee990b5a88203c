"""A node's ledger as the device manager aggregates it from the allocation records of the Pods bound to it: what
gate 3 and ``simulate`` judge against when the published ledger may be behind the Pods."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from gpuctl.core.lazy import MadeOnRead
from gpuctl.core.ledger import NO_COUNTS, Card, Mode, NodeDevices
from gpuctl.core.pods import CardAllocation, Pod
from gpuctl.core.units import M


def rebuilt_ledgers(devices: Mapping[str, NodeDevices], pods: Iterable[Pod]) -> Mapping[str, NodeDevices]:
    """Every node's ledger rebuilt from the Pods bound to it (:func:`rebuild_ledger`), each the first time it is
    read: explaining every Workload of a large cluster judges gate 3 for the few that wait, and reads only their
    nodes' ledgers."""
    bound: dict[str, list[Pod]] = {}
    for p in pods:
        if p.node_name:
            bound.setdefault(p.node_name, []).append(p)
    return MadeOnRead(devices, lambda node: rebuild_ledger(devices[node], bound.get(node, ())))


def rebuild_ledger(node: NodeDevices, pods: Iterable[Pod]) -> NodeDevices:
    """The node's ledger as the device manager aggregates it from the allocation records of the Pods bound to it.

    Finished Pods are not charged: the kubelet took their cards back.
    """
    per_card: dict[tuple[str, str, str], list[CardAllocation]] = {}
    for p in pods:
        if p.node_name != node.node or p.finished:
            continue
        for a in p.allocations:
            per_card.setdefault((a.manufacturer, a.group, a.card_id), []).append(a)
    groups = []
    for g in node.groups:
        cards = []
        for c in g.cards:
            records = per_card.get((g.manufacturer, g.id, c.id), [])
            if not records:
                # A card no Pod holds is free (built directly: thousands are rebuilt at once).
                free_profiles = {p.name: p.count for p in c.profiles} if c.profiles else NO_COUNTS
                cards.append(
                    Card(c.id, c.index, c.capability, c.unhealthy, Mode.NONE, 0, M, 0, NO_COUNTS, free_profiles)
                )
                continue
            modes = [_MODES[r.mode] if 0 <= r.mode <= 5 else Mode.NONE for r in records]
            mode = next((m for m in modes if m not in (Mode.NONE, Mode.VISIBILITY)), Mode.NONE)
            allocated = min(M, sum(max(0, r.allocated) for r in records))
            profiles: dict[str, int] = {}
            for r in records:
                if r.profile:
                    profiles[r.profile] = profiles.get(r.profile, 0) + 1
            remaining_profiles = _remaining_after(c, [r for r in records if r.profile]) if c.partitioned else {}
            cards.append(
                Card(
                    c.id,
                    c.index,
                    c.capability,
                    c.unhealthy,
                    mode,
                    allocated,
                    M - allocated,
                    sum(1 for m in modes if m is Mode.SLICED),
                    profiles,
                    remaining_profiles,
                    True,
                )
            )
        groups.append(replace(g, cards=tuple(cards)))
    return NodeDevices(node.node, node.labels, tuple(groups), node.resource_version)


_MODES = tuple(Mode)


def _remaining_after(card: Card, carved: list[CardAllocation]) -> dict[str, int]:
    """Per-profile free instances after carving, by geometry: instances sit where their records say, and those
    whose record names no placement are packed at their lowest legal start."""
    by_name = {p.name: p for p in card.profiles}
    taken: list[tuple[int, int]] = [(s, s + n) for r in carved for s, n in r.placements if n > 0]
    unplaced: dict[str, int] = {}
    for r in carved:
        if not any(n > 0 for _, n in r.placements):
            unplaced[r.profile] = unplaced.get(r.profile, 0) + 1
    for name, n in sorted(unplaced.items(), key=lambda x: -(by_name[x[0]].memory_slices if x[0] in by_name else 0)):
        p = by_name.get(name)
        if p is None:
            continue
        for pl in p.placements:
            if n == 0:
                break
            if not any(pl.start < e and s < pl.end for s, e in taken):
                taken.append((pl.start, pl.end))
                n -= 1
    out = {}
    for p in card.profiles:
        free = 0
        chosen: list[tuple[int, int]] = list(taken)
        for pl in p.placements:
            if not any(pl.start < e and s < pl.end for s, e in chosen):
                chosen.append((pl.start, pl.end))
                free += 1
        out[p.name] = min(free, p.count)
    return out
