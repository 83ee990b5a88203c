"""kubectl's connection flags on the real control plane: the context's namespace, impersonation checked by RBAC, a
request timeout that really ends a call to a silent server, and ``views -w`` riding out a server that goes away."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from gpuctl.core.units import M
from testbed.factories import card_row
from testbed.gpucluster import GpuPool, new_pool, wait_for
from testbed.proxy import Proxy

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
    assert code == 0 and "workload.kueue.x-k8s.io/kubectl-style" in out.split(), err
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
        # The proxy never answers: without the timeout the process would run into subprocess's 30 s guard.
        assert proc.returncode == 1, proc.stderr
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
        wait_for("the failure said so", lambda: "STALE: no answer from the API server" in text(), timeout=20)
        pool.write_ledger(pool.nodes[0], [card_row(0, mode=1, allocated=M), card_row(1), card_row(2), card_row(3)])
        proxy.restore()
        wait_for("the redraw after the server came back", lambda: "3" in text().split(), timeout=40)
        wait_for("the recovery said so", lambda: "(recovered)" in text(), timeout=20)
        assert proc.poll() is None  # still watching
    finally:
        proc.terminate()
        proc.wait(10)
        out.close()
        proxy.close()


# ----------------------------------------------------------------------------------------------- TLS flags


def _kubectl(control_plane: Any, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(control_plane.bin_dir / "kubectl"), *args], capture_output=True, text=True, timeout=60)


def _x509(text: str) -> str:
    found = re.search(r"x509: [^\n]*", text)
    assert found, text
    return found[0].strip()


@pytest.fixture(scope="module")
def client_files(control_plane: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The admin's client certificate and key, and the run's CA, as files (no kubeconfig)."""
    from testbed.pki import CertificateAuthority

    where = tmp_path_factory.mktemp("tls")
    pair = control_plane.client_cert("gpuctl-it-tls", ("system:masters",))
    (where / "client.crt").write_bytes(pair.cert_pem)
    (where / "client.key").write_bytes(pair.key_pem)
    (where / "other-ca.crt").write_bytes(CertificateAuthority("another-ca").cert_pem)
    return {
        "cert": str(where / "client.crt"),
        "key": str(where / "client.key"),
        "ca": str(control_plane.ca_file),
        "other": str(where / "other-ca.crt"),
        "empty": str(where / "no-kubeconfig"),
    }


def _flags(control_plane: Any, files: dict[str, str], *extra: str) -> list[str]:
    return [
        "--kubeconfig",
        files["empty"],
        "-s",
        control_plane.api_url,
        "--client-certificate",
        files["cert"],
        "--client-key",
        files["key"],
        *extra,
    ]


def test_tls_flags_reach_the_server_without_a_kubeconfig(control_plane: Any, client_files: dict[str, str]) -> None:
    Path(client_files["empty"]).write_text("apiVersion: v1\nkind: Config\n")
    flags = _flags(control_plane, client_files, "--certificate-authority", client_files["ca"])
    assert _kubectl(control_plane, "get", "instancetypes", *flags).returncode == 0
    code, out, err = gpuctl("instancetype", "list", *flags, "-o", "name")
    assert code == 0, err
    # Not checking the server at all: works, and nothing (no urllib3 warning) is said about it.
    proc = subprocess.run(
        [sys.executable, "-c", "from gpuctl.cli.startup import run; run()", "instancetype", "list", "-o", "name",
         *_flags(control_plane, client_files, "--insecure-skip-tls-verify")],
        capture_output=True, text=True, cwd=ROOT, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0 and proc.stderr == "" and proc.stdout == out, proc.stderr
    code, _, err = gpuctl("views", *flags, "--insecure-skip-tls-verify")
    assert code == 2 and "exclusive" in err


def test_a_certificate_for_another_name_is_named_as_kubectl_names_it(
    control_plane: Any, client_files: dict[str, str]
) -> None:
    flags = _flags(control_plane, client_files, "--certificate-authority", client_files["ca"])
    wrong = ["--tls-server-name", "wrong.example"]
    theirs = _kubectl(control_plane, "get", "instancetypes", *flags, *wrong)
    assert theirs.returncode == 1 and "certificate is valid for" in theirs.stderr, theirs.stderr
    code, _, err = gpuctl("views", *flags, *wrong)
    assert code == 1 and err.count("\n") == 1
    assert "tls: failed to verify certificate: " in err and _x509(err) == _x509(theirs.stderr), (err, theirs.stderr)


def test_an_untrusted_certificate_is_named_as_kubectl_names_it(
    control_plane: Any, client_files: dict[str, str]
) -> None:
    flags = _flags(control_plane, client_files, "--certificate-authority", client_files["other"])
    theirs = _kubectl(control_plane, "get", "instancetypes", *flags)
    assert theirs.returncode == 1
    code, _, err = gpuctl("views", *flags)
    assert code == 1 and err.count("\n") == 1
    assert _x509(err) == _x509(theirs.stderr) == "x509: certificate signed by unknown authority", err
