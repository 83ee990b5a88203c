"""The records the doctor's checks read and write, and the words their findings share.

A ``Finding`` is what a check reports: what it saw, why it matters and the fix (a command or a patch). The objects
the checks read besides the core's own records — webhook configurations, Kueue's Configuration, the leader Lease,
the operator's Deployment — are parsed here, once, field by field (they are untrusted), as are the results of the
probes the CLI makes of a live operator (``EndpointProbe``, ``ReviewProbe``, ``LiveReview``).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Final

from gpuctl.core import naming
from gpuctl.core.errors import GpuctlError
from gpuctl.core.units import parse_quantity

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
    namespace_selector: Mapping[str, object] = field(default_factory=dict)
    """Its ``namespaceSelector``: for a namespaced object, the API server calls the webhook only when the object's
    Namespace's labels match it (an empty one matches every Namespace)."""

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
            config = {"url": url_base(self.url) + path}
        if self.ca_bundle:
            config["caBundle"] = self.ca_bundle
        return config


def url_base(url: str) -> str:
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
        client = field_map(raw, "clientConfig")
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
                field_map(raw, "objectSelector"),
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
                field_map(raw, "namespaceSelector"),
            )
        )
    return out


def _list(value: object) -> list[object]:
    return value if isinstance(value, list) else []


# ----------------------------------------------------------------------------------------------- Kueue's Configuration

# Kueue v0.17's defaults for the gates the design sets: queue labels are copied onto Pods unless disabled; TAS is on.
KUEUE_GATE_DEFAULTS: Final[Mapping[str, bool]] = {"AssignQueueLabelsForPods": True, "TopologyAwareScheduling": True}


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
    quota_check_strategy: str = ""
    """``resources.quotaCheckStrategy`` ("" when unset: Kueue's default, ``BlockUndeclared``)."""

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
        outputs = field_map(t, "outputs")
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
        raise KueueConfigError(f"kind {show(config.get('kind'))}: want Configuration")
    gates = config.get("featureGates")
    resources = field_map(config, "resources")
    exclude = resources.get("excludeResourcePrefixes")
    return KueueSettings(
        namespace,
        name,
        {str(k): _true(v) for k, v in gates.items()} if isinstance(gates, Mapping) else {},
        feature_gate_flag(flag_args),
        parse_transformations(resources.get("transformations")),
        tuple(str(p) for p in exclude) if isinstance(exclude, list) else (),
        str(resources.get("quotaCheckStrategy") or ""),
    )


# ----------------------------------------------------------------------------------------------- operator health


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    namespace: str
    name: str
    holder: str
    renew_time: str
    acquire_time: str
    duration_seconds: int
    serving_port: int | None = None
    """The HTTPS port its holder serves the webhooks on (its annotation), when it says."""
    version: str = ""
    """The gpuctl version its holder runs (its annotation), when it says."""


def parse_lease(obj: Mapping[str, object]) -> LeaseRecord:
    meta, spec = field_map(obj, "metadata"), field_map(obj, "spec")
    duration = spec.get("leaseDurationSeconds")
    return LeaseRecord(
        str(meta.get("namespace") or ""),
        str(meta.get("name") or ""),
        str(spec.get("holderIdentity") or ""),
        str(spec.get("renewTime") or ""),
        str(spec.get("acquireTime") or ""),
        duration if isinstance(duration, int) and not isinstance(duration, bool) else 15,
        _port(field_map(meta, "annotations").get(naming.ANNOTATION_SERVING_PORT)),
        str(field_map(meta, "annotations").get(naming.ANNOTATION_VERSION) or ""),
    )


def _port(value: object) -> int | None:
    text = str(value or "")
    return int(text) if text.isdigit() and 0 < int(text) < 65536 else None


@dataclass(frozen=True, slots=True)
class DeploymentRecord:
    namespace: str
    name: str
    replicas: int
    ready: int
    args: tuple[str, ...]
    """The first container's arguments."""
    version: str = ""
    """Its ``app.kubernetes.io/version`` label."""


def parse_deployment(obj: Mapping[str, object]) -> DeploymentRecord:
    spec, status, meta = field_map(obj, "spec"), field_map(obj, "status"), field_map(obj, "metadata")
    containers = field_map(field_map(spec, "template"), "spec").get("containers")
    first = containers[0] if isinstance(containers, list) and containers else {}
    args = [a for key in ("command", "args") for a in (_strs_in(first, key))]
    replicas, ready = spec.get("replicas"), status.get("readyReplicas")
    return DeploymentRecord(
        str(meta.get("namespace") or ""),
        str(meta.get("name") or ""),
        replicas if isinstance(replicas, int) else 1,
        ready if isinstance(ready, int) else 0,
        tuple(str(a) for a in args),
        str(field_map(meta, "labels").get("app.kubernetes.io/version") or ""),
    )


def _strs_in(obj: object, key: str) -> list[str]:
    value = obj.get(key) if isinstance(obj, Mapping) else None
    return [str(v) for v in value] if isinstance(value, list) else []


# ----------------------------------------------------------------------------------------------- probes of a live operator


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
        meta = field_map(self.body, "metadata")
        where = f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else str(meta.get("name"))
        return f"dry-run create {self.kind} {where}"

    def ran(self, returned: Mapping[str, object] | None, error: str) -> bool:
        if f'admission webhook "{self.webhook}" denied the request' in error:
            return True
        return self.shows is not None and returned is not None and self.shows(returned)


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


# ----------------------------------------------------------------------------------------------- the words findings share


def show(value: object) -> str:
    """A value as a user reads it in kubectl's YAML or JSON: no Python spelling."""
    if value is None:
        return "unset"
    if isinstance(value, str):
        return value or '""'
    return compact_json(value)


INSTALL: Final = "kubectl apply --server-side -k deploy/standalone"
"""Installing the operator from the repository's kustomize base (the configurations generated from the registry)."""


def compact_json(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))


def shell_word(value: object) -> str:
    """A JSON value as one shell word (quoted, so a CEL expression's quotes survive the paste)."""
    return shlex.quote(compact_json(value))


def field_map(obj: object, key: str) -> Mapping[str, object]:
    """``obj[key]`` when both are mappings, else an empty one: untrusted objects are read field by field."""
    value = obj.get(key) if isinstance(obj, Mapping) else None
    return value if isinstance(value, Mapping) else {}


def duration_text(seconds: float) -> str:
    s = int(seconds)
    return f"{s} s" if s < 120 else f"{s // 60} min" if s < 7200 else f"{s // 3600} h"


def operator_fix(namespace: str, deployed: bool) -> str:
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
