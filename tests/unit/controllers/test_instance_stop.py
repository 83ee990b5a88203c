"""What wakes the running-instance stop: an Instance itself, its type's deletion, its queue's stop policy."""

from __future__ import annotations

import copy
from typing import Any

from gpuctl.cluster import kinds
from gpuctl.operator.controllers.instance_stop import InstanceStopController
from testbed.factories import instancetype
from tests.unit.controllers.harness import A10G_TYPE, cluster_with, drain

CPU_TYPE = "gpustack--generic-linux-amd64"


def instance(name: str, type_name: str) -> dict[str, Any]:
    return {
        "apiVersion": "worker.gpustack.ai/v1alpha1",
        "kind": "Instance",
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {"type": type_name, "image": "i", "stop": False},
        "status": {"phase": "Running"},
    }


def queue(name: str, policy: str = "None") -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {"stopPolicy": policy},
    }


def test_it_watches_instances_their_types_and_queues() -> None:
    _, controllers = cluster_with()
    watched = {w.kind for w in controllers.get(InstanceStopController).watches()}
    assert watched == {kinds.INSTANCE, kinds.INSTANCETYPE, kinds.CLUSTERQUEUE}


def test_an_instance_wakes_itself() -> None:
    cluster, controllers = cluster_with(instance("box", A10G_TYPE))
    stops = controllers.get(InstanceStopController)
    drain(stops)
    changed = instance("box", A10G_TYPE)
    changed["spec"]["image"] = "j"
    cluster.put(changed)
    assert drain(stops) == {"team-a/box"}


def test_a_type_being_deleted_wakes_its_instances_only() -> None:
    cpu = instancetype(acceleratable=False)
    cluster, controllers = cluster_with(cpu, instance("box", A10G_TYPE), instance("cpu-box", CPU_TYPE))
    stops = controllers.get(InstanceStopController)
    drain(stops)
    relabelled = copy.deepcopy(cpu)
    relabelled["metadata"]["labels"]["touched"] = "yes"
    cluster.put(relabelled)
    assert drain(stops) == set()  # a type that stays: nothing to stop
    deleting = copy.deepcopy(cpu)
    deleting["metadata"]["deletionTimestamp"] = "2026-12-01T00:00:00Z"
    cluster.put(deleting)
    assert drain(stops) == {"team-a/cpu-box"}
    cluster.delete(deleting)
    assert drain(stops) == {"team-a/cpu-box"}


def test_a_queue_wakes_its_pools_instances_when_its_stop_policy_changes_only() -> None:
    cluster, controllers = cluster_with(queue(A10G_TYPE), instance("box", A10G_TYPE))
    stops = controllers.get(InstanceStopController)
    drain(stops)
    labelled = queue(A10G_TYPE)
    labelled["metadata"]["labels"] = {"touched": "yes"}
    cluster.put(labelled)
    assert drain(stops) == set()
    cluster.put(queue(A10G_TYPE, "HoldAndDrain"))
    assert drain(stops) == {"team-a/box"}
