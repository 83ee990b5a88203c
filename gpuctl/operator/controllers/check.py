"""Gate 3, the ``gpustack-node-devices`` AdmissionCheck (key: a Workload).

What wakes it: the Workload's own events; a Pod or Devices event on a node it is assigned to; a change of another
Workload on its nodes that takes or frees cards (admitted, Ready, finished, evicted, gone) or moves; a Node that comes,
goes or changes its labels or keys; a ResourceFlavor change. Judging one Workload reads the cache for its nodes'
Devices and Workloads, and makes the operator's one uncached read: the Pods on the judged node(s), by field
selector. The verdict is written by a server-side apply of the check's own entry in ``status.admissionChecks``.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable
from typing import Any

from gpuctl.cluster import kinds
from gpuctl.core import naming
from gpuctl.core.fit import READY, RETRY, Verdict, check_inputs, judge_workload, judgeable
from gpuctl.core.pods import Pod, parse_pod
from gpuctl.core.shadow import Kind as ShadowKind
from gpuctl.core.shadow import verdict_disagreement
from gpuctl.core.workloads import CheckState, Workload
from gpuctl.operator.cache import OperatorCache, workload_nodes
from gpuctl.operator.controllers.base import Controller, Watch, Writer, log, node_moved, now_rfc3339
from gpuctl.operator.events import NORMAL, WARNING, EventSink, Regarding
from gpuctl.operator.metrics import Metrics
from gpuctl.operator.shadow import ShadowBook


class CheckController(Controller):
    """The ``gpustack-node-devices`` AdmissionCheck: one Workload at a time, remembering each ``Ready`` it wrote until
    the cache shows it."""

    name = "node-devices-check"
    kind = kinds.WORKLOAD

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
        self.compared: dict[str, tuple[str, str, str]] = {}
        """The companion's: Workload key → (uid, state, message) of the verdict of GPUStack's check it last compared,
        once the Workload is admitted (no longer re-judged on the cluster's changes)."""
        self.ready_written: dict[str, str] = {}
        """Workload key → uid of a Workload this controller answered Ready, until the cache shows it."""
        self.reserved_seen: dict[str, float] = {}
        """Workload key → when its quota reservation was first seen without a verdict (the latency metric)."""

    # ------------------------------------------------------------------------------------------- what wakes it

    def watches(self) -> Iterable[Watch]:
        return (
            Watch(kinds.WORKLOAD, self._on_workload),
            Watch(
                kinds.POD,
                lambda _key, old, new: self.waiting_on(
                    p.node_name for p in (old, new) if p is not None and p.node_name
                ),
            ),
            Watch(kinds.DEVICES, lambda _key, old, new: self.waiting_on({d.node for d in (old, new) if d is not None})),
            Watch(kinds.NODE, lambda key, old, new: self.waiting_on([key]) if node_moved(old, new) else ()),
            Watch(kinds.RESOURCEFLAVOR, lambda _key, _old, _new: self.waiting()),
        )

    def _on_workload(self, key: str, old: Workload | None, new: Workload | None) -> list[str]:
        """The Workload itself; and, when it takes or frees cards or moves, the Workloads waiting on its nodes."""
        if new is not None and judgeable(new) is None:
            self.reserved_seen.setdefault(key, time.monotonic())
        keys = [key]
        nodes = (workload_nodes(old) if old is not None else set()) | (
            workload_nodes(new) if new is not None else set()
        )
        if nodes and (
            holds_cards(old) != holds_cards(new)
            or (old is not None and new is not None and old.assignments != new.assignments)
        ):
            keys += self.waiting_on(nodes, skip=key)
        return keys

    def waiting_on(self, nodes: Iterable[str], skip: str = "") -> list[str]:
        """The Workloads waiting for this check on these nodes."""
        store = self.cache.store(kinds.WORKLOAD)
        keys = []
        for node in nodes:
            for wkey in self.cache.workloads_by_node.get(node, ()):
                w = store.get(wkey)
                if wkey != skip and w is not None and judgeable(w) is None:
                    keys.append(wkey)
        return keys

    def waiting(self) -> list[str]:
        """Every Workload waiting for this check (a ResourceFlavor change may move any)."""
        return [wkey for wkey, w in self.cache.store(kinds.WORKLOAD).items() if judgeable(w) is None]

    # ------------------------------------------------------------------------------------------- the verdict

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
        """The one uncached read: the Pods bound to each judged node, by field selector (with the call's timeout).

        Read from the API server's watch cache as it stands, never older than the operator's own Pods: a consistent
        read would first wait for that cache to hear from etcd (80-90 ms after a write here, most of a verdict's
        time) only to add the records written in those milliseconds, the race any read leaves to the Pods written
        just after it (a later Pod event on the node wakes the Workload again while it waits for Kueue)."""
        pods = []
        version = self.cache.version(kinds.POD) or None
        for node in sorted(nodes):
            for obj in self.source.list(kinds.POD, field_selector=f"spec.nodeName={node}", not_older_than=version):
                pods.append(parse_pod(obj))
        return pods

    def verdict(self, w: Workload, *, own_pods: bool = True) -> Verdict:
        """The verdict on the Workload's own nodes (the flavor's whole pool when a PodSet has no hostname level);
        ``own_pods=False`` leaves the Workload's own Pods out of the ledgers (judged as at its reservation)."""
        nodes = workload_nodes(w)
        pool_wide = any(a.hostnames is None for a in w.assignments) or not w.assignments
        if pool_wide:
            with self.cache.lock:
                devices = self.cache.all_devices()
                node_map = self.cache.nodes()
                others = list(self.cache.store(kinds.WORKLOAD).values())
                pods = list(self.cache.store(kinds.POD).values())
        else:
            # The companion reads the Pods from its cache: a verdict it compares is settled before it is reported,
            # and an uncached read per admitted Workload at its start would cost the API server a list each.
            pods = [p for n in sorted(nodes) for p in self.cache.pods_on(n)] if self.shadow else self.read_pods(nodes)
            with self.cache.lock:
                devices = [d for n in nodes if (d := self.cache.devices(n)) is not None]
                node_map = {n: node for n in nodes if (node := self.cache.node(n)) is not None}
                others = self.cache.workloads_on(nodes)
        workloads = [self.remembered(o) for o in others if o.key != w.key] + [w]
        if not own_pods:
            pods = [p for p in pods if not (p.namespace == w.namespace and p.workload == w.pod_owner)]
        inputs = check_inputs(self.cache.flavors(), devices, node_map, workloads, pods)
        return judge_workload(w, inputs)

    def reconcile(self, key: str) -> None:
        if self.shadow is not None:
            self.compare(key)
            return
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

    def compare(self, key: str) -> None:
        """The companion: the verdict GPUStack's check wrote (Ready or Retry) against the core's on the same
        Workload, as it stood at reservation — an admitted one is judged without its admission and its own Pods'
        allocations, once per verdict written (the cluster moves on after admission; the verdict does not)."""
        assert self.shadow is not None
        w = self.cache.workload(key)
        state = w.check(naming.NODE_DEVICES_CHECK) if w is not None else None
        if (
            w is None
            or state is None
            or state.state not in (READY, RETRY)
            or not w.quota_reserved
            or w.evicted
            or w.finished
            or not w.active
        ):
            self.shadow.forget(ShadowKind.VERDICT, key)
            self.compared.pop(key, None)
            return
        written = (w.uid, state.state, state.message)
        if w.admitted and self.compared.get(key) == written:
            return
        reserved = w
        if w.admitted:
            conditions = {k: c for k, c in w.conditions.items() if k != "Admitted"}
            reserved = dataclasses.replace(w, conditions=conditions)
        verdict = self.verdict(reserved, own_pods=False)
        found = verdict_disagreement(
            w.namespace, w.name, naming.NODE_DEVICES_CHECK, state.state, verdict.state, verdict.message
        )
        self.observe(ShadowKind.VERDICT, key, [found] if found else [], w.uid)
        if w.admitted:
            self.compared[key] = written

    def write_verdict(self, w: Workload, verdict: Verdict) -> None:
        entry: dict[str, Any] = {
            "name": naming.NODE_DEVICES_CHECK,
            "state": verdict.state,
            "message": verdict.message[:1000],
            "lastTransitionTime": now_rfc3339(),
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
        self.record(
            Regarding(kinds.WORKLOAD, w.name, w.namespace, w.uid),
            NORMAL if verdict.state == READY else WARNING,
            verdict.state,
            "AdmissionCheck",
            f"{naming.NODE_DEVICES_CHECK}: {verdict.message}",
        )

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
