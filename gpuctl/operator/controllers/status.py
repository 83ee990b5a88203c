"""The InstanceType status writer (key: an InstanceType): the four views, the profiles, the pool's detail, the
entrance and the phase, written as a merge patch carrying the ``resourceVersion`` read.

What wakes it: a Devices event of its card model, a Node event (CPU pools; any pool when a Node comes or goes), its
ClusterQueue's or its own events. It also publishes the pool and queue gauges, from the views it last computed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, NamedTuple, TypeVar

from gpuctl.cluster import kinds
from gpuctl.cluster.kinds import Kind
from gpuctl.core import naming
from gpuctl.core.fragmentation import ViewFragmentation, demand_shapes, reference_shapes
from gpuctl.core.instancetypes import InstanceType
from gpuctl.core.ledger import NodeDevices
from gpuctl.core.lifecycle import queue_summary
from gpuctl.core.nodes import Node
from gpuctl.core.shadow import Disagreement, view_disagreements
from gpuctl.core.shadow import Kind as ShadowKind
from gpuctl.core.views import instancetype_detail, instancetype_views, pool_devices, views_to_status
from gpuctl.core.workloads import ActiveCondition, ClusterQueue
from gpuctl.operator.cache import CachedInstanceType, OperatorCache
from gpuctl.operator.controllers.base import Controller, Watch, Writer
from gpuctl.operator.events import NORMAL, EventSink, Regarding
from gpuctl.operator.metrics import Metrics, QueueState, pool_gauges, queue_gauges, usage_families
from gpuctl.operator.scrape import PoolFragmentation, QueueBook, UsageText
from gpuctl.operator.shadow import ShadowBook

FRAGMENTATION_TTL = 15.0
"""Seconds a pool's fragmentation metrics, the usage gauges and the queue gauges are reused for (Prometheus scrapes
every 15 to 60 s); past it they are computed again only if the kinds they read changed."""

UsageGauges = tuple[dict[tuple[str, str, str], float], dict[tuple[str, str], float], bytes]
"""Held per namespace, pool and mode; reserved per namespace and pool; the text of the families per Pod and card and
per reserving Workload."""
T = TypeVar("T")

FRAGMENTATION_READS = (kinds.INSTANCETYPE, kinds.DEVICES, kinds.NODE, kinds.WORKLOAD, kinds.LOCALQUEUE)
USAGE_READS = (kinds.INSTANCETYPE, kinds.DEVICES, kinds.NODE, kinds.POD, kinds.WORKLOAD, kinds.LOCALQUEUE)
QUEUE_READS = (kinds.WORKLOAD, kinds.CLUSTERQUEUE, kinds.LOCALQUEUE, kinds.POD)


@dataclass(frozen=True, slots=True)
class Computed(Generic[T]):
    """A figure computed from the cache: when, from which generation of the kinds it read, and what it was."""

    at: float
    inputs: tuple[int, ...]
    value: T


class StatusController(Controller):
    """The InstanceType status writer: the four views, profiles, detail, entrance and phase."""

    name = "instancetype-status"
    kind = kinds.INSTANCETYPE
    coalesce = 0.5
    """Seconds a ledger's or a Node's change waits before the pools it touches are written: a burst is one write."""

    def __init__(
        self,
        cache: OperatorCache,
        source: Writer,
        metrics: Metrics,
        events: EventSink | None = None,
        *,
        shadow: ShadowBook | None = None,
    ) -> None:
        super().__init__(cache, source, metrics, events, shadow=shadow)
        self.pools: dict[str, dict[str, Any]] = {}
        """The views last computed per InstanceType: the pool metrics read them."""
        self._fragmentation: dict[str, Computed[tuple[ViewFragmentation, ...]]] = {}
        """Per InstanceType: its fragmentation as last computed."""
        self._usage: Computed[UsageGauges] | None = None
        self._usage_text = UsageText(cache)
        """Each node's and Workload's holdings and lines from the last computation: a scrape reads again only what
        changed."""
        metrics.text(self.texts)
        self._queue_book = QueueBook(cache)
        """Each Workload's gate and whether it is pending, kept from the cache's changes (queue gauges, shapes)."""
        self._pool_fragmentation: dict[str, PoolFragmentation] = {}
        """Per InstanceType: its nodes' free capacity and fits, kept from the cache's changes."""
        self._books_lock = threading.Lock()
        self._queues: Computed[QueueState] | None = None
        self.found: dict[str, list[Disagreement]] = {}
        """The companion's: per InstanceType, where its published views differ from the computed ones."""

    # ------------------------------------------------------------------------------------------- what wakes it

    def watches(self) -> Iterable[Watch]:
        return (
            Watch(kinds.DEVICES, self._on_devices, delay=self.coalesce),
            Watch(kinds.NODE, self._on_node, delay=self.coalesce),
            Watch(kinds.INSTANCETYPE, lambda key, _old, _new: [key]),
            Watch(kinds.CLUSTERQUEUE, self._on_cluster_queue),
        )

    def _on_cluster_queue(self, key: str, old: ClusterQueue | None, new: ClusterQueue | None) -> list[str]:
        """The pool of its name, when what its status is written from changed (Kueue updates a queue's counts with
        every reservation; recomputing a 20,000-node pool's views for each would hold up the check's verdicts)."""
        if key not in self.cache.store(kinds.INSTANCETYPE):
            return []
        return [key] if queue_facts(old) != queue_facts(new) else []

    def _on_devices(self, _key: str, old: NodeDevices | None, new: NodeDevices | None) -> list[str]:
        """The accelerated pools of the ledger's card models."""
        models = {g.accelerator_key for d in (old, new) if d is not None for g in d.groups}
        return [
            name for name, c in self.cache.store(kinds.INSTANCETYPE).items() if c.record.accelerator_group in models
        ]

    def _on_node(self, _key: str, old: Node | None, new: Node | None) -> list[str]:
        """A Node that comes or goes takes its Devices ledger into or out of every accelerated pool (a CPU pool's
        view is its ClusterQueue's)."""
        if old is not None and new is not None:
            return []
        return [name for name, c in self.cache.store(kinds.INSTANCETYPE).items() if c.record.acceleratable]

    # ------------------------------------------------------------------------------------------- the status

    def desired_status(self, cached: CachedInstanceType) -> dict[str, Any]:
        it = cached.record
        queue = self.cache.cluster_queue(it.name)
        devices = self.cache.pool_devices(it.accelerator_group) if it.acceleratable else []
        computed = instancetype_views(it, devices, queue)
        status: dict[str, Any] = views_to_status(computed)
        if self.shadow is not None:
            # Beside GPUStack's worker the pool series are what it published; where they differ from the
            # computed ones, the shadow book says so.
            self.pools[it.name] = published_status(it)
            pool = pool_devices(devices, it) if it.acceleratable else []
            self.found[it.name] = view_disagreements(it, computed, pool, queue)
            return status
        self.pools[it.name] = dict(status)
        detail = instancetype_detail(it, devices)
        if detail is not None:
            # Every accelerated type gets the pool's detail; fields this writer does not compute stay.
            status["detail"] = {**(cached.status.get("detail") or {}), **detail}
        status["entrance"] = naming.queue_entrance(it.name)
        facts = queue_facts(queue)
        status["phase"], status["phaseMessage"] = queue_summary(facts.stop_policy, facts.outstanding, facts.active)
        return status

    def _reuse(self, last: Computed[T] | None, reads: Iterable[Kind], compute: Callable[[], T]) -> Computed[T]:
        """``last`` while it is younger than :data:`FRAGMENTATION_TTL` or none of the kinds it read changed since;
        else computed again (the generation is read first, so a change while computing is seen next time)."""
        now = time.monotonic()
        inputs = self.cache.generation(reads)
        if last is not None and (now - last.at < FRAGMENTATION_TTL or last.inputs == inputs):
            return last
        return Computed(now, inputs, compute())

    def fragmentation(self, name: str) -> tuple[ViewFragmentation, ...]:
        """A pool's free and stranded capacity against its pending shapes: computed when the metrics are scraped,
        never on the reconcile path (a ledger moves far more often than Prometheus scrapes), at most once per pool
        every :data:`FRAGMENTATION_TTL` seconds however often it is scraped, and not again while its inputs stay."""
        last = self._reuse(
            self._fragmentation.get(name), FRAGMENTATION_READS, lambda: self._compute_fragmentation(name)
        )
        self._fragmentation[name] = last
        return last.value

    def usage(self) -> UsageGauges:
        """Card-equivalents held per namespace, pool and mode, and reserved per namespace and pool, with the text of
        the per-holder and per-Workload families: computed from the cache when scraped, like the fragmentation,
        node by node and Workload by Workload for those that changed."""
        self._usage = self._reuse(self._usage, USAGE_READS, self._compute_usage)
        return self._usage.value

    def _compute_usage(self) -> UsageGauges:
        return self._usage_text.update()

    def queues(self) -> QueueState:
        """Per ClusterQueue the pending count and head, and the Workloads held per gate: computed like the
        fragmentation (the head's age is read off the clock at each scrape)."""
        self._queues = self._reuse(self._queues, QUEUE_READS, self._compute_queues)
        return self._queues.value

    def _compute_queues(self) -> QueueState:
        self._queue_book.update()
        return self._queue_book.state(sorted(q.name for q in self.cache.records(kinds.CLUSTERQUEUE)))

    def _compute_fragmentation(self, name: str) -> tuple[ViewFragmentation, ...]:
        cached = self.cache.instancetypes().get(name)
        it = cached.record if cached is not None else None
        if it is None or not it.acceleratable:
            self._pool_fragmentation.pop(name, None)
            return ()
        self._queue_book.update()
        asked = demand_shapes(self._queue_book.pending_order(it.name))
        covered = {s.view for s in asked}
        shapes = asked + [s for s in reference_shapes([p.name for p in it.offered_profiles]) if s.view not in covered]
        with self._books_lock:  # the warm-up and a scrape may both ask first
            kept = self._pool_fragmentation.get(name)
            if kept is None:
                kept = self._pool_fragmentation[name] = PoolFragmentation(self.cache)
        return kept.update(it, shapes)

    def reconcile(self, key: str) -> None:
        cached = self.cache.instancetypes().get(key)
        if cached is None:
            self.pools.pop(key, None)
            self._fragmentation.pop(key, None)
            self._pool_fragmentation.pop(key, None)
            if self.shadow is not None:
                self.found.pop(key, None)
                self.shadow.forget(ShadowKind.VIEW, key)
            return
        desired = self.desired_status(cached)
        if self.shadow is not None:
            self.observe(ShadowKind.VIEW, key, self.found.get(key, []), cached.uid)
            return
        if all(cached.status.get(k) == v for k, v in desired.items()):
            return
        self.source.patch(
            kinds.INSTANCETYPE,
            key,
            {"metadata": {"resourceVersion": cached.resource_version}, "status": desired},
            subresource="status",
        )
        self.metrics.wrote(self.name)
        phase, was = desired["phase"], cached.status.get("phase")
        if phase != was:
            self.record(
                Regarding(kinds.INSTANCETYPE, key, uid=cached.uid),
                NORMAL,
                phase,
                "UpdatePhase",
                f"phase {was or '<none>'} -> {phase}: {desired['phaseMessage']}",
            )

    def gauges(self) -> Iterable[Any]:
        """Per InstanceType and view, the views this writer published, free and stranded capacity and the
        fragmentation score; per ClusterQueue, pending Workloads, the head's age and Workloads held per gate. Only
        the replica that leads exports them: every replica's cache holds the same cluster, and Prometheus scraping
        two replicas would count every holding twice in a sum."""
        if not self.leading():
            return
        pools = {name: (status, self.fragmentation(name)) for name, status in dict(self.pools).items()}
        yield from pool_gauges(pools)
        held, reserved, _ = self.usage()
        yield from usage_families(held, reserved)
        yield from queue_gauges(self.queues(), {name: frag for name, (_, frag) in pools.items()}, time.time())

    def warm(self) -> None:
        """Every gauge and the holder text computed once, so that the first scrape finds them: each pool's views
        first (a replica that stood by reconciled none, and the pool series are exported for the pools it has)."""
        if not self.leading():
            return
        for cached in list(self.cache.instancetypes().values()):
            self.desired_status(cached)
        for _ in self.gauges():
            pass
        for _ in self.texts():
            pass

    def texts(self) -> Iterable[bytes]:
        """``gpuctl_card_holder`` and ``gpuctl_workload_reserved_card_equivalents``, as text kept node by node
        (only where this replica leads, as :meth:`gauges`)."""
        if not self.leading():
            return
        # What the scrape's gauges just computed (they are rendered first): the holder lines and the usage gauges
        # of one scrape come from one computation, whichever way the reuse window turns between the two.
        last = self._usage
        yield (last.value if last is not None else self.usage())[2]


def published_status(it: InstanceType) -> dict[str, Any]:
    """An InstanceType's views as its status publishes them, in the shape :func:`views_to_status` writes."""
    out: dict[str, Any] = {
        key: {"onceMaxRequest": v.once_max_request, "remaining": v.remaining, "capacity": v.capacity}
        for key, v in it.published_views.items()
    }
    if "acceleratorPartitioned" in out:
        for key in ("remainingProfiles", "allocatedProfiles"):
            out["acceleratorPartitioned"][key] = [
                {"name": n, "count": c} for n, c in it.published_profiles.get(key, {}).items()
            ]
    return out


class QueueFacts(NamedTuple):
    """What an InstanceType's status is written from its ClusterQueue."""

    exists: bool
    stop_policy: str
    outstanding: bool
    """Whether it holds reservations (reserving or admitted Workloads, or a reserved total)."""
    active: ActiveCondition | None
    cpu: tuple[int, int, tuple[str, ...]]
    """A CPU pool's view inputs: nominal cores, reserved millicores, the flavors."""


def queue_facts(queue: ClusterQueue | None) -> QueueFacts:
    if queue is None:
        return QueueFacts(False, "None", False, None, (0, 0, ()))
    outstanding = bool(queue.reserving or queue.admitted or any(t for _, _, t in queue.reported))
    cpu = (queue.nominal.get("cpu", 0), queue.reservation_milli("cpu"), queue.flavors)
    return QueueFacts(True, queue.stop_policy, outstanding, queue.active, cpu)
