"""Gate 3: the per-accelerator verdict, every rule of gate 3 in docs/design.md."""

from __future__ import annotations

import json
from typing import Any

from gpuctl.core import naming
from gpuctl.core.credits import check_quota, workload_credits
from gpuctl.core.fit import READY, RETRY, FitContext, check_inputs, judge_workload, podset_demands
from gpuctl.core.ledger import NodeDevices, parse_devices
from gpuctl.core.naming import Family
from gpuctl.core.nodes import parse_node
from gpuctl.core.pods import parse_pod
from gpuctl.core.rebuilt import rebuild_ledger
from gpuctl.core.units import M
from gpuctl.core.workloads import parse_resource_flavor, parse_workload
from testbed.factories import (
    bound_pod,
    card_row,
    container,
    devices,
    flavor,
    h100_devices,
    node,
    pod,
    workload,
)

FLAVORS = {
    f["metadata"]["name"]: parse_resource_flavor(f)
    for f in (flavor("f-a10g"), flavor("f-h100", "nvidia-h100-80gb-hbm3"), flavor("f-hygon", "hygon-z100"))
}
POOL_LABELS = {"gpustack.ai/managed": "true", "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}


def ctx(
    *devs: dict[str, Any], workloads: list[dict[str, Any]] = (), pods: list[dict[str, Any]] = (), nodes: bool = True
) -> FitContext:  # type: ignore[assignment]
    parsed = {d.node: d for d in (parse_devices(x) for x in devs)}
    node_map = None
    if nodes:
        node_map = {}
        for d in parsed.values():
            labels = {**POOL_LABELS, **{k: v for k, v in d.labels.items()}}
            node_map[d.node] = parse_node(node(d.node, labels=labels))
    return FitContext(FLAVORS, parsed, node_map, [parse_workload(w) for w in workloads], [parse_pod(p) for p in pods])


def sliced(percent: int) -> dict[str, str]:
    return {
        "nvidia.com/gpu.sliced": "1",
        "nvidia.com/gpu.sliced.memory-percentage": str(percent),
        "nvidia.com/gpu.sliced.units": str(percent * 16000),
    }


def half_sliced_node(name: str = "node-x") -> dict[str, Any]:
    return devices(name, cards=8, rows=[card_row(i, mode=3, allocated=M // 2, slices=1) for i in range(8)])


# ----------------------------------------------------------------------------------------------- the headline case


def test_eight_half_sliced_cards_cannot_serve_five_whole_cards_though_credits_pass() -> None:
    w = workload("train", [("main", 1, {"nvidia.com/gpu": "5"})], hosts={"main": [("node-x", 1)]})
    # The slices belong to Pods outside this queue: the queue's 8 cards of credits are all free, so gate 2 passes.
    [quota] = check_quota(workload_credits(w["spec"]["podSets"]), {"credits.gpustack.ai/nvidia": 8 * M}, {})
    assert quota.fits
    v = judge_workload(parse_workload(w), ctx(half_sliced_node()))
    assert v.state == RETRY
    assert v.message == "needs 5 whole cards, node-x has 0 free of 8: all 8 hold slices; will retry as capacity frees"
    assert v.requeue_after_seconds == 30


def test_the_same_workload_is_ready_once_the_ledger_frees() -> None:
    w = workload("train", [("main", 1, {"nvidia.com/gpu": "5"})], hosts={"main": [("node-x", 1)]})
    freed = devices("node-x", cards=8, rows=[card_row(i) for i in range(8)])
    v = judge_workload(parse_workload(w), ctx(freed))
    assert v.state == READY
    assert v.message == "the assigned flavor pool has enough free cards to place the request"
    assert sorted(c.card_id for c in v.charges) == [f"GPU-{i:04d}" for i in range(5)]


# ----------------------------------------------------------------------------------------------- slices


def one_card(rows: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return devices("node-x", cards=1, rows=rows if rows is not None else [card_row(0)])


def test_two_30_percent_slices_fit_one_free_card() -> None:
    w = workload("s", [("main", 2, sliced(30))], hosts={"main": [("node-x", 2)]})
    v = judge_workload(parse_workload(w), ctx(one_card()))
    assert v.state == READY
    assert [c.card_id for c in v.charges] == ["GPU-0000", "GPU-0000"]


def test_two_60_percent_slices_do_not_fit_one_free_card() -> None:
    w = workload("s", [("main", 2, sliced(60))], hosts={"main": [("node-x", 2)]})
    v = judge_workload(parse_workload(w), ctx(one_card()))
    assert v.state == RETRY
    assert "(pod 2 of 2 there)" in v.message and "freest card has 640000 units (40 %)" in v.message


def test_slices_pack_on_the_fullest_card_that_still_fits() -> None:
    node_x = devices(
        "node-x",
        cards=3,
        rows=[
            card_row(0),
            card_row(1, mode=3, allocated=M * 7 // 10, slices=1),
            card_row(2, mode=3, allocated=M // 5, slices=1),
        ],
    )
    w = workload("s", [("main", 1, sliced(20))], hosts={"main": [("node-x", 1)]})
    v = judge_workload(parse_workload(w), ctx(node_x))
    assert [c.card_id for c in v.charges] == ["GPU-0001"]


def test_only_a_free_or_sliced_card_takes_a_slice() -> None:
    node_x = devices("node-x", cards=2, rows=[card_row(0, mode=2, allocated=160000), card_row(1, mode=1, allocated=M)])
    w = workload("s", [("main", 1, sliced(10))], hosts={"main": [("node-x", 1)]})
    assert judge_workload(parse_workload(w), ctx(node_x)).state == RETRY


def test_a_hygon_card_holding_four_slices_takes_no_fifth() -> None:
    hy = devices(
        "node-h",
        manufacturer="hygon",
        group_id="z100",
        cards=1,
        memory_mib=32768,
        rows=[card_row(0, mode=3, allocated=4 * 80000, slices=4)],
    )
    limits = {
        "hygon.com/dcu.sliced": "1",
        "hygon.com/dcu.sliced.memory-percentage": "5",
        "hygon.com/dcu.sliced.units": "80000",
    }
    w = workload(
        "h", [("main", 1, limits)], flavor_name="f-hygon", hosts={"main": [("node-h", 1)]}, manufacturer="hygon"
    )
    v = judge_workload(parse_workload(w), ctx(hy))
    assert v.state == RETRY
    assert "1 card has no free slice slot" in v.message
    three = devices(
        "node-h",
        manufacturer="hygon",
        group_id="z100",
        cards=1,
        memory_mib=32768,
        rows=[card_row(0, mode=3, allocated=3 * 80000, slices=3)],
    )
    assert judge_workload(parse_workload(w), ctx(three)).state == READY


def test_slots_count_this_workloads_own_slices() -> None:
    hy = devices(
        "node-h",
        manufacturer="hygon",
        group_id="z100",
        cards=1,
        memory_mib=32768,
        rows=[card_row(0, mode=3, allocated=2 * 80000, slices=2)],
    )
    limits = {
        "hygon.com/dcu.sliced": "1",
        "hygon.com/dcu.sliced.memory-percentage": "5",
        "hygon.com/dcu.sliced.units": "80000",
    }
    two = workload(
        "h", [("main", 2, limits)], flavor_name="f-hygon", hosts={"main": [("node-h", 2)]}, manufacturer="hygon"
    )
    three = workload(
        "h", [("main", 3, limits)], flavor_name="f-hygon", hosts={"main": [("node-h", 3)]}, manufacturer="hygon"
    )
    assert judge_workload(parse_workload(two), ctx(hy)).state == READY
    assert judge_workload(parse_workload(three), ctx(hy)).state == RETRY


# ----------------------------------------------------------------------------------------------- partitions and families


def test_exclusive_and_shared_are_never_feasible_against_partitioned_cards() -> None:
    h = h100_devices("node-p", rows=[card_row(i) for i in range(8)])
    for limits in ({"nvidia.com/gpu": "1"}, {"nvidia.com/gpu.shared": "1"}):
        w = workload("x", [("main", 1, limits)], flavor_name="f-h100", hosts={"main": [("node-p", 1)]})
        v = judge_workload(parse_workload(w), ctx(h))
        assert v.state == RETRY
        assert "node-p has no unpartitioned card of this flavor" in v.message


def mig(profile: str) -> dict[str, str]:
    return {
        "nvidia.com/gpu.partitioned": "1",
        f"nvidia.com/gpu.partitioned.mig-{profile}": "1",
        "nvidia.com/gpu.partitioned.units": "785000",
    }


def test_two_3g40gb_instances_fit_one_free_h100() -> None:
    h = h100_devices("node-p", cards=1, rows=[card_row(0)])
    w = workload("m", [("main", 2, mig("3g.40gb"))], flavor_name="f-h100", hosts={"main": [("node-p", 2)]})
    v = judge_workload(parse_workload(w), ctx(h))
    assert v.state == READY
    assert v.message == 'the assigned flavor pool has enough partitioned cards with a free "3g.40gb" placement'
    assert [c.card_id for c in v.charges] == ["GPU-0000", "GPU-0000"]
    three = workload("m", [("main", 3, mig("3g.40gb"))], flavor_name="f-h100", hosts={"main": [("node-p", 3)]})
    assert judge_workload(parse_workload(three), ctx(h)).state == RETRY


def test_a_partition_on_a_logical_only_node_names_the_missing_population() -> None:
    w = workload("m", [("main", 1, mig("1g.10gb"))], flavor_name="f-a10g", hosts={"main": [("node-x", 1)]})
    v = judge_workload(parse_workload(w), ctx(one_card()))
    assert v.state == RETRY and 'node-x has no partitioned card for profile "1g.10gb"' in v.message


def test_demands_order_partitions_first_then_units() -> None:
    from gpuctl.core.workloads import PodSet

    spec = {"containers": [{"name": "a", "resources": {"limits": {**mig("3g.40gb"), "amd.com/gpu": "2"}}}]}
    demands = podset_demands(PodSet("main", 3, spec))
    assert [(d.family, d.cards, d.pods) for d in demands] == [(Family.PARTITIONED, 1, 3), (Family.EXCLUSIVE, 2, 3)]


# ----------------------------------------------------------------------------------------------- roles, inflight, finished Pods


def test_two_roles_on_one_flavor_cannot_spend_one_card_twice() -> None:
    w = workload(
        "pd",
        [("prefill", 1, {"nvidia.com/gpu": "1"}), ("decode", 1, {"nvidia.com/gpu": "1"})],
        hosts={"prefill": [("node-x", 1)], "decode": [("node-x", 1)]},
    )
    v = judge_workload(parse_workload(w), ctx(one_card()))
    assert v.state == RETRY
    assert v.starved == "decode"
    assert v.message.startswith("role 'decode': needs 1 whole card, node-x has 0 free of 1")


def test_a_ready_workload_holds_its_cards_before_its_pods_do() -> None:
    first = workload(
        "first", [("main", 1, {"nvidia.com/gpu": "1"})], hosts={"main": [("node-x", 1)]}, check_state="Ready"
    )
    second = workload("second", [("main", 1, {"nvidia.com/gpu": "1"})], hosts={"main": [("node-x", 1)]})
    v = judge_workload(parse_workload(second), ctx(one_card(), workloads=[first, second]))
    assert v.state == RETRY
    assert [c.workload for c in v.inflight] == ["team-a/first"]
    # Once the first Workload's Pod is allocated, the ledger holds the card and nothing is counted twice.
    allocated = one_card([card_row(0, mode=1, allocated=M)])
    pod = bound_pod(
        "first-0",
        "node-x",
        {"nvidia.com/gpu": "1"},
        workload_name="first",
        allocations={"main": [{"id": "GPU-0000", "mode": 1, "allocated": M}]},
    )
    v2 = judge_workload(parse_workload(second), ctx(allocated, workloads=[first, second], pods=[pod]))
    assert v2.inflight == () and v2.state == RETRY


def test_a_finished_pod_counts_as_held_while_its_cards_are_free() -> None:
    first = workload("first", [("main", 1, {"nvidia.com/gpu": "1"})], hosts={"main": [("node-x", 1)]}, admitted=True)
    second = workload("second", [("main", 1, {"nvidia.com/gpu": "1"})], hosts={"main": [("node-x", 1)]})
    done = bound_pod(
        "first-0",
        "node-x",
        {"nvidia.com/gpu": "1"},
        workload_name="first",
        allocations={"main": [{"id": "GPU-0000", "mode": 1, "allocated": M}]},
        phase="Succeeded",
    )
    ledger = parse_devices(one_card())
    rebuilt = rebuild_ledger(ledger, [parse_pod(done)])
    assert rebuilt.cards("nvidia-a10g")[0].free  # the kubelet took the card back
    c = FitContext(
        FLAVORS, {"node-x": rebuilt}, None, [parse_workload(first), parse_workload(second)], [parse_pod(done)]
    )
    v = judge_workload(parse_workload(second), c)
    assert v.state == READY and v.inflight == ()


def test_a_node_whose_node_object_is_gone_holds_the_workload() -> None:
    w = workload("w", [("main", 1, {"nvidia.com/gpu": "1"})], hosts={"main": [("node-gone", 1)]})
    c = FitContext(FLAVORS, {"node-gone": parse_devices(devices("node-gone"))}, {}, [], [])
    v = judge_workload(parse_workload(w), c)
    assert v.state == RETRY and "whose Node object is gone" in v.message


def test_without_hostname_assignment_the_flavor_pool_is_searched_by_node_name() -> None:
    full = devices("node-a", cards=1, rows=[card_row(0, mode=1, allocated=M)])
    free = devices("node-b", cards=2, rows=[card_row(0), card_row(1)])
    w = workload("w", [("main", 1, {"nvidia.com/gpu": "2"})])
    v = judge_workload(parse_workload(w), ctx(full, free))
    assert v.state == READY and {c.node for c in v.charges} == {"node-b"}
    w3 = workload("w", [("main", 1, {"nvidia.com/gpu": "3"})])
    v3 = judge_workload(parse_workload(w3), ctx(full, free))
    assert v3.state == RETRY
    assert "node-a has 0 free of 1: 1 is held whole; node-b has 2 free of 2" in v3.message


def test_flavor_count_pin_scopes_the_cards() -> None:
    pinned = {"f-a10g": parse_resource_flavor(flavor("f-a10g", count=4))}
    w = workload("w", [("main", 1, {"nvidia.com/gpu": "1"})], hosts={"main": [("node-x", 1)]})
    two_cards = {"node-x": parse_devices(devices("node-x", cards=2))}
    v = judge_workload(parse_workload(w), FitContext(pinned, two_cards))
    assert v.state == RETRY and "no unpartitioned card of this flavor" in v.message


def test_unresolvable_flavors_retry_with_the_reference_messages() -> None:
    w = workload("w", [("main", 1, {"nvidia.com/gpu": "1"})], flavor_name=None, hosts={"main": [("node-x", 1)]})
    v = judge_workload(parse_workload(w), ctx(one_card()))
    assert v.state == RETRY and v.message.startswith(
        "the Workload's admission does not resolve to a single accelerator flavor"
    )
    bad = {
        "f-a10g": parse_resource_flavor(
            {"metadata": {"name": "f-a10g"}, "spec": {"nodeLabels": {"kubernetes.io/os": "linux"}}}
        )
    }
    v2 = judge_workload(parse_workload(workload("w", [("main", 1, {"nvidia.com/gpu": "1"})])), FitContext(bad, {}))
    assert v2.state == RETRY and v2.message.startswith("the ResourceFlavor assigned pins no single accelerator key")


def test_preconditions() -> None:
    cases = {
        "holds no quota reservation": workload("w", [("main", 1, {"nvidia.com/gpu": "1"})], reserved=False),
        "already admitted": workload("w", [("main", 1, {"nvidia.com/gpu": "1"})], admitted=True),
        "evicted": workload("w", [("main", 1, {"nvidia.com/gpu": "1"})], conditions={"Evicted": "True"}),
        "finished": workload("w", [("main", 1, {"nvidia.com/gpu": "1"})], conditions={"Finished": "True"}),
    }
    for why, raw in cases.items():
        v = judge_workload(parse_workload(raw), ctx(one_card()))
        assert not v.judged and why in v.message
    inactive = workload("w", [("main", 1, {"nvidia.com/gpu": "1"})])
    inactive["spec"]["active"] = False
    assert "deactivated" in judge_workload(parse_workload(inactive), ctx(one_card())).message


def test_rebuilt_ledger_aggregates_allocation_records() -> None:
    base = parse_devices(devices("node-x", cards=2))
    pods = [
        bound_pod(
            f"p{i}",
            "node-x",
            sliced(25),
            workload_name="w",
            allocations={"main": [{"id": "GPU-0001", "mode": 3, "allocated": 400000}]},
        )
        for i in range(2)
    ]
    rebuilt: NodeDevices = rebuild_ledger(base, [parse_pod(p) for p in pods])
    card = rebuilt.cards("nvidia-a10g")[1]
    assert (card.allocated, card.remaining, card.allocated_slices) == (800000, 800000, 2)
    assert rebuilt.cards("nvidia-a10g")[0].free


def test_rebuilt_partition_ledger_uses_the_geometry() -> None:
    base = parse_devices(h100_devices("node-p", cards=1, rows=[]))
    pod = bound_pod("p", "node-p", mig("3g.40gb"), workload_name="w")
    pod["metadata"]["annotations"]["device.gpustack.ai/accelerator.allocated"] = (
        '{"main": {"devices": {"groups": [{"id": "h100-80gb-hbm3", "manufacturer": "nvidia", "accelerators": '
        '[{"id": "GPU-0000", "mode": 4, "allocated": 785000, "allocatedPhysicalProfile": "3g.40gb"}]}]}}}'
    )
    card = rebuild_ledger(base, [parse_pod(pod)]).cards("nvidia-h100-80gb-hbm3")[0]
    assert dict(card.allocated_profiles) == {"3g.40gb": 1}
    assert card.remaining_profiles == {
        "1g.10gb": 3,
        "1g.20gb": 2,
        "2g.20gb": 1,
        "3g.40gb": 1,
        "4g.40gb": 0,
        "7g.80gb": 0,
    }


def test_rebuilt_partition_ledger_keeps_instances_where_their_records_put_them() -> None:
    base = parse_devices(h100_devices("node-p", cards=1, rows=[]))
    pods = []
    for i, start in enumerate((1, 2)):  # start 0 freed: the two instances sit at 1 and 2
        p = bound_pod(f"p{i}", "node-p", mig("1g.10gb"), workload_name="w")
        p["metadata"]["annotations"]["device.gpustack.ai/accelerator.allocated"] = json.dumps(
            {
                "main": {
                    "devices": {
                        "groups": [
                            {
                                "id": "h100-80gb-hbm3",
                                "manufacturer": "nvidia",
                                "accelerators": [
                                    {
                                        "id": "GPU-0000",
                                        "mode": 4,
                                        "allocated": 192500,
                                        "allocatedPhysicalProfile": "1g.10gb",
                                        "allocatedPhysicalPlacements": [{"start": start, "length": 1}],
                                    }
                                ],
                            }
                        ]
                    }
                }
            }
        )
        pods.append(parse_pod(p))
    card = rebuild_ledger(base, pods).cards("nvidia-h100-80gb-hbm3")[0]
    assert card.remaining_profiles["2g.20gb"] == 1  # only 4-5; 0-1 and 2-3 are each half taken
    assert card.remaining_profiles["1g.10gb"] == 5


def test_garbage_in_an_allocation_record_reads_as_nothing() -> None:
    p = bound_pod("p", "node-x", {"nvidia.com/gpu": "1"}, workload_name="w")
    p["metadata"]["annotations"]["device.gpustack.ai/accelerator.allocated"] = json.dumps(
        {
            "main": {
                "devices": {
                    "groups": [
                        {
                            "accelerators": [
                                {
                                    "id": "GPU-0000",
                                    "mode": "x",
                                    "allocated": None,
                                    "allocatedPhysicalPlacements": [{"start": "x"}, None],
                                }
                            ]
                        }
                    ]
                }
            }
        }
    )
    [record] = parse_pod(p).allocations
    assert (record.mode, record.allocated, record.placements) == (0, 0, ((0, 0), (0, 0)))


def test_a_finished_workload_holds_no_cards() -> None:
    done = workload(
        "done",
        [("main", 1, {"nvidia.com/gpu": "1"})],
        hosts={"main": [("node-x", 1)]},
        admitted=True,
        conditions={"Finished": "True"},
    )
    w = workload("w", [("main", 1, {"nvidia.com/gpu": "1"})], hosts={"main": [("node-x", 1)]})
    v = judge_workload(parse_workload(w), ctx(one_card(), workloads=[done, w]))
    assert v.state == READY and v.inflight == ()


# ----------------------------------------------------------------------------------------------- shared, per container


def shared_workload(name: str, counts: list[int], node_name: str = "node-x") -> dict[str, Any]:
    w = workload(name, [("main", 1, {})], hosts={"main": [(node_name, 1)]})
    w["spec"]["podSets"][0]["template"]["spec"]["containers"] = [
        {"name": f"c{i}", "resources": {"limits": {"nvidia.com/gpu.shared": str(n)}}} for i, n in enumerate(counts)
    ]
    return w


def test_a_shared_request_is_judged_per_container() -> None:
    """Two containers asking ``.shared: 2`` each name 2 distinct cards apiece; they may share cards, so a node with 2
    free cards holds them (as the pin's N = 2 lets TAS place it there)."""
    w = shared_workload("shared", [2, 2])
    [d] = podset_demands(parse_workload(w).podsets[0])
    assert (d.family, d.cards, d.shares) == (Family.SHARED, 2, (2, 2))
    v = judge_workload(parse_workload(w), ctx(devices("node-x", cards=2, rows=[card_row(0), card_row(1)])))
    assert v.state == READY
    assert sorted(c.card_id for c in v.charges) == ["GPU-0000", "GPU-0000", "GPU-0001", "GPU-0001"]


def test_a_container_cannot_take_two_shares_on_one_card() -> None:
    # Card 0 has one share left: the first container takes it and card 1; the second finds only card 1 open.
    rows = [card_row(0, mode=2, allocated=M - 160_000), card_row(1)]
    v = judge_workload(parse_workload(shared_workload("shared", [2, 2])), ctx(devices("node-x", cards=2, rows=rows)))
    assert v.state == RETRY
    assert v.message == (
        "needs a share on each of 2 and 2 distinct cards (one set per container), node-x has 1 card with a free share "
        "of 2 left for a container asking 2; will retry as capacity frees"
    )


def test_the_shared_pin_and_the_verdict_agree_on_n() -> None:
    """A node whose ``shared-free-cards`` label passes the pin (``Gt N-1``) holds the request of N."""
    from gpuctl.core.pins import node_fit_labels, podset_pins

    node_devices = devices("node-x", cards=3, rows=[card_row(0, mode=1, allocated=M), card_row(1), card_row(2)])
    w = shared_workload("shared", [1, 2])
    [pin] = podset_pins(parse_workload(w).podsets[0], "nvidia-a10g")
    label = node_fit_labels(parse_devices(node_devices))[pin["key"]]
    assert int(label) > int(pin["values"][0])
    assert judge_workload(parse_workload(w), ctx(node_devices)).state == READY


# ----------------------------------------------------------------------------------------------- the check's inputs


def test_in_flight_counts_whatever_the_cluster_queue() -> None:
    """A custom InstanceType's queue and a derived one serve the same cards: an admitted Workload of one holds them
    against the other, through the inputs both the operator and the CLI build."""
    custom = workload("custom", [("main", 1, {"nvidia.com/gpu": "1"})], hosts={"main": [("node-x", 1)]}, admitted=True)
    custom["status"]["admission"]["clusterQueue"] = "a10g-custom"
    custom["spec"]["queueName"] = "gpustack-fnv64-d4c0e6cd72686015"
    derived = workload("derived", [("main", 1, {"nvidia.com/gpu": "1"})], hosts={"main": [("node-x", 1)]})
    c = ctx(one_card(), workloads=[custom, derived])
    inputs = check_inputs(c.flavors, c.devices.values(), c.nodes, c.workloads, [])
    v = judge_workload(parse_workload(derived), inputs)
    assert v.state == RETRY and [x.workload for x in v.inflight] == ["team-a/custom"]


def test_the_check_rebuilds_every_ledger_from_the_pods_read() -> None:
    from gpuctl.core.fit import LEDGER_PUBLISHED, LEDGER_REBUILT, check_inputs

    published = parse_devices(one_card([card_row(0, mode=1, allocated=M)]))  # no Pod carries this allocation
    rebuilt = check_inputs(
        FLAVORS, [published], None, [], [parse_pod(bound_pod("p", "node-y", {}, workload_name=None))]
    )
    assert rebuilt.ledger == LEDGER_REBUILT
    assert rebuilt.devices["node-x"].cards("nvidia-a10g")[0].remaining == M
    kept = check_inputs(FLAVORS, [published], None, [], [], pods_read=False)
    assert kept.ledger == LEDGER_PUBLISHED and kept.devices["node-x"] is published


def test_each_workloads_own_pods_are_indexed_as_a_scan_finds_them() -> None:
    def owned(ns: str, name: str, workload: str | None) -> Any:
        obj = pod([container("main", {"cpu": "1"})], name=name, namespace=ns)
        if workload:
            obj["metadata"]["annotations"] = {naming.ANNOTATION_WORKLOAD: workload}
        return parse_pod(obj)

    pods = [
        owned("a", "p2", "w"),
        owned("b", "p1", "w"),
        owned("a", "p1", "w"),
        owned("a", "p3", "v"),
        owned("a", "x", None),
    ]
    indexed = check_inputs({}, [], None, [], pods)
    scanning = FitContext({}, {}, pods=tuple(pods))
    for key in (("a", "w"), ("b", "w"), ("a", "v"), ("c", "w")):
        assert list(indexed.own_pods(*key)) == list(scanning.own_pods(*key))
    assert [p.name for p in indexed.own_pods("a", "w")] == ["p1", "p2"]


def test_check_inputs_rebuild_each_ledger_when_a_verdict_first_reads_it(monkeypatch: Any) -> None:
    import gpuctl.core.rebuilt as rebuilt

    held = bound_pod(
        "a-0",
        "node-a",
        {"nvidia.com/gpu": "1"},
        workload_name="a",
        allocations={"main": [{"id": "GPU-0000", "mode": 1, "allocated": M}]},
    )
    ledgers = [parse_devices(devices(n, cards=2)) for n in ("node-a", "node-b", "node-c")]
    built: list[str] = []
    real = rebuilt.rebuild_ledger

    def counting(node: NodeDevices, pods: Any) -> NodeDevices:
        built.append(node.node)
        return real(node, pods)

    monkeypatch.setattr(rebuilt, "rebuild_ledger", counting)
    c = check_inputs(FLAVORS, ledgers, None, [], [parse_pod(held)])
    assert built == [] and len(c.devices) == 3 and "node-b" in c.devices and "node-z" not in c.devices
    a = c.devices["node-a"]
    assert c.devices["node-a"] is a and built == ["node-a"]  # rebuilt once, kept
    assert [card.free for card in a.cards("nvidia-a10g")] == [False, True]
    assert a == real(ledgers[0], [parse_pod(held)])
    assert c.devices.get("node-z") is None
    assert sorted(c.devices) == ["node-a", "node-b", "node-c"] and built == ["node-a"]
    # Given the ledgers by node (a read that parses each when it is first read), the check reads them so.
    by_node = {d.node: d for d in ledgers}
    assert check_inputs(FLAVORS, by_node, None, [], [parse_pod(held)]).devices["node-b"] == by_node["node-b"]


def test_the_indexes_only_some_verdicts_read_are_made_when_first_read(monkeypatch: Any) -> None:
    import gpuctl.core.fit as fit

    made: list[str] = []
    for name in ("held_pod_counts", "workloads_by_node"):
        real = getattr(fit, name)
        monkeypatch.setattr(fit, name, lambda xs, real=real, name=name: made.append(name) or real(xs))
    held = bound_pod(
        "a-0",
        "node-x",
        {"nvidia.com/gpu": "1"},
        workload_name="a",
        allocations={"main": [{"id": "GPU-0000", "mode": 1, "allocated": M}]},
    )
    w = workload("a", [("main", 1, {"nvidia.com/gpu": "1"})], hosts={"main": [("node-x", 1)]}, admitted=True)
    c = check_inputs(FLAVORS, [parse_devices(one_card())], None, [parse_workload(w)], [parse_pod(held)])
    assert made == []
    assert c.held is not None and dict(c.held) == {("team-a", "a", "main", "node-x"): 1} and len(c.held) == 1
    assert c.by_node is not None and [x.key for x in c.by_node["node-x"]] == ["team-a/a"]
    assert c.by_node.get("node-y") is None and list(c.by_node) == ["node-x"]
    assert sorted(made) == ["held_pod_counts", "workloads_by_node"]
    assert c.held.get(("x", "y", "z", "w")) is None and c.by_node.get("node-x") is not None
    assert len(made) == 2  # each made once


# ----------------------------------------------------------------------------------------------- in-flight partitions


def _partition_pair(first: str, second: str) -> tuple[str, str]:
    h = h100_devices("node-p", cards=1, rows=[card_row(0)])
    a = workload(
        "first", [("main", 1, mig(first))], flavor_name="f-h100", hosts={"main": [("node-p", 1)]}, check_state="Ready"
    )
    b = workload("second", [("main", 1, mig(second))], flavor_name="f-h100", hosts={"main": [("node-p", 1)]})
    v = judge_workload(parse_workload(b), ctx(h, workloads=[a, b]))
    assert [c.workload for c in v.inflight] == ["team-a/first"]
    return v.state, v.message


def test_an_inflight_partition_of_another_profile_leaves_the_rest_of_its_card() -> None:
    # 4g.40gb can only start at slice 0: a 3g.40gb still has slices 4-7.
    assert _partition_pair("4g.40gb", "3g.40gb")[0] == READY
    # A 1g.10gb takes one slice, wherever it lands one 3g.40gb half stays whole; and the reverse.
    assert _partition_pair("1g.10gb", "3g.40gb")[0] == READY
    assert _partition_pair("3g.40gb", "1g.10gb")[0] == READY
    # What the card cannot host beside it is still refused: a 7g.80gb needs every slice.
    state, message = _partition_pair("1g.10gb", "7g.80gb")
    assert state == RETRY and 'free "7g.80gb" placement' in message
    state, _ = _partition_pair("4g.40gb", "4g.40gb")
    assert state == RETRY
