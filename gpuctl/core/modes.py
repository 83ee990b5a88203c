"""Card modes: which cards may switch between whole (unpartitioned) and partitioned, by each vendor's rule, and what
a card reads once it has switched.

- **NVIDIA** (and T-Head, whose PPUs partition the same way): per card — the partition mode belongs to one card, so
  a node can mix whole and partitioned cards.
- **Hygon**: node-wide — the device manager partitions every DCU of a node or none, and a partitioned node serves
  only partitions.
- A card holding allocations in its current mode cannot switch until they finish, nor can the cards of a node a
  Workload is still starting on (admitted, its Pods not yet allocated: which cards it will take is not known yet).

A switched card is free in its new mode. A partitioned card's geometry — its profiles, the instances of each it
hosts, their placements — is its model's: read from a card of the same model that already reports it, else from the
profile table of the products documented here. A whole card's logical slicing is a whole card of its model's, else
the manufacturer's slice slots. A card is M credits in either mode, so the node's credits and its flavor's quota
stand; its capacity keys, fit labels and views follow from its new capability.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from gpuctl.core import naming
from gpuctl.core.errors import InputError
from gpuctl.core.instancetypes import InstanceType, OfferedProfile
from gpuctl.core.ledger import NO_COUNTS, Capability, Card, Mode, NodeDevices, Placement, Profile
from gpuctl.core.units import M
from gpuctl.core.views import in_pool

WHOLE = "whole"
PARTITIONED = "partitioned"
MODES = (WHOLE, PARTITIONED)

NODE_WIDE = frozenset({"hygon"})
"""Manufacturers whose partition mode is a node's, not a card's."""


def _h100_profiles() -> tuple[Profile, ...]:
    # name: (instances per card, memory slices, legal starts, memory MiB, compute slices); 8 memory slices per card.
    table = {
        "1g.10gb": (7, 1, (0, 1, 2, 3, 4, 5, 6), 9856, 1),
        "1g.20gb": (4, 2, (0, 2, 4, 6), 19968, 1),
        "2g.20gb": (3, 2, (0, 2, 4), 19968, 2),
        "3g.40gb": (2, 4, (0, 4), 40192, 3),
        "4g.40gb": (1, 4, (0,), 40192, 4),
        "7g.80gb": (1, 8, (0,), 80896, 7),
    }
    return tuple(
        Profile(name, name, mib, count, compute, slices, tuple(Placement(s, slices) for s in starts))
        for name, (count, slices, starts, mib, compute) in table.items()
    )


PROFILE_TABLES: Mapping[tuple[str, str], Capability] = {
    ("nvidia-h100-80gb-hbm3", "NVIDIA H100 80GB HBM3"): Capability(0, False, _h100_profiles(), 7),
}
"""The partition geometry of the models whose profile table is documented, by (accelerator key, product name): a
card of either is that model (a manufacturer's partition profiles are fixed per product)."""


def profile_table(accelerator_key: str, product: str = "") -> Capability | None:
    for (key, name), cap in PROFILE_TABLES.items():
        if accelerator_key == key or (product and product == name):
            return cap
    return None


class ModeError(InputError, ValueError):
    """A switch the vendor's rule, the card's allocations or the model's geometry does not allow; the message names
    the card and what to do."""


@dataclass(frozen=True, slots=True)
class Catalog:
    """Each model's capability in either mode, by accelerator key: observed on a card that has it, else the profile
    table (partitioned) or the manufacturer's slice slots (whole)."""

    partitioned: Mapping[str, Capability]
    whole: Mapping[str, Capability]

    def capability(self, accelerator_key: str, manufacturer: str, to: str, product: str = "") -> Capability | None:
        if to == PARTITIONED:
            return self.partitioned.get(accelerator_key) or profile_table(accelerator_key, product)
        seen = self.whole.get(accelerator_key)
        if seen is not None:
            return seen
        mfr = naming.MANUFACTURERS.get(manufacturer)
        return Capability((mfr.slice_slots or 0) if mfr else 0, bool(mfr and mfr.cores_overcommit), (), 0)


def catalog(ledgers: Iterable[NodeDevices]) -> Catalog:
    """The capabilities every model shows on some card of these ledgers (the first one seen of each)."""
    partitioned: dict[str, Capability] = {}
    whole: dict[str, Capability] = {}
    for d in ledgers:
        for g in d.groups:
            key = g.accelerator_key
            if key in partitioned and key in whole:
                continue
            for c in g.cards:
                into = partitioned if c.partitioned else whole
                into.setdefault(key, c.capability)
    return Catalog(partitioned, whole)


def offers(cap: Capability | None, profile: str) -> bool:
    """Whether a partitioned capability offers a profile (in its published spelling)."""
    return cap is not None and any(p.published == profile for p in cap.profiles)


def partitionable(manufacturer: str) -> bool:
    mfr = naming.MANUFACTURERS.get(manufacturer)
    return mfr is not None and mfr.partition_kind is not None


def busy(card: Card) -> bool:
    """The card holds an allocation in its current mode."""
    return (
        card.mode is not Mode.NONE
        or card.allocated > 0
        or card.allocated_slices > 0
        or any(v > 0 for v in card.allocated_profiles.values())
    )


def mode_of(card: Card) -> str:
    return PARTITIONED if card.partitioned else WHOLE


@dataclass(frozen=True, slots=True)
class Switch:
    """Cards of one model on one node switching to one mode."""

    node: str
    accelerator_key: str
    manufacturer: str
    cards: tuple[str, ...]
    to: str
    capability: Capability
    was: tuple[Capability, ...]
    """Each switched card's capability before (the same order as ``cards``)."""


def _find(ledger: NodeDevices, card: str) -> tuple[int, Card] | None:
    for gi, g in enumerate(ledger.groups):
        for c in g.cards:
            if c.id == card or (card.isdigit() and c.index == int(card)):
                return gi, c
    return None


def switches(
    ledger: NodeDevices,
    cards: Sequence[str] | None,
    to: str,
    known: Catalog,
    *,
    holders: Mapping[str, Sequence[str]] | None = None,
    in_flight: Sequence[str] = (),
) -> list[Switch]:
    """The switches ``NODE[/CARD]=to`` asks of one node (``cards`` None: every card of the node that can take the
    mode), checked against the vendor's rule, the cards' allocations and the model's geometry. Cards already in
    ``to`` are left as they are (a named one is an error). Raises :class:`ModeError`."""
    node = ledger.node
    if to not in MODES:
        raise ModeError(f"{node}: unknown mode {to!r}; use partitioned or whole")
    chosen: dict[int, list[Card]] = {}
    if cards is None:
        for gi, g in enumerate(ledger.groups):
            if partitionable(g.manufacturer):
                chosen[gi] = [c for c in g.cards if mode_of(c) != to]
        if not any(partitionable(g.manufacturer) for g in ledger.groups):
            made = ", ".join(sorted({g.manufacturer for g in ledger.groups})) or "no"
            raise ModeError(f"{node}: its {made} cards have no partition mode to switch")
    else:
        for name in cards:
            found = _find(ledger, name)
            if found is None:
                ids = [c.id for g in ledger.groups for c in g.cards]
                raise ModeError(f"{node}/{name}: no such card on {node} (its cards: {', '.join(ids) or 'none'})")
            gi, card = found
            if mode_of(card) == to:
                raise ModeError(f"{node}/{card.id}: the card is already {to}")
            if card not in chosen.setdefault(gi, []):
                chosen[gi].append(card)
    out: list[Switch] = []
    for gi, picked in chosen.items():
        g = ledger.groups[gi]
        if not picked:
            continue
        where = f"{node}/{picked[0].id}" if cards is not None and len(picked) == 1 else node
        if not partitionable(g.manufacturer):
            raise ModeError(f"{where}: {g.manufacturer} cards have no partition mode to switch")
        if g.manufacturer in NODE_WIDE:
            rest = [c for c in g.cards if mode_of(c) != to and c not in picked]
            if rest:
                raise ModeError(
                    f"{where}: {g.manufacturer} switches the partition mode of a whole node, not of one card; "
                    f"give {node}={to} (all {len(g.cards)} cards switch)"
                )
        capability = known.capability(g.accelerator_key, g.manufacturer, to, g.product)
        if capability is None:
            raise ModeError(
                f"{where}: no card of model {g.accelerator_key} reports partition profiles and its profile table is "
                "not known here, so what it would offer partitioned cannot be told"
            )
        held = [c for c in picked if busy(c)]
        if held:
            by = sorted({h for c in held for h in (holders or {}).get(c.id, ())})
            raise ModeError(
                f"{where}: {', '.join(c.id for c in held)} hold{'s' if len(held) == 1 else ''} allocations in "
                f"{', '.join(sorted({mode_of(c) + ' (' + c.mode.name.lower() + ')' for c in held}))} mode"
                + (f" ({', '.join(by)})" if by else "")
                + ": a card switches once its holders finish (--without NS/NAME simulates that)"
            )
        if in_flight:
            raise ModeError(
                f"{where}: {', '.join(in_flight)} {'is' if len(in_flight) == 1 else 'are'} starting there (admitted, "
                "Pods not yet allocated), so which cards it takes is not known yet; switch once its Pods run"
            )
        out.append(
            Switch(
                node,
                g.accelerator_key,
                g.manufacturer,
                tuple(c.id for c in picked),
                to,
                capability,
                tuple(c.capability for c in picked),
            )
        )
    return out


def free_card(card: Card, capability: Capability) -> Card:
    """The card, free, in the mode of ``capability`` (every profile at its catalog count when partitioned)."""
    profiles = {p.name: p.count for p in capability.profiles} if capability.profiles else NO_COUNTS
    return Card(card.id, card.index, capability, card.unhealthy, Mode.NONE, 0, M, 0, NO_COUNTS, profiles)


def remode(ledger: NodeDevices, done: Sequence[Switch]) -> NodeDevices:
    """The ledger with the switched cards free in their new mode."""
    by_card = {(s.accelerator_key, c): s.capability for s in done if s.node == ledger.node for c in s.cards}
    if not by_card:
        return ledger
    groups = []
    for g in ledger.groups:
        cards = tuple(
            free_card(c, by_card[(g.accelerator_key, c.id)]) if (g.accelerator_key, c.id) in by_card else c
            for c in g.cards
        )
        groups.append(replace(g, cards=cards) if cards != g.cards else g)
    return replace(ledger, groups=tuple(groups))


def republished(it: InstanceType, labels: Mapping[str, str], done: Sequence[Switch]) -> InstanceType:
    """An InstanceType as its status writer publishes it once these switches land on a node with ``labels``: the
    capability catalog summed over the pool's cards (offered profiles, logical slices) moves by the switched cards'
    capabilities, before and after."""
    mine = [s for s in done if s.accelerator_key == it.accelerator_group]
    if not it.acceleratable or not mine or not in_pool(labels, it.pool_labels()):
        return it
    counts = {p.name: p.count for p in it.offered_profiles}
    memory = {p.name: p.memory_mib for p in it.offered_profiles}
    logical = it.logical_slices
    for s in mine:
        for sign, caps in ((-1, s.was), (1, (s.capability,) * len(s.cards))):
            for cap in caps:
                if not cap.partitioned:
                    logical += sign * cap.logical_slots
                for p in cap.profiles:
                    published = naming.publish_profile(s.manufacturer, p.name)
                    counts[published] = counts.get(published, 0) + sign * p.count
                    memory.setdefault(published, p.memory_mib)
    offered = tuple(OfferedProfile(name, memory[name], count) for name, count in sorted(counts.items()) if count > 0)
    return replace(it, offered_profiles=offered, logical_slices=max(0, logical))
