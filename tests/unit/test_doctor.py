"""Each doctor check on a healthy fixture and a broken one: the finding, and that its fix names what to do."""

from __future__ import annotations

import time
from typing import Any

from gpuctl.cluster import kinds, read
from gpuctl.core import doctor, naming
from gpuctl.core.pins import node_fit_labels
from gpuctl.core.views import instancetype_views, views_to_status
from gpuctl.core.workloads import parse_admission_check, parse_local_queue, parse_workload
from tests.factories import workload
from tests.memory_cluster import MemoryCluster
from tests.unit.test_simulate import ACTIVE_CHECK, pool


def statuses(findings: list[doctor.Finding], check: str) -> list[str]:
    return [f.status for f in findings if f.check == check]


def test_the_admission_check_exists_names_its_controller_and_is_active() -> None:
    healthy = {**ACTIVE_CHECK, "spec": {"controllerName": naming.NODE_DEVICES_CONTROLLER}}
    assert doctor.admission_check(parse_admission_check(healthy)).status == doctor.OK
    assert doctor.admission_check(None).status == doctor.FAIL
    wrong = doctor.admission_check(parse_admission_check({**healthy, "spec": {"controllerName": "other"}}))
    assert wrong.status == doctor.FAIL and naming.NODE_DEVICES_CONTROLLER in wrong.fix
    inactive = doctor.admission_check(parse_admission_check({**healthy, "status": {}}))
    assert inactive.status == doctor.FAIL and "not Active" in inactive.saw


def healthy_pool() -> list[dict[str, Any]]:
    """The test pool as the operator leaves it: status views from the ledger, fit labels on the Node."""
    objects = pool({"n1": 4})
    cluster = MemoryCluster(objects)
    [it] = read.instancetypes(cluster)
    devices = read.devices(cluster)
    for o in objects:
        if o["kind"] == "InstanceType":
            o["status"].update(views_to_status(instancetype_views(it, devices)))
        if o["kind"] == "Node":
            o["metadata"]["labels"].update(node_fit_labels(devices[0]))
    return objects


def run_pools(objects: list[dict[str, Any]]) -> list[doctor.Finding]:
    cluster = MemoryCluster(objects)
    return doctor.pools(
        {t.name: t for t in read.instancetypes(cluster)},
        read.cluster_queues(cluster),
        [parse_local_queue(o) for o in cluster.list(kinds.LOCALQUEUE)],
        read.devices(cluster),
        {n.name: n for n in read.nodes(cluster)},
    )


def test_a_healthy_pool_has_no_finding_and_each_break_is_named() -> None:
    assert run_pools(healthy_pool()) == []
    stale = healthy_pool()
    for o in stale:
        if o["kind"] == "InstanceType":
            o["status"]["accelerator"]["remaining"] = 1
            o["metadata"]["labels"].pop(naming.LABEL_QUEUE_ENTRANCE)
        if o["kind"] == "Node":
            for k in [k for k in o["metadata"]["labels"] if k.startswith("sliced-max-free-units")]:
                o["metadata"]["labels"][k] = "0"
    found = run_pools(stale)
    assert statuses(found, "pool-status") == [doctor.FAIL] and "accelerator" in found[1].saw
    assert statuses(found, "pool-entrance") == [doctor.FAIL]
    assert statuses(found, "fit-labels") == [doctor.WARN]
    no_queues = [o for o in healthy_pool() if o["kind"] not in ("LocalQueue",)]
    assert statuses(run_pools(no_queues), "pool-queues") == [doctor.FAIL]
    no_devices = [o for o in healthy_pool() if o["kind"] != "Devices"]
    assert statuses(run_pools(no_devices), "pool-devices") == [doctor.FAIL]


def test_queues_reference_the_check_and_none_admits_without_resource_groups() -> None:
    cluster = MemoryCluster(healthy_pool())
    types = {t.name: t for t in read.instancetypes(cluster)}
    queues = read.cluster_queues(cluster)
    assert statuses(doctor.queues(queues, types, True), "queue-check") == [doctor.OK]
    objects = healthy_pool()
    for o in objects:
        if o["kind"] == "ClusterQueue":
            o["spec"].pop("admissionChecksStrategy")
    broken = MemoryCluster(objects)
    found = doctor.queues(read.cluster_queues(broken), types, True)
    assert statuses(found, "queue-check") == [doctor.FAIL] and naming.NODE_DEVICES_CHECK in found[0].fix
    for o in objects:
        if o["kind"] == "ClusterQueue":
            o["spec"]["resourceGroups"] = []
    empty = doctor.queues(read.cluster_queues(MemoryCluster(objects)), types, True)
    assert statuses(empty, "queue-resources") == [doctor.FAIL] and "Hold" in empty[0].fix


def test_stuck_work_is_reported_and_healthy_work_is_not() -> None:
    fresh = workload("fresh", [("main", 1, {"nvidia.com/gpu": "1"})], check_state="Retry")
    fresh["status"]["admissionChecks"][0]["lastTransitionTime"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    assert doctor.stuck([parse_workload(fresh)], [], time.time()) == []
    old = workload("old", [("main", 1, {"nvidia.com/gpu": "1"})], check_state="Retry")
    old["status"]["admissionChecks"][0]["lastTransitionTime"] = "2020-01-01T00:00:00Z"
    evicted = workload("evicted", [("main", 1, {"nvidia.com/gpu": "1"})], reserved=True, check_state="Ready")
    evicted["status"]["conditions"] = [{"type": "Evicted", "status": "True", "reason": "AdmissionCheck"}]
    found = doctor.stuck([parse_workload(old), parse_workload(evicted)], [], time.time())
    assert statuses(found, "stuck-retry") == [doctor.WARN] and "gpuctl simulate" in found[-1].fix
    assert statuses(found, "evicted-verdict") == [doctor.FAIL]


def entries(configs: list[dict[str, Any]]) -> list[doctor.WebhookEntry]:
    return [e for c in configs for e in doctor.parse_webhook_configuration(c)]


def test_the_generated_webhook_configurations_pass_and_each_break_fails() -> None:
    import copy

    from gpuctl.operator.manifests import webhook_configurations

    healthy = webhook_configurations(ca_bundle="Y2E=")
    found = doctor.webhooks(entries(healthy))
    assert found and {f.status for f in found} == {doctor.OK}
    flipped = copy.deepcopy(healthy)
    flipped[0]["webhooks"][0]["failurePolicy"] = "Ignore"  # the Pod webhook, which fails closed
    [bad] = [f for f in doctor.webhooks(entries(flipped)) if f.status == doctor.FAIL]
    assert "failurePolicy 'Ignore' (want 'Fail')" in bad.saw
    renamed = copy.deepcopy(healthy)
    renamed[0]["metadata"]["name"] = "zz-gpustack-worker-mutation"
    assert statuses(doctor.webhooks(entries(renamed)), "webhook-order") == [doctor.FAIL]
    no_ca = webhook_configurations()
    assert any("no caBundle" in f.saw for f in doctor.webhooks(entries(no_ca)))
    missing = copy.deepcopy(healthy)
    missing[1]["webhooks"] = missing[1]["webhooks"][1:]
    assert any("is not registered" in f.saw for f in doctor.webhooks(entries(missing)))
