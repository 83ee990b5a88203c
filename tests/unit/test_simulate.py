"""``simulate``: each gate against worked numbers, sequences, scenarios and the suggestions."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpuctl.cluster import read
from gpuctl.core import naming
from gpuctl.core.capacity import node_capacity
from gpuctl.core.ledger import parse_devices
from gpuctl.core.simulate import ClusterState, ScenarioError, Simulator
from gpuctl.core.submissions import ManifestError, Submission, SubmittedPodSet, submissions_from_manifest
from gpuctl.core.suggest import unblockers
from gpuctl.core.tas import NodeRoom, TasPlacement, TopologyRequest, place
from gpuctl.core.units import M
from gpuctl.core.versions import KueueVersion
from testbed.factories import bound_pod, container, devices, flavor, instancetype, node, pod, topology
from tests.memory_cluster import MemoryCluster

JSON = dict[str, Any]
NS = "team-a"
CQ = "gpustack--nvidia-a10g-linux-amd64"
ENTRANCE = naming.queue_entrance(CQ)
FLAVOR = "f-a10g"
LABELS = {naming.LABEL_MANAGED: "true", naming.LABEL_OS: "linux", naming.LABEL_ARCH: "amd64"}


def cluster_queue(
    name: str = CQ,
    flavor_name: str = FLAVOR,
    nominal_cards: int = 8,
    *,
    check: bool = True,
    cohort: str = "",
    borrowing_limit_cards: int | None = None,
    stop_policy: str = "None",
    resource: str = "credits.gpustack.ai/nvidia",
) -> JSON:
    quota: JSON = {"name": resource, "nominalQuota": str(nominal_cards * M)}
    if borrowing_limit_cards is not None:
        quota["borrowingLimit"] = str(borrowing_limit_cards * M)
    spec: JSON = {
        "stopPolicy": stop_policy,
        "namespaceSelector": {},
        "resourceGroups": [{"coveredResources": [resource], "flavors": [{"name": flavor_name, "resources": [quota]}]}],
    }
    if check:
        spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": naming.NODE_DEVICES_CHECK}]}
    if cohort:
        spec["cohortName"] = cohort
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": name, "labels": {naming.LABEL_RESOURCE_TYPE: naming.RESOURCE_TYPE_INSTANCETYPES}},
        "spec": spec,
    }


def local_queue(cq: str = CQ) -> JSON:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": naming.queue_entrance(cq), "namespace": NS},
        "spec": {"clusterQueue": cq},
    }


ACTIVE_CHECK = {
    "apiVersion": "kueue.x-k8s.io/v1beta2",
    "kind": "AdmissionCheck",
    "metadata": {"name": naming.NODE_DEVICES_CHECK},
    "spec": {"controllerName": "gpustack.ai/node-devices"},
    "status": {"conditions": [{"type": "Active", "status": "True", "reason": "Active"}]},
}
TOPOLOGY = {
    "apiVersion": "kueue.x-k8s.io/v1beta2",
    "kind": "Topology",
    "metadata": {"name": "hostname"},
    "spec": {"levels": [{"nodeLabel": naming.LABEL_HOSTNAME}]},
}


def allocated(name: str, node_name: str, limits: dict[str, str], cards: list[tuple[str, int, int]]) -> JSON:
    """A Pod outside Kueue bound to a node, holding cards (id, mode, units) by its allocation record."""
    p = bound_pod(name, node_name, limits, workload_name=None)
    record = {
        "main": {
            "devices": {
                "groups": [
                    {
                        "id": "a10g",
                        "manufacturer": "nvidia",
                        "accelerators": [{"id": c, "mode": m, "allocated": u} for c, m, u in cards],
                    }
                ]
            }
        }
    }
    p["metadata"].setdefault("annotations", {})[naming.ANNOTATION_ALLOCATED] = json.dumps(record)
    return p


def credits_of(cards: int) -> dict[str, str]:
    """A node's cards' credits, which Kueue's TAS charges the Workloads it places there against."""
    return {"credits.gpustack.ai/nvidia": str(cards * M)}


def pool(
    nodes: dict[str, int],
    *,
    static_keys: bool = True,
    nominal_cards: int | None = None,
    check: bool = True,
    extra: list[JSON] | None = None,
    tas: bool = True,
) -> list[JSON]:
    """An A10G pool: nodes (name → cards) with their Devices, Node objects (advertising every card's keys, as the
    device plugin does for a fresh node, when ``static_keys``), the InstanceType, flavor, queues and the check."""
    objects: list[JSON] = [instancetype(CQ), local_queue(), ACTIVE_CHECK, TOPOLOGY]
    f = flavor(FLAVOR)
    if not tas:
        del f["spec"]["topologyName"]
    objects.append(f)
    objects.append(
        cluster_queue(nominal_cards=sum(nodes.values()) if nominal_cards is None else nominal_cards, check=check)
    )
    for name, cards in nodes.items():
        d = devices(name, cards=cards)
        objects.append(d)
        keys = {k: str(v) for k, v in node_capacity(parse_devices(d)).items()} if static_keys else {}
        objects.append(
            node(
                name,
                labels={**LABELS, naming.accelerator_label("nvidia-a10g"): "true"},
                allocatable={**keys, **credits_of(cards), "pods": "110", "memory": "256Gi"},
            )
        )
    return objects + (extra or [])


KUEUE_017 = KueueVersion((0, 17, 0), "test")
KUEUE_019 = KueueVersion((0, 19, 2), "test")


def state_of(objects: list[JSON], kueue: KueueVersion | None = None) -> ClusterState:
    return read.simulation_state(MemoryCluster(objects), kueue=kueue)


def submit(name: str, limits: dict[str, str], count: int = 1, queue: str = ENTRANCE, priority: int = 0) -> Submission:
    return Submission(
        "Workload",
        NS,
        name,
        queue,
        (SubmittedPodSet("main", count, {"containers": [container("main", limits)]}),),
        priority,
    )


def slice_pod(name: str, pct: int) -> Submission:
    [s] = submissions_from_manifest(
        pod(
            [container("main", {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-percentage": str(pct)})],
            name=name,
            namespace=NS,
            queue=ENTRANCE,
        ),
        name,
    )
    return s


def gate(outcome: Any, n: int) -> JSON:
    return dict(outcome.to_dict()["gates"][n - 1])


# ----------------------------------------------------------------------------------------------- worked numbers


def eight_half_slices() -> list[JSON]:
    return [allocated(f"s{i}", "n1", {}, [(f"GPU-{i:04d}", 3, M // 2)]) for i in range(8)]


def test_eight_cards_sliced_to_half_cannot_take_five_whole_cards_the_check_holds_it() -> None:
    """The Node still advertises 8 whole-card tokens (TAS sums keys), so Kueue reserves; the check holds it."""
    state = state_of(pool({"n1": 8}, nominal_cards=16, extra=eight_half_slices()))
    outcome = Simulator(state).simulate(submit("five", {"nvidia.com/gpu": "5"}))
    assert outcome.explanation.held_by == 3
    g3 = gate(outcome, 3)
    assert g3["summary"] == "needs 5 whole cards, n1 has 0 free of 8: all 8 hold slices; will retry as capacity frees"
    assert g3["check"] == {"state": "Retry", "message": g3["summary"]}
    assert gate(outcome, 2)["verdict"] == "passed"  # credits see 4 of 16 cards used


def test_eight_cards_sliced_to_half_leave_no_whole_card_key_so_tas_finds_no_node() -> None:
    """When the node's keys follow the ledger (sliced cards' whole-card tokens unhealthy), TAS itself says no."""
    state = state_of(pool({"n1": 8}, nominal_cards=16, static_keys=False, extra=eight_half_slices()))
    outcome = Simulator(state).simulate(submit("five", {"nvidia.com/gpu": "5"}))
    assert outcome.explanation.held_by == 2
    assert 'excluded: resource "nvidia.com/gpu": 1' in gate(outcome, 2)["summary"]


def test_two_30_percent_slices_share_one_card_and_two_60_percent_do_not() -> None:
    sim = Simulator(state_of(pool({"n1": 1})))
    first, second = sim.simulate(slice_pod("a", 30)), sim.simulate(slice_pod("b", 30))
    assert first.admitted and second.admitted
    assert [n.cards for n in first.placement] == [("GPU-0000",)] == [n.cards for n in second.placement]
    sim = Simulator(state_of(pool({"n1": 1}, nominal_cards=4)))  # quota is not what holds it
    assert sim.simulate(slice_pod("c", 60)).admitted
    held = sim.simulate(slice_pod("d", 60))
    assert held.explanation.held_by == 2
    # The Workload webhook pinned it to nodes whose largest free slice fits 60 %; the node's label now says 40 %.
    assert "excluded: affinity: 1" in gate(held, 2)["summary"]


def test_a_hygon_card_holding_four_slices_takes_no_fifth() -> None:
    it = instancetype(
        "gpustack--hygon-bw-linux-amd64", manufacturer="hygon", group_id="bw", memory="64Gi", logical_count=4
    )
    cq_name = "gpustack--hygon-bw-linux-amd64"
    d = devices("h1", manufacturer="hygon", group_id="bw", cards=1, logical_slots=4, memory_mib=65520)
    objects = [
        it,
        local_queue(cq_name),
        ACTIVE_CHECK,
        TOPOLOGY,
        flavor("f-bw", "hygon-bw"),
        cluster_queue(cq_name, "f-bw", 4, resource="credits.gpustack.ai/hygon"),
        d,
        node(
            "h1",
            labels={**LABELS, naming.accelerator_label("hygon-bw"): "true"},
            allocatable={
                **{k: str(v) for k, v in node_capacity(parse_devices(d)).items()},
                "credits.gpustack.ai/hygon": str(M),
                "pods": "110",
            },
        ),
    ]
    sim = Simulator(state_of(objects))
    entrance = naming.queue_entrance(cq_name)
    tenth = {"hygon.com/dcu.sliced": "1", "hygon.com/dcu.sliced.memory-percentage": "10"}
    outcomes = []
    for i in range(5):
        [s] = submissions_from_manifest(
            pod([container("main", tenth)], name=f"p{i}", namespace=NS, queue=entrance), "p"
        )
        outcomes.append(sim.simulate(s))
    assert [o.admitted for o in outcomes] == [True, True, True, True, False]
    # Four slots, all taken: the node's fit label says no card has a free slice, so the pinned fifth finds no node.
    assert gate(outcomes[4], 2)["summary"].endswith("excluded: affinity: 1")
    assert sim.labels["h1"][naming.sliced_fit_label("hygon-bw")] == "0"


# ----------------------------------------------------------------------------------------------- gate by gate


def test_gate1_a_pod_breaking_a_rule_is_refused_by_the_webhook() -> None:
    [s] = submissions_from_manifest(
        pod([container("main", {"nvidia.com/gpu.sliced": "2"})], name="bad", namespace=NS, queue=ENTRANCE), "bad.yaml"
    )
    outcome = Simulator(state_of(pool({"n1": 2}))).simulate(s)
    assert outcome.explanation.held_by == 1
    g1 = gate(outcome, 1)
    assert g1["verdict"] == "failed" and "sliced" in g1["evidence"][0]
    assert [g["verdict"] for g in outcome.to_dict()["gates"][1:]] == ["not-reached"] * 4


def test_gate2_quota_short_by_one_card_names_the_shortfall() -> None:
    outcome = Simulator(state_of(pool({"n1": 8, "n2": 8}, nominal_cards=8))).simulate(
        submit("nine", {"nvidia.com/gpu": "9"})
    )
    assert outcome.explanation.held_by == 2
    assert gate(outcome, 2)["summary"] == (
        "couldn't assign flavors to pod set main: insufficient unused quota for credits.gpustack.ai/nvidia in flavor "
        "f-a10g, 1600000 credits (1 card) more needed"
    )


def test_gate2_borrows_from_the_cohort_within_its_limit() -> None:
    def objects(limit: int | None) -> list[JSON]:
        base = pool({"n1": 8}, nominal_cards=2)
        for o in base:
            if o["kind"] == "ClusterQueue":
                o["spec"]["cohortName"] = "gpus"
                if limit is not None:
                    o["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["borrowingLimit"] = str(limit * M)
        lender = cluster_queue("lender", FLAVOR, 6, cohort="gpus")
        return [*base, lender]

    assert Simulator(state_of(objects(None))).simulate(submit("w", {"nvidia.com/gpu": "5"})).admitted
    assert Simulator(state_of(objects(3))).simulate(submit("w", {"nvidia.com/gpu": "5"})).admitted
    assert Simulator(state_of(objects(2))).simulate(submit("w", {"nvidia.com/gpu": "5"})).explanation.held_by == 2
    # --at-quota: the lender uses all its nominal, so nothing is left to borrow.
    held = Simulator(state_of(objects(None)), at_quota=["lender"]).simulate(submit("w", {"nvidia.com/gpu": "5"}))
    assert held.explanation.held_by == 2


def test_gate2_a_stopped_queue_admits_nothing_and_a_missing_local_queue_holds() -> None:
    sim = Simulator(state_of(pool({"n1": 2})))
    sim.stop(CQ, "Hold")
    outcome = sim.simulate(submit("w", {"nvidia.com/gpu": "1"}))
    assert gate(outcome, 2)["summary"] == f"ClusterQueue {CQ} is stopped (Hold): it admits nothing"
    outcome = Simulator(state_of(pool({"n1": 2}))).simulate(submit("w", {"nvidia.com/gpu": "1"}, queue="nowhere"))
    assert gate(outcome, 2)["summary"] == f"LocalQueue 'nowhere' does not exist in namespace {NS}"


def test_gate4_holds_a_pod_no_node_has_keys_for_when_no_topology_places_it() -> None:
    state = state_of(pool({"n1": 2}, check=False, tas=False, nominal_cards=4))
    outcome = Simulator(state).simulate(submit("three", {"nvidia.com/gpu": "3"}))
    assert outcome.explanation.held_by == 4
    assert gate(outcome, 3)["summary"].endswith("does not reference the gpustack-node-devices check")


def test_gate5_refuses_cards_another_mode_holds_when_no_check_guards_the_queue() -> None:
    state = state_of(
        pool(
            {"n1": 2},
            check=False,
            nominal_cards=4,
            extra=[allocated("s", "n1", {}, [("GPU-0000", 3, M // 2), ("GPU-0001", 3, M // 2)])],
        )
    )
    outcome = Simulator(state).simulate(submit("one", {"nvidia.com/gpu": "1"}))
    assert outcome.explanation.held_by == 5
    g5 = gate(outcome, 5)
    assert g5["verdict"] == "failed" and "UnexpectedAdmissionError" in g5["summary"]
    assert "Allocate refuses card GPU-0000: the card is held in sliced mode" in g5["evidence"]


def test_the_allocator_packs_a_slice_on_the_fullest_card_and_whole_cards_by_index() -> None:
    state = state_of(pool({"n1": 4}, nominal_cards=8, extra=[allocated("s", "n1", {}, [("GPU-0002", 3, M // 2)])]))
    sim = Simulator(state)
    assert [n.cards for n in sim.simulate(slice_pod("a", 25)).placement] == [("GPU-0002",)]
    assert [n.cards for n in sim.simulate(submit("two", {"nvidia.com/gpu": "2"})).placement] == [
        ("GPU-0000", "GPU-0001")
    ]


# ----------------------------------------------------------------------------------------------- sequences and scenarios


def test_each_workload_sees_the_ones_before_it_placed() -> None:
    sim = Simulator(state_of(pool({"n1": 8}, nominal_cards=16)))
    first, second = (
        sim.simulate(submit("a", {"nvidia.com/gpu": "5"})),
        sim.simulate(submit("b", {"nvidia.com/gpu": "5"})),
    )
    assert first.admitted and [(n.name, len(n.cards)) for n in first.placement] == [("n1", 5)]
    assert second.explanation.held_by == 2  # TAS counts the first one's 5 cards: 3 left on n1
    third = sim.simulate(submit("c", {"nvidia.com/gpu": "3"}))
    assert third.admitted and third.placement[0].cards == ("GPU-0005", "GPU-0006", "GPU-0007")


def test_tas_places_least_free_first_for_an_implied_request_and_best_fit_for_a_required_one() -> None:
    rooms = [NodeRoom("big", {}, {"gpu": 8}), NodeRoom("small", {}, {"gpu": 2}), NodeRoom("mid", {}, {"gpu": 4})]
    one = {"gpu": 1}
    kw: Any = {"topology": "t", "total_nodes": 3, "excluded": {}}
    assert place(1, one, rooms, None, **kw) == TasPlacement((("small", 1),))
    assert place(3, one, rooms, None, **kw) == TasPlacement((("mid", 3),))
    assert place(7, one, rooms, None, **kw) == TasPlacement((("big", 7),))
    # Smallest nodes first, the last one taking the rest.
    assert place(11, one, rooms, None, **kw) == TasPlacement((("big", 5), ("mid", 4), ("small", 2)))
    # Preferred: largest first.
    assert place(11, one, rooms, TopologyRequest("preferred"), **kw) == TasPlacement((("big", 8), ("mid", 3)))
    assert place(3, one, rooms, TopologyRequest("required"), **kw) == TasPlacement((("mid", 3),))
    failed = place(9, one, rooms, TopologyRequest("required"), **kw)
    assert not isinstance(failed, TasPlacement)
    assert failed.message == 'topology "t" allows to fit only 8 out of 9 pod(s)'


def admitted_workload(name: str, cards: int, priority: int) -> JSON:
    """A Workload Kueue admitted on n1 (TAS-assigned), its Pods not created yet."""
    template = {"spec": {"containers": [container("main", {"nvidia.com/gpu": str(cards)})]}}
    assignment = {
        "name": "main",
        "count": 1,
        "flavors": {"credits.gpustack.ai/nvidia": FLAVOR},
        "topologyAssignment": topology([("n1", 1)]),
    }
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "queueName": ENTRANCE,
            "priority": priority,
            "podSets": [{"name": "main", "count": 1, "template": template}],
        },
        "status": {
            "conditions": [{"type": "QuotaReserved", "status": "True"}, {"type": "Admitted", "status": "True"}],
            "admission": {"clusterQueue": CQ, "podSetAssignments": [assignment]},
        },
    }


def test_without_drain_and_add_nodes_change_the_answer() -> None:
    state = state_of(pool({"n1": 4}, nominal_cards=8, extra=[admitted_workload("big", 4, 5)]))
    want = submit("w", {"nvidia.com/gpu": "2"})
    held = Simulator(state).simulate(want)
    assert held.explanation.held_by == 2
    finished = Simulator(state)
    finished.finish([f"{NS}/big"])
    assert finished.simulate(want).admitted
    drained = Simulator(state)
    drained.stop(CQ, "HoldAndDrain")
    assert drained.simulate(want).explanation.held_by == 2  # drained: it admits nothing new
    assert not any(w.key == f"{NS}/big" for w in drained.workloads)  # and what it admitted is evicted
    # On Kueue 0.17 a node like n1 does not help: TAS counts an admitted Workload's Pods by the credits they are
    # charged, not by the raw keys, so n1 still looks free to it and sorts first; the credits it lacks then hold the
    # Workload. From 0.18 TAS charges the raw keys: n1 looks full and the new node takes the Workload.
    grown = Simulator(state_of(pool({"n1": 4}, nominal_cards=8, extra=[admitted_workload("big", 4, 5)]), KUEUE_017))
    grown.add_nodes(1, "n1")
    again = grown.simulate(want)
    assert again.explanation.held_by == 2
    assert gate(again, 2)["summary"].endswith("Workload no longer fits after processing another workload")
    grown = Simulator(state_of(pool({"n1": 4}, nominal_cards=8, extra=[admitted_workload("big", 4, 5)]), KUEUE_019))
    grown.add_nodes(1, "n1")
    again = grown.simulate(want)
    assert again.admitted and [n.name for n in again.placement] == ["n1-sim-1"]
    with pytest.raises(ScenarioError, match="no such Workload"):
        Simulator(state).finish([f"{NS}/nope"])
    # The suggestions, each proven: the Workload that would have to finish; on 0.17 more nodes are tried, and say
    # why not; from 0.18 one more node admits it.
    old = state_of(pool({"n1": 4}, nominal_cards=8, extra=[admitted_workload("big", 4, 5)]), KUEUE_017)
    found = unblockers(Simulator(old), want, Simulator(old).simulate(want))
    assert {u.kind: u for u in found.found}["finish"].workloads == (f"{NS}/big",)
    assert "add-nodes" not in {u.kind for u in found.found} and "add-nodes" in {t.kind for t in found.tried}
    found = unblockers(Simulator(state), want, held)
    assert {u.kind for u in found.found} == {"finish", "add-nodes"}


def test_more_nodes_admit_what_the_pools_cards_held_by_pods_cannot() -> None:
    """Cards held by Pods outside Kueue take the raw keys TAS places by: n1 has no room, a node like it does."""
    held_whole = allocated("outside", "n1", {"nvidia.com/gpu": "4"}, [(f"GPU-{i:04d}", 1, M) for i in range(4)])
    state = state_of(pool({"n1": 4}, nominal_cards=8, extra=[held_whole]))
    want = submit("w", {"nvidia.com/gpu": "2"})
    held = Simulator(state).simulate(want)
    assert held.explanation.held_by == 2 and gate(held, 2)["part"] == "tas-placement"
    grown = Simulator(state)
    grown.add_nodes(1, "n1")
    placed = grown.simulate(want)
    assert placed.admitted and placed.placement[0].name == "n1-sim-1"
    found = {u.kind: u for u in unblockers(Simulator(state), want, held).found}
    assert found["add-nodes"].extra == {"count": 1, "like": "n1"}


def test_suggest_picks_the_fewest_lowest_priority_workloads() -> None:
    extra = [admitted_workload("low", 2, 1), admitted_workload("high", 2, 9)]
    sim = Simulator(state_of(pool({"n1": 4}, nominal_cards=4, extra=extra)))
    want = submit("w", {"nvidia.com/gpu": "2"})
    held = sim.copy().simulate(want)
    assert held.explanation.held_by == 2
    [finish] = [u for u in unblockers(sim, want, held).found if u.kind == "finish"]
    assert finish.workloads == (f"{NS}/low",)


def test_manifests_become_the_workloads_kueue_would_create() -> None:
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "labels": {naming.LABEL_QUEUE_NAME: ENTRANCE}},
        "spec": {
            "replicas": 3,
            "template": {"metadata": {}, "spec": {"containers": [container("c", {"nvidia.com/gpu": "1"})]}},
        },
    }
    subs = submissions_from_manifest(deployment, "d.yaml", NS)
    assert [(s.kind, s.name, s.podsets[0].count) for s in subs] == [("Pod", f"web-{i}", 1) for i in range(3)]
    job = {
        **deployment,
        "kind": "Job",
        "apiVersion": "batch/v1",
        "spec": {"parallelism": 4, "template": deployment["spec"]["template"]},
    }
    [j] = submissions_from_manifest(job, "j.yaml", NS)
    assert j.podsets[0].count == 4 and j.pod is None  # the job integration builds the Workload from the template
    with pytest.raises(ManifestError, match=r"no kueue\.x-k8s\.io/queue-name label"):
        submissions_from_manifest({**deployment, "metadata": {"name": "web"}}, "d.yaml")
    with pytest.raises(ManifestError, match="kind 'Service' cannot be simulated"):
        submissions_from_manifest({"kind": "Service", "metadata": {"name": "s"}}, "s.yaml")


def test_an_instance_runs_as_its_pod_on_its_type_entrance() -> None:
    instance = {
        "apiVersion": "worker.gpustack.ai/v1alpha1",
        "kind": "Instance",
        "metadata": {"name": "nb", "namespace": NS},
        "spec": {
            "type": CQ,
            "image": "x",
            "resources": {"accelerator": "2"},
            "volume": {"ephemeral": {"capacity": "10Gi"}},
        },
    }
    [s] = submissions_from_manifest(instance, "i.yaml")
    outcome = Simulator(state_of(pool({"n1": 4}))).simulate(s)
    assert outcome.admitted, outcome.to_dict()
    assert len(outcome.placement[0].cards) == 2


def test_a_placement_the_check_refuses_while_another_node_would_pass_is_named_a_loop() -> None:
    """n1's second card is held by a Pod outside Kueue. On Kueue 0.17 TAS charges that Pod in raw nvidia.com/gpu and
    admitted Workloads in credits: n1 never looks full in credits, and least-free-first places the second replica
    there again and again, while n2's two cards stay free. From 0.18 TAS counts the raw keys and places it on n2."""
    outside = allocated("outside", "n1", {"nvidia.com/gpu": "1"}, [("GPU-0001", 1, M)])
    replicas = [submit(f"r{i}", {"nvidia.com/gpu": "1"}) for i in range(2)]
    old = Simulator(state_of(pool({"n1": 2, "n2": 2}, nominal_cards=4, extra=[outside]), KUEUE_017))
    first, second = (old.simulate(r) for r in replicas)
    assert first.admitted and [n.name for n in first.placement] == ["n1"]
    assert second.explanation.held_by == 3
    hint = gate(second, 3)["hint"]
    assert hint.startswith("this does not converge by itself: after each Retry Kueue evicts it and places it on n1")
    assert (
        f"{NS}/outside" in hint and "n2 would pass the check" in hint and "n1 is cordoned (kubectl cordon n1)" in hint
    )
    assert "passes once" not in hint
    new = Simulator(state_of(pool({"n1": 2, "n2": 2}, nominal_cards=4, extra=[outside]), KUEUE_019))
    assert all(new.simulate(r).admitted for r in replicas)


def test_doctor_names_the_nodes_where_the_loop_can_happen_before_anyone_submits() -> None:
    from gpuctl.core import doctor

    outside = allocated("outside", "n1", {"nvidia.com/gpu": "1"}, [("GPU-0001", 1, M)])
    state = state_of(pool({"n1": 2, "n2": 2}, nominal_cards=4, extra=[outside]), KUEUE_017)
    found = doctor.placement_loops(False, state.instancetypes, state.nodes, state.check.pods)
    assert [(f.check, f.status) for f in found] == [("placement-loop", "warn")]
    assert found[0].saw.startswith("node n1 of pool ") and f"{NS}/outside" in found[0].saw
    assert doctor.placement_loops(True, state.instancetypes, state.nodes, state.check.pods) == []


def test_a_missing_local_queue_hint_says_whether_the_name_is_an_entrance() -> None:
    from gpuctl.core.queueing import missing_local_queue_hint

    entrance = naming.queue_entrance("pool-a")
    said = missing_local_queue_hint(entrance, "kube-system", ["pool-a"])
    assert said.startswith(f"{entrance} is InstanceType pool-a's entrance, which the operator creates in every")
    assert "namespace kube-system has none yet" in said and "submit to the entrance" not in said
    assert "an InstanceType's entrance" in missing_local_queue_hint(naming.queue_entrance("elsewhere"), "ns")
    assert missing_local_queue_hint("q", "ns", ["pool-a"]) == (
        "submit to the entrance of an InstanceType (its status.entrance)"
    )
