"""The operator's controllers on a cache fed by an in-memory cluster: what a reconcile writes (only differences), and
the wake-ups that cross controllers."""

from __future__ import annotations

import copy

from gpuctl.cluster import kinds
from gpuctl.core import naming
from gpuctl.core.units import M
from gpuctl.operator.controllers.check import CheckController
from gpuctl.operator.controllers.fit_labels import FitLabelController
from gpuctl.operator.controllers.instance_stop import InstanceStopController
from gpuctl.operator.controllers.status import StatusController
from testbed.factories import bound_pod, card_row, devices, workload
from tests.unit.controllers.harness import A10G, cluster_with, drain, pending


def test_a_pod_on_a_node_wakes_the_workloads_waiting_there_only() -> None:
    cluster, controllers = cluster_with(pending("on-x", "node-x"), pending("on-y", "node-y"))
    drain(controllers.get(CheckController))
    cluster.put(bound_pod("p", "node-x", {"nvidia.com/gpu": "1"}, workload_name=None))
    assert drain(controllers.get(CheckController)) == {"team-a/on-x"}


def test_a_workload_that_frees_its_cards_wakes_the_others_waiting_on_its_node() -> None:
    first = workload(
        "first", [("main", 1, {"nvidia.com/gpu": "2"})], hosts={"main": [("node-x", 1)]}, check_state="Ready"
    )
    cluster, controllers = cluster_with(first, pending("second", "node-x"))
    drain(controllers.get(CheckController))
    admitted = copy.deepcopy(cluster.get(kinds.WORKLOAD, "first", "team-a"))
    assert admitted is not None
    admitted["status"]["conditions"].append({"type": "Finished", "status": "True", "reason": "Finished"})
    cluster.put(admitted)
    assert drain(controllers.get(CheckController)) == {"team-a/first", "team-a/second"}


def test_the_check_reads_the_judged_nodes_pods_and_writes_only_a_change() -> None:
    holder = bound_pod(
        "holder",
        "node-x",
        {"nvidia.com/gpu": "1"},
        workload_name=None,
        allocations={"main": [{"id": "GPU-0000", "mode": 1, "allocated": M}]},
    )
    cluster, controllers = cluster_with(pending("two", "node-x"), holder)
    controllers.get(CheckController).reconcile("team-a/two")
    [write] = [w for w in cluster.writes if w.kind == "Workload"]
    entry = write.body["status"]["admissionChecks"][0]
    assert entry["state"] == "Retry" and "node-x has 1 free of 2" in entry["message"]
    controllers.get(CheckController).reconcile("team-a/two")
    assert len([w for w in cluster.writes if w.kind == "Workload"]) == 1  # unchanged: nothing written
    cluster.objects.pop(("Pod", "team-a", "holder"))  # gone from the API (the check's read), not yet from the cache
    controllers.get(CheckController).reconcile("team-a/two")
    assert cluster.get(kinds.WORKLOAD, "two", "team-a")["status"]["admissionChecks"][0]["state"] == "Ready"


def test_a_ready_verdict_is_remembered_until_the_cache_shows_it() -> None:
    cluster, controllers = cluster_with(pending("a", "node-x"), pending("b", "node-x"))
    cluster.watchers.clear()  # the cache stops seeing writes: only the controller's memory knows
    controllers.get(CheckController).reconcile("team-a/a")
    controllers.get(CheckController).reconcile("team-a/b")
    states = [w.body["status"]["admissionChecks"][0]["state"] for w in cluster.writes if w.kind == "Workload"]
    assert states == ["Ready", "Retry"]  # b sees a's cards as taken


def test_a_queues_stop_policy_wakes_its_instances_and_the_stop_covers_starting() -> None:
    queue = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "gpustack--nvidia-a10g-linux-amd64"},
        "spec": {"stopPolicy": "None"},
    }
    box = {
        "apiVersion": "worker.gpustack.ai/v1alpha1",
        "kind": "Instance",
        "metadata": {"name": "box", "namespace": "team-a"},
        "spec": {"type": "gpustack--nvidia-a10g-linux-amd64", "image": "i", "stop": False},
        "status": {"phase": "Starting"},
    }
    cluster, controllers = cluster_with(queue, box)
    drain(controllers.get(InstanceStopController))
    draining = copy.deepcopy(queue)
    draining["spec"]["stopPolicy"] = "HoldAndDrain"
    cluster.put(draining)
    assert drain(controllers.get(InstanceStopController)) == {"team-a/box"}
    controllers.get(InstanceStopController).reconcile("team-a/box")
    assert cluster.get(kinds.INSTANCE, "box", "team-a")["spec"]["stop"] is True


def test_a_devices_event_wakes_its_node_labels_and_its_models_pools() -> None:
    cluster, controllers = cluster_with()
    drain(controllers.get(FitLabelController))
    cluster.put(devices("node-x", cards=2, rows=[card_row(0, mode=1, allocated=M), card_row(1)]))
    assert drain(controllers.get(FitLabelController)) == {"node-x"}
    assert (
        controllers.get(StatusController).queue.get(timeout=2) == "gpustack--nvidia-a10g-linux-amd64"
    )  # after its coalescing delay
    controllers.get(FitLabelController).reconcile("node-x")
    labels = cluster.get(kinds.NODE, "node-x")["metadata"]["labels"]
    assert labels[naming.shared_fit_label(A10G)] == "1"
    writes = len(cluster.writes)
    controllers.get(FitLabelController).reconcile("node-x")
    assert len(cluster.writes) == writes  # written only when they change
