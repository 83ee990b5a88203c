"""Gate 5, the device-plugin allocator: would ``Allocate`` accept this container on this card?

For exclusive, shared and sliced requests the kubelet chose the card by choosing the token, so ``Allocate`` can only
refuse: a card another mode holds, a slice without a free slot or the units it needs, two share tokens on one card.
Partition tokens are fungible, so the allocator picks the card itself: the most occupied card that still fits.
A refused Pod fails with ``UnexpectedAdmissionError``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from gpuctl.core import partition_geometry
from gpuctl.core.ledger import Card, Mode, NodeDevices
from gpuctl.core.naming import Family
from gpuctl.core.units import SHARE, M

if TYPE_CHECKING:
    from gpuctl.core.fit import Charge

FAMILY_MODE = {
    Family.EXCLUSIVE: Mode.EXCLUSIVE,
    Family.SHARED: Mode.SHARED,
    Family.SLICED: Mode.SLICED,
    Family.PARTITIONED: Mode.PARTITIONED,
}


@dataclass(frozen=True, slots=True)
class Refusal:
    card_id: str
    reason: str

    @property
    def message(self) -> str:
        return f"Allocate refuses card {self.card_id}: {self.reason}"


def check_allocate(card: Card, family: Family, *, units: int = 0, tokens_on_card: int = 1) -> Refusal | None:
    """Would Allocate grant ``family`` on ``card``? None when it would; the refusal otherwise.

    ``units`` is a slice's ``.sliced.units``; ``tokens_on_card`` the share tokens one grant puts on this card.
    """
    mode = FAMILY_MODE[family]
    if card.unhealthy:
        return Refusal(card.id, "the card is unhealthy")
    if family is not Family.PARTITIONED and card.partitioned:
        return Refusal(card.id, "the card is partitioned; only partition requests are served by it")
    if card.mode not in (Mode.NONE, mode):
        return Refusal(card.id, f"the card is held in {card.mode.name.lower()} mode")
    if family is Family.EXCLUSIVE and (card.mode is not Mode.NONE or card.remaining < M):
        return Refusal(card.id, "the card is not entirely free")
    if family is Family.SHARED:
        if tokens_on_card > 1:
            return Refusal(
                card.id,
                f"a shared grant puts {tokens_on_card} share tokens on one card; a shared request of N names N distinct cards",
            )
        if card.remaining < SHARE:
            return Refusal(card.id, "no share of the card is left")
    if family is Family.SLICED:
        if card.allocated_slices >= card.logical_slots:
            return Refusal(card.id, f"no free slice slot ({card.allocated_slices} of {card.logical_slots} used)")
        if card.remaining < units:
            return Refusal(card.id, f"the slice needs {units} units and the card has {card.remaining} left")
    return None


def pick_partition_card(cards: Sequence[Card], profile: str) -> Card | None:
    """The card Allocate materialises a partition on: the most occupied card that still fits, ties by index."""
    fits = [
        c
        for c in cards
        if c.partitioned and check_allocate(c, Family.PARTITIONED) is None and c.profile_remaining(profile) > 0
    ]
    if not fits:
        return None
    return min(fits, key=lambda c: (c.profile_remaining(profile), c.index))


def preferred_slice_card(cards: Sequence[Card], units: int) -> Card | None:
    """The allocator's hint for a slice: the most occupied card that still fits it, ties by index."""
    fits = [c for c in cards if c.sliceable and check_allocate(c, Family.SLICED, units=units) is None]
    if not fits:
        return None
    return min(fits, key=lambda c: (c.remaining, c.index))


@dataclass(frozen=True, slots=True)
class Grant:
    """One card Allocate gives a Pod's demand."""

    card_id: str
    family: Family
    units: int
    profile: str = ""


def _granted(card: Card, family: Family, units: int, profile: str) -> Card:
    """The card after one grant (a working copy for the next grant of the same Pod)."""
    if family is Family.EXCLUSIVE:
        return card._replace(mode=Mode.EXCLUSIVE, allocated=M, remaining=0)
    if family is Family.SHARED:
        return card._replace(mode=Mode.SHARED, allocated=card.allocated + SHARE, remaining=card.remaining - SHARE)
    if family is Family.SLICED:
        return card._replace(
            mode=Mode.SLICED,
            allocated=card.allocated + units,
            remaining=card.remaining - units,
            allocated_slices=card.allocated_slices + 1,
        )
    p = card.profile(profile)
    left = dict(card.remaining_profiles)
    held = dict(card.allocated_profiles)
    if p is not None:
        left[p.name] = max(0, left.get(p.name, 0) - 1)
        if partition_geometry.known_geometry(card.profiles):
            # The new instance takes one legal placement, and the other profiles lose what it overlaps.
            after = partition_geometry.remaining_after(
                card.profiles,
                partition_geometry.counts(held),
                partition_geometry.counts(card.remaining_profiles) if card.has_ledger else (),
                ((p.name, 1),),
            )
            left = dict(after) if after is not None else {name: 0 for name in left}
        held[p.name] = held.get(p.name, 0) + 1
    return card._replace(
        mode=Mode.PARTITIONED,
        allocated=card.allocated + units,
        remaining=card.remaining - units,
        remaining_profiles=left,
        allocated_profiles=held,
    )


def allocate(
    cards: Sequence[Card], family: Family, *, count: int = 1, units: int = 0, profile: str = ""
) -> tuple[list[Grant], list[Card]] | Refusal:
    """The cards Allocate (with the kubelet following its preferred-allocation hint) gives one container's request,
    and the node's cards after it; or the refusal the Pod fails with.

    Whole cards: the free ones by index. Shares: ``count`` distinct cards with a share left, fullest first. A slice:
    the fullest card that still fits it. A partition: the allocator's own pick, the most occupied card with a free
    placement of the profile.
    """
    working = list(cards)
    at = {c.id: i for i, c in enumerate(working)}
    if family is Family.PARTITIONED:
        chosen = pick_partition_card(working, profile)
        if chosen is None:
            return Refusal(
                "-", f'no card of the node has a free "{profile}" placement' if profile else "no partitioned card"
            )
        picks = [chosen]
    elif family is Family.SLICED:
        chosen = preferred_slice_card(working, units)
        if chosen is None:
            refusals = [r for c in working if c.sliceable for r in [check_allocate(c, family, units=units)] if r]
            return refusals[0] if refusals else Refusal("-", "no logically sliceable card")
        picks = [chosen]
    else:
        candidates = [c for c in working if check_allocate(c, family) is None]
        order = (lambda c: c.index) if family is Family.EXCLUSIVE else (lambda c: (c.remaining, c.index))
        picks = sorted(candidates, key=order)[:count]
        if len(picks) < count:
            refused = [r for c in working if not c.partitioned for r in [check_allocate(c, family)] if r]
            reason = (
                refused[0].reason
                if refused
                else f"the node has {len(candidates)} card(s) that can take it, {count} asked"
            )
            return Refusal(refused[0].card_id if refused else "-", reason)
    grants = []
    for c in picks:
        grant_units = M if family is Family.EXCLUSIVE else SHARE if family is Family.SHARED else units
        grants.append(Grant(c.id, family, grant_units, profile))
        working[at[c.id]] = _granted(working[at[c.id]], family, grant_units, profile)
    return grants, working


def with_charges(devices: Mapping[str, NodeDevices], charges: Iterable[Charge]) -> dict[str, NodeDevices]:
    """The ledgers with each charge granted on its card, as ``Allocate`` will once the Pods behind it run (the cards
    promised to Workloads still starting, held in every what-if)."""
    by_node: dict[str, list[Charge]] = {}
    for c in charges:
        by_node.setdefault(c.node, []).append(c)
    out = dict(devices)
    for node, mine in by_node.items():
        d = out.get(node)
        if d is None:
            continue
        groups = []
        for g in d.groups:
            cards = list(g.cards)
            for c in mine:
                for i, card in enumerate(cards):
                    if card.id == c.card_id:
                        cards[i] = _granted(card, c.family, c.units, c.profile)
            groups.append(replace(g, cards=tuple(cards)))
        out[node] = replace(d, groups=tuple(groups))
    return out
