"""Gate 3: every AdmissionCheck on a Workload. The ``gpustack-node-devices`` check judged card by card exactly as its
controller judges it (and recomputed beside its written state), each other check — GPUStack's
``gpustack-model-deployment-joint`` among them — as its controller wrote it; the first that holds the Workload names
the gate, and a Workload the joint check parked is said to be parked."""

from __future__ import annotations

from gpuctl.core import gpustack, naming
from gpuctl.core.fit import LEDGER_PUBLISHED, READY, RETRY, Verdict, judge_workload
from gpuctl.core.gating import CLEARED, FAILED, HELD, NOT_APPLICABLE, NOT_REACHED, PASSED, ExplainContext, Gate
from gpuctl.core.naming import Family
from gpuctl.core.pins import has_fit_pin
from gpuctl.core.pods import Pod
from gpuctl.core.serving import operator_fix_hint, unserved_check
from gpuctl.core.tasloop import Loop, placement_loop
from gpuctl.core.workloads import CheckState, Workload

# ----------------------------------------------------------------------------------------------- gate 3


def _gate3_hints(w: Workload, verdict: Verdict, ctx: ExplainContext) -> tuple[list[str], str]:
    """Recognise the known behaviours behind a Retry: evidence lines and the hint."""
    evidence: list[str] = []
    if (loop := _loop(w, ctx)) is not None:
        evidence.append(f"Kueue places it on {', '.join(loop.nodes)} again after each eviction: {loop.why}")
        return evidence, loop.sentence()
    if verdict.inflight:
        others = sorted({c.workload for c in verdict.inflight})
        evidence.append(
            f"{len(verdict.inflight)} card charge(s) promised to {', '.join(others)} (admitted or Ready, Pods not allocated yet)"
        )
        return (
            evidence,
            f"the room is promised to {', '.join(others)}, whose Pods are not allocated yet: allocating them moves "
            "the promise into the ledger and frees nothing; it frees when that Workload finishes or is evicted",
        )
    starved = next((ps for ps in w.podsets if ps.name == verdict.starved), None)
    if starved is not None:
        a = w.assignment(starved.name)
        hosts = a.hostnames if a else None
        if hosts and any(pods > 1 for _, pods in hosts) and "pod " in verdict.message:
            return evidence, (
                "several Pods of one PodSet sit on one node: the fit label admits a node when one card fits one Pod, "
                "so this does not converge by itself; lower the Pods per node or the per-Pod request"
            )
        demands = [d for d in verdict.demands if d.podset == starved.name]
        pinnable = any(d.family is Family.SLICED or (d.family is Family.SHARED and d.cards >= 2) for d in demands)
        if pinnable and not has_fit_pin(starved):
            evidence.append(f"podset {starved.name} carries no fit-label pin")
            return evidence, (
                "unpinned Workload on a fragmented node: TAS re-places it there every 30 s; update its spec before "
                "reservation (or recreate it) so the fit pin keeps TAS off nodes whose cards cannot serve it"
            )
    return evidence, "will retry every 30 s; it passes when the assigned node's cards free up"


def check_verdict(w: Workload, ctx: ExplainContext) -> Verdict:
    """The verdict the ``gpustack-node-devices`` check computes for this Workload on the same inputs."""
    return judge_workload(w, ctx.check)


def _ledger_evidence(ctx: ExplainContext) -> list[str]:
    if ctx.check.ledger == LEDGER_PUBLISHED:
        return [
            "judged on the published Devices ledgers: the read holds no Pods, so the ledgers could not be rebuilt "
            "from allocation records as the check rebuilds them"
        ]
    return []


def parked_by(w: Workload) -> CheckState | None:
    """The joint check's state of a Workload GPUStack parked (deactivated it after 30 minutes of waiting), or None."""
    joint = w.check(gpustack.JOINT_CHECK)
    return joint if joint is not None and gpustack.parked(w.active, joint.message) else None


def holding_check(w: Workload) -> str:
    """The AdmissionCheck that holds a Workload and its state (``gpustack-model-deployment-joint Pending``, or
    ``… parked``), from its own record; "" where every check is Ready or none is on it."""
    if (parked := parked_by(w)) is not None:
        return f"{parked.name} parked"
    holding = next((c for c in w.checks if c.state != READY), None)
    return f"{holding.name} {holding.state or '<none>'}" if holding is not None else ""


def _all_checks(w: Workload) -> tuple[tuple[str, str, str], ...]:
    return tuple((c.name, c.state, c.message) for c in w.checks)


def gate3(w: Workload, ctx: ExplainContext) -> Gate:
    """Every AdmissionCheck on the Workload: the node-devices check judged card by card (and recomputed), each other
    one as its controller wrote it (GPUStack's joint check among them); the first that holds it names the gate."""
    g = _node_devices_gate(w, ctx)
    checks = _all_checks(w)
    parked = parked_by(w)
    if parked is not None:
        return Gate(
            3,
            HELD,
            f"parked by {gpustack.JOINT_CHECK}: {parked.message}",
            (*g.evidence, *_check_lines(w, naming.NODE_DEVICES_CHECK, gpustack.JOINT_CHECK)),
            "GPUStack deactivated it after 30 minutes of waiting for the deployment's other roles: free the capacity "
            "they need, then reactivate its Workloads (spec.active=true), or delete the deployment and create it again",
            g.check,
            part=gpustack.JOINT_CHECK,
            checks=checks,
        )
    if g.verdict not in CLEARED or w.admitted:
        return g._replace(checks=checks, evidence=(*g.evidence, *_check_lines(w, naming.NODE_DEVICES_CHECK)))
    holding = next((c for c in w.checks if c.name != naming.NODE_DEVICES_CHECK and c.state != READY), None)
    if holding is None or not w.quota_reserved:
        return g._replace(checks=checks, evidence=(*g.evidence, *_check_lines(w, naming.NODE_DEVICES_CHECK)))
    if holding.name == gpustack.JOINT_CHECK:
        hint = (
            "GPUStack's joint check holds a replica of a multi-role ModelDeployment until every replica has reserved "
            "quota; it parks (deactivates) it after 30 minutes of waiting"
        )
    else:
        hint = f"AdmissionCheck {holding.name}'s controller decides it: see its state's message"
    return Gate(
        3,
        FAILED if holding.state == "Rejected" else HELD,
        f"held by AdmissionCheck {holding.name} ({holding.state})"
        + (f": {holding.message}" if holding.message else ""),
        (*g.evidence, *_check_lines(w, naming.NODE_DEVICES_CHECK, holding.name)),
        hint,
        g.check,
        part=holding.name,
        checks=checks,
    )


def _check_lines(w: Workload, *but: str) -> list[str]:
    """An evidence line for each AdmissionCheck on the Workload but ``but`` (those the gate's own lines say)."""
    return [
        f"check {c.name} {c.state}" + (f": {c.message}" if c.message else "") for c in w.checks if c.name not in but
    ]


def _node_devices_gate(w: Workload, ctx: ExplainContext) -> Gate:
    cq = ctx.cluster_queue
    state = w.check(naming.NODE_DEVICES_CHECK)
    if cq is not None and naming.NODE_DEVICES_CHECK not in cq.admission_checks and state is None:
        summary = f"ClusterQueue {cq.name} does not reference the {naming.NODE_DEVICES_CHECK} check"
        if not w.checks:
            return Gate(3, NOT_APPLICABLE, summary, ())
        if not w.quota_reserved and not w.admitted:
            return Gate(3, NOT_REACHED, "the checks run once quota is reserved")
        return Gate(3, PASSED, summary, ())
    if not w.quota_reserved and not w.admitted:
        return Gate(3, NOT_REACHED, "the checks run once quota is reserved")
    evidence: list[str] = []
    if state is not None:
        evidence.append(f"check state {state.state}" + (f": {state.message}" if state.message else ""))
    if ctx.admission_check is not None and not ctx.admission_check.active:
        evidence.append(f"AdmissionCheck {ctx.admission_check.name} is not Active")
    verdict = check_verdict(w, ctx)
    if verdict.judged:
        evidence.append(f"recomputed from the ledger: {verdict.state}: {verdict.message}")
        evidence.extend(_ledger_evidence(ctx))
    recomputed = (verdict.state, verdict.message) if verdict.judged else None
    if w.admitted or (state is not None and state.state == READY):
        return Gate(3, PASSED, "every assigned node holds the demand card by card", tuple(evidence), "", recomputed)
    down = unserved_check(ctx.serving)
    if down is not None:
        return Gate(
            3,
            HELD,
            f"the {naming.NODE_DEVICES_CHECK} check is not served: no verdict is written",
            (*evidence, down),
            operator_fix_hint(ctx.serving),
            recomputed,
        )
    leaderless = ctx.serving.leaderless() if ctx.serving is not None else None
    if leaderless is not None:
        evidence.append(leaderless)
    if state is not None and state.state == "Rejected":
        return Gate(
            3,
            FAILED,
            "the check rejected the Workload",
            tuple(evidence),
            "this check never rejects; another controller wrote the state",
            recomputed,
        )
    if verdict.state == READY:
        return Gate(
            3,
            HELD,
            "the ledger now fits the demand; the check has not written Ready yet",
            tuple(evidence),
            "the controller writes Ready on its next pass (Retry requeues after 30 s)",
            recomputed,
        )
    extra, hint = _gate3_hints(w, verdict, ctx)
    summary = (
        verdict.message
        if verdict.state == RETRY
        else (state.message if state and state.message else "waiting for the check")
    )
    return Gate(3, HELD, summary, tuple(evidence + extra), hint, recomputed)


def _loop(w: Workload, ctx: ExplainContext) -> Loop | None:
    """The placement loop of a Workload the check refuses where TAS put it, judged on the other nodes of its flavor
    (those whose ledger carries the flavor's labels: the Nodes themselves are not decoded for it)."""
    fit = ctx.check
    names = {f for a in w.assignments for f in a.credit_flavors if f in fit.flavors}
    if not names:
        return None
    pool_nodes = {
        f: sorted(
            name
            for name, d in fit.devices.items()
            if (fit.nodes is None or name in fit.nodes)
            and all(d.labels.get(k) == v for k, v in fit.flavors[f].device_selector.items())
        )
        for f in names
    }
    by_node: dict[str, list[Pod]] = {}
    for p in fit.pods:
        if p.node_name:
            by_node.setdefault(p.node_name, []).append(p)
    return placement_loop(
        w, fit, fit.flavors, pool_nodes, by_node, raw_counted=ctx.raw_tas() if ctx.raw_tas is not None else True
    )
