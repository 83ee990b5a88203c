"""Keeps the ``gpustack-node-devices`` AdmissionCheck existing and ``Active`` (key: the check).

What wakes it: the AdmissionCheck's events.
"""

from __future__ import annotations

from collections.abc import Iterable

from gpuctl.cluster import kinds
from gpuctl.core import naming
from gpuctl.core.gpustack import STANDALONE
from gpuctl.operator.controllers.base import Controller, Watch, now_rfc3339

ACTIVE_MESSAGE = "the node-devices admission check controller is running"


class ActiveCheckController(Controller):
    """Keeps the ``gpustack-node-devices`` AdmissionCheck existing and ``Active``."""

    name = "admission-check-active"
    kind = kinds.ADMISSIONCHECK
    modes = frozenset({STANDALONE})
    """Beside GPUStack's worker the check and its controller are the worker's."""

    def watches(self) -> Iterable[Watch]:
        return (Watch(kinds.ADMISSIONCHECK, lambda key, _old, _new: [key]),)

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
            "lastTransitionTime": now_rfc3339(),
        }
        self.source.patch(
            kinds.ADMISSIONCHECK, key, {"status": {"conditions": [*others, condition]}}, subresource="status"
        )
        self.metrics.wrote(self.name)
