"""Audits of a deployed admission chain against the design: each check reads records and reports findings.

Every finding says what it saw, why it matters (the design's words, shortly) and the fix (a command or a patch). A
check is a pure function of the records read, so it runs the same on a live cluster and on a dump.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gpuctl.core import naming
from gpuctl.core.instancetypes import InstanceType
from gpuctl.core.ledger import NodeDevices
from gpuctl.core.nodes import Node
from gpuctl.core.pins import FIT_PREFIXES, node_fit_labels
from gpuctl.core.pods import Pod
from gpuctl.core.queueing import epoch_seconds
from gpuctl.core.views import in_pool, instancetype_views, views_to_status
from gpuctl.core.workloads import AdmissionCheck, ClusterQueue, LocalQueue, Workload

OK, WARN, FAIL = "ok", "warn", "fail"
RETRY_MINUTES = 30


@dataclass(frozen=True, slots=True)
class Finding:
    check: str
    status: str
    saw: str
    why: str = ""
    fix: str = ""

    def to_dict(self) -> dict[str, str]:
        return {"check": self.check, "status": self.status, "saw": self.saw, "why": self.why, "fix": self.fix}


# ----------------------------------------------------------------------------------------------- the AdmissionCheck


def admission_check(check: AdmissionCheck | None) -> Finding:
    name = "admissioncheck"
    if check is None:
        return Finding(
            name,
            FAIL,
            f"AdmissionCheck {naming.NODE_DEVICES_CHECK} does not exist",
            "gate 3 is this check: without it a queue that references it is inactive and admits nothing",
            "the operator applies it at start-up: check its logs, or `kubectl apply` the AdmissionCheck with "
            f"controllerName {naming.NODE_DEVICES_CONTROLLER}",
        )
    if check.controller != naming.NODE_DEVICES_CONTROLLER:
        return Finding(
            name,
            FAIL,
            f"AdmissionCheck {check.name} names controller {check.controller!r}",
            "no controller would answer it: every Workload in a queue that references it waits forever",
            f"set spec.controllerName to {naming.NODE_DEVICES_CONTROLLER} (recreate the AdmissionCheck: the field is immutable)",
        )
    if not check.active:
        return Finding(
            name,
            FAIL,
            f"AdmissionCheck {check.name} is not Active" + (f": {check.message}" if check.message else ""),
            "the operator keeps it Active; a queue referencing an inactive check is itself inactive",
            "check that the operator runs and leads (`kubectl -n gpustack-system get lease`)",
        )
    return Finding(name, OK, f"AdmissionCheck {check.name} exists, controller {check.controller}, Active")


# ----------------------------------------------------------------------------------------------- queues


def queues(
    cluster_queues: Mapping[str, ClusterQueue], instancetypes: Mapping[str, InstanceType], check_active: bool
) -> list[Finding]:
    """Every accelerated pool's queue references the check once it is Active; no queue without resource groups is
    left admitting."""
    out = []
    for name, cq in sorted(cluster_queues.items()):
        it = instancetypes.get(name)
        if not cq.quotas and cq.stop_policy in ("", "None"):
            out.append(
                Finding(
                    "queue-resources",
                    FAIL,
                    f"ClusterQueue {name} has no resource groups and admits",
                    "a queue that declares no resource checks nothing: it admits every Workload, with no flavor "
                    "and so no AdmissionCheck",
                    f'kubectl patch clusterqueue {name} --type merge -p \'{{"spec":{{"stopPolicy":"Hold"}}}}\'',
                )
            )
        if it is None or not it.acceleratable or not cq.instancetype_mark:
            continue
        if check_active and naming.NODE_DEVICES_CHECK not in cq.admission_checks:
            out.append(
                Finding(
                    "queue-check",
                    FAIL,
                    f"ClusterQueue {name} does not reference {naming.NODE_DEVICES_CHECK}",
                    "an accelerated queue references the check once it is Active; without it nothing judges a "
                    "Workload card by card, and Allocate refuses what does not fit",
                    f"kubectl patch clusterqueue {name} --type merge -p "
                    f'\'{{"spec":{{"admissionChecksStrategy":{{"admissionChecks":[{{"name":"{naming.NODE_DEVICES_CHECK}"}}]}}}}}}\'',
                )
            )
        else:
            out.append(Finding("queue-check", OK, f"ClusterQueue {name} references {naming.NODE_DEVICES_CHECK}"))
    return out


# ----------------------------------------------------------------------------------------------- pools


def pools(
    instancetypes: Mapping[str, InstanceType],
    cluster_queues: Mapping[str, ClusterQueue],
    local_queues: Iterable[LocalQueue],
    devices: Sequence[NodeDevices],
    nodes: Mapping[str, Node],
) -> list[Finding]:
    """Each pool has its entrance label, its ClusterQueue and LocalQueue, a published status equal to the views of
    its ledger, a Devices object for every node, and fresh fit labels."""
    out = []
    entrances = {(q.name, q.cluster_queue) for q in local_queues}
    for name, it in sorted(instancetypes.items()):
        if it.labels.get(naming.LABEL_QUEUE_ENTRANCE) != it.expected_entrance:
            out.append(
                Finding(
                    "pool-entrance",
                    FAIL,
                    f"InstanceType {name} carries entrance label {it.labels.get(naming.LABEL_QUEUE_ENTRANCE)!r}",
                    "the Pod webhook finds a pool's card memory by this label; without it every fold is refused",
                    f"kubectl label instancetype {name} {naming.LABEL_QUEUE_ENTRANCE}={it.expected_entrance} --overwrite",
                )
            )
        if name not in cluster_queues or (it.expected_entrance, name) not in entrances:
            what = "ClusterQueue" if name not in cluster_queues else f"LocalQueue {it.expected_entrance}"
            out.append(
                Finding(
                    "pool-queues",
                    FAIL,
                    f"InstanceType {name} has no {what}",
                    "Workloads reach a pool through its entrance LocalQueue and the same-named ClusterQueue",
                    "the operator derives both: check its logs; `gpuctl views` shows the entrance to use",
                )
            )
        if not it.acceleratable:
            continue
        computed = views_to_status(instancetype_views(it, devices))
        stale = []
        for key, view in it.published_views.items():
            now = computed.get(key)
            if isinstance(now, dict) and (view.once_max_request, view.remaining, view.capacity) != (
                now["onceMaxRequest"],
                now["remaining"],
                now["capacity"],
            ):
                stale.append(key)
        if stale or not it.published_views:
            out.append(
                Finding(
                    "pool-status",
                    FAIL,
                    f"InstanceType {name} publishes views that differ from its ledger: {', '.join(stale) or 'none published'}",
                    "InstanceType.status carries the four views computed from the Devices ledger; a stale one "
                    "misleads the gateway and the Instance webhook",
                    f"`gpuctl views {name} --published` shows the differences; check the operator's status writer",
                )
            )
        pool = it.pool_labels()
        have = {d.node for d in devices}
        missing = sorted(n for n, node in nodes.items() if in_pool(node.labels, pool) and n not in have)
        if missing:
            out.append(
                Finding(
                    "pool-devices",
                    FAIL,
                    f"pool {name}: node(s) without a Devices object: {', '.join(missing[:5])}",
                    "the check and the views read each node's cards from its Devices ledger",
                    "check the device manager on those nodes",
                )
            )
    by_node = {d.node: d for d in devices}
    for n, node in sorted(nodes.items()):
        d = by_node.get(n)
        if d is None or not d.managed:
            continue
        want = node_fit_labels(d)
        have_labels = {k: v for k, v in node.labels.items() if k.startswith(FIT_PREFIXES)}
        if want != have_labels:
            out.append(
                Finding(
                    "fit-labels",
                    WARN,
                    f"node {n}: fit labels {have_labels or 'none'} where its ledger says {want}",
                    "TAS skips a fragmented node only through fresh fit labels; stale ones send Workloads to retry",
                    "the operator's fit-label controller writes them: check that it runs",
                )
            )
    return out


# ----------------------------------------------------------------------------------------------- stuck work


def _age_minutes(rfc3339: str, now: float) -> float | None:
    since = epoch_seconds(rfc3339)
    return None if since is None else (now - since) / 60


def stuck(
    workloads: Iterable[Workload], pods: Iterable[Pod], now: float, retry_minutes: int = RETRY_MINUTES
) -> list[Finding]:
    """Workloads the check has held for long, evicted Workloads carrying a verdict, Pods Allocate refused."""
    out = []
    for w in sorted(workloads, key=lambda w: w.key):
        c = w.check(naming.NODE_DEVICES_CHECK)
        if c is None:
            continue
        if w.evicted and c.state in ("Ready", "Retry") and w.quota_reserved is False:
            out.append(
                Finding(
                    "evicted-verdict",
                    FAIL,
                    f"Workload {w.key} is evicted and still carries the check's {c.state}",
                    "the check never judges an evicted Workload: a verdict written between Kueue's two reset "
                    "writes deadlocks the backoff",
                    f"kubectl -n {w.namespace} patch workload {w.name} --subresource status --type json "
                    '-p \'[{"op":"replace","path":"/status/admissionChecks/0/state","value":"Pending"}]\'',
                )
            )
        age = _age_minutes(c.last_transition, now) if c.last_transition else None
        if c.state == "Retry" and age is not None and age > retry_minutes:
            out.append(
                Finding(
                    "stuck-retry",
                    WARN,
                    f"Workload {w.key} has been held at gate 3 for {int(age)} min: {c.message}",
                    "a Retry that does not converge is a fragmented node TAS keeps choosing, or room promised away",
                    f"gpuctl explain workload {w.key}; gpuctl simulate --workload {w.key} --suggest",
                )
            )
    for p in sorted(pods, key=lambda p: (p.namespace, p.name)):
        if p.reason == "UnexpectedAdmissionError":
            out.append(
                Finding(
                    "allocate-refused",
                    WARN,
                    f"Pod {p.namespace}/{p.name} failed with UnexpectedAdmissionError: {p.message}",
                    "Allocate refused a card the gates before let through; its owner recreates the Pod",
                    f"gpuctl explain pod {p.namespace}/{p.name}",
                )
            )
    return out


# ----------------------------------------------------------------------------------------------- webhooks

KUEUE_MUTATING = "kueue-mutating-webhook-configuration"


@dataclass(frozen=True, slots=True)
class WebhookEntry:
    """One ``webhooks[]`` entry of a deployed configuration, as the audit reads it."""

    configuration: str
    mutating: bool
    name: str
    failure_policy: str
    side_effects: str
    timeout_seconds: int | None
    rules: tuple[tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]], ...]
    """(operations, apiGroups, resources) per rule."""
    object_selector: Mapping[str, object]
    path: str
    ca_bundle: bool


def _strs(value: object) -> tuple[str, ...]:
    return tuple(sorted(str(v) for v in value)) if isinstance(value, list) else ()


def parse_webhook_configuration(obj: Mapping[str, object]) -> list[WebhookEntry]:
    """The entries of a Mutating- or ValidatingWebhookConfiguration."""
    meta = obj.get("metadata")
    name = str(meta.get("name", "")) if isinstance(meta, Mapping) else ""
    mutating = obj.get("kind") == "MutatingWebhookConfiguration"
    raw_entries = obj.get("webhooks")
    out = []
    for raw in raw_entries if isinstance(raw_entries, list) else []:
        if not isinstance(raw, Mapping):
            continue
        raw_client = raw.get("clientConfig")
        client: Mapping[str, object] = raw_client if isinstance(raw_client, Mapping) else {}
        service = client.get("service") if isinstance(client.get("service"), Mapping) else None
        url = str(client.get("url") or "")
        path = (
            str(service.get("path") or "")
            if isinstance(service, Mapping)
            else "/" + url.split("/", 3)[-1]
            if url
            else ""
        )
        timeout = raw.get("timeoutSeconds")
        out.append(
            WebhookEntry(
                name,
                mutating,
                str(raw.get("name", "")),
                str(raw.get("failurePolicy") or "Fail"),
                str(raw.get("sideEffects") or ""),
                timeout if isinstance(timeout, int) and not isinstance(timeout, bool) else None,
                tuple(
                    (_strs(r.get("operations")), _strs(r.get("apiGroups")), _strs(r.get("resources")))
                    for r in raw.get("rules") or []
                    if isinstance(r, Mapping)
                ),
                raw.get("objectSelector") if isinstance(raw.get("objectSelector"), Mapping) else {},  # type: ignore[arg-type]
                path,
                bool(client.get("caBundle")),
            )
        )
    return out


def webhooks(entries: Sequence[WebhookEntry]) -> list[Finding]:
    """Every webhook this version serves is registered as its registry says (kind of configuration, path,
    operations and rules, object selector, failurePolicy, sideEffects, timeout, a CA bundle), and the mutating
    configuration holding the Pod webhook sorts before Kueue's."""
    from gpuctl.core.webhooks import REGISTRY

    by_name = {e.name: e for e in entries}
    out = []
    for w in REGISTRY:
        e = by_name.get(w.name)
        where = "mutating" if w.mutating else "validating"
        if e is None:
            out.append(
                Finding(
                    "webhook",
                    FAIL,
                    f"webhook {w.name} is not registered",
                    "every admission rule of the design runs only where its webhook is registered",
                    "kubectl apply -k deploy/base (the configurations are generated from this version's registry)",
                )
            )
            continue
        r = w.resource
        want = {
            "configuration kind": ("mutating" if e.mutating else "validating", where),
            "path": (e.path, w.path),
            "failurePolicy": (e.failure_policy, w.failure_policy.value),
            "sideEffects": (e.side_effects, "None"),
            "timeoutSeconds": (e.timeout_seconds, w.timeout_seconds),
            "rules": (e.rules, ((tuple(sorted(w.operations)), (r.group,), (r.plural,)),)),
            "objectSelector": (dict(e.object_selector), dict(w.selector.selector().get("objectSelector", {}))),
        }
        wrong = [f"{k} {have!r} (want {need!r})" for k, (have, need) in want.items() if have != need]
        if not e.ca_bundle:
            wrong.append("no caBundle")
        if wrong:
            out.append(
                Finding(
                    "webhook",
                    FAIL,
                    f"webhook {w.name} in {e.configuration}: " + "; ".join(wrong),
                    "a Fail webhook left at Ignore lets rule-breaking Pods through; a wrong selector or path skips "
                    "or misroutes reviews",
                    "kubectl apply -k deploy/base (the configurations are generated from this version's registry)",
                )
            )
        else:
            out.append(Finding("webhook", OK, f"webhook {w.name} in {e.configuration} as this version serves it"))
    pod = by_name.get("pod-accelerators.gpustack.ai")
    if pod is not None and pod.mutating and not pod.configuration < KUEUE_MUTATING:
        out.append(
            Finding(
                "webhook-order",
                FAIL,
                f"MutatingWebhookConfiguration {pod.configuration} sorts after {KUEUE_MUTATING}",
                "the Pod webhook's configuration sorts before Kueue's, so the fold precedes Kueue's resource hash",
                f"rename it to sort first: kubectl get mutatingwebhookconfiguration {pod.configuration} -o yaml | "
                "sed 's/name: .*/name: gpustack-worker-mutation/' | kubectl apply -f - (then delete the old one)",
            )
        )
    return out
