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

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

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


# ----------------------------------------------------------------------------------------------- reading an eviction

PREEMPTOR_UID = "to accommodate a workload (UID: "
"""How Kueue's classic eviction message begins to name its preemptor (by UID only)."""
_BY_UID = re.compile(
    r"Preempted to accommodate a workload \(UID: (?P<uid>[^,)]+)(?:, JobUID: [^)]*)?\) due to (?P<why>[^;]+)"
)
_BY_NAME = re.compile(r"(?:to accommodate workload|Preempted by) (?P<name>[a-z0-9][-a-z0-9.]*/[a-z0-9][-a-z0-9.]*)")
_RULE = re.compile(
    r"(?:because of )?preemption ?config '?(?P<config>[^' ]+)'? rule '?(?P<rule>[^' ;,]+)'?"
    r"|rule '(?P<rule2>[^']+)' in PreemptionConfig '(?P<config2>[^']+)'",
    re.IGNORECASE,
)


@dataclass(frozen=True, slots=True)
class Eviction:
    """Who preempted a Workload and why, as its eviction message tells (the preemptor's UID resolved to a name)."""

    preemptor: str
    """``namespace/name``, or ``UID …`` when no Workload read has that UID (it may be gone)."""
    why: str
    """Kueue's reason (``prioritization in the ClusterQueue``, …) or the configured rule (``rule R of config C``)."""

    def describe(self) -> str:
        return f"preempted by {self.preemptor}" + (f" ({self.why})" if self.why else "")


def eviction(message: str, by_uid: Mapping[str, str]) -> Eviction | None:
    """Read a preemption's eviction message: Kueue's classic form names the preemptor only by UID (resolved here
    through ``by_uid``, UID → ``namespace/name``); the configurable preemptions of 0.20 name it and the rule."""
    found = _BY_UID.search(message)
    rule = _RULE.search(message)
    why = ""
    if rule is not None:
        name, config = rule.group("rule") or rule.group("rule2"), rule.group("config") or rule.group("config2")
        why = f"rule {name} of preemption config {config}"
    if found is not None:
        uid = found["uid"].strip()
        return Eviction(by_uid.get(uid, f"UID {uid}"), why or found["why"].strip())
    named = _BY_NAME.search(message)
    if named is not None:
        return Eviction(named["name"], why)
    return None


def uid_names(workloads: Iterable[Workload]) -> dict[str, str]:
    """UID → ``namespace/name`` (a Concurrent Admission Variant by its parent's name: its Pods and listing carry it)."""
    return {w.uid: f"{w.namespace}/{w.pod_owner}" for w in workloads if w.uid}
