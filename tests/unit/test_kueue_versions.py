"""Kueue's versions and object model as records: versions read from images, snapshot records and CRD schemas; the
pending-reason tokens and the wording older Kueue writes; evictions with their preemptor named; Concurrent Admission
families folded; effective quotas."""

from __future__ import annotations

from typing import Any

import pytest

from gpuctl.cluster.versions import kueue_version
from gpuctl.core import pending as p
from gpuctl.core.history import workload_event_gate
from gpuctl.core.preemption import eviction, uid_names
from gpuctl.core.variants import folded, judged
from gpuctl.core.versions import (
    KueueVersion,
    image_version,
    kubernetes_tested,
    kueue_from_schema,
    parse_version,
)
from gpuctl.core.workloads import Condition, parse_cluster_queue, parse_workload
from testbed.factories import workload
from tests.memory_cluster import MemoryCluster

# ----------------------------------------------------------------------------------------------- versions


@pytest.mark.parametrize(
    ("text", "want"),
    [("v0.19.2", (0, 19, 2)), ("0.17", (0, 17, 0)), ("v1.36.3-gke.1200", (1, 36, 3)), ("latest", None), ("", None)],
)
def test_parse_version(text: str, want: tuple[int, int, int] | None) -> None:
    assert parse_version(text) == want


def test_image_version_reads_the_tag_only() -> None:
    assert image_version("registry.example.com/kueue/kueue:v0.19.2") == (0, 19, 2)
    assert image_version("localhost:5000/kueue/kueue:v0.20.1") == (0, 20, 1)
    assert image_version("localhost:5000/kueue/kueue") is None  # the port is not a tag
    assert image_version("kueue@sha256:abc") is None


def test_the_workload_crd_tells_the_minor() -> None:
    assert kueue_from_schema(8, True) == (0, 17, 0)
    assert kueue_from_schema(10, True) == (0, 18, 0)
    assert kueue_from_schema(18, None) == (0, 19, 0)
    assert kueue_from_schema(18, False) == (0, 20, 0)
    assert kueue_from_schema(None, None) is None


def test_tas_counting_follows_the_version() -> None:
    assert not KueueVersion((0, 17, 0)).tas_charges_raw_requests
    assert KueueVersion((0, 18, 0)).tas_charges_raw_requests
    unknown = KueueVersion(None)
    assert unknown.tas_charges_raw_requests and "not known here" in unknown.describe()
    assert KueueVersion((0, 16, 3)).tested is False and KueueVersion((0, 20, 1)).tested is True
    assert kubernetes_tested((1, 34, 5)) is False and kubernetes_tested((1, 37, 2)) is True


def _deployment(image: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "kueue-controller-manager", "namespace": "kueue-system"},
        "spec": {"template": {"spec": {"containers": [{"name": "manager", "image": image}]}}},
    }


def _crd(max_items: int, v1beta1_served: bool) -> dict[str, Any]:
    schema = {"openAPIV3Schema": {"properties": {"spec": {"properties": {"podSets": {"maxItems": max_items}}}}}}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "workloads.kueue.x-k8s.io"},
        "spec": {"versions": [{"name": "v1beta1", "served": v1beta1_served}, {"name": "v1beta2", "schema": schema}]},
    }


def test_kueue_version_from_the_manager_then_the_crd() -> None:
    found = kueue_version(MemoryCluster([_deployment("registry.example.com/kueue/kueue:v0.17.0"), _crd(18, True)]))
    assert found.version == (0, 17, 0) and "deployment kueue-system/kueue-controller-manager" in found.source
    found = kueue_version(MemoryCluster([_crd(10, True)]))
    assert found.version == (0, 18, 0) and "CRD workloads.kueue.x-k8s.io" in found.source
    assert kueue_version(MemoryCluster([])).version is None
    assert kueue_version(MemoryCluster([]), "0.17").version == (0, 17, 0)


# ----------------------------------------------------------------------------------------------- pending reasons


def _held(reason: str, message: str) -> p.Pending:
    return p.pending(Condition("QuotaReserved", "False", reason, message))


@pytest.mark.parametrize(
    ("reason", "part"),
    [
        ("WaitingForQuota", p.QUOTA),
        ("TopologyPlacementFailed", p.TAS_PLACEMENT),
        ("ExceedsMaxQuota", p.EXCEEDS_MAX_QUOTA),
        ("NoMatchingFlavor", p.NO_FLAVOR),
        ("WaitingForPreemptedWorkloads", p.PREEMPTING),
        ("WaitingForPodsReady", p.PODS_READY),
        ("AdmissionGated", p.ADMISSION_GATED),
        ("Suspended", p.SUSPENDED),
        ("Misconfigured", p.MISCONFIGURED),
        ("PendingEvaluation", p.EVALUATING),
    ],
)
def test_every_token_names_its_part(reason: str, part: str) -> None:
    # The token decides, whatever the message says.
    held = _held(
        reason, "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor f, 1 more needed"
    )
    assert (held.part, held.by_token) == (part, True)


def test_waiting_for_quota_over_a_placement_is_the_placement() -> None:
    message = "couldn't assign flavors to pod set main: topology \"t\" doesn't allow to fit any of 1 pod(s)"
    assert _held("WaitingForQuota", message).part == p.TAS_PLACEMENT
    assert _held("TopologyPlacementFailed", message).by_token


def test_a_preemption_gated_workload_is_told_from_an_admission_gated_one() -> None:
    assert _held("AdmissionGated", "Workload requires preemption, but it's gated").part == p.PREEMPTION_GATED
    assert _held("AdmissionGated", "Admission is gated by: example.com/gate").part == p.ADMISSION_GATED


@pytest.mark.parametrize(
    ("message", "part"),
    [
        (
            "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor on-demand, 5 more needed",
            p.QUOTA,
        ),
        (
            "couldn't assign flavors to pod set main: topology \"default\" doesn't allow to fit any of 1 pod(s). "
            'Total nodes: 3; excluded: resource "nvidia.com/gpu": 3',
            p.TAS_PLACEMENT,
        ),
        (
            "couldn't assign flavors to pod set main: insufficient quota for cpu in flavor f, previously considered "
            "podsets requests (0) + current podset request (12) > maximum capacity (10)",
            p.EXCEEDS_MAX_QUOTA,
        ),
        (
            "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor f, 2 more needed. "
            "Pending the preemption of 1 workload(s)",
            p.PREEMPTING,
        ),
        ("waiting for all admitted workloads to be in PodsReady condition", p.PODS_READY),
        ("LocalQueue lq is inactive", p.SUSPENDED),
        ("ClusterQueue cq is inactive", p.SUSPENDED),
        ("LocalQueue lq doesn't exist", p.MISCONFIGURED),
        (
            "couldn't assign flavors to pod set main: untolerated taint {key val NoSchedule <nil>} in flavor spot",
            p.NO_FLAVOR,
        ),
        ("Workload requires preemption, but it's gated", p.PREEMPTION_GATED),
        ("something new", ""),
    ],
)
def test_a_classic_reason_is_read_from_kueues_wording(message: str, part: str) -> None:
    for reason in ("Pending", "Inadmissible"):
        held = _held(reason, message)
        assert (held.part, held.by_token) == (part, False)


def test_exceeds_max_quota_figures() -> None:
    found = p.max_quota(
        "insufficient quota for cpu in flavor f, previously considered podsets requests (2) + current podset "
        "request (12) > maximum capacity (10)"
    )
    assert found is not None and (found.resource, found.previous, found.current, found.maximum) == (
        "cpu",
        "2",
        "12",
        "10",
    )


def test_tokens_are_gate_2_in_a_history() -> None:
    for reason in (*p.TOKENS, "Pending", "Inadmissible"):
        assert workload_event_gate(reason) == 2
    assert workload_event_gate("EvictedDueToAdmissionCheck") == 3


# ----------------------------------------------------------------------------------------------- evictions


def test_an_eviction_names_its_preemptor() -> None:
    classic = (
        "Preempted to accommodate a workload (UID: u-1, JobUID: UNKNOWN) due to reclamation within the cohort; "
        "preemptor path: /root/cq-a; preemptee path: /root/cq-b"
    )
    found = eviction(classic, {"u-1": "team-b/big"})
    assert found is not None and found.describe() == "preempted by team-b/big (reclamation within the cohort)"
    gone = eviction(classic, {})
    assert gone is not None and gone.preemptor == "UID u-1"
    rule = eviction("Preempted by rule 'low-first' in PreemptionConfig 'default' to accommodate workload team-a/x", {})
    assert rule is not None and rule.describe() == "preempted by team-a/x (rule low-first of preemption config default)"
    assert eviction("The ClusterQueue is stopped", {}) is None


# ----------------------------------------------------------------------------------------------- families and quotas


def _variant(name: str, parent: str, *, admitted: bool) -> Any:
    w = workload(name, [("main", 1, {"nvidia.com/gpu": "1"})], reserved=admitted, admitted=admitted)
    w["metadata"]["ownerReferences"] = [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "name": parent, "uid": "p", "controller": True}
    ]
    return parse_workload(w)


def test_a_family_counts_once() -> None:
    parent = parse_workload(workload("job", [("main", 1, {"nvidia.com/gpu": "1"})], admitted=True))
    a, b = _variant("job-variant-a-1", "job", admitted=True), _variant("job-variant-b-2", "job", admitted=False)
    other = parse_workload(workload("solo", [("main", 1, {"nvidia.com/gpu": "1"})]))
    assert [w.name for w in judged([parent, a, b, other])] == ["job-variant-a-1", "job-variant-b-2", "solo"]
    family = folded([parent, a, b, other])
    assert [(w.name, w.variant_name, w.variants) for w in family] == [("job", "job-variant-a-1", 2), ("solo", "", 0)]
    assert a.pod_owner == "job" and family[0].pod_owner == "job"
    assert judged(family) == family  # a folded family stands for itself
    assert uid_names([a])[a.uid] == "team-a/job"


def test_a_parent_without_variants_read_is_itself() -> None:
    parent = parse_workload(workload("job", [("main", 1, {"nvidia.com/gpu": "1"})], admitted=True))
    assert folded([parent]) == [parent] and judged([parent]) == [parent]


def test_preemption_gates_are_closed_until_the_status_opens_them() -> None:
    raw = workload("w", [("main", 1, {})], reserved=False)
    raw["spec"]["preemptionGates"] = [{"name": "a"}, {"name": "b"}]
    raw["status"]["preemptionGates"] = [{"name": "b", "position": "Open", "lastTransitionTime": "2026-12-01T00:00:00Z"}]
    w = parse_workload(raw)
    assert w.preemption_gates == (("a", "Closed"), ("b", "Open")) and w.closed_preemption_gates == ("a",)


def test_an_effective_quota_replaces_the_spec_only_when_in_force() -> None:
    def groups(n: str) -> list[dict[str, Any]]:
        return [
            {"coveredResources": ["cpu"], "flavors": [{"name": "f", "resources": [{"name": "cpu", "nominalQuota": n}]}]}
        ]

    cq = parse_cluster_queue(
        {
            "metadata": {"name": "cq"},
            "spec": {"resourceGroups": groups("10")},
            "status": {
                "effectiveQuotas": {
                    "orchestratorRef": {"apiGroup": "kueue.x-k8s.io", "kind": "DynamicQuotaOrchestrator", "name": "o"},
                    "resourceGroups": groups("6"),
                }
            },
        }
    )
    assert cq.nominal == {"cpu": 10} and cq.quota_note == ""
    used = cq.with_effective_quotas()
    assert used.nominal == {"cpu": 6} and [q.nominal for q in used.quotas] == [6]
    assert "DynamicQuotaOrchestrator/o" in used.quota_note
