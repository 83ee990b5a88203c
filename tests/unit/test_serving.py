"""Whether the operator serves its webhooks and check, and what the API server does when it does not."""

from __future__ import annotations

from dataclasses import replace
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


# ----------------------------------------------------------------------------------------------- which webhook is called


def with_selectors(namespace_selector: Any = None, object_selector: Any = None, policy: str | None = None) -> Any:
    """gpuctl's configurations with every Pod webhook's selectors replaced (and its failurePolicy)."""
    configs = webhook_configurations(ca_bundle="", url="https://127.0.0.1:9443")
    for c in configs:
        for w in c["webhooks"]:
            if "pods" not in w["rules"][0]["resources"]:
                continue
            if namespace_selector is not None:
                w["namespaceSelector"] = namespace_selector
            if object_selector is not None:
                w["objectSelector"] = object_selector
            if policy is not None:
                w["failurePolicy"] = policy
    return tuple(e for c in configs for e in parse_webhook_configuration(c))


LAPSED = "2026-12-01T11:59:00Z"


def test_a_selector_is_decided_only_on_labels_known() -> None:
    from gpuctl.core.serving import selector_decides

    gpu = {"matchLabels": {"gpu": "on"}}
    assert selector_decides(gpu, {"gpu": "on"}) is True and selector_decides(gpu, {}) is False
    # Only the name label is known of a Namespace whose labels were not read: a selector on another label is open...
    by_name = {"kubernetes.io/metadata.name": "team-a"}
    assert selector_decides(gpu, by_name, known=by_name) is None
    # ... unless a requirement on what is known already fails it.
    not_team_a = {
        "matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["team-a"]}]
    }
    assert selector_decides({**gpu, **not_team_a}, by_name, known=by_name) is False
    assert selector_decides({}, {}, known=()) is True


def test_no_configuration_registered_lets_the_pod_through_unreviewed_even_with_the_operator_down() -> None:
    for current in (lease("2026-12-01T11:59:55Z"), lease(LAPSED)):
        bare = OperatorServing((), current, NOW, registered=True)
        got = unserved_review(bare, "pods", QUEUED, "the Pod", namespace="team-a")
        assert got is not None and not got.refused and got.known
        assert got.summary == (
            "the API server will let the Pod through unreviewed: webhook pod-accelerators.gpustack.ai is not called: no "
            "webhook configuration in the cluster registers it (no fold, no pin, no request rule checked)"
        )
        assert "gpuctl doctor" in got.hint
    # Configurations that may be partial (a snapshot's): nothing is said of one missing from them.
    assert unserved_review(OperatorServing((), lease(LAPSED), NOW), "pods", QUEUED, "the Pod") is None
    # A Pod no webhook of this version selects (no queue label) is nobody's to review.
    assert unserved_review(OperatorServing((), lease(LAPSED), NOW, registered=True), "pods", {}, "the Pod") is None


def test_a_webhook_whose_selectors_miss_the_pod_is_not_called_so_nothing_refuses_it() -> None:
    elsewhere = {"matchLabels": {"gpu": "on"}}
    namespaces = {"team-a": {"gpu": "off"}}
    # The operator is down and the webhook fails closed, but the API server does not call it for this Namespace.
    down = OperatorServing(with_selectors(namespace_selector=elsewhere), lease(LAPSED), NOW, namespaces=namespaces)
    assert unserved_review(down, "pods", QUEUED, "the Pod", namespace="team-a") is None
    got = unserved_review(replace(down, registered=True), "pods", QUEUED, "the Pod", namespace="team-a")
    assert got is not None and not got.refused
    assert 'its namespaceSelector {"matchLabels":{"gpu":"on"}} does not select Namespace team-a' in got.summary
    # In a Namespace it selects, the same webhook refuses the Pod.
    selected = replace(down, namespaces={"team-a": {"gpu": "on"}})
    refused = unserved_review(selected, "pods", QUEUED, "the Pod", namespace="team-a")
    assert refused is not None and refused.refused and refused.known
    # An objectSelector that does not select the Pod's labels: not called either.
    other = OperatorServing(
        with_selectors(object_selector={"matchLabels": {"tier": "gpu"}}), lease(LAPSED), NOW, registered=True
    )
    missed = unserved_review(other, "pods", QUEUED, "the Pod", namespace="team-a")
    assert missed is not None and not missed.refused
    assert 'its objectSelector {"matchLabels":{"tier":"gpu"}} does not select' in missed.summary


def test_rules_are_matched_on_group_version_resource_and_operation() -> None:
    from gpuctl.core.doctor.records import Rule
    from gpuctl.core.serving import called

    [pods] = [e for e in entries() if e.name == "pod-accelerators.gpustack.ai"]
    assert called(pods, "pods", "CREATE", QUEUED) == (True, "")
    assert called(pods, "pods", "UPDATE", QUEUED) == (False, "its rules do not cover UPDATE of pods")
    apps = replace(pods, rules=(Rule(("CREATE",), ("apps",), ("v1",), ("pods",)),))
    assert called(apps, "pods", "CREATE", QUEUED)[0] is False
    wildcard = replace(pods, rules=(Rule(("*",), ("*",), ("*",), ("*/*",)),))
    assert called(wildcard, "pods", "CREATE", QUEUED) == (True, "")
    cluster_scoped = replace(pods, rules=(Rule(("CREATE",), ("",), ("v1",), ("pods",), "Cluster"),))
    assert called(cluster_scoped, "pods", "CREATE", QUEUED)[0] is False


def test_a_namespace_selector_on_labels_not_read_leaves_the_refusal_unknown() -> None:
    down = OperatorServing(with_selectors(namespace_selector={"matchLabels": {"gpu": "on"}}), lease(LAPSED), NOW)
    got = unserved_review(down, "pods", QUEUED, "the Pod", namespace="team-a")
    assert got is not None and got.refused and not got.known
    assert got.summary.startswith(
        "the API server will refuse the Pod if webhook pod-accelerators.gpustack.ai is called for it (its "
        'namespaceSelector {"matchLabels":{"gpu":"on"}} selects Namespace team-a (whose labels could not be read))'
    )
    # A selector on the name label alone is decided without reading the Namespace.
    by_name = {
        "matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]}]
    }
    named = OperatorServing(with_selectors(namespace_selector=by_name), lease(LAPSED), NOW)
    sure = unserved_review(named, "pods", QUEUED, "the Pod", namespace="team-a")
    assert sure is not None and sure.refused and sure.known
    # Failing open, the Pod goes through unreviewed whether or not the webhook is called.
    open_ = OperatorServing(with_selectors({"matchLabels": {"gpu": "on"}}, policy="Ignore"), lease(LAPSED), NOW)
    through = unserved_review(open_, "pods", QUEUED, "the Pod", namespace="team-a")
    assert through is not None and not through.refused and through.known


def test_a_lapsed_lease_while_the_endpoint_answers_is_said_of_the_check_only() -> None:
    answering = OperatorServing(entries(), lease(LAPSED), NOW, endpoint="")
    assert unserved_check(answering) is None
    assert "lapsed 45 s ago" in (answering.leaderless() or "")
    assert OperatorServing(entries(), lease("2026-12-01T11:59:55Z"), NOW, endpoint="").leaderless() is None
    assert OperatorServing(entries(), lease(LAPSED), NOW).leaderless() is None  # not probed: the Lease decides


# ----------------------------------------------------------------------------------------------- gates 1 and 3


def test_explain_a_pending_job_whose_pods_the_api_server_will_refuse_and_the_unserved_check() -> None:
    from gpuctl.core.explain import FAILED, HELD, PASSED, explain_workload
    from gpuctl.core.workloads import parse_workload
    from testbed.factories import bound_pod, workload
    from tests.unit.test_explain import FREE, QUEUE, cluster_queue, context

    down = OperatorServing(entries(), lease(LAPSED), NOW, deployed=False)
    # A Job's Workload whose template carries the queue label, so its Pods reach the Pod webhook once created.
    raw = workload("job", [("main", 1, {"nvidia.com/gpu": "1"})], queue=QUEUE, hosts={"main": [("node-x", 1)]})
    raw["spec"]["podSets"][0]["template"]["metadata"] = {"labels": {naming.LABEL_QUEUE_NAME: QUEUE}}
    w = parse_workload(raw)
    ctx = replace(context(cluster_queue(reserved_cards=1), FREE), serving=down)
    e = explain_workload(w, ctx)
    assert e.held_by == 1 and e.gates[0].verdict == FAILED
    assert e.gates[0].summary.startswith(
        "the API server will refuse the Pods of pod set main still to be created: webhook pod-accelerators.gpustack.ai "
        "fails closed"
    )
    assert (
        e.gates[2].verdict == HELD
        and e.gates[2].summary == "the gpustack-node-devices check is not served: no verdict is written"
    )
    assert any("writes no verdict, and Kueue keeps the Workload at the check" in x for x in e.gates[2].evidence)
    assert e.to_dict()["gates"][0]["verdict"] == "failed"  # the JSON contract's words
    # Its Pods already created passed the webhook: gate 1 stands, the check holds it.
    pod = bound_pod("job-0", "", {"nvidia.com/gpu": "1"}, workload_name="job")
    with_pods = replace(context(cluster_queue(reserved_cards=1), FREE, pods=[pod]), serving=down)
    e = explain_workload(w, with_pods)
    assert e.gates[0].verdict == PASSED and e.held_by == 3
    # Nothing known of the operator (a snapshot without its Lease): today's answers.
    e = explain_workload(w, context(cluster_queue(reserved_cards=1), FREE))
    assert e.gates[0].verdict == PASSED and "not served" not in e.gates[2].summary


def test_simulate_says_the_api_server_refuses_the_pod_or_lets_it_through() -> None:
    from gpuctl.core.simulate import Simulator
    from tests.unit.test_simulate import pool, slice_pod, state_of

    state = state_of(pool({"n1": 4}))
    closed = Simulator(replace(state, serving=OperatorServing(entries(), lease(LAPSED), NOW))).simulate(
        slice_pod("p", 50)
    )
    g1 = closed.explanation.gates[0]
    assert not closed.admitted and closed.explanation.held_by == 1 and g1.verdict == "failed"
    assert g1.summary.startswith(
        "the API server will refuse the Pod: webhook pod-accelerators.gpustack.ai fails closed"
    )
    opened = Simulator(replace(state, serving=OperatorServing(entries("Ignore"), lease(LAPSED), NOW))).simulate(
        slice_pod("p", 50)
    )
    g1 = opened.explanation.gates[0]
    assert g1.verdict == "passed" and "through unreviewed" in g1.summary
    # With the operator down the check writes no verdict: the Pod's Workload waits at gate 3.
    assert opened.explanation.held_by == 3 and "not served" in opened.explanation.gates[2].summary
    served = Simulator(replace(state, serving=OperatorServing(entries(), lease("2026-12-01T11:59:55Z"), NOW)))
    assert served.simulate(slice_pod("p", 50)).admitted


def test_an_existing_workload_simulated_anew_keeps_the_pods_it_has() -> None:
    """Its Pods already created passed the webhook; only those still to be created meet the API server's refusal."""
    from gpuctl.core.simulate import Simulator
    from gpuctl.core.submissions import resubmission
    from testbed.factories import bound_pod, workload
    from tests.unit.test_simulate import ENTRANCE, pool, state_of

    raw = workload("job", [("main", 1, {"nvidia.com/gpu": "1"})], reserved=False, queue=ENTRANCE)
    raw["metadata"]["creationTimestamp"] = "2026-12-01T10:00:00Z"
    raw["spec"]["podSets"][0]["template"]["metadata"] = {"labels": {naming.LABEL_QUEUE_NAME: ENTRANCE}}
    down = OperatorServing(entries(), lease(LAPSED), NOW)
    for pods, verdict in (
        ([], "failed"),
        ([bound_pod("job-0", "", {"nvidia.com/gpu": "1"}, workload_name="job")], "passed"),
    ):
        state = replace(state_of(pool({"n1": 4}, extra=[raw, *pods])), serving=down)
        sim = Simulator(state)
        [w] = [x for x in state.workloads if x.name == "job"]
        sim.remove([w.key])
        g1 = sim.simulate(resubmission(w)).explanation.gates[0]
        assert g1.verdict == verdict, g1


# ----------------------------------------------------------------------------------------------- GPUStack's worker


def worker_entries(drop: str = "") -> tuple[Any, ...]:
    """GPUStack's worker's webhook configurations as it registers them (without the entry ``drop``)."""
    from testbed.standin import webhook_configurations as worker_configurations

    found = tuple(e for c in worker_configurations("Q0E=") for e in parse_webhook_configuration(c))
    return tuple(e for e in found if e.name != drop)


def worker_lease(renewed: str) -> LeaseRecord:
    from gpuctl.core import gpustack

    return LeaseRecord(gpustack.WORKER_NAMESPACE, gpustack.WORKER_LEASE, "worker-1", renewed, renewed, 15)


def test_beside_gpustacks_worker_its_webhooks_review_the_pod_and_gpuctls_own_names_are_not_looked_for() -> None:
    serving = OperatorServing(worker_entries(), worker_lease("2026-12-01T11:59:55Z"), NOW, registered=True, worker=True)
    assert unserved_review(serving, "pods", QUEUED, "the Pod") is None
    assert unserved_check(serving) is None
    # Read as gpuctl's own operator would be, the same cluster looks unreviewed: the reading the worker flag fixes.
    as_ours = replace(serving, worker=False)
    got = unserved_review(as_ours, "pods", QUEUED, "the Pod")
    assert got is not None and "through unreviewed" in got.summary


def test_gpustacks_worker_down_refuses_the_pod_and_holds_the_check_saying_whose_it_is() -> None:
    serving = OperatorServing(worker_entries(), worker_lease("2026-12-01T11:59:00Z"), NOW, registered=True, worker=True)
    got = unserved_review(serving, "pods", QUEUED, "the Pod")
    assert got is not None and got.refused and "GPUStack's worker does not serve it" in got.summary
    assert "GPUStack's worker's Lease gpustack-system/worker.gpustack.ai was last renewed 60 s ago" in got.evidence[-1]
    assert got.hint.startswith("GPUStack's worker serves them: kubectl -n gpustack-system get pods -l")
    assert (unserved_check(serving) or "").startswith("GPUStack's worker does not run")


def test_a_pod_entry_missing_from_gpustacks_configuration_lets_the_pod_through_unreviewed() -> None:
    fold = "mutate.gpustack-worker.core.v1.pod"
    serving = OperatorServing(
        worker_entries(drop=fold), worker_lease("2026-12-01T11:59:55Z"), NOW, registered=True, worker=True
    )
    got = unserved_review(serving, "pods", QUEUED, "the Pod")
    assert got is not None and not got.refused and "no fold, no pin, no request rule checked" in got.summary
    assert got.evidence == (f"webhook {fold} is not called: no webhook configuration in the cluster registers it",)
    assert "GPUStack's worker registers at start" in got.hint
