"""Every admission webhook of the operator in one registry, and the chain the API server runs for one request.

The registry is the one place that says, per webhook: its name, the kind and operations it sees, its path, whether it
mutates, its failure policy, its selector and its rule. It drives ``review()`` (the dry-run), the operator's routes,
the generated webhook configurations and the CLI. The API server runs the mutating webhooks, then the validating ones
on the mutated object; ``review`` does the same for one kind, so a dry-run shows what the cluster would store (or why it
refuses).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from gpuctl.core import naming
from gpuctl.core.admission import JSON, Admission, Path, allow, deny
from gpuctl.core.compat import StrEnum
from gpuctl.core.instancetypes import InstanceType
from gpuctl.core.kvcache import LABEL_INJECT, KVCacheContext, admit_kvcache_pod, validate_kvcache_update
from gpuctl.core.pins import PinContext, pin_workload
from gpuctl.core.requests import admit_pod
from gpuctl.core.workloads import ResourceFlavor


class Kind(StrEnum):
    POD = "pod"
    WORKLOAD = "workload"
    INSTANCETYPE = "instancetype"
    INSTANCE = "instance"


class FailurePolicy(StrEnum):
    FAIL = "Fail"
    IGNORE = "Ignore"


@dataclass(frozen=True)
class WebhookContext:
    """The records the webhooks read besides the request: InstanceTypes, KV-cache objects, queues, settings."""

    instancetypes: Sequence[InstanceType] = ()
    kvcache: KVCacheContext = field(default_factory=KVCacheContext)
    pins: PinContext = field(default_factory=lambda: PinContext({}, {}, {}))
    cpu_aware: bool = False
    """Setting ``instance-type-aware-cpu-manufacturer``."""
    overcommit: bool = True
    """Setting ``instance-general-resources-overcommit``."""
    flavors: Sequence[ResourceFlavor] = ()
    """ResourceFlavors with their notes (the InstanceType defaulting webhook enriches descriptors from them)."""
    stop_policies: Mapping[str, str] = field(default_factory=dict)
    """ClusterQueue name → ``spec.stopPolicy`` (a queue shares its InstanceType's name)."""

    def instancetype(self, name: str) -> InstanceType | None:
        return next((t for t in self.instancetypes if t.name == name), None)

    def stop_policy(self, instancetype: str) -> str:
        return self.stop_policies.get(instancetype, "None")

    def for_namespace(self, namespace: str) -> WebhookContext:
        """The context for a request in ``namespace`` (the KV-cache rules resolve Bindings there)."""
        kv = self.kvcache
        scoped = KVCacheContext(kv.bindings, kv.pools, kv.backends, namespace, kv.kv_cache_dtype_owned)
        return WebhookContext(
            self.instancetypes, scoped, self.pins, self.cpu_aware, self.overcommit, self.flavors, self.stop_policies
        )


Rule = Callable[[str, JSON, JSON | None, WebhookContext], Admission]
"""``(operation, object, old object, context) -> Admission``."""


@dataclass(frozen=True, slots=True)
class Resource:
    """What a webhook's ``rules`` entry names."""

    group: str
    versions: tuple[str, ...]
    plural: str
    namespaced: bool


RESOURCES: Final[Mapping[Kind, Resource]] = {
    Kind.POD: Resource("", ("v1",), "pods", True),
    Kind.WORKLOAD: Resource("kueue.x-k8s.io", ("v1beta2", "v1beta1"), "workloads", True),
    Kind.INSTANCETYPE: Resource("worker.gpustack.ai", ("v1alpha1",), "instancetypes", False),
    Kind.INSTANCE: Resource("worker.gpustack.ai", ("v1alpha1",), "instances", True),
}


@dataclass(frozen=True, slots=True)
class LabelExists:
    """An ``objectSelector`` matching objects that carry a label (any value)."""

    label: str

    def matches(self, obj: JSON) -> bool:
        return self.label in _labels(obj)

    def selector(self) -> JSON:
        return {"objectSelector": {"matchExpressions": [{"key": self.label, "operator": "Exists"}]}}


@dataclass(frozen=True, slots=True)
class QueuePrefix:
    """A ``matchCondition`` on a Workload's ``spec.queueName`` starting with this operator's entrance prefix."""

    name: str = "gpustack-queue"

    def matches(self, obj: JSON) -> bool:
        spec = obj.get("spec")
        queue = spec.get("queueName") if isinstance(spec, dict) else None
        return isinstance(queue, str) and queue.startswith(naming.ENTRANCE_PREFIX)

    def selector(self) -> JSON:
        expression = f"has(object.spec.queueName) && object.spec.queueName.startsWith('{naming.ENTRANCE_PREFIX}')"
        return {"matchConditions": [{"name": self.name, "expression": expression}]}


@dataclass(frozen=True, slots=True)
class Everything:
    def matches(self, obj: JSON) -> bool:
        return True

    def selector(self) -> JSON:
        return {}


Selector = LabelExists | QueuePrefix | Everything


@dataclass(frozen=True, slots=True)
class Webhook:
    name: str
    kind: Kind
    path: str
    mutating: bool
    failure_policy: FailurePolicy
    operations: tuple[str, ...]
    selector: Selector
    rule: Rule
    timeout_seconds: int = 10

    @property
    def fail_closed(self) -> bool:
        return self.failure_policy is FailurePolicy.FAIL

    @property
    def resource(self) -> Resource:
        return RESOURCES[self.kind]

    def selects(self, operation: str, obj: JSON) -> bool:
        """Whether the API server sends this request to the webhook."""
        return operation in self.operations and self.selector.matches(obj)

    @property
    def configuration(self) -> str:
        """The configuration that registers it."""
        return naming.MUTATING_CONFIGURATION if self.mutating else naming.VALIDATING_CONFIGURATION

    def rules(self) -> list[JSON]:
        """Its ``rules``, as registered."""
        r = self.resource
        return [
            {
                "operations": list(self.operations),
                "apiGroups": [r.group],
                "apiVersions": list(r.versions),
                "resources": [r.plural],
                "scope": "Namespaced" if r.namespaced else "Cluster",
            }
        ]

    def entry(self, client_config: JSON) -> JSON:
        """Its ``webhooks[]`` entry in its configuration, calling it at ``client_config``."""
        entry: JSON = {
            "name": self.name,
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": self.failure_policy.value,
            "timeoutSeconds": self.timeout_seconds,
            "clientConfig": client_config,
            "rules": self.rules(),
            **self.selector.selector(),
        }
        if self.mutating:
            entry["reinvocationPolicy"] = "IfNeeded"
        return entry


# ----------------------------------------------------------------------------------------------- the rules


def _pod_accelerators(op: str, obj: JSON, old: JSON | None, ctx: WebhookContext) -> Admission:
    return admit_pod(obj, ctx.instancetypes)


def _pod_kvcache(op: str, obj: JSON, old: JSON | None, ctx: WebhookContext) -> Admission:
    return admit_kvcache_pod(obj, ctx.kvcache)


def _pod_kvcache_frozen(op: str, obj: JSON, old: JSON | None, ctx: WebhookContext) -> Admission:
    return validate_kvcache_update(old, obj) if old is not None else allow()


def _workload_fit(op: str, obj: JSON, old: JSON | None, ctx: WebhookContext) -> Admission:
    return pin_workload(obj, old if op == "UPDATE" else None, ctx.pins)


def _instancetype_default(op: str, obj: JSON, old: JSON | None, ctx: WebhookContext) -> Admission:
    from gpuctl.core.instancetype_rules import instancetype_mutating_webhook

    return instancetype_mutating_webhook(op, obj, cpu_aware=ctx.cpu_aware, flavors=ctx.flavors)


def _instancetype_validate(op: str, obj: JSON, old: JSON | None, ctx: WebhookContext) -> Admission:
    from gpuctl.core.instancetype_rules import instancetype_validating_webhook

    return instancetype_validating_webhook(op, obj, old)


def _type_name(obj: JSON) -> str:
    spec = obj.get("spec") if isinstance(obj, dict) else None
    name = spec.get("type") if isinstance(spec, dict) else None
    return name if isinstance(name, str) else ""


def _instance_default(op: str, obj: JSON, old: JSON | None, ctx: WebhookContext) -> Admission:
    from gpuctl.core.instances import instance_mutating_webhook

    return instance_mutating_webhook(op, obj, old, ctx.instancetype(_type_name(obj)), overcommit=ctx.overcommit)


def _instance_validate(op: str, obj: JSON, old: JSON | None, ctx: WebhookContext) -> Admission:
    from gpuctl.core.instances import instance_validating_webhook

    name = _type_name(obj)
    return instance_validating_webhook(op, obj, old, ctx.instancetype(name), stop_policy=ctx.stop_policy(name))


CREATE, UPDATE = ("CREATE",), ("UPDATE",)
CREATE_UPDATE = ("CREATE", "UPDATE")
FAIL, IGNORE = FailurePolicy.FAIL, FailurePolicy.IGNORE

REGISTRY: Final[tuple[Webhook, ...]] = (
    Webhook(
        "pod-accelerators.gpustack.ai",
        Kind.POD,
        "/mutate-pod-accelerators",
        True,
        FAIL,
        CREATE,
        LabelExists(naming.LABEL_QUEUE_NAME),
        _pod_accelerators,
    ),
    Webhook(
        "pod-kvcache.gpustack.ai",
        Kind.POD,
        "/mutate-pod-kvcache",
        True,
        FAIL,
        CREATE,
        LabelExists(LABEL_INJECT),
        _pod_kvcache,
    ),
    Webhook(
        "pod-kvcache-frozen.gpustack.ai",
        Kind.POD,
        "/validate-pod-kvcache",
        False,
        IGNORE,
        UPDATE,
        LabelExists(LABEL_INJECT),
        _pod_kvcache_frozen,
    ),
    Webhook(
        "workload-fit.gpustack.ai",
        Kind.WORKLOAD,
        "/mutate-workloads",
        True,
        IGNORE,
        CREATE_UPDATE,
        QueuePrefix(),
        _workload_fit,
    ),
    Webhook(
        "instancetype-default.gpustack.ai",
        Kind.INSTANCETYPE,
        "/mutate-instancetypes",
        True,
        FAIL,
        CREATE_UPDATE,
        Everything(),
        _instancetype_default,
    ),
    Webhook(
        "instancetype-validate.gpustack.ai",
        Kind.INSTANCETYPE,
        "/validate-instancetypes",
        False,
        FAIL,
        CREATE_UPDATE,
        Everything(),
        _instancetype_validate,
    ),
    Webhook(
        "instance-default.gpustack.ai",
        Kind.INSTANCE,
        "/mutate-instances",
        True,
        FAIL,
        CREATE_UPDATE,
        Everything(),
        _instance_default,
    ),
    Webhook(
        "instance-validate.gpustack.ai",
        Kind.INSTANCE,
        "/validate-instances",
        False,
        FAIL,
        CREATE_UPDATE,
        Everything(),
        _instance_validate,
    ),
)
NAMES: Final[frozenset[str]] = frozenset(w.name for w in REGISTRY)
"""The names this version registers: what the doctor tells from other vendors' webhooks by."""
BY_PATH: Final[Mapping[str, Webhook]] = {w.path: w for w in REGISTRY}
KVCACHE_INJECT_LABEL: Final = LABEL_INJECT


# ----------------------------------------------------------------------------------------------- the chain


def _labels(obj: JSON) -> Mapping[str, Any]:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    labels = meta.get("labels") if isinstance(meta, dict) else None
    return labels if isinstance(labels, dict) else {}


def webhooks_for(kind: Kind) -> list[Webhook]:
    """The registered webhooks of a kind: mutating first, then validating, each in registry order."""
    own = [w for w in REGISTRY if w.kind is kind]
    return [w for w in own if w.mutating] + [w for w in own if not w.mutating]


def review(kind: Kind, operation: str, obj: JSON, old: JSON | None, ctx: WebhookContext) -> Admission:
    """What the API server's admission chain does to one request: the final object, or the first refusal."""
    if not isinstance(obj, dict):
        return deny(f"the request object is not a {kind.value}")
    current = obj
    warnings: list[str] = []
    changed: list[Path] | None = []
    for w in webhooks_for(kind):
        if not w.selects(operation, current):
            continue
        result = w.rule(operation, current, old if operation == "UPDATE" else None, ctx)
        warnings.extend(result.warnings)
        if not result.allowed:
            return Admission(False, result.message, None, tuple(warnings))
        if w.mutating and result.mutated is not None:
            current = result.mutated
            changed = None if changed is None or result.changed is None else [*changed, *result.changed]
    return allow(current, warnings=warnings, changed=changed)
