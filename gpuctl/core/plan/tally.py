"""A pool's views kept per node (:class:`PoolTally`), so a plan's step recomputes only the nodes it touches, and what
a plan costs each view (:func:`cost`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpuctl.core.instancetypes import InstanceType
from gpuctl.core.ledger import NodeDevices
from gpuctl.core.views import (
    ZERO,
    PartitionView,
    PoolViews,
    ProfileCount,
    View,
    accelerator_views,
    in_pool,
    views_to_status,
)


@dataclass(frozen=True, slots=True)
class _NodeViews:
    ex: View
    sh: View
    sl: View
    pt: PartitionView


def _node_views(d: NodeDevices, key: str) -> _NodeViews:
    return _NodeViews(*accelerator_views([d], key))


class PoolTally:
    """A pool's views kept per node, so a plan's step recomputes only the nodes it changes; :meth:`status` equals
    ``views_to_status(instancetype_views(...))`` of the pool's ledgers (nodes :meth:`leave` left out)."""

    def __init__(self, it: InstanceType, ledgers: Mapping[str, NodeDevices]) -> None:
        self.instancetype = it
        self.key = it.accelerator_group
        self.selector = it.pool_labels()
        self.nodes: dict[str, _NodeViews] = {}
        for name in sorted(ledgers):
            d = ledgers[name]
            if in_pool(d.labels, self.selector):
                self.nodes[name] = _node_views(d, self.key)

    def covers(self, node: str) -> bool:
        return node in self.nodes

    def update(self, ledgers: Mapping[str, NodeDevices], nodes: Iterable[str]) -> None:
        for name in nodes:
            if name in self.nodes and name in ledgers:
                self.nodes[name] = _node_views(ledgers[name], self.key)

    def leave(self, nodes: Iterable[str]) -> None:
        """Nodes out of service (cordoned): they no longer count in what the pool can give."""
        for name in nodes:
            self.nodes.pop(name, None)

    def status(self) -> dict[str, Any]:
        """``{"name", "accelerator", "acceleratorShared", "acceleratorSliced", "acceleratorPartitioned"}`` as
        ``gpuctl views -o json`` prints a pool."""
        parts = [self.nodes[n] for n in sorted(self.nodes)]

        def summed(views: list[View]) -> View:
            top = max((v.once_max_request for v in views), default=0)
            return View(top, sum(v.remaining for v in views), sum(v.capacity for v in views))

        remaining: dict[str, int] = {}
        allocated: dict[str, int] = {}
        for p in parts:
            for pc in p.pt.remaining_profiles:
                remaining[pc.name] = remaining.get(pc.name, 0) + pc.count
            for pc in p.pt.allocated_profiles:
                allocated[pc.name] = allocated.get(pc.name, 0) + pc.count
        order = sorted(remaining.keys() | allocated.keys())
        pt_remaining = sum(p.pt.remaining for p in parts)
        pt = PartitionView(
            1 if pt_remaining > 0 else 0,
            pt_remaining,
            sum(p.pt.capacity for p in parts),
            tuple(ProfileCount(n, remaining[n]) for n in order if n in remaining),
            tuple(ProfileCount(n, allocated[n]) for n in order if allocated.get(n, 0) > 0),
        )
        views = PoolViews(
            summed([p.ex for p in parts]),
            summed([p.sh for p in parts]),
            summed([p.sl for p in parts]),
            pt,
            ZERO,
        )
        out = views_to_status(views)
        out.pop("cpu")
        return {"name": self.instancetype.name, **out}


def cost(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, dict[str, int]]:
    """What a plan takes from (negative) or adds to each view of a pool: remaining and capacity, in the view's unit."""
    out: dict[str, dict[str, int]] = {}
    for view in ("accelerator", "acceleratorShared", "acceleratorSliced", "acceleratorPartitioned"):
        b, a = before[view], after[view]
        out[view] = {"remaining": a["remaining"] - b["remaining"], "capacity": a["capacity"] - b["capacity"]}
    return out
