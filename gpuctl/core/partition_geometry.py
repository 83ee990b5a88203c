"""Partition geometry: how many instances of each profile still fit on a card once more instances are placed on it.

A card's memory slices are taken by placements (``start``, ``length``) from each profile's legal set; an instance fits
when its placement overlaps nothing taken. The ledger reports, per profile, how many instances still fit around what
the card holds, but not where those are placed; an instance promised and not yet allocated has no placement yet.
:func:`remaining_after` therefore considers every layout the held instances can have that yields the ledger's counts,
every legal placement of the added ones on top, and answers per profile the least that any of them leaves — never
room that one of the allocator's legal choices would not leave."""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping, Sequence

from gpuctl.core.ledger import Profile

Counts = tuple[tuple[str, int], ...]
"""Instances per profile (manufacturer's spelling), sorted by name: hashable, so results are cached."""

MAX_INSTANCES = 16
"""More instances than any card hosts: layouts are not enumerated beyond this (the counts are then taken as given)."""


def counts(mapping: Mapping[str, int]) -> Counts:
    return tuple(sorted((k, v) for k, v in mapping.items() if v > 0))


def known_geometry(profiles: Sequence[Profile]) -> bool:
    """Every profile states its legal placements (a card whose table does not cannot be laid out)."""
    return bool(profiles) and all(p.placements for p in profiles)


@functools.lru_cache(maxsize=4096)
def remaining_after(profiles: tuple[Profile, ...], held: Counts, reported: Counts, added: Counts) -> Counts | None:
    """Instances of each profile that still fit once ``added`` are placed on a card holding ``held``, whose ledger
    reports ``reported`` free (profiles it does not report are not held to it); None when ``added`` cannot all be
    placed in any layout the card can have. The card's profiles must have known placements."""
    by_name = {p.name: p for p in profiles}
    if any(name not in by_name for name, _ in (*held, *added)):
        return None
    if sum(n for _, n in held) + sum(n for _, n in added) > MAX_INSTANCES:
        return None
    report = dict(reported)
    layouts = [
        taken
        for taken in _layouts(by_name, _expanded(held), 0)
        if all(_packable(p, taken) == report[p.name] for p in profiles if p.name in report)
    ]
    if not layouts:  # the ledger's counts match no layout this table allows: trust neither, assume the worst
        layouts = list(_layouts(by_name, _expanded(held), 0))
    least: dict[str, int] | None = None
    for base in layouts:
        for taken in _layouts(by_name, _expanded(added), base):
            here = {p.name: _packable(p, taken) for p in profiles}
            least = here if least is None else {k: min(v, here[k]) for k, v in least.items()}
    if least is None:
        return None
    return tuple(sorted(least.items()))


def _expanded(c: Counts) -> tuple[str, ...]:
    return tuple(name for name, n in c for _ in range(n))


def _layouts(by_name: Mapping[str, Profile], instances: tuple[str, ...], taken: int) -> Iterator[int]:
    """Every set of memory slices (a bit mask) the instances can occupy on top of ``taken``, each set once."""
    seen: set[int] = set()

    def place(i: int, mask: int, floor: int) -> Iterator[int]:
        if i == len(instances):
            if mask not in seen:
                seen.add(mask)
                yield mask
            return
        same = i > 0 and instances[i] == instances[i - 1]
        for pl in by_name[instances[i]].placements:
            if same and pl.start < floor:
                continue  # identical instances in increasing order: each layout once
            bits = ((1 << pl.length) - 1) << pl.start
            if not mask & bits:
                yield from place(i + 1, mask | bits, pl.start)

    return place(0, taken, 0)


def _packable(profile: Profile, taken: int) -> int:
    """The most instances of ``profile`` that fit around ``taken``: its placements are of one length, so taking
    the free ones from the lowest start up is as many as any choice."""
    n = 0
    for pl in sorted(profile.placements, key=lambda p: p.start):
        bits = ((1 << pl.length) - 1) << pl.start
        if not taken & bits:
            taken |= bits
            n += 1
    return min(n, profile.count)
