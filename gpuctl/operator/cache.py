"""What the operator knows of the cluster: one watch-fed store per kind, parsed into core records as events arrive,
with the indexes the controllers need, so judging one Workload costs what its own nodes hold, never a scan.

- Stores: Nodes, Pods (those bound to a node or owned by a Workload), Devices, InstanceTypes, Instances, Kueue's
  flavors, queues, Workloads and AdmissionChecks, and the KV-cache objects.
- Indexes: Pods and Workloads by node, Pods by Workload, Devices by accelerator model, Instances by InstanceType.
- Listeners: every applied event is passed on (under the cache lock) so controllers can map it to work; a listener only
  queues keys.
- Webhooks read an immutable context rebuilt when one of the kinds they read changes, so a review never waits on a
  controller; they are ready once those kinds are synced, whatever the rest of the cache is doing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpuctl.cluster import kinds
from gpuctl.cluster.informer import Informer, WatchSource
from gpuctl.cluster.kinds import Kind
from gpuctl.core import naming
from gpuctl.core.instancetypes import InstanceType, parse_instancetype
from gpuctl.core.kvcache import KVCacheContext, parse_kvcache_backend, parse_kvcache_pool, parse_kvcache_pool_binding
from gpuctl.core.ledger import LedgerError, NodeDevices, parse_devices, split_orphans
from gpuctl.core.nodes import Node, parse_node
from gpuctl.core.pins import PinContext
from gpuctl.core.pods import Pod, parse_pod
from gpuctl.core.webhooks import WebhookContext
from gpuctl.core.workloads import (
    AdmissionCheck,
    ClusterQueue,
    LocalQueue,
    ResourceFlavor,
    Workload,
    parse_admission_check,
    parse_cluster_queue,
    parse_local_queue,
    parse_resource_flavor,
    parse_workload,
)

log = logging.getLogger("gpuctl.operator")


@dataclass(frozen=True, slots=True)
class CachedInstanceType:
    """An InstanceType's record, with its stored status and resourceVersion (what the status writer compares)."""

    record: InstanceType
    status: Mapping[str, Any]
    resource_version: str
    uid: str = ""


@dataclass(frozen=True, slots=True)
class CachedCheck:
    record: AdmissionCheck
    conditions: tuple[Mapping[str, Any], ...]


def _instancetype(obj: dict[str, Any]) -> CachedInstanceType:
    meta = obj.get("metadata") or {}
    return CachedInstanceType(
        parse_instancetype(obj),
        dict(obj.get("status") or {}),
        str(meta.get("resourceVersion") or ""),
        str(meta.get("uid") or ""),
    )


def _devices(obj: dict[str, Any]) -> NodeDevices | None:
    try:
        return parse_devices(obj)
    except LedgerError as exc:
        log.warning("skipping an unreadable Devices: %s", exc)
        return None


def _pod(obj: dict[str, Any]) -> Pod | None:
    """A Pod the controllers read: bound to a node (its allocation record feeds the ledger) or owned by a Workload."""
    pod = parse_pod(obj)
    return pod if pod.node_name or pod.workload else None


def _check(obj: dict[str, Any]) -> CachedCheck:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return CachedCheck(parse_admission_check(obj), tuple(c for c in conditions if isinstance(c, dict)))


def _instance(obj: dict[str, Any]) -> dict[str, Any]:
    """An Instance as the stop rule reads it: metadata, spec and the status phase (its allocations are dropped)."""
    status = obj.get("status") or {}
    return {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "metadata": obj.get("metadata") or {},
        "spec": obj.get("spec") or {},
        "status": {"phase": status.get("phase")} if isinstance(status, dict) else {},
    }


WEBHOOK_KINDS: tuple[Kind, ...] = (
    kinds.INSTANCETYPE,
    kinds.LOCALQUEUE,
    kinds.CLUSTERQUEUE,
    kinds.RESOURCEFLAVOR,
    kinds.KVCACHE_BINDING,
    kinds.KVCACHE_POOL,
    kinds.KVCACHE_BACKEND,
)
"""The kinds the webhooks read: the webhooks are ready once these are synced."""

PARSERS: dict[Kind, Callable[[dict[str, Any]], Any]] = {
    kinds.INSTANCETYPE: _instancetype,
    kinds.LOCALQUEUE: parse_local_queue,
    kinds.CLUSTERQUEUE: parse_cluster_queue,
    kinds.RESOURCEFLAVOR: parse_resource_flavor,
    kinds.KVCACHE_BINDING: parse_kvcache_pool_binding,
    kinds.KVCACHE_POOL: parse_kvcache_pool,
    kinds.KVCACHE_BACKEND: parse_kvcache_backend,
    kinds.ADMISSIONCHECK: _check,
    kinds.NODE: parse_node,
    kinds.DEVICES: _devices,
    kinds.WORKLOAD: parse_workload,
    kinds.POD: _pod,
    kinds.INSTANCE: _instance,
}
OPTIONAL = frozenset(
    {kinds.KVCACHE_BINDING, kinds.KVCACHE_POOL, kinds.KVCACHE_BACKEND, kinds.INSTANCE, kinds.INSTANCETYPE}
)
"""Kinds a cluster may not serve yet (their APIs installed separately): a missing API reads as empty."""

MISS_MEMORY = 30.0
"""Seconds a queue or type name that stayed unknown is answered from the cache without waiting again."""

Listener = Callable[[Kind, str, str, Any, Any], None]
"""``(kind, event, key, old record, new record)``."""


def _add(index: dict[str, set[str]], key: str, value: str) -> None:
    index.setdefault(key, set()).add(value)


def _drop(index: dict[str, set[str]], key: str, value: str) -> None:
    values = index.get(key)
    if values is not None:
        values.discard(value)
        if not values:
            del index[key]


class ChangeLog:
    """Which nodes and which Workloads the cache's events touched, in the order they did: what is computed from the
    cache node by node (the usage gauges, the holder series) is computed again only for what changed since.

    A node is touched by its Node's, its Devices' and its Pods' events, and by an event of a Workload whose Pods run
    on it; a Workload (``namespace/name`` as Pods name it, a Concurrent Admission family by its parent's name) by its
    own events and its Pods'. Each is kept once, at its last touch (``serial``); past :data:`CHANGES_KEPT` the
    oldest half is forgotten, and a reader from before it is told to read everything again."""

    def __init__(self, kept: int = 0) -> None:
        self.serial = 0
        self.kept = kept or CHANGES_KEPT
        self._nodes: dict[str, int] = {}
        self._workloads: dict[str, int] = {}
        self._forgotten = 0
        """The last serial forgotten: a reader from before it cannot be told what changed."""

    def touch(self, nodes: Iterable[str] = (), workloads: Iterable[str] = ()) -> None:
        self.serial += 1
        for log, keys in ((self._nodes, nodes), (self._workloads, workloads)):
            for key in keys:
                if key:
                    log.pop(key, None)  # kept in the order of the last touch
                    log[key] = self.serial
            if len(log) > self.kept:
                for key in list(log)[: len(log) // 2]:
                    self._forgotten = max(self._forgotten, log.pop(key))

    def since(self, serial: int) -> tuple[set[str], set[str]] | None:
        """The nodes and Workloads touched after ``serial``; None when some of it is forgotten."""
        if serial < self._forgotten:
            return None
        out: tuple[set[str], set[str]] = (set(), set())
        for found, log in zip(out, (self._nodes, self._workloads), strict=True):
            for key, at in reversed(log.items()):
                if at <= serial:
                    break
                found.add(key)
        return out


CHANGES_KEPT = 200_000
"""Nodes and Workloads the change log remembers, each (a reader far behind reads everything again)."""


def workload_nodes(w: Workload) -> set[str]:
    """The nodes a Workload's topology assignment names (hostname level)."""
    return {node for a in w.assignments for node, _ in (a.hostnames or [])}


def devices_models(d: NodeDevices) -> set[str]:
    return {g.accelerator_key for g in d.groups}


class OperatorCache:
    """The watch-fed stores of every kind the operator reads, their indexes, and the webhooks' context."""

    def __init__(
        self,
        source: WatchSource,
        *,
        cpu_aware: bool = False,
        overcommit: bool = True,
        fit_affinity: bool = True,
        watch_seconds: int = 60,
        page_size: int = 500,
    ) -> None:
        self.cpu_aware = cpu_aware
        self.overcommit = overcommit
        self.fit_affinity = fit_affinity
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.listeners: list[Listener] = []
        self.pods_by_node: dict[str, set[str]] = {}
        self.pods_by_workload: dict[str, set[str]] = {}
        self.workloads_by_node: dict[str, set[str]] = {}
        self.devices_by_model: dict[str, set[str]] = {}
        self.instances_by_type: dict[str, set[str]] = {}
        self.workloads_by_owner: dict[str, set[str]] = {}
        """Workloads by the ``namespace/name`` their Pods carry (a Concurrent Admission family under its parent)."""
        self.changes = ChangeLog()
        self.generations: dict[Kind, int] = dict.fromkeys(PARSERS, 0)
        """Events applied per kind: what is computed from the cache can be reused while the kinds it read stay put."""
        self._webhook_version = 0
        self._webhook_context: tuple[int, WebhookContext] | None = None
        self._waiting = threading.Lock()
        self._miss_until: dict[str, float] = {}
        self.informers: dict[Kind, Informer[Any]] = {
            kind: Informer(
                source,
                kind,
                parse,
                handler=self._handler(kind),
                lock=self.lock,
                watch_seconds=watch_seconds,
                optional=kind in OPTIONAL,
                page_size=page_size,
            )
            for kind, parse in PARSERS.items()
        }

    # ------------------------------------------------------------------------------------------- running

    def start(self) -> None:
        # The webhooks' kinds first: they are small, and the webhooks wait on nothing else.
        for kind in (*WEBHOOK_KINDS, *(k for k in self.informers if k not in WEBHOOK_KINDS)):
            self.informers[kind].start()

    def stop(self) -> None:
        for informer in self.informers.values():
            informer.stop()

    def webhooks_synced(self) -> bool:
        return all(self.informers[k].synced.is_set() for k in WEBHOOK_KINDS)

    def synced(self) -> bool:
        return all(i.synced.is_set() for i in self.informers.values())

    def wait_synced(self, timeout: float | None = None) -> bool:
        return all(informer.synced.wait(timeout) for informer in self.informers.values())

    def generation(self, kinds_: Iterable[Kind]) -> tuple[int, ...]:
        """How many events of each of these kinds the cache has applied: equal twice, nothing of them changed."""
        return tuple(self.generations[k] for k in kinds_)

    def version(self, kind: Kind) -> str:
        """The resourceVersion the kind's store is at ("" before its first list)."""
        return self.informers[kind].resource_version

    def contact_age(self, kinds_: Iterable[Kind] | None = None) -> float:
        """Seconds since the least recently heard-from informer (of ``kinds_``, all by default) heard the API."""
        chosen = [self.informers[k] for k in kinds_] if kinds_ is not None else list(self.informers.values())
        return max((i.contact_age() for i in chosen), default=0.0)

    # ------------------------------------------------------------------------------------------- events

    def _handler(self, kind: Kind) -> Callable[[str, str, Any, Any], None]:
        def handle(event: str, key: str, old: Any, new: Any) -> None:
            self.generations[kind] += 1
            self._index(kind, key, old, new)
            if kind in WEBHOOK_KINDS:
                self._webhook_version += 1
                self.changed.notify_all()
            for listener in self.listeners:
                listener(kind, event, key, old, new)

        return handle

    def _index(self, kind: Kind, key: str, old: Any, new: Any) -> None:
        if kind == kinds.POD:
            for pod, index in ((old, _drop), (new, _add)):
                if pod is None:
                    continue
                if pod.node_name:
                    index(self.pods_by_node, pod.node_name, key)
                if pod.workload:
                    index(self.pods_by_workload, f"{pod.namespace}/{pod.workload}", key)
            self.changes.touch(
                (p.node_name for p in (old, new) if p is not None),
                (f"{p.namespace}/{p.workload}" for p in (old, new) if p is not None and p.workload),
            )
        elif kind == kinds.WORKLOAD:
            for node in workload_nodes(old) if old is not None else ():
                _drop(self.workloads_by_node, node, key)
            for node in workload_nodes(new) if new is not None else ():
                _add(self.workloads_by_node, node, key)
            owners = {f"{w.namespace}/{w.pod_owner}" for w in (old, new) if w is not None}
            if old is not None:
                _drop(self.workloads_by_owner, f"{old.namespace}/{old.pod_owner}", key)
            if new is not None:
                _add(self.workloads_by_owner, f"{new.namespace}/{new.pod_owner}", key)
            pods = self.store(kinds.POD)
            nodes = {pods[k].node_name for o in owners for k in self.pods_by_workload.get(o, ()) if k in pods}
            self.changes.touch(nodes, owners)
        elif kind == kinds.NODE:
            self.changes.touch((key,))
        elif kind == kinds.DEVICES:
            self.changes.touch((key,))
            for model in devices_models(old) if old is not None else ():
                _drop(self.devices_by_model, model, old.node)
            for model in devices_models(new) if new is not None else ():
                _add(self.devices_by_model, model, new.node)
        elif kind == kinds.INSTANCE:
            for obj, index in ((old, _drop), (new, _add)):
                if obj is not None:
                    index(self.instances_by_type, str(obj["spec"].get("type") or ""), key)

    # ------------------------------------------------------------------------------------------- reads

    def store(self, kind: Kind) -> dict[str, Any]:
        return self.informers[kind].store

    def records(self, kind: Kind) -> list[Any]:
        """A copy of every record of a kind, taken under the lock (safe from any thread)."""
        with self.lock:
            return list(self.informers[kind].store.values())

    def node(self, name: str) -> Node | None:
        node: Node | None = self.store(kinds.NODE).get(name)
        return node

    def devices(self, node: str) -> NodeDevices | None:
        devices: NodeDevices | None = self.store(kinds.DEVICES).get(node)
        return devices

    def workload(self, key: str) -> Workload | None:
        w: Workload | None = self.store(kinds.WORKLOAD).get(key)
        return w

    def workloads_owning(self, owner: str) -> list[Workload]:
        """The Workloads whose Pods carry ``owner`` (``namespace/name``): one, or a Concurrent Admission family."""
        with self.lock:
            store = self.store(kinds.WORKLOAD)
            return [store[k] for k in sorted(self.workloads_by_owner.get(owner, ())) if k in store]

    def pods_of(self, owner: str) -> list[Pod]:
        """The Pods that name the Workload ``owner`` (``namespace/name``)."""
        with self.lock:
            store = self.store(kinds.POD)
            return [store[k] for k in sorted(self.pods_by_workload.get(owner, ())) if k in store]

    def served_devices(self, node: str) -> NodeDevices | None:
        """A node's ledger, when its Node exists (:meth:`all_devices`, for one node)."""
        with self.lock:
            d: NodeDevices | None = self.store(kinds.DEVICES).get(node)
            served = split_orphans([d], self.store(kinds.NODE)).served if d is not None else []
            return served[0] if served else None

    def workloads_on(self, nodes: Iterable[str]) -> list[Workload]:
        with self.lock:
            keys = {k for n in nodes for k in self.workloads_by_node.get(n, ())}
            store = self.store(kinds.WORKLOAD)
            return [store[k] for k in sorted(keys) if k in store]

    def pods_on(self, node: str) -> list[Pod]:
        with self.lock:
            store = self.store(kinds.POD)
            return [store[k] for k in self.pods_by_node.get(node, ()) if k in store]

    def pool_devices(self, accelerator_key: str) -> list[NodeDevices]:
        """The ledgers of one accelerator model whose Node exists (an orphan's cards count nowhere)."""
        with self.lock:
            store = self.store(kinds.DEVICES)
            found = (store[n] for n in sorted(self.devices_by_model.get(accelerator_key, ())) if n in store)
            return split_orphans(found, self.store(kinds.NODE)).served

    def instancetypes(self) -> dict[str, CachedInstanceType]:
        with self.lock:
            return dict(self.store(kinds.INSTANCETYPE))

    def cluster_queue(self, name: str) -> ClusterQueue | None:
        q: ClusterQueue | None = self.store(kinds.CLUSTERQUEUE).get(name)
        return q

    def flavors(self) -> dict[str, ResourceFlavor]:
        with self.lock:
            return dict(self.store(kinds.RESOURCEFLAVOR))

    def nodes(self) -> dict[str, Node]:
        with self.lock:
            return dict(self.store(kinds.NODE))

    def all_devices(self) -> list[NodeDevices]:
        """Every ledger whose Node exists."""
        with self.lock:
            return split_orphans(self.store(kinds.DEVICES).values(), self.store(kinds.NODE)).served

    def instances_of(self, instancetype: str) -> list[dict[str, Any]]:
        with self.lock:
            store = self.store(kinds.INSTANCE)
            return [store[k] for k in sorted(self.instances_by_type.get(instancetype, ())) if k in store]

    def keys(self, kind: Kind) -> list[str]:
        with self.lock:
            return list(self.store(kind))

    # ------------------------------------------------------------------------------------------- webhooks

    def _build_webhook_context(self) -> WebhookContext:
        types = [c.record for c in self.store(kinds.INSTANCETYPE).values()]
        queues: dict[str, ClusterQueue] = self.store(kinds.CLUSTERQUEUE)
        local: dict[str, LocalQueue] = self.store(kinds.LOCALQUEUE)
        kv = KVCacheContext.of(
            self.store(kinds.KVCACHE_BINDING).values(),
            self.store(kinds.KVCACHE_POOL).values(),
            self.store(kinds.KVCACHE_BACKEND).values(),
        )
        return WebhookContext(
            instancetypes=tuple(types),
            kvcache=kv,
            pins=PinContext(
                {(q.namespace, q.name): q.cluster_queue for q in local.values()},
                {n: q.labels for n, q in queues.items()},
                {t.name: t for t in types},
                enabled=self.fit_affinity,
            ),
            cpu_aware=self.cpu_aware,
            overcommit=self.overcommit,
            flavors=tuple(self.store(kinds.RESOURCEFLAVOR).values()),
            stop_policies={n: q.stop_policy for n, q in queues.items()},
        )

    def _context(self) -> WebhookContext:
        cached = self._webhook_context
        if cached is not None and cached[0] == self._webhook_version:
            return cached[1]  # the common case takes no lock: a review never waits on an informer
        with self.lock:
            cached = self._webhook_context
            if cached is None or cached[0] != self._webhook_version:
                cached = (self._webhook_version, self._build_webhook_context())
                self._webhook_context = cached
            return cached[1]

    def webhook_context(self, namespace: str, obj: Any = None, *, wait: float = 0.5) -> WebhookContext:
        """The webhooks' context.

        An object naming one of this operator's queues or types the cache has not seen yet waits up to ``wait`` seconds
        for the watch to deliver it (a type created a moment before its Pod). One review waits at a time, and a name
        that stayed unknown is not waited for again for :data:`MISS_MEMORY` seconds, so Pods naming a queue that does
        not exist cannot tie up the reviewers."""
        ctx = self._context()
        unknown = _unknown_name(obj, ctx) if wait > 0 else None
        if unknown is not None and self._miss_until.get(unknown, 0.0) < time.monotonic():
            if self._waiting.acquire(blocking=False):
                try:
                    with self.changed:
                        found = self.changed.wait_for(lambda: _unknown_name(obj, self._context()) is None, timeout=wait)
                    if not found:
                        self._miss_until[unknown] = time.monotonic() + MISS_MEMORY
                        if len(self._miss_until) > 10_000:
                            self._miss_until.clear()
                finally:
                    self._waiting.release()
            ctx = self._context()
        return ctx.for_namespace(namespace)


def _unknown_name(obj: Any, ctx: WebhookContext) -> str | None:
    """The queue entrance or InstanceType of this operator a reviewed object names and the context lacks, or None."""
    if not isinstance(obj, dict):
        return None
    meta = _mapping(obj.get("metadata"))
    labels = _mapping(meta.get("labels"))
    queue = labels.get(naming.LABEL_QUEUE_NAME)
    if isinstance(queue, str):
        known = not queue.startswith(naming.ENTRANCE_PREFIX) or any(
            t.labels.get(naming.LABEL_QUEUE_ENTRANCE) == queue for t in ctx.instancetypes
        )
        return None if known else queue
    spec = _mapping(obj.get("spec"))
    workload_queue = spec.get("queueName")
    if isinstance(workload_queue, str) and workload_queue.startswith(naming.ENTRANCE_PREFIX):
        namespace = str(meta.get("namespace") or "default")
        return None if (namespace, workload_queue) in ctx.pins.local_queues else f"{namespace}/{workload_queue}"
    type_name = spec.get("type")
    if obj.get("kind") == "Instance" and isinstance(type_name, str) and ctx.instancetype(type_name) is None:
        return type_name
    return None


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}
