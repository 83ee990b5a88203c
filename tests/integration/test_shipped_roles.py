"""The roles shipped in ``deploy/rbac/gpuctl-cli.yaml``, applied with kubectl and bound to real users (client
certificates of the run's CA): every write command runs as ``gpuctl-admin``, every read command as ``gpuctl-view``,
and ``gpuctl-view`` cannot write."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gpuctl.cli.main import app
from testbed.gpucluster import WORKER, WV, GpuPool, new_pool, wait_for

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "deploy" / "rbac" / "gpuctl-cli.yaml"
runner = CliRunner()


def kubectl(control_plane: Any, *args: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        [str(control_plane.bin_dir / "kubectl"), "--kubeconfig", str(control_plane.kubeconfig), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def users(control_plane: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Kubeconfigs of two users bound to the shipped roles, the roles applied as shipped."""
    work = tmp_path_factory.mktemp("shipped-roles")
    kubectl(control_plane, "apply", "-f", str(SHIPPED))
    bindings = [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": f"it-shipped-{role}"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": f"gpuctl-{role}"},
            "subjects": [{"kind": "User", "name": f"shipped-{role}", "apiGroup": "rbac.authorization.k8s.io"}],
        }
        for role in ("view", "admin")
    ]
    kubectl(control_plane, "apply", "-f", "-", stdin=yaml.safe_dump_all(bindings))
    out = {
        role: str(control_plane.write_kubeconfig(work / f"{role}.kubeconfig", f"shipped-{role}", []))
        for role in ("view", "admin")
    }
    # RBAC's cache sees new bindings within moments: wait until the viewer may read.
    for _ in range(100):
        if runner.invoke(app, ["instancetype", "list", "--kubeconfig", out["view"]]).exit_code == 0:
            break
    return out


@pytest.fixture(scope="module")
def pool(api: Any, test_namespace: str) -> Iterator[GpuPool]:
    p = new_pool(api, test_namespace, nodes=1, cards=4, nominal_cards=4)
    try:
        p.submit("shipped-roles", {"nvidia.com/gpu": "1"})
        pending = p.submit("shipped-pending", {"nvidia.com/gpu": "8"})  # more than the queue's quota: it waits
        # Kueue's job integrations set spec.priority, and its visibility API needs it (v0.17 dereferences it).
        p.objs.patch_namespaced_custom_object(
            "kueue.x-k8s.io", "v1beta2", test_namespace, "workloads", pending, {"spec": {"priority": 0}}
        )
        p.instance("shipped-instance", phase="Running")
        yield p
    finally:
        p.cleanup()


def run(kubeconfig: str, *args: str) -> tuple[int, str]:
    result = runner.invoke(app, [*args, "--kubeconfig", kubeconfig])
    return result.exit_code, result.stdout + result.stderr


def read_commands(pool: GpuPool, tmp: Path) -> list[list[str]]:
    ns = pool.namespace
    snapshot = tmp / "before"
    return [
        ["version", "--show-cluster"],
        ["views", "-o", "json"],
        ["views", pool.name, "--by-card", "-o", "json"],
        ["partitions", "-o", "json"],
        ["workloads", "-A", "-o", "json"],
        ["explain", "workload", f"{ns}/shipped-roles", "-o", "json"],
        ["queue", "-o", "json"],
        ["fragmentation", "-o", "json"],
        ["simulate", "-f", str(ROOT / "examples" / "pod.yaml"), "-o", "json"],
        ["webhook", "dry-run", "pod", "-f", str(ROOT / "examples" / "pod.yaml"), "-o", "json"],
        ["instance", "list", "-A", "-o", "json"],
        ["instancetype", "list", "-o", "json"],
        ["instancetype", "describe", pool.name],
        ["doctor", "-o", "json", "--no-probe"],
        ["dump", str(snapshot)],
        ["diff", str(snapshot), "live", "-o", "json"],
    ]


def test_every_read_command_runs_with_the_shipped_view_role(
    users: dict[str, str], pool: GpuPool, tmp_path: Path
) -> None:
    failures = []
    for args in read_commands(pool, tmp_path):
        code, text = run(users["view"], *args)
        if code not in (0, 3) or "forbidden" in text:
            failures.append(f"gpuctl {' '.join(args)}: exit {code}: {text[-300:]}")
    assert not failures, "\n".join(failures)

    # queue reads Kueue's own order through its visibility API, which the role may read.
    def ordered_by_kueue() -> list[Any] | None:
        items = json.loads(run(users["view"], "queue", pool.name, "-o", "json")[1])["items"]
        return items if items and all(i["orderFrom"] == "visibility" for i in items) else None

    listed = wait_for("Kueue's order of the pending Workload, read as the viewer", ordered_by_kueue, timeout=60)
    assert [i["name"] for i in listed] == ["shipped-pending"]


def write_commands(pool: GpuPool) -> list[list[str]]:
    ns = ["-n", pool.namespace]
    return [
        ["hold", pool.name],
        ["drain", pool.name],
        ["resume", pool.name],
        ["instance", "stop", "shipped-instance", *ns],
        ["instance", "start", "shipped-instance", *ns],
        [
            "instancetype",
            "create",
            "shipped-type",
            "--accelerator-group",
            "nvidia-a10g",
            "--unit-cpu",
            "4",
            "--unit-ram",
            "32Gi",
        ],
        ["instancetype", "rename", "shipped-type", "Shipped, renamed"],
        ["instancetype", "deactivate", "shipped-type"],
        ["instancetype", "activate", "shipped-type"],
        ["instancetype", "delete", "shipped-type"],
    ]


def test_every_write_command_runs_with_the_shipped_admin_role_and_none_with_the_view_role(
    users: dict[str, str], pool: GpuPool
) -> None:
    for args in write_commands(pool):
        if args[:2] == ["instance", "start"]:
            # Only a Stopped Instance starts: its controller writes the phase once the stop took effect.
            pool.objs.patch_namespaced_custom_object_status(
                WORKER, WV, pool.namespace, "instances", "shipped-instance", {"status": {"phase": "Stopped"}}
            )
        # The view role is refused by the API server, naming what it may not do.
        code, text = run(users["view"], *args, "--dry-run", "server")
        assert code == 1 and "forbidden" in text, (args, text)
        code, text = run(users["admin"], *args)
        assert code == 0 and "forbidden" not in text, (args, text)
    names = [
        i["metadata"]["name"] for i in json.loads(run(users["view"], "instancetype", "list", "-o", "json")[1])["items"]
    ]
    assert pool.name in names and "shipped-type" not in names  # created, then deleted
