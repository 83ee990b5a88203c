"""What wakes the keeper of the AdmissionCheck: the check's own events."""

from __future__ import annotations

from gpuctl.cluster import kinds
from gpuctl.core import naming
from gpuctl.operator.controllers.admission_check import ActiveCheckController
from tests.unit.controllers.harness import cluster_with, drain


def test_it_watches_the_admission_check_and_is_woken_by_its_events() -> None:
    cluster, controllers = cluster_with()
    active = controllers.get(ActiveCheckController)
    assert {w.kind for w in active.watches()} == {kinds.ADMISSIONCHECK}
    drain(active)
    cluster.put(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "AdmissionCheck",
            "metadata": {"name": naming.NODE_DEVICES_CHECK},
            "spec": {"controllerName": naming.NODE_DEVICES_CONTROLLER},
        }
    )
    assert drain(active) == {naming.NODE_DEVICES_CHECK}
