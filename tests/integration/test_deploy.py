"""The operator installs as the README says: every kustomization under deploy/ builds with the real kubectl, and the
base applied with server-side apply is accepted by the real API server; ``doctor`` on what it leaves (a Deployment
whose Pods never run, since the test control plane has no kubelet and no controller-manager) reports exactly what
such a Deployment should.
"""

from __future__ import annotations

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
from gpuctl.operator.manifests import (
    certificate,
    crd_spec_fields,
    deployment,
    operator_role,
    operator_write_policy,
    webhook_configurations,
)

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


def generated() -> dict[str, list[dict[str, Any]]]:
    """What each kustomization this version generates holds, from the code that generates it."""
    [instances] = [c for c in crds() if c["metadata"]["name"] == "instances.worker.gpustack.ai"]
    policy = operator_write_policy(crd_spec_fields(instances))
    base = [*crds(), *deployment(), operator_role(), *webhook_configurations(), *policy]
    return {"crds": crds(), "base": base, "cert-manager": [*base, *certificate()]}


@pytest.mark.parametrize("directory", KUSTOMIZATIONS, ids=lambda p: str(p.relative_to(DEPLOY)))
def test_every_kustomization_builds_with_kubectl(control_plane: Any, directory: Path) -> None:
    built = [d for d in yaml.safe_load_all(kubectl(control_plane, "kustomize", str(directory))) if d]
    assert built, directory
    expected = generated().get(str(directory.relative_to(DEPLOY)))
    if expected is not None:
        # Every object generated, in the operator's namespace where it is namespaced, and nothing else.
        assert sorted(map(identity, built)) == sorted(map(identity, expected))
        assert all(o["metadata"].get("namespace") in (None, naming.OPERATOR_NAMESPACE) for o in built), (
            "an object outside the operator's namespace"
        )


def test_the_generated_kustomizations_are_all_there() -> None:
    assert {str(d.relative_to(DEPLOY)) for d in KUSTOMIZATIONS} >= set(generated())


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
            f"secret/{naming.OPERATOR_TLS_SECRET}",
            f"endpoints/{naming.OPERATOR_NAME}",
            "--ignore-not-found",
        )


def findings(control_plane: Any) -> list[dict[str, Any]]:
    result = CliRunner().invoke(app, ["doctor", "-o", "json", "--kubeconfig", str(control_plane.kubeconfig)])
    assert result.exit_code in (0, 3), result.output
    return list(json.loads(result.stdout)["items"])


def test_the_base_applies_server_side_and_doctor_finds_a_deployment_without_pods(
    control_plane: Any, installed: list[dict[str, Any]], tmp_path: Path
) -> None:
    check_existed = bool(kubectl(control_plane, "get", "admissionchecks", "--ignore-not-found", "-o", "name").strip())
    # The README's install: the base with server-side apply, then the serving certificate's Secret.
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
        *(f"--from-file={tmp_path / name}" for name in ("tls.crt", "tls.key", "ca.crt")),
    )
    # Everything was accepted as written and stored; the API server gave the Service its cluster IP.
    stored = kubectl(control_plane, "get", "-f", "-", "-o", "name", stdin=yaml.safe_dump_all(installed)).split()
    assert len(stored) == len(installed), stored
    service = json.loads(
        kubectl(control_plane, "-n", naming.OPERATOR_NAMESPACE, "get", "service", naming.OPERATOR_NAME, "-o", "json")
    )
    assert service["spec"]["clusterIP"] not in ("", "None")
    # The base carries no CA bundle (cert-manager's injector adds it in the cert-manager overlay): doctor says so for
    # every webhook, and its fix copies the CA of the Secret into both configurations.
    first = deployment_findings(control_plane)
    no_ca = [f for f in first if f["check"] == "webhook"]
    assert len(no_ca) == len(webhook_configurations()[0]["webhooks"]) + len(webhook_configurations()[1]["webhooks"])
    assert all(f["status"] == "fail" and f["saw"].endswith(": no caBundle") for f in no_ca), no_ca
    run(control_plane, no_ca[0]["fix"])
    # What kube-controller-manager's endpoints controller writes for a Service no ready Pod backs (the test control
    # plane runs none): an Endpoints object without addresses.
    kubectl(
        control_plane,
        "apply",
        "-f",
        "-",
        stdin=json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Endpoints",
                "metadata": {"name": naming.OPERATOR_NAME, "namespace": naming.OPERATOR_NAMESPACE},
            }
        ),
    )

    want = [
        ("admissioncheck", "fail", f"AdmissionCheck {naming.NODE_DEVICES_CHECK} does not exist"),
        ("operator-leader", "fail", f"no Lease {naming.OPERATOR_NAMESPACE}/{naming.OPERATOR_NAME}: no replica leads"),
        (
            "operator-replicas",
            "fail",
            f"Deployment {naming.OPERATOR_NAMESPACE}/{naming.OPERATOR_NAME}: 0 of 2 replicas ready",
        ),
        (
            "webhook-endpoint",
            "fail",
            f"service {naming.OPERATOR_NAMESPACE}/{naming.OPERATOR_NAME}:443 ({naming.MUTATING_CONFIGURATION}, "
            f"{naming.VALIDATING_CONFIGURATION}): no endpoint answers for the Service (no ready replica)",
        ),
        *(
            (
                "webhook-review",
                "fail",
                f'{naming.MUTATING_CONFIGURATION}: dry-run create {what}: failed calling webhook "{webhook}" at '
                f"https://{naming.OPERATOR_NAME}.{naming.OPERATOR_NAMESPACE}.svc:443{path}: no endpoints available for "
                f'service "{naming.OPERATOR_NAME}"',
            )
            for what, webhook, path in (
                ("Pod default/gpuctl-doctor-probe", "pod-accelerators.gpustack.ai", "/mutate-pod-accelerators"),
                ("InstanceType gpuctl-doctor-probe", "instancetype-default.gpustack.ai", "/mutate-instancetypes"),
            )
        ),
        (
            "webhook-order",
            "ok",
            f"MutatingWebhookConfiguration {naming.MUTATING_CONFIGURATION} sorts before kueue-mutating-webhook-configuration",
        ),
        *(
            ("webhook", "ok", f"webhook {w['name']} in {c['metadata']['name']} as this version serves it")
            for c in webhook_configurations()
            for w in c["webhooks"]
        ),
    ]
    if check_existed:  # left by an earlier test's pool, in whatever state it left it
        want = [w for w in want if w[0] != "admissioncheck"]

    def settled() -> list[tuple[str, str, str]]:
        found = [(f["check"], f["status"], f["saw"]) for f in deployment_findings(control_plane)]
        return sorted(f for f in found if not (check_existed and f[0] == "admissioncheck"))

    assert wait_settled(settled, sorted(want)) == sorted(want)
    # Each fix printed for a Deployment without Pods names objects that exist, and runs.
    for f in deployment_findings(control_plane):
        if f["status"] == "fail" and f["check"] != "admissioncheck":
            run(control_plane, f["fix"])


DEPLOYMENT_CHECKS = ("webhook", "admissioncheck", "operator-")


def deployment_findings(control_plane: Any) -> list[dict[str, Any]]:
    """Doctor's findings on the operator's deployment (not on pools or Kueue, which other tests shape)."""
    return [f for f in findings(control_plane) if f["check"].startswith(DEPLOYMENT_CHECKS)]


def wait_settled(read: Any, want: list[tuple[str, str, str]], timeout: float = 20.0) -> list[tuple[str, str, str]]:
    """The API server picks up webhook configurations and endpoints asynchronously: read until ``want``, or time
    out with the last answer."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        got: list[tuple[str, str, str]] = read()
        if got == want or time.monotonic() > deadline:
            return got
        time.sleep(0.5)


def run(control_plane: Any, fix: str) -> None:
    """A printed fix, pasted into bash with the run's kubectl and credentials."""
    env = {
        **os.environ,
        "PATH": f"{control_plane.bin_dir}:{os.environ['PATH']}",
        "KUBECONFIG": str(control_plane.kubeconfig),
    }
    done = subprocess.run(["bash", "-c", fix], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"{fix}\n{done.stdout}\n{done.stderr}"
