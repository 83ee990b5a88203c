"""The companion's check: it compares the verdict GPUStack's check wrote with the core's on the Workload as it stood
at reservation, reads the Pods from its cache, and writes nothing."""

from __future__ import annotations

from typing import Any

from gpuctl.core import naming
from gpuctl.core.shadow import Kind
from gpuctl.core.units import M
from gpuctl.operator.cache import OperatorCache
from gpuctl.operator.controllers import Controllers
from gpuctl.operator.controllers.check import CheckController
from gpuctl.operator.metrics import Metrics
from gpuctl.operator.shadow import ShadowBook
from testbed.factories import bound_pod, card_row, devices, flavor, instancetype, node, workload
from tests.memory_cluster import MemoryCluster
from tests.unit.controllers.harness import A10G, POOL


class Counting(MemoryCluster):
    """An in-memory cluster that counts the Pod lists a reconcile makes (the uncached read)."""

    pod_lists = 0

    def list(self, kind: Any, **kw: Any) -> list[dict[str, Any]]:
        if kind.kind == "Pod" and kw.get("field_selector"):
            self.pod_lists += 1
        return super().list(kind, **kw)


def companion(*objects: dict[str, Any]) -> tuple[Counting, CheckController, ShadowBook]:
    cluster = Counting(
        [
            instancetype(),
            flavor("f-a10g"),
            devices("node-x", cards=2, rows=[card_row(0), card_row(1)]),
            node("node-x", labels={**POOL, naming.accelerator_label(A10G): "true"}),
            *objects,
        ]
    )
    cache = OperatorCache(cluster)
    cluster.feed(cache)
    book = ShadowBook(0.0)
    controllers = Controllers(cache, cluster, Metrics(), shadow=book)
    return cluster, controllers.get(CheckController), book


def judged(state: str) -> dict[str, Any]:
    """One card asked on node-x, its reservation judged ``state`` by GPUStack's check."""
    return workload("w", [("main", 1, {"nvidia.com/gpu": "1"})], hosts={"main": [("node-x", 1)]}, check_state=state)


def holding(card: int) -> dict[str, Any]:
    return bound_pod(
        f"held-{card}",
        "node-x",
        {"nvidia.com/gpu": "1"},
        workload_name=None,
        allocations={"main": [{"id": f"GPU-{card:04d}", "index": card, "mode": 1, "allocated": M}]},
    )


def test_a_ready_the_ledger_backs_says_nothing_and_nothing_is_written() -> None:
    cluster, check, book = companion(judged("Ready"))
    writes = len(cluster.writes)
    check.reconcile("team-a/w")
    assert book.reported() == [] and len(cluster.writes) == writes
    assert cluster.pod_lists == 0  # the companion reads the Pods from its cache


def test_a_ready_where_the_ledger_says_retry_is_reported_with_both_values() -> None:
    cluster, check, book = companion(judged("Ready"), holding(0), holding(1))
    writes = len(cluster.writes)
    check.reconcile("team-a/w")
    [d] = book.reported()
    assert (d.kind, d.object, d.published, d.computed) == (Kind.VERDICT, "Workload/team-a/w", "Ready", "Retry")
    assert "node-x" in d.reason
    assert len(cluster.writes) == writes and cluster.pod_lists == 0


def test_a_verdict_not_written_yet_is_not_compared() -> None:
    _, check, book = companion(judged("Pending"), holding(0), holding(1))
    check.reconcile("team-a/w")
    assert book.reported() == []
