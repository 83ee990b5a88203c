"""The operator's controllers, event-driven and level-triggered (the client-go pattern):

- each controller has a work queue of keys, filled by the cache's events (mapped to the keys they affect) and by a slow
  resync from the cache (no LIST), and drained by its workers; a key that fails is requeued with a per-key backoff;
- reconciling a key reads the cache, computes the desired state with the core, and writes only differences.

Controllers and what wakes them:

- ``node-devices-check`` (gate 3, key: a Workload): the Workload's own events; a Pod or Devices event on a node it is
  assigned to; a change of another Workload on its nodes that takes or frees cards (admitted, Ready, finished,
  evicted, gone); a Node's deletion; a ResourceFlavor change. Judging one Workload reads the cache for its nodes'
  Devices and Workloads and makes the design's one uncached read: the Pods on the judged node(s), by field selector.
- ``instancetype-status`` (key: an InstanceType): a Devices event of its accelerator model, a Node event (CPU pools),
  its ClusterQueue's or its own events.
- ``fit-labels`` (key: a Node): its Devices' and its own events.
- ``instance-stop`` (key: an Instance): its own events; its InstanceType's deletion; its ClusterQueue's stop policy.
- ``admission-check-active`` (key: the check): the AdmissionCheck's events.

Writes are patches: merge patches carrying the ``resourceVersion`` read (a conflict requeues the key), and a
server-side apply of the check's own entry in a Workload's ``status.admissionChecks``.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from gpuctl.cluster import kinds
from gpuctl.cluster.errors import SourceError
from gpuctl.cluster.kinds import Kind
from gpuctl.cluster.live import ConflictError, NotFoundError
from gpuctl.core import naming
from gpuctl.core.fit import READY, Verdict, check_inputs, judge_workload, judgeable
from gpuctl.core.fragmentation import ViewFragmentation, demand_shapes, pool_fragmentation, reference_shapes
from gpuctl.core.lifecycle import PlanRefused, instancetype_phase, phase_message, plan_stop, should_stop_instance
from gpuctl.core.pins import fit_label_changes, node_fit_labels
from gpuctl.core.pods import Pod, parse_pod
from gpuctl.core.queueing import (
    cluster_queues_of,
    epoch_seconds,
    held_gate,
    pending_order,
    pods_by_workload,
    queue_timestamp,
)
from gpuctl.core.views import in_pool, instancetype_detail, instancetype_views, pool_devices, views_to_status
from gpuctl.core.workloads import CheckState, Workload
from gpuctl.operator.cache import CachedInstanceType, OperatorCache, workload_nodes
from gpuctl.operator.metrics import Metrics, gauge_family
from gpuctl.operator.workqueue import WorkQueue

log = logging.getLogger("gpuctl.operator")
ACTIVE_MESSAGE = "the node-devices admission check controller is running"


class Writer(Protocol):
    """The API calls controllers make (a :class:`~gpuctl.cluster.live.LiveSource`)."""

    def list(
        self,
        kind: Kind,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[dict[str, Any]]: ...

    def patch(
        self,
        kind: Kind,
        name: str,
        body: Any,
        *,
        namespace: str | None = None,
        patch_type: str = ...,
        subresource: str | None = None,
        dry_run: bool = False,
        field_manager: str | None = None,
        force: bool = False,
    ) -> dict[str, Any]: ...

    def create(
        self, kind: Kind, body: dict[str, Any], *, namespace: str | None = None, dry_run: bool = False
    ) -> dict[str, Any]: ...


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _split(key: str) -> tuple[str | None, str]:
    ns, _, name = key.rpartition("/")
    return (ns or None), name


class Controller:
    """A work queue and the reconcile of one key."""

    name = ""
    kind: Kind = kinds.NODE

    def __init__(self, cache: OperatorCache, source: Writer, metrics: Metrics) -> None:
        self.cache = cache
        self.source = source
        self.metrics = metrics
        self.queue: WorkQueue[str] = WorkQueue(self.name)
        self.heartbeat = time.monotonic()
        self.current: tuple[str, float] | None = None
        self.reconciled = 0

    def reconcile(self, key: str) -> None:
        raise NotImplementedError

    def owned_keys(self) -> Iterable[str]:
        """Every key this controller owns, from the cache (the resync)."""
        return self.cache.keys(self.kind)

    def process(self, key: str) -> None:
        """Reconcile one key: forget its failures on success, requeue it with backoff on failure."""
        self.current = (key, time.monotonic())
        try:
            self.reconcile(key)
            self.queue.forget(key)
        except NotFoundError:
            self.queue.forget(key)  # the object went away under the write: its deletion's event follows
        except ConflictError:
            log.info("%s %s: the object moved under a write; retrying", self.name, key)
            self.queue.add_rate_limited(key)
            self.metrics.retries.labels(self.name).inc()
        except SourceError as exc:
            delay = self.queue.add_rate_limited(key)
            self.metrics.api_errors.labels(self.name).inc()
            self.metrics.retries.labels(self.name).inc()
            log.warning("%s %s: %s (retrying in %.2fs)", self.name, key, exc, delay)
        except Exception:
            self.queue.add_rate_limited(key)
            self.metrics.retries.labels(self.name).inc()
            log.exception("%s %s failed; retrying", self.name, key)
        finally:
            self.current = None
            self.reconciled += 1
            self.heartbeat = time.monotonic()

    def run(self, stop: threading.Event, leading: Callable[[], bool], ready: Callable[[], bool]) -> None:
        """A worker: process keys while this replica leads and the cache is synced."""
        while not stop.is_set():
            self.heartbeat = time.monotonic()
            if not ready() or not leading():
                stop.wait(0.2)
                continue
            key = self.queue.get(timeout=1.0)
            if key is None:
                continue
            try:
                if leading():
                    self.process(key)
                else:
                    self.queue.add(key)  # another replica leads now; keep the key for when this one does again
            finally:
                self.queue.done(key)

    def stuck_for(self) -> float:
        """Seconds this controller has been on one key, or since its worker last looped (0 when healthy)."""
        now = time.monotonic()
        current = self.current
        busy = now - current[1] if current else 0.0
        return max(busy, now - self.heartbeat - 2.0, 0.0)


# ----------------------------------------------------------------------------------------------- gate 3


class CheckController(Controller):
    """The ``gpustack-node-devices`` AdmissionCheck: one Workload at a time, remembering each ``Ready`` it wrote until
    the cache shows it."""

    name = "node-devices-check"
    kind = kinds.WORKLOAD

    def __init__(self, cache: OperatorCache, source: Writer, metrics: Metrics) -> None:
        super().__init__(cache, source, metrics)
        self.ready_written: dict[str, str] = {}
        """Workload key → uid of a Workload this controller answered Ready, until the cache shows it."""
        self.reserved_seen: dict[str, float] = {}
        """Workload key → when its quota reservation was first seen without a verdict (the latency metric)."""

    def remembered(self, w: Workload) -> Workload:
        """The Workload as the controller knows it: a Ready it wrote counts as written until the cache shows it."""
        if self.ready_written.get(w.key) == w.uid and w.quota_reserved:
            current = w.check(naming.NODE_DEVICES_CHECK)
            if current is not None and current.state != READY:
                return _with_check(w, READY, current.message)
        return w

    def forget_seen(self, w: Workload | None, key: str) -> None:
        uid = self.ready_written.get(key)
        if uid is None:
            return
        state = w.check(naming.NODE_DEVICES_CHECK) if w is not None else None
        if w is None or w.uid != uid or w.admitted or (state is not None and state.state == READY):
            del self.ready_written[key]

    def read_pods(self, nodes: Iterable[str]) -> list[Pod]:
        """The one uncached read: the Pods bound to each judged node, by field selector (with the call's timeout)."""
        pods = []
        for node in sorted(nodes):
            for obj in self.source.list(kinds.POD, field_selector=f"spec.nodeName={node}"):
                pods.append(parse_pod(obj))
        return pods

    def verdict(self, w: Workload) -> Verdict:
        """The verdict on the Workload's own nodes (the flavor's whole pool when a PodSet has no hostname level)."""
        nodes = workload_nodes(w)
        pool_wide = any(a.hostnames is None for a in w.assignments) or not w.assignments
        if pool_wide:
            with self.cache.lock:
                devices = self.cache.all_devices()
                node_map = self.cache.nodes()
                others = list(self.cache.store(kinds.WORKLOAD).values())
                pods = list(self.cache.store(kinds.POD).values())
        else:
            pods = self.read_pods(nodes)
            with self.cache.lock:
                devices = [d for n in nodes if (d := self.cache.devices(n)) is not None]
                node_map = {n: node for n in nodes if (node := self.cache.node(n)) is not None}
                others = self.cache.workloads_on(nodes)
        workloads = [self.remembered(o) for o in others if o.key != w.key] + [w]
        inputs = check_inputs(self.cache.flavors(), devices, node_map, workloads, pods)
        return judge_workload(w, inputs)

    def reconcile(self, key: str) -> None:
        stored = self.cache.workload(key)
        self.forget_seen(stored, key)
        if stored is None:
            self.reserved_seen.pop(key, None)
            return
        w = self.remembered(stored)
        current = w.check(naming.NODE_DEVICES_CHECK)
        if current is None or judgeable(w) is not None:
            if not w.quota_reserved or w.admitted:
                self.reserved_seen.pop(key, None)
            return
        verdict = self.verdict(w)
        self.metrics.verdicts.labels(verdict.state).inc()
        if current.state != verdict.state or current.message != verdict.message:
            self.write_verdict(w, verdict)
        if verdict.state == READY:
            self.ready_written[key] = w.uid
        seen = self.reserved_seen.pop(key, None)
        if seen is not None:
            self.metrics.verdict_latency.observe(time.monotonic() - seen)

    def write_verdict(self, w: Workload, verdict: Verdict) -> None:
        entry: dict[str, Any] = {
            "name": naming.NODE_DEVICES_CHECK,
            "state": verdict.state,
            "message": verdict.message[:1000],
            "lastTransitionTime": _now(),
        }
        if verdict.requeue_after_seconds:
            entry["requeueAfterSeconds"] = verdict.requeue_after_seconds
        body = {
            "apiVersion": kinds.WORKLOAD.api_version,
            "kind": "Workload",
            "metadata": {"name": w.name, "namespace": w.namespace},
            "status": {"admissionChecks": [entry]},
        }
        self.source.patch(
            kinds.WORKLOAD,
            w.name,
            body,
            namespace=w.namespace,
            subresource="status",
            patch_type="application/apply-patch+yaml",
            field_manager=naming.NODE_DEVICES_CHECK,
            force=True,
        )
        self.metrics.wrote(self.name)
        log.info("workload %s: %s: %s", w.key, verdict.state, verdict.message)

    def owned_keys(self) -> Iterable[str]:
        with self.cache.lock:
            return [k for k, w in self.cache.store(kinds.WORKLOAD).items() if judgeable(w) is None]


def _with_check(w: Workload, state: str, message: str) -> Workload:
    checks = tuple(CheckState(c.name, state, message) if c.name == naming.NODE_DEVICES_CHECK else c for c in w.checks)
    return dataclasses.replace(w, checks=checks)


def holds_cards(w: Workload | None) -> bool:
    """Whether a Workload takes cards from others' verdicts (admitted, or holding this check's Ready)."""
    if w is None or w.finished or w.evicted or not w.active:
        return False
    state = w.check(naming.NODE_DEVICES_CHECK)
    return w.admitted or (w.quota_reserved and state is not None and state.state == READY)


# ----------------------------------------------------------------------------------------------- InstanceType status


FRAGMENTATION_TTL = 15.0
"""Seconds a pool's fragmentation metrics are reused for (Prometheus scrapes every 15 to 60 s)."""


class StatusController(Controller):
    """The InstanceType status writer: the four views, profiles, detail, entrance and phase."""

    name = "instancetype-status"
    kind = kinds.INSTANCETYPE

    def __init__(self, cache: OperatorCache, source: Writer, metrics: Metrics) -> None:
        super().__init__(cache, source, metrics)
        self.pools: dict[str, dict[str, Any]] = {}
        """The views last computed per InstanceType: the pool metrics read them."""
        self._fragmentation: dict[str, tuple[float, tuple[ViewFragmentation, ...]]] = {}
        """Per InstanceType: when its fragmentation was computed, and what it was."""

    def desired_status(self, cached: CachedInstanceType) -> dict[str, Any]:
        it = cached.record
        cores: list[int] = []
        reserved = 0
        queue = self.cache.cluster_queue(it.name)
        devices = self.cache.pool_devices(it.accelerator_group) if it.acceleratable else []
        if not it.acceleratable:
            pool = it.pool_labels()
            cores = [n.cpu_cores for n in self.cache.nodes().values() if in_pool(n.labels, pool)]
            reserved = queue.reserved.get("cpu", 0) if queue else 0
        status: dict[str, Any] = views_to_status(
            instancetype_views(it, devices, node_cores=cores, cpu_reserved=reserved)
        )
        self.pools[it.name] = dict(status)
        detail = instancetype_detail(it, devices)
        if detail is not None:
            # Every accelerated type gets the pool's detail; fields this writer does not compute stay.
            status["detail"] = {**(cached.status.get("detail") or {}), **detail}
        status["entrance"] = naming.queue_entrance(it.name)
        policy = queue.stop_policy if queue else "None"
        outstanding = bool(queue and (queue.reserving or any(v for v in queue.reserved.values())))
        status["phase"] = instancetype_phase(policy, outstanding).value
        status["phaseMessage"] = phase_message(policy, outstanding)
        return status

    def fragmentation(self, name: str) -> tuple[ViewFragmentation, ...]:
        """A pool's free and stranded capacity against its pending shapes: computed when the metrics are scraped,
        never on the reconcile path (a ledger moves far more often than Prometheus scrapes), and at most once per
        pool every :data:`FRAGMENTATION_TTL` seconds however often it is scraped."""
        now = time.monotonic()
        hit = self._fragmentation.get(name)
        if hit is not None and now - hit[0] < FRAGMENTATION_TTL:
            return hit[1]
        result = self._compute_fragmentation(name)
        self._fragmentation[name] = (now, result)
        return result

    def _compute_fragmentation(self, name: str) -> tuple[ViewFragmentation, ...]:
        cached = self.cache.instancetypes().get(name)
        it = cached.record if cached is not None else None
        if it is None or not it.acceleratable:
            return ()
        devices = self.cache.pool_devices(it.accelerator_group)
        pending = pending_order(self.cache.records(kinds.WORKLOAD), self._queue_of(), it.name)
        asked = demand_shapes(pending)
        covered = {s.view for s in asked}
        shapes = asked + [s for s in reference_shapes([p.name for p in it.offered_profiles]) if s.view not in covered]
        return pool_fragmentation(pool_devices(devices, it), it.accelerator_group, shapes, it.card_mib)

    def _queue_of(self) -> dict[str, str]:
        return cluster_queues_of(self.cache.records(kinds.WORKLOAD), self.cache.records(kinds.LOCALQUEUE))

    def reconcile(self, key: str) -> None:
        cached = self.cache.instancetypes().get(key)
        if cached is None:
            self.pools.pop(key, None)
            self._fragmentation.pop(key, None)
            return
        desired = self.desired_status(cached)
        if all(cached.status.get(k) == v for k, v in desired.items()):
            return
        self.source.patch(
            kinds.INSTANCETYPE,
            key,
            {"metadata": {"resourceVersion": cached.resource_version}, "status": desired},
            subresource="status",
        )
        self.metrics.wrote(self.name)


# ----------------------------------------------------------------------------------------------- fit labels


class FitLabelController(Controller):
    """The per-card fit labels on each managed Node, from its Devices; written only when they change."""

    name = "fit-labels"
    kind = kinds.NODE

    def reconcile(self, key: str) -> None:
        node = self.cache.node(key)
        if node is None:
            return
        managed = node.labels.get(naming.LABEL_MANAGED) == "true"
        changes = fit_label_changes(node.labels, node_fit_labels(self.cache.devices(key)) if managed else {})
        if not changes:
            return
        self.source.patch(kinds.NODE, key, {"metadata": {"labels": changes}})
        self.metrics.wrote(self.name)


# ----------------------------------------------------------------------------------------------- instance stop


class InstanceStopController(Controller):
    """The running-instance stop: ``spec.stop=true`` for an Instance whose type is gone or deleting, or whose queue
    drains (``HoldAndDrain``) — also while it is still ``Starting``."""

    name = "instance-stop"
    kind = kinds.INSTANCE

    def reconcile(self, key: str) -> None:
        raw = self.cache.store(kinds.INSTANCE).get(key)
        if raw is None:
            return
        spec = raw.get("spec") or {}
        if spec.get("stop"):
            return
        type_name = str(spec.get("type") or "")
        cached = self.cache.instancetypes().get(type_name)
        queue = self.cache.cluster_queue(type_name)
        decision = should_stop_instance(
            cached is not None, bool(cached and cached.record.deleting), queue.stop_policy if queue else "None"
        )
        if not decision.stop:
            return
        try:
            plan = plan_stop(raw, running_instance_stop=True)
        except PlanRefused:
            return
        namespace, name = _split(key)
        self.source.patch(
            kinds.INSTANCE,
            name,
            plan.body(),
            namespace=namespace or "default",
            field_manager=naming.INSTANCE_STOP_MANAGER,
        )
        self.metrics.wrote(self.name)
        log.info(
            "instance %s: stop instance as its instance type is gone, deleting, or draining (%s)", key, decision.reason
        )


# ----------------------------------------------------------------------------------------------- the check's Active


class ActiveCheckController(Controller):
    """Keeps the ``gpustack-node-devices`` AdmissionCheck existing and ``Active``."""

    name = "admission-check-active"
    kind = kinds.ADMISSIONCHECK

    def owned_keys(self) -> Iterable[str]:
        return [naming.NODE_DEVICES_CHECK]

    def reconcile(self, key: str) -> None:
        if key != naming.NODE_DEVICES_CHECK:
            return
        cached = self.cache.store(kinds.ADMISSIONCHECK).get(key)
        if cached is None:
            self.source.create(
                kinds.ADMISSIONCHECK,
                {
                    "apiVersion": kinds.ADMISSIONCHECK.api_version,
                    "kind": "AdmissionCheck",
                    "metadata": {"name": key},
                    "spec": {"controllerName": naming.NODE_DEVICES_CONTROLLER},
                },
            )
            self.metrics.wrote(self.name)
            self.queue.add_after(key, 0.5)  # set it Active once the cache shows it
            return
        active = next((c for c in cached.conditions if c.get("type") == "Active"), None)
        if active and active.get("status") == "True" and active.get("message") == ACTIVE_MESSAGE:
            return
        others = [c for c in cached.conditions if c.get("type") != "Active"]
        condition = {
            "type": "Active",
            "status": "True",
            "reason": "Ready",
            "message": ACTIVE_MESSAGE,
            "lastTransitionTime": _now(),
        }
        self.source.patch(
            kinds.ADMISSIONCHECK, key, {"status": {"conditions": [*others, condition]}}, subresource="status"
        )
        self.metrics.wrote(self.name)


# ----------------------------------------------------------------------------------------------- the manager


class Controllers:
    """Every controller, the mapping of cache events to their keys, the workers and the resync."""

    def __init__(
        self,
        cache: OperatorCache,
        source: Writer,
        metrics: Metrics,
        *,
        resync_seconds: float = 300.0,
        status_coalesce: float = 0.5,
        stuck_after: float = 120.0,
    ) -> None:
        self.cache = cache
        self.metrics = metrics
        self.check = CheckController(cache, source, metrics)
        self.status = StatusController(cache, source, metrics)
        self.fit_labels = FitLabelController(cache, source, metrics)
        self.stops = InstanceStopController(cache, source, metrics)
        self.active = ActiveCheckController(cache, source, metrics)
        self.all: tuple[Controller, ...] = (self.check, self.status, self.fit_labels, self.stops, self.active)
        self.resync_seconds = resync_seconds
        self.status_coalesce = status_coalesce
        self.stuck_after = stuck_after
        self._threads: list[threading.Thread] = []
        self._was_leading = False
        cache.listeners.append(self.on_event)
        metrics.gauge(self._gauges)

    # ------------------------------------------------------------------------------------------- events → keys

    def on_event(self, kind: Kind, event: str, key: str, old: Any, new: Any) -> None:
        """Map one applied cache event to the keys it affects (called under the cache lock: only queues keys)."""
        if kind == kinds.WORKLOAD:
            self._on_workload(key, old, new)
        elif kind == kinds.POD:
            for pod in (old, new):
                if pod is not None and pod.node_name:
                    self._judge_on([pod.node_name])
        elif kind == kinds.DEVICES:
            nodes = {d.node for d in (old, new) if d is not None}
            self._judge_on(nodes)
            for node in nodes:
                self.fit_labels.queue.add(node)
            models = {g.accelerator_key for d in (old, new) if d is not None for g in d.groups}
            for name, cached in self.cache.store(kinds.INSTANCETYPE).items():
                if cached.record.accelerator_group in models:
                    self.status.queue.add_after(name, self.status_coalesce)
        elif kind == kinds.NODE:
            self.fit_labels.queue.add(key)
            # A Node that comes or goes takes its Devices ledger into or out of every accelerated pool.
            born_or_gone = new is None or old is None
            if born_or_gone or old.labels != new.labels or old.allocatable != new.allocatable:
                self._judge_on([key])
                for name, cached in self.cache.store(kinds.INSTANCETYPE).items():
                    if born_or_gone or not cached.record.acceleratable:
                        self.status.queue.add_after(name, self.status_coalesce)
        elif kind == kinds.INSTANCETYPE:
            self.status.queue.add(key)
            if new is None or new.record.deleting:
                self._stop_instances_of(key)
        elif kind == kinds.CLUSTERQUEUE:
            if key in self.cache.store(kinds.INSTANCETYPE):
                self.status.queue.add(key)
            if old is None or new is None or old.stop_policy != new.stop_policy:
                self._stop_instances_of(key)
        elif kind == kinds.INSTANCE:
            self.stops.queue.add(key)
        elif kind == kinds.ADMISSIONCHECK:
            self.active.queue.add(key)
        elif kind == kinds.RESOURCEFLAVOR:
            for wkey, w in self.cache.store(kinds.WORKLOAD).items():
                if judgeable(w) is None:
                    self.check.queue.add(wkey)

    def _on_workload(self, key: str, old: Workload | None, new: Workload | None) -> None:
        if new is not None and judgeable(new) is None:
            self.check.reserved_seen.setdefault(key, time.monotonic())
        self.check.queue.add(key)
        nodes = (workload_nodes(old) if old is not None else set()) | (
            workload_nodes(new) if new is not None else set()
        )
        if nodes and (
            holds_cards(old) != holds_cards(new)
            or (old is not None and new is not None and old.assignments != new.assignments)
        ):
            self._judge_on(nodes, skip=key)

    def _judge_on(self, nodes: Iterable[str], skip: str = "") -> None:
        """Queue the Workloads waiting for this check on these nodes."""
        store = self.cache.store(kinds.WORKLOAD)
        for node in nodes:
            for wkey in self.cache.workloads_by_node.get(node, ()):
                w = store.get(wkey)
                if wkey != skip and w is not None and judgeable(w) is None:
                    self.check.queue.add(wkey)

    def _stop_instances_of(self, instancetype: str) -> None:
        for key in self.cache.instances_by_type.get(instancetype, ()):
            self.stops.queue.add(key)

    # ------------------------------------------------------------------------------------------- running

    def resync(self) -> None:
        """Queue every key of every controller from the cache (the safety net; no LIST)."""
        for c in self.all:
            for key in c.owned_keys():
                c.queue.add(key)

    def start(self, stop: threading.Event, leading: Callable[[], bool], *, fit_label_workers: int = 2) -> None:
        def ready() -> bool:
            return self.cache.synced()

        for c in self.all:
            for i in range(fit_label_workers if c is self.fit_labels else 1):
                t = threading.Thread(target=c.run, args=(stop, leading, ready), name=f"{c.name}-{i}", daemon=True)
                t.start()
                self._threads.append(t)
        t = threading.Thread(target=self._resync_loop, args=(stop, leading, ready), name="resync", daemon=True)
        t.start()
        self._threads.append(t)

    def _resync_loop(self, stop: threading.Event, leading: Callable[[], bool], ready: Callable[[], bool]) -> None:
        last = 0.0
        while not stop.is_set():
            now_leading = ready() and leading()
            # A replica that starts leading (or finishes its first sync) goes over everything once.
            if now_leading and (not self._was_leading or time.monotonic() - last >= self.resync_seconds):
                self.resync()
                last = time.monotonic()
            self._was_leading = now_leading
            stop.wait(0.5)

    def stuck(self) -> str | None:
        """Why the controllers are stuck (a key held longer than ``stuck_after``), or None."""
        for c in self.all:
            held = c.stuck_for()
            if held > self.stuck_after:
                on = f" on {c.current[0]}" if c.current else ""
                return f"{c.name} has made no progress for {held:.0f}s{on}"
        return None

    def _pool_gauges(self) -> Iterable[Any]:
        """Per InstanceType and view: the views the status writer published, free and stranded capacity and the
        fragmentation score; per ClusterQueue: pending Workloads, the head's age, Workloads held per gate."""
        pools = {name: (status, self.status.fragmentation(name)) for name, status in dict(self.status.pools).items()}
        for field, doc in (
            ("onceMaxRequest", "The largest single request the view can take now, in its unit."),
            ("remaining", "What the view has left, in its unit."),
            ("capacity", "The view's capacity, in its unit."),
        ):
            yield gauge_family(
                f"gpuctl_pool_{_snake(field)}",
                doc,
                ["instancetype", "view"],
                (
                    ([name, view], float(status[view][field]))
                    for name, (status, _) in sorted(pools.items())
                    for view in VIEW_FIELDS
                    if isinstance(status.get(view), dict)
                ),
            )
        yield gauge_family(
            "gpuctl_pool_free",
            "Free capacity per view (percent of a card for EX, SL and PT; shares for SH).",
            ["instancetype", "view"],
            (([name, f.view], float(f.free)) for name, (_, frag) in sorted(pools.items()) for f in frag),
        )
        yield gauge_family(
            "gpuctl_pool_stranded",
            "Free capacity requests of a shape cannot use, per view and shape (the view's unit).",
            ["instancetype", "view", "shape"],
            (
                ([name, f.view, str(fit.shape)], float(fit.stranded))
                for name, (_, frag) in sorted(pools.items())
                for f in frag
                for fit in f.fits
            ),
        )
        yield gauge_family(
            "gpuctl_pool_fragmentation_score",
            "Share of free capacity the pending (or reference) shapes cannot use, 0 to 1.",
            ["instancetype", "view"],
            (([name, f.view], f.score) for name, (_, frag) in sorted(pools.items()) for f in frag),
        )
        yield from self._queue_gauges(pools)

    def _queue_gauges(self, pools: dict[str, tuple[dict[str, Any], tuple[ViewFragmentation, ...]]]) -> Iterable[Any]:
        workloads = self.cache.records(kinds.WORKLOAD)
        queue_of = self.status._queue_of()
        pods = pods_by_workload(self.cache.records(kinds.POD))
        now = time.time()
        pending: list[tuple[list[str], float]] = []
        age: list[tuple[list[str], float]] = []
        blocked: list[tuple[list[str], float]] = []
        held: dict[tuple[str, str], int] = {}
        for cq in sorted(q.name for q in self.cache.records(kinds.CLUSTERQUEUE)):
            line = pending_order(workloads, queue_of, cq)
            pending.append(([cq], float(len(line))))
            if line:
                joined = epoch_seconds(queue_timestamp(line[0]))
                age.append(([cq], max(0.0, now - joined) if joined is not None else 0.0))
                shapes = demand_shapes(line[:1])
                frag = pools.get(cq, ({}, ()))[1]
                blocked.append(([cq], 1.0 if shapes and _blocked(shapes[0], frag) else 0.0))
        for w in workloads:
            cq = queue_of.get(w.key, "")
            gate = held_gate(w, pods.get(w.key, ()))
            if cq and gate is not None:
                held[(cq, str(gate))] = held.get((cq, str(gate)), 0) + 1
        yield gauge_family("gpuctl_queue_pending", "Pending Workloads per ClusterQueue.", ["cluster_queue"], pending)
        yield gauge_family(
            "gpuctl_queue_head_age_seconds",
            "How long the head of each ClusterQueue has waited since it joined the queue.",
            ["cluster_queue"],
            age,
        )
        yield gauge_family(
            "gpuctl_queue_head_blocked_by_fragmentation",
            "1 when the pool has free capacity enough for the head's request in total, but none of it usable.",
            ["cluster_queue"],
            blocked,
        )
        yield gauge_family(
            "gpuctl_workloads_held",
            "Workloads held, per ClusterQueue and the gate that holds them.",
            ["cluster_queue", "gate"],
            (([cq, gate], float(n)) for (cq, gate), n in sorted(held.items())),
        )

    def _gauges(self) -> Iterable[Any]:
        yield from self._pool_gauges()
        yield gauge_family(
            "gpuctl_workqueue_depth",
            "Keys waiting in each controller's queue.",
            ["controller"],
            ((([c.name]), float(len(c.queue))) for c in self.all),
        )
        yield gauge_family(
            "gpuctl_workqueue_delayed",
            "Keys waiting for a delay or backoff.",
            ["controller"],
            (([c.name], float(c.queue.delayed)) for c in self.all),
        )


VIEW_FIELDS = ("accelerator", "acceleratorShared", "acceleratorSliced", "acceleratorPartitioned", "cpu")


def _snake(name: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in name)


def _blocked(shape: Any, frag: tuple[ViewFragmentation, ...]) -> bool:
    """The head's shape finds no usable room although the view's free capacity would hold it."""
    for f in frag:
        for fit in f.fits:
            if fit.shape == shape:
                need = shape.size * 100 if shape.view == "accelerator" else shape.size
                return fit.requests == 0 and f.free >= need
    return False
