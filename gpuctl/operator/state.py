"""What the operator knows of the cluster: one consistent read of every object its webhooks and controllers use,
parsed into core records, refreshed as a whole on each resync (level-triggered: every pass sees the full state)."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuctl.cluster import kinds
from gpuctl.cluster.errors import SourceError
from gpuctl.cluster.live import LiveSource
from gpuctl.core import naming
from gpuctl.core.instancetypes import InstanceType, parse_instancetype
from gpuctl.core.kvcache import KVCacheContext, parse_kvcache_backend, parse_kvcache_pool, parse_kvcache_pool_binding
from gpuctl.core.ledger import LedgerError, NodeDevices, parse_devices
from gpuctl.core.nodes import Node, parse_node
from gpuctl.core.pins import PinContext
from gpuctl.core.pods import Pod, parse_pod
from gpuctl.core.webhooks import WebhookContext
from gpuctl.core.workloads import (
    ClusterQueue,
    ResourceFlavor,
    Workload,
    parse_cluster_queue,
    parse_local_queue,
    parse_resource_flavor,
    parse_workload,
)


@dataclass(frozen=True)
class ClusterState:
    instancetypes: Mapping[str, InstanceType] = field(default_factory=dict)
    raw_instancetypes: Mapping[str, dict[str, Any]] = field(default_factory=dict)
    local_queues: Mapping[tuple[str, str], str] = field(default_factory=dict)
    cluster_queues: Mapping[str, ClusterQueue] = field(default_factory=dict)
    flavors: Mapping[str, ResourceFlavor] = field(default_factory=dict)
    devices: Mapping[str, NodeDevices] = field(default_factory=dict)
    nodes: Mapping[str, Node] = field(default_factory=dict)
    workloads: tuple[Workload, ...] = ()
    pods: tuple[Pod, ...] = ()
    instances: tuple[dict[str, Any], ...] = ()
    kvcache: KVCacheContext = field(default_factory=KVCacheContext)
    read_at: float = 0.0


def _optional(source: LiveSource, kind: kinds.Kind) -> list[dict[str, Any]]:
    try:
        return source.list(kind)
    except SourceError as exc:
        if "is not served" in str(exc):
            return []
        raise


def read_state(source: LiveSource, *, webhook_only: bool = False) -> ClusterState:
    """One read of everything (the webhook's share only, when ``webhook_only``)."""
    raw_types = {str(o["metadata"]["name"]): o for o in _optional(source, kinds.INSTANCETYPE)}
    local_queues = {
        (q.namespace, q.name): q.cluster_queue
        for q in (parse_local_queue(o) for o in _optional(source, kinds.LOCALQUEUE))
    }
    queues = {q.name: q for q in (parse_cluster_queue(o) for o in _optional(source, kinds.CLUSTERQUEUE))}
    kv = KVCacheContext.of(
        [parse_kvcache_pool_binding(o) for o in _optional(source, kinds.KVCACHE_BINDING)],
        [parse_kvcache_pool(o) for o in _optional(source, kinds.KVCACHE_POOL)],
        [parse_kvcache_backend(o) for o in _optional(source, kinds.KVCACHE_BACKEND)],
    )
    base = ClusterState(
        instancetypes={n: parse_instancetype(o) for n, o in raw_types.items()},
        raw_instancetypes=raw_types,
        local_queues=local_queues,
        cluster_queues=queues,
        kvcache=kv,
        read_at=time.monotonic(),
    )
    if webhook_only:
        return base
    return ClusterState(
        instancetypes=base.instancetypes,
        raw_instancetypes=raw_types,
        local_queues=local_queues,
        cluster_queues=queues,
        kvcache=kv,
        flavors={f.name: f for f in (parse_resource_flavor(o) for o in _optional(source, kinds.RESOURCEFLAVOR))},
        devices=_parsed_devices(_optional(source, kinds.DEVICES)),
        nodes={n.name: n for n in (parse_node(o) for o in source.list(kinds.NODE))},
        workloads=tuple(parse_workload(o) for o in _optional(source, kinds.WORKLOAD)),
        pods=tuple(p for p in (parse_pod(o) for o in source.list(kinds.POD)) if p.node_name or p.workload),
        instances=tuple(_optional(source, kinds.INSTANCE)),
        read_at=base.read_at,
    )


def _parsed_devices(objs: list[dict[str, Any]]) -> dict[str, NodeDevices]:
    """Each readable Devices; one that cannot be read is logged and left out (its node serves nothing) rather than
    stopping every controller."""
    import logging

    out = {}
    for o in objs:
        try:
            d = parse_devices(o)
        except LedgerError as exc:
            logging.getLogger("gpuctl.operator").warning("skipping an unreadable Devices: %s", exc)
            continue
        out[d.node] = d
    return out


class StateCache:
    """The latest ClusterState, shared by the webhook server's threads and the controller loop."""

    def __init__(
        self, source: LiveSource, *, cpu_aware: bool = False, overcommit: bool = True, fit_affinity: bool = True
    ) -> None:
        self.source = source
        self.cpu_aware = cpu_aware
        self.overcommit = overcommit
        self.fit_affinity = fit_affinity
        self._state = ClusterState()
        self._lock = threading.Lock()
        self._miss_lock = threading.Lock()
        self._miss_refreshed = 0.0
        self.loaded = threading.Event()

    @property
    def state(self) -> ClusterState:
        return self._state

    def refresh(self, *, webhook_only: bool = False) -> ClusterState:
        state = read_state(self.source, webhook_only=webhook_only)
        with self._lock:
            if webhook_only:
                current = self._state
                state = ClusterState(
                    instancetypes=state.instancetypes,
                    raw_instancetypes=state.raw_instancetypes,
                    local_queues=state.local_queues,
                    cluster_queues=state.cluster_queues,
                    kvcache=state.kvcache,
                    flavors=current.flavors,
                    devices=current.devices,
                    nodes=current.nodes,
                    workloads=current.workloads,
                    pods=current.pods,
                    instances=current.instances,
                    read_at=state.read_at,
                )
            self._state = state
        self.loaded.set()
        return state

    def webhook_context(self, namespace: str, obj: Any = None) -> WebhookContext:
        state = self._state
        if _names_unknown_queue(obj, state):
            # An object naming one of this operator's queues (or types) that this cache has not seen yet: read again
            # before answering, at most once a second however many requests ask.
            with self._miss_lock:
                if time.monotonic() - self._miss_refreshed > 1.0:
                    try:
                        state = self.refresh(webhook_only=True)
                    finally:
                        self._miss_refreshed = time.monotonic()
                else:
                    state = self._state
        kv = state.kvcache
        kv = KVCacheContext(kv.bindings, kv.pools, kv.backends, namespace, kv.kv_cache_dtype_owned)
        cq_labels = {n: q.labels for n, q in state.cluster_queues.items()}
        return WebhookContext(
            instancetypes=tuple(state.instancetypes.values()),
            kvcache=kv,
            pins=PinContext(state.local_queues, cq_labels, state.instancetypes, enabled=self.fit_affinity),
            cpu_aware=self.cpu_aware,
            overcommit=self.overcommit,
            flavors=tuple(state.flavors.values()),
            stop_policies={n: q.stop_policy for n, q in state.cluster_queues.items()},
        )


def _names_unknown_queue(obj: Any, state: ClusterState) -> bool:
    if not isinstance(obj, dict):
        return False
    meta = _mapping(obj.get("metadata"))
    labels = _mapping(meta.get("labels"))
    queue = labels.get(naming.LABEL_QUEUE_NAME)
    if isinstance(queue, str):
        if not queue.startswith(naming.ENTRANCE_PREFIX):
            return False  # another tenant's queue: no InstanceType of ours fronts it
        return not any(t.labels.get(naming.LABEL_QUEUE_ENTRANCE) == queue for t in state.instancetypes.values())
    spec = _mapping(obj.get("spec"))
    workload_queue = spec.get("queueName")
    if isinstance(workload_queue, str) and workload_queue.startswith(naming.ENTRANCE_PREFIX):
        return (str(meta.get("namespace") or "default"), workload_queue) not in state.local_queues
    type_name = spec.get("type")
    if isinstance(type_name, str) and obj.get("kind") == "Instance":
        return type_name not in state.instancetypes
    return False


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}
