"""The per-card fit labels on each managed Node (key: a Node), from its Devices; written only when they change.
A label that turns a node on or off for the Workloads pinned by it is recorded as an Event on the Node.

What wakes it: its Devices' and its own events.
"""

from __future__ import annotations

from collections.abc import Iterable

from gpuctl.cluster import kinds
from gpuctl.core import naming
from gpuctl.core.pins import fit_label_changes, node_fit_labels, pin_transitions
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
            return
        managed = node.labels.get(naming.LABEL_MANAGED) == "true"
        changes = fit_label_changes(node.labels, node_fit_labels(self.cache.devices(key)) if managed else {})
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
