"""What wakes gate 3's check: each kind it watches, and only the Workloads an event can change."""

from __future__ import annotations

import copy

from gpuctl.cluster import kinds
from gpuctl.core import naming
from gpuctl.core.units import M
from gpuctl.operator.controllers.check import CheckController
from testbed.factories import bound_pod, card_row, devices, flavor, node, workload
from tests.unit.controllers.harness import A10G, POOL, cluster_with, drain, pending


def test_it_watches_workloads_pods_devices_nodes_and_flavors() -> None:
    _, controllers = cluster_with()
    watched = {w.kind for w in controllers.get(CheckController).watches()}
    assert watched == {kinds.WORKLOAD, kinds.POD, kinds.DEVICES, kinds.NODE, kinds.RESOURCEFLAVOR}


def test_a_workloads_own_event_wakes_it() -> None:
    cluster, controllers = cluster_with(pending("on-x", "node-x"), pending("on-y", "node-y"))
    check = controllers.get(CheckController)
    drain(check)
    changed = copy.deepcopy(cluster.get(kinds.WORKLOAD, "on-y", "team-a"))
    assert changed is not None
    changed["metadata"]["labels"] = {"touched": "yes"}
    cluster.put(changed)
    assert drain(check) == {"team-a/on-y"}


def test_a_pod_on_a_node_wakes_the_workloads_waiting_there_only() -> None:
    cluster, controllers = cluster_with(pending("on-x", "node-x"), pending("on-y", "node-y"))
    check = controllers.get(CheckController)
    drain(check)
    cluster.put(bound_pod("p", "node-x", {"nvidia.com/gpu": "1"}, workload_name=None))
    assert drain(check) == {"team-a/on-x"}


def test_a_devices_event_wakes_the_workloads_waiting_on_its_node_only() -> None:
    cluster, controllers = cluster_with(pending("on-x", "node-x"), pending("on-y", "node-y"))
    check = controllers.get(CheckController)
    drain(check)
    cluster.put(devices("node-y", cards=2, rows=[card_row(0, mode=1, allocated=M), card_row(1)]))
    assert drain(check) == {"team-a/on-y"}


def test_a_node_wakes_its_workloads_when_its_labels_or_keys_change_and_not_otherwise() -> None:
    cluster, controllers = cluster_with(pending("on-x", "node-x"), pending("on-y", "node-y"))
    check = controllers.get(CheckController)
    drain(check)
    annotated = node("node-x", labels={**POOL, naming.accelerator_label(A10G): "true"})
    annotated["metadata"]["annotations"] = {"note": "read by nothing"}
    cluster.put(annotated)
    assert drain(check) == set()
    cluster.put(node("node-x", labels={**POOL, naming.accelerator_label(A10G): "true", "rack": "r2"}))
    assert drain(check) == {"team-a/on-x"}


def test_a_flavor_change_wakes_every_workload_waiting_for_the_check() -> None:
    admitted = workload(
        "admitted", [("main", 1, {"nvidia.com/gpu": "1"})], hosts={"main": [("node-x", 1)]}, admitted=True
    )
    cluster, controllers = cluster_with(pending("on-x", "node-x"), pending("on-y", "node-y"), admitted)
    check = controllers.get(CheckController)
    drain(check)
    cluster.put(flavor("f-a10g", count=2))
    assert drain(check) == {"team-a/on-x", "team-a/on-y"}


def test_a_workload_that_frees_its_cards_wakes_the_others_waiting_on_its_node() -> None:
    first = workload(
        "first", [("main", 1, {"nvidia.com/gpu": "2"})], hosts={"main": [("node-x", 1)]}, check_state="Ready"
    )
    cluster, controllers = cluster_with(first, pending("second", "node-x"), pending("elsewhere", "node-y"))
    check = controllers.get(CheckController)
    drain(check)
    finished = copy.deepcopy(cluster.get(kinds.WORKLOAD, "first", "team-a"))
    assert finished is not None
    finished["status"]["conditions"].append({"type": "Finished", "status": "True", "reason": "Finished"})
    cluster.put(finished)
    assert drain(check) == {"team-a/first", "team-a/second"}
