"""Why Kueue has not reserved quota for a Workload, read from its ``QuotaReserved`` condition.

Kueue 0.19 and later (with ``UnadmittedWorkloadsObservability``, on by default from 0.20) write a token as the
condition's reason: ``WaitingForQuota``, ``TopologyPlacementFailed``, … Older Kueue, and 0.19 with the gate off, write
``Pending`` (the scheduler) or ``Inadmissible`` (the workload controller) and say everything in the message. A token
is read as it is written; a classic reason is read from the message's own wording. Either way the answer is one
:class:`Pending` that says which part of gate 2 holds the Workload and whether waiting can ever help.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from gpuctl.core.workloads import Condition

# The parts of gate 2 that can hold a Workload (explain's ``part``).
QUOTA: Final = "quota"
"""Quota that admitted Workloads use: waiting (or preemption) can help."""
TAS_PLACEMENT: Final = "tas-placement"
"""Quota fits; topology-aware scheduling finds no node with room for the Pods."""
STRICT_ORDER: Final = "strict-fifo"
"""A StrictFIFO queue's head ahead of it cannot be admitted."""
EXCEEDS_MAX_QUOTA: Final = "exceeds-max-quota"
"""The request is larger than all the queue (and its cohort) could ever lend it: waiting never helps."""
NO_FLAVOR: Final = "no-matching-flavor"
"""No flavor of the queue provides the resources or tolerates the Pods."""
PREEMPTING: Final = "preempting"
"""Kueue is evicting Workloads to make room for it."""
PODS_READY: Final = "waiting-for-pods-ready"
"""``waitForPodsReady.blockAdmission``: an admitted Workload's Pods are not ready yet, so Kueue admits nothing."""
PREEMPTION_GATED: Final = "preemption-gated"
"""It needs to preempt, and a preemption gate of its is closed."""
ADMISSION_GATED: Final = "admission-gated"
"""The ``kueue.x-k8s.io/admission-gated-by`` annotation holds it back."""
SUSPENDED: Final = "suspended"
"""Its LocalQueue or ClusterQueue is stopped or inactive."""
MISCONFIGURED: Final = "misconfigured"
"""Its LocalQueue or ClusterQueue does not exist, or its namespace is not admitted."""
EVALUATING: Final = "pending-evaluation"
"""In Kueue's queue, not yet tried (or its checks failed and it waits to be tried again)."""
ON_HOLD: Final = "on-hold"
DEACTIVATED: Final = "deactivated"

PARTS: Final = {
    QUOTA: "Kueue quota",
    TAS_PLACEMENT: "Kueue TAS placement",
    STRICT_ORDER: "Kueue StrictFIFO order",
    EXCEEDS_MAX_QUOTA: "Kueue quota (never enough)",
    NO_FLAVOR: "Kueue flavor assignment",
    PREEMPTING: "Kueue preemption",
    PODS_READY: "Kueue waitForPodsReady",
    PREEMPTION_GATED: "Kueue preemption gate",
    ADMISSION_GATED: "Kueue admission gate",
    SUSPENDED: "Kueue queue stopped",
    MISCONFIGURED: "Kueue queue configuration",
    EVALUATING: "Kueue queue",
    ON_HOLD: "Kueue hold",
    DEACTIVATED: "Kueue deactivation",
}
"""What each part is called where a gate is named."""

TOKENS: Final = {
    "WaitingForQuota": QUOTA,
    "TopologyPlacementFailed": TAS_PLACEMENT,
    "ExceedsMaxQuota": EXCEEDS_MAX_QUOTA,
    "NoMatchingFlavor": NO_FLAVOR,
    "WaitingForPreemptedWorkloads": PREEMPTING,
    "WaitingForPodsReady": PODS_READY,
    "AdmissionGated": ADMISSION_GATED,
    "Suspended": SUSPENDED,
    "Misconfigured": MISCONFIGURED,
    "PendingEvaluation": EVALUATING,
    "OnHold": ON_HOLD,
    "Deactivated": DEACTIVATED,
}
"""Kueue's ``QuotaReserved`` reasons (KEP-10852) and the part each names."""
CLASSIC: Final = frozenset({"Pending", "Inadmissible", "Waiting"})
"""The reasons older Kueue writes for every hold: the message says which."""

PREEMPTION_GATE_MESSAGE: Final = "Workload requires preemption, but it's gated"

_MAX_QUOTA = re.compile(
    r"insufficient quota for (?P<resource>\S+) in flavor (?P<flavor>\S+), previously considered podsets requests "
    r"\((?P<previous>[^)]*)\) \+ current podset request \((?P<current>[^)]*)\) > maximum capacity \((?P<max>[^)]*)\)"
)


@dataclass(frozen=True, slots=True)
class Pending:
    """What holds a Workload at gate 2, as Kueue wrote it."""

    part: str
    """One of the parts above; "" when the condition says nothing this module reads."""
    reason: str
    """The condition's reason as written (a token, or ``Pending``/``Inadmissible``)."""
    message: str
    by_token: bool
    """The part was read from a token, not from the message's wording."""

    @property
    def waits(self) -> bool:
        """Waiting can let it through by itself (nothing to change first)."""
        return self.part in (QUOTA, PREEMPTING, PODS_READY, EVALUATING, TAS_PLACEMENT, STRICT_ORDER)


def _from_message(message: str) -> str:
    """The part a classic reason's message names (Kueue's own wording, every version)."""
    if _MAX_QUOTA.search(message):
        return EXCEEDS_MAX_QUOTA
    if "Pending the preemption of" in message or "will fit after these preemptions complete" in message:
        return PREEMPTING
    if "insufficient unused quota" in message or "no longer fits after processing another workload" in message:
        return QUOTA
    if 'topology "' in message or "excluded:" in message:
        return TAS_PLACEMENT
    if PREEMPTION_GATE_MESSAGE in message:
        return PREEMPTION_GATED
    if "waiting for all admitted workloads to be in PodsReady condition" in message:
        return PODS_READY
    if message.startswith("Admission is gated by:"):
        return ADMISSION_GATED
    if re.search(r"(LocalQueue|ClusterQueue) \S+ is (inactive|stopped)", message):
        return SUSPENDED
    if re.search(r"(LocalQueue|ClusterQueue) \S+ (doesn't exist|not found|is terminating or missing)", message):
        return MISCONFIGURED
    if (
        "untolerated taint" in message
        or "doesn't match node affinity" in message
        or "does not provide resource" in (message)
    ):
        return NO_FLAVOR
    if "unavailable in ClusterQueue" in message or re.search(r"flavor \S+ not found", message):
        return NO_FLAVOR
    return ""


def pending(condition: Condition | None) -> Pending:
    """What a ``QuotaReserved`` condition that is not true says holds the Workload."""
    if condition is None or condition.true:
        return Pending("", condition.reason if condition else "", condition.message if condition else "", False)
    token = TOKENS.get(condition.reason)
    if token is not None:
        # A preemption-gated Workload carries AdmissionGated with the gate's message (0.19+).
        if token == ADMISSION_GATED and PREEMPTION_GATE_MESSAGE in condition.message:
            token = PREEMPTION_GATED
        if token == QUOTA and _from_message(condition.message) == TAS_PLACEMENT:
            # WaitingForQuota over a placement TAS finds only once room is freed: the placement holds it, and
            # (unlike TopologyPlacementFailed) freeing room can help.
            return Pending(TAS_PLACEMENT, condition.reason, condition.message, False)
        return Pending(token, condition.reason, condition.message, True)
    return Pending(_from_message(condition.message), condition.reason, condition.message, False)


def message_part(message: str) -> str:
    """The part a Kueue pending message names, read from its wording alone (Events, old conditions)."""
    return _from_message(message)


@dataclass(frozen=True, slots=True)
class MaxQuota:
    """Kueue's ``ExceedsMaxQuota`` arithmetic for one resource: what was asked against the most it can ever have."""

    resource: str
    flavor: str
    previous: str
    current: str
    maximum: str


def max_quota(message: str) -> MaxQuota | None:
    """The figures of Kueue's "insufficient quota … > maximum capacity (…)" message, as written."""
    found = _MAX_QUOTA.search(message)
    if found is None:
        return None
    return MaxQuota(found["resource"], found["flavor"], found["previous"], found["current"], found["max"])
