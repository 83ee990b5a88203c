"""``core.usage``: who holds what, on hand-checked states of every mode, and the rows always add up to the ledger."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuctl.core import naming
from gpuctl.core.instancetypes import parse_instancetype
from gpuctl.core.ledger import parse_devices
from gpuctl.core.pods import parse_pod
from gpuctl.core.units import M
from gpuctl.core.usage import UNATTRIBUTED, By, Row, equivalents, holdings, summarise, usage_gauges
from gpuctl.core.workloads import parse_local_queue, parse_workload
from testbed.factories import H100_MIB, H100_PROFILES, container, devices, instancetype, node, workload
from tests.states import A10G, H100, NS, State, partition, shares, slice_of, whole

JSON = dict[str, Any]


def rows(objects: list[JSON], by: By = By.NAMESPACE, namespace: str | None = None) -> list[Row]:
    kinds: dict[str, list[JSON]] = {}
    for o in objects:
        kinds.setdefault(o["kind"], []).append(o)
    found = holdings(
        [parse_instancetype(o) for o in kinds.get("InstanceType", [])],
        [parse_devices(o) for o in kinds.get("Devices", [])],
        [parse_pod(o) for o in kinds.get("Pod", [])],
        [parse_workload(o) for o in kinds.get("Workload", [])],
        [parse_local_queue(o) for o in kinds.get("LocalQueue", [])],
    )
    return summarise(found, by, namespace)


def one(found: list[Row], name: str) -> Row:
    [row] = [r for r in found if r.name == name]
    return row


def test_exclusive_cards_are_one_card_equivalent_each() -> None:
    state = State().node("n1", 4).hold("w1", "n1", whole(0, 1)).hold("w2", "n1", whole(2), namespace="team-b")
    found = rows(state.objects())
    a, b = one(found, NS).holding, one(found, "team-b").holding
    assert (a.cards, a.card_equivalents, a.pool) == (2, 2, A10G.pool)
    assert (b.cards, b.card_equivalents) == (1, 1)
    assert a.owner.cluster_queue == A10G.pool and a.owner.local_queue == A10G.entrance


def test_a_shared_grant_is_its_share_of_a_card() -> None:
    state = State().node("n1", 2).hold("w1", "n1", shares(0)).hold("w2", "n1", shares(0)).hold("w3", "n1", shares(1))
    h = one(rows(state.objects()), NS).holding
    assert (h.shares, h.card_equivalents, h.equivalents) == (3, Fraction(3, 10), {"shared": Fraction(3, 10)})


def test_a_slice_is_its_memory_share() -> None:
    state = State().node("n1", 1).hold("w1", "n1", slice_of(0, 30)).hold("w2", "n1", slice_of(0, 25))
    found = rows(state.objects(), By.WORKLOAD)
    w1, w2 = one(found, "w1").holding, one(found, "w2").holding
    assert (w1.slices, w1.slice_units, w1.card_equivalents) == (1, 30 * M // 100, Fraction(30, 100))
    assert w2.card_equivalents == Fraction(25, 100)


def test_a_partition_costs_what_a_slice_of_the_same_memory_costs() -> None:
    state = State().node("h1", 2, H100).hold("w1", "h1", partition(0, "3g.40gb", 0))
    state.hold("w2", "h1", partition(0, "1g.10gb", 4)).hold("w3", "h1", partition(1, "7g.80gb", 0))
    h = one(rows(state.objects()), NS).holding
    # floor(profile MiB x M / card MiB), over M: the H100's 81,920 MiB card.
    expected = [Fraction(mib * M // H100_MIB, M) for mib in (40192, 9856, 80896)]
    assert h.partitions == {"3g.40gb": 1, "1g.10gb": 1, "7g.80gb": 1}
    assert h.card_equivalents == sum(expected)
    assert h.equivalents == {"partitioned": sum(expected)}
    assert expected[0] == Fraction(H100_PROFILES["3g.40gb"][3] * M // H100_MIB, M) < Fraction(1, 2)


def test_rows_group_by_each_owner() -> None:
    state = State().node("n1", 4).hold("w1", "n1", whole(0)).hold("w2", "n1", whole(1))
    state.hold("w3", "n1", whole(2), namespace="team-b")
    objects = state.objects()
    assert [(r.namespace, r.name, r.holding.cards) for r in rows(objects, By.WORKLOAD)] == [
        (NS, "w1", 1),
        (NS, "w2", 1),
        ("team-b", "w3", 1),
    ]
    assert [(r.namespace, r.name, r.holding.cards) for r in rows(objects, By.LOCALQUEUE)] == [
        (NS, A10G.entrance, 2),
        ("team-b", A10G.entrance, 1),
    ]
    assert [(r.namespace, r.name, r.holding.cards) for r in rows(objects, By.CLUSTERQUEUE)] == [("", A10G.pool, 3)]
    assert [r.name for r in rows(objects, By.WORKLOAD, namespace="team-b")] == ["w3"]


def test_what_no_pod_names_is_unattributed_and_the_rows_add_up_to_the_ledger() -> None:
    state = State().node("n1", 4).hold("w1", "n1", whole(0)).hold("w2", "n1", whole(1)).hold("w3", "n1", shares(2))
    objects = [o for o in state.objects() if not (o["kind"] == "Pod" and o["metadata"]["name"].startswith("w2"))]
    found = rows(objects)
    assert one(found, NS).holding.card_equivalents == Fraction(11, 10)
    lost = one(found, UNATTRIBUTED).holding
    assert (lost.cards, lost.card_equivalents, lost.owner.namespace) == (1, 1, "")
    assert rows(objects, namespace=NS) == [one(found, NS)]


def test_a_finished_pod_no_longer_holds_cards() -> None:
    state = State().node("n1", 2).hold("w1", "n1", whole(0))
    objects = state.objects()
    for o in objects:
        if o["kind"] == "Pod":
            o["status"]["phase"] = "Succeeded"
        if o["kind"] == "Devices":
            o["status"]["groups"][0]["accelerators"][0].update(mode=0, allocated=0, remaining=M)
    assert rows(objects) == []


def test_an_admitted_workload_whose_pods_hold_nothing_yet_reserves_its_quota() -> None:
    w = workload("w9", [("main", 2, {"nvidia.com/gpu": "1"})], admitted=True, check_state="Ready")
    w["status"]["admission"]["podSetAssignments"][0]["resourceUsage"] = {"credits.gpustack.ai/nvidia": str(2 * M)}
    state = State().node("n1", 2)
    h = one(rows([*state.objects(), w], By.WORKLOAD), "w9").holding
    assert (h.reserved, h.reserved_pods, h.reserved_workloads, h.card_equivalents) == (2, 2, 1, 0)
    assert h.pool == A10G.pool


def test_a_reservation_counts_only_the_pods_not_yet_allocated() -> None:
    state = State().node("n1", 2).hold("w1", "n1", whole(0))
    objects = state.objects()
    for o in objects:
        if o["kind"] == "Workload":
            o["spec"]["podSets"][0]["count"] = 2
            a = o["status"]["admission"]["podSetAssignments"][0]
            a.update(count=2, resourceUsage={"credits.gpustack.ai/nvidia": str(2 * M)})
    h = one(rows(objects, By.WORKLOAD), "w1").holding
    assert (h.cards, h.card_equivalents, h.reserved, h.reserved_pods) == (1, 1, 1, 1)


def test_without_resource_usage_the_reservation_is_the_template_folded_to_credits() -> None:
    w = workload("w9", [("main", 3, {"nvidia.com/gpu.shared": "1"})], admitted=True)
    h = one(rows([*State().node("n1", 1).objects(), w], By.WORKLOAD), "w9").holding
    assert h.reserved == Fraction(3, 10)


def test_a_quota_reserved_workload_not_yet_admitted_is_not_reserved() -> None:
    w = workload("w9", [("main", 1, {"nvidia.com/gpu": "1"})], admitted=False)
    assert rows([*State().node("n1", 1).objects(), w], By.WORKLOAD) == []


def cpu_objects() -> list[JSON]:
    it = instancetype(acceleratable=False)
    pool = it["metadata"]["name"]
    entrance = naming.queue_entrance(pool)
    lq = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": entrance, "namespace": NS},
        "spec": {"clusterQueue": pool},
    }
    pods = []
    for i, (cpu, phase) in enumerate([("2", "Running"), ("500m", "Running"), ("4", "Succeeded")]):
        pods.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"c{i}", "namespace": NS, "labels": {naming.LABEL_QUEUE_NAME: entrance}},
                "spec": {"nodeName": "c1", "containers": [container("main", {"cpu": cpu})]},
                "status": {"phase": phase},
            }
        )
    waiting = workload("cw", [("main", 2, {"cpu": "1"})], admitted=True, queue=entrance, flavor_name=None)
    waiting["status"]["admission"]["clusterQueue"] = pool
    return [it, lq, node("c1", cpu="16"), *pods, waiting]


def test_a_cpu_pool_counts_the_cores_of_its_running_pods_and_its_reservations() -> None:
    h = one(rows(cpu_objects()), NS).holding
    assert (h.cpu, h.card_equivalents, h.pods) == (Fraction(5, 2), 0, 2)
    assert (h.reserved_cpu, h.reserved, h.reserved_pods) == (2, 0, 2)


# -- the rows add up to the ledger, whatever the state ---------------------------------------------------------

HOLDS = st.one_of(st.just("whole"), st.just("shares"), st.sampled_from([10, 25, 40]).map(lambda p: ("slice", p)))


def ledger_equivalents(objects: list[JSON]) -> Fraction:
    """Card-equivalents the ledger charges, written out from the rows: exclusive 1, shared and sliced their units,
    partitions their profiles' memory folded over the card's."""
    total = Fraction(0)
    for o in objects:
        if o["kind"] != "Devices":
            continue
        mib = o["spec"]["groups"][0]["memory"]
        profiles = {
            p["name"]: p["memoryMib"]
            for card in o["spec"]["groups"][0]["accelerators"]
            for p in card.get("status", {}).get("physicalSliced", {}).get("profiles", [])
        }
        for row in o["status"]["groups"][0]["accelerators"]:
            if row["mode"] == 1:
                total += 1
            elif row["mode"] in (2, 3):
                total += Fraction(row["allocated"], M)
            elif row["mode"] == 4:
                for p in row.get("allocatedProfiles", []):
                    total += p["count"] * Fraction(profiles[p["name"]] * M // mib, M)
    return total


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), HOLDS, st.booleans()), max_size=10), st.sets(st.integers(0, 9)))
def test_the_rows_always_sum_to_what_the_ledger_charges(holds: list[Any], dropped: set[int]) -> None:
    state = State().node("n1", 4)
    used: dict[int, tuple[str, int]] = {}
    for i, (card, kind, team_b) in enumerate(holds):
        mode, size = (kind, {"whole": 100, "shares": 10}[kind]) if isinstance(kind, str) else kind
        held_mode, held = used.get(card, (mode, 0))
        if held_mode != mode or held + size > 100:  # a card holds one mode, and never more than itself
            continue
        used[card] = (mode, held + size)
        hold = whole(card) if mode == "whole" else shares(card) if mode == "shares" else slice_of(card, size)
        state.hold(f"w{i}", "n1", hold, namespace="team-b" if team_b else None)
    objects = state.objects()
    objects = [
        o for o in objects if not (o["kind"] == "Pod" and int(o["metadata"]["name"][1:].split("-")[0]) in dropped)
    ]
    found = rows(objects)
    assert sum((r.holding.card_equivalents for r in found), Fraction(0)) == ledger_equivalents(objects)
    for r in found:
        assert r.holding.card_equivalents <= 4


def test_partitions_add_up_to_the_ledger_too() -> None:
    state = State().node("h1", 1, H100).hold("w1", "h1", partition(0, "3g.40gb", 0))
    state.hold("w2", "h1", partition(0, "1g.10gb", 4)).hold("w3", "h1", partition(0, "1g.10gb", 5))
    objects = [o for o in state.objects() if not (o["kind"] == "Pod" and o["metadata"]["name"].startswith("w3"))]
    found = rows(objects)
    assert sum((r.holding.card_equivalents for r in found), Fraction(0)) == ledger_equivalents(objects)
    assert one(found, UNATTRIBUTED).holding.partitions == {"1g.10gb": 1}


def test_a_pool_without_devices_holds_nothing() -> None:
    assert rows([instancetype(), devices("n1", cards=0)]) == []


def test_the_gauges_are_the_namespace_rows_mode_by_mode() -> None:
    state = State().node("n1", 4).hold("w1", "n1", whole(0)).hold("w2", "n1", shares(1))
    state.hold("w3", "n1", slice_of(2, 30), namespace="team-b")
    w = workload("w9", [("main", 1, {"nvidia.com/gpu": "1"})], admitted=True, namespace="team-b")
    objects = [*state.objects(), w]
    kinds: dict[str, list[JSON]] = {}
    for o in objects:
        kinds.setdefault(o["kind"], []).append(o)
    found = holdings(
        [parse_instancetype(o) for o in kinds["InstanceType"]],
        [parse_devices(o) for o in kinds["Devices"]],
        [parse_pod(o) for o in kinds["Pod"]],
        [parse_workload(o) for o in kinds["Workload"]],
        [parse_local_queue(o) for o in kinds["LocalQueue"]],
    )
    held, reserved = usage_gauges(found)
    assert held == {
        (NS, A10G.pool, "exclusive"): 1.0,
        (NS, A10G.pool, "shared"): 0.1,
        ("team-b", A10G.pool, "sliced"): 0.3,
    }
    assert reserved == {("team-b", A10G.pool): 1.0}
    for r in summarise(found, By.NAMESPACE):
        for mode, eq in r.holding.equivalents.items():
            assert held[(r.name, r.pool, mode)] == equivalents(eq)


def test_a_pods_queues_are_its_workloads_whatever_labels_the_pod_carries() -> None:
    state = State().node("n1", 2).hold("w1", "n1", whole(0))
    objects = state.objects()
    for o in objects:
        if o["kind"] == "Pod":
            o["metadata"]["labels"].pop("kueue.x-k8s.io/queue-name", None)  # a Pod the webhook never labelled
    [row] = rows(objects, By.CLUSTERQUEUE)
    assert (row.name, row.holding.cards) == (A10G.pool, 1)
    [row] = rows(objects, By.LOCALQUEUE)
    assert (row.namespace, row.name) == (NS, A10G.entrance)


def test_a_reservation_is_counted_in_the_pools_read_only() -> None:
    w = workload("w9", [("main", 1, {"nvidia.com/gpu": "1"})], admitted=True, check_state="Ready")
    objects = [o for o in State().node("n1", 1).objects() if o["kind"] != "InstanceType"]
    assert rows([*objects, w], By.WORKLOAD) == []  # its ClusterQueue is no pool read: nowhere to count it


def raw_holdings(objects: list[JSON]) -> list[Any]:
    kinds: dict[str, list[JSON]] = {}
    for o in objects:
        kinds.setdefault(o["kind"], []).append(o)
    return holdings(
        [parse_instancetype(o) for o in kinds.get("InstanceType", [])],
        [parse_devices(o) for o in kinds.get("Devices", [])],
        [parse_pod(o) for o in kinds.get("Pod", [])],
        [parse_workload(o) for o in kinds.get("Workload", [])],
        [parse_local_queue(o) for o in kinds.get("LocalQueue", [])],
    )


def test_card_holders_are_one_row_per_pod_and_card_by_the_fold() -> None:
    """What gpuctl_card_holder exports: a whole card is 1; two slices of one card are each their share; a 3g.40gb on
    an 80 GiB H100 its VRAM's fold; the row names the card (UUID) and the profile for the DCGM join."""
    from gpuctl.core.usage import HOLDER_LABELS, holder_rows

    state = State().node("n1", 2).hold("w1", "n1", whole(0)).hold("w2", "n1", slice_of(1, 30))
    state.hold("w3", "n1", slice_of(1, 25)).node("h1", 1, H100).hold("w4", "h1", partition(0, "3g.40gb", 0))
    got = {
        dict(zip(HOLDER_LABELS, labels, strict=True))["workload"]: (dict(zip(HOLDER_LABELS, labels, strict=True)), v)
        for labels, v in holder_rows(raw_holdings(state.objects()))
    }
    w1, v1 = got["w1"]
    assert (v1, w1["mode"], w1["node"], w1["namespace"], w1["GPU_I_PROFILE"]) == (1.0, "exclusive", "n1", NS, "")
    assert (got["w2"][1], got["w3"][1]) == (0.3, 0.25) and got["w2"][0]["UUID"] == got["w3"][0]["UUID"]
    w4, v4 = got["w4"]
    fold = Fraction(H100_PROFILES["3g.40gb"][3] * M // H100_MIB, M)
    assert (w4["mode"], w4["GPU_I_PROFILE"], v4) == ("partitioned", "3g.40gb", equivalents(fold))
    assert w1["localqueue"] == A10G.entrance and w1["clusterqueue"] == A10G.pool == w1["instancetype"]
