"""Each doctor check on a healthy fixture and a broken one: the finding, and that its fix names what to do."""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Any

from gpuctl.cluster import kinds, read
from gpuctl.core import doctor, naming
from gpuctl.core.pins import node_fit_labels
from gpuctl.core.views import instancetype_views, views_to_status
from gpuctl.core.workloads import parse_admission_check, parse_local_queue, parse_workload
from testbed.factories import workload
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
        writer_fix="check the writer",
    )


def survey_of(objects: list[dict[str, Any]]) -> list[Any]:
    from gpuctl.core.shadow import survey

    cluster = MemoryCluster(objects)
    devices = read.devices(cluster)
    return survey(
        read.instancetypes(cluster),
        read.cluster_queues(cluster),
        devices,
        {n.name: n.labels for n in read.nodes(cluster)},
    )


def test_a_healthy_pool_has_no_finding_and_each_break_is_named() -> None:
    assert run_pools(healthy_pool()) == []
    assert survey_of(healthy_pool()) == []
    stale = healthy_pool()
    for o in stale:
        if o["kind"] == "InstanceType":
            o["status"]["accelerator"]["remaining"] = 1
            o["metadata"]["labels"].pop(naming.LABEL_QUEUE_ENTRANCE)
        if o["kind"] == "Node":
            for k in [k for k in o["metadata"]["labels"] if k.startswith("sliced-max-free-units")]:
                o["metadata"]["labels"][k] = "0"
    found = run_pools(stale)
    assert statuses(found, "pool-entrance") == [doctor.FAIL]
    # A published figure the ledger does not give is the shadow's to report, with both values (never a patch of a
    # status its writer owns).
    assert statuses(found, "pool-status") == []
    by_field = {d.field: d for d in survey_of(stale)}
    assert (by_field["accelerator.remaining"].published, by_field["accelerator.remaining"].computed) == ("1", "4")
    sliced = next(d for f, d in by_field.items() if f.startswith("sliced-max-free-units"))
    assert (sliced.published, sliced.computed) == ("0", "1600000")
    unwritten = healthy_pool()
    for o in unwritten:
        if o["kind"] == "InstanceType":
            for view in ("accelerator", "acceleratorShared", "acceleratorSliced", "acceleratorPartitioned", "cpu"):
                o["status"].pop(view)
    [none] = [f for f in run_pools(unwritten) if f.check == "pool-status"]
    assert none.status == doctor.FAIL and "publishes no views" in none.saw and none.fix == "check the writer"
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
    assert "failurePolicy Ignore (want Fail)" in bad.saw
    renamed = copy.deepcopy(healthy)
    renamed[0]["metadata"]["name"] = "zz-gpuctl-mutation"
    assert statuses(doctor.webhooks(entries(renamed)), "webhook-order") == [doctor.FAIL]
    no_ca = webhook_configurations()
    assert any("no caBundle" in f.saw for f in doctor.webhooks(entries(no_ca)))
    missing = copy.deepcopy(healthy)
    missing[1]["webhooks"] = missing[1]["webhooks"][1:]
    assert any("is not registered" in f.saw for f in doctor.webhooks(entries(missing)))


def patch_of(fix: str) -> list[dict[str, Any]]:
    """The JSON patch a printed ``kubectl patch ... -p '<patch>'`` fix carries."""
    import json
    import shlex

    words = shlex.split(fix)
    return list(json.loads(words[words.index("-p") + 1]))


def test_a_webhook_field_fix_is_a_json_patch_that_makes_the_configuration_pass() -> None:
    import copy

    import jsonpatch

    from gpuctl.operator.manifests import webhook_configurations

    healthy = webhook_configurations(ca_bundle="Y2E=")
    broken = copy.deepcopy(healthy)
    broken[1]["webhooks"][2]["failurePolicy"] = "Ignore"
    broken[1]["webhooks"][2]["timeoutSeconds"] = 30
    [bad] = [f for f in doctor.webhooks(entries(broken)) if f.status == doctor.FAIL]
    assert bad.fix.startswith(f"kubectl patch validatingwebhookconfiguration {naming.VALIDATING_CONFIGURATION}")
    broken[1] = jsonpatch.apply_patch(broken[1], patch_of(bad.fix))
    assert {f.status for f in doctor.webhooks(entries(broken))} == {doctor.OK}


def test_the_ca_bundle_fix_adds_the_operators_ca_to_every_webhook_of_the_configuration() -> None:
    from gpuctl.operator.manifests import webhook_configurations

    found = entries(webhook_configurations())
    fix = doctor.ca_bundle_fix(found, [naming.MUTATING_CONFIGURATION])
    assert fix.startswith(f"CA=$(kubectl -n {naming.OPERATOR_NAMESPACE} get secret {naming.OPERATOR_TLS_SECRET}")
    mutating = [e for e in found if e.configuration == naming.MUTATING_CONFIGURATION]
    assert fix.count("/clientConfig/caBundle") == len(mutating) > 1
    assert "validatingwebhookconfiguration" not in fix


def test_the_evicted_verdict_fix_resets_the_check_and_the_finding_goes() -> None:
    import jsonpatch

    evicted = workload("evicted", [("main", 1, {"nvidia.com/gpu": "1"})], reserved=False)
    evicted["status"]["admissionChecks"] = [
        {"name": "another-check", "state": "Ready"},
        {"name": naming.NODE_DEVICES_CHECK, "state": "Retry"},
    ]
    evicted["status"]["conditions"] = [
        {"type": "Evicted", "status": "True", "reason": "ClusterQueueStopped"},
        {"type": "QuotaReserved", "status": "False", "reason": "Pending"},
    ]
    [found] = [f for f in doctor.stuck([parse_workload(evicted)], [], time.time()) if f.check == "evicted-verdict"]
    assert found.status == doctor.FAIL and "--subresource status" in found.fix
    fixed = jsonpatch.apply_patch(evicted, patch_of(found.fix))
    assert fixed["status"]["admissionChecks"][0] == {"name": "another-check", "state": "Ready"}
    assert not [f for f in doctor.stuck([parse_workload(fixed)], [], time.time()) if f.check == "evicted-verdict"]


def kueue(config: dict[str, Any], args: tuple[str, ...] = ()) -> doctor.KueueSettings:
    return doctor.parse_kueue_settings(config, args, naming.KUEUE_NAMESPACE, naming.KUEUE_CONFIGMAP)


def deployed_kueue_config() -> dict[str, Any]:
    from gpuctl.core.credits import kueue_resources_config

    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "featureGates": {"AssignQueueLabelsForPods": False, "TopologyAwareScheduling": True},
        "resources": kueue_resources_config(),
    }


def test_kueue_configuration_as_the_design_deploys_it_passes() -> None:
    from gpuctl.core.credits import kueue_resources_config

    found = doctor.kueue_configuration(kueue(deployed_kueue_config()), kueue_resources_config())
    assert {f.check for f in found} == {"kueue-gates", "kueue-resources"}
    assert {f.status for f in found} == {doctor.OK}


def test_a_flipped_or_defaulted_feature_gate_fails_and_names_where_it_is_set() -> None:
    from gpuctl.core.credits import kueue_resources_config

    wanted = kueue_resources_config()
    config = deployed_kueue_config()
    config["featureGates"]["AssignQueueLabelsForPods"] = True
    [bad] = [f for f in doctor.kueue_configuration(kueue(config), wanted) if f.status == doctor.FAIL]
    assert "AssignQueueLabelsForPods is enabled in ConfigMap kueue-system/kueue-manager-config" in bad.saw
    assert "AssignQueueLabelsForPods: false" in bad.fix and "rollout restart" in bad.fix
    # Kueue v0.17 enables it by default: a Configuration that does not mention it fails too.
    del config["featureGates"]["AssignQueueLabelsForPods"]
    defaulted = doctor.kueue_configuration(kueue(config), wanted)
    assert statuses(defaulted, "kueue-gates") == [doctor.FAIL, doctor.OK]
    assert "enabled by Kueue's default" in defaulted[0].saw
    # YAML spells booleans many ways; a quoted "false" is false.
    config["featureGates"]["AssignQueueLabelsForPods"] = "false"
    assert statuses(doctor.kueue_configuration(kueue(config), wanted), "kueue-gates") == [doctor.OK, doctor.OK]
    # The manager's flag wins over the Configuration.
    flagged = kueue(deployed_kueue_config(), ("/manager", "--feature-gates=TopologyAwareScheduling=false,Foo=true"))
    [bad] = [f for f in doctor.kueue_configuration(flagged, wanted) if f.status == doctor.FAIL]
    assert "TopologyAwareScheduling is disabled by --feature-gates" in bad.saw
    assert "edit deployment kueue-controller-manager" in bad.fix
    assert doctor.feature_gate_flag(["--feature-gates=A=true, B=False", "--v=2"]) == {"A": True, "B": False}
    assert doctor.feature_gate_flag(["--feature-gates", "C=true"]) == {"C": True}


def test_transformations_and_exclusions_must_equal_the_generated_ones() -> None:
    from gpuctl.core.credits import kueue_resources_config

    wanted = kueue_resources_config()
    config = deployed_kueue_config()
    config["resources"] = {
        "excludeResourcePrefixes": config["resources"]["excludeResourcePrefixes"][1:],
        "transformations": [dict(t) for t in config["resources"]["transformations"][1:]],
    }
    config["resources"]["transformations"][0]["outputs"] = {"credits.gpustack.ai/other": "7"}
    [bad] = [f for f in doctor.kueue_configuration(kueue(config), wanted) if f.status == doctor.FAIL]
    first, second = wanted["transformations"][0]["input"], wanted["transformations"][1]["input"]
    assert f"{first} missing" in bad.saw
    # What differs is shown with both values.
    assert f"{second} is Replace, outputs credits.gpustack.ai/other=7 (want Replace, outputs credits." in bad.saw
    assert "excludeResourcePrefixes lacks device.gpustack.ai/" in bad.saw
    assert "gpuctl doctor --kueue-resources" in bad.fix
    # Quantities compare as numbers, not spellings.
    config = deployed_kueue_config()
    t = config["resources"]["transformations"][0]
    t["outputs"] = {k: f"{v}000m" for k, v in t["outputs"].items()}
    assert statuses(doctor.kueue_configuration(kueue(config), wanted), "kueue-resources") == [doctor.OK]
    [missing] = doctor.kueue_configuration(None, wanted, ("kueue", "custom-config"))
    assert missing.status == doctor.WARN and "ConfigMap kueue/custom-config" in missing.saw


def test_topologies_named_by_flavors_exist_and_end_at_the_hostname() -> None:
    from gpuctl.core.workloads import ResourceFlavor

    flavors = {"f1": ResourceFlavor("f1", {}, topology_name="gpus"), "f2": ResourceFlavor("f2", {})}
    assert statuses(doctor.kueue_topologies(flavors, {"gpus": ("rack", naming.LABEL_HOSTNAME)}), "kueue-topology") == [
        doctor.OK
    ]
    [missing] = doctor.kueue_topologies(flavors, {})
    assert missing.status == doctor.FAIL and "does not exist" in missing.saw
    [short] = doctor.kueue_topologies(flavors, {"gpus": ("rack",)})
    assert short.status == doctor.FAIL and "ends at rack" in short.saw


def deployment(replicas: int, ready: int, *args: str) -> doctor.DeploymentRecord:
    return doctor.parse_deployment(
        {
            "metadata": {"namespace": naming.OPERATOR_NAMESPACE, "name": naming.OPERATOR_NAME},
            "spec": {"replicas": replicas, "template": {"spec": {"containers": [{"args": list(args)}]}}},
            "status": {"readyReplicas": ready},
        }
    )


def lease(renewed_ago: float, now: float) -> doctor.LeaseRecord:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now - renewed_ago))
    return doctor.parse_lease(
        {
            "metadata": {"namespace": naming.OPERATOR_NAMESPACE, "name": naming.OPERATOR_NAME},
            "spec": {"holderIdentity": "op-1", "renewTime": stamp, "acquireTime": stamp, "leaseDurationSeconds": 15},
        }
    )


def test_operator_health_replicas_and_leader() -> None:
    now = time.time()
    ns = naming.OPERATOR_NAMESPACE
    healthy = doctor.operator_health(deployment(2, 2, "--leader-elect"), lease(3, now), True, ns, now)
    assert [(f.check, f.status) for f in healthy] == [("operator-replicas", "ok"), ("operator-leader", "ok")]
    assert "op-1, renewed 3 s ago" in healthy[1].saw
    down = doctor.operator_health(deployment(2, 0, "--leader-elect"), lease(3, now), True, ns, now)
    assert statuses(down, "operator-replicas") == [doctor.FAIL]
    assert statuses(doctor.operator_health(deployment(2, 1), lease(3, now), True, ns, now), "operator-replicas") == [
        doctor.WARN
    ]
    stale = doctor.operator_health(deployment(2, 2, "--leader-elect"), lease(60, now), True, ns, now)
    assert statuses(stale, "operator-leader") == [doctor.FAIL] and "last renewed 60 s ago" in stale[1].saw
    nothing = doctor.operator_health(None, None, True, ns, now)
    assert statuses(nothing, "operator-replicas") == [doctor.FAIL] and nothing[0].fix == doctor.INSTALL
    # Served by URL (outside the cluster): no Deployment is expected; its Lease still is.
    assert doctor.operator_health(None, lease(1, now), False, ns, now)[0].check == "operator-leader"
    leaderless = doctor.operator_health(deployment(2, 2, "--leader-elect"), None, True, ns, now)
    assert statuses(leaderless, "operator-leader") == [doctor.FAIL]
    racing = doctor.operator_health(deployment(2, 2), None, True, ns, now)
    assert statuses(racing, "operator-leader") == [doctor.WARN] and "--leader-elect" in racing[1].fix
    # A Lease left from an earlier deployment, now without --leader-elect: not judged.
    leftover = doctor.operator_health(deployment(1, 1), lease(600, now), True, ns, now)
    assert [f.check for f in leftover] == ["operator-replicas"]
    # Nothing read (a dump without the deployment's objects): nothing to say of the leader.
    assert doctor.operator_health(None, None, False, ns, now) == []


def test_histogram_quantile_interpolates_within_the_bucket() -> None:
    buckets = [(0.005, 50.0), (0.01, 90.0), (0.05, 100.0), (float("inf"), 100.0)]
    assert doctor.histogram_quantile(buckets, 0.5) == 0.005
    assert abs((doctor.histogram_quantile(buckets, 0.99) or 0) - 0.046) < 1e-9
    assert doctor.histogram_quantile([(0.1, 0.0), (float("inf"), 0.0)], 0.99) is None
    assert doctor.histogram_quantile([(0.1, 1.0), (float("inf"), 10.0)], 0.99) == 0.1


def test_latency_buckets_sum_the_webhooks_label_sets() -> None:
    from gpuctl.cluster.probe import latency_buckets

    text = "\n".join(
        [
            "# TYPE gpuctl_webhook_duration_seconds histogram",
            'gpuctl_webhook_duration_seconds_bucket{le="0.01",webhook="a"} 3.0',
            'gpuctl_webhook_duration_seconds_bucket{le="+Inf",webhook="a"} 4.0',
            'gpuctl_webhook_duration_seconds_bucket{webhook="b",le="0.01"} 1.0',
            'gpuctl_webhook_duration_seconds_bucket{webhook="b",le="+Inf"} 1.0',
            "gpuctl_webhook_duration_seconds_count 5.0",
        ]
    )
    assert latency_buckets(text) == [(0.01, 4.0), (float("inf"), 5.0)]


def test_endpoint_and_live_review_findings() -> None:
    from gpuctl.operator.manifests import webhook_configurations

    found = entries(webhook_configurations(ca_bundle="Y2E=", url="https://10.0.0.1:9443"))
    config = (naming.MUTATING_CONFIGURATION,)
    target = "https://10.0.0.1:9443"
    ok = doctor.endpoints(
        [doctor.EndpointProbe(target, config, ca_verified=True, readyz=200, p99_seconds=0.004, reviews=9)], found
    )
    assert [(f.check, f.status) for f in ok] == [
        ("webhook-endpoint", "ok"),
        ("operator-ready", "ok"),
        ("webhook-latency", "ok"),
    ]
    assert "caBundle verifies" in ok[0].saw and "p99 4.0 ms over 9 reviews (timeout 10 s)" in ok[2].saw
    [ca] = doctor.endpoints(
        [doctor.EndpointProbe(target, config, error="TLS: unable to get local issuer", ca_verified=False)], found, "ops"
    )
    assert ca.status == doctor.FAIL and ca.fix.startswith("CA=$(kubectl -n ops get secret")
    [down] = doctor.endpoints([doctor.EndpointProbe(target, config, error="cannot reach it: refused")], found)
    assert down.status == doctor.FAIL and "get endpointslices -l kubernetes.io/service-name=" in down.fix
    # Registered by URL with no Deployment (the operator runs outside the cluster): no Pod to look at.
    [outside] = doctor.endpoints(
        [doctor.EndpointProbe(target, config, error="cannot reach it: refused")], found, deployed=False
    )
    assert "runs outside the cluster" in outside.fix and "kubectl" not in outside.fix
    slow = doctor.endpoints(
        [doctor.EndpointProbe(target, config, readyz=503, readyz_body="cache", p99_seconds=12.0)], found
    )
    assert [f.status for f in slow] == [doctor.FAIL, doctor.OK, doctor.FAIL]
    half = doctor.endpoints([doctor.EndpointProbe(target, config, readyz=200, p99_seconds=6.0)], found)
    assert [f.status for f in half] == [doctor.OK, doctor.OK, doctor.WARN]
    [forbidden] = doctor.endpoints([doctor.EndpointProbe(target, config, allowed=False, error="forbidden")], found)
    assert forbidden.status == doctor.WARN and "services/proxy" in forbidden.fix
    reviews = doctor.live_reviews(
        [
            doctor.LiveReview(config, "dry-run create Pod", 0.01),
            doctor.LiveReview(
                config, "dry-run create Pod", 0.01, 'failed calling webhook "x": x509: unknown authority'
            ),
            doctor.LiveReview(config, "dry-run create Pod", 0.0, "forbidden: cannot create pods", sent=False),
            doctor.LiveReview(
                config, "dry-run create Pod", 0.0, 'failed calling webhook "policy.example"', foreign="policy.example"
            ),
        ],
        found,
    )
    assert [f.status for f in reviews] == [doctor.OK, doctor.FAIL, doctor.WARN, doctor.WARN]
    assert reviews[1].fix.startswith("CA=$(kubectl") and naming.MUTATING_CONFIGURATION in reviews[1].fix
    assert "policy.example" in reviews[3].saw and "CA=" not in reviews[3].fix


def test_the_printed_shell_fixes_are_valid_bash() -> None:
    import subprocess

    from gpuctl.operator.manifests import webhook_configurations

    found = entries(webhook_configurations())
    for fix in (
        doctor.ca_bundle_fix(found, [naming.MUTATING_CONFIGURATION, naming.VALIDATING_CONFIGURATION]),
        doctor.admission_check(None).fix,
    ):
        assert subprocess.run(["bash", "-n", "-c", fix], capture_output=True).returncode == 0, fix


def test_probing_a_malformed_ca_bundle_is_a_finding_not_a_crash() -> None:
    from gpuctl.cluster.probe import probe_endpoints
    from gpuctl.operator.manifests import webhook_configurations

    found = entries(webhook_configurations(ca_bundle="not-base64!!", url="https://127.0.0.1:1"))
    probes = probe_endpoints(None, found, 1.0)  # type: ignore[arg-type] # a URL endpoint never needs the API server
    assert probes and all(p.ca_verified is False and "not a base64-encoded PEM" in p.error for p in probes)


def apply_fix(configs: list[dict[str, Any]], fix: str) -> list[dict[str, Any]]:
    """The configurations after the printed ``kubectl patch|create`` commands of a fix, applied as the API server
    applies a JSON patch (a failed ``test`` op raises)."""
    import copy
    import json
    import shlex

    import jsonpatch

    out = copy.deepcopy(configs)
    commands: list[list[str]] = [[]]
    for word in shlex.split(fix):
        if word == "&&":
            commands.append([])
        else:
            commands[-1].append(word)
    for words in commands:
        if words[:2] == ["kubectl", "patch"]:
            kind, name = words[2], words[3]
            [i] = [i for i, c in enumerate(out) if c["kind"].lower() == kind and c["metadata"]["name"] == name]
            out[i] = jsonpatch.apply_patch(out[i], json.loads(words[words.index("-p") + 1]))
        elif words[0] == "echo" and words[2:] == ["|", "kubectl", "create", "-f", "-"]:
            out.append(json.loads(words[1]))
        else:
            raise AssertionError(f"not a patch or create: {words}")
    return out


def failing(configs: list[dict[str, Any]]) -> list[doctor.Finding]:
    return [f for f in doctor.webhooks(entries(configs)) if f.status == doctor.FAIL]


URL = "https://10.0.0.1:9443"


def test_rules_apiversions_scope_and_match_conditions_are_compared_and_restored_by_the_fix() -> None:
    import copy

    from gpuctl.operator.manifests import webhook_configurations

    for healthy in (webhook_configurations(ca_bundle="Y2E="), webhook_configurations(ca_bundle="Y2E=", url=URL)):
        wrong_version = copy.deepcopy(healthy)
        wrong_version[0]["webhooks"][0]["rules"][0]["apiVersions"] = ["v2"]  # the Pod webhook: never called
        [bad] = failing(wrong_version)
        assert '"apiVersions":["v2"]' in bad.saw and '(want [{"operations":["CREATE"],"apiGroups":[""]' in bad.saw
        assert "'" not in bad.saw.replace(bad.fix, "")  # JSON, not Python's repr
        assert failing(apply_fix(wrong_version, bad.fix)) == []
        any_scope = copy.deepcopy(healthy)
        del any_scope[0]["webhooks"][0]["rules"][0]["scope"]  # the API's default: "*"
        [bad] = failing(any_scope)
        assert '"scope":"*"' in bad.saw and failing(apply_fix(any_scope, bad.fix)) == []
        [fit] = [i for i, w in enumerate(healthy[0]["webhooks"]) if w["name"] == "workload-fit.gpustack.ai"]
        never = copy.deepcopy(healthy)
        never[0]["webhooks"][fit]["matchConditions"][0]["expression"] = "false"
        [bad] = failing(never)
        assert bad.saw.startswith("webhook workload-fit.gpustack.ai") and "matchConditions" in bad.saw
        assert '"expression":"false"' in bad.saw and failing(apply_fix(never, bad.fix)) == []
        removed = copy.deepcopy(healthy)
        del removed[0]["webhooks"][fit]["matchConditions"]
        [bad] = failing(removed)
        assert "matchConditions [] (want" in bad.saw and failing(apply_fix(removed, bad.fix)) == []


def test_a_missing_or_misplaced_webhook_is_registered_again_calling_the_same_server() -> None:
    import copy

    from gpuctl.operator.manifests import webhook_configurations

    for healthy in (webhook_configurations(ca_bundle="Y2E="), webhook_configurations(ca_bundle="Y2E=", url=URL)):
        missing = copy.deepcopy(healthy)
        missing[1]["webhooks"] = missing[1]["webhooks"][1:]
        [bad] = failing(missing)
        assert "is not registered" in bad.saw and bad.fix.startswith("kubectl patch validatingwebhookconfiguration")
        assert failing(apply_fix(missing, bad.fix)) == []
        no_validating = copy.deepcopy(healthy)[:1]
        found = failing(no_validating)
        assert len(found) == len(healthy[1]["webhooks"]) and all("is not registered" in f.saw for f in found)
        assert found[0].fix.startswith("echo '") and found[0].fix.endswith("| kubectl create -f -")
        # Any one of their fixes creates the configuration with every webhook it lacks, calling the same server.
        assert len({f.fix for f in found}) == 1
        assert apply_fix(no_validating, found[0].fix) == healthy
        misplaced = copy.deepcopy(healthy)
        moved = misplaced[1]["webhooks"].pop(2)
        moved["reinvocationPolicy"] = "IfNeeded"
        misplaced[0]["webhooks"].append(moved)
        [bad] = failing(misplaced)
        assert f"is in the mutating configuration {naming.MUTATING_CONFIGURATION} (want validating)" in bad.saw
        assert failing(apply_fix(misplaced, bad.fix)) == []
    assert failing([])[0].fix == doctor.INSTALL  # nothing of this version registered: install it


def test_the_rename_fix_copies_the_webhooks_under_the_generated_name() -> None:
    import subprocess

    fix = doctor.webhooks(
        entries(
            [
                {
                    "kind": "MutatingWebhookConfiguration",
                    "metadata": {"name": "zz-gpuctl-mutation"},
                    "webhooks": [{"name": "pod-accelerators.gpustack.ai"}],
                }
            ]
        )
    )[-1].fix
    assert "kubectl get mutatingwebhookconfiguration zz-gpuctl-mutation -o jsonpath='{.webhooks}'" in fix
    assert fix.endswith("&& kubectl delete mutatingwebhookconfiguration zz-gpuctl-mutation")
    # What the shell makes of it, with kubectl's jsonpath answer stubbed by `printf`.
    echo = fix.split(" | ")[0].replace(
        "kubectl get mutatingwebhookconfiguration zz-gpuctl-mutation -o jsonpath='{.webhooks}'",
        "printf '%s' '[{\"name\":\"w\"}]'",
    )
    import json

    out = subprocess.run(["bash", "-c", echo], capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": naming.MUTATING_CONFIGURATION},
        "webhooks": [{"name": "w"}],
    }


def test_a_review_probe_proves_its_webhook_ran_not_only_that_the_object_was_admitted() -> None:
    from gpuctl.core.webhooks import Kind, WebhookContext, review

    pod, default, validate = doctor.review_probes("default")
    chain = {"Pod": Kind.POD, "InstanceType": Kind.INSTANCETYPE}
    for probe in (pod, default):
        answer = review(chain[probe.kind], "CREATE", dict(probe.body), None, WebhookContext())
        assert answer.allowed and answer.mutated is not None and probe.ran(answer.mutated, "")
        assert not probe.ran(dict(probe.body), "")  # admitted unchanged: the webhook was not called
    # The API server writes quantities back in its canonical form: 400000 comes back as 400k.
    folded = review(Kind.POD, "CREATE", dict(pod.body), None, WebhookContext()).mutated
    assert folded is not None
    limits = folded["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu.sliced.units"] == "400000"
    limits["nvidia.com/gpu.sliced.units"] = "400k"
    assert pod.ran(folded, "")
    refused = review(Kind.INSTANCETYPE, "CREATE", dict(validate.body), None, WebhookContext())
    assert not refused.allowed
    message = f'admission webhook "{validate.webhook}" denied the request: {refused.message}'
    assert validate.ran(None, message) and not validate.ran(dict(validate.body), "")
    assert pod.request == "dry-run create Pod default/gpuctl-doctor-probe"


def test_a_webhook_that_did_not_run_is_a_failure_whose_fix_is_the_entry_patch() -> None:
    import copy

    from gpuctl.operator.manifests import webhook_configurations

    configs = copy.deepcopy(webhook_configurations(ca_bundle="Y2E=", url=URL))
    configs[0]["webhooks"][0]["rules"][0]["apiVersions"] = ["v2"]
    found = entries(configs)
    config = (naming.MUTATING_CONFIGURATION,)
    [skipped] = doctor.live_reviews(
        [
            doctor.LiveReview(
                config,
                "dry-run create Pod default/p",
                0.01,
                webhook="pod-accelerators.gpustack.ai",
                ran=False,
                answer="admitted without its change",
            )
        ],
        found,
    )
    assert skipped.status == doctor.FAIL
    assert "pod-accelerators.gpustack.ai did not run (admitted without its change)" in skipped.saw
    [entry] = [f for f in doctor.webhooks(found) if f.status == doctor.FAIL]
    assert skipped.fix == entry.fix
    [called] = doctor.live_reviews(
        [
            doctor.LiveReview(
                config,
                "dry-run create Pod default/p",
                0.01,
                'Internal error occurred: failed calling webhook "pod-accelerators.gpustack.ai": failed to call '
                'webhook: Post "https://gpuctl-operator.gpuctl-system.svc:443/mutate-pod-accelerators?timeout=10s": '
                'no endpoints available for service "gpuctl-operator"',
            )
        ],
        found,
    )
    assert called.status == doctor.FAIL and called.saw.endswith(
        'failed calling webhook "pod-accelerators.gpustack.ai" at '
        "https://gpuctl-operator.gpuctl-system.svc:443/mutate-pod-accelerators: "
        'no endpoints available for service "gpuctl-operator"'
    )


def test_an_accelerated_queue_without_resource_groups_is_named_even_when_held() -> None:
    objects = healthy_pool()
    for o in objects:
        if o["kind"] == "ClusterQueue":
            o["spec"]["resourceGroups"] = []
            o["spec"]["stopPolicy"] = "Hold"
    cluster = MemoryCluster(objects)
    types = {t.name: t for t in read.instancetypes(cluster)}
    [held] = [f for f in doctor.queues(read.cluster_queues(cluster), types, True) if f.check == "queue-resources"]
    assert held.status == doctor.WARN and "on Hold, its pool admits nothing" in held.saw
    assert "kubectl get resourceflavors -l acceleratable.feature.gpustack.ai/nvidia-a10g.count" in held.fix


def test_an_inactive_pool_whose_queue_still_admits_is_a_failure_after_the_grace() -> None:
    from gpuctl.core.instancetypes import parse_instancetype

    objects = healthy_pool()
    [it_obj] = [o for o in objects if o["kind"] == "InstanceType"]
    set_at = "2026-01-01T00:00:00Z"
    it_obj["spec"]["inactive"] = True
    it_obj["metadata"]["managedFields"] = [
        {"manager": "kubectl-patch", "time": set_at, "fieldsV1": {"f:spec": {"f:inactive": {}}}}
    ]
    cluster = MemoryCluster(objects)
    it = parse_instancetype(it_obj)
    queues = read.cluster_queues(cluster)
    set_epoch = time.mktime(time.strptime(set_at, "%Y-%m-%dT%H:%M:%SZ")) - time.timezone
    assert doctor.inactive_pools({it.name: it}, queues, set_epoch + 60, grace_seconds=120) == []
    [late] = doctor.inactive_pools({it.name: it}, queues, set_epoch + 600, grace_seconds=120)
    assert late.status == doctor.FAIL and "(set 10 min ago), yet ClusterQueue" in late.saw
    assert late.fix == f'kubectl patch clusterqueue {it.name} --type merge -p \'{{"spec":{{"stopPolicy":"Hold"}}}}\''
    for o in objects:
        if o["kind"] == "ClusterQueue":
            o["spec"]["stopPolicy"] = "Hold"
    held = read.cluster_queues(MemoryCluster(objects))
    assert doctor.inactive_pools({it.name: it}, held, set_epoch + 600) == []


def test_kueue_fixes_restart_its_deployment_only_where_it_has_one() -> None:
    from gpuctl.core.credits import kueue_resources_config

    config = deployed_kueue_config()
    config["featureGates"]["AssignQueueLabelsForPods"] = True
    for deployed, restart in ((True, "rollout restart deployment"), (False, "restart Kueue's manager where it runs")):
        [bad] = [
            f
            for f in doctor.kueue_configuration(kueue(config), kueue_resources_config(), manager_deployed=deployed)
            if f.status == doctor.FAIL
        ]
        assert restart in bad.fix


def test_an_api_servers_answer_in_bytes_reads_as_text_never_as_a_bytes_repr() -> None:
    from kubernetes.client.exceptions import ApiException

    from gpuctl.cluster import kinds as k
    from gpuctl.cluster.live import LiveSource

    def refusal() -> ApiException:
        exc = ApiException(status=404, reason="Not Found")
        exc.body = b"404 page not found\n"
        return exc

    class Client:
        def call_api(self, *args: Any, **kwargs: Any) -> Any:
            raise refusal()

    live = LiveSource()
    live._client = Client()
    assert live.service_get("gpuctl-system", "gpuctl-operator", 443, "/readyz", 1024) == (404, "404 page not found\n")
    message = str(live._api_error(refusal(), "GET", "/apis/x", k.DEPLOYMENT, None))
    assert "b'" not in message
    forbidden = ApiException(status=403, reason="Forbidden")
    forbidden.body = b"not json: forbidden"
    assert str(live._api_error(forbidden, "GET", "/apis/x", k.DEPLOYMENT, "d")).endswith(": not json: forbidden")


def test_a_queue_that_lost_its_resource_groups_gets_them_back_from_its_pool() -> None:
    """The printed fix is a patch restoring the groups the pool's flavors and nodes derive; applied, the finding is
    gone and no other appears."""
    import shlex

    objects = healthy_pool()
    cluster = MemoryCluster(objects)
    types = {t.name: t for t in read.instancetypes(cluster)}
    flavors, nodes = read.flavors(cluster), {n.name: n for n in read.nodes(cluster)}
    devices = {d.node: d for d in read.devices(cluster)}
    before = doctor.queues(read.cluster_queues(cluster), types, True, flavors, nodes, devices)
    [cq] = [o for o in objects if o["kind"] == "ClusterQueue"]
    kept = json.loads(json.dumps(cq["spec"]["resourceGroups"]))
    cq["spec"]["resourceGroups"] = []
    found = doctor.queues(read.cluster_queues(MemoryCluster(objects)), types, True, flavors, nodes, devices)
    [lost] = [f for f in found if f.check == "queue-resources"]
    assert lost.status == doctor.FAIL and "resourceGroups" in lost.fix and "Hold" not in lost.fix
    words = shlex.split(lost.fix)
    patch = json.loads(words[words.index("-p") + 1])
    cq["spec"].update(patch["spec"])
    assert [
        (f["name"], [(r["name"], r["nominalQuota"]) for r in f["resources"]])
        for f in cq["spec"]["resourceGroups"][0]["flavors"]
    ] == [(f["name"], [(r["name"], r["nominalQuota"]) for r in f["resources"]]) for f in kept[0]["flavors"]]
    after = doctor.queues(read.cluster_queues(MemoryCluster(objects)), types, True, flavors, nodes, devices)
    assert [f.to_dict() for f in after] == [f.to_dict() for f in before]


def test_a_webhook_url_on_the_wrong_port_is_patched_to_the_port_the_operator_serves() -> None:
    """The process runs (its Lease is fresh and says where it serves) but the URLs name another port: the finding's
    fix is the JSON patch of each URL; applied, the finding is gone and no other appears."""
    import copy
    import shlex

    import jsonpatch

    from gpuctl.operator.manifests import webhook_configurations

    now = time.time()
    fresh = lease(2, now)
    serving = dataclasses.replace(fresh, serving_port=9443)
    configs = copy.deepcopy(webhook_configurations(ca_bundle="Y2E=", url="https://127.0.0.1:9444"))
    ns = naming.OPERATOR_NAMESPACE
    found = doctor.operator_health(None, serving, False, ns, now, entries(configs))
    [wrong] = [f for f in found if f.check == "webhook-url"]
    assert wrong.status == doctor.FAIL and "port 9443" in wrong.saw and "https://127.0.0.1:9444" in wrong.saw
    for command in wrong.fix.split(" && "):
        words = shlex.split(command)
        kind, name = words[2], words[3]
        [config] = [c for c in configs if c["kind"].lower() == kind and c["metadata"]["name"] == name]
        patched = jsonpatch.apply_patch(config, json.loads(words[words.index("-p") + 1]))
        configs[configs.index(config)] = patched
    after = doctor.operator_health(None, serving, False, ns, now, entries(configs))
    assert [f.check for f in after] == [f.check for f in found if f.check != "webhook-url"]
    assert all(e.url.startswith("https://127.0.0.1:9443/") for e in entries(configs) if e.ours and e.url)
    # A Lease that does not say where its holder serves proves nothing about the URLs.
    assert not [
        f for f in doctor.operator_health(None, fresh, False, ns, now, entries(configs)) if f.check == "webhook-url"
    ]
