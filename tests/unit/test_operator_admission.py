"""The AdmissionReview envelope: every shape the API server would never send is refused by failure policy — denied
by a ``Fail`` webhook, never ``allowed: true`` — with a fixed message naming the field, never quoting the request."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpuctl.core.instancetypes import parse_instancetype
from gpuctl.core.webhooks import BY_PATH, WebhookContext
from gpuctl.operator.admission import answer
from testbed.factories import instancetype
from testbed.request_examples import EXAMPLES

POD_WEBHOOK = BY_PATH["/mutate-pod-accelerators"]
"""Registered ``failurePolicy: Fail``, for Pod CREATE."""
IGNORED = BY_PATH["/mutate-workloads"]
"""Registered ``failurePolicy: Ignore``."""
SECRET = "hunter2-in-the-request"


class Fixed:
    def webhook_context(self, namespace: str, obj: Any = None) -> WebhookContext:
        return WebhookContext(instancetypes=(parse_instancetype(instancetype()),))


def good_pod() -> dict[str, Any]:
    """A Pod the webhook folds (so a judged review shows its patch)."""
    result: dict[str, Any] = json.loads(json.dumps(next(e for e in EXAMPLES if e.id == "rule2-accept").pod))
    return result


def with_request(**request: Any) -> bytes:
    base: dict[str, Any] = {"uid": "u-1", "operation": "CREATE", "object": good_pod()}
    base.update(request)
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": base}).encode()


def without(field: str) -> bytes:
    review = json.loads(with_request())
    del review["request"][field]
    return json.dumps(review).encode()


MALFORMED: list[tuple[str, bytes, str]] = [
    ("uid missing", without("uid"), "request.uid"),
    ("uid null", with_request(uid=None), "request.uid"),
    ("uid a number", with_request(uid=5), "request.uid"),
    ("uid a list", with_request(uid=["u"]), "request.uid"),
    ("uid empty", with_request(uid=""), "request.uid"),
    ("operation missing", without("operation"), "request.operation"),
    ("operation null", with_request(operation=None), "request.operation"),
    ("operation a number", with_request(operation=1), "request.operation"),
    ("operation unknown", with_request(operation=SECRET), "request.operation"),
    ("object missing on CREATE", without("object"), "request.object"),
    ("object a string", with_request(object=SECRET), "request.object"),
    ("object a list", with_request(object=[good_pod()]), "request.object"),
    ("oldObject missing on UPDATE", with_request(operation="UPDATE"), "request.oldObject"),
    ("oldObject a string", with_request(operation="UPDATE", oldObject=SECRET), "request.oldObject"),
    ("namespace a number", with_request(namespace=7), "request.namespace"),
    ("name an object", with_request(name={"x": SECRET}), "request.name"),
    ("kind a string", with_request(kind=SECRET), "request.kind"),
    ("resource a list", with_request(resource=[]), "request.resource"),
    ("userInfo a string", with_request(userInfo=SECRET), "request.userInfo"),
    ("dryRun a string", with_request(dryRun="true"), "request.dryRun"),
    ("request a list", json.dumps({"request": [SECRET]}).encode(), "request must be an object"),
    ("request missing", b'{"apiVersion": "admission.k8s.io/v1"}', "request must be an object"),
    ("review a list", json.dumps([SECRET]).encode(), "not a JSON object"),
    ("review of another kind", json.dumps({"kind": "Pod", "request": {}}).encode(), "kind must be AdmissionReview"),
    ("not JSON", b"{" + SECRET.encode(), "not valid JSON"),
    ("not UTF-8", b'{"request": "\xff\xfe"}', "not valid JSON"),
    ("nested too deep", b"[" * 100_000, "nested too deep"),
]


@pytest.mark.parametrize(("body", "field"), [(b, f) for _, b, f in MALFORMED], ids=[n for n, _, _ in MALFORMED])
def test_a_malformed_review_on_a_fail_webhook_is_denied_naming_the_field(body: bytes, field: str) -> None:
    result = answer(POD_WEBHOOK, body, Fixed())
    response = result.review["response"]
    assert response["allowed"] is False and result.outcome == "malformed"
    message = response["status"]["message"]
    assert message.startswith("pod-accelerators.gpustack.ai: malformed AdmissionReview") and field in message
    assert SECRET not in json.dumps(result.review)
    assert response["uid"] in ("", "u-1")


@pytest.mark.parametrize("body", [b for _, b, _ in MALFORMED[:3]], ids=[n for n, _, _ in MALFORMED[:3]])
def test_a_malformed_review_on_an_ignore_webhook_is_allowed_with_a_warning(body: bytes) -> None:
    result = answer(IGNORED, body, Fixed())
    response = result.review["response"]
    assert response["allowed"] is True and "request.uid" in response["warnings"][0] and "patch" not in response


def test_well_formed_reviews_are_still_judged() -> None:
    for body in (with_request(), with_request(namespace="team-a", dryRun=False, kind={"kind": "Pod"})):
        response = answer(POD_WEBHOOK, body, Fixed()).review["response"]
        assert response["uid"] == "u-1" and response["allowed"] is True and response["patchType"] == "JSONPatch"
    # A DELETE carries no object and is none of this webhook's business: allowed as the API server would route it.
    response = answer(POD_WEBHOOK, with_request(operation="DELETE", object=None, oldObject=good_pod()), Fixed())
    assert response.review["response"]["allowed"] is True and response.outcome == "answered"


def test_an_internal_error_is_a_fixed_answer_and_a_detailed_log_line() -> None:
    class Broken:
        def webhook_context(self, namespace: str, obj: Any = None) -> WebhookContext:
            raise RuntimeError(f"cannot read {SECRET}")

    result = answer(POD_WEBHOOK, with_request(), Broken())
    response = result.review["response"]
    assert response["allowed"] is False and result.outcome == "error"
    assert response["status"]["message"] == (
        "pod-accelerators.gpustack.ai: internal error (RuntimeError); the operator's log has the details"
    )
    assert SECRET in result.detail and SECRET not in result.body().decode()


def test_a_rule_that_fails_on_the_request_answers_without_quoting_it() -> None:
    import dataclasses

    from gpuctl.core.admission import fail_closed, fail_open

    def quoting(op: str, obj: Any, old: Any, ctx: Any) -> Any:
        return int(obj["metadata"]["name"])  # ValueError: invalid literal for int() with base 10: '<the name>'

    body = with_request(object={**good_pod(), "metadata": {"name": SECRET}})
    for wrap, allowed in ((fail_closed, False), (fail_open, True)):
        webhook = dataclasses.replace(POD_WEBHOOK, rule=wrap(quoting))
        result = answer(webhook, body, Fixed())
        assert result.allowed is allowed and result.outcome == "error"
        assert SECRET not in result.body().decode() and "ValueError" in result.body().decode()
        assert SECRET in result.detail  # the operator's log line has it
