"""``gpuctl doctor`` on the real control plane: a deployment as the design has it passes every check; each injected
fault is reported as a failure with its fix, and applying that fix (the printed command, run by a shell with the
run's kubectl) makes the check pass again.

The operator runs as a process, with ``--leader-elect`` in ``gpuctl-system``; its serving Secret holds the run's CA
(as cert-manager would write it), and its webhooks are registered by URL with that CA. Faults the operator repairs on
its own (a deleted AdmissionCheck, a stale InstanceType status) are injected while it is paused (SIGSTOP).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException
from typer.testing import CliRunner

from gpuctl.cli.main import app
from gpuctl.core import naming
from gpuctl.operator.manifests import webhook_configurations
from testbed.factories import card_row
from testbed.gpucluster import WORKER, WV, GpuPool, condition, create_ready_node, new_pool, wait_for
from testbed.operator_process import Operator, running_operator, serving_secret
from testbed.pki import CertificateAuthority

KUEUE, KV = "kueue.x-k8s.io", "v1beta2"
OURS = ("webhook", "webhook-order", "webhook-endpoint", "webhook-review", "webhook-latency", "admissioncheck")
DEPLOYMENT = (*OURS, "operator-ready", "operator-leader", "kueue-gates", "kueue-resources")


@pytest.fixture(scope="module")
def deployed(control_plane: Any, api: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Operator]:
    """The operator with its serving Secret, its leader Lease and its webhook configurations."""
    core = client.CoreV1Api(api)
    with contextlib.suppress(ApiException):
        core.create_namespace({"metadata": {"name": naming.OPERATOR_NAMESPACE}})
    work = tmp_path_factory.mktemp("doctor-operator")
    with running_operator(control_plane, work, "--leader-elect", f"--namespace={naming.OPERATOR_NAMESPACE}") as op:
        secret = serving_secret(
            base64.b64decode(control_plane.ca_bundle), (work / "tls.crt").read_bytes(), (work / "tls.key").read_bytes()
        )
        core.create_namespaced_secret(naming.OPERATOR_NAMESPACE, secret)
        adm = client.AdmissionregistrationV1Api(api)
        configs = webhook_configurations(ca_bundle=control_plane.ca_bundle, url=op.url)
        adm.create_mutating_webhook_configuration(configs[0])
        adm.create_validating_webhook_configuration(configs[1])
        try:
            yield op
        finally:
            for delete, name in (
                (adm.delete_mutating_webhook_configuration, naming.MUTATING_CONFIGURATION),
                (adm.delete_validating_webhook_configuration, naming.VALIDATING_CONFIGURATION),
            ):
                with contextlib.suppress(ApiException):
                    delete(name)
            with contextlib.suppress(ApiException):
                core.delete_namespaced_secret(naming.OPERATOR_TLS_SECRET, naming.OPERATOR_NAMESPACE)


@contextlib.contextmanager
def paused(op: Operator) -> Iterator[None]:
    """The operator stopped in its tracks (its webhooks and controllers hang) until the block ends."""
    op.proc.send_signal(signal.SIGSTOP)
    try:
        yield
    finally:
        op.proc.send_signal(signal.SIGCONT)


class Doctor:
    def __init__(self, control_plane: Any) -> None:
        self.control_plane = control_plane

    def findings(self, *args: str) -> list[dict[str, Any]]:
        where = [] if "--snapshot" in args else ["--kubeconfig", str(self.control_plane.kubeconfig)]
        result = CliRunner().invoke(app, ["doctor", "-o", "json", *where, *args])
        assert result.exit_code in (0, 3), result.output
        return list(json.loads(result.stdout)["items"])

    def failing(self, check: str, needle: str = "", *args: str) -> list[dict[str, Any]]:
        return [f for f in self.findings(*args) if f["check"] == check and f["status"] == "fail" and needle in f["saw"]]

    def apply(self, fix: str) -> None:
        """Run a printed fix as a user would paste it, with the run's kubectl and credentials."""
        env = {
            **os.environ,
            "PATH": f"{self.control_plane.bin_dir}:{os.environ['PATH']}",
            "KUBECONFIG": str(self.control_plane.kubeconfig),
        }
        done = subprocess.run(["bash", "-c", fix], env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, f"{fix}\n{done.stdout}\n{done.stderr}"


@pytest.fixture()
def doctor(control_plane: Any) -> Doctor:
    return Doctor(control_plane)


@pytest.fixture()
def pool(deployed: Operator, api: Any, test_namespace: str) -> Iterator[GpuPool]:
    p = new_pool(api, test_namespace, nodes=1, cards=4, nominal_cards=4)
    try:
        yield p
    finally:
        p.cleanup()


def deployment_ok(findings: list[dict[str, Any]], pool: GpuPool) -> list[dict[str, Any]]:
    """What is wrong with this deployment and this pool (other tests' leftovers aside)."""
    return [
        f
        for f in findings
        if f["status"] != "ok" and (f["check"] in DEPLOYMENT or pool.name in f["saw"] or pool.nodes[0] in f["saw"])
    ]


def wait_correct(doctor: Doctor, pool: GpuPool, *args: str) -> None:
    """Until doctor finds nothing wrong with the deployment and the pool (the status writer and the fit labels
    settle a new pool first); on a timeout, say what was still wrong."""
    wrong: list[dict[str, Any]] = []

    def correct() -> bool:
        wrong[:] = deployment_ok(doctor.findings(*args), pool)
        return not wrong

    try:
        wait_for("doctor to find the deployment and the pool correct", correct, timeout=60)
    except AssertionError:
        raise AssertionError(json.dumps(wrong, indent=1)) from None


def test_a_correct_deployment_passes_every_check(doctor: Doctor, pool: GpuPool) -> None:
    wait_correct(doctor, pool)
    got = doctor.findings()
    checks = {f["check"] for f in got if f["status"] == "ok"}
    assert set(DEPLOYMENT) <= checks, sorted(set(DEPLOYMENT) - checks)
    ours = [f["saw"] for f in got if f["check"] in ("webhook-endpoint", "webhook-review", "operator-leader")]
    assert any("caBundle verifies the serving certificate" in s for s in ours), ours
    assert any("dry-run create Pod" in s for s in ours) and any("dry-run create InstanceType" in s for s in ours)
    assert any(f"Lease {naming.OPERATOR_NAMESPACE}/{naming.OPERATOR_NAME}" in s for s in ours)


def test_each_injected_fault_fails_with_a_fix_that_makes_it_pass(
    doctor: Doctor, pool: GpuPool, deployed: Operator, api: Any, control_plane: Any
) -> None:
    adm = client.AdmissionregistrationV1Api(api)
    objs = client.CustomObjectsApi(api)
    core = client.CoreV1Api(api)
    wait_correct(doctor, pool)

    # 1. The Pod webhook's failurePolicy flipped to Ignore: the fix is a JSON patch.
    adm.patch_mutating_webhook_configuration(
        naming.MUTATING_CONFIGURATION, [{"op": "replace", "path": "/webhooks/0/failurePolicy", "value": "Ignore"}]
    )
    [bad] = doctor.failing("webhook", "failurePolicy Ignore (want Fail)", "--no-probe")
    doctor.apply(bad["fix"])
    assert not doctor.failing("webhook", "", "--no-probe")

    # 2. A CA bundle that does not verify the serving certificate: the endpoint probe and the API server's dry run
    #    both fail; the fix copies the CA from the operator's serving Secret.
    other_ca = base64.b64encode(CertificateAuthority("some-other-ca").cert_pem).decode()
    count = len(adm.read_mutating_webhook_configuration(naming.MUTATING_CONFIGURATION).webhooks)
    adm.patch_mutating_webhook_configuration(
        naming.MUTATING_CONFIGURATION,
        [{"op": "replace", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": other_ca} for i in range(count)],
    )
    time.sleep(1)  # the API server picks up webhook configurations asynchronously
    found = doctor.findings()
    [endpoint] = [f for f in found if f["check"] == "webhook-endpoint" and f["status"] == "fail"]
    assert "does not verify the serving certificate" in endpoint["saw"]
    # Both dry runs meet a mutating webhook of this configuration (the Pod's and the InstanceType's defaulting).
    reviews = [f for f in found if f["check"] == "webhook-review" and f["status"] == "fail"]
    assert {r["saw"].split(": ")[1] for r in reviews} == {
        "dry-run create Pod default/gpuctl-doctor-probe",
        "dry-run create InstanceType gpuctl-doctor-probe",
    }
    assert all("x509" in r["saw"] or "certificate" in r["saw"] for r in reviews)
    assert all(r["fix"] == endpoint["fix"] for r in reviews)
    doctor.apply(endpoint["fix"])
    wait_for(
        "the endpoint and the dry run to pass with the fixed bundle",
        lambda: (
            not [
                f
                for f in doctor.findings()
                if f["check"] in ("webhook-endpoint", "webhook-review") and f["status"] != "ok"
            ]
        ),
        timeout=30,
    )

    # 3. The pool's queue without the check.
    objs.patch_cluster_custom_object(KUEUE, KV, "clusterqueues", pool.name, {"spec": {"admissionChecksStrategy": None}})
    [bad] = doctor.failing("queue-check", pool.name, "--no-probe")
    doctor.apply(bad["fix"])
    assert not doctor.failing("queue-check", pool.name, "--no-probe")

    # 4. A feature gate flipped in Kueue's Configuration: the fix says which gate to set in which ConfigMap.
    cm = core.read_namespaced_config_map(naming.KUEUE_CONFIGMAP, naming.KUEUE_NAMESPACE)
    original = cm.data[naming.KUEUE_CONFIGMAP_KEY]
    config = yaml.safe_load(original)
    config["featureGates"]["AssignQueueLabelsForPods"] = True
    core.patch_namespaced_config_map(
        naming.KUEUE_CONFIGMAP,
        naming.KUEUE_NAMESPACE,
        {"data": {naming.KUEUE_CONFIGMAP_KEY: yaml.safe_dump(config, sort_keys=False)}},
    )
    try:
        [bad] = doctor.failing("kueue-gates", "AssignQueueLabelsForPods is enabled", "--no-probe")
        assert "featureGates: {AssignQueueLabelsForPods: false}" in bad["fix"]
        assert f"edit configmap {naming.KUEUE_CONFIGMAP}" in bad["fix"]
        # Kueue's manager runs as a process here, not as its Deployment: no rollout restart of what does not exist.
        assert "rollout restart" not in bad["fix"] and "restart Kueue's manager where it runs" in bad["fix"]
        config["featureGates"]["AssignQueueLabelsForPods"] = False  # what the edit sets
        core.patch_namespaced_config_map(
            naming.KUEUE_CONFIGMAP,
            naming.KUEUE_NAMESPACE,
            {"data": {naming.KUEUE_CONFIGMAP_KEY: yaml.safe_dump(config, sort_keys=False)}},
        )
        assert not doctor.failing("kueue-gates", "", "--no-probe")
    finally:
        core.patch_namespaced_config_map(
            naming.KUEUE_CONFIGMAP, naming.KUEUE_NAMESPACE, {"data": {naming.KUEUE_CONFIGMAP_KEY: original}}
        )

    # 5. The AdmissionCheck deleted while the operator is down. Kueue's finalizer keeps it while a queue references
    #    it (doctor reports it Terminating), so the queues let go of it first. The fix recreates it; once the operator
    #    runs again it is Active, and the pool's queue, reported without it, takes it back by its own fix.
    def referencing() -> list[str]:
        queues = objs.list_cluster_custom_object(KUEUE, KV, "clusterqueues")["items"]
        return [
            q["metadata"]["name"]
            for q in queues
            if naming.NODE_DEVICES_CHECK
            in [c.get("name") for c in ((q["spec"].get("admissionChecksStrategy") or {}).get("admissionChecks") or [])]
        ]

    detached = referencing()
    assert pool.name in detached
    try:
        with paused(deployed):
            objs.delete_cluster_custom_object(KUEUE, KV, "admissionchecks", naming.NODE_DEVICES_CHECK)
            [terminating] = doctor.failing("admissioncheck", "is being deleted", "--no-probe")
            assert "finalizer" in terminating["saw"]
            for name in detached:
                objs.patch_cluster_custom_object(
                    KUEUE, KV, "clusterqueues", name, {"spec": {"admissionChecksStrategy": None}}
                )
            wait_for(
                "Kueue to let the AdmissionCheck go",
                lambda: doctor.failing("admissioncheck", "does not exist", "--no-probe"),
            )
            [bad] = doctor.failing("admissioncheck", "does not exist", "--no-probe")
            doctor.apply(bad["fix"])
            [inactive] = doctor.failing("admissioncheck", "", "--no-probe")
            assert "is not Active" in inactive["saw"]  # it exists again; only the paused operator activates it
        wait_for("the recreated AdmissionCheck Active", lambda: not doctor.failing("admissioncheck", "", "--no-probe"))
        [bad] = wait_for(
            "the pool's queue reported without the check",
            lambda: doctor.failing("queue-check", pool.name, "--no-probe"),
        )
        doctor.apply(bad["fix"])
        assert not doctor.failing("queue-check", pool.name, "--no-probe")
    finally:
        for name in detached:
            if name != pool.name:
                with contextlib.suppress(ApiException):
                    objs.patch_cluster_custom_object(
                        KUEUE,
                        KV,
                        "clusterqueues",
                        name,
                        {
                            "spec": {
                                "admissionChecksStrategy": {"admissionChecks": [{"name": naming.NODE_DEVICES_CHECK}]}
                            }
                        },
                    )

    # 6. A stale InstanceType status, while the operator (its writer, which would rewrite it) is stopped: doctor shows
    #    both figures and names the writer, never a patch of the status it owns; once the writer runs, it agrees.
    with paused(deployed):
        objs.patch_cluster_custom_object_status(
            WORKER, WV, "instancetypes", pool.name, {"status": {"accelerator": {"remaining": 99}}}
        )
        [stale] = [
            f
            for f in doctor.findings("--no-probe")
            if f["check"] == "shadow-view" and pool.name in f["saw"] and "accelerator.remaining" in f["saw"]
        ]
        assert stale["status"] == "warn" and "published 99, gpuctl computes" in stale["saw"]
        assert "kubectl patch" not in stale["fix"] and "logs" in stale["fix"]
    wait_for(
        "the status writer to write the views again",
        lambda: not [f for f in doctor.findings("--no-probe") if f["check"] == "shadow-view" and pool.name in f["saw"]],
        timeout=60,
    )

    # 7. A Workload evicted and still carrying a verdict: Kueue evicts it when its queue drains and resets the check
    #    to Pending in the same write; a verdict written after that reset, before the quota is released, is the
    #    deadlock the design warns about.
    name = pool.submit("evicted-verdict", {"nvidia.com/gpu": "1"})
    wait_for(
        "the Workload admitted", lambda: (condition(pool.workload(name), "Admitted") or {}).get("status") == "True"
    )
    objs.patch_cluster_custom_object(KUEUE, KV, "clusterqueues", pool.name, {"spec": {"stopPolicy": "HoldAndDrain"}})
    try:
        wait_for(
            "Kueue to evict it and reset the check",
            lambda: (
                (condition(pool.workload(name), "Evicted") or {}).get("status") == "True"
                and pool.workload(name)["status"]["admissionChecks"][0]["state"] == "Pending"
            ),
        )
        pool.set_check(name, "Retry", "a verdict written after Kueue's reset")
        [bad] = doctor.failing("evicted-verdict", name, "--no-probe")
        doctor.apply(bad["fix"])
        assert not doctor.failing("evicted-verdict", name, "--no-probe")
        [state] = pool.workload(name)["status"]["admissionChecks"]
        assert state["state"] == "Pending"
    finally:
        objs.patch_cluster_custom_object(KUEUE, KV, "clusterqueues", pool.name, {"spec": {"stopPolicy": "None"}})

    # 8. The mutating configuration renamed to sort after Kueue's. The printed fix registers its webhooks (by URL,
    #    as this run registers them) under the generated name and deletes the renamed one.
    body = adm.read_mutating_webhook_configuration(naming.MUTATING_CONFIGURATION)
    body.metadata = client.V1ObjectMeta(name="zz-" + naming.MUTATING_CONFIGURATION)
    adm.create_mutating_webhook_configuration(body)
    adm.delete_mutating_webhook_configuration(naming.MUTATING_CONFIGURATION)
    try:
        [bad] = doctor.failing("webhook-order", "", "--no-probe")
        doctor.apply(bad["fix"])
        assert not doctor.failing("webhook-order", "", "--no-probe")
        [registered] = adm.read_mutating_webhook_configuration(naming.MUTATING_CONFIGURATION).webhooks[:1]
        assert registered.client_config.url.startswith(deployed.url)
    finally:
        with contextlib.suppress(ApiException):
            adm.delete_mutating_webhook_configuration("zz-" + naming.MUTATING_CONFIGURATION)
        with contextlib.suppress(ApiException):
            adm.create_mutating_webhook_configuration(
                webhook_configurations(ca_bundle=control_plane.ca_bundle, url=deployed.url)[0]
            )
    wait_correct(doctor, pool)


def published(objs: client.CustomObjectsApi, name: str) -> dict[str, Any]:
    status = objs.get_cluster_custom_object(WORKER, WV, "instancetypes", name).get("status") or {}
    return {k: status.get(k) for k in ("accelerator", "acceleratorShared", "acceleratorSliced")}


def views_of(control_plane: Any, name: str, *args: str) -> dict[str, Any]:
    result = CliRunner().invoke(
        app, ["views", name, "-o", "json", "--kubeconfig", str(control_plane.kubeconfig), *args]
    )
    assert result.exit_code == 0, result.output
    [item] = json.loads(result.stdout)["items"]
    return dict(item)


def test_the_faults_found_since_each_fail_with_a_fix_that_makes_them_pass(
    doctor: Doctor, pool: GpuPool, deployed: Operator, api: Any, control_plane: Any
) -> None:
    adm = client.AdmissionregistrationV1Api(api)
    objs = client.CustomObjectsApi(api)
    core = client.CoreV1Api(api)
    wait_correct(doctor, pool)

    # 9. A Devices object whose Node is gone: left out of the views and the published status, named by
    #    `views --published` and doctor, and removed by doctor's fix. While its Node exists, it counts.
    before = views_of(control_plane, pool.name)
    status_before = published(objs, pool.name)
    gone = f"{pool.nodes[0]}-gone"
    pool.write_ledger(gone, [card_row(c) for c in range(pool.cards)])
    [orphan] = wait_for(
        "doctor to name the orphan",
        lambda: [f for f in doctor.findings("--no-probe") if f["check"] == "orphaned-devices" and gone in f["saw"]],
    )
    assert orphan["status"] == "warn" and orphan["saw"].startswith(f"orphaned Devices {gone}: no Node {gone}")
    shown = views_of(control_plane, pool.name, "--published")
    assert {k: shown[k] for k in before} == before
    assert shown["orphanedDevices"] == [{"name": gone, "fix": f"kubectl delete devices {gone}"}]
    assert shown["differences"] == []
    create_ready_node(api, gone, pool.node_labels(), {"cpu": "8", "pods": "110"})
    try:
        wait_for(
            "the status writer to count the node's cards once its Node exists",
            lambda: (
                published(objs, pool.name)["accelerator"]["capacity"]
                == status_before["accelerator"]["capacity"] + pool.cards
            ),
        )
        assert views_of(control_plane, pool.name)["accelerator"]["capacity"] == before["accelerator"]["capacity"] + 4
    finally:
        core.delete_node(gone)
    wait_for("the status writer to drop it with its Node", lambda: published(objs, pool.name) == status_before)
    assert views_of(control_plane, pool.name) == before
    doctor.apply(orphan["fix"])
    assert not [f for f in doctor.findings("--no-probe") if f["check"] == "orphaned-devices" and gone in f["saw"]]

    # 10. An InstanceType set inactive whose queue never went to Hold (no InstanceType reconciler runs here): within
    #     the grace period nothing is said; after it, the fix holds the queue.
    objs.patch_cluster_custom_object(WORKER, WV, "instancetypes", pool.name, {"spec": {"inactive": True}})
    try:
        assert not doctor.failing("pool-inactive", pool.name, "--no-probe")
        [bad] = doctor.failing("pool-inactive", pool.name, "--no-probe", "--inactive-grace", "0")
        assert f"yet ClusterQueue {pool.name} admits (stopPolicy None)" in bad["saw"]
        doctor.apply(bad["fix"])
        assert not doctor.failing("pool-inactive", pool.name, "--no-probe", "--inactive-grace", "0")
        queue = objs.get_cluster_custom_object(KUEUE, KV, "clusterqueues", pool.name)
        assert queue["spec"]["stopPolicy"] == "Hold"
    finally:
        objs.patch_cluster_custom_object(WORKER, WV, "instancetypes", pool.name, {"spec": {"inactive": False}})
        objs.patch_cluster_custom_object(KUEUE, KV, "clusterqueues", pool.name, {"spec": {"stopPolicy": "None"}})

    # 11. An accelerated queue emptied of its resource groups, then held: it admits nothing, and doctor says so.
    queue = objs.get_cluster_custom_object(KUEUE, KV, "clusterqueues", pool.name)
    groups = queue["spec"]["resourceGroups"]
    objs.patch_cluster_custom_object(
        KUEUE, KV, "clusterqueues", pool.name, {"spec": {"resourceGroups": [], "stopPolicy": "Hold"}}
    )
    try:
        [held] = [f for f in doctor.findings("--no-probe") if f["check"] == "queue-resources" and pool.name in f["saw"]]
        assert held["status"] == "warn" and "on Hold, its pool admits nothing" in held["saw"]
    finally:
        objs.patch_cluster_custom_object(
            KUEUE, KV, "clusterqueues", pool.name, {"spec": {"resourceGroups": groups, "stopPolicy": "None"}}
        )
    assert not [f for f in doctor.findings("--no-probe") if f["check"] == "queue-resources" and pool.name in f["saw"]]

    # 12. The Pod webhook's rule on an API version no Pod has: the API server never calls it, every Pod is admitted
    #     unfolded. The registry comparison and the live dry run both fail; the printed patch restores the rule.
    [pod_index] = [
        i
        for i, w in enumerate(adm.read_mutating_webhook_configuration(naming.MUTATING_CONFIGURATION).webhooks)
        if w.name == "pod-accelerators.gpustack.ai"
    ]
    adm.patch_mutating_webhook_configuration(
        naming.MUTATING_CONFIGURATION,
        [{"op": "replace", "path": f"/webhooks/{pod_index}/rules/0/apiVersions", "value": ["v2"]}],
    )
    time.sleep(1)  # the API server picks up webhook configurations asynchronously
    found = doctor.findings()
    [rule] = [f for f in found if f["check"] == "webhook" and f["status"] == "fail"]
    assert '"apiVersions":["v2"]' in rule["saw"] and '"apiVersions":["v1"]' in rule["saw"]
    [unfolded] = [f for f in found if f["check"] == "webhook-review" and f["status"] == "fail"]
    assert "pod-accelerators.gpustack.ai did not run (admitted without its change)" in unfolded["saw"]
    assert unfolded["fix"] == rule["fix"]
    doctor.apply(rule["fix"])
    wait_for(
        "the webhook and the dry run to pass with the rule restored",
        lambda: (
            not [f for f in doctor.findings() if f["check"] in ("webhook", "webhook-review") and f["status"] != "ok"]
        ),
        timeout=30,
    )

    # 13. The Workload webhook's matchConditions removed, then never true: each differs from the registry, and the
    #     patch puts the registry's condition back.
    [fit] = [
        i
        for i, w in enumerate(adm.read_mutating_webhook_configuration(naming.MUTATING_CONFIGURATION).webhooks)
        if w.name == "workload-fit.gpustack.ai"
    ]
    for breaking in (
        [{"op": "remove", "path": f"/webhooks/{fit}/matchConditions"}],
        [{"op": "replace", "path": f"/webhooks/{fit}/matchConditions/0/expression", "value": "false"}],
    ):
        adm.patch_mutating_webhook_configuration(naming.MUTATING_CONFIGURATION, breaking)
        [bad] = doctor.failing("webhook", "workload-fit.gpustack.ai", "--no-probe")
        assert "matchConditions" in bad["saw"] and "(want [{" in bad["saw"]
        doctor.apply(bad["fix"])
        assert not doctor.failing("webhook", "", "--no-probe")

    # 14. A webhook taken out of the URL-registered configuration: the fix registers it again by URL.
    validating = adm.read_validating_webhook_configuration(naming.VALIDATING_CONFIGURATION)
    [gone_index] = [i for i, w in enumerate(validating.webhooks) if w.name == "instance-validate.gpustack.ai"]
    adm.patch_validating_webhook_configuration(
        naming.VALIDATING_CONFIGURATION, [{"op": "remove", "path": f"/webhooks/{gone_index}"}]
    )
    [bad] = doctor.failing("webhook", "instance-validate.gpustack.ai is not registered", "--no-probe")
    assert deployed.url in bad["fix"] and "deploy/base" not in bad["fix"]
    doctor.apply(bad["fix"])
    assert not doctor.failing("webhook", "", "--no-probe")
    wait_correct(doctor, pool)


def test_a_dump_carries_what_doctor_reads_of_the_deployment(
    doctor: Doctor, pool: GpuPool, control_plane: Any, api: Any, tmp_path: Path
) -> None:
    wait_correct(doctor, pool)
    out = tmp_path / "dump"
    result = CliRunner().invoke(app, ["dump", str(out), "--kubeconfig", str(control_plane.kubeconfig)])
    assert result.exit_code == 0, result.output
    kinds = {o["kind"] for o in json.loads((out / "deployment.json").read_text())["items"]}
    assert {"ConfigMap", "Lease"} <= kinds
    live = {(f["check"], f["status"]) for f in doctor.findings("--no-probe") if f["check"] in DEPLOYMENT}
    # Read once the dump is older than the Lease's duration: its renewal is judged at the dump's own time.
    [record] = json.loads((out / "dump.json").read_text())["items"]
    lease = client.CoordinationV1Api(api).read_namespaced_lease(naming.OPERATOR_NAME, naming.OPERATOR_NAMESPACE)
    time.sleep(lease.spec.lease_duration_seconds + 1)
    offline = {(f["check"], f["status"]) for f in doctor.findings("--snapshot", str(out)) if f["check"] in DEPLOYMENT}
    assert record["kind"] == "Dump" and record["metadata"]["creationTimestamp"]
    assert ("operator-leader", "ok") in offline
    assert offline == live


def test_with_the_operator_stopped_doctor_names_the_webhook_not_the_api_server(
    deployed: Operator, control_plane: Any, tmp_path: Path
) -> None:
    """The operator stopped (SIGSTOP): its endpoint takes connections and answers nothing. doctor probes it and
    sends its dry runs side by side, each bounded by the webhook's own timeout, and blames the webhook. How long it
    takes is measured in `make bench`, not asserted here (the guard below only stops a hang)."""
    with paused(deployed):
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                "from gpuctl.cli.startup import run; run()",
                "doctor",
                "-o",
                "json",
                "--kubeconfig",
                str(control_plane.kubeconfig),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=Path(__file__).resolve().parents[2],
        )
    assert done.returncode == 3, done.stderr
    findings = json.loads(done.stdout)["items"]
    failing = [f for f in findings if f["status"] == "fail"]
    reviews = [f for f in failing if f["check"] == "webhook-review"]
    assert reviews and all('failed calling webhook "' in f["saw"] for f in reviews), reviews
    assert any("pod-accelerators.gpustack.ai" in f["saw"] for f in reviews)
    assert any(f["check"] == "webhook-endpoint" for f in failing)
    assert not any("cannot reach the API server" in f["saw"] for f in findings)
    assert "Traceback" not in done.stderr and "_ssl.c" not in done.stdout + done.stderr


def test_version_finds_the_operator_outside_the_cluster_as_doctor_does(deployed: Operator, control_plane: Any) -> None:
    """No Deployment: the operator runs as a process, found by its leader Lease (which records its version) and the
    webhook URL it is called at."""
    from gpuctl import __version__

    args = ["version", "--show-cluster", "--kubeconfig", str(control_plane.kubeconfig)]
    wait_for(
        "the leader Lease",
        lambda: json.loads(CliRunner().invoke(app, [*args, "-o", "json"]).stdout)["operator"].get("leader"),
        timeout=30,
    )
    data = json.loads(CliRunner().invoke(app, [*args, "-o", "json"]).stdout)
    found = data["operator"]
    assert data["clientVersion"]["gitVersion"] == __version__ and data["serverVersion"]["gitVersion"].startswith("v")
    assert found["runs"] == "process" and found["version"] == __version__
    assert found["webhooks"] == [deployed.url] and found["leader"]["current"] is True
    text = CliRunner().invoke(app, args).stdout
    assert f"operator {__version__} (outside the cluster: webhooks called at {deployed.url}" in text
    assert "not installed" not in text and "not found" not in text
