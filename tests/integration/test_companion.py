"""Beside GPUStack's worker, on the real control plane: a stand-in of the worker (its CRDs — the suite's are
GPUStack's schemas —, its webhook configurations by its names, its two checks, its Lease and Deployment; statuses,
fit labels and verdicts written in its shapes), the companion installed as the README says and run as its own
service account, and the standalone operator refused.

- The companion changes nothing the worker owns: every CRD, webhook configuration, AdmissionCheck, InstanceType
  status, Node label and Instance is as it was, and none names gpuctl as a field manager.
- A cluster in agreement reports no disagreement; a planted one (a published EX one card too high, a Ready where
  the ledger says Retry, a stale fit label) is reported by metric, Event and doctor, each with both values.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from typer.testing import CliRunner

from gpuctl.cli.main import app
from gpuctl.core import gpustack, naming
from gpuctl.core.units import M
from testbed import standin
from testbed.gpucluster import KUEUE, KV, WORKER, WV, GpuPool, new_pool, wait_for
from testbed.operator_process import free_port, stop

ROOT = Path(__file__).resolve().parents[2]
SA = f"system:serviceaccount:{naming.OPERATOR_NAMESPACE}:{naming.OPERATOR_NAME}"


def kubectl(control_plane: Any, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(control_plane.bin_dir / "kubectl"), "--kubeconfig", str(control_plane.kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )


@pytest.fixture(scope="module")
def worker(control_plane: Any, api: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[standin.Worker]:
    w = standin.Worker(api, control_plane, tmp_path_factory.mktemp("gpustack-worker"))
    w.install()
    try:
        yield w
    finally:
        w.remove()


@pytest.fixture(scope="module")
def installed(control_plane: Any) -> Iterator[None]:
    """deploy/companion applied as the README says (its objects removed after; its namespace kept, as the suite keeps
    namespaces: the test control plane has no controller to finish removing one)."""
    applied = kubectl(control_plane, "apply", "--server-side", "-k", "deploy/companion")
    assert applied.returncode == 0, applied.stderr
    try:
        yield
    finally:
        rendered = kubectl(control_plane, "kustomize", "deploy/companion").stdout
        import yaml

        kept = [d for d in yaml.safe_load_all(rendered) if d and d["kind"] != "Namespace"]
        subprocess.run(
            [
                str(control_plane.bin_dir / "kubectl"),
                "--kubeconfig",
                str(control_plane.kubeconfig),
                "delete",
                "--ignore-not-found",
                "-f",
                "-",
            ],
            input=yaml.safe_dump_all(kept),
            capture_output=True,
            text=True,
            timeout=120,
        )


@pytest.fixture(scope="module")
def pool(api: Any, test_namespace: str, worker: standin.Worker) -> Iterator[GpuPool]:
    """One node of two cards, its queue referencing both of GPUStack's checks; statuses and fit labels as the worker
    writes them."""
    p = new_pool(api, test_namespace, nodes=1, cards=2)
    objs = client.CustomObjectsApi(api)
    objs.patch_cluster_custom_object(
        KUEUE,
        KV,
        "clusterqueues",
        p.name,
        {
            "spec": {
                "admissionChecksStrategy": {
                    "admissionChecks": [{"name": naming.NODE_DEVICES_CHECK}, {"name": gpustack.JOINT_CHECK}]
                }
            }
        },
    )
    worker.publish_status(p.name)
    worker.publish_fit_labels(p.nodes[0])
    try:
        yield p
    finally:
        p.cleanup()


def owned(api: Any, pool: GpuPool) -> dict[str, Any]:
    """Every object GPUStack's worker owns that the companion could touch, as stored."""
    objs = client.CustomObjectsApi(api)
    ext = client.ApiextensionsV1Api(api)
    adm = client.AdmissionregistrationV1Api(api)
    crds = {
        name: ext.read_custom_resource_definition(name).to_dict()
        for name in ("devices.worker.gpustack.ai", "instances.worker.gpustack.ai", "instancetypes.worker.gpustack.ai")
    }
    return {
        "crds": {n: (c["metadata"]["resource_version"], c["spec"]) for n, c in crds.items()},
        "webhooks": [
            adm.read_mutating_webhook_configuration(gpustack.MUTATING_CONFIGURATION).to_dict(),
            adm.read_validating_webhook_configuration(gpustack.VALIDATING_CONFIGURATION).to_dict(),
        ],
        "checks": [objs.get_cluster_custom_object(KUEUE, KV, "admissionchecks", name) for name in gpustack.CHECKS],
        "instancetype": objs.get_cluster_custom_object(WORKER, WV, "instancetypes", pool.name),
        "nodes": {n: client.CoreV1Api(api).read_node(n).to_dict()["metadata"] for n in pool.nodes},
        "instances": objs.list_namespaced_custom_object(WORKER, WV, pool.namespace, "instances")["items"],
    }


def managers(obj: Any) -> set[str]:
    meta = obj.get("metadata") or {}
    fields = meta.get("managedFields") or meta.get("managed_fields") or []
    return {str(f.get("manager")) for f in fields}


@contextlib.contextmanager
def companion(control_plane: Any, work: Path, *args: str, as_account: bool = True) -> Iterator[str]:
    """The companion as its own service account (a client certificate of that name; ``as_account=False``: as an
    administrator, so that a write its code would make is not stopped by its role), with probes and metrics on a
    plain HTTP port: yields that port's base URL."""
    kubeconfig = (
        control_plane.write_kubeconfig(work / "companion.kubeconfig", SA, ["system:serviceaccounts"])
        if as_account
        else control_plane.kubeconfig
    )
    port = free_port()
    log = work / "companion.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gpuctl.operator",
                "--mode=companion",
                f"--kubeconfig={kubeconfig}",
                "--bind=127.0.0.1",
                f"--port={port}",
                "--namespace=gpuctl-system",
                "--leader-elect",
                *args,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for("the companion ready", lambda: _get(base, "/readyz", proc, log)[0] == 200, timeout=60)
        yield base
    finally:
        stop(proc)
        sys.stdout.write("\n--- companion log ---\n" + log.read_text()[-6000:])


def _get(base: str, path: str, proc: Any = None, log: Path | None = None) -> tuple[int, str]:
    import urllib.error
    import urllib.request

    if proc is not None and proc.poll() is not None and log is not None:
        raise AssertionError(f"the companion exited: {log.read_text()[-3000:]}")
    try:
        with urllib.request.urlopen(base + path, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError:
        return 0, ""


def shadow_series(base: str) -> list[dict[str, str]]:
    """The ``gpuctl_shadow_disagreement`` series the companion exports, as label maps."""
    _, text = _get(base, "/metrics")
    out = []
    for line in text.splitlines():
        if line.startswith("gpuctl_shadow_disagreement{"):
            labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', line[line.index("{") : line.rindex("}")]))
            out.append(labels)
    return out


def shadow_events(api: Any, namespaces: list[str]) -> list[Any]:
    events = client.EventsV1Api(api)
    return [e for ns in namespaces for e in events.list_namespaced_event(ns).items if e.reason == "ShadowDisagreement"]


def test_the_standalone_refuses_to_start_beside_gpustacks_worker(control_plane: Any, worker: standin.Worker) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuctl.operator",
            "--mode=standalone",
            f"--kubeconfig={control_plane.kubeconfig}",
            "--insecure-http",
            "--bind=127.0.0.1",
            f"--port={free_port()}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert done.returncode == 1
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("gpuctl-operator: GPUStack's worker runs on this cluster (Lease gpustack-system/")
    assert "webhook configurations gpustack-worker-mutation, gpustack-worker-validation" in line
    assert "--mode companion, deploy/companion" in line


def test_the_companion_installs_beside_the_worker_and_changes_nothing_it_owns(
    control_plane: Any, api: Any, installed: None, worker: standin.Worker, pool: GpuPool, tmp_path: Path
) -> None:
    pool.instance("notebook")
    before = owned(api, pool)
    # As an administrator: what it leaves alone it leaves by its code, not only by its role.
    with companion(control_plane, tmp_path, "--shadow-settle=0", as_account=False) as base:
        # The cluster moves under it: a Workload reserves quota, the worker judges it (Ready: a card is free).
        name = pool.submit("fits", {"nvidia.com/gpu": "1"})
        wait_for(
            "quota reserved",
            lambda: any(
                c.get("type") == "QuotaReserved" and c.get("status") == "True"
                for c in (pool.workload(name).get("status") or {}).get("conditions") or []
            ),
        )
        worker.judge(pool.namespace, name, "Ready", 'the node "x" Kueue assigned has enough free cards')
        wait_for("the companion to have judged it", lambda: "gpuctl_shadow_disagreements" in _get(base, "/metrics")[1])
        time.sleep(3)  # what it would write, it would have written by now
        _, text = _get(base, "/metrics")
        counts = dict(re.findall(r'gpuctl_shadow_disagreements\{kind="([\w-]+)"\} ([\d.]+)', text))
        assert counts == {"view": "0.0", "verdict": "0.0", "fit-label": "0.0", "stop": "0.0"}, text[-2000:]
        assert shadow_events(api, [pool.namespace, "default"]) == []
        after = owned(api, pool)
    assert after == before
    gpuctl_managers = {naming.OPERATOR_FIELD_MANAGER, "gpuctl", naming.INSTANCE_STOP_MANAGER}
    for obj in (after["instancetype"], *after["checks"], *after["instances"]):
        assert not managers(obj) & gpuctl_managers
    for meta in after["nodes"].values():
        assert not {str(f.get("manager")) for f in meta.get("managed_fields") or []} & gpuctl_managers


def test_planted_disagreements_are_reported_by_metric_event_and_doctor(
    control_plane: Any, api: Any, installed: None, worker: standin.Worker, pool: GpuPool, tmp_path: Path
) -> None:
    objs = client.CustomObjectsApi(api)
    node = pool.nodes[0]
    with companion(control_plane, tmp_path, "--shadow-settle=0") as base:
        # 1. A Ready where the ledger says Retry: both cards held outside Kueue, yet the worker writes Ready.
        for i in range(2):
            pool.allocated_pod(f"held-{i}", node, [{"id": f"GPU-{i:04d}", "mode": 1, "allocated": M}])
        name = pool.submit("squeezed", {"nvidia.com/gpu": "1"})
        wait_for(
            "quota reserved",
            lambda: any(
                c.get("type") == "QuotaReserved" and c.get("status") == "True"
                for c in (pool.workload(name).get("status") or {}).get("conditions") or []
            ),
        )
        # The joint check holds it (planted Pending): it stays reserved, unadmitted, judged by doctor too.
        worker.judge(pool.namespace, name, "Ready", "a verdict the ledger does not back", joint="Pending")
        # 2. A published EX one card too high.
        status = objs.get_cluster_custom_object(WORKER, WV, "instancetypes", pool.name)["status"]
        ex = status["accelerator"]
        planted_ex = str(int(ex["remaining"]) + 1)
        objs.patch_cluster_custom_object_status(
            WORKER, WV, "instancetypes", pool.name, {"status": {"accelerator": {**ex, "remaining": planted_ex}}}
        )
        # 3. A stale fit label.
        key = naming.shared_fit_label(pool.accelerator_key)
        client.CoreV1Api(api).patch_node(node, {"metadata": {"labels": {key: "0"}}})

        def reported() -> dict[str, dict[str, str]] | None:
            series = {s["kind"]: s for s in shadow_series(base)}
            return series if {"view", "verdict", "fit-label"} <= set(series) else None

        series = wait_for("the three disagreements in the metric", reported, timeout=60)
        assert (series["view"]["field"], series["view"]["published"]) == ("accelerator.remaining", planted_ex)
        assert series["view"]["computed"] == ex["remaining"]
        assert (series["verdict"]["object"], series["verdict"]["published"], series["verdict"]["computed"]) == (
            f"Workload/{pool.namespace}/{name}",
            "Ready",
            "Retry",
        )
        assert (series["fit-label"]["field"], series["fit-label"]["published"], series["fit-label"]["computed"]) == (
            key,
            "0",
            "2",
        )
        # One Event per object and change, each with both values.
        events = wait_for(
            "the three Events", lambda: (e := shadow_events(api, [pool.namespace, "default"])) and len(e) >= 3 and e
        )
        notes = {e.regarding.kind: e.note for e in events}
        assert f"GPUStack publishes {planted_ex}, gpuctl computes {ex['remaining']}" in notes["InstanceType"]
        assert "GPUStack publishes Ready, gpuctl computes Retry" in notes["Workload"]
        assert "GPUStack publishes 0, gpuctl computes 2" in notes["Node"]
        assert len(events) == 3
    # doctor reads the same cluster and reports the same three, with both values.
    result = CliRunner().invoke(
        app, ["doctor", "-o", "json", "--no-probe", "--kubeconfig", str(control_plane.kubeconfig)]
    )
    items = json.loads(result.stdout)["items"]
    shadow: dict[str, str] = {}
    for i in items:
        if i["check"].startswith("shadow-") and (pool.name in i["saw"] or node in i["saw"] or name in i["saw"]):
            shadow[i["check"]] = shadow.get(i["check"], "") + i["saw"] + "\n"
    assert f"published {planted_ex}, gpuctl computes {ex['remaining']}" in shadow["shadow-view"]
    assert "published Ready, gpuctl computes Retry" in shadow["shadow-verdict"]
    assert "published 0, gpuctl computes 2" in shadow["shadow-fit-label"]
    operator_mode = [i for i in items if i["check"] == "operator-mode"]
    assert operator_mode and operator_mode[0]["status"] == "ok" and "GPUStack's worker runs" in operator_mode[0]["saw"]


def test_beside_the_worker_simulate_reads_its_webhooks_and_lease(
    control_plane: Any, worker: standin.Worker, pool: GpuPool, tmp_path: Path
) -> None:
    """The webhooks a Pod meets and the check that judges it are the worker's: read live, a Pod in the pool's queue
    is reviewed by them (not "unreviewed" for want of gpuctl's own names), and gate 3 is served while the worker
    renews its Lease."""
    import yaml

    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "probe", "namespace": pool.namespace, "labels": {naming.LABEL_QUEUE_NAME: pool.entrance}},
        "spec": {"containers": [{"name": "main", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
    }
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(yaml.safe_dump(pod))
    result = CliRunner().invoke(
        app, ["simulate", "-f", str(manifest), "-o", "json", "--kubeconfig", str(control_plane.kubeconfig)]
    )
    answer = json.loads(result.stdout)
    gate1, gate3 = answer["gates"][0], answer["gates"][2]
    assert gate1["verdict"] == "passed" and "unreviewed" not in gate1["summary"], gate1
    assert "does not run" not in json.dumps(gate3), gate3
