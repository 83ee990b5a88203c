"""The checks of the webhooks: each deployed configuration entry against the registry this version serves (kind of
configuration, path, rules, selectors, match conditions, failure policy, timeout, CA bundle, order before Kueue's),
with the patch that fixes a difference; and the probes of a live operator (its endpoint checked with the registered
CA bundle, server-side dry runs that show each webhook ran).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from gpuctl.core import naming
from gpuctl.core.doctor.records import (
    FAIL,
    INSTALL,
    OK,
    WARN,
    EndpointProbe,
    Finding,
    LiveReview,
    ReviewProbe,
    WebhookEntry,
    compact_json,
    field_map,
    operator_fix,
    parse_rule,
    shell_word,
    show,
    url_base,
)
from gpuctl.core.units import parse_quantity

if TYPE_CHECKING:
    from gpuctl.core.webhooks import Webhook


# ----------------------------------------------------------------------------------------------- the deployed configurations


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
    want_selector = dict(field_map(selector, "objectSelector"))
    want_conditions = tuple(
        (str(c["name"]), str(c["expression"])) for c in selector.get("matchConditions", []) if isinstance(c, Mapping)
    )
    want_rules = tuple(parse_rule(r) for r in w.rules())
    path_field = "/clientConfig/service/path" if e.service is not None else "/clientConfig/url"
    path_value = w.path if e.service is not None else url_base(e.url) + w.path
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
        saw = [f"{f.name} {show(f.have)} (want {show(f.want)})" for f in wrong]
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
        fixes.append(f"kubectl patch {_config_kind(e.mutating)} {e.configuration} --type json -p {shell_word(ops)}")
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
        return f"kubectl patch {_config_kind(w.mutating)} {like.configuration} --type json -p {shell_word(ops)}"
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
    return f"echo {shell_word(config)} | kubectl create -f -"


def _move_entry_fix(w: Webhook, e: WebhookEntry, entries: Sequence[WebhookEntry]) -> str:
    """Take an entry out of the wrong kind of configuration, and register it in the right one."""
    remove = [_test_name(e), {"op": "remove", "path": f"/webhooks/{e.index}"}]
    add = _add_entry_fix(w, entries, like=e)
    return f"kubectl patch {_config_kind(e.mutating)} {e.configuration} --type json -p {shell_word(remove)} && {add}"


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


# ----------------------------------------------------------------------------------------------- probes of a live operator


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
                    else operator_fix(namespace, deployed),
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
                    operator_fix(namespace, deployed),
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


PROBE_NAME: Final = "gpuctl-doctor-probe"


def _container_limits(obj: Mapping[str, object]) -> Mapping[str, object]:
    containers = field_map(obj, "spec").get("containers")
    first = containers[0] if isinstance(containers, list) and containers else {}
    return field_map(field_map(first, "resources"), "limits")


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
            instancetype(acceleratable=False, unitResources={"cpu": "1", "ram": "1Gi"}, localStorage="1Gi"),
            "instancetype-default.gpustack.ai",
            lambda got: field_map(field_map(got, "metadata"), "labels").get(naming.LABEL_QUEUE_ENTRANCE) == entrance,
        ),
        # Whole to the schema (GPUStack's states what is required), refused by the webhook alone: RAM not in Gi.
        ReviewProbe(
            "InstanceType",
            instancetype(acceleratable=False, unitResources={"cpu": "1", "ram": "1GB"}, localStorage="1Gi"),
            "instancetype-validate.gpustack.ai",
        ),
    ]


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
                    ca_bundle_fix(entries, r.configurations, namespace) if ca else operator_fix(namespace, deployed),
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
                    + operator_fix(namespace, deployed),
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
            ops.append(compact_json(_test_name(e)).replace('"', '\\"'))
            ops.append(
                f'{{\\"op\\":\\"add\\",\\"path\\":\\"/webhooks/{e.index}/clientConfig/caBundle\\",\\"value\\":\\"$CA\\"}}'
            )
        parts.append(f'kubectl patch {_config_kind(mutating)} {name} --type json -p "[{",".join(ops)}]"')
    return " && ".join(parts)


def _config_kind(mutating: bool) -> str:
    return "mutatingwebhookconfiguration" if mutating else "validatingwebhookconfiguration"
