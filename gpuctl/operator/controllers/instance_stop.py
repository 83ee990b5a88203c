"""The running-instance stop (key: an Instance): ``spec.stop=true`` for an Instance whose type is gone or being deleted,
or whose queue drains (``HoldAndDrain``), also while it is still ``Starting``.

What wakes it: its own events; its InstanceType's deletion; its ClusterQueue's stop policy.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gpuctl.cluster import kinds
from gpuctl.core import naming
from gpuctl.core.lifecycle import PlanRefused, plan_stop, should_stop_instance
from gpuctl.core.shadow import Kind as ShadowKind
from gpuctl.core.shadow import stop_disagreement
from gpuctl.core.workloads import ClusterQueue
from gpuctl.operator.cache import CachedInstanceType
from gpuctl.operator.controllers.base import Controller, Watch, log, split_key
from gpuctl.operator.events import NORMAL, Regarding


class InstanceStopController(Controller):
    """The running-instance stop: ``spec.stop=true`` for an Instance whose type is gone or deleting, or whose queue
    drains (``HoldAndDrain``) — also while it is still ``Starting``."""

    name = "instance-stop"
    kind = kinds.INSTANCE

    def watches(self) -> Iterable[Watch]:
        return (
            Watch(kinds.INSTANCE, lambda key, _old, _new: [key]),
            Watch(kinds.INSTANCETYPE, self._on_instancetype),
            Watch(kinds.CLUSTERQUEUE, self._on_cluster_queue),
        )

    def _on_instancetype(self, key: str, _old: Any, new: CachedInstanceType | None) -> list[str]:
        """The Instances of a type that is gone or being deleted."""
        return self.instances_of(key) if new is None or new.record.deleting else []

    def _on_cluster_queue(self, key: str, old: ClusterQueue | None, new: ClusterQueue | None) -> list[str]:
        """The Instances of a pool whose queue comes, goes or changes its stop policy."""
        if old is None or new is None or old.stop_policy != new.stop_policy:
            return self.instances_of(key)
        return []

    def instances_of(self, instancetype: str) -> list[str]:
        return list(self.cache.instances_by_type.get(instancetype, ()))

    def reconcile(self, key: str) -> None:
        raw = self.cache.store(kinds.INSTANCE).get(key)
        if raw is None:
            if self.shadow is not None:
                self.shadow.forget(ShadowKind.STOP, key)
            return
        spec = raw.get("spec") or {}
        type_name = str(spec.get("type") or "")
        cached = self.cache.instancetypes().get(type_name)
        queue = self.cache.cluster_queue(type_name)
        decision = should_stop_instance(
            cached is not None, bool(cached and cached.record.deleting), queue.stop_policy if queue else "None"
        )
        namespace, name = split_key(key)
        meta = raw.get("metadata") or {}
        if self.shadow is not None:
            found = stop_disagreement(namespace or "default", name, bool(spec.get("stop")), decision)
            self.observe(ShadowKind.STOP, key, [found] if found else [], str(meta.get("uid") or ""))
            return
        if spec.get("stop") or not decision.stop:
            return
        try:
            plan = plan_stop(raw, running_instance_stop=True)
        except PlanRefused:
            return
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
        self.record(
            Regarding(kinds.INSTANCE, name, namespace or "default", str(meta.get("uid") or "")),
            NORMAL,
            decision.cause,
            "StopInstance",
            f"spec.stop set: {decision.reason}",
        )
