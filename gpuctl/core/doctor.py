"""Audits of a deployed admission chain against the design: each check reads records and reports findings.

Every finding says what it saw, why it matters (the design's words, shortly) and the fix (a command or a patch). A
check is a pure function of the records read, so it runs the same on a live cluster and on a dump.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Final

from gpuctl.core import naming
from gpuctl.core.errors import GpuctlError
from gpuctl.core.instances import Instance
from gpuctl.core.instancetypes import InstanceType
from gpuctl.core.ledger import NodeDevices
from gpuctl.core.nodes import Node
from gpuctl.core.pins import FIT_PREFIXES, node_fit_labels
from gpuctl.core.pods import Pod
from gpuctl.core.queueing import epoch_seconds
from gpuctl.core.units import parse_quantity
from gpuctl.core.views import in_pool, instancetype_views, views_to_status
from gpuctl.core.workloads import AdmissionCheck, ClusterQueue, LocalQueue, ResourceFlavor, Workload

if TYPE_CHECKING:
    from gpuctl.core.webhooks import Webhook

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
            "gate 3 is this check: without it a queue that references it is inactive and admits nothing; the "
            "operator applies it at start-up and keeps it Active",
            "echo "
            + _arg(
                {
                    "apiVersion": "kueue.x-k8s.io/v1beta2",
                    "kind": "AdmissionCheck",
                    "metadata": {"name": naming.NODE_DEVICES_CHECK},
                    "spec": {"controllerName": naming.NODE_DEVICES_CONTROLLER},
                }
            )
            + " | kubectl apply -f -",
        )
    if check.deleting:
        return Finding(
            name,
            FAIL,
            f"AdmissionCheck {check.name} is being deleted (Kueue's finalizer holds it while queues reference it)",
            "once gone, every queue referencing it is inactive and admits nothing",
            f"kubectl get admissioncheck {check.name} -o yaml: find who deleted it; it cannot be undeleted, so once "
            "the queues no longer reference it, recreate it (the operator does at start-up)",
        )
    if check.controller != naming.NODE_DEVICES_CONTROLLER:
        return Finding(
            name,
            FAIL,
            f"AdmissionCheck {check.name} names controller {_show(check.controller)} "
            f"(want {naming.NODE_DEVICES_CONTROLLER})",
            "no controller would answer it: every Workload in a queue that references it waits forever",
            f"set spec.controllerName to {naming.NODE_DEVICES_CONTROLLER} (recreate the AdmissionCheck: the field is immutable)",
        )
    if not check.active:
        return Finding(
            name,
            FAIL,
            f"AdmissionCheck {check.name} is not Active" + (f": {check.message}" if check.message else ""),
            "the operator keeps it Active; a queue referencing an inactive check is itself inactive",
            f"kubectl -n {naming.OPERATOR_NAMESPACE} get lease {naming.OPERATOR_NAME} (the leader keeps it Active); "
            f"kubectl -n {naming.OPERATOR_NAMESPACE} logs deployment/{naming.OPERATOR_NAME}",
        )
    return Finding(name, OK, f"AdmissionCheck {check.name} exists, controller {check.controller}, Active")


# ----------------------------------------------------------------------------------------------- queues


def queues(
    cluster_queues: Mapping[str, ClusterQueue], instancetypes: Mapping[str, InstanceType], check_active: bool
) -> list[Finding]:
    """Every accelerated pool's queue references the check once it is Active; no queue without resource groups is
    left admitting, and an accelerated one without them is named whatever its stop policy (held, it admits
    nothing)."""
    out = []
    for name, cq in sorted(cluster_queues.items()):
        it = instancetypes.get(name)
        accelerated = it is not None and it.acceleratable
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
        elif not cq.quotas and accelerated and it is not None:
            label = naming.accelerator_label(it.accelerator_group)
            out.append(
                Finding(
                    "queue-resources",
                    WARN,
                    f"ClusterQueue {name} has no resource groups: on {cq.stop_policy}, its pool admits nothing",
                    "an accelerated queue covers credits.gpustack.ai/<manufacturer> with a flavor per card count of "
                    "its pool; without any, resuming it admits nothing either",
                    "the worker's queue reconciler fills them from the pool's ResourceFlavors "
                    f"(kubectl get resourceflavors -l {label}.count): check its logs; a pool whose nodes are all "
                    "gone stays empty until one returns",
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


INACTIVE_GRACE_SECONDS = 120
"""How long an inactive InstanceType's queue may still admit before it is a finding: the InstanceType reconciler
puts it on Hold within seconds."""


def inactive_pools(
    instancetypes: Mapping[str, InstanceType],
    cluster_queues: Mapping[str, ClusterQueue],
    now: float,
    grace_seconds: float = INACTIVE_GRACE_SECONDS,
) -> list[Finding]:
    """An InstanceType set ``inactive`` whose ClusterQueue still admits once the grace period is over."""
    out = []
    for name, it in sorted(instancetypes.items()):
        cq = cluster_queues.get(name)
        if not it.inactive or cq is None or cq.stop_policy not in ("", "None"):
            continue
        since = epoch_seconds(it.inactive_since) if it.inactive_since else None
        age = None if since is None else now - since
        if age is not None and age < grace_seconds:
            continue
        out.append(
            Finding(
                "pool-inactive",
                FAIL,
                f"InstanceType {name} is inactive"
                + ("" if age is None else f" (set {_duration(max(age, 0))} ago)")
                + f", yet ClusterQueue {name} admits (stopPolicy {cq.stop_policy or 'None'})",
                "inactive puts the pool's queue on Hold: new workloads wait, running ones keep running; the "
                "InstanceType reconciler does it within seconds, so a queue still admitting means it does not run",
                f'kubectl patch clusterqueue {name} --type merge -p \'{{"spec":{{"stopPolicy":"Hold"}}}}\'',
            )
        )
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
                    f"InstanceType {name} carries entrance label "
                    f"{_show(it.labels.get(naming.LABEL_QUEUE_ENTRANCE))} (want {it.expected_entrance})",
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
                    "the worker's queue reconciler derives both from the InstanceType: check its logs; "
                    f"`gpuctl views {name}` names the entrance to use",
                )
            )
        if not it.acceleratable:
            continue
        computed = views_to_status(instancetype_views(it, devices))
        stale = []
        for key, view in it.published_views.items():
            now = computed.get(key)
            published = (view.once_max_request, view.remaining, view.capacity)
            if isinstance(now, dict) and published != (
                ledger := (now["onceMaxRequest"], now["remaining"], now["capacity"])
            ):
                stale.append(f"{key} {'/'.join(map(str, published))} (ledger {'/'.join(map(str, ledger))})")
        if stale or not it.published_views:
            out.append(
                Finding(
                    "pool-status",
                    FAIL,
                    f"InstanceType {name} publishes views that differ from its ledger (onceMaxRequest/remaining/"
                    f"capacity): {', '.join(stale) or 'none published'}",
                    "InstanceType.status carries the four views computed from the Devices ledger (the fix writes "
                    "them); a stale one misleads the gateway and the Instance webhook, and the operator's status "
                    "writer keeps them current only while it runs and leads",
                    f"kubectl patch instancetype {name} --subresource status --type merge -p "
                    + _arg({"status": computed}),
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
                    f"node {n}: fit labels {_labels(have_labels)} where its ledger says {_labels(want)}",
                    "TAS skips a fragmented node only through fresh fit labels; stale ones send Workloads to retry",
                    "the operator's fit-label controller writes them: check that it runs",
                )
            )
    return out


def _labels(labels: Mapping[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items())) or "none"


def orphaned_devices(orphans: Sequence[NodeDevices]) -> list[Finding]:
    """Each Devices object whose Node is gone: left out of every view, and removed by deleting it."""
    return [
        Finding(
            "orphaned-devices",
            WARN,
            f"orphaned Devices {d.node}: no Node {d.node}, so its {sum(len(g.cards) for g in d.groups)} card(s) "
            "are left out of every view",
            "a gone Node serves nothing (gate 3 holds a Workload assigned to it); its Devices object outlived it, "
            "and a writer that still counted it would publish capacity no node has",
            f"kubectl delete devices {d.node}",
        )
        for d in sorted(orphans, key=lambda d: d.node)
    ]


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
        # Kueue's eviction sets Evicted and resets every check to Pending in one write; a verdict found after it was
        # written in the window before the quota is released, the deadlock the design warns about.
        if w.evicted and c.state in ("Ready", "Retry"):
            out.append(
                Finding(
                    "evicted-verdict",
                    FAIL,
                    f"Workload {w.key} is evicted and still carries the check's {c.state}",
                    "the check never judges an evicted Workload: a verdict written between Kueue's two reset "
                    "writes deadlocks the backoff",
                    f"kubectl -n {w.namespace} patch workload {w.name} --subresource status --type json -p "
                    + _arg(
                        [
                            {
                                "op": "test",
                                "path": f"/status/admissionChecks/{w.checks.index(c)}/name",
                                "value": c.name,
                            },
                            {
                                "op": "replace",
                                "path": f"/status/admissionChecks/{w.checks.index(c)}/state",
                                "value": "Pending",
                            },
                        ]
                    ),
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


def drain_stopped(
    instances: Iterable[Instance],
    instancetypes: Mapping[str, InstanceType],
    cluster_queues: Mapping[str, ClusterQueue],
) -> list[Finding]:
    """Instances a drain stopped (the operator's stop, told by its field manager) whose pool admits again: a resume
    leaves them stopped, to be started one by one."""
    out = []
    for i in sorted(instances, key=lambda i: (i.namespace, i.name)):
        if not i.stop or i.stopped_by != naming.INSTANCE_STOP_MANAGER:
            continue
        it, cq = instancetypes.get(i.type), cluster_queues.get(i.type)
        if it is None or it.deleting or it.inactive or cq is None or cq.stop_policy not in ("", "None"):
            continue
        out.append(
            Finding(
                "drain-stopped",
                WARN,
                f"Instance {i.namespace}/{i.name} was stopped by the drain of {i.type}, which admits again",
                "resuming a pool leaves the Instances its drain stopped stopped; each is started on purpose",
                f"gpuctl instance start {i.name} -n {i.namespace}",
            )
        )
    return out


# ----------------------------------------------------------------------------------------------- webhooks


@dataclass(frozen=True, slots=True)
class Rule:
    """One ``rules[]`` entry, normalised: every list sorted, the scope spelled (the API's default is ``*``)."""

    operations: tuple[str, ...]
    api_groups: tuple[str, ...]
    api_versions: tuple[str, ...]
    resources: tuple[str, ...]
    scope: str = "*"

    def to_dict(self) -> dict[str, object]:
        return {
            "operations": list(self.operations),
            "apiGroups": list(self.api_groups),
            "apiVersions": list(self.api_versions),
            "resources": list(self.resources),
            "scope": self.scope,
        }


def parse_rule(raw: Mapping[str, object]) -> Rule:
    return Rule(
        _strs(raw.get("operations")),
        _strs(raw.get("apiGroups")),
        _strs(raw.get("apiVersions")),
        _strs(raw.get("resources")),
        str(raw.get("scope") or "*"),
    )


@dataclass(frozen=True, slots=True)
class WebhookEntry:
    """One ``webhooks[]`` entry of a deployed configuration, as the audit reads it."""

    configuration: str
    mutating: bool
    name: str
    failure_policy: str
    side_effects: str
    timeout_seconds: int | None
    rules: tuple[Rule, ...]
    object_selector: Mapping[str, object]
    path: str
    ca_bundle: str
    """The base64 PEM bundle, empty when missing."""
    index: int = 0
    """Its position in the configuration's ``webhooks`` list (JSON patches address it)."""
    url: str = ""
    service: tuple[str, str, int] | None = None
    """(namespace, name, port) of the Service, when called through one."""
    match_conditions: tuple[tuple[str, str], ...] = ()
    """(name, CEL expression) of each ``matchConditions`` entry: the API server calls the webhook only when all hold."""

    @property
    def ours(self) -> bool:
        """Whether this version registers a webhook of this name (not another vendor's)."""
        from gpuctl.core.webhooks import NAMES

        return self.name in NAMES

    def client_config(self, path: str) -> dict[str, object]:
        """The ``clientConfig`` that calls this entry's server at another ``path``, with the same CA bundle."""
        config: dict[str, object]
        if self.service is not None:
            namespace, name, port = self.service
            config = {"service": {"namespace": namespace, "name": name, "path": path, "port": port}}
        else:
            config = {"url": _url_base(self.url) + path}
        if self.ca_bundle:
            config["caBundle"] = self.ca_bundle
        return config


def _url_base(url: str) -> str:
    """``scheme://host:port`` of a webhook URL."""
    scheme, sep, rest = url.partition("://")
    return scheme + sep + rest.split("/", 1)[0] if sep else ""


def _strs(value: object) -> tuple[str, ...]:
    return tuple(sorted(str(v) for v in value)) if isinstance(value, list) else ()


def parse_webhook_configuration(obj: Mapping[str, object]) -> list[WebhookEntry]:
    """The entries of a Mutating- or ValidatingWebhookConfiguration."""
    meta = obj.get("metadata")
    name = str(meta.get("name", "")) if isinstance(meta, Mapping) else ""
    mutating = obj.get("kind") == "MutatingWebhookConfiguration"
    raw_entries = obj.get("webhooks")
    out = []
    for index, raw in enumerate(raw_entries if isinstance(raw_entries, list) else []):
        if not isinstance(raw, Mapping):
            continue
        client = _map(raw, "clientConfig")
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
        conditions = raw.get("matchConditions")
        out.append(
            WebhookEntry(
                name,
                mutating,
                str(raw.get("name", "")),
                str(raw.get("failurePolicy") or "Fail"),
                str(raw.get("sideEffects") or ""),
                timeout if isinstance(timeout, int) and not isinstance(timeout, bool) else None,
                tuple(parse_rule(r) for r in _list(raw.get("rules")) if isinstance(r, Mapping)),
                _map(raw, "objectSelector"),
                path,
                str(client.get("caBundle") or ""),
                index,
                url,
                (
                    str(service.get("namespace") or ""),
                    str(service.get("name") or ""),
                    int(service["port"]) if isinstance(service.get("port"), int) else 443,
                )
                if isinstance(service, Mapping)
                else None,
                tuple(
                    (str(c.get("name") or ""), str(c.get("expression") or ""))
                    for c in _list(conditions)
                    if isinstance(c, Mapping)
                ),
            )
        )
    return out


def _list(value: object) -> list[object]:
    return value if isinstance(value, list) else []


@dataclass(frozen=True, slots=True)
class _Field:
    """One registered field of an entry that differs: what it is, what the registry says, and how to set it."""

    name: str
    have: object
    want: object
    patch_path: str
    """Under ``/webhooks/<index>``."""
    value: object
    """The JSON value that sets it."""


def _differing(w: Webhook, e: WebhookEntry) -> list[_Field]:
    """The fields of a deployed entry that differ from the registry's, in registry order."""
    selector = w.selector.selector()
    want_selector = dict(_map(selector, "objectSelector"))
    want_conditions = tuple(
        (str(c["name"]), str(c["expression"])) for c in selector.get("matchConditions", []) if isinstance(c, Mapping)
    )
    want_rules = tuple(parse_rule(r) for r in w.rules())
    path_field = "/clientConfig/service/path" if e.service is not None else "/clientConfig/url"
    path_value = w.path if e.service is not None else _url_base(e.url) + w.path
    fields = [
        _Field("path", e.path, w.path, path_field, path_value),
        _Field("failurePolicy", e.failure_policy, w.failure_policy.value, "/failurePolicy", w.failure_policy.value),
        _Field("sideEffects", e.side_effects, "None", "/sideEffects", "None"),
        _Field("timeoutSeconds", e.timeout_seconds, w.timeout_seconds, "/timeoutSeconds", w.timeout_seconds),
        _Field(
            "rules",
            [r.to_dict() for r in e.rules],
            [r.to_dict() for r in want_rules],
            "/rules",
            w.rules(),
        ),
        _Field("objectSelector", dict(e.object_selector), want_selector, "/objectSelector", want_selector),
        _Field(
            "matchConditions",
            [{"name": n, "expression": x} for n, x in e.match_conditions],
            [{"name": n, "expression": x} for n, x in want_conditions],
            "/matchConditions",
            [{"name": n, "expression": x} for n, x in want_conditions],
        ),
    ]
    return [f for f in fields if f.have != f.want]


def _show(value: object) -> str:
    """A value as a user reads it in kubectl's YAML or JSON: no Python spelling."""
    if value is None:
        return "unset"
    if isinstance(value, str):
        return value or '""'
    return _json(value)


def webhooks(entries: Sequence[WebhookEntry], namespace: str = naming.OPERATOR_NAMESPACE) -> list[Finding]:
    """Every webhook this version serves is registered as its registry says (kind of configuration, path,
    rules — operations, groups, versions, resources, scope —, object selector, match conditions, failurePolicy,
    sideEffects, timeout, a CA bundle), and the mutating configuration holding the Pod webhook sorts before Kueue's.
    Each fix is a patch of the configuration as deployed (by Service or by URL), built from the registry."""
    from gpuctl.core.webhooks import REGISTRY

    by_name = {e.name: e for e in entries}
    out = []
    for w in REGISTRY:
        e = by_name.get(w.name)
        if e is None:
            out.append(
                Finding(
                    "webhook",
                    FAIL,
                    f"webhook {w.name} is not registered",
                    "every admission rule of the design runs only where its webhook is registered",
                    _add_entry_fix(w, entries),
                )
            )
            continue
        where = "mutating" if w.mutating else "validating"
        if e.mutating != w.mutating:
            have = "mutating" if e.mutating else "validating"
            out.append(
                Finding(
                    "webhook",
                    FAIL,
                    f"webhook {w.name} is in the {have} configuration {e.configuration} (want {where})",
                    "a mutating rule registered as validating changes nothing, and the reverse runs too early",
                    _move_entry_fix(w, e, entries),
                )
            )
            continue
        wrong = _differing(w, e)
        saw = [f"{f.name} {_show(f.have)} (want {_show(f.want)})" for f in wrong]
        if not e.ca_bundle:
            saw.append("no caBundle")
        if saw:
            out.append(
                Finding(
                    "webhook",
                    FAIL,
                    f"webhook {w.name} in {e.configuration}: " + "; ".join(saw),
                    "a Fail webhook left at Ignore lets rule-breaking Pods through; a rule, selector or match "
                    "condition that does not match sends the API server past the webhook, which then never runs",
                    entry_fix(w, e, entries, namespace),
                )
            )
        else:
            out.append(Finding("webhook", OK, f"webhook {w.name} in {e.configuration} as this version serves it"))
    pod = by_name.get("pod-accelerators.gpustack.ai")
    if pod is not None and pod.mutating and not pod.configuration < naming.KUEUE_MUTATING_CONFIGURATION:
        out.append(
            Finding(
                "webhook-order",
                FAIL,
                f"MutatingWebhookConfiguration {pod.configuration} sorts after {naming.KUEUE_MUTATING_CONFIGURATION}",
                "the Pod webhook's configuration sorts before Kueue's, so the fold precedes Kueue's resource hash",
                _rename_fix(pod.configuration, naming.MUTATING_CONFIGURATION),
            )
        )
    elif pod is not None and pod.mutating:
        out.append(
            Finding(
                "webhook-order",
                OK,
                f"MutatingWebhookConfiguration {pod.configuration} sorts before {naming.KUEUE_MUTATING_CONFIGURATION}",
            )
        )
    return out


def entry_fix(w: Webhook, e: WebhookEntry, entries: Sequence[WebhookEntry], namespace: str) -> str:
    """The command that sets a deployed entry's fields to the registry's (and its caBundle), or "" when none
    differs."""
    fixes = []
    wrong = _differing(w, e)
    if wrong:
        ops: list[dict[str, object]] = [_test_name(e)]
        ops += [{"op": "add", "path": f"/webhooks/{e.index}{f.patch_path}", "value": f.value} for f in wrong]
        fixes.append(f"kubectl patch {_config_kind(e.mutating)} {e.configuration} --type json -p {_arg(ops)}")
    if not e.ca_bundle:
        # Every configuration of this version's that lacks a bundle: one command sets them all.
        lacking = {x.configuration for x in entries if x.ours and not x.ca_bundle}
        fixes.append(ca_bundle_fix(entries, sorted(lacking), namespace))
    return " && ".join(fixes)


def _test_name(e: WebhookEntry) -> dict[str, object]:
    """A JSON patch guard: the entry is still at the index the patch addresses."""
    return {"op": "test", "path": f"/webhooks/{e.index}/name", "value": e.name}


def _sibling(w: Webhook, entries: Sequence[WebhookEntry]) -> WebhookEntry | None:
    """One of this version's deployed entries to copy the server and CA bundle from: of the same kind, in the
    configuration that should hold ``w`` first; else of the other kind."""
    ours = sorted(
        (e for e in entries if e.ours and e.name != w.name),
        key=lambda e: (e.mutating != w.mutating, e.configuration != w.configuration, e.configuration, e.index),
    )
    return ours[0] if ours else None


def _add_entry_fix(w: Webhook, entries: Sequence[WebhookEntry], like: WebhookEntry | None = None) -> str:
    """Register ``w`` as the registry says, calling the server its siblings call (``like``, when given)."""
    like = _sibling(w, entries) or like
    if like is None:
        return INSTALL
    if like.mutating == w.mutating and like.name != w.name:
        ops = [{"op": "add", "path": "/webhooks/-", "value": w.entry(like.client_config(w.path))}]
        return f"kubectl patch {_config_kind(w.mutating)} {like.configuration} --type json -p {_arg(ops)}"
    # No configuration of its kind holds any of this version's webhooks: create it with every one it lacks.
    from gpuctl.core.webhooks import REGISTRY

    present = {e.name for e in entries if e.mutating == w.mutating}
    kind = "MutatingWebhookConfiguration" if w.mutating else "ValidatingWebhookConfiguration"
    config = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": w.configuration},
        "webhooks": [
            x.entry(like.client_config(x.path))
            for x in REGISTRY
            if x.mutating == w.mutating and (x.name == w.name or x.name not in present)
        ],
    }
    return f"echo {_arg(config)} | kubectl create -f -"


def _move_entry_fix(w: Webhook, e: WebhookEntry, entries: Sequence[WebhookEntry]) -> str:
    """Take an entry out of the wrong kind of configuration, and register it in the right one."""
    remove = [_test_name(e), {"op": "remove", "path": f"/webhooks/{e.index}"}]
    add = _add_entry_fix(w, entries, like=e)
    return f"kubectl patch {_config_kind(e.mutating)} {e.configuration} --type json -p {_arg(remove)} && {add}"


def _rename_fix(old: str, new: str) -> str:
    """Register a mutating configuration's webhooks under another name, then delete the old one."""
    head = (
        '{\\"apiVersion\\":\\"admissionregistration.k8s.io/v1\\",\\"kind\\":\\"MutatingWebhookConfiguration\\",'
        f'\\"metadata\\":{{\\"name\\":\\"{new}\\"}},\\"webhooks\\":'
    )
    return (
        f"echo \"{head}$(kubectl get mutatingwebhookconfiguration {old} -o jsonpath='{{.webhooks}}')}}\" "
        f"| kubectl create -f - && kubectl delete mutatingwebhookconfiguration {old}"
    )


INSTALL: Final = "kubectl apply --server-side -k deploy/base"
"""Installing the operator from the repository's kustomize base (the configurations generated from the registry)."""


def _json(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))


def _arg(value: object) -> str:
    """A JSON value as one shell word (quoted, so a CEL expression's quotes survive the paste)."""
    return shlex.quote(_json(value))


# ----------------------------------------------------------------------------------------------- Kueue's Configuration

# Kueue v0.17's defaults for the gates the design sets: queue labels are copied onto Pods unless disabled; TAS is on.
KUEUE_GATE_DEFAULTS: Final[Mapping[str, bool]] = {"AssignQueueLabelsForPods": True, "TopologyAwareScheduling": True}
KUEUE_GATES_WANTED: Final[Mapping[str, bool]] = {"AssignQueueLabelsForPods": False, "TopologyAwareScheduling": True}


@dataclass(frozen=True, slots=True)
class Transformation:
    """One ``resources.transformations`` entry, normalised: quantities as numbers, the default strategy spelled."""

    input: str
    strategy: str
    multiply_by: str
    outputs: tuple[tuple[str, Fraction], ...]


@dataclass(frozen=True, slots=True)
class KueueSettings:
    """What the audit reads of Kueue's Configuration and of its manager's ``--feature-gates`` flag."""

    namespace: str
    name: str
    """The ConfigMap it was read from."""
    config_gates: Mapping[str, bool]
    flag_gates: Mapping[str, bool]
    transformations: tuple[Transformation, ...]
    exclude_prefixes: tuple[str, ...]

    @property
    def source(self) -> str:
        return f"ConfigMap {self.namespace}/{self.name}"

    def gate(self, name: str) -> bool:
        """The gate as the manager runs it: the flag, else the Configuration, else Kueue's default."""
        return self.flag_gates.get(name, self.config_gates.get(name, KUEUE_GATE_DEFAULTS.get(name, False)))


class KueueConfigError(GpuctlError, ValueError):
    """Kueue's Configuration cannot be read as one."""


def parse_transformations(raw: object) -> tuple[Transformation, ...]:
    out = []
    for t in raw if isinstance(raw, list) else []:
        if not isinstance(t, Mapping):
            raise KueueConfigError("resources.transformations: every entry must be a mapping")
        outputs = _map(t, "outputs")
        try:
            parsed = tuple(sorted((str(k), parse_quantity(str(v))) for k, v in outputs.items()))
        except (TypeError, ValueError) as exc:
            raise KueueConfigError(f"resources.transformations[{t.get('input')}].outputs: {exc}") from None
        out.append(
            Transformation(
                str(t.get("input") or ""), str(t.get("strategy") or "Retain"), str(t.get("multiplyBy") or ""), parsed
            )
        )
    return tuple(sorted(out, key=lambda t: t.input))


def _true(value: object) -> bool:
    return value is True or (isinstance(value, str) and value.strip().lower() == "true")


def feature_gate_flag(args: Sequence[str]) -> dict[str, bool]:
    """The gates a manager's ``--feature-gates=A=true,B=false`` (or ``--feature-gates A=true``) argument sets."""
    gates: dict[str, bool] = {}
    for i, arg in enumerate(args):
        if arg.startswith("--feature-gates="):
            value = arg.partition("=")[2]
        elif arg == "--feature-gates" and i + 1 < len(args):
            value = args[i + 1]
        else:
            continue
        for pair in value.split(","):
            name, _, setting = pair.partition("=")
            if name.strip():
                gates[name.strip()] = _true(setting)
    return gates


def parse_kueue_settings(
    config: Mapping[str, object], flag_args: Sequence[str], namespace: str, name: str
) -> KueueSettings:
    """Kueue's Configuration (the decoded YAML of ConfigMap ``namespace/name``) and its manager's arguments."""
    if config.get("kind") not in (None, "Configuration"):
        raise KueueConfigError(f"kind {_show(config.get('kind'))}: want Configuration")
    gates = config.get("featureGates")
    resources = _map(config, "resources")
    exclude = resources.get("excludeResourcePrefixes")
    return KueueSettings(
        namespace,
        name,
        {str(k): _true(v) for k, v in gates.items()} if isinstance(gates, Mapping) else {},
        feature_gate_flag(flag_args),
        parse_transformations(resources.get("transformations")),
        tuple(str(p) for p in exclude) if isinstance(exclude, list) else (),
    )


def kueue_configuration(
    settings: KueueSettings | None,
    wanted_resources: Mapping[str, object],
    configmap: tuple[str, str] = (naming.KUEUE_NAMESPACE, naming.KUEUE_CONFIGMAP),
    manager_deployed: bool = True,
) -> list[Finding]:
    """The design's Kueue settings: ``AssignQueueLabelsForPods`` off, TAS on, the generated ``credits``
    transformations and exclusions. ``configmap`` is where the Configuration was looked for; ``manager_deployed``
    whether Kueue's manager runs as its Deployment (else a fix restarts it where it runs)."""
    out = []
    if settings is None:
        out.append(
            Finding(
                "kueue-config",
                WARN,
                f"no Kueue Configuration found (ConfigMap {configmap[0]}/{configmap[1]}, "
                f"key {naming.KUEUE_CONFIGMAP_KEY})",
                "the feature gates and resource transformations the design sets cannot be checked",
                "pass --kueue-config NAMESPACE/NAME where Kueue's manager reads its Configuration",
            )
        )
    else:
        restart = (
            f"kubectl -n {settings.namespace} rollout restart deployment {naming.KUEUE_DEPLOYMENT}"
            if manager_deployed
            else f"restart Kueue's manager where it runs (no Deployment {settings.namespace}/{naming.KUEUE_DEPLOYMENT})"
        )
        edit = f"kubectl -n {settings.namespace} edit configmap {settings.name}, then {restart}"
        for gate, want in KUEUE_GATES_WANTED.items():
            have = settings.gate(gate)
            state = "enabled" if have else "disabled"
            if have == want:
                out.append(Finding("kueue-gates", OK, f"{gate} is {state}"))
                continue
            if gate in settings.flag_gates:
                where = f"by --feature-gates of deployment {naming.KUEUE_DEPLOYMENT}"
                fix = (
                    f"kubectl -n {settings.namespace} edit deployment {naming.KUEUE_DEPLOYMENT}: set {gate}="
                    f"{str(want).lower()} in --feature-gates (it overrides the Configuration)"
                )
            else:
                where = f"in {settings.source}" if gate in settings.config_gates else "by Kueue's default"
                fix = f"set featureGates: {{{gate}: {str(want).lower()}}} in key {naming.KUEUE_CONFIGMAP_KEY}: {edit}"
            out.append(
                Finding(
                    "kueue-gates",
                    FAIL,
                    f"{gate} is {state} {where}",
                    "AssignQueueLabelsForPods stays off: long ClusterQueue names do not fit a label value"
                    if gate == "AssignQueueLabelsForPods"
                    else "generated flavors reference Topologies: TopologyAwareScheduling stays on",
                    fix,
                )
            )
        want_t = {t.input: t for t in parse_transformations(wanted_resources.get("transformations"))}
        have_t = {t.input: t for t in settings.transformations}
        wrong = sorted(
            [f"{i} missing" for i in want_t if i not in have_t]
            + [
                f"{i} is {_transformation(have_t[i])} (want {_transformation(want_t[i])})"
                for i in want_t
                if i in have_t and have_t[i] != want_t[i]
            ]
        )
        wanted_exclude = wanted_resources.get("excludeResourcePrefixes")
        missing_exclude = [
            p
            for p in (wanted_exclude if isinstance(wanted_exclude, list) else [])
            if p not in settings.exclude_prefixes
        ]
        if wrong or missing_exclude:
            saw = "; ".join(
                [
                    *(["transformations: " + ", ".join(wrong[:6]) + (" …" if len(wrong) > 6 else "")] if wrong else []),
                    *(["excludeResourcePrefixes lacks " + ", ".join(missing_exclude[:4])] if missing_exclude else []),
                ]
            )
            out.append(
                Finding(
                    "kueue-resources",
                    FAIL,
                    f"{settings.source}: {saw}",
                    "every accelerator key folds into credits.gpustack.ai/<manufacturer> and its sub-keys are left "
                    "out; otherwise quota is charged in the wrong unit or a Workload asks for an undeclared resource",
                    f"set resources to what `gpuctl doctor --kueue-resources` prints: {edit}",
                )
            )
        else:
            out.append(
                Finding(
                    "kueue-resources",
                    OK,
                    f"{len(want_t)} credits transformations and {len(settings.exclude_prefixes)} exclusions as generated",
                )
            )
    return out


def _transformation(t: Transformation) -> str:
    """A transformation as its Configuration spells it: ``Replace, outputs credits.gpustack.ai/nvidia=1600000``."""
    outputs = ", ".join(f"{k}={v.numerator if v.denominator == 1 else float(v)}" for k, v in t.outputs) or "none"
    return f"{t.strategy}{f', multiplyBy {t.multiply_by}' if t.multiply_by else ''}, outputs {outputs}"


def kueue_topologies(flavors: Mapping[str, ResourceFlavor], topologies: Mapping[str, tuple[str, ...]]) -> list[Finding]:
    """Every Topology a flavor names exists and ends at the hostname level."""
    out = []
    for name in sorted({f.topology_name for f in flavors.values() if f.topology_name}):
        users = sorted(f.name for f in flavors.values() if f.topology_name == name)
        levels = topologies.get(name)
        if levels is None:
            out.append(
                Finding(
                    "kueue-topology",
                    FAIL,
                    f"Topology {name} does not exist (named by ResourceFlavor {', '.join(users[:3])})",
                    "TAS cannot place a Workload in a flavor whose Topology is missing: it stays pending",
                    f"create Topology {name} with levels ending at {naming.LABEL_HOSTNAME}",
                )
            )
        elif not levels or levels[-1] != naming.LABEL_HOSTNAME:
            out.append(
                Finding(
                    "kueue-topology",
                    FAIL,
                    f"Topology {name} ends at {levels[-1] if levels else 'no level'}",
                    "the check judges the nodes TAS assigns: only a hostname-level assignment names them",
                    f"add the level {naming.LABEL_HOSTNAME} last (recreate the Topology: its levels are immutable)",
                )
            )
        else:
            out.append(Finding("kueue-topology", OK, f"Topology {name} ends at {naming.LABEL_HOSTNAME}"))
    return out


# ----------------------------------------------------------------------------------------------- operator health


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    namespace: str
    name: str
    holder: str
    renew_time: str
    acquire_time: str
    duration_seconds: int


def _map(obj: object, key: str) -> Mapping[str, object]:
    """``obj[key]`` when both are mappings, else an empty one: untrusted objects are read field by field."""
    value = obj.get(key) if isinstance(obj, Mapping) else None
    return value if isinstance(value, Mapping) else {}


def parse_lease(obj: Mapping[str, object]) -> LeaseRecord:
    meta, spec = _map(obj, "metadata"), _map(obj, "spec")
    duration = spec.get("leaseDurationSeconds")
    return LeaseRecord(
        str(meta.get("namespace") or ""),
        str(meta.get("name") or ""),
        str(spec.get("holderIdentity") or ""),
        str(spec.get("renewTime") or ""),
        str(spec.get("acquireTime") or ""),
        duration if isinstance(duration, int) and not isinstance(duration, bool) else 15,
    )


@dataclass(frozen=True, slots=True)
class DeploymentRecord:
    namespace: str
    name: str
    replicas: int
    ready: int
    args: tuple[str, ...]
    """The first container's arguments."""


def parse_deployment(obj: Mapping[str, object]) -> DeploymentRecord:
    spec, status, meta = _map(obj, "spec"), _map(obj, "status"), _map(obj, "metadata")
    containers = _map(_map(spec, "template"), "spec").get("containers")
    first = containers[0] if isinstance(containers, list) and containers else {}
    args = [a for key in ("command", "args") for a in (_strs_in(first, key))]
    replicas, ready = spec.get("replicas"), status.get("readyReplicas")
    return DeploymentRecord(
        str(meta.get("namespace") or ""),
        str(meta.get("name") or ""),
        replicas if isinstance(replicas, int) else 1,
        ready if isinstance(ready, int) else 0,
        tuple(str(a) for a in args),
    )


def _strs_in(obj: object, key: str) -> list[str]:
    value = obj.get(key) if isinstance(obj, Mapping) else None
    return [str(v) for v in value] if isinstance(value, list) else []


def operator_health(
    deployment: DeploymentRecord | None,
    lease: LeaseRecord | None,
    served_by_service: bool,
    namespace: str,
    now: float,
) -> list[Finding]:
    """The operator's replicas (when the webhooks are served by its Service) and its leader Lease."""
    out = []
    pods = _operator_check(namespace, deployment is not None)
    if deployment is None:
        if served_by_service:
            out.append(
                Finding(
                    "operator-replicas",
                    FAIL,
                    f"no Deployment {namespace}/{naming.OPERATOR_NAME}, yet the webhooks name its Service",
                    "every Pod the Pod webhook selects is refused while nothing serves it (failurePolicy Fail)",
                    INSTALL,
                )
            )
    elif deployment.ready == 0:
        out.append(
            Finding(
                "operator-replicas",
                FAIL,
                f"Deployment {deployment.namespace}/{deployment.name}: 0 of {deployment.replicas} replicas ready",
                "with no replica ready the Fail webhooks refuse every Pod and Instance they select",
                pods,
            )
        )
    elif deployment.ready < deployment.replicas:
        out.append(
            Finding(
                "operator-replicas",
                WARN,
                f"Deployment {deployment.namespace}/{deployment.name}: {deployment.ready} of {deployment.replicas} replicas ready",
                "two replicas keep the webhooks answering through a node's loss",
                pods,
            )
        )
    else:
        out.append(
            Finding(
                "operator-replicas",
                OK,
                f"Deployment {deployment.namespace}/{deployment.name}: {deployment.ready}/{deployment.replicas} ready",
            )
        )
    if lease is None:
        if deployment is not None and "--leader-elect" in deployment.args:
            out.append(
                Finding(
                    "operator-leader",
                    FAIL,
                    f"no Lease {namespace}/{naming.OPERATOR_NAME}: no replica leads",
                    "with --leader-elect only the Lease's holder runs the check, the status writer and the fit labels",
                    pods,
                )
            )
        elif deployment is not None and deployment.replicas > 1:
            out.append(
                Finding(
                    "operator-leader",
                    WARN,
                    f"Deployment {deployment.namespace}/{deployment.name} runs {deployment.replicas} replicas "
                    "without --leader-elect",
                    "every replica runs the controllers: verdicts and status writes race",
                    f"kubectl -n {namespace} edit deployment {naming.OPERATOR_NAME} (add --leader-elect)",
                )
            )
        return out
    if deployment is not None and "--leader-elect" not in deployment.args:
        return out  # a Lease left from an earlier deployment: nothing leads by it now
    renewed = epoch_seconds(lease.renew_time)
    age = None if renewed is None else now - renewed
    acquired = epoch_seconds(lease.acquire_time)
    held = "" if acquired is None else f", leading for {_duration(now - acquired)}"
    if age is None or age > lease.duration_seconds:
        out.append(
            Finding(
                "operator-leader",
                FAIL,
                f"Lease {lease.namespace}/{lease.name}: {lease.holder or 'no holder'} last renewed "
                + ("never" if age is None else f"{_duration(age)} ago")
                + f" (duration {lease.duration_seconds} s)",
                "no leader runs the check: Workloads wait at gate 3 and the views stop moving",
                pods,
            )
        )
    else:
        out.append(
            Finding(
                "operator-leader",
                OK,
                f"Lease {lease.namespace}/{lease.name}: {lease.holder}, renewed {_duration(max(age, 0))} ago{held}",
            )
        )
    return out


def _duration(seconds: float) -> str:
    s = int(seconds)
    return f"{s} s" if s < 120 else f"{s // 60} min" if s < 7200 else f"{s // 3600} h"


def histogram_quantile(buckets: Sequence[tuple[float, float]], q: float) -> float | None:
    """The q-quantile of a Prometheus histogram from its cumulative ``(le, count)`` buckets, interpolated within a
    bucket as Prometheus does; None with no observation. The +Inf bucket answers the largest finite bound."""
    ordered = sorted(buckets)
    if not ordered or ordered[-1][1] <= 0:
        return None
    rank = q * ordered[-1][1]
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in ordered:
        if count >= rank:
            if bound == float("inf"):
                return lower_bound
            width = count - lower_count
            return bound if width <= 0 else lower_bound + (bound - lower_bound) * (rank - lower_count) / width
        lower_bound, lower_count = bound, count
    return lower_bound


@dataclass(frozen=True, slots=True)
class EndpointProbe:
    """What reaching a webhook endpoint told."""

    target: str
    """The URL, or ``service NAMESPACE/NAME:PORT`` reached through the API server."""
    configurations: tuple[str, ...]
    error: str = ""
    """Why it could not be reached (a TLS failure included); empty when it answered."""
    ca_verified: bool | None = None
    """True when the caBundle verified the serving certificate, False when it did not (the CA is wrong); None when
    not checked (through the API server's proxy, or another failure)."""
    allowed: bool = True
    """False when the user may not reach it (services/proxy forbidden): nothing was checked."""
    readyz: int | None = None
    readyz_body: str = ""
    p99_seconds: float | None = None
    reviews: int = 0


def _operator_check(namespace: str, deployed: bool) -> str:
    """Where to look when the operator does not answer: its Deployment, Pods, endpoints and logs in the cluster, or
    its process where it runs outside the cluster (its webhooks called by URL, as ``make cluster`` runs it)."""
    if not deployed:
        return (
            f"the operator runs outside the cluster (no Deployment {namespace}/{naming.OPERATOR_NAME}; its webhooks "
            "are called by URL): check that its process runs, and its log"
        )
    selector = f"app.kubernetes.io/name={naming.OPERATOR_NAME}"
    return (
        f"kubectl -n {namespace} describe deployment {naming.OPERATOR_NAME} && "
        f"kubectl -n {namespace} get pods -l {selector} && "
        f"kubectl -n {namespace} get endpointslices -l kubernetes.io/service-name={naming.OPERATOR_NAME} && "
        f"kubectl -n {namespace} logs -l {selector} --tail=20"
    )


def endpoints(
    probes: Sequence[EndpointProbe],
    entries: Sequence[WebhookEntry],
    namespace: str = naming.OPERATOR_NAMESPACE,
    deployed: bool = True,
) -> list[Finding]:
    """Each endpoint answers over TLS its caBundle verifies, is ready, and reviews well within the shortest timeout
    its webhooks are registered with."""
    out = []
    for p in probes:
        where = f"{p.target} ({', '.join(p.configurations)})"
        if not p.allowed:
            out.append(
                Finding(
                    "webhook-endpoint",
                    WARN,
                    f"{where}: not checked: {p.error[:200]}",
                    "readiness and review latency are read through the API server's service proxy",
                    "grant the gpuctl-view role (deploy/rbac/gpuctl-cli.yaml): it may get the operator's services/proxy",
                )
            )
            continue
        if p.error:
            out.append(
                Finding(
                    "webhook-endpoint",
                    FAIL,
                    f"{where}: {p.error}",
                    "the API server calls the webhooks here with the caBundle; a Fail webhook it cannot call "
                    "refuses what it selects",
                    ca_bundle_fix(entries, p.configurations, namespace)
                    if p.ca_verified is False
                    else _operator_check(namespace, deployed),
                )
            )
            continue
        if p.readyz is not None and p.readyz != 200:
            out.append(
                Finding(
                    "operator-ready",
                    FAIL,
                    f"{where}: /readyz answered {p.readyz}: {p.readyz_body[:200]}",
                    "a replica that is not ready has not synced the kinds its webhooks read",
                    _operator_check(namespace, deployed),
                )
            )
        reached = "its caBundle verifies the serving certificate" if p.ca_verified else "reached through the API server"
        out.append(Finding("webhook-endpoint", OK, f"{where}: {reached}"))
        if p.readyz == 200:
            out.append(Finding("operator-ready", OK, f"{where}: /readyz 200"))
        timeouts = [e.timeout_seconds or 10 for e in entries if e.configuration in p.configurations and e.ours]
        if p.p99_seconds is not None and timeouts:
            timeout = min(timeouts)
            status = FAIL if p.p99_seconds >= timeout else WARN if p.p99_seconds >= timeout / 2 else OK
            out.append(
                Finding(
                    "webhook-latency",
                    status,
                    f"{where}: review p99 {p.p99_seconds * 1000:.1f} ms over {p.reviews} reviews (timeout {timeout} s)",
                    "" if status == OK else "a review slower than timeoutSeconds is refused (Fail) or skipped (Ignore)",
                    "" if status == OK else f"kubectl -n {namespace} top pods; see gpuctl_webhook_duration_seconds",
                )
            )
    return out


@dataclass(frozen=True, slots=True)
class ReviewProbe:
    """A dry-run create that shows a webhook ran: its change is in the object the API server returns, or its
    refusal is the answer. Being admitted proves nothing (a webhook whose rules miss the object is not called)."""

    kind: str
    """``Pod`` or ``InstanceType``."""
    body: Mapping[str, object]
    webhook: str
    """The webhook it proves."""
    shows: Callable[[Mapping[str, object]], bool] | None = None
    """Whether the returned object carries the webhook's change; None when the webhook must refuse it."""

    @property
    def request(self) -> str:
        meta = _map(self.body, "metadata")
        where = f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else str(meta.get("name"))
        return f"dry-run create {self.kind} {where}"

    def ran(self, returned: Mapping[str, object] | None, error: str) -> bool:
        if f'admission webhook "{self.webhook}" denied the request' in error:
            return True
        return self.shows is not None and returned is not None and self.shows(returned)


PROBE_NAME: Final = "gpuctl-doctor-probe"


def _container_limits(obj: Mapping[str, object]) -> Mapping[str, object]:
    containers = _map(obj, "spec").get("containers")
    first = containers[0] if isinstance(containers, list) and containers else {}
    return _map(_map(first, "resources"), "limits")


def _same_quantity(have: object, want: object) -> bool:
    """Two quantities equal as numbers (the API server writes ``400000`` back as ``400k``)."""
    try:
        return have is not None and parse_quantity(str(have)) == parse_quantity(str(want))
    except ValueError:
        return False


def review_probes(namespace: str) -> list[ReviewProbe]:
    """A Pod the Pod webhook folds (a quarter of a card's memory, whatever the pool: the fold of a percentage needs
    no InstanceType), a CPU InstanceType the defaulting webhook labels with its entrance, and one the validating
    webhook refuses (no unit resources)."""
    from gpuctl.core.requests import admit_pod

    pod: dict[str, object] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": PROBE_NAME, "namespace": namespace, "labels": {naming.LABEL_QUEUE_NAME: PROBE_NAME}},
        "spec": {
            "containers": [
                {
                    "name": "probe",
                    "image": PROBE_NAME,
                    "resources": {
                        "limits": {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-percentage": "25"}
                    },
                }
            ]
        },
    }
    folded = admit_pod(pod, ()).mutated
    assert isinstance(folded, dict)
    want = {k: v for k, v in _container_limits(folded).items() if k not in _container_limits(pod)}
    spec = {"os": "linux", "arch": "amd64", "generalGroup": naming.GENERIC}

    def instancetype(**more: object) -> dict[str, object]:
        return {
            "apiVersion": "worker.gpustack.ai/v1alpha1",
            "kind": "InstanceType",
            "metadata": {"name": PROBE_NAME},
            "spec": {**spec, **more},
        }

    entrance = naming.queue_entrance(PROBE_NAME)
    return [
        ReviewProbe(
            "Pod",
            pod,
            "pod-accelerators.gpustack.ai",
            lambda got: all(_same_quantity(_container_limits(got).get(k), v) for k, v in want.items()),
        ),
        ReviewProbe(
            "InstanceType",
            instancetype(unitResources={"cpu": "1", "ram": "1Gi"}, localStorage="1Gi"),
            "instancetype-default.gpustack.ai",
            lambda got: _map(_map(got, "metadata"), "labels").get(naming.LABEL_QUEUE_ENTRANCE) == entrance,
        ),
        ReviewProbe("InstanceType", instancetype(), "instancetype-validate.gpustack.ai"),
    ]


@dataclass(frozen=True, slots=True)
class LiveReview:
    """A server-side dry run the API server sent through the webhooks."""

    configurations: tuple[str, ...]
    """The configurations of the webhooks it concerns (of the one that failed, when one did)."""
    request: str
    """What was sent, e.g. ``dry-run create Pod default/gpuctl-doctor-probe``."""
    seconds: float
    error: str = ""
    """The API server's answer when it could not call a webhook; empty when every webhook answered."""
    sent: bool = True
    """False when the user may not send it (a role without create): nothing was checked."""
    foreign: str = ""
    """The webhook that could not be called when it is not one of gpuctl's."""
    webhook: str = ""
    """The webhook the dry run is to prove ran."""
    ran: bool = True
    """Whether it did: its change is in the returned object, or its refusal was the answer."""
    answer: str = ""
    """What the API server answered instead, when it did not run: admitted unchanged, or another refusal."""


def _call_failure(error: str) -> str:
    """The API server's ``failed calling webhook`` error, without the request URL's noise."""
    m = re.search(r'failed calling webhook "([^"]+)": failed to call webhook: \w+ "([^"]+)": (.*)', error)
    if m is None:
        return error[:300]
    return f'failed calling webhook "{m.group(1)}" at {m.group(2).split("?")[0]}: {m.group(3)[:200]}'


def live_reviews(
    reviews: Sequence[LiveReview],
    entries: Sequence[WebhookEntry],
    namespace: str = naming.OPERATOR_NAMESPACE,
    deployed: bool = True,
) -> list[Finding]:
    from gpuctl.core.webhooks import REGISTRY

    registry = {w.name: w for w in REGISTRY}
    by_name = {e.name: e for e in entries}
    out = []
    for r in reviews:
        where = ", ".join(r.configurations) or "the webhooks"
        if not r.sent:
            out.append(
                Finding(
                    "webhook-review",
                    WARN,
                    f"{where}: {r.request} not sent: {r.error[:200]}",
                    "a dry run shows the API server calls the webhooks; nothing is persisted",
                    "run doctor as a user who may create Pods and InstanceTypes (dry runs need create)",
                )
            )
        elif r.foreign:
            out.append(
                Finding(
                    "webhook-review",
                    WARN,
                    f"{r.request}: another webhook, {r.foreign}, could not be called: {_call_failure(r.error)}",
                    "gpuctl's webhooks were not reached: the API server stopped at another one",
                    "kubectl get mutatingwebhookconfigurations,validatingwebhookconfigurations "
                    "-o custom-columns=NAME:.metadata.name,WEBHOOKS:.webhooks[*].name",
                )
            )
        elif r.error and 'failed calling webhook "' in r.error:
            ca = "x509" in r.error or "certificate signed by unknown authority" in r.error
            out.append(
                Finding(
                    "webhook-review",
                    FAIL,
                    f"{where}: {r.request}: {_call_failure(r.error)}",
                    "the API server could not call the webhook, so it refuses what the webhook selects",
                    ca_bundle_fix(entries, r.configurations, namespace) if ca else _operator_check(namespace, deployed),
                )
            )
        elif not r.ran:
            e, w = by_name.get(r.webhook), registry.get(r.webhook)
            fix = entry_fix(w, e, entries, namespace) if e is not None and w is not None else ""
            out.append(
                Finding(
                    "webhook-review",
                    FAIL,
                    f"{where}: {r.request}: {r.webhook} did not run ({r.answer})",
                    "a webhook the API server does not call enforces nothing: its rules, selector or match "
                    "conditions miss the objects it is for",
                    fix
                    or "compare the webhook's rules and selectors with `gpuctl doctor -o wide`; "
                    + _operator_check(namespace, deployed),
                )
            )
        else:
            out.append(
                Finding(
                    "webhook-review",
                    OK,
                    f"{where}: {r.request}: {r.webhook or 'the webhooks'} ran, answered in {r.seconds * 1000:.0f} ms",
                )
            )
    # Two probes of one kind stopped at the same webhook say the same thing once.
    return list(dict.fromkeys(out))


def ca_bundle_fix(
    entries: Sequence[WebhookEntry], configurations: Iterable[str], namespace: str = naming.OPERATOR_NAMESPACE
) -> str:
    """One command setting every webhook's caBundle in these configurations to the CA of the operator's serving
    Secret (``ca.crt``, as cert-manager writes it); it stops at the first step that fails (no Secret, no CA)."""
    wanted = set(configurations)
    by_config: dict[tuple[bool, str], list[WebhookEntry]] = {}
    for e in entries:
        if e.configuration in wanted:
            by_config.setdefault((e.mutating, e.configuration), []).append(e)
    parts = [
        f"CA=$(kubectl -n {namespace} get secret {naming.OPERATOR_TLS_SECRET} -o jsonpath='{{.data.ca\\.crt}}')",
        'test -n "$CA"',
    ]
    for (mutating, name), found in sorted(by_config.items()):
        ops = []
        for e in sorted(found, key=lambda e: e.index):
            ops.append(_json(_test_name(e)).replace('"', '\\"'))
            ops.append(
                f'{{\\"op\\":\\"add\\",\\"path\\":\\"/webhooks/{e.index}/clientConfig/caBundle\\",\\"value\\":\\"$CA\\"}}'
            )
        parts.append(f'kubectl patch {_config_kind(mutating)} {name} --type json -p "[{",".join(ops)}]"')
    return " && ".join(parts)


def _config_kind(mutating: bool) -> str:
    return "mutatingwebhookconfiguration" if mutating else "validatingwebhookconfiguration"
