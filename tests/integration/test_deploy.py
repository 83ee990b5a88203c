"""The operator installs as the README says: every kustomization under deploy/ builds with the real kubectl, and the
base applied with server-side apply is accepted by the real API server; ``doctor`` on what it leaves (a Deployment
whose Pods never run, since the test control plane has no kubelet and no controller-manager) reports exactly what
such a Deployment should.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gpuctl.cli.main import app
from gpuctl.core import naming
from gpuctl.operator.manifests import certificate, cli_roles, deployment, operator_role, webhook_configurations

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
KUSTOMIZATIONS = sorted(p.parent for p in DEPLOY.rglob("kustomization.yaml"))
KEPT = ("CustomResourceDefinition", "Namespace")
"""Left in place after the test: the suite's CRDs are these, and a namespace never finishes terminating here."""


def kubectl(control_plane: Any, *args: str, stdin: str | None = None, check: bool = True) -> str:
    env = {**os.environ, "KUBECONFIG": str(control_plane.kubeconfig)}
    done = subprocess.run(
        [str(control_plane.bin_dir / "kubectl"), *args],
        input=stdin,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    if check:
        assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
    return done.stdout


def identity(obj: dict[str, Any]) -> tuple[str, str, str]:
    meta = obj["metadata"]
    return obj["kind"], meta.get("namespace", ""), meta["name"]


def crds() -> list[dict[str, Any]]:
    return [
        d
        for p in sorted((DEPLOY / "crds").glob("*.yaml"))
        for d in yaml.safe_load_all(p.read_text())
        if d and d["kind"] == "CustomResourceDefinition"
    ]


@pytest.mark.parametrize("directory", KUSTOMIZATIONS, ids=lambda p: str(p.relative_to(DEPLOY)))
def test_every_kustomization_builds_with_kubectl(control_plane: Any, directory: Path) -> None:
    built = [d for d in yaml.safe_load_all(kubectl(control_plane, "kustomize", str(directory))) if d]
    assert built, directory
    base = [
        *crds(),
        *deployment(),
        operator_role(),
        *webhook_configurations(),
    ]
    expected = {
        "crds": crds(),
        "base": base,
        "cert-manager": [*base, *certificate()],
    }[str(directory.relative_to(DEPLOY))]
    # Every namespaced object lands in the operator's namespace, the CRDs and cluster-scoped objects stay as they are.
    assert sorted(map(identity, built)) == sorted(map(identity, expected))


def test_the_cert_manager_overlay_asks_for_the_ca_of_the_serving_certificate(control_plane: Any) -> None:
    built = [d for d in yaml.safe_load_all(kubectl(control_plane, "kustomize", "deploy/cert-manager")) if d]
    [cert] = [d for d in built if d["kind"] == "Certificate"]
    assert cert["spec"]["secretName"] == naming.OPERATOR_TLS_SECRET
    assert f"{naming.OPERATOR_NAME}.{naming.OPERATOR_NAMESPACE}.svc" in cert["spec"]["dnsNames"]
    configs = [d for d in built if d["kind"].endswith("WebhookConfiguration")]
    assert len(configs) == 2
    for c in configs:
        assert c["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == (
            f"{naming.OPERATOR_NAMESPACE}/{naming.OPERATOR_NAME}"
        )
        assert all(w["clientConfig"]["service"]["name"] == naming.OPERATOR_NAME for w in c["webhooks"])


@pytest.fixture()
def installed(control_plane: Any, tmp_path: Path) -> Iterator[list[dict[str, Any]]]:
    """``deploy/base`` applied as the README installs it, with a serving certificate of the run's CA; every object it
    made (but the CRDs and the namespace) deleted after."""
    built = [d for d in yaml.safe_load_all(kubectl(control_plane, "kustomize", "deploy/base")) if d]
    removable = [d for d in built if d["kind"] not in KEPT]
    present = kubectl(
        control_plane, "get", "--ignore-not-found", "-o", "name", "-f", "-", stdin=yaml.safe_dump_all(removable)
    ).split()
    assert not present, f"objects of deploy/base exist before it is applied (left by another test?): {present}"
    pair = control_plane.serving_cert([f"{naming.OPERATOR_NAME}.{naming.OPERATOR_NAMESPACE}.svc"])
    for name, data in (("tls.crt", pair.cert_pem), ("tls.key", pair.key_pem), ("ca.crt", control_plane.ca_cert_pem)):
        (tmp_path / name).write_bytes(data)
    try:
        yield built
    finally:
        kubectl(
            control_plane,
            "delete",
            "--ignore-not-found",
            "--wait=false",
            "-f",
            "-",
            stdin=yaml.safe_dump_all(removable),
        )
        kubectl(
            control_plane,
            "-n",
            naming.OPERATOR_NAMESPACE,
            "delete",
            "secret",
            naming.OPERATOR_TLS_SECRET,
            "--ignore-not-found",
        )


def findings(control_plane: Any) -> list[dict[str, Any]]:
    result = CliRunner().invoke(app, ["doctor", "-o", "json", "--kubeconfig", str(control_plane.kubeconfig)])
    assert result.exit_code in (0, 3), result.output
    return list(json.loads(result.stdout)["items"])


def test_the_base_applies_server_side_and_doctor_finds_a_deployment_without_pods(
    control_plane: Any, installed: list[dict[str, Any]], tmp_path: Path
) -> None:
    out = kubectl(control_plane, "apply", "--server-side", "-k", "deploy/base")
    assert out.count("serverside-applied") == len(installed), out
    kubectl(
        control_plane,
        "-n",
        naming.OPERATOR_NAMESPACE,
        "create",
        "secret",
        "generic",
        naming.OPERATOR_TLS_SECRET,
        f"--from-file={tmp_path / 'tls.crt'}",
        f"--from-file={tmp_path / 'tls.key'}",
        f"--from-file={tmp_path / 'ca.crt'}",
    )
    Path("/tmp/findings.json").write_text(json.dumps(findings(control_plane), indent=1))
    assert False
