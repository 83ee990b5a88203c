"""A placement loop: Kueue's TAS places a Workload on a node the check refuses, while other nodes of the flavor would
pass it. After each ``Retry`` Kueue evicts it, releases its quota and places it again on a cluster that nothing has
changed — on the same node. It does not converge by itself.

TAS and the check count a node differently:

- Kueue 0.17's TAS charges an admitted Workload its quota usage (credits) and a Pod outside Kueue its raw device
  keys (``nvidia.com/gpu``): cards held outside Kueue never make a node look full in credits, and the least-free-first
  rule keeps choosing it. Kueue 0.18 and later charge both in raw device keys and do not loop on this;
- on every version, TAS counts a node's free credits or device keys as one number, while the check fits card by
  card: a node whose total fits and whose cards do not (slices spread over every card) is chosen again and again.

:func:`placement_loop` finds the nodes that would pass, by judging the same Workload placed there instead, and says
which of the two counts it is and what ends it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from gpuctl.core.fit import READY, FitContext, judge_workload
from gpuctl.core.pods import Pod
from gpuctl.core.workloads import PodSetAssignment, ResourceFlavor, TopologyDomain, Workload

MAX_TRIED = 64
"""Other nodes of the flavor judged at most (the first that pass are enough to name)."""
NAMED = 3


@dataclass(frozen=True, slots=True)
class Loop:
    """A placement TAS repeats and the check refuses."""

    nodes: tuple[str, ...]
    """Where TAS places it."""
    instead: tuple[str, ...]
    """Nodes of its flavor where the check would pass it (the first few)."""
    outside: tuple[str, ...]
    """Pods outside Kueue holding cards on those nodes (``namespace/name``)."""
    raw_counted: bool
    """TAS counts raw device keys for admitted Workloads too (Kueue 0.18+)."""
    pods_per_node: int = 1
    """The most Pods of one PodSet TAS put on one of those nodes."""

    @property
    def why(self) -> str:
        where = ", ".join(self.nodes)
        if self.outside and not self.raw_counted:
            return (
                f"this Kueue's TAS counts the cards held outside Kueue ({', '.join(self.outside)}) in raw device keys "
                f"and admitted Workloads in credits, so {where} never looks full to it and least-free-first keeps "
                f"choosing {where}"
            )
        return f"TAS counts {where}'s free capacity as one number, which fits, while the check counts card by card"

    @property
    def remedies(self) -> str:
        where = ", ".join(self.nodes)
        ways = [
            f"{where} is cordoned (kubectl cordon {' '.join(self.nodes)})",
            f"its Pods are kept off {where} (a node affinity)",
        ]
        if self.outside and not self.raw_counted:
            ways.append(f"{', '.join(self.outside)} ends or runs through Kueue")
        if self.pods_per_node > 1:
            ways.append("fewer of its Pods share a node (lower the Pods per node or the per-Pod request)")
        return ", ".join(ways[:-1]) + f", or {ways[-1]}"

    def sentence(self) -> str:
        return (
            f"this does not converge by itself: after each Retry Kueue evicts it and places it on "
            f"{', '.join(self.nodes)} again — {self.why} — while {', '.join(self.instead)} would pass the check; it "
            f"ends when {self.remedies}"
        )


def placement_loop(
    w: Workload,
    ctx: FitContext,
    flavors: Mapping[str, ResourceFlavor],
    pool_nodes: Mapping[str, Sequence[str]],
    pods_by_node: Mapping[str, Sequence[Pod]],
    *,
    raw_counted: bool,
) -> Loop | None:
    """The loop ``w`` is in when the check refuses the nodes TAS assigned it and would pass another node of the same
    flavor (``pool_nodes``: the schedulable nodes of each flavor, as TAS reads them), or None."""
    placed = {n for a in w.assignments for n, _ in a.hostnames or ()}
    if not placed:
        return None
    instead: list[str] = []
    tried = 0
    for a in w.assignments:
        if not a.hostnames or len(a.hostnames) != 1:
            continue  # a PodSet spread over several nodes: moving it whole is not what TAS would do
        for name in a.credit_flavors:
            if name not in flavors:
                continue
            for node in pool_nodes.get(name, ()):
                if node in placed or node in instead or tried >= MAX_TRIED or len(instead) >= NAMED:
                    continue
                tried += 1
                if judge_workload(_moved(w, a, node), ctx).state == READY:
                    instead.append(node)
    if not instead:
        return None
    outside = sorted(
        f"{p.namespace}/{p.name}"
        for n in placed
        for p in pods_by_node.get(n, ())
        if not p.workload and p.allocations and not p.finished
    )
    most = max((pods for a in w.assignments for _, pods in a.hostnames or ()), default=1)
    return Loop(tuple(sorted(placed)), tuple(instead), tuple(outside), raw_counted, most)


def _moved(w: Workload, a: PodSetAssignment, node: str) -> Workload:
    values = ("",) * (len(a.levels) - 1) + (node,)
    moved = replace(a, domains=(TopologyDomain(values, a.count),))
    return replace(w, assignments=tuple(moved if x is a else x for x in w.assignments))
