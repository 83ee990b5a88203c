"""What a simulation answers for one Workload: explain's five gates, and where it lands when admitted."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gpuctl.core.explain import (
    NOT_REACHED,
    Explanation,
    Gate,
)
from gpuctl.core.pods import CardAllocation, Pod
from gpuctl.core.submissions import Submission
from gpuctl.core.workloads import (
    PodSetAssignment,
)


@dataclass(frozen=True, slots=True)
class PlacedNode:
    name: str
    pods: int
    cards: tuple[str, ...]
    allocations: tuple[tuple[int, CardAllocation], ...] = ()
    """(the Pod's place among this node's Pods, a card it is given), as ``Allocate`` would record them."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """One simulated Workload: explain's five gates, and where it lands when admitted."""

    submission: Submission
    explanation: Explanation
    placement: tuple[PlacedNode, ...] = ()
    cluster_queue: str = ""
    reservation: tuple[PodSetAssignment, ...] = ()
    """Each PodSet's flavors and nodes as Kueue would reserve them (empty when quota is not reserved)."""
    preempted: tuple[str, ...] = ()
    """The Workloads (``namespace/name``) Kueue evicts to make room for it."""

    @property
    def admitted(self) -> bool:
        return self.explanation.held_by is None

    def to_dict(self) -> dict[str, Any]:
        out = self.explanation.to_dict() | {"admitted": self.admitted}
        if self.preempted:
            out["preempts"] = list(self.preempted)
        if self.admitted:
            out["placement"] = {
                "nodes": [
                    {
                        "name": n.name,
                        "pods": n.pods,
                        "cards": list(n.cards),
                        "allocations": [
                            {
                                "pod": i,
                                "container": a.container,
                                "card": a.card_id,
                                "group": a.group,
                                "mode": a.mode,
                                "units": a.allocated,
                                **({"profile": a.profile} if a.profile else {}),
                            }
                            for i, a in n.allocations
                        ],
                    }
                    for n in self.placement
                ]
            }
        return out


def not_reached(after: int) -> list[Gate]:
    why = {
        2: "Kueue queues the Workload once its Pods are accepted",
        3: "the check runs once quota is reserved",
        4: "Pods are scheduled once the Workload is admitted",
        5: "Allocate runs when the kubelet admits a bound Pod",
    }
    return [Gate(g, NOT_REACHED, why[g]) for g in range(after + 1, 6)]


def placement_of(pods: Sequence[Pod]) -> tuple[PlacedNode, ...]:
    by_node: dict[str, list[Pod]] = {}
    for p in pods:
        by_node.setdefault(p.node_name, []).append(p)
    return tuple(
        PlacedNode(
            n,
            len(ps),
            tuple(dict.fromkeys(a.card_id for p in ps for a in p.allocations)),
            tuple((i, a) for i, p in enumerate(ps) for a in p.allocations),
        )
        for n, ps in sorted(by_node.items())
    )
