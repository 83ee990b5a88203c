"""Partition geometry on the H100 table: what still fits once instances take legal placements, the worst of them
where the placement is not known."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gpuctl.core.modes import profile_table
from gpuctl.core.partition_geometry import counts, remaining_after

H100 = profile_table("nvidia-h100-80gb-hbm3")
assert H100 is not None
PROFILES = H100.profiles
EMPTY = counts({p.name: p.count for p in PROFILES})


def after(held: dict[str, int], added: dict[str, int], reported: tuple[tuple[str, int], ...] = ()) -> dict[str, int]:
    got = remaining_after(PROFILES, counts(held), reported, counts(added))
    assert got is not None
    return dict(got)


def test_a_4g_in_flight_leaves_a_3g_its_second_half() -> None:
    # 4g.40gb starts only at slice 0 (0-3); 3g.40gb may start at 0 or 4: one still fits, at 4-7.
    left = after({}, {"4g.40gb": 1}, EMPTY)
    assert left["3g.40gb"] == 1 and left["4g.40gb"] == 0 and left["1g.10gb"] == 3 and left["7g.80gb"] == 0


def test_a_1g_in_flight_anywhere_still_leaves_one_3g_and_the_reverse() -> None:
    # 1g.10gb may take any slice 0-6: wherever it lands, one of the two 3g.40gb halves stays whole.
    assert after({}, {"1g.10gb": 1}, EMPTY)["3g.40gb"] == 1
    # 3g.40gb at 0-3 leaves 1g.10gb 4, 5, 6; at 4-7 it leaves 0-3: the worst is 3.
    assert after({}, {"3g.40gb": 1}, EMPTY)["1g.10gb"] == 3


def test_two_1g_in_flight_can_split_the_halves() -> None:
    # One in each half (e.g. slices 1 and 5) leaves no 3g.40gb: the worst layout is the answer.
    assert after({}, {"1g.10gb": 2}, EMPTY)["3g.40gb"] == 0


def test_the_ledgers_counts_pin_down_where_held_instances_are() -> None:
    # A held 1g.10gb: the ledger says a 3g.40gb still fits and 2 x 2g.20gb; with a 1g.10gb added, where can it go?
    held = {"1g.10gb": 1}
    reported = counts({"1g.10gb": 6, "1g.20gb": 3, "2g.20gb": 2, "3g.40gb": 1, "4g.40gb": 0, "7g.80gb": 0})
    free = after(held, {}, reported)
    assert free["3g.40gb"] == 1 and free["1g.10gb"] == 6
    assert remaining_after(PROFILES, counts({"7g.80gb": 1}), (), counts({"1g.10gb": 1})) is None


@given(st.dictionaries(st.sampled_from([p.name for p in PROFILES]), st.integers(1, 3), max_size=3))
def test_what_is_left_never_exceeds_an_empty_cards_room_and_never_grows(added: dict[str, int]) -> None:
    got = remaining_after(PROFILES, (), EMPTY, counts(added))
    if got is None:
        return
    for name, n in got:
        assert 0 <= n <= dict(EMPTY)[name]
    # Adding one more instance of any profile never leaves more room for anything.
    for extra in PROFILES:
        more = dict(added)
        more[extra.name] = more.get(extra.name, 0) + 1
        bigger = remaining_after(PROFILES, (), EMPTY, counts(more))
        if bigger is not None:
            assert all(n <= dict(got)[name] for name, n in bigger)
