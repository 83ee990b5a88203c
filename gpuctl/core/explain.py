"""The five gates chained for one Workload: which gate holds it, and why.

Each gate gets a verdict — ``passed``, ``held``, ``failed``, ``not-reached``, ``not-applicable`` or ``unknown`` — a
one-line summary, the evidence it rests on (conditions, messages, per-node and per-card figures) and a hint: what
would let it through. ``not-applicable`` is a gate that does not apply to this Workload or did not run for it (a queue
that references no check, a Workload that asks for no accelerator, one that finished), with the reason in its summary.
``heldBy`` is the first gate that neither passed nor does not apply, or None when the Workload runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

from gpuctl.core import naming
from gpuctl.core import pending as pending_reasons
from gpuctl.core.capacity import node_allocatable, pod_shortfalls
from gpuctl.core.checks import check_verdict, gate3, parked_by
from gpuctl.core.credits import MEMO_CONTAINERS
from gpuctl.core.gating import (
    CLEARED,
    FAILED,
    GATE2_PARTS,
    GATE_NAMES,
    HELD,
    NOT_APPLICABLE,
    NOT_REACHED,
    PASSED,
    UNKNOWN,
    ExplainContext,
    Gate,
)
from gpuctl.core.pending import QUOTA, TAS_PLACEMENT
from gpuctl.core.pods import Pod
from gpuctl.core.preemption import eviction, uid_names
from gpuctl.core.queueing import held_gate, missing_local_queue_hint, standing_eviction
from gpuctl.core.quota import QuotaBook, amount_text, flavor_quotas, podset_quota_requests, quota_book
from gpuctl.core.requests import pod_containers, validate_request_rules
from gpuctl.core.serving import OperatorServing, pods_review, uncreated_pods
from gpuctl.core.units import QuantityError, parse_quantity
from gpuctl.core.workloads import ClusterQueue, Condition, Workload

__all__ = [
    "CLEARED",
    "FAILED",
    "GATE2_PARTS",
    "GATE_NAMES",
    "HELD",
    "NOT_APPLICABLE",
    "NOT_REACHED",
    "PASSED",
    "UNKNOWN",
    "ExplainContext",
    "Explanation",
    "Gate",
    "check_verdict",
    "explain_workload",
    "gate3",
    "held_at",
    "with_position",
]


@dataclass(frozen=True, slots=True)
class Explanation:
    namespace: str
    name: str
    gates: tuple[Gate, ...]
    kind: str = "Workload"
    queue: Mapping[str, Any] | None = None
    """A pending Workload's place in its ClusterQueue: ``position``, ``total``, ``ahead`` (who, needing what)."""

    @property
    def held_by(self) -> int | None:
        for g in self.gates:
            if g.verdict not in CLEARED:
                return g.gate
        return None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": self.kind,
            "namespace": self.namespace,
            "name": self.name,
            "heldBy": self.held_by,
            "gates": [g.to_dict() for g in self.gates],
        }
        if self.queue is not None:
            out["queue"] = dict(self.queue)
        return out


def _own_pods(w: Workload, ctx: ExplainContext) -> list[Pod]:
    return list(ctx.check.own_pods(w.namespace, w.pod_owner))


# ----------------------------------------------------------------------------------------------- gate 1


_GATE1: dict[tuple[Any, ...], Gate] = {}


def gate1(w: Workload) -> Gate:
    """Gate 1 depends only on the PodSets (names, counts, containers): the Workloads of a cluster share a few, so
    each is judged once."""
    key = _podsets_key(w)
    got = _GATE1.get(key) if key is not None else None
    if got is None:
        got = _gate1(w)
        if key is not None and len(_GATE1) < 4096:
            _GATE1[key] = got
    return got


def _podsets_key(w: Workload) -> tuple[Any, ...] | None:
    """Everything gate 1 reads of a Workload's PodSets; None where a part is not plain data (judged uncached)."""
    if len(w.podsets) > MEMO_CONTAINERS:  # a key lives as long as the process: no outsized one
        return None
    key = []
    for ps in w.podsets:
        if ps.shape is None:
            return None
        key.append((ps.name, ps.count, ps.shape))
    return tuple(key)


def _gate1(w: Workload) -> Gate:
    evidence: list[str] = []
    errors: list[str] = []
    unfolded: list[str] = []
    for ps in w.podsets:
        containers = pod_containers(ps.spec)
        for e in validate_request_rules(containers):
            errors.append(f"podset {ps.name}: {e}")
        for c in containers:
            kinds = {v.key.kind for v in c.values}
            if naming.KeyKind.SLICED in kinds and naming.KeyKind.SLICED_UNITS not in kinds:
                unfolded.append(f"podset {ps.name}, container {c.name}: no .sliced.units folded into the template")
        families = sorted({f.value for c in containers for f in c.families})
        evidence.append(
            f"podset {ps.name} (count {ps.count}): " + (", ".join(families) if families else "no accelerator request")
        )
    if errors:
        return Gate(
            1,
            FAILED,
            "the Pods this Workload creates break a request rule and will be refused",
            tuple(evidence + errors),
            "fix the request in the Pod template; `gpuctl webhook dry-run pod -f FILE` shows the webhook's answer",
        )
    if unfolded:
        return Gate(
            1,
            PASSED,
            "request rules hold; a slice in the template carries no folded units",
            tuple(evidence + unfolded),
            "a template-built slice without folded units is neither pinned nor charged its memory by Kueue: create the Pods through the queue so the webhook folds them",
        )
    return Gate(1, PASSED, "every PodSet template satisfies the request rules", tuple(evidence))


def served_gate1(
    g1: Gate, pods: Sequence[tuple[str, Mapping[str, str]]], namespace: str, serving: OperatorServing | None
) -> Gate:
    """Gate 1 as the API server will answer for Pods still to be created where gpuctl's webhooks will not review them
    (:func:`gpuctl.core.serving.pods_review`): ``failed`` where it refuses them, ``unknown`` where that turns on what
    cannot be read, the summary saying so where they are let through unreviewed."""
    got = pods_review(serving, pods, namespace) if g1.verdict == PASSED else None
    if got is None:
        return g1
    if got.refused:
        return Gate(1, FAILED if got.known else UNKNOWN, got.summary, (*got.evidence, *g1.evidence), got.hint)
    return g1._replace(summary=got.summary, evidence=(*got.evidence, *g1.evidence), hint=got.hint)


# ----------------------------------------------------------------------------------------------- gate 2


def _quota_evidence(w: Workload, cq: ClusterQueue, book: QuotaBook) -> tuple[list[str], list[str]]:
    """Per PodSet, the flavors Kueue tries with their quota room (as ``simulate`` prints them), and for the first
    PodSet no flavor has the quota for, what it lacks."""
    lines: list[str] = []
    taken: dict[tuple[str, str], Fraction] = {}
    for ps in w.podsets:
        wanted = {r: v * ps.count for r, v in podset_quota_requests(ps).items()}
        tried = flavor_quotas(book, cq, wanted, taken=taken)
        for fq in tried:
            lines.extend(fq.lines)
        fits = next((fq for fq in tried if not fq.short), None)
        if tried and fits is None:
            return lines, [
                f"couldn't assign flavors to pod set {ps.name}: " + ", ".join(r for fq in tried for r in fq.short)
            ]
        if fits is not None:
            for resource, value in wanted.items():
                taken[(fits.flavor, resource)] = taken.get((fits.flavor, resource), Fraction(0)) + value
    return lines, []


def _preempting_for(w: Workload, ctx: ExplainContext) -> list[str]:
    """The Workloads Kueue is evicting to make room for ``w``: their eviction names its UID."""
    if not w.uid:
        return []
    marker = f"(UID: {w.uid}"
    out = []
    for other in ctx.check.workloads:
        for kind in ("Preempted", "Evicted"):
            c = other.conditions.get(kind)
            if c is not None and c.true and marker in c.message:
                out.append(other.key)
                break
    return sorted(out)


def _pods_not_ready(w: Workload, ctx: ExplainContext) -> list[str]:
    """Admitted Workloads whose Pods are not all ready: with ``waitForPodsReady.blockAdmission`` Kueue admits
    nothing else until they are."""
    out = []
    for other in ctx.check.workloads:
        if other.key == w.key or other.finished or not other.admitted:
            continue
        ready = other.conditions.get("PodsReady")
        if ready is None or not ready.true:
            out.append(other.key + (f" ({ready.reason}: {ready.message})" if ready and ready.message else ""))
    return sorted(out)


def _eviction_evidence(w: Workload, ctx: ExplainContext) -> list[str]:
    """Kueue's eviction of the Workload, its preemptor named (Kueue's classic message gives only a UID)."""
    for kind in ("Preempted", "Evicted"):
        c = w.conditions.get(kind)
        if c is None or not c.true:
            continue
        found = eviction(c.message, uid_names(ctx.check.workloads)) if "reempt" in c.message else None
        return [f"{kind}=True ({c.reason}): " + (f"{found.describe()}; {c.message}" if found else c.message)]
    return []


def _over_max(message: str) -> str:
    """By how much Kueue's ``ExceedsMaxQuota`` request is over the most the queue can ever have, in words."""
    figures = pending_reasons.max_quota(message)
    if figures is None:
        return ""
    try:
        asked = parse_quantity(figures.previous) + parse_quantity(figures.current)
        most = parse_quantity(figures.maximum)
    except QuantityError:
        return ""
    return (
        f"{amount_text(figures.resource, asked - most)} of {figures.resource} over the most flavor {figures.flavor} "
        f"can ever give it ({amount_text(figures.resource, most)})"
    )


def _held_by_kueue(held: pending_reasons.Pending, w: Workload, ctx: ExplainContext, evidence: list[str]) -> Gate | None:
    """The answer each of Kueue's pending reasons means, beyond quota and placement (None: not one of those)."""
    part = held.part
    said = held.message or f"QuotaReserved is False ({held.reason})"
    if part == pending_reasons.EXCEEDS_MAX_QUOTA:
        over = _over_max(held.message)
        return Gate(
            2,
            HELD,
            said,
            tuple(evidence + ([f"asks {over}"] if over else [])),
            "waiting never admits it: the request is larger than this queue (with what its cohort may lend) can ever "
            "hold; lower the request or split it, or raise the queue's quota",
            part=part,
        )
    if part == pending_reasons.PREEMPTING:
        victims = _preempting_for(w, ctx)
        return Gate(
            2,
            HELD,
            said,
            tuple(evidence + ([f"being evicted for it: {', '.join(victims)}"] if victims else [])),
            (f"Kueue is evicting {', '.join(victims)} for it" if victims else "Kueue is evicting Workloads for it")
            + "; it is admitted once their Pods are gone",
            part=part,
        )
    if part == pending_reasons.PODS_READY:
        blocking = _pods_not_ready(w, ctx)
        return Gate(
            2,
            HELD,
            said,
            tuple(evidence + ([f"admitted, Pods not ready: {', '.join(blocking)}"] if blocking else [])),
            "Kueue's waitForPodsReady.blockAdmission admits nothing until every admitted Workload's Pods are ready"
            + (f": {blocking[0].split(' ')[0]} first" if blocking else ""),
            part=part,
        )
    if part == pending_reasons.PREEMPTION_GATED or w.conditions.get("BlockedOnPreemptionGates", _NO_COND).true:
        closed = w.closed_preemption_gates
        return Gate(
            2,
            HELD,
            f"Kueue needs to preempt for it, and its preemption gate {', '.join(closed) or '(unnamed)'} is closed",
            tuple(evidence),
            "the controller that owns the gate opens it (Concurrent Admission opens one Variant's at a time, "
            "MultiKueue the worker's); nothing is preempted until then",
            part=pending_reasons.PREEMPTION_GATED,
        )
    if part == pending_reasons.ADMISSION_GATED:
        return Gate(2, HELD, said, tuple(evidence), "the controller named in the annotation lifts the gate", part=part)
    if part == pending_reasons.SUSPENDED:
        return Gate(2, HELD, said, tuple(evidence), "`gpuctl doctor` says why the queue is inactive", part=part)
    if part == pending_reasons.MISCONFIGURED:
        return Gate(2, HELD, said, tuple(evidence), "`gpuctl doctor` checks the queues and their pools", part=part)
    if part == pending_reasons.NO_FLAVOR:
        return Gate(
            2,
            HELD,
            said,
            tuple(evidence),
            "no flavor of the queue can take these Pods as they ask: change the request, tolerations or selectors",
            part=part,
        )
    if part == pending_reasons.ON_HOLD:
        return Gate(
            2, HELD, said, tuple(evidence), "its owner holds it (a Job or StatefulSet scaled to zero)", part=part
        )
    return None


_NO_COND = Condition("", "", "")


def gate2(w: Workload, ctx: ExplainContext) -> Gate:
    """Gate 2, with an eviction that still stands said in its summary: one being carried out holds the Workload
    (its quota is given back once its Pods stop), and one behind a Workload waiting again is named first."""
    g = _gate2(w, ctx)
    evicted = standing_eviction(w) if not w.finished else None
    if evicted is None:
        return g
    what = f"{evicted.type} by Kueue ({evicted.reason})"
    if g.verdict == PASSED:
        return g._replace(
            verdict=HELD,
            summary=f"{what}: it gives its quota back once its Pods stop, then waits in line again"
            + (f" — {evicted.message}" if evicted.message else ""),
            hint="`gpuctl explain --history` shows the eviction and what came before it",
        )
    if g.verdict == HELD:
        requeued = w.conditions.get("Requeued")
        again = "re-queued" if requeued is None or requeued.true else f"not re-queued yet ({requeued.reason})"
        return g._replace(summary=f"{what}, {again}: {g.summary}")
    return g


def _gate2(w: Workload, ctx: ExplainContext) -> Gate:
    evidence: list[str] = []
    if ctx.local_queue is None:
        return Gate(
            2,
            HELD,
            f"LocalQueue {w.queue_name!r} does not exist in namespace {w.namespace}",
            (),
            missing_local_queue_hint(w.queue_name, w.namespace),
        )
    evidence.append(
        f"LocalQueue {ctx.local_queue.namespace}/{ctx.local_queue.name} → ClusterQueue {ctx.local_queue.cluster_queue}"
    )
    cond = w.conditions.get("QuotaReserved")
    if cond is not None:
        evidence.append(
            f"QuotaReserved={cond.status} ({cond.reason}): {cond.message}"
            if cond.message
            else f"QuotaReserved={cond.status} ({cond.reason})"
        )
    blocked = w.conditions.get("BlockedOnPreemptionGates")
    if blocked is not None and blocked.true:
        evidence.append(f"BlockedOnPreemptionGates=True ({blocked.reason}): {blocked.message}")
    evidence.extend(_eviction_evidence(w, ctx))
    if w.variant_name:
        evidence.append(
            f"Concurrent Admission: {w.variants} Variant(s) of this Workload, one per flavor; "
            f"{w.variant_name} stands for it here (the one that holds quota, else an active one)"
        )
    cq = ctx.cluster_queue
    book = ctx.quota if ctx.quota is not None else quota_book({cq.name: cq} if cq else {}, ())
    if cq is not None:
        evidence.append(f"stopPolicy {cq.stop_policy}")
        if cq.quota_note:
            evidence.append(cq.quota_note)
        evidence.extend(book.differences(cq.name))
    if w.quota_reserved:
        return Gate(
            2, PASSED, f"quota reserved in ClusterQueue {w.cluster_queue or (cq.name if cq else '?')}", tuple(evidence)
        )
    if not w.active:
        if parked_by(w) is not None:
            return Gate(2, NOT_APPLICABLE, "the Workload is deactivated: it asks for no quota", tuple(evidence))
        return Gate(2, HELD, "the Workload is deactivated", tuple(evidence), "set spec.active=true to queue it again")
    lq = ctx.local_queue
    if lq.stop_policy in ("Hold", "HoldAndDrain"):
        return Gate(
            2,
            HELD,
            f"LocalQueue {lq.namespace}/{lq.name} is on {lq.stop_policy}: it admits nothing",
            tuple(evidence),
            f"kubectl -n {lq.namespace} patch localqueues.kueue.x-k8s.io {lq.name} --type merge "
            '-p \'{"spec":{"stopPolicy":"None"}}\' puts it back in service',
        )
    if cq is None:
        return Gate(2, UNKNOWN, f"ClusterQueue {ctx.local_queue.cluster_queue} is not readable", tuple(evidence))
    if cq.stop_policy in ("Hold", "HoldAndDrain"):
        return Gate(
            2,
            HELD,
            f"ClusterQueue {cq.name} is on {cq.stop_policy}: it admits nothing",
            tuple(evidence),
            f"`gpuctl resume {cq.name}` puts the pool back in service",
        )
    held = pending_reasons.pending(cond)
    special = _held_by_kueue(held, w, ctx, evidence)
    if special is not None:
        return special
    lines, short = _quota_evidence(w, cq, book)
    evidence[1:1] = lines
    kueue = cond.message if cond is not None and not cond.true else ""
    part = held.part
    if part == TAS_PLACEMENT and held.by_token:
        # Kueue's token says even an empty pool would not place the Pods: quota elsewhere does not matter.
        return Gate(
            2,
            HELD,
            kueue,
            tuple(evidence),
            "TAS finds no node that could hold the Pods even if every admitted Workload were gone: change the "
            "request, selectors or Pods per node, or add nodes; `gpuctl simulate --workload` tries each",
            part=TAS_PLACEMENT,
        )
    if short or part == QUOTA:
        return Gate(
            2,
            HELD,
            short[0] if short else kueue,
            tuple(evidence),
            "wait for admitted Workloads of this pool to finish, or grow the pool (nominal quota follows nodes x cards x M)",
            part=QUOTA,
        )
    if part == TAS_PLACEMENT:
        return Gate(
            2,
            HELD,
            kueue,
            tuple(evidence),
            "the quota fits; no node of the flavor has room for the Pods as TAS counts it (capacity keys, fit labels, "
            "selectors): `gpuctl simulate --workload` shows what would make room",
            part=TAS_PLACEMENT,
        )
    if part == pending_reasons.EVALUATING:
        return Gate(
            2,
            HELD,
            kueue or "in Kueue's queue, not tried yet",
            tuple(evidence),
            "Kueue has not tried it yet (or its checks failed and it waits its turn again); its place in line is in "
            "`gpuctl queue`",
            part=part,
        )
    return Gate(
        2,
        HELD,
        "waiting for Kueue to reserve quota",
        tuple(evidence),
        "the quota fits on paper: see the QuotaReserved message for what Kueue is waiting on (flavor, topology, or fit labels)",
    )


# ----------------------------------------------------------------------------------------------- gates 4 and 5


def gate4(w: Workload, pods: list[Pod], ctx: ExplainContext) -> Gate:
    if not w.admitted:
        return Gate(4, NOT_REACHED, "Pods are scheduled once the Workload is admitted")
    if not pods:
        return Gate(
            4,
            UNKNOWN,
            "no Pod of this Workload was found",
            (),
            "the job controller creates the Pods after admission; read the Pods too (`gpuctl dump` includes them)",
        )
    evidence: list[str] = []
    pending = [p for p in pods if not p.node_name]
    for p in pending[:5]:
        scheduled = p.conditions.get("PodScheduled")
        line = f"pod {p.name}: not bound"
        if p.scheduling_gates:
            line += f"; scheduling gates {', '.join(p.scheduling_gates)}"
        if scheduled is not None and scheduled.message:
            line += f"; {scheduled.reason}: {scheduled.message}"
        evidence.append(line)
    if pending:
        for node_name in sorted({n for a in w.assignments for n, _ in (a.hostnames or [])}):
            d = ctx.check.devices.get(node_name)
            if d is None:
                continue
            others = [p.requests for p in ctx.pods if p.node_name == node_name and not p.finished]
            short = pod_shortfalls(pending[0].requests, node_allocatable(d), others)
            if short:
                evidence.append(f"{node_name}: " + "; ".join(s.describe() for s in short))
        return Gate(
            4,
            HELD,
            f"{len(pending)} of {len(pods)} Pod(s) not bound to a node",
            tuple(evidence),
            "on a TAS queue the Pod is pinned to its assigned node: it stays Pending until that node's keys free up",
        )
    bound = sorted({p.node_name for p in pods})
    return Gate(4, PASSED, f"every Pod is bound ({', '.join(bound)})", tuple(evidence))


def gate5(pods: list[Pod], reached: bool) -> Gate:
    if not reached:
        return Gate(5, NOT_REACHED, "Allocate runs when the kubelet admits a bound Pod")
    failed = [p for p in pods if p.reason == "UnexpectedAdmissionError"]
    if failed:
        return Gate(
            5,
            FAILED,
            f"{len(failed)} Pod(s) failed with UnexpectedAdmissionError: Allocate refused the device",
            tuple(f"pod {p.name}: {p.message}" for p in failed[:5]),
            "a kubelet that ignores the allocator's packing hint can put a slice where a later one finds no room; the owner recreates the Pod",
        )
    unheld = [p for p in pods if p.accelerator_containers and not p.held and not p.finished]
    if unheld:
        return Gate(
            5,
            HELD,
            f"{len(unheld)} Pod(s) bound but not yet recorded by Allocate",
            tuple(f"pod {p.name} on {p.node_name}: phase {p.phase or 'unknown'}" for p in unheld[:5]),
        )
    if not any(p.accelerator_containers for p in pods):
        return Gate(5, NOT_APPLICABLE, "no container asks for an accelerator: Allocate has nothing to settle")
    evidence = tuple(
        f"pod {p.name}: {', '.join(sorted({a.card_id for a in p.allocations}))}" for p in pods if p.allocations
    )
    return Gate(5, PASSED, "every accelerator container holds its devices", evidence)


SHOWN_AHEAD = 5


def with_position(
    e: Explanation, cluster_queue: str, position: int, total: int, ahead: Sequence[Workload]
) -> Explanation:
    """A pending Workload's explanation with its place in line (1-based, of ``total`` pending): gate 2's evidence
    says it, and ``queue`` holds it."""
    from gpuctl.core.queueing import asks

    needing = [f"{a.key} needing {asks(a)}" for a in ahead[:SHOWN_AHEAD]]
    more = f"; and {len(ahead) - SHOWN_AHEAD} more" if len(ahead) > SHOWN_AHEAD else ""
    line = f"position {position} of {total} in ClusterQueue {cluster_queue}" + (
        f"; ahead: {', '.join(needing)}{more}" if ahead else "; first in line"
    )
    gates = tuple(g._replace(evidence=(*g.evidence, line)) if g.gate == 2 else g for g in e.gates)
    queue = {
        "clusterQueue": cluster_queue,
        "position": position,
        "total": total,
        "ahead": [{"namespace": a.namespace, "name": a.name, "asks": asks(a)} for a in ahead],
    }
    return replace(e, gates=gates, queue=queue)


def _finished(w: Workload) -> Explanation:
    """A finished Workload holds nothing: no gate applies to it any more."""
    cond = w.conditions.get("Finished")
    why = f"the Workload finished ({cond.reason}{': ' + cond.message if cond and cond.message else ''})" if cond else ""
    return Explanation(
        w.namespace, w.name, (gate1(w), *(Gate(g, NOT_APPLICABLE, why + ": it holds nothing") for g in range(2, 6)))
    )


def held_at(w: Workload, own_pods: Sequence[Pod]) -> int | None:
    """The gate that holds ``w``, from the Workload and its own Pods alone: the ``heldBy`` of its explanation wherever
    those records decide it (``top`` and the operator's gauges count with it; a reserved, unadmitted Workload is
    held at 3 whatever the check would now answer)."""
    if gate1(w).verdict not in CLEARED:
        return 1
    return held_gate(w, own_pods)


def explain_workload(w: Workload, ctx: ExplainContext) -> Explanation:
    """The five gates for one Workload, in order."""
    if w.finished:
        return _finished(w)
    pods = _own_pods(w, ctx)
    g1 = gate1(w)
    if ctx.serving is not None:
        g1 = served_gate1(g1, uncreated_pods(w.podsets, pods), w.namespace, ctx.serving)
    g2 = gate2(w, ctx)
    g3 = (
        gate3(w, ctx)
        if g2.verdict == PASSED or w.quota_reserved or parked_by(w) is not None
        else Gate(3, NOT_REACHED, "the checks run once quota is reserved")
    )
    g4 = (
        gate4(w, pods, ctx)
        if g3.verdict in CLEARED
        else Gate(4, NOT_REACHED, "Pods are scheduled once the Workload is admitted")
    )
    g5 = gate5(pods, g4.verdict == PASSED)
    return Explanation(w.namespace, w.name, (g1, g2, g3, g4, g5))
