"""AdmissionReview v1 in and out: every webhook path, answered from the core's rules and the one patch builder.

Any input gets a well-formed AdmissionReview back. An internal error or an unreadable review denies, with a message,
where the webhook is registered ``failurePolicy: Fail``, and allows where it is registered ``Ignore``.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from gpuctl.core.admission import JSON, Admission, json_patch
from gpuctl.core.webhooks import WebhookContext


class ContextProvider(Protocol):
    """Where the webhooks' context comes from: the operator's cache, or fixed records in tests."""

    def webhook_context(self, namespace: str, obj: Any = None) -> WebhookContext: ...


Rule = Callable[[str, JSON, JSON | None, WebhookContext], Admission]


@dataclass(frozen=True)
class Webhook:
    name: str
    path: str
    mutating: bool
    fail_closed: bool
    rule: Rule
    resource: str
    operations: tuple[str, ...]


def _pod_accelerators(op: str, obj: JSON, old: JSON | None, ctx: WebhookContext) -> Admission:
    from gpuctl.core.requests import admit_pod

    return admit_pod(obj, ctx.instancetypes)


def _pod_kvcache(op: str, obj: JSON, old: JSON | None, ctx: WebhookContext) -> Admission:
    from gpuctl.core.kvcache import admit_kvcache_pod

    return admit_kvcache_pod(obj, ctx.kvcache)


def _pod_kvcache_frozen(op: str, obj: JSON, old: JSON | None, ctx: WebhookContext) -> Admission:
    from gpuctl.core.admission import allow
    from gpuctl.core.kvcache import validate_kvcache_update

    return validate_kvcache_update(old, obj) if old is not None else allow()


def _workload_fit(op: str, obj: JSON, old: JSON | None, ctx: WebhookContext) -> Admission:
    from gpuctl.core.pins import pin_workload

    return pin_workload(obj, old if op == "UPDATE" else None, ctx.pins)


def _instancetype_default(op: str, obj: JSON, old: JSON | None, ctx: WebhookContext) -> Admission:
    from gpuctl.core.instancetype_rules import instancetype_mutating_webhook

    return instancetype_mutating_webhook(op, obj, cpu_aware=ctx.cpu_aware, flavors=ctx.flavors)


def _instancetype_validate(op: str, obj: JSON, old: JSON | None, ctx: WebhookContext) -> Admission:
    from gpuctl.core.instancetype_rules import instancetype_validating_webhook

    return instancetype_validating_webhook(op, obj, old)


def _instance_type(obj: JSON, ctx: WebhookContext) -> Any:
    spec = obj.get("spec") if isinstance(obj, dict) else None
    name = spec.get("type") if isinstance(spec, dict) else None
    return ctx.instancetype(name) if isinstance(name, str) else None


def _instance_default(op: str, obj: JSON, old: JSON | None, ctx: WebhookContext) -> Admission:
    from gpuctl.core.instances import instance_mutating_webhook

    return instance_mutating_webhook(op, obj, old, _instance_type(obj, ctx), overcommit=ctx.overcommit)


def _instance_validate(op: str, obj: JSON, old: JSON | None, ctx: WebhookContext) -> Admission:
    from gpuctl.core.instances import instance_validating_webhook

    it = _instance_type(obj, ctx)
    spec = obj.get("spec") if isinstance(obj, dict) else None
    name = spec.get("type") if isinstance(spec, dict) else None
    return instance_validating_webhook(
        op, obj, old, it, stop_policy=ctx.stop_policy(name if isinstance(name, str) else "")
    )


WEBHOOKS: tuple[Webhook, ...] = (
    Webhook(
        "pod-accelerators.gpustack.ai", "/mutate-pod-accelerators", True, True, _pod_accelerators, "pods", ("CREATE",)
    ),
    Webhook("pod-kvcache.gpustack.ai", "/mutate-pod-kvcache", True, True, _pod_kvcache, "pods", ("CREATE",)),
    Webhook(
        "pod-kvcache-frozen.gpustack.ai",
        "/validate-pod-kvcache",
        False,
        False,
        _pod_kvcache_frozen,
        "pods",
        ("UPDATE",),
    ),
    Webhook(
        "workload-fit.gpustack.ai", "/mutate-workloads", True, False, _workload_fit, "workloads", ("CREATE", "UPDATE")
    ),
    Webhook(
        "instancetype-default.gpustack.ai",
        "/mutate-instancetypes",
        True,
        True,
        _instancetype_default,
        "instancetypes",
        ("CREATE", "UPDATE"),
    ),
    Webhook(
        "instancetype-validate.gpustack.ai",
        "/validate-instancetypes",
        False,
        True,
        _instancetype_validate,
        "instancetypes",
        ("CREATE", "UPDATE"),
    ),
    Webhook(
        "instance-default.gpustack.ai",
        "/mutate-instances",
        True,
        True,
        _instance_default,
        "instances",
        ("CREATE", "UPDATE"),
    ),
    Webhook(
        "instance-validate.gpustack.ai",
        "/validate-instances",
        False,
        True,
        _instance_validate,
        "instances",
        ("CREATE", "UPDATE"),
    ),
)
BY_PATH: Mapping[str, Webhook] = {w.path: w for w in WEBHOOKS}


def _review(
    uid: str, allowed: bool, message: str | None = None, patch: list[JSON] | None = None, warnings: tuple[str, ...] = ()
) -> JSON:
    response: JSON = {"uid": uid, "allowed": allowed}
    if message and not allowed:
        response["status"] = {"code": 403, "reason": "Forbidden", "message": message}
    elif message:
        response["status"] = {"message": message}
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(patch, separators=(",", ":")).encode()).decode()
    if warnings:
        response["warnings"] = [w[:1000] for w in warnings]
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}


@dataclass(frozen=True, slots=True)
class Answer:
    """A review's answer and what metrics record of it."""

    review: JSON
    allowed: bool
    mutated: bool


def answer(webhook: Webhook, body: bytes, contexts: ContextProvider) -> Answer:
    """The AdmissionReview answering ``body`` for one webhook; never raises."""
    try:
        review = json.loads(body)
        request = review["request"]
        uid = str(request["uid"])
        if not isinstance(request, dict):
            raise TypeError("request is not an object")
    except Exception as exc:  # noqa: BLE001 - any input gets an answer
        allowed = not webhook.fail_closed
        reason = f"{type(exc).__name__}: {str(exc)[:200]}"
        return Answer(
            _review("", allowed, None if allowed else f"malformed AdmissionReview ({reason})"), allowed, False
        )
    try:
        operation = str(request.get("operation") or "")
        obj = request.get("object")
        old = request.get("oldObject")
        namespace = str(request.get("namespace") or "")
        if operation not in webhook.operations:
            return Answer(_review(uid, True), True, False)
        if not isinstance(obj, dict):
            allowed = not webhook.fail_closed
            return Answer(_review(uid, allowed, None if allowed else "request.object is not an object"), allowed, False)
        ctx = contexts.webhook_context(namespace, obj)
        result = webhook.rule(operation, obj, old if isinstance(old, dict) else None, ctx)
        patch = json_patch(obj, result.mutated) if webhook.mutating and result.allowed else []
        return Answer(_review(uid, result.allowed, result.message, patch, result.warnings), result.allowed, bool(patch))
    except Exception as exc:  # noqa: BLE001 - any input gets an answer
        allowed = not webhook.fail_closed
        message = f"internal error in {webhook.name}: {type(exc).__name__}: {str(exc)[:300]}"
        return Answer(
            _review(uid, allowed, None if allowed else message, warnings=(message,) if allowed else ()), allowed, False
        )
