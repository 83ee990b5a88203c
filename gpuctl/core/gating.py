"""What every gate reads of a Workload's cluster (:class:`ExplainContext`) and what it says: its verdict words and the
record of one gate's verdict (``explain``, ``simulate`` and the operator's gauges speak them)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from gpuctl.core import pending as pending_reasons
from gpuctl.core.fit import FitContext
from gpuctl.core.instancetypes import InstanceType
from gpuctl.core.pods import Pod
from gpuctl.core.quota import QuotaBook
from gpuctl.core.serving import OperatorServing
from gpuctl.core.workloads import AdmissionCheck, ClusterQueue, LocalQueue

PASSED = "passed"
HELD = "held"
FAILED = "failed"
NOT_REACHED = "not-reached"
NOT_APPLICABLE = "not-applicable"
UNKNOWN = "unknown"
CLEARED = (PASSED, NOT_APPLICABLE)
"""Verdicts that let a Workload on to the next gate."""

GATE_NAMES = {
    1: "Pod webhook",
    2: "Kueue credits quota",
    3: "gpustack-node-devices AdmissionCheck",
    4: "scheduler / kubelet",
    5: "device-plugin allocator",
}
GATE2_PARTS = pending_reasons.PARTS
"""What of gate 2 holds a Workload: Kueue's quota, its topology-aware placement, (in a StrictFIFO queue) a head
ahead of it that cannot be admitted, or what else Kueue's pending reason names (:mod:`gpuctl.core.pending`)."""


class Gate(NamedTuple):
    """One gate's verdict on a Workload (a named tuple, as the parsed records it is built for thousands of times:
    :class:`gpuctl.core.workloads.Condition`)."""

    gate: int
    verdict: str
    summary: str
    evidence: tuple[str, ...] = ()
    hint: str = ""
    check: tuple[str, str] | None = None
    """Gate 3 only: the (state, message) the check computes on the same inputs, when it judges the Workload."""
    part: str = ""
    """Gate 2: which half holds the Workload (:data:`QUOTA` or :data:`TAS_PLACEMENT`), when one does; gate 3: the
    AdmissionCheck other than ``gpustack-node-devices`` that holds it (GPUStack's joint check), when one does."""
    checks: tuple[tuple[str, str, str], ...] = ()
    """Gate 3 only: (name, state, message) of every AdmissionCheck on the Workload, in its status's order."""

    @property
    def name(self) -> str:
        if self.gate == 3 and self.part:
            return f"{self.part} AdmissionCheck"
        return GATE2_PARTS.get(self.part, GATE_NAMES[self.gate])

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "gate": self.gate,
            "name": self.name,
            "verdict": self.verdict,
            "summary": self.summary,
            "evidence": list(self.evidence),
            "hint": self.hint,
        }
        if self.check is not None:
            out["check"] = {"state": self.check[0], "message": self.check[1]}
        if self.part:
            out["part"] = self.part
        if self.gate == 3:
            out["checks"] = [{"name": n, "state": st, "message": m} for n, st, m in self.checks]
        return out


@dataclass(frozen=True, slots=True)
class ExplainContext:
    """Everything the explanation reads, as records."""

    local_queue: LocalQueue | None = None
    cluster_queue: ClusterQueue | None = None
    instancetype: InstanceType | None = None
    admission_check: AdmissionCheck | None = None
    check: FitContext = field(default_factory=lambda: FitContext({}, {}))
    """Gate 3's inputs, built by :func:`gpuctl.core.fit.check_inputs` exactly as the operator's check builds them."""
    quota: QuotaBook | None = None
    """Every queue's quota and usage (:func:`gpuctl.core.quota.quota_book`, as ``simulate`` starts from); None reads
    the Workload's own ClusterQueue alone."""
    raw_tas: Callable[[], bool] | None = None
    """Whether the Kueue at hand counts admitted Workloads in raw device keys in TAS (0.18+), asked only when an
    answer depends on it; None: as the newest tested Kueue does."""
    serving: OperatorServing | None = None
    """Whether the operator serves its webhooks and check now, and which webhooks are registered (None: not known,
    and nothing is claimed: the answers are those of a serving operator)."""

    @property
    def pods(self) -> Sequence[Pod]:
        """Every Pod read (the Workload's own and those bound to its nodes)."""
        return self.check.pods
