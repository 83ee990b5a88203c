"""What wakes the fit-label writer: a node's ledger and the Node itself."""

from __future__ import annotations

from gpuctl.cluster import kinds
from gpuctl.core import naming
from gpuctl.core.units import M
from gpuctl.operator.controllers.fit_labels import FitLabelController
from testbed.factories import card_row, devices, node
from tests.unit.controllers.harness import A10G, POOL, cluster_with, drain


def test_it_watches_ledgers_and_nodes() -> None:
    _, controllers = cluster_with()
    assert {w.kind for w in controllers.get(FitLabelController).watches()} == {kinds.DEVICES, kinds.NODE}


def test_a_ledger_wakes_its_node_and_a_node_itself() -> None:
    cluster, controllers = cluster_with()
    fit = controllers.get(FitLabelController)
    drain(fit)
    cluster.put(devices("node-y", cards=2, rows=[card_row(0, mode=1, allocated=M), card_row(1)]))
    assert drain(fit) == {"node-y"}
    cluster.put(node("node-x", labels={**POOL, naming.accelerator_label(A10G): "true", "rack": "r2"}))
    assert drain(fit) == {"node-x"}
