"""Invariants over generated ledgers and Pods (hypothesis)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuctl.core import naming
from gpuctl.core.admission import apply_patch, json_patch
from gpuctl.core.instancetypes import parse_instancetype
from gpuctl.core.ledger import parse_devices
from gpuctl.core.requests import admit_pod, partitioned_units, sliced_units
from gpuctl.core.units import SHARE, M
from gpuctl.core.views import accelerator_views
from testbed.factories import H100_PROFILES, card_row, devices, h100_devices, instancetype, physical_profiles

A10G = "nvidia-a10g"
H100 = "nvidia-h100-80gb-hbm3"
PROFILE_NAMES = list(H100_PROFILES)


@st.composite
def unpartitioned_row(draw: st.DrawFn, index: int) -> dict[str, Any]:
    mode = draw(st.sampled_from([0, 1, 2, 3]))
    if mode == 0:
        return card_row(index)
    if mode == 1:
        return card_row(index, mode=1, allocated=M)
    if mode == 2:
        shares = draw(st.integers(1, 10))
        return card_row(index, mode=2, allocated=shares * SHARE)
    units = draw(st.integers(1, M))
    return card_row(index, mode=3, allocated=units, slices=draw(st.integers(1, 128)))


@st.composite
def partitioned_row(draw: st.DrawFn, index: int) -> dict[str, Any]:
    if draw(st.booleans()):
        return card_row(index)
    remaining = {n: draw(st.integers(0, H100_PROFILES[n][0])) for n in PROFILE_NAMES}  # as the device manager counts
    allocated = {n: draw(st.integers(0, 3)) for n in PROFILE_NAMES}
    return card_row(
        index, mode=4, allocated=draw(st.integers(1, M)), allocated_profiles=allocated, remaining_profiles=remaining
    )


@st.composite
def pool(draw: st.DrawFn) -> list[dict[str, Any]]:
    nodes = []
    for n in range(draw(st.integers(0, 4))):
        if draw(st.booleans()):
            cards = draw(st.integers(1, 8))
            rows = [draw(unpartitioned_row(i)) for i in range(cards) if draw(st.booleans())]  # absent rows: free cards
            nodes.append(devices(f"n{n}", cards=cards, rows=rows))
        else:
            cards = draw(st.integers(1, 8))
            nodes.append(h100_devices(f"n{n}", cards=cards, rows=[draw(partitioned_row(i)) for i in range(cards)]))
    return nodes


@settings(max_examples=150, deadline=None)
@given(pool())
def test_no_view_exceeds_capacity_and_once_max_never_exceeds_remaining(raw: list[dict[str, Any]]) -> None:
    parsed = [parse_devices(d) for d in raw]
    for key in (A10G, H100):
        ex, sh, sl, pt = accelerator_views(parsed, key)
        for view in (ex, sh, sl, pt):
            assert 0 <= view.remaining <= view.capacity
        for view in (ex, sh, sl):
            assert view.once_max_request <= view.remaining
        assert pt.once_max_request == (1 if pt.remaining else 0)
        assert all(p.count >= 0 for p in pt.remaining_profiles)
        assert all(p.count > 0 for p in pt.allocated_profiles)


@given(st.integers(1, 100), st.integers(1, 100))
def test_percentage_fold_is_monotone(a: int, b: int) -> None:
    lo, hi = sorted((a, b))
    assert sliced_units(lo, None, None) <= sliced_units(hi, None, None) <= M


@given(st.integers(1, 81920), st.integers(1, 81920), st.sampled_from([24576, 32768, 81920]))
def test_mib_fold_is_monotone(a: int, b: int, card: int) -> None:
    lo, hi = sorted((min(a, card), min(b, card)))
    assert sliced_units(None, lo, card) <= sliced_units(None, hi, card) <= M


@given(st.integers(1, 81920), st.integers(1, 81920))
def test_partition_fold_is_monotone_and_matches_a_slice(a: int, b: int) -> None:
    lo, hi = sorted((a, b))
    assert partitioned_units(lo, 81920) <= partitioned_units(hi, 81920)
    assert partitioned_units(lo, 81920) == sliced_units(None, lo, 81920)


TYPES = [
    parse_instancetype(instancetype()),
    parse_instancetype(
        instancetype(
            group_id="h100-80gb-hbm3", memory="80Gi", logical_count=0, profiles=physical_profiles(H100_PROFILES)
        )
    ),
]
QUEUES = [naming.queue_entrance(t.name) for t in TYPES]


@st.composite
def valid_pod(draw: st.DrawFn) -> dict[str, Any]:
    family = draw(st.sampled_from(["exclusive", "shared", "sliced", "partitioned"]))
    queue = QUEUES[1] if family == "partitioned" else QUEUES[0]
    if family == "exclusive":
        limits: dict[str, str] = {"nvidia.com/gpu": str(draw(st.integers(1, 8)))}
    elif family == "shared":
        limits = {"nvidia.com/gpu.shared": str(draw(st.integers(1, 8)))}
    elif family == "sliced":
        limits = {"nvidia.com/gpu.sliced": "1"}
        if draw(st.booleans()):
            limits["nvidia.com/gpu.sliced.memory-percentage"] = str(draw(st.integers(1, 100)))
        else:
            limits["nvidia.com/gpu.sliced.memory-mib"] = str(draw(st.integers(1, 24576)))
        if draw(st.booleans()):
            limits["nvidia.com/gpu.sliced.cores-percentage"] = str(draw(st.integers(1, 100)))
    else:
        limits = {
            "nvidia.com/gpu.partitioned": "1",
            f"nvidia.com/gpu.partitioned.mig-{draw(st.sampled_from(PROFILE_NAMES))}": "1",
        }
    resources: dict[str, Any] = {"limits": {"cpu": "1", **limits}}
    if draw(st.booleans()):
        resources["requests"] = dict(resources["limits"])
    containers = [{"name": "main", "image": "x", "resources": resources}]
    if draw(st.booleans()):
        containers.append({"name": "helper", "image": "y"})
    spec: dict[str, Any] = {"containers": containers}
    if draw(st.booleans()):
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]
                }
            }
        }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "labels": {naming.LABEL_QUEUE_NAME: queue}},
        "spec": spec,
    }


@settings(max_examples=200, deadline=None)
@given(valid_pod())
def test_valid_pods_are_admitted_and_round_trip_through_the_patch(p: dict[str, Any]) -> None:
    result = admit_pod(p, TYPES)
    assert result.allowed, result.message
    assert result.mutated is not None
    assert apply_patch(p, json_patch(p, result.mutated)) == result.mutated
    again = admit_pod(result.mutated, TYPES)
    assert again.mutated == result.mutated  # idempotent: admitting the mutated Pod changes nothing more


@settings(max_examples=300, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=5),
        lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=3),
        max_leaves=20,
    )
)
def test_admit_pod_answers_any_json(garbage: Any) -> None:
    for obj in (garbage, {"metadata": {"labels": {naming.LABEL_QUEUE_NAME: QUEUES[0]}}, "spec": garbage}):
        result = admit_pod(obj, TYPES)
        assert isinstance(result.allowed, bool)
        assert result.allowed or result.message


@settings(max_examples=100, deadline=None)
@given(pool())
def test_the_fast_ledger_reader_agrees_with_the_checked_one(raw: list[dict[str, Any]]) -> None:
    from gpuctl.core.ledger import _parse_checked, _parse_well_formed

    shared: dict[Any, Any] = {}  # one read's capabilities, shared by its objects
    for d in raw:
        try:
            fast = _parse_well_formed(d, shared)
        except Exception:  # noqa: BLE001 - an unusual shape is the checked reader's to read
            continue
        assert fast == _parse_checked(d)


def test_the_fast_ledger_reader_reads_the_common_shapes() -> None:
    """The property above compares only what the fast reader reads: it must read the usual ledgers itself."""
    from gpuctl.core.ledger import _parse_well_formed
    from testbed.factories import card_row, devices, h100_devices

    shared: dict[Any, Any] = {}
    rows = [card_row(0), card_row(1, mode=3, allocated=160000, slices=1), card_row(2, mode=2, allocated=320000)]
    for d in (devices("a", cards=4, rows=rows), devices("b", cards=4), h100_devices("c")):
        _parse_well_formed(d, shared)


@settings(max_examples=150, deadline=None)
@given(pool())
def test_views_equal_the_per_card_definitions(raw: list[dict[str, Any]]) -> None:
    parsed = [parse_devices(d) for d in raw]
    ex, sh, sl, _ = accelerator_views(parsed, A10G)
    cards = [(n.node, c) for n in parsed for c in n.cards(A10G) if not c.partitioned]
    per_node: dict[str, list[Any]] = {}
    for node, c in cards:
        per_node.setdefault(node, []).append(c)
    assert ex.remaining == sum(c.free for _, c in cards)
    assert ex.once_max_request == max((sum(c.free for c in cs) for cs in per_node.values()), default=0)
    assert sh.remaining == sum(c.free_shares for _, c in cards)
    assert sh.once_max_request == max((sum(c.free_shares > 0 for c in cs) for cs in per_node.values()), default=0)
    assert sl.remaining == sum(c.free_slice_percent for _, c in cards if c.sliceable)
    assert sl.once_max_request == max((c.free_slice_percent for _, c in cards if c.sliceable), default=0)
