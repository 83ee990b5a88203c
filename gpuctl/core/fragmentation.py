"""Stranded capacity: free capacity a request of a given shape cannot use, per view, node and pool.

Kueue's ``credits`` see one scalar per pool, so free capacity spread over cards in the wrong way is invisible to it:
eight cards sliced to 50 % hold 400 % of free card memory and not one whole card. For each view and each request
shape (whole cards per Pod, distinct cards of a shared request, a slice's size, a partition profile) this module
splits the free capacity into **usable** (what requests of that shape could take, placed one after another) and
**stranded** (the rest).

Units: EX, SL and PT count free capacity in percent of a card (EX: the free memory of every unpartitioned card not
held whole; PT: the free memory of partitioned cards); SH counts shares.

The **fragmentation score** of a view measures fragmentation against the workloads expected to arrive, not against
the free capacity alone: it is the share of free capacity that those workloads cannot use. The expected workloads are
the pool's pending ones (each shape weighted by how many ask for it) or, with none pending, the view's reference
shapes; the score is ``Σ weight(shape) x stranded(shape) / free``, from 0 (every free unit usable) to 1.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

from gpuctl.core.errors import InputError
from gpuctl.core.fit import podset_demands
from gpuctl.core.ledger import Card, Mode, NodeDevices
from gpuctl.core.naming import Family
from gpuctl.core.units import PERCENT, SHARE, M
from gpuctl.core.workloads import Workload

EX, SH, SL, PT = "accelerator", "acceleratorShared", "acceleratorSliced", "acceleratorPartitioned"
VIEWS = (EX, SH, SL, PT)
UNITS = {EX: "% of a card", SH: "shares", SL: "% of a card", PT: "% of a card"}
REFERENCE_SLICE = 25
"""The slice size (percent) fragmentation is measured against when nothing is pending."""


class ShapeError(InputError, ValueError):
    """A request shape that cannot be read; the message names it and the accepted forms."""


@dataclass(frozen=True, slots=True, order=True)
class Shape:
    """One request shape: ``ex=K`` (K whole cards per Pod), ``sh=N`` (shares on N distinct cards), ``sl=P`` (a P %
    slice), ``pt=PROFILE`` (a partition)."""

    view: str
    size: int = 1
    profile: str = ""

    def __str__(self) -> str:
        key = {EX: "ex", SH: "sh", SL: "sl", PT: "pt"}[self.view]
        return f"{key}={self.profile or self.size}"


def parse_shape(text: str) -> Shape:
    key, sep, value = text.partition("=")
    view = {"ex": EX, "sh": SH, "sl": SL, "pt": PT}.get(key.strip().lower())
    if not sep or view is None or not value.strip():
        raise ShapeError(f"shape {text!r}: use ex=CARDS, sh=CARDS, sl=PERCENT or pt=PROFILE")
    if view == PT:
        return Shape(PT, 1, value.strip())
    try:
        size = int(value)
    except ValueError:
        raise ShapeError(f"shape {text!r}: {value!r} is not a whole number") from None
    if not (1 <= size <= (100 if view == SL else 64)):
        raise ShapeError(f"shape {text!r}: {'a slice is 1 to 100 %' if view == SL else 'give 1 to 64 cards'}")
    return Shape(view, size)


def demand_shapes(workloads: Iterable[Workload]) -> list[Shape]:
    """The shape of each pending Workload's first accelerator demand (one per Workload, in the order given)."""
    out = []
    for w in workloads:
        for ps in w.podsets:
            demands = podset_demands(ps)
            if not demands:
                continue
            d = demands[0]
            if d.family is Family.EXCLUSIVE:
                out.append(Shape(EX, d.cards))
            elif d.family is Family.SHARED:
                out.append(Shape(SH, d.cards))
            elif d.family is Family.SLICED:
                out.append(Shape(SL, max(1, -(-d.units // PERCENT))))
            else:
                out.append(Shape(PT, 1, d.profile))
            break
    return out


def reference_shapes(profiles: Sequence[str]) -> list[Shape]:
    """What each view is measured against when nothing is pending: a whole card, a share, a 25 % slice, and every
    offered profile."""
    return [Shape(EX, 1), Shape(SH, 1), Shape(SL, REFERENCE_SLICE), *(Shape(PT, 1, p) for p in profiles)]


# ----------------------------------------------------------------------------------------------- per card


def _pct(units: int) -> int:
    return max(0, units) * 100 // M


def _whole_free(c: Card) -> bool:
    return not c.partitioned and c.free


def _ex_free(c: Card) -> int:
    """Free memory of an unpartitioned card a whole-card request could want back (not for a card held whole)."""
    if c.partitioned or c.unhealthy or c.mode not in (Mode.NONE, Mode.SHARED, Mode.SLICED):
        return 0
    return _pct(c.remaining)


def _pt_free(c: Card) -> int:
    if not c.partitioned or c.unhealthy or c.mode not in (Mode.NONE, Mode.PARTITIONED):
        return 0
    return _pct(c.remaining)


def most_spread_requests(shares: Sequence[int], distinct: int) -> int:
    """How many requests, each for one share on ``distinct`` different cards, the cards' free shares can serve.

    k requests fit exactly when ``Σ min(shares_i, k) >= distinct x k``: no card can give one request two shares,
    and any such spread can be laid out card by card in rounds. The largest such k is found by bisection (the
    condition only gets harder as k grows).
    """
    if distinct <= 0 or len(shares) < distinct:
        return 0
    low, high = 0, sum(shares) // distinct
    while low < high:
        k = (low + high + 1) // 2
        if sum(min(s, k) for s in shares) >= distinct * k:
            low = k
        else:
            high = k - 1
    return low


@dataclass(frozen=True, slots=True)
class ShapeFit:
    shape: Shape
    free: int
    usable: int
    requests: int
    """How many requests of the shape fit, one after another."""

    @property
    def stranded(self) -> int:
        return max(0, self.free - self.usable)


@dataclass(frozen=True, slots=True)
class _Facts:
    """What the unpartitioned views read of one card, read once for every shape."""

    ex_free: int
    whole_free: bool
    free_shares: int
    sliceable: bool
    slice_free: int
    free_slots: int


_FREE_FACTS: dict[int, _Facts] = {}


def _facts(c: Card) -> _Facts:
    capability = c.capability
    if (
        c.mode is Mode.NONE
        and c.remaining >= M
        and not c.unhealthy
        and capability.partition_ceiling == 0
        and c.allocated_slices == 0
    ):  # the common case, one shared record per slot count: a card nobody holds
        slots = capability.logical_slots
        facts = _FREE_FACTS.get(slots)
        if facts is None:
            facts = _FREE_FACTS[slots] = _Facts(100, True, M // SHARE, slots > 0, 100 if slots > 0 else 0, slots)
        return facts
    return _Facts(_ex_free(c), _whole_free(c), c.free_shares, c.sliceable, c.free_slice_percent, c.free_slots)


def shape_fit(cards_by_node: Mapping[str, Sequence[Card]], shape: Shape, card_mib: int | None = None) -> ShapeFit:
    """Free capacity of a view against one shape, over nodes' cards (one accelerator model)."""
    facts = {n: [_facts(c) for c in cards] for n, cards in cards_by_node.items()} if shape.view != PT else {}
    return _fit(cards_by_node, facts, shape, card_mib)


def _fit(
    cards_by_node: Mapping[str, Sequence[Card]],
    facts_by_node: Mapping[str, Sequence[_Facts]],
    shape: Shape,
    card_mib: int | None,
) -> ShapeFit:
    free, usable, requests = _raw_fit(cards_by_node.values(), facts_by_node.values(), shape, card_mib)
    return ShapeFit(shape, free, min(usable, free), requests)


def _raw_fit(
    cards_by_node: Iterable[Sequence[Card]],
    facts_by_node: Iterable[Sequence[_Facts]],
    shape: Shape,
    card_mib: int | None,
) -> tuple[int, int, int]:
    """Free capacity, what requests of the shape could use of it (before it is capped at the free), and how many
    such requests fit: sums over nodes, so a pool's are the sums of its nodes'."""
    free = usable = requests = 0
    if shape.view == PT:
        for cards in cards_by_node:
            for c in cards:
                free += _pt_free(c)
                p = c.profile(shape.profile)
                n = c.profile_remaining(shape.profile)
                if p is None or n == 0:
                    continue
                share = Fraction(p.memory_mib, card_mib) if card_mib else Fraction(p.memory_slices or 1, 8)
                requests += n
                usable += int(min(Fraction(_pt_free(c)), n * share * 100))
        return free, usable, requests
    size = shape.size
    for facts in facts_by_node:
        if shape.view == EX:
            free += sum(f.ex_free for f in facts)
            n = sum(1 for f in facts if f.whole_free) // size
            requests += n
            usable += n * size * 100
        elif shape.view == SH:
            shares = [f.free_shares for f in facts if f.free_shares > 0]
            free += sum(shares)
            n = most_spread_requests(shares, size)
            requests += n
            usable += n * size
        else:
            for f in facts:
                if f.sliceable:
                    free += f.slice_free
                    n = min(f.slice_free // size, f.free_slots)
                    requests += n
                    usable += n * size
    return free, usable, requests


# ----------------------------------------------------------------------------------------------- a pool


@dataclass(frozen=True, slots=True)
class ViewFragmentation:
    view: str
    free: int
    fits: tuple[ShapeFit, ...]
    score: float
    """Σ weight x stranded / free over the shapes (0 when nothing is free)."""

    @property
    def unit(self) -> str:
        return UNITS[self.view]


def _probe(view: str) -> Shape:
    return Shape(view, 1, "") if view != SL else Shape(SL, REFERENCE_SLICE)


def cards_of(devices: Iterable[NodeDevices], accelerator_key: str) -> dict[str, tuple[Card, ...]]:
    """Each node's cards of one accelerator model."""
    out = {}
    for d in devices:
        g = d.group(accelerator_key)
        if g is not None:
            out[d.node] = g.cards
    return out


def pool_fragmentation(
    devices: Iterable[NodeDevices],
    accelerator_key: str,
    shapes: Sequence[Shape],
    card_mib: int | None = None,
) -> tuple[ViewFragmentation, ...]:
    """The views of a pool (one accelerator model) that have cards, against the shapes, each weighted by how often it
    occurs."""
    book = FragmentationBook(accelerator_key, shapes, card_mib)
    for node, cards in cards_of(devices, accelerator_key).items():
        book.set_node(node, cards)
    return book.views(shapes)


class FragmentationBook:
    """A pool's fragmentation kept node by node: each node's free capacity and fits against the pool's shapes, and
    their sums, replaced when the node's cards change, so a pool is measured again at the cost of what changed.
    Made again when the set of shapes changes (their weights are applied when the views are read)."""

    def __init__(self, accelerator_key: str, shapes: Iterable[Shape], card_mib: int | None) -> None:
        self.key = self.reads(accelerator_key, shapes, card_mib)
        distinct = self.key[1]
        self._card_mib = card_mib
        self._measured = [(v, [s for s in distinct if s.view == v] or [_probe(v)]) for v in VIEWS]
        self._nodes: dict[str, tuple[tuple[int, int, int], list[tuple[int, int, int]]]] = {}
        """Per node: how many of its cards are whole, sliceable and partitioned, and its fit of each measured
        shape, view by view."""
        self._populated = [0, 0, 0]
        self._totals: list[list[int]] = [[0, 0, 0] for _, measured in self._measured for _ in measured]

    @staticmethod
    def reads(
        accelerator_key: str, shapes: Iterable[Shape], card_mib: int | None
    ) -> tuple[str, tuple[Shape, ...], int | None]:
        """The key a book made from these has."""
        return accelerator_key, tuple(sorted(set(shapes))), card_mib

    def set_node(self, node: str, cards: Sequence[Card] | None) -> None:
        """Replace a node's cards of the pool's model (None or empty: it has none in the pool)."""
        old = self._nodes.pop(node, None)
        if old is not None:
            self._add(old, -1)
        if cards:
            facts = [[_facts(c) for c in cards]]
            counts = (
                sum(1 for c in cards if not c.partitioned),
                sum(1 for c in cards if c.sliceable),
                sum(1 for c in cards if c.partitioned),
            )
            fits = [
                _raw_fit((cards,), facts if view != PT else (), s, self._card_mib)
                for view, measured in self._measured
                for s in measured
            ]
            new = (counts, fits)
            self._nodes[node] = new
            self._add(new, 1)

    def _add(self, contribution: tuple[tuple[int, int, int], list[tuple[int, int, int]]], sign: int) -> None:
        counts, fits = contribution
        for i, n in enumerate(counts):
            self._populated[i] += sign * n
        for total, fit in zip(self._totals, fits, strict=True):
            for i, n in enumerate(fit):
                total[i] += sign * n

    def views(self, shapes: Sequence[Shape]) -> tuple[ViewFragmentation, ...]:
        """The views that have cards, against ``shapes`` (the book's, each weighted by how often it occurs)."""
        weighted: dict[Shape, int] = {}
        for s in shapes:
            weighted[s] = weighted.get(s, 0) + 1
        whole, sliceable, partitioned = self._populated
        populated = {EX: whole > 0, SH: whole > 0, SL: sliceable > 0, PT: partitioned > 0}
        out = []
        i = 0
        for view, measured in self._measured:
            totals = self._totals[i : i + len(measured)]
            i += len(measured)
            if not populated[view]:
                continue
            fits = tuple(
                ShapeFit(s, free, min(usable, free), requests)
                for s, (free, usable, requests) in zip(measured, totals, strict=True)
                if s in weighted
            )
            free = totals[0][0]
            total = sum(weighted[f.shape] for f in fits)
            score = (
                sum(weighted[f.shape] * f.stranded for f in fits) / (total * free)
                if fits and free > 0 and total > 0
                else 0.0
            )
            out.append(ViewFragmentation(view, free, fits, round(score, 4)))
        return tuple(out)
