"""The five gates chained: the right ``heldBy`` for a Workload held at each gate, and the known behaviours."""

from __future__ import annotations

from typing import Any

from gpuctl.core.explain import FAILED, HELD, NOT_REACHED, PASSED, ExplainContext, explain_workload
from gpuctl.core.fit import check_inputs
from gpuctl.core.ledger import parse_devices
from gpuctl.core.nodes import parse_node
from gpuctl.core.pods import parse_pod
from gpuctl.core.units import M
from gpuctl.core.workloads import parse_cluster_queue, parse_local_queue, parse_resource_flavor, parse_workload
from testbed.factories import bound_pod, card_row, devices, flavor, node, workload

QUEUE = "gpustack-fnv64-c4680bb149644f1c"
CQ_NAME = "gpustack--nvidia-a10g-linux-amd64"


def cluster_queue(reserved_cards: int = 0, stop_policy: str = "None", nominal_cards: int = 8) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": CQ_NAME, "labels": {"resource.gpustack.ai/type": "instancetypes"}},
        "spec": {
            "stopPolicy": stop_policy,
            "resourceGroups": [
                {
                    "coveredResources": ["credits.gpustack.ai/nvidia"],
                    "flavors": [
                        {
                            "name": "f-a10g",
                            "resources": [
                                {"name": "credits.gpustack.ai/nvidia", "nominalQuota": str(nominal_cards * M)}
                            ],
                        }
                    ],
                }
            ],
            "admissionChecksStrategy": {"admissionChecks": [{"name": "gpustack-node-devices"}]},
        },
        "status": {
            "flavorsReservation": [
                {
                    "name": "f-a10g",
                    "resources": [{"name": "credits.gpustack.ai/nvidia", "total": str(reserved_cards * M)}],
                }
            ]
        },
    }


LOCAL_QUEUE = {
    "apiVersion": "kueue.x-k8s.io/v1beta2",
    "kind": "LocalQueue",
    "metadata": {"name": QUEUE, "namespace": "team-a"},
    "spec": {"clusterQueue": CQ_NAME},
}


def context(
    cq: dict[str, Any], ledger: dict[str, Any], pods: list[dict[str, Any]] = (), workloads: list[dict[str, Any]] = ()
) -> ExplainContext:  # type: ignore[assignment]
    d = parse_devices(ledger)
    labels = {"gpustack.ai/managed": "true", "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", **d.labels}
    return ExplainContext(
        local_queue=parse_local_queue(LOCAL_QUEUE),
        cluster_queue=parse_cluster_queue(cq),
        check=check_inputs(
            {"f-a10g": parse_resource_flavor(flavor("f-a10g"))},
            [d],
            {d.node: parse_node(node(d.node, labels=labels))},
            [parse_workload(w) for w in workloads],
            [parse_pod(p) for p in pods],
            pods_read=bool(pods),
        ),
    )


FREE = devices("node-x", cards=8, rows=[card_row(i) for i in range(8)])
HALF_SLICED = devices("node-x", cards=8, rows=[card_row(i, mode=3, allocated=M // 2, slices=1) for i in range(8)])
WHOLE = {"nvidia.com/gpu": "2"}


def verdicts(e: Any) -> list[str]:
    return [g.verdict for g in e.gates]


def test_held_at_gate_1_when_a_template_breaks_a_rule() -> None:
    w = workload("w", [("main", 1, {"nvidia.com/gpu": "1", "nvidia.com/gpu.shared": "1"})], reserved=False, queue=QUEUE)
    e = explain_workload(parse_workload(w), context(cluster_queue(), FREE))
    assert e.held_by == 1 and e.gates[0].verdict == FAILED
    assert "a Pod may request only one accelerator family, found [exclusive shared]" in " ".join(e.gates[0].evidence)


def test_held_at_gate_2_by_quota() -> None:
    w = workload("w", [("main", 1, {"nvidia.com/gpu": "4"})], reserved=False, queue=QUEUE)
    w["status"]["conditions"] = [
        {
            "type": "QuotaReserved",
            "status": "False",
            "reason": "Pending",
            "message": "couldn't assign flavors to pod set main: insufficient unused quota",
        }
    ]
    e = explain_workload(parse_workload(w), context(cluster_queue(reserved_cards=6), FREE))
    assert e.held_by == 2
    assert verdicts(e) == [PASSED, HELD, NOT_REACHED, NOT_REACHED, NOT_REACHED]
    assert e.gates[1].summary == (
        "couldn't assign flavors to pod set main: insufficient unused quota for credits.gpustack.ai/nvidia in flavor "
        "f-a10g, 3200000 credits (2 cards) more needed"
    )
    assert e.gates[1].part == "quota" and e.gates[1].name == "Kueue quota"
    assert any("insufficient unused quota" in x for x in e.gates[1].evidence)


def test_held_at_gate_2_by_a_held_queue() -> None:
    w = workload("w", [("main", 1, WHOLE)], reserved=False, queue=QUEUE)
    e = explain_workload(parse_workload(w), context(cluster_queue(stop_policy="Hold"), FREE))
    assert e.held_by == 2 and "on Hold" in e.gates[1].summary and "gpuctl resume" in e.gates[1].hint


def test_held_at_gate_3_by_fragmentation() -> None:
    w = workload(
        "w", [("main", 1, {"nvidia.com/gpu": "5"})], queue=QUEUE, hosts={"main": [("node-x", 1)]}, check_state="Retry"
    )
    e = explain_workload(parse_workload(w), context(cluster_queue(reserved_cards=5), HALF_SLICED))
    assert e.held_by == 3
    assert verdicts(e) == [PASSED, PASSED, HELD, NOT_REACHED, NOT_REACHED]
    assert (
        e.gates[2].summary
        == "needs 5 whole cards, node-x has 0 free of 8: all 8 hold slices; will retry as capacity frees"
    )


def test_gate_3_recognises_an_unpinned_workload_on_a_fragmented_node() -> None:
    sliced = {
        "nvidia.com/gpu.sliced": "1",
        "nvidia.com/gpu.sliced.memory-percentage": "60",
        "nvidia.com/gpu.sliced.units": "960000",
    }
    w = workload("w", [("main", 1, sliced)], queue=QUEUE, hosts={"main": [("node-x", 1)]}, check_state="Retry")
    e = explain_workload(parse_workload(w), context(cluster_queue(), HALF_SLICED))
    assert e.held_by == 3
    assert "TAS re-places it there every 30 s" in e.gates[2].hint
    assert "podset main carries no fit-label pin" in e.gates[2].evidence


def test_gate_3_recognises_room_promised_to_a_workload_still_starting() -> None:
    one = devices("node-x", cards=2, rows=[card_row(0), card_row(1)])
    first = workload("first", [("main", 1, WHOLE)], queue=QUEUE, hosts={"main": [("node-x", 1)]}, check_state="Ready")
    second = workload("second", [("main", 1, WHOLE)], queue=QUEUE, hosts={"main": [("node-x", 1)]}, check_state="Retry")
    e = explain_workload(parse_workload(second), context(cluster_queue(), one, workloads=[first, second]))
    # Allocating the promise frees nothing: the hint says what does.
    assert e.held_by == 3 and "promised to team-a/first" in e.gates[2].hint and "frees nothing" in e.gates[2].hint
    assert any("promised to team-a/first" in x for x in e.gates[2].evidence)


def test_gate_3_recognises_several_pods_of_one_podset_on_one_node() -> None:
    one_card = devices("node-x", cards=1, rows=[card_row(0)])
    sliced = {
        "nvidia.com/gpu.sliced": "1",
        "nvidia.com/gpu.sliced.memory-percentage": "60",
        "nvidia.com/gpu.sliced.units": "960000",
    }
    w = workload("w", [("main", 2, sliced)], queue=QUEUE, hosts={"main": [("node-x", 2)]}, check_state="Retry")
    e = explain_workload(parse_workload(w), context(cluster_queue(), one_card))
    assert e.held_by == 3 and "does not converge by itself" in e.gates[2].hint


def test_held_at_gate_4_by_a_pending_pod() -> None:
    w = workload(
        "w", [("main", 1, WHOLE)], queue=QUEUE, hosts={"main": [("node-x", 1)]}, admitted=True, check_state="Ready"
    )
    pod = bound_pod("w-0", "", WHOLE, workload_name="w")
    pod["status"] = {
        "phase": "Pending",
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/1 nodes are available: 1 Insufficient nvidia.com/gpu.",
            }
        ],
    }
    taken = devices("node-x", cards=2, rows=[card_row(0, mode=1, allocated=M), card_row(1)])
    holder = bound_pod(
        "other-0",
        "node-x",
        {"nvidia.com/gpu": "1"},
        workload_name="other",
        allocations={"main": [{"id": "GPU-0000", "mode": 1, "allocated": M}]},
    )
    e = explain_workload(parse_workload(w), context(cluster_queue(), taken, pods=[pod, holder]))
    assert e.held_by == 4
    assert verdicts(e) == [PASSED, PASSED, PASSED, HELD, NOT_REACHED]
    assert any("Insufficient nvidia.com/gpu" in x for x in e.gates[3].evidence)
    assert "node-x: nvidia.com/gpu: requests 2, 1 free" in e.gates[3].evidence


def test_failed_at_gate_5_by_unexpected_admission_error() -> None:
    w = workload(
        "w", [("main", 1, WHOLE)], queue=QUEUE, hosts={"main": [("node-x", 1)]}, admitted=True, check_state="Ready"
    )
    pod = bound_pod("w-0", "node-x", WHOLE, workload_name="w", phase="Failed")
    pod["status"].update(
        {
            "reason": "UnexpectedAdmissionError",
            "message": "Allocate failed due to card GPU-0001 has no free slice slot, which is unexpected",
        }
    )
    e = explain_workload(parse_workload(w), context(cluster_queue(), FREE, pods=[pod]))
    assert e.held_by == 5 and e.gates[4].verdict == FAILED
    assert "no free slice slot" in e.gates[4].evidence[0]


def test_a_running_workload_is_held_by_nothing() -> None:
    w = workload(
        "w", [("main", 1, WHOLE)], queue=QUEUE, hosts={"main": [("node-x", 1)]}, admitted=True, check_state="Ready"
    )
    pod = bound_pod(
        "w-0",
        "node-x",
        WHOLE,
        workload_name="w",
        allocations={
            "main": [{"id": "GPU-0000", "mode": 1, "allocated": M}, {"id": "GPU-0001", "mode": 1, "allocated": M}]
        },
    )
    e = explain_workload(parse_workload(w), context(cluster_queue(), FREE, pods=[pod]))
    assert e.held_by is None and verdicts(e) == [PASSED] * 5
    assert e.to_dict()["heldBy"] is None
    assert e.gates[4].evidence == ("pod w-0: GPU-0000, GPU-0001",)


def test_json_shape() -> None:
    w = workload("w", [("main", 1, WHOLE)], reserved=False, queue=QUEUE)
    d = explain_workload(parse_workload(w), context(cluster_queue(), FREE)).to_dict()
    assert set(d) == {"kind", "namespace", "name", "heldBy", "gates"}
    assert [g["gate"] for g in d["gates"]] == [1, 2, 3, 4, 5]
    assert set(d["gates"][0]) == {"gate", "name", "verdict", "summary", "evidence", "hint"}


def test_gate_1_is_judged_once_per_podset_shape_and_never_lent_to_another() -> None:
    from gpuctl.core import explain

    def shaped(name: str, resources: dict[str, Any], container: str = "main", count: int = 1) -> Any:
        obj = workload(name, [("main", count, resources)])
        obj["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["name"] = container
        return parse_workload(obj)

    # No folded units: the evidence names the container.
    sliced = {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-percentage": "40"}
    broken = {"nvidia.com/gpu": "1", "nvidia.com/gpu.shared": "1"}  # two families: refused
    shapes = [
        shaped("a", sliced),
        shaped("b", sliced, container="other"),
        shaped("c", sliced, count=3),
        shaped("d", broken),
        shaped("e", {"nvidia.com/gpu": 1}),
        shaped("f", {"nvidia.com/gpu": "1"}),
    ]
    explain._GATE1.clear()
    judged = [explain.gate1(w) for w in shapes]
    assert judged == [explain._gate1(w) for w in shapes]
    assert len({explain._podsets_key(w) for w in shapes}) == len(shapes)
    assert "container other" in " ".join(judged[1].evidence) and "count 3" in " ".join(judged[2].evidence)
    assert judged[3].verdict == FAILED
    # The same shape under another name shares the judgement; anything but plain data is judged uncached.
    assert explain.gate1(shaped("g", sliced)) is judged[0]
    odd = shaped("h", {"nvidia.com/gpu": 1.5})
    assert explain._podsets_key(odd) is None and explain.gate1(odd) == explain._gate1(odd)


def _times(w: dict[str, Any], **at: tuple[str, str, str]) -> dict[str, Any]:
    """Conditions as ``type=(status, reason, lastTransitionTime)``."""
    w["status"]["conditions"] = [
        {"type": t, "status": s, "reason": r, "message": "", "lastTransitionTime": f"2026-11-30T{when}Z"}
        for t, (s, r, when) in at.items()
    ]
    return w


def test_an_eviction_being_carried_out_holds_at_gate_2_in_its_summary() -> None:
    """Kueue evicted it (the check's Retry) at 10:05; it still holds its quota while its Pods stop: the default
    line says so, not "quota reserved"."""
    w = _times(
        workload("w", [("main", 1, WHOLE)], queue=QUEUE, hosts={"main": [("node-x", 1)]}, admitted=True),
        QuotaReserved=("True", "QuotaReserved", "10:00:00"),
        Admitted=("True", "Admitted", "10:00:01"),
        Evicted=("True", "AdmissionCheck", "10:05:00"),
    )
    e = explain_workload(parse_workload(w), context(cluster_queue(), FREE))
    assert e.held_by == 2 and e.gates[1].verdict == HELD
    assert e.gates[1].summary.startswith("Evicted by Kueue (AdmissionCheck): it gives its quota back")


def test_a_workload_waiting_again_after_an_eviction_says_so_first() -> None:
    w = _times(
        workload("w", [("main", 1, {"nvidia.com/gpu": "4"})], reserved=False, queue=QUEUE),
        QuotaReserved=("False", "Pending", "10:06:00"),
        Evicted=("True", "Preempted", "10:05:00"),
        Requeued=("True", "Preempted", "10:06:00"),
    )
    e = explain_workload(parse_workload(w), context(cluster_queue(reserved_cards=6), FREE))
    assert e.held_by == 2
    assert e.gates[1].summary.startswith("Evicted by Kueue (Preempted), re-queued: couldn't assign flavors")


def test_an_old_eviction_before_the_workload_was_admitted_again_is_not_news() -> None:
    w = _times(
        workload("w", [("main", 1, WHOLE)], queue=QUEUE, hosts={"main": [("node-x", 1)]}, check_state="Ready"),
        Evicted=("True", "Preempted", "09:00:00"),
        QuotaReserved=("True", "QuotaReserved", "10:00:00"),
    )
    e = explain_workload(parse_workload(w), context(cluster_queue(), FREE))
    assert e.gates[1].verdict == PASSED and e.gates[1].summary.startswith("quota reserved")


# ----------------------------------------------------------------------------------------------- gate 3: every check


def with_checks(*extra: tuple[str, str, str], node_devices: str = "Ready", active: bool = True) -> Any:
    w = workload("w", [("main", 1, WHOLE)], queue=QUEUE, hosts={"main": [("node-x", 1)]}, check_state=node_devices)
    w["status"]["admissionChecks"] += [{"name": n, "state": s, "message": m} for n, s, m in extra]
    w["spec"]["active"] = active
    return explain_workload(parse_workload(w), context(cluster_queue(reserved_cards=2), FREE))


def test_gate_3_names_another_check_that_holds_the_workload_and_each_checks_state() -> None:
    from gpuctl.core.gpustack import JOINT_CHECK

    e = with_checks((JOINT_CHECK, "Pending", "waiting for the prefill role"))
    g = e.gates[2]
    assert e.held_by == 3 and g.verdict == HELD and g.part == JOINT_CHECK
    assert g.summary == f"held by AdmissionCheck {JOINT_CHECK} (Pending): waiting for the prefill role"
    assert [(c[0], c[1]) for c in g.checks] == [("gpustack-node-devices", "Ready"), (JOINT_CHECK, "Pending")]
    assert "until every replica has reserved quota" in g.hint
    passed = with_checks((JOINT_CHECK, "Ready", "nothing to wait for")).gates[2]
    assert passed.verdict == PASSED and passed.part != JOINT_CHECK


def test_gate_3_fails_on_a_check_another_controller_rejected() -> None:
    g = with_checks(("provisioning", "Rejected", "no capacity in the zone")).gates[2]
    assert g.verdict == FAILED and g.part == "provisioning"
    assert g.hint == "AdmissionCheck provisioning's controller decides it: see its state's message"


def test_a_workload_the_joint_check_parked_is_said_parked_and_one_deactivated_otherwise_is_not() -> None:
    from gpuctl.core.gpustack import JOINT_CHECK, PARKED_MARKER

    parked = with_checks((JOINT_CHECK, "Pending", f"waited 30m: {PARKED_MARKER}"), active=False).gates[2]
    assert parked.verdict == HELD and parked.summary.startswith(f"parked by {JOINT_CHECK}")
    assert "reactivate its Workloads (spec.active=true)" in parked.hint
    other = with_checks((JOINT_CHECK, "Pending", "waiting"), active=False).gates[2]
    assert not other.summary.startswith("parked")


def test_the_holding_check_is_named_from_the_workloads_own_record() -> None:
    from gpuctl.core.checks import holding_check
    from gpuctl.core.gpustack import JOINT_CHECK, PARKED_MARKER

    def record(*extra: tuple[str, str, str], active: bool = True) -> Any:
        w = workload("w", [("main", 1, WHOLE)], queue=QUEUE, hosts={"main": [("node-x", 1)]}, check_state="Ready")
        w["status"]["admissionChecks"] += [{"name": n, "state": s, "message": m} for n, s, m in extra]
        w["spec"]["active"] = active
        return parse_workload(w)

    assert holding_check(record()) == ""
    assert holding_check(record((JOINT_CHECK, "Pending", "waiting"))) == f"{JOINT_CHECK} Pending"
    assert holding_check(record((JOINT_CHECK, "Pending", PARKED_MARKER), active=False)) == f"{JOINT_CHECK} parked"
