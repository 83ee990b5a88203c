"""Kueue's preemption within a ClusterQueue: which admitted Workloads a pending one may evict to take their quota.

When a Workload's quota does not fit its ClusterQueue but would fit its nominal quota, and the queue's
``spec.preemption.withinClusterQueue`` allows it, Kueue looks for victims among the queue's Workloads holding quota:

- the policy decides who may be preempted: ``LowerPriority`` (a lower priority), ``LowerOrNewerEqualPriority``
  (also an equal priority that joined the queue later), ``Never`` (nobody, Kueue's default);
- candidates are tried those already being evicted first, then lowest priority first, then the most recently
  reserved first, then by UID;
- they are removed one at a time until the Workload fits (quota and TAS placement); then, from the second-to-last
  back, every one whose return still lets it fit is given back, so the fewest are evicted.

A preempted Workload is evicted (reason ``Preempted``) and queued again with its creation time; the preemptor is
admitted once their quota is released. Reclaiming quota from a cohort is not modelled.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gpuctl.core.queueing import epoch_seconds, queue_timestamp
from gpuctl.core.workloads import Workload

NEVER = "Never"
LOWER_PRIORITY = "LowerPriority"
LOWER_OR_NEWER_EQUAL_PRIORITY = "LowerOrNewerEqualPriority"
POLICIES = (NEVER, LOWER_PRIORITY, LOWER_OR_NEWER_EQUAL_PRIORITY)


def _seconds(rfc3339: str, missing: float) -> float:
    seconds = epoch_seconds(rfc3339) if rfc3339 else None
    return seconds if seconds is not None else missing


def may_preempt(preemptor: Workload, candidate: Workload, policy: str) -> bool:
    """Whether the policy lets ``preemptor`` evict ``candidate``. A preemptor with no creation time is one not yet
    created (a manifest being simulated): it joins the queue after every Workload there."""
    if candidate.priority < preemptor.priority:
        return policy in (LOWER_PRIORITY, LOWER_OR_NEWER_EQUAL_PRIORITY)
    if policy == LOWER_OR_NEWER_EQUAL_PRIORITY and candidate.priority == preemptor.priority:
        joined = _seconds(queue_timestamp(preemptor), float("inf"))
        return joined < _seconds(queue_timestamp(candidate), float("-inf"))
    return False


def reserved_at(w: Workload) -> float:
    """When the Workload's quota was reserved (its QuotaReserved transition); the latest possible when unknown."""
    cond = w.conditions.get("QuotaReserved")
    seconds = epoch_seconds(cond.last_transition) if cond is not None and cond.last_transition else None
    return seconds if seconds is not None else float("inf")


def candidates(preemptor: Workload, holding: Sequence[Workload], policy: str) -> list[Workload]:
    """The Workloads of the preemptor's ClusterQueue it may evict, in the order Kueue tries them."""
    if policy not in (LOWER_PRIORITY, LOWER_OR_NEWER_EQUAL_PRIORITY):
        return []
    allowed = [w for w in holding if may_preempt(preemptor, w, policy)]
    return sorted(allowed, key=lambda w: (not w.evicted, w.priority, -reserved_at(w), w.uid))


def targets(ordered: Sequence[Workload], fits: Callable[[Sequence[Workload]], bool]) -> list[Workload] | None:
    """The victims Kueue picks: candidates removed in order until ``fits(removed)``; then, from the second-to-last
    back, each one given back whose return still fits. None when even all of them do not make it fit."""
    removed: list[Workload] = []
    for w in ordered:
        removed.append(w)
        if fits(removed):
            break
    else:
        return None
    for w in list(reversed(removed[:-1])):
        rest = [x for x in removed if x.key != w.key]
        if fits(rest):
            removed = rest
    return removed
