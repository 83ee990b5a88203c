"""Gate 4 capacity keys, gate 5 allocator checks, per-card fit labels and the Workload fit pin."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from gpuctl.core.admission import apply_patch, json_patch
from gpuctl.core.allocator import check_allocate, pick_partition_card, preferred_slice_card
from gpuctl.core.capacity import node_allocatable, node_capacity, pod_shortfalls
from gpuctl.core.instancetypes import parse_instancetype
from gpuctl.core.ledger import parse_devices
from gpuctl.core.naming import Family
from gpuctl.core.pins import PinContext, fit_label_changes, node_fit_labels, pin_workload
from gpuctl.core.units import SHARE, M
from testbed.factories import (
    HYGON_BW_PROFILES,
    card_row,
    devices,
    h100_devices,
    instancetype,
    physical_profiles,
    workload,
)

# ----------------------------------------------------------------------------------------------- gate 4


def test_capacity_keys_of_an_nvidia_node() -> None:
    keys = node_capacity(parse_devices(devices("n", cards=8, memory_mib=81920)))
    assert keys["nvidia.com/gpu"] == 8
    assert keys["nvidia.com/gpu.shared"] == 80
    assert keys["nvidia.com/gpu.sliced"] == 8 * 128 == 1024
    assert keys["nvidia.com/gpu.sliced.units"] == 8 * M
    assert keys["nvidia.com/gpu.sliced.cores-percentage"] == 8 * 128 * 100 == 102_400
    assert keys["nvidia.com/gpu.sliced.memory-percentage"] == 800
    assert keys["nvidia.com/gpu.sliced.memory-mib"] == 8 * 81920
    assert keys["nvidia.com/gpu.partitioned"] == 0  # a pool key: present at 0
    assert "nvidia.com/gpu.partitioned.units" not in keys  # a counting key: absent while the bare token is 0


def test_non_overcommittable_cores_count_per_card() -> None:
    keys = node_capacity(parse_devices(devices("n", manufacturer="hygon", group_id="z100", cards=2, overcommit=False)))
    assert keys["hygon.com/dcu.sliced"] == 8
    assert keys["hygon.com/dcu.sliced.cores-percentage"] == 200


def test_a_partitioned_hygon_node_serves_only_partitions() -> None:
    node = parse_devices(
        devices(
            "n",
            manufacturer="hygon",
            group_id="bw",
            memory_mib=65520,
            cards=8,
            profiles=physical_profiles(HYGON_BW_PROFILES),
        )
    )
    keys = node_capacity(node)
    assert (keys["hygon.com/dcu"], keys["hygon.com/dcu.partitioned"], keys["hygon.com/dcu.sliced"]) == (0, 32, 0)
    assert keys["hygon.com/dcu.partitioned.mig-2g.15gb"] == 32
    assert keys["hygon.com/dcu.partitioned.mig-8g.63gb"] == 8
    assert "hygon.com/dcu.sliced.units" not in keys


def test_partition_keys_count_allocated_plus_remaining() -> None:
    remaining = {"1g.10gb": 3, "1g.20gb": 2, "2g.20gb": 1, "3g.40gb": 1, "4g.40gb": 0, "7g.80gb": 0}
    node = parse_devices(
        h100_devices(
            "h",
            cards=1,
            rows=[
                card_row(0, mode=4, allocated=M // 2, allocated_profiles={"3g.40gb": 1}, remaining_profiles=remaining)
            ],
        )
    )
    keys = node_capacity(node)
    assert keys["nvidia.com/gpu.partitioned"] == 1 + 3
    assert keys["nvidia.com/gpu.partitioned.mig-3g.40gb"] == 2
    assert keys["nvidia.com/gpu.partitioned.mig-4g.40gb"] == 0


def test_cards_held_in_another_mode_are_not_allocatable() -> None:
    node = parse_devices(devices("n", cards=2, rows=[card_row(0, mode=3, allocated=M // 2, slices=1), card_row(1)]))
    alloc = node_allocatable(node)
    assert alloc["nvidia.com/gpu"] == 1 and alloc["nvidia.com/gpu.shared"] == 10


def test_pod_shortfalls() -> None:
    alloc = {"nvidia.com/gpu": 4}
    assert (
        pod_shortfalls({"nvidia.com/gpu": Fraction(2), "cpu": Fraction(64)}, alloc, [{"nvidia.com/gpu": Fraction(1)}])
        == []
    )
    [short] = pod_shortfalls({"nvidia.com/gpu": Fraction(4)}, alloc, [{"nvidia.com/gpu": Fraction(1)}])
    assert short.describe() == "nvidia.com/gpu: requests 4, 3 free"


# ----------------------------------------------------------------------------------------------- gate 5


def test_allocate_refusals() -> None:
    node = parse_devices(
        devices(
            "n",
            manufacturer="hygon",
            group_id="z100",
            cards=4,
            rows=[
                card_row(0, mode=1, allocated=M),
                card_row(1, mode=3, allocated=4 * 80000, slices=4),
                card_row(2, mode=2, allocated=SHARE * 10),
                card_row(3, mode=3, allocated=M - 1000, slices=1),
            ],
        )
    )
    c = node.cards("hygon-z100")
    assert (
        r := check_allocate(c[0], Family.SLICED, units=1)
    ) is not None and r.message == "Allocate refuses card GPU-0000: the card is held in exclusive mode"
    assert (
        r := check_allocate(c[1], Family.SLICED, units=1)
    ) is not None and "no free slice slot (4 of 4 used)" in r.reason
    assert (r := check_allocate(c[2], Family.SHARED)) is not None and r.reason == "no share of the card is left"
    assert (
        r := check_allocate(c[3], Family.SLICED, units=2000)
    ) is not None and "needs 2000 units and the card has 1000 left" in r.reason
    assert check_allocate(c[3], Family.SLICED, units=1000) is None


def test_two_share_tokens_on_one_card_are_refused() -> None:
    card = parse_devices(devices("n", cards=1)).cards("nvidia-a10g")[0]
    assert check_allocate(card, Family.SHARED, tokens_on_card=1) is None
    r = check_allocate(card, Family.SHARED, tokens_on_card=2)
    assert r is not None and "N distinct cards" in r.reason


def test_allocator_packs_the_most_occupied_card_that_fits() -> None:
    node = parse_devices(
        devices(
            "n",
            cards=3,
            rows=[
                card_row(0),
                card_row(1, mode=3, allocated=M // 2, slices=1),
                card_row(2, mode=3, allocated=M * 9 // 10, slices=1),
            ],
        )
    )
    assert preferred_slice_card(node.cards("nvidia-a10g"), M // 4).id == "GPU-0001"  # type: ignore[union-attr]
    one_3g = {"1g.10gb": 3, "1g.20gb": 2, "2g.20gb": 1, "3g.40gb": 1, "4g.40gb": 0, "7g.80gb": 0}
    h = parse_devices(
        h100_devices(
            "h",
            cards=2,
            rows=[
                card_row(0),
                card_row(1, mode=4, allocated=M // 2, allocated_profiles={"3g.40gb": 1}, remaining_profiles=one_3g),
            ],
        )
    )
    assert pick_partition_card(h.cards("nvidia-h100-80gb-hbm3"), "3g.40gb").id == "GPU-0001"  # type: ignore[union-attr]
    assert pick_partition_card(h.cards("nvidia-h100-80gb-hbm3"), "7g.80gb").id == "GPU-0000"  # type: ignore[union-attr]


# ----------------------------------------------------------------------------------------------- fit labels


def test_fit_labels_of_a_node() -> None:
    node = parse_devices(
        devices(
            "n",
            cards=3,
            rows=[
                card_row(0, mode=3, allocated=M // 4, slices=1),
                card_row(1, mode=1, allocated=M),
                card_row(2, mode=2, allocated=SHARE * 3),
            ],
        )
    )
    assert node_fit_labels(node) == {
        "sliced-max-free-units.fit.gpustack.ai/nvidia-a10g": str(M * 3 // 4),
        "shared-free-cards.fit.gpustack.ai/nvidia-a10g": "1",  # the sliced card grants no share
    }


def test_fit_labels_zero_when_full_and_absent_when_not_served() -> None:
    full = parse_devices(
        devices(
            "n", manufacturer="hygon", group_id="z100", cards=1, rows=[card_row(0, mode=3, allocated=M // 5, slices=4)]
        )
    )
    assert node_fit_labels(full)["sliced-max-free-units.fit.gpustack.ai/hygon-z100"] == "0"
    assert node_fit_labels(parse_devices(h100_devices("h", cards=1))) == {}
    assert node_fit_labels(parse_devices(devices("n", managed=False))) == {}
    assert node_fit_labels(None) == {}


def test_fit_label_changes_touch_only_fit_labels() -> None:
    current = {
        "kubernetes.io/os": "linux",
        "sliced-max-free-units.fit.gpustack.ai/old": "5",
        "shared-free-cards.fit.gpustack.ai/nvidia-a10g": "1",
    }
    desired = {"shared-free-cards.fit.gpustack.ai/nvidia-a10g": "2"}
    assert fit_label_changes(current, desired) == {
        "shared-free-cards.fit.gpustack.ai/nvidia-a10g": "2",
        "sliced-max-free-units.fit.gpustack.ai/old": None,
    }
    assert fit_label_changes(desired, desired) == {}


# ----------------------------------------------------------------------------------------------- the Workload pin

A10G = parse_instancetype(instancetype())
QUEUE = "gpustack-fnv64-c4680bb149644f1c"
CTX = PinContext(
    local_queues={("team-a", QUEUE): A10G.name},
    cluster_queue_labels={A10G.name: {"resource.gpustack.ai/type": "instancetypes"}},
    instancetypes={A10G.name: A10G},
)


def unreserved(podsets: list[tuple[str, int, dict[str, Any]]]) -> dict[str, Any]:
    return workload("w", podsets, reserved=False, queue=QUEUE)


def required_terms(w: dict[str, Any], index: int = 0) -> list[dict[str, Any]]:
    terms: list[dict[str, Any]] = w["spec"]["podSets"][index]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    return terms


def test_a_slice_of_u_units_is_pinned_gt_u_minus_1() -> None:
    w = unreserved([("main", 1, {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.units": "800000"})])
    r = pin_workload(w, None, CTX)
    assert r.allowed
    assert required_terms(r.mutated) == [
        {
            "matchExpressions": [
                {"key": "sliced-max-free-units.fit.gpustack.ai/nvidia-a10g", "operator": "Gt", "values": ["799999"]}
            ]
        }
    ]
    assert apply_patch(w, json_patch(w, r.mutated)) == r.mutated
    again = pin_workload(r.mutated, None, CTX)
    assert json_patch(r.mutated, again.mutated) == []  # never duplicated


def test_a_shared_request_of_n_is_pinned_gt_n_minus_1() -> None:
    r = pin_workload(unreserved([("main", 1, {"nvidia.com/gpu.shared": "3"})]), None, CTX)
    assert required_terms(r.mutated)[0]["matchExpressions"] == [
        {"key": "shared-free-cards.fit.gpustack.ai/nvidia-a10g", "operator": "Gt", "values": ["2"]}
    ]
    w1 = unreserved([("main", 1, {"nvidia.com/gpu.shared": "1"})])
    assert json_patch(w1, pin_workload(w1, None, CTX).mutated) == []


def test_the_pin_is_anded_into_every_non_empty_term() -> None:
    w = unreserved([("main", 1, {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.units": "160000"})])
    w["spec"]["podSets"][0]["template"]["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]},
                ]
            }
        }
    }
    terms = required_terms(pin_workload(w, None, CTX).mutated)
    assert all(t["matchExpressions"][-1]["key"] == "sliced-max-free-units.fit.gpustack.ai/nvidia-a10g" for t in terms)
    assert len(terms) == 2


def test_the_pin_reaches_only_this_operators_queues() -> None:
    slice_ps = [("main", 1, {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.units": "160000"})]
    other_queue = workload("w", slice_ps, reserved=False, queue="team-queue")
    assert json_patch(other_queue, pin_workload(other_queue, None, CTX).mutated) == []
    unmarked = PinContext(CTX.local_queues, {A10G.name: {}}, CTX.instancetypes)
    w = unreserved(slice_ps)
    assert json_patch(w, pin_workload(w, None, unmarked).mutated) == []
    no_type = PinContext(CTX.local_queues, CTX.cluster_queue_labels, {})
    assert json_patch(w, pin_workload(w, None, no_type).mutated) == []
    disabled = PinContext(CTX.local_queues, CTX.cluster_queue_labels, CTX.instancetypes, enabled=False)
    assert json_patch(w, pin_workload(w, None, disabled).mutated) == []


def test_an_update_is_pinned_only_while_the_old_workload_holds_no_reservation() -> None:
    slice_ps = [("main", 1, {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.units": "160000"})]
    new = unreserved(slice_ps)
    old_reserved = workload("w", slice_ps, reserved=True, queue=QUEUE)
    assert json_patch(new, pin_workload(new, old_reserved, CTX).mutated) == []
    old_free = unreserved(slice_ps)
    assert json_patch(new, pin_workload(new, old_free, CTX).mutated) != []


def test_the_pin_never_denies() -> None:
    for garbage in (
        {},
        {"spec": 5},
        {"spec": {"queueName": QUEUE, "podSets": "x"}},
        {"spec": {"queueName": QUEUE, "podSets": [{"template": 3}]}},
    ):
        assert pin_workload(garbage, None, CTX).allowed  # type: ignore[arg-type]
