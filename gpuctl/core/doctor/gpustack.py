"""Audits of a cluster that runs GPUStack's worker: which gpuctl operator runs beside it, the webhooks and checks the
worker registers (judged as its code writes them), and where what it publishes differs from the core's figures.

Every fix here restarts or reconfigures GPUStack's worker, or removes gpuctl's own objects: none writes into what
the worker owns (its webhook configurations, its checks, a status or a label it writes), which it rewrites anyway.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from gpuctl.core import gpustack, naming
from gpuctl.core.doctor.records import FAIL, OK, WARN, DeploymentRecord, Finding, WebhookEntry
from gpuctl.core.gpustack import WorkerPresence
from gpuctl.core.shadow import Disagreement
from gpuctl.core.workloads import AdmissionCheck, ClusterQueue


def restart_worker(namespace: str, deployment: str = "") -> str:
    name = f"deployment/{deployment}" if deployment else f"the worker's Deployment (-l {gpustack.WORKER_SELECTOR})"
    return f"kubectl -n {namespace} rollout restart {name}: GPUStack's worker writes it again at start"


# ----------------------------------------------------------------------------------------------- which operator


def operator_mode(
    presence: WorkerPresence,
    now: datetime.datetime,
    operator: DeploymentRecord | None,
    operator_namespace: str,
) -> list[Finding]:
    """Which gpuctl operator runs (its Deployment's ``--mode``) and whether GPUStack's worker runs: a companion
    beside the worker is the documented way, a standalone beside it takes the worker's place and fails."""
    runs = presence.runs(now)
    mode = _mode(operator) if operator is not None else ""
    worker = f"GPUStack's worker runs ({presence.evidence(now)})" if runs else "GPUStack's worker does not run"
    if operator is None:
        return [Finding("operator-mode", OK, f"{worker}; no gpuctl operator is deployed in {operator_namespace}")]
    where = f"deployment {operator_namespace}/{operator.name}"
    if runs and mode == gpustack.STANDALONE:
        return [
            Finding(
                "operator-mode",
                FAIL,
                f"{worker}, and the standalone gpuctl operator is deployed beside it ({where})",
                "the standalone operator serves the webhooks, the check and the status writes GPUStack's worker owns:"
                " two writers computing different figures",
                "kubectl delete -k deploy/standalone, then kubectl apply --server-side -k deploy/companion "
                "(the companion reads beside the worker)",
            )
        ]
    if not runs and mode != gpustack.STANDALONE:
        return [
            Finding(
                "operator-mode",
                WARN,
                f"{worker}, and the gpuctl operator runs as the companion ({where})",
                "the companion serves no webhook and writes nothing: without GPUStack's worker nothing admits",
                "install GPUStack's worker, or run the standalone operator in its place (deploy/standalone)",
            )
        ]
    return [Finding("operator-mode", OK, f"{worker}; the gpuctl operator runs as the {mode or 'companion'} ({where})")]


def _mode(operator: DeploymentRecord) -> str:
    for arg in operator.args:
        if arg.startswith("--mode="):
            return arg.split("=", 1)[1]
    return "companion"


# ----------------------------------------------------------------------------------------------- its webhooks


@dataclass(frozen=True, slots=True)
class Expected:
    """One entry GPUStack's worker registers, as its code writes it."""

    name: str
    mutating: bool
    resource: str
    operations: frozenset[str]
    failure_policy: str
    selector_key: str = ""
    """The label its objectSelector selects on ("" for none)."""
    match_condition: str = ""
    """The name of its match condition ("" for none)."""
    why: str = ""


EXPECTED: Final[tuple[Expected, ...]] = (
    Expected(
        "mutate.gpustack-worker.core.v1.pod",
        True,
        "pods",
        frozenset({"CREATE"}),
        "Fail",
        naming.LABEL_QUEUE_NAME,
        why="gate 1: it folds each slice's memory into units before Kueue hashes the Pod",
    ),
    Expected(
        "validate.gpustack-worker.core.v1.pod",
        False,
        "pods",
        frozenset({"CREATE"}),
        "Fail",
        naming.LABEL_QUEUE_NAME,
        why="gate 1: the seven request rules",
    ),
    Expected(
        "mutate.gpustack-worker-kvcache.core.v1.pod",
        True,
        "pods",
        frozenset({"CREATE"}),
        "Fail",
        "kvcache.gpustack.ai/inject",
        why="the KV-cache client configuration",
    ),
    Expected(
        "mutate.gpustack-worker.kueue.x-k8s.io.v1beta2.workload",
        True,
        "workloads",
        frozenset({"CREATE", "UPDATE"}),
        "Ignore",
        match_condition="gpustack-local-queue",
        why="the Workload fit pin that keeps TAS off nodes whose cards cannot serve a slice",
    ),
    Expected(
        "mutate.worker.gpustack.ai.v1alpha1.instancetype",
        True,
        "instancetypes",
        frozenset({"CREATE", "UPDATE"}),
        "Fail",
        why="an InstanceType's labels and entrance",
    ),
    Expected(
        "validate.worker.gpustack.ai.v1alpha1.instancetype",
        False,
        "instancetypes",
        frozenset({"CREATE", "UPDATE"}),
        "Fail",
        why="an InstanceType's shape and its frozen spec",
    ),
    Expected(
        "mutate.worker.gpustack.ai.v1alpha1.instance",
        True,
        "instances",
        frozenset({"CREATE", "UPDATE"}),
        "Fail",
        why="an Instance's sizing",
    ),
    Expected(
        "validate.worker.gpustack.ai.v1alpha1.instance",
        False,
        "instances",
        frozenset({"CREATE", "UPDATE"}),
        "Fail",
        why="an Instance's bounds by its pool",
    ),
)
"""The entries gpuctl's gates read GPUStack's behaviour from; the worker registers more (ModelDeployment, KV-cache
pools, model stores), which are its own concern."""


def webhooks(entries: Sequence[WebhookEntry], presence: WorkerPresence, deployment: str = "") -> list[Finding]:
    """GPUStack's own webhook entries, as its worker registers them: each entry gpuctl's gates rely on present, with
    its operations, failure policy, selector and match condition, a CA bundle and a Service of the worker's; its
    mutating configuration ordered before Kueue's."""
    ns = presence.namespace
    fix = restart_worker(ns, deployment)
    theirs = [e for e in entries if e.configuration in gpustack.CONFIGURATIONS]
    if not theirs:
        return [
            Finding(
                "gpustack-webhooks",
                FAIL,
                f"GPUStack's webhook configurations {', '.join(gpustack.CONFIGURATIONS)} do not exist",
                "its worker registers them at start: without them no Pod is folded or checked, and no pool's "
                "objects are validated",
                fix,
            )
        ]
    out: list[Finding] = []
    by_name = {e.name: e for e in theirs}
    for want in EXPECTED:
        e = by_name.get(want.name)
        config = gpustack.MUTATING_CONFIGURATION if want.mutating else gpustack.VALIDATING_CONFIGURATION
        if e is None:
            out.append(
                Finding(
                    "gpustack-webhooks",
                    FAIL,
                    f"{config} has no entry {want.name}",
                    f"{want.why}; its worker writes the whole list at start",
                    fix,
                )
            )
            continue
        wrong = _entry_differences(e, want, ns)
        if wrong:
            out.append(
                Finding("gpustack-webhooks", FAIL, f"{config} entry {want.name}: {'; '.join(wrong)}", want.why, fix)
            )
        else:
            out.append(
                Finding("gpustack-webhooks", OK, f"{config} entry {want.name} as GPUStack's worker registers it")
            )
    mutating = [e for e in theirs if e.mutating]
    if mutating and not gpustack.MUTATING_CONFIGURATION < naming.KUEUE_MUTATING_CONFIGURATION:
        out.append(
            Finding(
                "gpustack-webhooks",
                FAIL,
                f"{gpustack.MUTATING_CONFIGURATION} sorts after {naming.KUEUE_MUTATING_CONFIGURATION}",
                "the fold must precede Kueue's resource hash",
                fix,
            )
        )
    return out


def _entry_differences(e: WebhookEntry, want: Expected, namespace: str) -> list[str]:
    wrong = []
    operations = {op for r in e.rules for op in r.operations}
    resources = {res for r in e.rules for res in r.resources}
    if want.resource not in resources:
        wrong.append(f"rules cover {', '.join(sorted(resources)) or 'nothing'} (want {want.resource})")
    if not want.operations <= operations and "*" not in operations:
        wrong.append(f"operations {', '.join(sorted(operations))} (want {', '.join(sorted(want.operations))})")
    if e.failure_policy != want.failure_policy:
        wrong.append(f"failurePolicy {e.failure_policy} (want {want.failure_policy})")
    if want.selector_key and want.selector_key not in _selector_keys(e.object_selector):
        wrong.append(f"objectSelector does not select on {want.selector_key}")
    if want.match_condition and want.match_condition not in {n for n, _ in e.match_conditions}:
        wrong.append(f"no match condition {want.match_condition}")
    if not e.ca_bundle:
        wrong.append("no caBundle")
    if e.service is not None and e.service[0] != namespace:
        wrong.append(f"calls Service {e.service[0]}/{e.service[1]} (want one in {namespace})")
    return wrong


def _selector_keys(selector: Mapping[str, object]) -> set[str]:
    keys: set[str] = set()
    labels = selector.get("matchLabels")
    if isinstance(labels, Mapping):
        keys.update(str(k) for k in labels)
    expressions = selector.get("matchExpressions")
    for e in expressions if isinstance(expressions, list) else ():
        if isinstance(e, Mapping) and isinstance(e.get("key"), str):
            keys.add(str(e["key"]))
    return keys


# ----------------------------------------------------------------------------------------------- its checks


def checks(
    found: Mapping[str, AdmissionCheck],
    queues: Mapping[str, ClusterQueue],
    presence: WorkerPresence,
    deployment: str = "",
) -> list[Finding]:
    """The two AdmissionChecks the worker applies at start, with their controllers and Active; the joint check on
    every queue the worker derives (it references the node-devices check on accelerated queues only while its
    setting instance-type-derived-from-node is on, which the existing audit of each queue reads)."""
    fix = restart_worker(presence.namespace, deployment)
    out: list[Finding] = []
    for name, controller in gpustack.CHECKS.items():
        check = found.get(name)
        if check is None:
            out.append(
                Finding(
                    "gpustack-checks",
                    FAIL,
                    f"AdmissionCheck {name} does not exist",
                    "GPUStack's worker applies it at start; a queue that references it admits nothing without it",
                    fix,
                )
            )
        elif check.controller != controller:
            out.append(
                Finding(
                    "gpustack-checks",
                    FAIL,
                    f"AdmissionCheck {name} names controller {check.controller or '<none>'} (want {controller})",
                    "no controller answers it: every Workload of a queue that references it waits",
                    f"kubectl delete admissioncheck {name}, then {fix}",
                )
            )
        elif not check.active:
            out.append(
                Finding(
                    "gpustack-checks",
                    FAIL,
                    f"AdmissionCheck {name} is not Active",
                    "its controller marks it Active when it runs; the worker's queues reference it only once Active",
                    fix,
                )
            )
        else:
            out.append(Finding("gpustack-checks", OK, f"AdmissionCheck {name} exists, controller {controller}, Active"))
    joint = found.get(gpustack.JOINT_CHECK)
    if joint is not None and joint.active:
        missing = sorted(
            n for n, q in queues.items() if q.instancetype_mark and gpustack.JOINT_CHECK not in q.admission_checks
        )
        if missing:
            out.append(
                Finding(
                    "gpustack-checks",
                    WARN,
                    f"ClusterQueue {', '.join(missing[:4])}{' …' if len(missing) > 4 else ''} does not reference "
                    f"{gpustack.JOINT_CHECK}",
                    "the worker references it on every queue it derives once it is Active (its newest code only while "
                    "instance-type-derived-from-node is on): a multi-role ModelDeployment there can hold quota for "
                    "roles that never all run",
                    fix,
                )
            )
    return out


# ----------------------------------------------------------------------------------------------- what it publishes


def disagreements(found: Iterable[Disagreement], writer_fix: str) -> list[Finding]:
    """Each figure the cluster publishes (GPUStack's worker, or the standalone operator in its place) that the core
    computes otherwise, with both values and the reason; one line saying so where they all agree. ``writer_fix``:
    where to look at the writer (never a patch of what it owns: it would write it again)."""
    out = [
        Finding(
            f"shadow-{d.kind.value}",
            WARN,
            f"{d.object} {d.sentence()}",
            "gpuctl reads the objects the writer read; a figure that differs is a stale write, a writer that "
            "stopped, or a rule read two ways",
            f"compare with `gpuctl views --published` and `gpuctl explain`; if it holds, {writer_fix}",
        )
        for d in found
    ]
    return out or [
        Finding(
            "shadow",
            OK,
            "every view, check verdict, fit label and stop GPUStack's worker publishes is what gpuctl computes",
        )
    ]
