"""The per-card fit labels on each managed Node (key: a Node), from its Devices; written only when they change.
A label that turns a node on or off for the Workloads pinned by it is recorded as an Event on the Node.

What wakes it: its Devices' and its own events.
"""

from __future__ import annotations

from collections.abc import Iterable

from gpuctl.cluster import kinds
from gpuctl.core import naming
from gpuctl.core.pins import fit_label_changes, node_fit_labels, pin_transitions
from gpuctl.core.shadow import Kind as ShadowKind
from gpuctl.core.shadow import fit_label_disagreements
from gpuctl.operator.controllers.base import Controller, Watch
from gpuctl.operator.events import NORMAL, Regarding


class FitLabelController(Controller):
    """The per-card fit labels on each managed Node, from its Devices; written only when they change."""

    name = "fit-labels"
    kind = kinds.NODE
    workers = 2

    def watches(self) -> Iterable[Watch]:
        return (
            Watch(kinds.DEVICES, lambda _key, old, new: sorted({d.node for d in (old, new) if d is not None})),
            Watch(kinds.NODE, lambda key, _old, _new: [key]),
        )

    def reconcile(self, key: str) -> None:
        node = self.cache.node(key)
        if node is None:
            if self.shadow is not None:
                self.shadow.forget(ShadowKind.FIT_LABEL, key)
            return
        managed = node.labels.get(naming.LABEL_MANAGED) == "true"
        devices = self.cache.devices(key)
        desired = node_fit_labels(devices) if managed else {}
        if self.shadow is not None:
            self.observe(ShadowKind.FIT_LABEL, key, fit_label_disagreements(key, node.labels, desired, devices))
            return
        changes = fit_label_changes(node.labels, desired)
        if not changes:
            return
        self.source.patch(kinds.NODE, key, {"metadata": {"labels": changes}})
        self.metrics.wrote(self.name)
        pinned, unpinned = pin_transitions(node.labels, changes)
        for reason, labels, what in (
            ("NodePinned", pinned, "takes Workloads pinned by"),
            ("NodeUnpinned", unpinned, "no longer takes Workloads pinned by"),
        ):
            if labels:
                self.record(
                    Regarding(kinds.NODE, key), NORMAL, reason, "UpdateFitLabels", f"{key} {what} {', '.join(labels)}"
                )
