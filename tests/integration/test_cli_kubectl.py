"""kubectl's connection flags on the real control plane: the context's namespace, impersonation checked by RBAC, a
request timeout that really ends a call to a silent server, and ``views -w`` riding out a server that goes away."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from gpuctl.core.units import M
from tests.factories import card_row

from .gpucluster import GpuPool, new_pool, wait_for
from .proxy import Proxy
from .test_cli_live import gpuctl

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def pool(api: Any, test_namespace: str) -> Iterator[GpuPool]:
    p = new_pool(api, test_namespace, nodes=1, cards=4, check=False)
    try:
        p.submit("kubectl-style", {"nvidia.com/gpu": "1"})
        yield p
    finally:
        p.cleanup()


def kubeconfig_with(control_plane: Any, path: Path, **context: str) -> Path:
    config = yaml.safe_load(control_plane.kubeconfig.read_text())
    for c in config["contexts"]:
        c["context"].update(context)
    path.write_text(yaml.safe_dump(config))
    return path


def test_the_context_namespace_is_used_without_n(pool: GpuPool, control_plane: Any, tmp_path: Path) -> None:
    kubeconfig = kubeconfig_with(control_plane, tmp_path / "config", namespace=pool.namespace)
    code, out, err = gpuctl("workloads", "--kubeconfig", str(kubeconfig), "-o", "name")
    assert code == 0 and f"workload/{pool.namespace}/kubectl-style" in out.split(), err
    code, out, err = gpuctl("explain", "workload", "kubectl-style", "--kubeconfig", str(kubeconfig), "-o", "json")
    assert code == 0 and json.loads(out)["namespace"] == pool.namespace, err
    # -n wins over the context, before or after the subcommand.
    code, out, err = gpuctl("--kubeconfig", str(kubeconfig), "-n", "default", "workloads", "-o", "name")
    assert code == 0 and out == "", err


def test_impersonation_is_checked_by_rbac(pool: GpuPool, api: Any, control_plane: Any) -> None:
    from gpuctl.operator.manifests import cli_roles

    rbac = client.RbacAuthorizationV1Api(api)
    view = next(r for r in cli_roles() if r["metadata"]["name"] == "gpuctl-view")
    try:
        rbac.create_cluster_role(view)
    except client.ApiException as exc:
        if exc.status != 409:
            raise
    binding = {
        "metadata": {"name": "it-kubectl-viewer"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "gpuctl-view"},
        "subjects": [{"kind": "Group", "name": "gpu-viewers", "apiGroup": "rbac.authorization.k8s.io"}],
    }
    try:
        rbac.create_cluster_role_binding(binding)
    except client.ApiException as exc:
        if exc.status != 409:
            raise
    kubeconfig = str(control_plane.kubeconfig)
    # Allowed: the impersonated user's group may read.
    code, out, err = gpuctl(
        "views", pool.name, "--kubeconfig", kubeconfig, "--as", "bob", "--as-group", "gpu-viewers", "-o", "json"
    )
    assert code == 0 and json.loads(out)["items"][0]["name"] == pool.name, err
    # Refused: the same user without the group; and the group may not write.
    code, _, err = gpuctl("views", pool.name, "--kubeconfig", kubeconfig, "--as", "bob")
    assert code == 1 and "forbidden" in err and err.count("\n") == 1
    code, out, err = gpuctl("hold", pool.name, "--kubeconfig", kubeconfig, "--as", "bob", "--as-group", "gpu-viewers")
    assert code == 1 and "forbidden: cannot patch instancetypes" in out and err == "error: 1 of 1 failed\n"


def test_a_request_timeout_ends_a_call_to_a_silent_server(control_plane: Any, tmp_path: Path) -> None:
    proxy = Proxy(("127.0.0.1", control_plane.api_port))
    proxy.blackhole()
    try:
        config = yaml.safe_load(control_plane.kubeconfig.read_text())
        for c in config["clusters"]:
            c["cluster"]["server"] = f"https://127.0.0.1:{proxy.port}"
        kubeconfig = tmp_path / "silent"
        kubeconfig.write_text(yaml.safe_dump(config))
        started = time.monotonic()
        proc = subprocess.run(
            [
                sys.executable,
                "-c",
                "from gpuctl.cli.startup import run; run()",
                "views",
                "--kubeconfig",
                str(kubeconfig),
                "--request-timeout",
                "2s",
            ],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=30,
        )
        took = time.monotonic() - started
        assert proc.returncode == 1 and took < 5, (took, proc.stderr)
        assert proc.stderr.count("\n") == 1 and f"127.0.0.1:{proxy.port}" in proc.stderr and "in time" in proc.stderr
    finally:
        proxy.close()


def test_views_watch_survives_the_server_going_away(pool: GpuPool, control_plane: Any, tmp_path: Path) -> None:
    proxy = Proxy(("127.0.0.1", control_plane.api_port))
    config = yaml.safe_load(control_plane.kubeconfig.read_text())
    for c in config["clusters"]:
        c["cluster"]["server"] = f"https://127.0.0.1:{proxy.port}"
    kubeconfig = tmp_path / "flaky"
    kubeconfig.write_text(yaml.safe_dump(config))
    out = (tmp_path / "watch.out").open("w")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from gpuctl.cli.startup import run; run()",
            "views",
            pool.name,
            "-w",
            "--interval",
            "0.5",
            "--request-timeout",
            "2s",
            "--kubeconfig",
            str(kubeconfig),
            "-o",
            "custom-columns=EX:.accelerator.remaining",
            "--no-headers",
        ],
        stdout=out,
        stderr=subprocess.STDOUT,
        cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        text = lambda: (tmp_path / "watch.out").read_text()  # noqa: E731
        wait_for("the first answer", lambda: "4" in text().split(), timeout=20)
        proxy.blackhole()
        proxy.cut()
        wait_for("the failure said so", lambda: "read failed, retrying" in text(), timeout=20)
        pool.write_ledger(pool.nodes[0], [card_row(0, mode=1, allocated=M), card_row(1), card_row(2), card_row(3)])
        proxy.restore()
        wait_for("the redraw after the server came back", lambda: "3" in text().split(), timeout=40)
        assert proc.poll() is None  # still watching
    finally:
        proc.terminate()
        proc.wait(10)
        out.close()
        proxy.close()
