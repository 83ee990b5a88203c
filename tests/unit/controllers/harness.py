"""A pool of two A10G nodes on an in-memory cluster feeding the operator's cache, and the controllers on it."""

from __future__ import annotations

from typing import Any

from gpuctl.core import naming
from gpuctl.operator.cache import OperatorCache
from gpuctl.operator.controllers import Controller, Controllers
from gpuctl.operator.events import EventSink
from gpuctl.operator.metrics import Metrics
from testbed.factories import card_row, devices, flavor, instancetype, node, workload
from tests.memory_cluster import MemoryCluster

POOL = {"gpustack.ai/managed": "true", "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}
A10G = "nvidia-a10g"
A10G_TYPE = "gpustack--nvidia-a10g-linux-amd64"


def cluster_with(*objects: dict[str, Any], events: EventSink | None = None) -> tuple[MemoryCluster, Controllers]:
    cluster = MemoryCluster(
        [
            instancetype(),
            flavor("f-a10g"),
            devices("node-x", cards=2, rows=[card_row(0), card_row(1)]),
            devices("node-y", cards=2, rows=[card_row(0), card_row(1)]),
            node("node-x", labels={**POOL, naming.accelerator_label(A10G): "true"}),
            node("node-y", labels={**POOL, naming.accelerator_label(A10G): "true"}),
            *objects,
        ]
    )
    cache = OperatorCache(cluster)
    cluster.feed(cache)
    return cluster, Controllers(cache, cluster, Metrics(), events=events)


def drain(c: Controller, wait: float = 0.0) -> set[str]:
    """The keys in a controller's queue; with ``wait``, also those that come due within that many seconds."""
    keys = set()
    while (key := c.queue.get(timeout=wait)) is not None:
        keys.add(key)
        c.queue.done(key)
    return keys


def pending(name: str, node_name: str) -> dict[str, Any]:
    """A Workload with quota reserved on one node, waiting for the check."""
    return workload(name, [("main", 1, {"nvidia.com/gpu": "2"})], hosts={"main": [(node_name, 1)]})
