"""``simulate`` against the operator's own check, over generated cluster states.

The states are the differential test's (pools sharing nodes, Workloads in every phase, Pods with and without
allocation records), with quota to spare, the check Active and every Node advertising its cards' keys. A sequence of
Workloads is simulated; each one that reaches gate 3 is then written as Kueue would reserve it (the simulated flavor
and nodes) and judged by the operator's check controller, fed by its own watch cache:

- one the simulator admits is answered ``Ready``;
- one it holds at gate 3 is answered ``Retry``, with the same message.

An admitted one is then marked admitted, so the operator counts it as in flight (no Pods yet) while the simulator has
placed its Pods: the next verdicts compare those two accounts of the same room.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuctl.cluster import kinds, read
from gpuctl.core import naming
from gpuctl.core.capacity import node_capacity
from gpuctl.core.explain import HELD, PASSED
from gpuctl.core.ledger import parse_devices
from gpuctl.core.rebuilt import rebuild_ledger
from gpuctl.core.simulate import Outcome, Simulator
from gpuctl.core.submissions import Submission, SubmittedPodSet
from gpuctl.core.units import M
from gpuctl.operator.controllers.check import CheckController
from testbed.factories import topology
from tests.memory_cluster import MemoryCluster
from tests.unit.test_differential import NS, POOLS, cluster_states, limits_of, operator, stored_check
from tests.unit.test_simulate import ACTIVE_CHECK, TOPOLOGY

JSON = dict[str, Any]


def prepared(objects: list[JSON]) -> list[JSON]:
    """Quota to spare, the check Active, the hostname Topology, and Nodes advertising their cards' keys."""
    keys = {}
    for o in objects:
        if o["kind"] == "Devices":
            d = parse_devices(o)
            keys[d.node] = {
                **node_capacity(rebuild_ledger(d, ())),
                **{f"credits.gpustack.ai/{g.manufacturer}": len(g.cards) * M for g in d.groups},
            }
    for o in objects:
        if o["kind"] == "ClusterQueue":
            o["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = "10000000000"
        if o["kind"] == "Node":
            extra = {k: str(v) for k, v in keys.get(o["metadata"]["name"], {}).items()}
            o["status"]["allocatable"] = {**o["status"]["allocatable"], **extra, "pods": "110"}
    return [*objects, ACTIVE_CHECK, TOPOLOGY]


def reserved_object(sub: Submission, outcome: Outcome) -> JSON:
    """The Workload as Kueue writes it at reservation: QuotaReserved, the simulated flavor and nodes, check Pending."""
    assignments = []
    for a in outcome.reservation:
        entry: JSON = {"name": a.name, "count": a.count, "flavors": dict(a.flavors)}
        hosts = a.hostnames
        if hosts:
            entry["topologyAssignment"] = topology(hosts)
        assignments.append(entry)
    obj = sub.workload_object()
    obj["metadata"]["uid"] = f"uid-{sub.name}"
    obj["status"] = {
        "conditions": [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved"}],
        "admission": {"clusterQueue": outcome.cluster_queue, "podSetAssignments": assignments},
        "admissionChecks": [{"name": naming.NODE_DEVICES_CHECK, "state": "Pending", "message": ""}],
    }
    return obj


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(cluster_states(), st.data())
def test_what_simulate_admits_the_check_answers_ready_and_what_it_holds_at_gate3_the_check_holds(
    objects: list[JSON], data: st.DataObject
) -> None:
    objects = prepared(objects)
    pools = ["derived", "custom"] + (
        ["h100"] if any(o["metadata"]["name"].startswith("h100") for o in objects if o["kind"] == "Devices") else []
    )
    cluster = MemoryCluster(objects)
    simulator = Simulator(read.simulation_state(cluster))
    controllers = operator(cluster)
    for i in range(data.draw(st.integers(1, 4))):
        pool = data.draw(st.sampled_from(pools))
        it_name = POOLS[pool][0]
        containers = limits_of(pool, data.draw)
        count = data.draw(st.integers(1, 2))
        sub = Submission(
            "Workload",
            NS,
            f"sim-{i}",
            naming.queue_entrance(it_name),
            (SubmittedPodSet("main", count, {"containers": containers}),),
        )
        outcome = simulator.simulate(sub)
        g3 = outcome.explanation.gates[2]
        if g3.verdict not in (PASSED, HELD):
            continue  # held before quota is reserved: the check never sees it
        cluster.create(kinds.WORKLOAD, reserved_object(sub, outcome), namespace=NS)
        controllers.get(CheckController).reconcile(f"{NS}/{sub.name}")
        state, message = stored_check(cluster, NS, sub.name)
        if g3.verdict == PASSED:
            assert state == "Ready", (sub, outcome.reservation, message)
        else:
            assert g3.check is not None
            assert (state, message) == g3.check, sub
        if outcome.admitted:
            cluster.patch(
                kinds.WORKLOAD,
                sub.name,
                {
                    "status": {
                        "conditions": [
                            {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved"},
                            {"type": "Admitted", "status": "True", "reason": "Admitted"},
                        ]
                    }
                },
                namespace=NS,
                subresource="status",
                patch_type="merge",
            )
