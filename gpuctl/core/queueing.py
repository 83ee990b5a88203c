"""Kueue's pending order: which Workloads wait in a ClusterQueue, and in which order Kueue will try them.

Kueue orders a ClusterQueue's pending Workloads (StrictFIFO and BestEffortFIFO alike) by priority, highest first
(``spec.priority``), then by the time they joined the queue (their creation, or the eviction that sent them back),
then by UID. A Workload is pending while it
is active and holds no quota reservation, and is not finished.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gpuctl.core.workloads import Workload


def pending(w: Workload) -> bool:
    return w.active and not w.quota_reserved and not w.admitted and not w.finished


def queue_timestamp(w: Workload) -> str:
    """When the Workload joined the queue: the last eviction's time when it was evicted, else its creation."""
    evicted = w.conditions.get("Evicted")
    if evicted is not None and evicted.true and evicted.last_transition:
        return evicted.last_transition
    return w.created


def order_key(w: Workload) -> tuple[int, str, str]:
    return (-w.priority, queue_timestamp(w), w.uid)


def pending_order(
    workloads: Iterable[Workload], cluster_queue_of: Mapping[str, str], cluster_queue: str
) -> list[Workload]:
    """The pending Workloads of one ClusterQueue in Kueue's order (``cluster_queue_of`` maps a Workload key to the
    ClusterQueue its LocalQueue points at)."""
    return sorted((w for w in workloads if pending(w) and cluster_queue_of.get(w.key) == cluster_queue), key=order_key)


@dataclass(frozen=True, slots=True)
class Position:
    """Where a pending Workload stands in its ClusterQueue (1-based), and who is ahead."""

    position: int
    total: int
    ahead: tuple[Workload, ...]


def position_of(w: Workload, ordered: list[Workload]) -> Position | None:
    for i, other in enumerate(ordered):
        if other.key == w.key:
            return Position(i + 1, len(ordered), tuple(ordered[:i]))
    return None
