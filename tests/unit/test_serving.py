"""Whether the operator serves its webhooks and check, and what the API server does when it does not."""

from __future__ import annotations

from typing import Any

from gpuctl.core import naming
from gpuctl.core.doctor.records import LeaseRecord, parse_webhook_configuration
from gpuctl.core.queueing import epoch_seconds
from gpuctl.core.serving import OperatorServing, selector_matches, unserved_check, unserved_review
from gpuctl.operator.manifests import webhook_configurations

NOW = epoch_seconds("2026-12-01T12:00:00Z") or 0.0
QUEUED = {naming.LABEL_QUEUE_NAME: "gpustack-fnv64-c4680bb149644f1c"}


def entries(policy: str | None = None) -> tuple[Any, ...]:
    configs = webhook_configurations(ca_bundle="", url="https://127.0.0.1:9443")
    if policy is not None:
        for c in configs:
            for w in c["webhooks"]:
                w["failurePolicy"] = policy
    return tuple(e for c in configs for e in parse_webhook_configuration(c))


def lease(renewed: str, duration: int = 15) -> LeaseRecord:
    return LeaseRecord(naming.OPERATOR_NAMESPACE, naming.OPERATOR_NAME, "op-1", renewed, renewed, duration)


def test_label_selectors_match_as_the_api_server_matches_them() -> None:
    exists = {"matchExpressions": [{"key": "q", "operator": "Exists"}]}
    assert selector_matches({}, {}) and selector_matches(exists, {"q": ""}) and not selector_matches(exists, {})
    assert not selector_matches({"matchLabels": {"a": "1"}}, {"a": "2"})
    assert selector_matches({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1", "2"]}]}, {"a": "2"})
    assert not selector_matches({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["2"]}]}, {"a": "2"})
    assert selector_matches({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {"b": "1"})


def test_a_lapsed_lease_makes_a_fail_closed_pod_webhook_refuse_a_queued_pod() -> None:
    down = OperatorServing(entries(), lease("2026-12-01T11:59:00Z"), NOW, deployed=False)
    assert down.down_for() == 45.0  # renewed 60 s ago, lapses after 15 s
    got = unserved_review(down, "pods", QUEUED, "the Pod")
    assert got is not None and got.refused
    assert got.summary.startswith("the API server will refuse the Pod: webhook pod-accelerators.gpustack.ai fails")
    assert any("last renewed 60 s ago and lapses after 15 s" in e for e in got.evidence)
    assert "runs outside the cluster" in got.hint
    assert "writes no verdict" in (unserved_check(down) or "")


def test_fail_open_lets_it_through_and_what_no_webhook_reviews_is_untouched() -> None:
    down = OperatorServing(entries("Ignore"), lease("2026-12-01T11:59:00Z"), NOW)
    got = unserved_review(down, "pods", QUEUED, "the Pod")
    assert got is not None and not got.refused and "through unreviewed" in got.summary
    # A Pod without the queue label is not selected: nothing to say.
    assert (
        unserved_review(OperatorServing(entries(), lease("2026-12-01T11:59:00Z"), NOW), "pods", {}, "the Pod") is None
    )


def test_a_current_lease_or_none_claims_nothing() -> None:
    assert unserved_review(OperatorServing(entries(), lease("2026-12-01T11:59:50Z"), NOW), "pods", QUEUED, "x") is None
    assert unserved_review(OperatorServing(entries(), None, NOW), "pods", QUEUED, "x") is None
    assert unserved_check(OperatorServing(entries(), None, NOW)) is None and unserved_check(None) is None


def test_whereabouts_name_a_deployment_a_process_or_nothing() -> None:
    from gpuctl.core.doctor.records import DeploymentRecord
    from gpuctl.core.serving import whereabouts, whereabouts_text

    current = lease("2026-12-01T11:59:55Z")
    deployed = whereabouts(
        DeploymentRecord(naming.OPERATOR_NAMESPACE, naming.OPERATOR_NAME, 2, 2, (), "0.9.0"), current, entries(), NOW
    )
    assert deployed["runs"] == "deployment" and deployed["version"] == "0.9.0"
    assert whereabouts_text(deployed).startswith("operator 0.9.0 (deployment gpuctl-system/gpuctl-operator, 2/2 ready")
    process = whereabouts(None, lease("2026-12-01T11:58:00Z"), entries(), NOW)
    assert process["runs"] == "process" and process["webhooks"] == ["https://127.0.0.1:9443"]
    assert "lapsed: no replica serves" in whereabouts_text(process)
    assert whereabouts_text(whereabouts(None, None, (), NOW)).startswith("operator: not found")


def test_a_probed_endpoint_decides_over_the_lease() -> None:
    """Every replica serves the webhooks, leader or not, and an operator run without leader election keeps no Lease:
    an endpoint that answers is served whatever the Lease says, one that does not is down even with a current one."""
    from dataclasses import replace

    lapsed = OperatorServing(entries(), lease("2026-12-01T11:58:00Z"), NOW)
    assert unserved_review(replace(lapsed, endpoint=""), "pods", QUEUED, "the Pod") is None
    hung = replace(OperatorServing(entries(), lease("2026-12-01T11:59:59Z"), NOW), endpoint="no answer within 2 s")
    got = unserved_review(hung, "pods", QUEUED, "the Pod")
    assert got is not None and got.refused and any("does not answer (no answer within 2 s)" in e for e in got.evidence)
    assert unserved_check(replace(lapsed, endpoint="")) is None
