"""The operator's controllers, each a level-triggered pass over the whole ClusterState that writes only differences:

- the ``gpustack-node-devices`` AdmissionCheck: kept existing and ``Active``;
- the check's verdicts (gate 3): one Workload at a time, remembering each ``Ready`` it wrote until the state shows it;
- the InstanceType status writer: the four views, profiles, entrance and phase;
- the per-card fit labels on Nodes;
- the running-instance stop.

Writes are patches: merge patches carrying the ``resourceVersion`` read (a conflict waits for the next pass), and a
server-side apply of the check's own entry in a Workload's ``status.admissionChecks``.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpuctl.cluster import kinds
from gpuctl.cluster.errors import SourceError
from gpuctl.cluster.live import ConflictError, LiveSource
from gpuctl.core import naming
from gpuctl.core.fit import READY, Verdict, check_inputs, judge_workload
from gpuctl.core.lifecycle import PlanRefused, instancetype_phase, phase_message, plan_stop, should_stop_instance
from gpuctl.core.pins import fit_label_changes, node_fit_labels
from gpuctl.core.views import in_pool, instancetype_detail, instancetype_views, views_to_status
from gpuctl.core.workloads import CheckState, Workload
from gpuctl.operator.metrics import Metrics
from gpuctl.operator.state import ClusterState

log = logging.getLogger("gpuctl.operator")
ACTIVE_MESSAGE = "the node-devices admission check controller is running"


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Memory:
    """What a controller remembers between passes: the Ready verdicts written but not yet seen in the state."""

    ready_written: dict[str, str] = field(default_factory=dict)
    """Workload key → uid of a Workload this controller answered Ready."""


class Controllers:
    def __init__(self, source: LiveSource, metrics: Metrics) -> None:
        self.source = source
        self.metrics = metrics
        self.memory = Memory()

    def run_once(self, state: ClusterState, still_leading: Callable[[], bool] = lambda: True) -> None:
        """One pass of every controller; each step's failure is logged and the next pass retries."""
        for name, step in (
            ("admission-check-active", self.keep_check_active),
            ("node-devices-check", self.judge_workloads),
            ("instancetype-status", self.write_instancetype_status),
            ("fit-labels", self.publish_fit_labels),
            ("instance-stop", self.stop_instances),
        ):
            if not still_leading():
                log.warning("the leader lease may have lapsed: stopping this pass")
                return
            try:
                step(state)
            except ConflictError:
                log.info("%s: an object moved under a write; the next pass retries", name)
            except SourceError as exc:
                log.warning("%s: %s", name, exc)
            except Exception:
                log.exception("%s failed; the next pass retries", name)

    # ------------------------------------------------------------------------------------------- the check itself

    def keep_check_active(self, state: ClusterState) -> None:
        check = self.source.get(kinds.ADMISSIONCHECK, naming.NODE_DEVICES_CHECK)
        if check is None:
            self.source.create(
                kinds.ADMISSIONCHECK,
                {
                    "apiVersion": kinds.ADMISSIONCHECK.api_version,
                    "kind": "AdmissionCheck",
                    "metadata": {"name": naming.NODE_DEVICES_CHECK},
                    "spec": {"controllerName": naming.NODE_DEVICES_CONTROLLER},
                },
            )
            self.metrics.wrote("admission-check-active")
            check = self.source.get(kinds.ADMISSIONCHECK, naming.NODE_DEVICES_CHECK) or {}
        conditions = (check.get("status") or {}).get("conditions") or []
        active = next((c for c in conditions if c.get("type") == "Active"), None)
        if active and active.get("status") == "True" and active.get("message") == ACTIVE_MESSAGE:
            return
        others = [c for c in conditions if c.get("type") != "Active"]
        condition = {
            "type": "Active",
            "status": "True",
            "reason": "Ready",
            "message": ACTIVE_MESSAGE,
            "lastTransitionTime": _now(),
        }
        self.source.patch(
            kinds.ADMISSIONCHECK,
            naming.NODE_DEVICES_CHECK,
            {"status": {"conditions": [*others, condition]}},
            subresource="status",
        )
        self.metrics.wrote("admission-check-active")

    # ------------------------------------------------------------------------------------------- gate 3

    def judge_workloads(self, state: ClusterState) -> None:
        # Remembered Ready verdicts count as written until the state shows them.
        workloads = [self._remembered(w) for w in state.workloads]
        inputs = check_inputs(state.flavors, state.devices.values(), state.nodes, workloads, state.pods)
        for i, w in sorted(enumerate(workloads), key=lambda x: x[1].key):
            current = w.check(naming.NODE_DEVICES_CHECK)
            if current is None:
                continue
            verdict = judge_workload(w, dataclasses.replace(inputs, workloads=tuple(workloads)))
            if not verdict.judged:
                continue
            if current.state != verdict.state or current.message != verdict.message:
                self._write_verdict(w, verdict)
            if verdict.state == READY:
                self.memory.ready_written[w.key] = w.uid
                workloads[i] = _with_check(w, READY, verdict.message)
            elif current.state == READY:
                workloads[i] = _with_check(w, verdict.state, verdict.message)
        seen = {w.key: w for w in state.workloads}
        for key in list(self.memory.ready_written):
            stored = seen.get(key)
            if (
                stored is None
                or stored.uid != self.memory.ready_written[key]
                or (stored.check(naming.NODE_DEVICES_CHECK) or CheckState("", "")).state == READY
                or stored.admitted
            ):
                del self.memory.ready_written[key]

    def _remembered(self, w: Workload) -> Workload:
        if self.memory.ready_written.get(w.key) == w.uid and w.quota_reserved:
            current = w.check(naming.NODE_DEVICES_CHECK)
            if current is not None and current.state != READY:
                return _with_check(w, READY, current.message)
        return w

    def _write_verdict(self, w: Workload, verdict: Verdict) -> None:
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
        self.metrics.wrote("node-devices-check")
        log.info("workload %s: %s: %s", w.key, verdict.state, verdict.message)

    # ------------------------------------------------------------------------------------------- InstanceType status

    def desired_status(self, state: ClusterState, name: str) -> dict[str, Any]:
        it = state.instancetypes[name]
        cores: list[int] = []
        reserved = 0
        queue = state.cluster_queues.get(name)
        if not it.acceleratable:
            pool = it.pool_labels()
            cores = [n.cpu_cores for n in state.nodes.values() if in_pool(n.labels, pool)]
            reserved = queue.reserved.get("cpu", 0) if queue else 0
        status: dict[str, Any] = views_to_status(
            instancetype_views(it, state.devices.values(), node_cores=cores, cpu_reserved=reserved)
        )
        detail = instancetype_detail(it, state.devices.values())
        if detail is not None:
            # The operator publishes the pool's detail for every accelerated type; fields it does not compute stay.
            status["detail"] = {**((state.raw_instancetypes[name].get("status") or {}).get("detail") or {}), **detail}
        status["entrance"] = naming.queue_entrance(name)
        policy = queue.stop_policy if queue else "None"
        outstanding = bool(queue and (queue.reserving or any(v for v in queue.reserved.values())))
        status["phase"] = instancetype_phase(policy, outstanding).value
        status["phaseMessage"] = phase_message(policy, outstanding)
        return status

    def write_instancetype_status(self, state: ClusterState) -> None:
        for name, raw in state.raw_instancetypes.items():
            desired = self.desired_status(state, name)
            current = raw.get("status") or {}
            if all(current.get(k) == v for k, v in desired.items()):
                continue
            rv = (raw.get("metadata") or {}).get("resourceVersion")
            self.source.patch(
                kinds.INSTANCETYPE, name, {"metadata": {"resourceVersion": rv}, "status": desired}, subresource="status"
            )
            self.metrics.wrote("instancetype-status")

    # ------------------------------------------------------------------------------------------- fit labels

    def publish_fit_labels(self, state: ClusterState) -> None:
        for name, node in state.nodes.items():
            changes = fit_label_changes(
                node.labels,
                node_fit_labels(state.devices.get(name)) if node.labels.get(naming.LABEL_MANAGED) == "true" else {},
            )
            if not changes:
                continue
            self.source.patch(kinds.NODE, name, {"metadata": {"labels": changes}})
            self.metrics.wrote("fit-labels")

    # ------------------------------------------------------------------------------------------- instance stop

    def stop_instances(self, state: ClusterState) -> None:
        for raw in state.instances:
            spec = raw.get("spec") or {}
            if spec.get("stop"):
                continue
            type_name = str(spec.get("type") or "")
            it = state.instancetypes.get(type_name)
            queue = state.cluster_queues.get(type_name)
            decision = should_stop_instance(
                it is not None, bool(it and it.deleting), queue.stop_policy if queue else "None"
            )
            if not decision.stop:
                continue
            try:
                plan = plan_stop(raw, running_instance_stop=True)
            except PlanRefused:
                continue
            meta = raw.get("metadata") or {}
            self.source.patch(
                kinds.INSTANCE, str(meta.get("name")), plan.body(), namespace=str(meta.get("namespace") or "default")
            )
            self.metrics.wrote("instance-stop")
            log.info(
                "instance %s/%s: stop instance as its instance type is gone, deleting, or draining (%s)",
                meta.get("namespace"),
                meta.get("name"),
                decision.reason,
            )


def _with_check(w: Workload, state: str, message: str) -> Workload:
    checks = tuple(CheckState(c.name, state, message) if c.name == naming.NODE_DEVICES_CHECK else c for c in w.checks)
    return dataclasses.replace(w, checks=checks)
