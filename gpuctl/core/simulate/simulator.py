"""The simulator: gate 1 (the webhooks), gates 2 to 5 in order, a StrictFIFO head holding the line behind it,
and the commit of an admitted Workload to the working copy.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from gpuctl.core import gpustack, naming
from gpuctl.core.admission import JSON
from gpuctl.core.explain import (
    CLEARED,
    FAILED,
    HELD,
    NOT_APPLICABLE,
    PASSED,
    UNKNOWN,
    Explanation,
    Gate,
    gate1,
    served_gate1,
)
from gpuctl.core.fit import (
    READY,
    judge_workload,
)
from gpuctl.core.pending import QUOTA, STRICT_ORDER, TAS_PLACEMENT
from gpuctl.core.pins import PinContext
from gpuctl.core.queueing import STRICT_FIFO, order_key, pending
from gpuctl.core.serving import operator_fix_hint, uncreated_pods, unserved_check
from gpuctl.core.simulate.outcome import Outcome, not_reached, placement_of
from gpuctl.core.simulate.placement import Placement
from gpuctl.core.simulate.reservation import Reservation, Unreserved, reserved_record
from gpuctl.core.submissions import Submission, SubmittedPodSet, instance_pod, resubmission, template_pod
from gpuctl.core.tas import PREFERRED
from gpuctl.core.tasloop import Loop, placement_loop
from gpuctl.core.webhooks import Kind, WebhookContext, review
from gpuctl.core.workloads import (
    ClusterQueue,
    Workload,
    parse_workload,
)


class Simulator(Reservation, Placement):
    """A working copy of the cluster that Workloads are placed on one after another."""

    def _webhook_context(self) -> WebhookContext:
        lq = {k: q.cluster_queue for k, q in self.state.local_queues.items()}
        pins = PinContext(
            lq, {n: q.labels for n, q in self.state.cluster_queues.items()}, dict(self.state.instancetypes)
        )
        stops = {n: q.stop_policy for n, q in self.state.cluster_queues.items()}
        return WebhookContext(instancetypes=tuple(self.state.instancetypes.values()), pins=pins, stop_policies=stops)

    def _gate1(self, sub: Submission) -> tuple[Submission, Workload | None, Gate]:
        """The Pod webhook on the Pod Kueue's integration creates, then the Workload pin: the Workload Kueue sees."""
        ctx = self._webhook_context()
        evidence: list[str] = []
        if sub.instance is not None:
            type_name = str((sub.instance.get("spec") or {}).get("type"))
            it = self.state.instancetypes.get(type_name)
            answer = review(Kind.INSTANCE, "CREATE", sub.instance, None, ctx)
            if not answer.allowed:
                return (
                    sub,
                    None,
                    Gate(1, FAILED, f"the Instance webhook denies it: {answer.message}", (), "fix the Instance's spec"),
                )
            if it is None:
                return (
                    sub,
                    None,
                    Gate(1, FAILED, f"InstanceType {type_name} does not exist", (), "`gpuctl views` lists the pools"),
                )
            pod = instance_pod(answer.mutated or sub.instance, it)
            spec = pod["spec"]
            sub = replace(
                sub,
                queue_name=pod["metadata"]["labels"][naming.LABEL_QUEUE_NAME],
                podsets=(SubmittedPodSet("main", 1, spec),),
                pod=pod,
            )
            evidence.append(f"the Instance's Pod asks {_limits_text(spec)} on entrance {sub.queue_name}")
        unreviewed: list[str] = []  # template-built PodSets whose Pods the webhook will not review
        if sub.pod is not None:
            answer = review(Kind.POD, "CREATE", sub.pod, None, ctx)
            if not answer.allowed:
                return (
                    sub,
                    None,
                    Gate(
                        1,
                        FAILED,
                        "the Pod webhook denies the Pod",
                        (str(answer.message),),
                        "fix the request in the Pod; `gpuctl webhook dry-run pod -f FILE` shows the webhook's answer",
                    ),
                )
            mutated = answer.mutated or sub.pod
            spec = mutated.get("spec") or {}
            if spec != sub.pod.get("spec"):
                evidence.append("the Pod webhook folded the request (and pinned it where the rules say)")
            sub = replace(sub, podsets=tuple(replace(ps, spec=spec) for ps in sub.podsets))
        else:
            reviewed = []
            for ps in sub.podsets:
                # A template-built PodSet: its Pods reach the Pod webhook only after admission, and only when the
                # template carries the queue label; Kueue's quota and TAS see the template as written.
                pod = template_pod(f"{sub.name}-{ps.name}", sub.namespace, ps)
                answer = review(Kind.POD, "CREATE", pod, None, ctx)
                if not answer.allowed:
                    return (
                        sub,
                        None,
                        Gate(
                            1,
                            FAILED,
                            f"the Pod webhook will deny the Pods of pod set {ps.name}",
                            (str(answer.message),),
                            "fix the request in the Pod template; `gpuctl webhook dry-run pod -f FILE` shows the webhook's answer",
                        ),
                    )
                spec = (answer.mutated or pod).get("spec") or {}
                if naming.LABEL_QUEUE_NAME not in ps.labels:
                    if sub.kind != "Workload":  # a Workload's own Pods are made apart from its template
                        unreviewed.append(ps.name)
                    evidence.append(
                        f"the Pods of pod set {ps.name} carry no {naming.LABEL_QUEUE_NAME} label: the Pod webhook "
                        "does not review them, and the allocator sizes them as the template writes them"
                    )
                elif spec != ps.spec:
                    evidence.append(
                        f"the Pod webhook folds the Pods of pod set {ps.name} (the template Kueue reads stays unfolded)"
                    )
                reviewed.append(replace(ps, pod_spec=spec))
            sub = replace(sub, podsets=tuple(reviewed))
        obj = sub.workload_object()
        pinned = review(Kind.WORKLOAD, "CREATE", obj, None, ctx)
        wobj = pinned.mutated if pinned.allowed and pinned.mutated is not None else obj
        if wobj != obj:
            evidence.append("the Workload webhook pinned each PodSet to nodes whose fit label says one card fits")
        w = _workload_record(sub, wobj)
        g = gate1(w)
        if unreviewed and g.verdict == PASSED:
            # Said in the summary: it decides what the allocator is given (a slice's units unfolded, no pin).
            g = g._replace(
                summary=f"the Pod webhook will not review the Pods of pod set {', '.join(unreviewed)}: the template "
                f"carries no {naming.LABEL_QUEUE_NAME} label (the template itself keeps the request rules)",
                hint=f"add the {naming.LABEL_QUEUE_NAME} label to the Pod template's metadata so the webhook folds "
                "and pins its Pods",
            )
        return sub, w, g._replace(evidence=tuple(evidence) + g.evidence)

    def simulate(self, sub: Submission, *, commit: bool = True, preempt: bool = True) -> Outcome:
        """Run one submission through the gates; when admitted (and ``commit``), place it for the next one.

        Where its quota does not fit and its ClusterQueue's policy lets it evict lower-priority Workloads, Kueue's
        preemption is followed: the victims leave the working copy (when ``commit``) and the rest of the gates run
        without them."""
        original = sub
        sub, w, g1 = self._gate1(sub)
        g1 = self._served_gate1(sub, g1)

        def outcome(gates: Sequence[Gate], **extra: Any) -> Outcome:
            return Outcome(
                sub, Explanation(sub.namespace, sub.name, (*gates, *not_reached(len(gates))), sub.kind), **extra
            )

        if w is None or g1.verdict == FAILED:
            return outcome([g1])
        g2, cq = self._gate2(w)
        if cq is None or g2.verdict != PASSED:
            return outcome([g1, g2])
        blocked = self._behind_strict_head(w, cq, sub)
        if blocked is not None:
            return outcome([g1, blocked._replace(evidence=g2.evidence + blocked.evidence)], cluster_queue=cq.name)
        balanced = self._balanced(sub)
        if balanced is not None:
            return outcome([g1, balanced._replace(evidence=g2.evidence + balanced.evidence)], cluster_queue=cq.name)
        got = self._reserve(w, cq, sub)
        books = tuple(self.book.differences(cq.name))
        if isinstance(got, Unreserved) and got.part == QUOTA and preempt:
            victims = self._victims(w, cq, sub)
            if victims:
                target = self if commit else self.copy()
                target.remove(v.key for v in victims)
                after = target.simulate(original, commit=commit, preempt=False)
                lines = tuple(
                    f"Kueue preempts {v.key} (priority {v.priority}, policy {cq.preemption_within}): it is evicted "
                    "(reason Preempted) and queued again"
                    for v in victims
                )
                gates = tuple(
                    g._replace(evidence=(*lines, *g.evidence)) if g.gate == 2 else g for g in after.explanation.gates
                )
                return replace(
                    after,
                    explanation=replace(after.explanation, gates=gates),
                    preempted=tuple(v.key for v in victims),
                )
        if isinstance(got, Unreserved):
            g2 = Gate(
                2,
                HELD,
                got.message,
                g2.evidence + tuple(_dedupe(got.evidence)) + books,
                (
                    "wait for admitted Workloads of this pool to finish, or grow the pool; `--suggest` tries both"
                    if got.part == QUOTA
                    else "no node of the flavor has room for the Pods as TAS counts it (capacity keys, fit labels, "
                    "selectors); `--suggest` tries what would make room"
                ),
                part=got.part,
            )
            return outcome([g1, g2], cluster_queue=cq.name)
        g2 = Gate(2, PASSED, f"quota reserved in ClusterQueue {cq.name}", g2.evidence + tuple(got.evidence) + books)
        reserved = reserved_record(w, cq, got)
        kept = {"cluster_queue": cq.name, "reservation": reserved.assignments}
        g3, verdict_ok = self._gate3(reserved, cq)
        if verdict_ok:
            g3, verdict_ok = self._other_checks(sub, cq, g3)
        if not verdict_ok:
            return outcome([g1, g2, g3], **kept)
        # Past the check, Kueue admits it: its quota, its TAS placement and the check's count of it in flight stand
        # whether or not its Pods are then scheduled and allocated.
        specs = {ps.name: ps.pods_spec for ps in sub.podsets}
        hosts = self._schedule(reserved, got, specs)
        g4 = self._gate4(reserved, hosts, specs)
        if g4.verdict != PASSED:
            if commit:
                self._commit(reserved, [])  # its Pods stay Pending on their node
            return outcome([g1, g2, g3, g4], **kept)
        g5, pods = self._gate5(reserved, got, hosts, specs)
        if g5.verdict not in CLEARED:
            if commit:
                self._commit(reserved, [])  # Allocate refuses its Pods: they fail and hold no card
            return outcome([g1, g2, g3, g4, g5], **kept)
        if commit:
            self._commit(reserved, pods)
        return outcome([g1, g2, g3, g4, g5], placement=placement_of(pods), **kept)

    def _balanced(self, sub: Submission) -> Gate | None:
        """Where Kueue runs with ``TASBalancedPlacement``, a PodSet asking for a *preferred* topology level is
        spread evenly over the fewest domains of its level (its nodes may differ from the default's even for one
        Pod), which the simulation does not model: it says so rather than guess. Required and implied levels are
        placed as without the gate, and simulated."""
        if not self.state.balanced_placement:
            return None
        preferred = [ps.name for ps in sub.podsets if ps.topology is not None and ps.topology.mode == PREFERRED]
        if not preferred:
            return None
        return Gate(
            2,
            UNKNOWN,
            f"Kueue places pod set {', '.join(preferred)} by TASBalancedPlacement, which simulate does not model",
            (
                "TASBalancedPlacement is on (GPUStack's chart turns it on): a PodSet with a preferred topology level "
                "is spread over the fewest domains that hold it, not packed best-fit",
            ),
            "give the PodSet a required level (kueue.x-k8s.io/podset-required-topology), which Kueue places as "
            "simulate does, or submit it and read where Kueue put it with `gpuctl explain workload`",
            part=TAS_PLACEMENT,
        )

    def _behind_strict_head(self, w: Workload, cq: ClusterQueue, sub: Submission) -> Gate | None:
        """Under ``StrictFIFO`` Kueue tries only the head of a ClusterQueue's line: a Workload behind a head that
        cannot be admitted waits, whatever room there is. The gate that says so, or None when nothing holds it so."""
        if cq.queueing_strategy != STRICT_FIFO:
            return None
        queue_of = {k: q.cluster_queue for k, q in self.state.local_queues.items()}
        line = [
            x
            for x in self.workloads
            if pending(x) and x.key != w.key and queue_of.get((x.namespace, x.queue_name)) == cq.name
        ]
        if not line:
            return None
        head = min(line, key=order_key)
        ahead = head.priority > w.priority or (
            head.priority == w.priority and (not sub.created or order_key(head) < order_key(w))
        )
        if not ahead:
            return None
        tried = self.copy()
        tried.remove([head.key])
        seen = tried.simulate(resubmission(head), commit=False)
        if seen.admitted:
            return None  # the head goes first and is admitted: the line moves
        g = seen.explanation.gates[(seen.explanation.held_by or 2) - 1]
        return Gate(
            2,
            HELD,
            f"ClusterQueue {cq.name} is StrictFIFO and its head {head.key} (priority {head.priority}) cannot be "
            "admitted: nothing behind it is tried",
            (f"the head is held at gate {g.gate} ({g.name}): {g.summary}",),
            f"the line moves once {head.key} is admitted or leaves the queue",
            part=STRICT_ORDER,
        )

    def _served_gate1(self, sub: Submission, g1: Gate) -> Gate:
        """Gate 1 as the API server will answer where gpuctl's webhooks will not review the Pods: refused where the
        Pod webhook fails closed and the operator does not serve it, let through unreviewed where it fails open or
        is not registered (:func:`gpuctl.core.explain.served_gate1`). An existing Workload simulated anew keeps the
        Pods it has: only those still to be created reach the webhook."""
        serving = self.state.serving
        if serving is None or not (serving.registered or serving.down()):
            return g1  # nothing to say: served, and no configuration read whole
        pods: list[tuple[str, Mapping[str, str]]]
        if sub.pod is not None:
            pods = [("the Pod", (sub.pod.get("metadata") or {}).get("labels") or {})]
        elif sub.created:  # an existing Workload simulated anew
            pods = uncreated_pods(sub.podsets, self.state.check.own_pods(sub.namespace, sub.name))
        else:
            pods = [(f"the Pods of pod set {ps.name}", ps.labels) for ps in sub.podsets]
        return served_gate1(g1, pods, sub.namespace, serving)

    def _gate3(self, w: Workload, cq: ClusterQueue) -> tuple[Gate, bool]:
        if naming.NODE_DEVICES_CHECK not in cq.admission_checks:
            return Gate(
                3, NOT_APPLICABLE, f"ClusterQueue {cq.name} does not reference the {naming.NODE_DEVICES_CHECK} check"
            ), True
        if not any(a.credit_flavors for a in w.assignments):
            return Gate(3, NOT_APPLICABLE, "the Workload gets no accelerator flavor, so it carries no check"), True
        verdict = judge_workload(w, self.fit_context)
        evidence = [f"check: {verdict.state}: {verdict.message}"]
        if verdict.inflight:
            others = sorted({c.workload for c in verdict.inflight})
            evidence.append(
                f"{len(verdict.inflight)} card charge(s) promised to {', '.join(others)} (admitted, Pods not allocated yet)"
            )
        down = unserved_check(self.state.serving)
        if down is not None:
            # Whatever the ledger holds, no verdict is written while the operator is down.
            return Gate(
                3,
                HELD,
                f"the {naming.NODE_DEVICES_CHECK} check is not served: no verdict is written",
                (*evidence, down),
                operator_fix_hint(self.state.serving),
                (verdict.state, verdict.message),
            ), False
        leaderless = self.state.serving.leaderless() if self.state.serving is not None else None
        if leaderless is not None:
            evidence.append(leaderless)
        if verdict.state == READY:
            return Gate(
                3,
                PASSED,
                "every assigned node holds the demand card by card",
                tuple(evidence),
                "",
                (verdict.state, verdict.message),
            ), True
        if (loop := self._loop(w)) is not None:
            evidence.append(f"Kueue places it on {', '.join(loop.nodes)} again after each eviction: {loop.why}")
            hint = loop.sentence()
        elif verdict.inflight:
            hint = (
                f"the room is promised to {', '.join(sorted({c.workload for c in verdict.inflight}))}, whose Pods "
                "are not allocated yet: allocating them moves the promise into the ledger and frees nothing; "
                "`--suggest` finds what would free the cards"
            )
        else:
            hint = "the check answers Retry every 30 s until the cards free up; `--suggest` finds what would free them"
        return Gate(3, HELD, verdict.message, tuple(evidence), hint, (verdict.state, verdict.message)), False

    def _other_checks(self, sub: Submission, cq: ClusterQueue, g3: Gate) -> tuple[Gate, bool]:
        """Every other AdmissionCheck the queue references, once the node-devices check lets the Workload through:
        GPUStack's joint check as its rule decides it (Ready for anything but a replica of a ModelDeployment; for a
        replica, whether the deployment's other roles reserve quota too is not simulated, and said so), any other
        one as not simulated."""
        checks = [c for c in cq.admission_checks if c != naming.NODE_DEVICES_CHECK]
        if not checks:
            return g3, True
        lines = []
        for check in checks:
            if check == gpustack.JOINT_CHECK and not model_deployment_replica(sub):
                lines.append(f"{check}: Ready: {gpustack.JOINT_NOTHING_TO_WAIT_FOR}")
                continue
            why = (
                f"{check}: a replica of a ModelDeployment waits for every replica of its other roles to reserve quota, "
                "which is not simulated"
                if check == gpustack.JOINT_CHECK
                else f"AdmissionCheck {check}'s controller decides it; gpuctl does not simulate it"
            )
            return (
                Gate(
                    3,
                    UNKNOWN,
                    f"whether {check} lets it through cannot be simulated",
                    (*g3.evidence, *lines, why),
                    "submit it and read its checks with `gpuctl explain workload`",
                    g3.check,
                    part=check,
                ),
                False,
            )
        if g3.verdict == NOT_APPLICABLE:  # no node-devices check: the other checks pass it
            return g3._replace(verdict=PASSED, evidence=(*g3.evidence, *lines)), True
        return g3._replace(evidence=(*g3.evidence, *lines)), True

    def _loop(self, w: Workload) -> Loop | None:
        """The placement loop ``w`` is in, if TAS's choice is one the check refuses while another node would do."""
        names = {f for a in w.assignments for f in a.credit_flavors}
        pool_nodes = {f: self._flavor_nodes(self.state.flavors[f]) for f in names if f in self.state.flavors}
        return placement_loop(
            w, self.fit_context, self.state.flavors, pool_nodes, self.pods_by_node, raw_counted=self.tas_raw
        )


def model_deployment_replica(sub: Submission) -> bool:
    """Whether a submission is a replica of GPUStack's ModelDeployment (its Pod owned by one, or labelled as its)."""
    pod = sub.pod or {}
    meta = pod.get("metadata") or {}
    owners = meta.get("ownerReferences") or []
    if any(isinstance(o, dict) and o.get("kind") == "ModelDeployment" for o in owners):
        return True
    labels = [meta.get("labels") or {}, dict(sub.labels), *(ps.labels for ps in sub.podsets)]
    return any(ls.get("app.kubernetes.io/name") == gpustack.MODEL_DEPLOYMENT_NAME_LABEL for ls in labels)


def _dedupe(lines: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(lines))


def _limits_text(spec: Mapping[str, Any]) -> str:
    containers = spec.get("containers") or []
    limits = ((containers[0] or {}).get("resources") or {}).get("limits") if containers else None
    return ", ".join(f"{k}={v}" for k, v in sorted((limits or {}).items())) or "nothing"


def _workload_record(sub: Submission, obj: JSON) -> Workload:
    w = parse_workload(obj)
    return replace(w, labels=dict(sub.labels))
