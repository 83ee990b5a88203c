"""``plan partitions`` and ``plan drain`` against the real Kueue and operator.

- **Partitions**: a pool of whole H100 cards (one held by a Pod outside Kueue) is loaded, consistent by construction
  (``tests.states``). ``plan partitions --for 3g.40gb=3`` is asked live; the test then applies the plan by hand — it
  rewrites each switched card's capability in its node's Devices as a re-moded card reports it (the H100 profile
  table of ``testbed.factories``) and reports the node's ledger and keys as the device plugin would — and waits for the
  operator to publish the pool's new catalog and views, which must read what the plan said they would. Then the demand
  is submitted as Pods: the Pod webhook folds them, Kueue's TAS places them and the operator's check judges them, and
  each must be admitted on the node the plan placed it on.
- **Drain**: Workloads are admitted on one node by Kueue. ``plan drain`` of that node is asked live; the test then
  cordons the node, evicts its Workloads through Kueue (deactivated, their Pods deleted, then queued again one after
  another in the plan's order) and each must end where the plan said: admitted on the node it named, or held for the
  reason it gave.
"""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from typer.testing import CliRunner

from gpuctl.cli.main import app
from gpuctl.core import naming
from testbed.factories import H100_MIB, H100_PROFILES, container, physical_profiles
from testbed.gpucluster import KUEUE, KV, WORKER, WV, condition, wait_for
from testbed.operator_process import Operator, webhooks_registered
from tests.states import Model, State, whole

from .whatif import Cluster, job, real_class

GPU = "nvidia.com/gpu"
THREE_G = {f"{GPU}.partitioned": "1", f"{GPU}.partitioned.mig-3g.40gb": "1"}


@pytest.fixture(scope="module")
def operator(control_plane: Any, api: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Operator]:
    with webhooks_registered(control_plane, api, tmp_path_factory.mktemp("plan-operator")) as op:
        yield op


def cli(*args: str, kubeconfig: str) -> dict[str, Any]:
    result = CliRunner().invoke(app, [*args, "-o", "json", "--kubeconfig", kubeconfig])
    assert result.exit_code == 0, result.stderr
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def queues_active(cluster: Cluster, pools: list[str]) -> None:
    for q in pools:
        wait_for(
            f"ClusterQueue {q} Active",
            lambda q=q: (
                (condition(cluster.objs.get_cluster_custom_object(KUEUE, KV, "clusterqueues", q), "Active") or {}).get(
                    "status"
                )
                == "True"
            ),
        )


def remode_by_hand(cluster: Cluster, node: str, cards: list[str]) -> None:
    """What the device manager reports once the cards are partitioned: their status carries the H100 profile table
    and no logical slicing; then the node's ledger and keys."""
    obj = copy.deepcopy(cluster.devices[node])
    for group in obj["spec"]["groups"]:
        for a in group["accelerators"]:
            if a["id"] in cards:
                a["status"] = {
                    "unhealthy": False,
                    "physicalSliced": {"count": 7, "profiles": physical_profiles(H100_PROFILES)},
                    "logicalSliced": {"count": 0},
                }
    cluster.objs.patch_cluster_custom_object(WORKER, WV, "devices", node, {"spec": obj["spec"]})
    cluster.devices[node] = obj
    cluster.report(node)


def admitted_node(cluster: Cluster, name: str) -> tuple[Any, ...]:
    return real_class(cluster, name, False)


def test_a_plan_applied_by_hand_admits_what_it_predicted(operator: Operator, api: Any, control_plane: Any) -> None:
    suffix = uuid.uuid4().hex[:5]
    namespace = f"plan-{suffix}"
    client.CoreV1Api(api).create_namespace({"metadata": {"name": namespace}})
    cluster = Cluster(api, namespace)
    model = Model(f"h100-{suffix}", "NVIDIA H100 80GB HBM3", H100_MIB, H100_PROFILES)
    state = State(namespace=namespace, topology=f"hostname-{suffix}")
    state.node(f"pa-{suffix}", 4, model, partitioned=()).node(f"pb-{suffix}", 4, model, partitioned=())
    state.hold(None, f"pa-{suffix}", whole(0))  # a Pod outside Kueue: its card is never planned
    kubeconfig = str(control_plane.kubeconfig)
    try:
        cluster.load(state.objects())
        queues_active(cluster, [model.pool])
        planned = cli("plan", "partitions", model.pool, "--for", "3g.40gb=3", "-n", namespace, kubeconfig=kubeconfig)
        [summary] = planned["plans"]
        assert len(planned["items"]) == 1, json.dumps(summary)
        [step] = planned["items"]
        # Three 3g.40gb: two per card, so two cards, on the node with the fewest free whole cards that holds both.
        assert (step["node"], step["cards"], step["to"], step["blockedBy"]) == (
            f"pa-{suffix}",
            ["GPU-0001", "GPU-0002"],
            "partitioned",
            [],
        )
        assert summary["admittedBefore"] == [] and len(summary["admittedAfter"]) == 3
        remode_by_hand(cluster, step["node"], step["cards"])

        # The operator publishes the new catalog (the Pod webhook folds partitions by it) and the views the plan read.
        def published() -> dict[str, Any] | None:
            it = cluster.objs.get_cluster_custom_object(WORKER, WV, "instancetypes", model.pool)
            status = it.get("status") or {}
            physical = ((status.get("detail") or {}).get("slicedDetail") or {}).get("physical") or {}
            return status if physical.get("profiles") and status.get("acceleratorPartitioned") else None

        status = wait_for("the operator to publish the partitioned catalog", published)
        after = step["viewsAfter"][0]
        for view in ("accelerator", "acceleratorShared", "acceleratorSliced"):
            got = {k: int(v) if isinstance(v, str) else v for k, v in status[view].items()}
            assert got == after[view], (view, got, after[view])
        assert {p["name"]: int(p["count"]) for p in status["acceleratorPartitioned"]["remainingProfiles"]} == {
            p["name"]: p["count"] for p in after["acceleratorPartitioned"]["remainingProfiles"]
        }
        live = cli("views", model.pool, kubeconfig=kubeconfig)["items"][0]
        assert live["acceleratorPartitioned"]["remaining"] == after["acceleratorPartitioned"]["remaining"] == 14

        # The demand, as --for asked it: each Pod admitted by Kueue and the check on the node the plan put it on.
        for d in summary["demand"]:
            name = d["workload"].split("/", 1)[1]
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "labels": {naming.LABEL_QUEUE_NAME: model.entrance}},
                "spec": {"restartPolicy": "Never", "containers": [container("main", THREE_G)]},
            }
            made = cluster.core.create_namespaced_pod(namespace, pod)
            cluster.created.append(("pod", name, namespace))
            w = wait_for(f"the Workload of Pod {name}", lambda m=made: cluster.workload_of(m.metadata.uid))
            cluster.created.append(("workloads", w["metadata"]["name"], namespace))
            nodes = summary["placement"][d["workload"]]
            assert admitted_node(cluster, w["metadata"]["name"]) == ("admitted", tuple(n["name"] for n in nodes))
            cluster.run(w["metadata"]["name"], {"placement": {"nodes": nodes}}, name, pod["spec"])
    finally:
        cluster.cleanup()
        client.CoreV1Api(api).delete_namespace(namespace)


def set_active(cluster: Cluster, name: str, active: bool) -> None:
    cluster.objs.patch_namespaced_custom_object(
        KUEUE, KV, cluster.namespace, "workloads", name, {"spec": {"active": active}}
    )


def test_a_drain_lands_each_evicted_workload_where_the_plan_said(
    operator: Operator, api: Any, control_plane: Any
) -> None:
    suffix = uuid.uuid4().hex[:5]
    namespace = f"drain-{suffix}"
    client.CoreV1Api(api).create_namespace({"metadata": {"name": namespace}})
    cluster = Cluster(api, namespace)
    model = Model(f"a10gd-{suffix}", "NVIDIA A10G", 24576)
    state = State(namespace=namespace, topology=f"hostname-{suffix}")
    drained, other = f"da-{suffix}", f"db-{suffix}"
    state.node(drained, 4, model).node(other, 4, model)
    state.hold(None, other, whole(0)).hold(None, other, whole(1, 2, 3))  # the second leaves before the drain
    state.nominal[model.pool] = 8
    kubeconfig = str(control_plane.kubeconfig)
    # Jobs, so an evicted Workload releases its quota (Kueue suspends its Job); priorities set Kueue's order.
    asks = {
        "big": ({GPU: "2"}, 2),
        "one": ({GPU: "1"}, 1),
        "slice": ({f"{GPU}.sliced": "1", f"{GPU}.sliced.memory-percentage": "40"}, 0),
    }
    try:
        for name, (_, value) in asks.items():
            cluster.objs.create_cluster_custom_object(
                KUEUE,
                KV,
                "workloadpriorityclasses",
                {
                    "apiVersion": f"{KUEUE}/{KV}",
                    "kind": "WorkloadPriorityClass",
                    "metadata": {"name": f"{suffix}-{name}"},
                    "value": value,
                },
            )
            cluster.created.append(("workloadpriorityclasses", f"{suffix}-{name}", None))
        cluster.load(state.objects())
        queues_active(cluster, [model.pool])
        # Admitted on the only node with room, their Pods started where Kueue placed them.
        workloads: dict[str, str] = {}
        templates: dict[str, dict[str, Any]] = {}
        for name, (limits, _) in asks.items():
            manifest = job(name, model, limits, 1, False, f"{suffix}-{name}")
            made = client.BatchV1Api(api).create_namespaced_job(namespace, manifest)
            cluster.created.append(("job", name, namespace))
            w = wait_for(f"the Workload of Job {name}", lambda m=made: cluster.workload_of(m.metadata.uid))
            workloads[name] = w["metadata"]["name"]
            templates[name] = manifest["spec"]["template"]["spec"]
            cluster.created.append(("workloads", workloads[name], namespace))
            placed = cli(
                "simulate", "--workload", f"{namespace}/{workloads[name]}", "-n", namespace, kubeconfig=kubeconfig
            )
            assert admitted_node(cluster, workloads[name]) == ("admitted", (drained,))
            cluster.run(workloads[name], placed, None, templates[name])
        # The Pod holding three of the other node's cards leaves: one is still held outside Kueue.
        cluster.core.delete_namespaced_pod("outside-1", namespace, grace_period_seconds=0)
        wait_for(
            "the Pod gone",
            lambda: not any(p.metadata.name == "outside-1" for p in cluster.core.list_namespaced_pod(namespace).items),
        )
        cluster.report(other)

        planned = cli("plan", "drain", drained, kubeconfig=kubeconfig)
        [step] = planned["items"]
        evicted = {e["name"]: e for e in step["evicted"]}
        assert set(evicted) == set(workloads.values())
        order = [e["name"] for e in step["evicted"]]
        assert order == [workloads[n] for n in ("big", "one", "slice")]  # Kueue's order: priority
        # "big" takes two of the three free cards, "one" the third; the slice finds no card it can take.
        assert [evicted[workloads[n]]["result"] for n in ("big", "one", "slice")] == [
            "readmitted",
            "readmitted",
            "held",
        ]
        assert [n["name"] for n in planned["nowhere"]] == [workloads["slice"]]

        # kubectl drain: cordon, then evict. Kueue evicts each Workload (deactivated: its Job suspended), the suite
        # deletes its Pods and reports the node; then each is queued again, in the plan's order, and must end where
        # the plan said.
        cluster.core.patch_node(drained, {"spec": {"unschedulable": True}})
        for name in order:
            set_active(cluster, name, False)
        for name in order:
            wait_for(
                f"Kueue to evict {name}",
                lambda name=name: (
                    (
                        condition(
                            cluster.objs.get_namespaced_custom_object(KUEUE, KV, namespace, "workloads", name),
                            "QuotaReserved",
                        )
                        or {}
                    ).get("status")
                    != "True"
                ),
            )
        cluster.stop_evicted()
        by_workload = {w: n for n, w in workloads.items()}
        for name in order:
            e = evicted[name]
            set_active(cluster, name, True)
            got = real_class(cluster, name, False)
            if e["result"] == "readmitted":
                assert got == ("admitted", tuple(n["name"] for n in e["placement"]["nodes"])), (name, got, e)
                cluster.run(name, e, None, templates[by_workload[name]])
            elif e["heldBy"] == 3:  # the operator's check answers Retry, in the words the plan gave
                assert got == ("retry", e["heldGate"]["check"]["message"]), (name, got, e)
            else:  # Kueue holds it: its quota or its TAS placement, as the plan said
                assert (e["heldBy"], got) == (2, ("pending", e["heldGate"].get("part"))), (name, got, e)
    finally:
        cluster.cleanup()
        client.CoreV1Api(api).delete_namespace(namespace)
