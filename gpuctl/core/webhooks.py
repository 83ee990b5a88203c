"""Every admission webhook of the operator, chained as the API server chains them for one request.

The API server runs the mutating webhooks, then the validating ones on the mutated object. ``review`` does the same
for one kind, so a dry-run shows what the cluster would store (or why it refuses), and the operator serves each
webhook on its own path from the same functions.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from gpuctl.core import naming
from gpuctl.core.admission import JSON, Admission, allow, deny
from gpuctl.core.instances import instance_mutating_webhook, instance_validating_webhook
from gpuctl.core.instancetype_rules import instancetype_mutating_webhook, instancetype_validating_webhook
from gpuctl.core.instancetypes import InstanceType
from gpuctl.core.kvcache import KVCacheContext, admit_kvcache_pod, validate_kvcache_update
from gpuctl.core.pins import PinContext, pin_workload
from gpuctl.core.requests import admit_pod
from gpuctl.core.workloads import ResourceFlavor


class Kind(StrEnum):
    POD = "pod"
    WORKLOAD = "workload"
    INSTANCETYPE = "instancetype"
    INSTANCE = "instance"


KVCACHE_INJECT_LABEL = "kvcache.gpustack.ai/inject"


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


def _labels(obj: JSON) -> dict[str, str]:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    labels = meta.get("labels") if isinstance(meta, dict) else None
    return labels if isinstance(labels, dict) else {}


def chain(obj: JSON, steps: Sequence[Callable[[JSON], Admission]]) -> Admission:
    """Run webhooks in order, each on the previous one's result; the first denial ends the chain."""
    current = obj
    warnings: list[str] = []
    for step in steps:
        result = step(current)
        warnings.extend(result.warnings)
        if not result.allowed:
            return Admission(False, result.message, None, tuple(warnings))
        if result.mutated is not None:
            current = result.mutated
    return allow(current, warnings=warnings)


def pod_steps(operation: str, old: JSON | None, ctx: WebhookContext) -> list[Callable[[JSON], Admission]]:
    """The Pod webhooks that select this request: gate 1 (queue label, CREATE) and the KV-cache entries."""
    steps: list[Callable[[JSON], Admission]] = []
    if operation == "CREATE":
        steps.append(lambda p: admit_pod(p, ctx.instancetypes) if naming.LABEL_QUEUE_NAME in _labels(p) else allow(p))
        steps.append(
            lambda p: admit_kvcache_pod(p, ctx.kvcache) if _labels(p).get(KVCACHE_INJECT_LABEL) == "true" else allow(p)
        )
    elif operation == "UPDATE" and old is not None:
        steps.append(lambda p: validate_kvcache_update(old, p))
    return steps


def review(kind: Kind, operation: str, obj: JSON, old: JSON | None, ctx: WebhookContext) -> Admission:
    """What the API server's admission chain does to one request: the final object, or the first refusal."""
    if not isinstance(obj, dict):
        return deny(f"the request object is not a {kind.value}")
    if kind is Kind.POD:
        return chain(obj, pod_steps(operation, old, ctx))
    if kind is Kind.WORKLOAD:
        return chain(obj, [lambda w: pin_workload(w, old if operation == "UPDATE" else None, ctx.pins)])
    if kind is Kind.INSTANCETYPE:
        return chain(
            obj,
            [
                lambda t: instancetype_mutating_webhook(operation, t, cpu_aware=ctx.cpu_aware, flavors=ctx.flavors),
                lambda t: _validated(instancetype_validating_webhook(operation, t, old), t),
            ],
        )
    spec = obj.get("spec")
    type_name = spec.get("type") if isinstance(spec, dict) else None
    it = ctx.instancetype(type_name) if isinstance(type_name, str) else None
    return chain(
        obj,
        [
            lambda i: instance_mutating_webhook(operation, i, old, it, overcommit=ctx.overcommit),
            lambda i: _validated(
                instance_validating_webhook(
                    operation, i, old, it, stop_policy=ctx.stop_policy(type_name if isinstance(type_name, str) else "")
                ),
                i,
            ),
        ],
    )


def _validated(result: Admission, obj: JSON) -> Admission:
    """A validating webhook's answer never changes the object."""
    return Admission(result.allowed, result.message, obj if result.allowed else None, result.warnings)
