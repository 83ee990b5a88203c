"""What wakes the InstanceType status writer: its card model's ledgers and the Nodes (after its coalescing delay), its
own events and its ClusterQueue's."""

from __future__ import annotations

from gpuctl.cluster import kinds
from gpuctl.core import naming
from gpuctl.core.units import M
from gpuctl.operator.controllers.status import StatusController
from testbed.factories import card_row, devices, h100_devices, instancetype, node
from tests.unit.controllers.harness import A10G, A10G_TYPE, POOL, cluster_with, drain

CPU_TYPE = "gpustack--generic-linux-amd64"
DUE = StatusController.coalesce * 2
"""Long enough for a coalesced key to come due."""


def cluster_queue(name: str) -> dict[str, object]:
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": name}, "spec": {}}


def test_it_watches_ledgers_nodes_its_types_and_their_queues() -> None:
    _, controllers = cluster_with()
    watches = controllers.get(StatusController).watches()
    assert {w.kind for w in watches} == {kinds.DEVICES, kinds.NODE, kinds.INSTANCETYPE, kinds.CLUSTERQUEUE}
    delayed = {w.kind for w in watches if w.delay}
    assert delayed == {kinds.DEVICES, kinds.NODE}


def test_a_ledger_wakes_the_pools_of_its_card_model_only_after_the_delay() -> None:
    cluster, controllers = cluster_with(instancetype(acceleratable=False))
    status = controllers.get(StatusController)
    drain(status, DUE)
    cluster.put(devices("node-x", cards=2, rows=[card_row(0, mode=1, allocated=M), card_row(1)]))
    assert drain(status) == set()  # not yet: a burst of ledger changes is one write
    assert drain(status, DUE) == {A10G_TYPE}
    cluster.put(h100_devices("node-z"))
    assert drain(status, DUE) == set()  # no pool of that model


def test_a_node_that_comes_wakes_the_accelerated_pools_and_a_relabelled_one_none() -> None:
    """A CPU pool's view is its ClusterQueue's (nominal cores, reservation), so no Node event moves it."""
    cluster, controllers = cluster_with(instancetype(acceleratable=False))
    status = controllers.get(StatusController)
    drain(status, DUE)
    labels = {**POOL, naming.accelerator_label(A10G): "true"}
    cluster.put(node("node-z", labels=labels))
    assert drain(status, DUE) == {A10G_TYPE}
    cluster.put(node("node-z", labels={**labels, "rack": "r2"}))
    assert drain(status, DUE) == set()


def test_an_instancetype_wakes_itself_and_a_queue_its_pool() -> None:
    cluster, controllers = cluster_with(instancetype(acceleratable=False))
    status = controllers.get(StatusController)
    drain(status, DUE)
    cluster.put(instancetype(acceleratable=False, unit_ram="32Gi"))
    assert drain(status) == {CPU_TYPE}
    cluster.put(cluster_queue(A10G_TYPE))
    assert drain(status) == {A10G_TYPE}
    cluster.put(cluster_queue("team-b-cq"))  # no pool of that name
    assert drain(status, DUE) == set()


def test_a_queue_wakes_its_pool_only_when_what_the_status_is_written_from_changes() -> None:
    cluster, controllers = cluster_with(cluster_queue(A10G_TYPE))
    status = controllers.get(StatusController)
    drain(status, DUE)

    def queue(stop: str = "None", reserving: int = 1, pending: int = 0) -> dict[str, object]:
        return {
            **cluster_queue(A10G_TYPE),
            "spec": {"stopPolicy": stop},
            "status": {
                "reservingWorkloads": reserving,
                "pendingWorkloads": pending,
                "flavorsReservation": [
                    {"name": "f-a10g", "resources": [{"name": "credits.gpustack.ai/nvidia", "total": str(reserving)}]}
                ],
            },
        }

    cluster.put(queue(reserving=1))
    assert drain(status) == {A10G_TYPE}  # reservations outstanding now: its phase may move
    cluster.put(queue(reserving=2, pending=3))  # Kueue's counts move with every reservation: the status does not
    assert drain(status, DUE) == set()
    cluster.put(queue(stop="HoldAndDrain", reserving=2))
    assert drain(status) == {A10G_TYPE}
