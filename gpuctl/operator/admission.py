"""AdmissionReview v1 in and out: each registered webhook answered from the core's rules and the one patch builder.

Any input gets a well-formed AdmissionReview back, carrying the request's uid whenever it can be read (even from a
review that cannot be parsed or is too large to read). An internal error, an unreadable review or a missed deadline
denies, with a message, where the webhook is registered ``failurePolicy: Fail``, and allows where it is ``Ignore``.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass
from typing import Any, Protocol

from gpuctl.core.admission import JSON, json_patch
from gpuctl.core.webhooks import BY_PATH, REGISTRY, Webhook, WebhookContext

__all__ = ["BY_PATH", "REGISTRY", "Answer", "ContextProvider", "answer", "read_uid", "refusal"]


class ContextProvider(Protocol):
    """Where the webhooks' context comes from: the operator's cache, or fixed records in tests."""

    def webhook_context(self, namespace: str, obj: Any = None) -> WebhookContext: ...


_UID = re.compile(rb'"uid"\s*:\s*"((?:[^"\\]|\\.){1,256})"')
UID_SCAN = 64 * 1024
"""How far into a review its uid is looked for when the review cannot be parsed (the API server writes it first)."""


def read_uid(head: bytes) -> str:
    """The request uid from the start of a review that cannot be parsed, or ``""``."""
    match = _UID.search(head[:UID_SCAN])
    if match is None:
        return ""
    try:
        uid = json.loads(b'"' + match.group(1) + b'"')
    except ValueError:
        return ""
    return uid if isinstance(uid, str) else ""


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
        response["warnings"] = [w[:1000] for w in warnings[:20]]
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}


@dataclass(frozen=True, slots=True)
class Answer:
    """A review's answer and what metrics record of it."""

    review: JSON
    allowed: bool
    mutated: bool
    outcome: str = "answered"
    """``answered``, or why the rule did not run: ``malformed``, ``too-large``, ``deadline``, ``busy``, ``error``."""

    def body(self) -> bytes:
        return json.dumps(self.review, separators=(",", ":")).encode()


def refusal(webhook: Webhook, uid: str, reason: str, outcome: str) -> Answer:
    """The answer by failure policy when the rule cannot run: deny with the reason (Fail), or allow with it as a
    warning (Ignore)."""
    allowed = not webhook.fail_closed
    message = f"{webhook.name}: {reason}"
    return Answer(
        _review(uid, allowed, None if allowed else message, warnings=(message,) if allowed else ()),
        allowed,
        False,
        outcome,
    )


def answer(webhook: Webhook, body: bytes, contexts: ContextProvider) -> Answer:
    """The AdmissionReview answering ``body`` for one webhook; never raises."""
    try:
        review = json.loads(body)
        request = review["request"]
        if not isinstance(request, dict):
            raise TypeError("request is not an object")
        uid = str(request["uid"])
    except Exception as exc:  # noqa: BLE001 - any input gets an answer
        return refusal(
            webhook, read_uid(body), f"malformed AdmissionReview ({type(exc).__name__}: {str(exc)[:200]})", "malformed"
        )
    try:
        operation = str(request.get("operation") or "")
        obj = request.get("object")
        old = request.get("oldObject")
        namespace = str(request.get("namespace") or "")
        if operation not in webhook.operations:
            return Answer(_review(uid, True), True, False)
        if not isinstance(obj, dict):
            return refusal(webhook, uid, "request.object is not an object", "malformed")
        ctx = contexts.webhook_context(namespace, obj)
        result = webhook.rule(operation, obj, old if isinstance(old, dict) else None, ctx)
        patch = json_patch(obj, result.mutated, result.changed) if webhook.mutating and result.allowed else []
        return Answer(_review(uid, result.allowed, result.message, patch, result.warnings), result.allowed, bool(patch))
    except Exception as exc:  # noqa: BLE001 - any input gets an answer
        return refusal(webhook, uid, f"internal error: {type(exc).__name__}: {str(exc)[:300]}", "error")
