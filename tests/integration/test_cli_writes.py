"""The write side on the real control plane with Kueue: objects really change (or, with --dry-run=server, really do
not), conflicts are retried, bulk stops report per object, and a drain evicts and ends Inactive."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from typer.testing import CliRunner

from gpuctl.cli.main import app
from gpuctl.cluster import kinds
from gpuctl.cluster.live import Connection, LiveSource
from gpuctl.cluster.writer import DryRun, Result, apply_plan
from gpuctl.core.lifecycle import plan_hold
from testbed.gpucluster import KUEUE, KV, WORKER, WV, GpuPool, condition, new_pool, wait_for

runner = CliRunner()


def gpuctl(control_plane: Any, *args: str, stdin: str | None = None) -> tuple[int, str, str]:
    result = runner.invoke(app, [*args, "--kubeconfig", str(control_plane.kubeconfig)], input=stdin)
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture(scope="module")
def pool(api: Any, test_namespace: str) -> Iterator[GpuPool]:
    p = new_pool(api, test_namespace, check=False)
    try:
        yield p
    finally:
        p.cleanup()


def instancetype_obj(pool: GpuPool) -> dict[str, Any]:
    result: dict[str, Any] = pool.objs.get_cluster_custom_object(WORKER, WV, "instancetypes", pool.name)
    return result


def cluster_queue(pool: GpuPool) -> dict[str, Any]:
    result: dict[str, Any] = pool.objs.get_cluster_custom_object(
        "kueue.x-k8s.io", "v1beta2", "clusterqueues", pool.name
    )
    return result


def test_hold_dry_run_server_changes_nothing_then_hold_changes_and_rerun_is_unchanged(
    pool: GpuPool, control_plane: Any
) -> None:
    code, out, _ = gpuctl(control_plane, "hold", pool.name, "--dry-run", "server")
    assert code == 0 and "would change" in out and "server dry run" in out
    assert not (instancetype_obj(pool)["spec"].get("inactive"))
    code, out, _ = gpuctl(control_plane, "hold", pool.name)
    assert code == 0 and f"instancetype/{pool.name} changed" in out
    assert instancetype_obj(pool)["spec"]["inactive"] is True
    code, out, _ = gpuctl(control_plane, "hold", pool.name)
    assert code == 0 and "unchanged" in out and "nothing to change" in out
    code, out, _ = gpuctl(control_plane, "instancetype", "activate", pool.name)
    assert code == 0 and instancetype_obj(pool)["spec"]["inactive"] is False


def test_hold_says_who_moves_the_queue_and_wait_follows_it(pool: GpuPool, control_plane: Any) -> None:
    """No GPUStack worker runs here: the test does what its InstanceType reconciler does (spec.inactive=true puts
    the ClusterQueue on Hold) a moment after the hold, and `hold --wait` follows the queue until it does."""
    import subprocess
    import sys
    import threading
    import time

    def reconcile() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not instancetype_obj(pool)["spec"].get("inactive"):
            time.sleep(0.2)
        time.sleep(2)
        pool.objs.patch_cluster_custom_object(KUEUE, KV, "clusterqueues", pool.name, {"spec": {"stopPolicy": "Hold"}})

    worker = threading.Thread(target=reconcile)
    worker.start()
    try:
        proc = subprocess.run(
            [sys.executable, "-c", "from gpuctl.cli.startup import run; run()", "hold", pool.name, "--wait",
             "--timeout", "60s", "--kubeconfig", str(control_plane.kubeconfig)],
            capture_output=True, text=True, timeout=90,
        )  # fmt: skip
    finally:
        worker.join()
    assert proc.returncode == 0, proc.stderr
    assert f"set InstanceType {pool.name} spec.inactive=true: the worker's InstanceType reconciler then sets" in (
        proc.stdout
    )
    lines = proc.stderr.splitlines()  # piped: one line per change, as drain --wait writes them
    assert "ClusterQueue stopPolicy None: waiting for the worker's InstanceType reconciler to set Hold" in lines[0]
    assert "ClusterQueue stopPolicy Hold: admission blocked" in lines[-1] and len(lines) == 2, lines
    assert f"instancetype/{pool.name} phase Inactive" in proc.stdout
    # Unheld again, nobody moves the queue: --wait gives up at its timeout, saying what it waited for.
    assert gpuctl(control_plane, "resume", pool.name)[0] == 0
    code, _, err = gpuctl(control_plane, "hold", pool.name, "--wait", "--timeout", "2s")
    assert code == 1 and f"instancetype/{pool.name} not held after 2s: ClusterQueue stopPolicy None" in err
    assert gpuctl(control_plane, "resume", pool.name)[0] == 0


def test_a_concurrent_patch_is_retried(pool: GpuPool, control_plane: Any) -> None:
    source = LiveSource(Connection(str(control_plane.kubeconfig)))
    raced = {"done": False}

    def plan_racing(obj: dict[str, Any]) -> Any:
        if not raced["done"]:  # someone else writes between our read and our patch
            pool.objs.patch_cluster_custom_object(
                WORKER, WV, "instancetypes", pool.name, {"metadata": {"labels": {"team": "touched-by-another-writer"}}}
            )
            raced["done"] = True
        return plan_hold(obj)

    conflicts: list[int] = []
    outcome = apply_plan(
        source, kinds.INSTANCETYPE, pool.name, None, plan_racing, DryRun.NONE, on_conflict=conflicts.append
    )
    assert outcome.result is Result.CHANGED and outcome.attempts == 2 and conflicts == [1]
    stored = instancetype_obj(pool)
    assert stored["spec"]["inactive"] is True
    assert stored["metadata"]["labels"]["team"] == "touched-by-another-writer"  # nothing lost
    assert gpuctl(control_plane, "resume", pool.name)[0] == 0


def test_a_frozen_field_is_refused_before_the_server(pool: GpuPool, control_plane: Any, tmp_path: Path) -> None:
    changed = instancetype_obj(pool)
    changed["spec"]["unitResources"]["cpu"] = "16"
    path = tmp_path / "it.yaml"
    path.write_text(yaml.safe_dump({k: changed[k] for k in ("apiVersion", "kind", "metadata", "spec")}))
    code, _, err = gpuctl(control_plane, "instancetype", "apply", "-f", str(path))
    assert code == 2
    assert "spec: Forbidden: is immutable except displayName and inactive" in err
    assert "create a new InstanceType and move the instances" in err
    assert instancetype_obj(pool)["spec"]["unitResources"]["cpu"] == "8"


def test_rename_and_describe(pool: GpuPool, control_plane: Any) -> None:
    assert gpuctl(control_plane, "instancetype", "rename", pool.name, "A10G pool")[0] == 0
    assert instancetype_obj(pool)["spec"]["displayName"] == "A10G pool"
    # Audit logs and managedFields tell gpuctl's writes apart, as kubectl's (kubectl-patch, kubectl-create).
    fields = instancetype_obj(pool)["metadata"]["managedFields"]
    owners = [m["manager"] for m in fields if "f:displayName" in json.dumps(m.get("fieldsV1", {}))]
    assert owners == ["gpuctl"], fields
    code, out, _ = gpuctl(control_plane, "instancetype", "describe", pool.name)
    assert (
        code == 0 and "displayName:       A10G pool" in out and f"ClusterQueue:    {pool.name} (stopPolicy None" in out
    )


def test_create_and_delete_an_instancetype(control_plane: Any, api: Any) -> None:
    name = "it-cpu-created"
    code, out, err = gpuctl(control_plane, "instancetype", "create", name, "--cpu-only", "--unit-ram", "2Gi")
    assert code == 0, err
    created = client.CustomObjectsApi(api).get_cluster_custom_object(WORKER, WV, "instancetypes", name)
    assert {m["manager"] for m in created["metadata"]["managedFields"]} >= {"gpuctl"}
    code, _, err = gpuctl(control_plane, "instancetype", "create", name, "--cpu-only", "--unit-ram", "2Gi")
    assert code == 2 and "already exists" in err
    code, out, _ = gpuctl(control_plane, "instancetype", "list", "-o", "name")
    assert f"instancetype.worker.gpustack.ai/{name}" in out.split()
    code, out, _ = gpuctl(control_plane, "instancetype", "delete", name, "--wait", "--timeout", "30")
    assert code == 0 and f"instancetype/{name} deleted" in out
    code, _, err = gpuctl(control_plane, "instancetype", "delete", name)
    assert code == 1 and f'instancetype "{name}" not found' in err  # as kubectl: deleting nothing is an error
    code, out, _ = gpuctl(control_plane, "instancetype", "delete", name, "--ignore-not-found")
    assert code == 0 and "nothing to delete" in out


def test_bulk_stop_reports_per_object(pool: GpuPool, control_plane: Any) -> None:
    pool.instance("inst-running", phase="Running")
    pool.instance("inst-starting", phase="Starting")
    pool.instance("inst-stopped", phase="Stopped", stop=True)
    args = ("instance", "stop", "--instancetype", pool.name, "-n", pool.namespace)
    code, out, err = gpuctl(control_plane, *args)
    assert code == 2 and "pass --yes" in err and out == ""  # chosen by a selection, not on a terminal
    assert f"--instancetype {pool.name} matched 3 Instance(s): {pool.namespace}/inst-running," in err
    code, out, _ = gpuctl(control_plane, *args, "--yes", "--dry-run", "server", "-o", "json")
    results = {i["object"].rsplit("/", 1)[1]: i["result"] for i in json.loads(out)["items"]}
    assert results == {"inst-running": "would change", "inst-starting": "failed", "inst-stopped": "unchanged"}
    stored = pool.objs.get_namespaced_custom_object(WORKER, WV, pool.namespace, "instances", "inst-running")
    assert stored["spec"]["stop"] is False  # a server dry run stores nothing
    code, out, err = gpuctl(control_plane, *args, "--yes")
    assert code == 1 and "1 of 3 failed" in err
    assert "inst-starting failed: cannot stop starting instance" in out
    assert (
        pool.objs.get_namespaced_custom_object(WORKER, WV, pool.namespace, "instances", "inst-running")["spec"]["stop"]
        is True
    )
    code, out, _ = gpuctl(control_plane, "instance", "start", "inst-running", "-n", pool.namespace)
    assert code == 1 and "can only start stopped instance" in out
    # still on its way to Stopped (no worker runs here): the refusal says the phase and what to wait for
    assert f"instance {pool.namespace}/inst-running is Running; spec.stop=true is set" in out
    assert "start it once its phase is Stopped" in out
    code, out, _ = gpuctl(
        control_plane, "instance", "list", "-n", pool.namespace, "--instancetype", pool.name, "-o", "name"
    )
    assert sorted(out.split()) == [f"instance.worker.gpustack.ai/inst-{n}" for n in ("running", "starting", "stopped")]


def test_drain_evicts_then_resume_admits_again(api: Any, test_namespace: str, control_plane: Any) -> None:
    from kubernetes import client

    pool = new_pool(api, test_namespace, check=False)
    try:
        job = pool.submit_job(f"drain-me-{pool.group_id}", {"nvidia.com/gpu": "1"})

        def admitted() -> bool:
            mine = pool.workload_of_job(job)
            return mine is not None and (condition(mine, "Admitted") or {}).get("status") == "True"

        wait_for("the Job's Workload admitted", admitted)
        code, out, err = gpuctl(control_plane, "drain", pool.name, "--wait", "--timeout", "1m")
        assert code == 0, err
        assert "spec.stopPolicy=HoldAndDrain" in out and f"instancetype/{pool.name} phase Inactive" in out
        assert cluster_queue(pool)["spec"]["stopPolicy"] == "HoldAndDrain"
        assert not admitted()
        assert client.BatchV1Api(api).read_namespaced_job(job, test_namespace).spec.suspend is True
        code, out, _ = gpuctl(control_plane, "drain", pool.name)
        assert "already draining" in out
        code, out, err = gpuctl(control_plane, "resume", pool.name)
        assert code == 0, err
        assert f"instancetype/{pool.name} phase Active" in out
        wait_for("the Job's Workload admitted again", admitted, timeout=60)
    finally:
        pool.cleanup()


def test_the_generated_admin_roles_are_scoped_to_the_pools_and_the_named_namespaces(
    pool: GpuPool, api: Any, control_plane: Any, tmp_path: Path, test_namespace: str
) -> None:
    from kubernetes import utils

    code, out, _ = gpuctl(
        control_plane,
        "rbac",
        "admin",
        "--pool",
        pool.name,
        "--bind-user",
        "alice",
        "--dry-run-namespace",
        test_namespace,
    )
    assert code == 0
    # Applied, not created: other tests may already hold the shared gpuctl-view ClusterRole.
    for doc in yaml.safe_load_all(out):
        utils.create_from_dict(api, doc, namespace=doc["metadata"].get("namespace"), apply=True)
    alice = str(control_plane.write_kubeconfig(tmp_path / "alice.kubeconfig", "alice"))

    def as_alice(*args: str, stdin: str | None = None) -> tuple[int, str]:
        result = runner.invoke(app, [*args, "--kubeconfig", alice], input=stdin)
        return result.exit_code, result.stdout + result.stderr

    # Drains patch the pool's ClusterQueue: allowed for the named pool, forbidden for any other queue.
    code, text = as_alice("drain", pool.name, "--dry-run", "server")
    assert code == 0 and "would change" in text, text
    other = new_pool(api, test_namespace, nodes=1, check=False)
    try:
        code, text = as_alice("drain", other.name, "--dry-run", "server")
        assert code == 1 and "forbidden" in text and "clusterqueues" in text, text
    finally:
        other.cleanup()
    # Server dry runs create Pods: in the named namespace only.
    manifest = tmp_path / "pod.yaml"
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "dry"},
        "spec": {"containers": [{"name": "m", "image": "i"}]},
    }
    manifest.write_text(yaml.safe_dump({**body, "metadata": {"name": "dry", "namespace": test_namespace}}))
    code, text = as_alice("webhook", "dry-run", "pod", "-f", str(manifest), "--server-side")
    assert code == 0, text
    manifest.write_text(yaml.safe_dump({**body, "metadata": {"name": "dry", "namespace": "default"}}))
    code, text = as_alice("webhook", "dry-run", "pod", "-f", str(manifest), "--server-side")
    assert code == 1 and "forbidden" in text, text
