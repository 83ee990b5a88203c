"""AdmissionReview v1 in and out: each registered webhook answered from the core's rules and the one patch builder.

Any input gets a well-formed AdmissionReview back, carrying the request's uid whenever it can be read (even from a
review that cannot be parsed or is too large to read). An internal error, an unreadable or malformed review (its
``uid`` or ``operation`` missing, a field of the wrong type) or a missed deadline denies, with a message, where the
webhook is registered ``failurePolicy: Fail``, and allows where it is ``Ignore``. The message is fixed text or names a
field: an answer never quotes the request's bytes.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass
from typing import Any, Protocol

from gpuctl.core.admission import JSON, json_patch
from gpuctl.core.webhooks import BY_PATH, REGISTRY, Webhook, WebhookContext

__all__ = [
    "BY_PATH",
    "REGISTRY",
    "AdmissionRequest",
    "Answer",
    "ContextProvider",
    "MalformedReview",
    "answer",
    "parse_request",
    "read_uid",
    "refusal",
]


class ContextProvider(Protocol):
    """Where the webhooks' context comes from: the operator's cache, or fixed records in tests."""

    def webhook_context(self, namespace: str, obj: Any = None) -> WebhookContext: ...


_UID = re.compile(rb'"uid"\s*:\s*"((?:[^"\\]|\\.){1,256})"')
UID_SCAN = 64 * 1024
"""How far into a review its uid is looked for when the review cannot be parsed (the API server writes it first)."""


def read_uid(head: bytes | bytearray) -> str:
    """The request uid from the start of a review that cannot be parsed, or ``""``."""
    match = _UID.search(head[:UID_SCAN])
    if match is None:
        return ""
    try:
        uid = json.loads(b'"' + bytes(match.group(1)) + b'"')
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
    detail: str = ""
    """What the operator's log says of a review that was not answered by its rule (never sent back)."""

    def body(self) -> bytes:
        return json.dumps(self.review, separators=(",", ":")).encode()


def refusal(webhook: Webhook, uid: str, reason: str, outcome: str, detail: str = "") -> Answer:
    """The answer by failure policy when the rule cannot run: deny with the reason (Fail), or allow with it as a
    warning (Ignore). ``reason`` is sent back, so it is fixed text; ``detail`` goes to the log only."""
    allowed = not webhook.fail_closed
    message = f"{webhook.name}: {reason}"
    return Answer(
        _review(uid, allowed, None if allowed else message, warnings=(message,) if allowed else ()),
        allowed,
        False,
        outcome,
        detail or reason,
    )


OPERATIONS = frozenset({"CREATE", "UPDATE", "DELETE", "CONNECT"})


class MalformedReview(ValueError):
    """A review the API server would never send: one of its fields is missing or of the wrong type. Its message names
    the field and never quotes the request."""


@dataclass(frozen=True, slots=True)
class AdmissionRequest:
    """The parts of an AdmissionReview v1 request the webhooks read, checked once."""

    uid: str
    operation: str
    namespace: str
    object: dict[str, Any] | None
    old_object: dict[str, Any] | None


_TYPED: tuple[tuple[str, type, str], ...] = (
    ("name", str, "a string"),
    ("namespace", str, "a string"),
    ("kind", dict, "an object"),
    ("resource", dict, "an object"),
    ("requestKind", dict, "an object"),
    ("requestResource", dict, "an object"),
    ("userInfo", dict, "an object"),
    ("dryRun", bool, "a boolean"),
    ("object", dict, "an object"),
    ("oldObject", dict, "an object"),
)
"""Fields of a request that, when present and not null, must have their type."""


def parse_request(review: Any) -> AdmissionRequest:
    """The request of a decoded AdmissionReview, or :class:`MalformedReview` naming the first field that is wrong.

    ``uid`` and ``operation`` are required; CREATE and UPDATE need ``object``, UPDATE also ``oldObject``; every other
    field the API server sends is checked for its type when present."""
    if not isinstance(review, dict):
        raise MalformedReview("the review is not a JSON object")
    for field, expected in (("apiVersion", "admission.k8s.io/v1"), ("kind", "AdmissionReview")):
        if field in review and review[field] != expected:
            raise MalformedReview(f"{field} must be {expected}")
    request = review.get("request")
    if not isinstance(request, dict):
        raise MalformedReview("request must be an object")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise MalformedReview("request.uid must be a non-empty string")
    operation = request.get("operation")
    if not isinstance(operation, str) or operation not in OPERATIONS:
        raise MalformedReview("request.operation must be one of CREATE, UPDATE, DELETE, CONNECT")
    for field, kind, what in _TYPED:
        value = request.get(field)
        if value is not None and type(value) is not kind:
            raise MalformedReview(f"request.{field} must be {what}")
    obj, old = request.get("object"), request.get("oldObject")
    if operation in ("CREATE", "UPDATE") and obj is None:
        raise MalformedReview(f"request.object is required for {operation}")
    if operation == "UPDATE" and old is None:
        raise MalformedReview("request.oldObject is required for UPDATE")
    return AdmissionRequest(uid, operation, request.get("namespace") or "", obj, old)


def answer(webhook: Webhook, body: bytes | bytearray, contexts: ContextProvider) -> Answer:
    """The AdmissionReview answering ``body`` for one webhook; never raises.

    Messages are fixed or name a field: an answer never quotes the request's bytes."""
    try:
        request = parse_request(json.loads(body))
    except MalformedReview as exc:
        return refusal(webhook, read_uid(body), f"malformed AdmissionReview: {exc}", "malformed")
    except RecursionError:
        return refusal(webhook, read_uid(body), "malformed AdmissionReview: nested too deep", "malformed")
    except ValueError:  # not JSON, or not UTF-8
        return refusal(webhook, read_uid(body), "malformed AdmissionReview: not valid JSON", "malformed")
    uid = request.uid
    try:
        if request.operation not in webhook.operations:
            return Answer(_review(uid, True), True, False)
        obj = request.object
        assert obj is not None  # CREATE and UPDATE carry one
        ctx = contexts.webhook_context(request.namespace, obj)
        result = webhook.rule(request.operation, obj, request.old_object, ctx)
        patch = json_patch(obj, result.mutated, result.changed) if webhook.mutating and result.allowed else []
        review = _review(uid, result.allowed, result.message, patch, result.warnings)
        if result.error is not None:  # the rule failed: answered by its failure policy, the detail logged
            return Answer(review, result.allowed, bool(patch), "error", f"{result.message}: {result.error}")
        return Answer(review, result.allowed, bool(patch))
    except Exception as exc:  # noqa: BLE001 - any input gets an answer
        return refusal(
            webhook,
            uid,
            f"internal error ({type(exc).__name__}); the operator's log has the details",
            "error",
            f"internal error: {type(exc).__name__}: {exc}",
        )
