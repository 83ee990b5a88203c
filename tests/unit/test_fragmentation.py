"""Stranded capacity on worked examples, the shapes, the score, and the defragmentation hints."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuctl.core import naming
from gpuctl.core.fragmentation import (
    EX,
    PT,
    SH,
    SL,
    Shape,
    ShapeError,
    demand_shapes,
    parse_shape,
    pool_fragmentation,
    shape_fit,
)
from gpuctl.core.ledger import parse_devices
from gpuctl.core.simulate import Simulator
from gpuctl.core.suggest import defrag_hints
from gpuctl.core.units import SHARE, M
from gpuctl.core.workloads import parse_workload
from testbed.factories import H100_PROFILES, bound_pod, card_row, devices, h100_devices, workload
from tests.unit.test_simulate import admitted_workload, pool, state_of

KEY = "nvidia-a10g"


def a10g(rows: list[dict[str, object]], node: str = "n1") -> object:
    return parse_devices(devices(node, cards=len(rows), rows=rows))


def views(d: object, *shapes: Shape) -> dict[str, object]:
    return {v.view: v for v in pool_fragmentation([d], KEY, list(shapes))}  # type: ignore[list-item]


def test_eight_cards_sliced_to_half_hold_400_percent_free_and_no_whole_card() -> None:
    d = a10g([card_row(i, mode=3, allocated=M // 2, slices=1) for i in range(8)])
    got = views(d, Shape(EX, 1), Shape(SL, 50), Shape(SL, 60))
    ex, sl = got[EX], got[SL]
    assert (ex.free, ex.fits[0].usable, ex.fits[0].stranded, ex.fits[0].requests) == (400, 0, 400, 0)
    assert ex.score == 1.0
    by_shape = {str(f.shape): f for f in sl.fits}
    assert (by_shape["sl=50"].usable, by_shape["sl=50"].requests) == (400, 8)  # every half fits a 50 % slice
    assert (by_shape["sl=60"].usable, by_shape["sl=60"].stranded) == (0, 400)  # and none a 60 % one
    assert sl.score == 0.5  # the two shapes weigh the same: (0 + 400) / (2 x 400)


def test_shares_spread_over_too_few_cards_are_stranded_for_a_wide_request() -> None:
    # Two cards with shares left (9 and 1), two held whole: a request for shares on 3 distinct cards fits nowhere.
    d = a10g(
        [
            card_row(0, mode=2, allocated=SHARE),
            card_row(1, mode=2, allocated=9 * SHARE),
            card_row(2, mode=1, allocated=M),
            card_row(3, mode=1, allocated=M),
        ]
    )
    fit3 = shape_fit({"n1": d.groups[0].cards}, Shape(SH, 3))  # type: ignore[attr-defined]
    fit2 = shape_fit({"n1": d.groups[0].cards}, Shape(SH, 2))  # type: ignore[attr-defined]
    assert (fit3.free, fit3.usable, fit3.stranded) == (10, 0, 10)
    assert (fit2.requests, fit2.usable, fit2.stranded) == (1, 2, 8)  # one pair of cards, then one card is left


def test_a_hygon_card_without_a_free_slot_strands_its_memory() -> None:
    d = parse_devices(
        devices(
            "h1",
            manufacturer="hygon",
            group_id="bw",
            cards=1,
            logical_slots=4,
            rows=[card_row(0, mode=3, allocated=4 * 16000 * 10, slices=4)],
        )
    )
    [sl] = [v for v in pool_fragmentation([d], "hygon-bw", [Shape(SL, 10)]) if v.view == SL]
    assert (sl.free, sl.fits[0].usable) == (0, 0)  # no free slot: its free memory is not a free slice at all


def test_partition_memory_no_free_placement_fits_is_stranded() -> None:
    # One H100 card with one 4g.40gb carved at the start: a 7g.80gb fits nowhere, a 3g.40gb still fits once.
    left = {"1g.10gb": 3, "1g.20gb": 2, "2g.20gb": 1, "3g.40gb": 1, "4g.40gb": 0, "7g.80gb": 0}
    units = 40192 * M // 81920
    d = parse_devices(
        h100_devices(
            "g1",
            cards=1,
            rows=[card_row(0, mode=4, allocated=units, allocated_profiles={"4g.40gb": 1}, remaining_profiles=left)],
        )
    )
    seven = shape_fit({"g1": d.groups[0].cards}, Shape(PT, 1, "7g.80gb"), 81920)
    assert seven.requests == 0 and seven.stranded == seven.free == 50  # 49.06 % carved, 50 % (floored) free
    three = shape_fit({"g1": d.groups[0].cards}, Shape(PT, 1, "3g.40gb"), 81920)
    assert three.requests == 1 and three.usable == 49 and three.stranded == 1  # a 3g.40gb is 49.06 % of the card


def test_shapes_parse_and_pending_workloads_give_theirs() -> None:
    assert parse_shape("ex=2") == Shape(EX, 2) and parse_shape("sl=60") == Shape(SL, 60)
    assert parse_shape("pt=3g.40gb") == Shape(PT, 1, "3g.40gb") and str(Shape(SH, 3)) == "sh=3"
    for bad in ("ex", "ex=0", "sl=101", "zz=1", "ex=two"):
        with pytest.raises(ShapeError):
            parse_shape(bad)
    w = parse_workload(
        workload("w", [("main", 1, {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.units": str(60 * 16000)})])
    )
    assert demand_shapes([w]) == [Shape(SL, 60)]
    assert sorted(H100_PROFILES)  # the profiles the partition shapes name


@given(
    st.lists(st.tuples(st.sampled_from((0, 1, 2, 3)), st.integers(0, 100), st.integers(0, 4)), min_size=1, max_size=8),
    st.sampled_from([Shape(EX, 1), Shape(EX, 2), Shape(SH, 1), Shape(SH, 3), Shape(SL, 10), Shape(SL, 60)]),
)
def test_usable_and_stranded_split_the_free_capacity(rows: list[tuple[int, int, int]], shape: Shape) -> None:
    built = []
    for i, (mode, pct, slices) in enumerate(rows):
        allocated = {0: 0, 1: M, 2: min(10, max(1, pct // 10)) * SHARE, 3: pct * 16000}[mode]
        built.append(card_row(i, mode=mode, allocated=allocated, slices=slices if mode == 3 else 0))
    d = a10g(built)
    fit = shape_fit({"n1": d.groups[0].cards}, shape)  # type: ignore[attr-defined]
    assert 0 <= fit.usable <= fit.free and fit.usable + fit.stranded == fit.free
    assert fit.usable == fit.requests * shape.size * (100 if shape.view == EX else 1)


def held_by(name: str, cards: list[int]) -> dict[str, object]:
    """A Pod of Workload ``name`` on n1 holding whole cards by its allocation record."""
    p = bound_pod(f"{name}-0", "n1", {"nvidia.com/gpu": str(len(cards))}, workload_name=name)
    accelerators = [{"id": f"GPU-{i:04d}", "mode": 1, "allocated": M} for i in cards]
    record = {"main": {"devices": {"groups": [{"id": "a10g", "manufacturer": "nvidia", "accelerators": accelerators}]}}}
    p["metadata"]["annotations"][naming.ANNOTATION_ALLOCATED] = json.dumps(record)
    return p


def test_a_defragmentation_hint_names_the_fewest_workloads_and_is_proven() -> None:
    # n1's four cards: two held by "low" (priority 1), two by "high" (priority 9); nothing is free.
    extra = [
        admitted_workload("low", 2, 1),
        admitted_workload("high", 2, 9),
        held_by("low", [0, 1]),
        held_by("high", [2, 3]),
    ]
    sim = Simulator(state_of(pool({"n1": 4}, nominal_cards=8, extra=extra)))
    cq = "gpustack--nvidia-a10g-linux-amd64"
    [three], no_tries = defrag_hints(sim, cq, ["n1"], KEY, 3)
    assert no_tries == []
    assert (three.node, three.cards, three.admitted) == ("n1", 3, True)
    assert sorted(three.workloads) == ["team-a/high", "team-a/low"]  # both must go for three whole cards
    [one], _ = defrag_hints(sim, cq, ["n1"], KEY, 1)
    assert one.workloads == ("team-a/low",) and one.admitted  # the lowest priority alone frees two


def _greedy(shares: list[int], distinct: int) -> int:
    """One request at a time, from the cards with the most shares left (optimal for this problem)."""
    left = sorted((s for s in shares if s > 0), reverse=True)
    n = 0
    while len(left) >= distinct:
        left = sorted([s - 1 for s in left[:distinct]] + left[distinct:], reverse=True)
        left = [s for s in left if s > 0]
        n += 1
    return n


@given(st.lists(st.integers(0, 10), max_size=8), st.integers(1, 5))
def test_the_spread_formula_equals_taking_one_request_at_a_time(shares: list[int], distinct: int) -> None:
    from gpuctl.core.fragmentation import most_spread_requests

    assert most_spread_requests([s for s in shares if s > 0], distinct) == _greedy(shares, distinct)
