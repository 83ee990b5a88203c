"""The operator installs as the README says, both ways, on the real API server: every kustomization under deploy/
builds with the real kubectl into what the code generates; the README's install blocks run as written; the companion
takes no name GPUStack's worker owns and its role only reads; the standalone operator registers its webhook
configurations only once it serves them (no fail-closed webhook without an endpoint), with its serving CA.
"""

from __future__ import annotations

import base64
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
import yaml
from typer.testing import CliRunner

from gpuctl.cli.main import app
from gpuctl.core import gpustack, naming
from gpuctl.operator.crds import definitions
from gpuctl.operator.manifests import (
    certificate,
    crd_spec_fields,
    deployment,
    operator_role,
    operator_write_policy,
)
from testbed.operator_process import free_port, stop

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
KUSTOMIZATIONS = sorted(p.parent for p in DEPLOY.rglob("kustomization.yaml"))
KEPT = ("CustomResourceDefinition", "Namespace")
"""Left in place after a test: the suite's CRDs are these, and a namespace never finishes terminating here."""


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


def generated() -> dict[str, list[dict[str, Any]]]:
    """What each kustomization this version generates holds, from the code that generates it."""
    crds = definitions()
    [instances] = [c for c in crds if c["spec"]["names"]["kind"] == "Instance"]
    standalone = [
        *deployment(gpustack.STANDALONE),
        operator_role(gpustack.STANDALONE),
        *operator_write_policy(crd_spec_fields(instances)),
    ]
    return {
        "crds": crds,
        "companion": [*deployment(gpustack.COMPANION), operator_role(gpustack.COMPANION)],
        "standalone": standalone,
        "standalone-cert-manager": [*standalone, *certificate()],
    }


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


def test_no_install_takes_a_name_gpustacks_worker_owns(control_plane: Any) -> None:
    """No CRD, webhook configuration or AdmissionCheck in either install (the standalone operator makes its CRDs
    where none exist, and registers gpuctl's own webhook configurations once it serves); the companion's role reads,
    and writes only Events (and its Lease, by its namespaced Role)."""
    for name in ("companion", "standalone", "standalone-cert-manager"):
        built = [d for d in yaml.safe_load_all(kubectl(control_plane, "kustomize", f"deploy/{name}")) if d]
        kinds = {d["kind"] for d in built}
        assert not kinds & {
            "CustomResourceDefinition",
            "MutatingWebhookConfiguration",
            "ValidatingWebhookConfiguration",
        }
        assert not {d["metadata"]["name"] for d in built} & {*gpustack.CONFIGURATIONS, gpustack.WORKER_LEASE}
    [role] = [d for d in generated()["companion"] if d["kind"] == "ClusterRole"]
    writes = {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
        if verb not in ("get", "list", "watch")
    }
    assert writes == {("events.k8s.io", "events", "create"), ("events.k8s.io", "events", "patch")}


def test_the_cert_manager_overlay_writes_the_secret_the_standalone_operator_reads(control_plane: Any) -> None:
    built = [d for d in yaml.safe_load_all(kubectl(control_plane, "kustomize", "deploy/standalone-cert-manager")) if d]
    [cert] = [d for d in built if d["kind"] == "Certificate"]
    assert cert["spec"]["secretName"] == naming.OPERATOR_TLS_SECRET
    assert f"{naming.OPERATOR_NAME}.{naming.OPERATOR_NAMESPACE}.svc" in cert["spec"]["dnsNames"]
    [dep] = [d for d in built if d["kind"] == "Deployment"]
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    # The webhooks are registered by the operator with the CA beside its certificate (cert-manager writes ca.crt).
    assert {"--mode=standalone", "--install-crds", "--register-webhooks", "--tls-cert=/tls/tls.crt"} <= set(args)


# ----------------------------------------------------------------------------------------------- the README, as written


def readme_block(tag: str) -> list[str]:
    """The commands of the README's shell block marked ``<!-- tested: TAG -->``."""
    text = (ROOT / "README.md").read_text()
    m = re.search(rf"<!-- tested: {re.escape(tag)} -->\n```sh\n(.*?)```", text, re.S)
    assert m is not None, f"README.md has no block tested as {tag}"
    return [line for line in m.group(1).splitlines() if line.strip() and not line.startswith("#")]


def run_as_written(control_plane: Any, lines: list[str], cwd: Path) -> None:
    env = {
        **os.environ,
        "PATH": f"{control_plane.bin_dir}:{os.environ['PATH']}",
        "KUBECONFIG": str(control_plane.kubeconfig),
    }
    for line in lines:
        done = subprocess.run(["bash", "-c", line], env=env, capture_output=True, text=True, timeout=120, cwd=cwd)
        assert done.returncode == 0, f"$ {line}\n{done.stdout}\n{done.stderr}"


def cluster_names(control_plane: Any, *kinds: str) -> set[str]:
    return set(kubectl(control_plane, "get", ",".join(kinds), "-o", "name").split())


@pytest.fixture()
def removed_after(control_plane: Any) -> Iterator[None]:
    """Whatever either install made (but its namespace and the CRDs), removed after the test."""
    yield
    for name in ("companion", "standalone"):
        built = [d for d in yaml.safe_load_all(kubectl(control_plane, "kustomize", f"deploy/{name}")) if d]
        kubectl(
            control_plane,
            "delete",
            "--ignore-not-found",
            "--wait=false",
            "-f",
            "-",
            stdin=yaml.safe_dump_all([d for d in built if d["kind"] not in KEPT]),
        )
    kubectl(
        control_plane,
        "delete",
        "--ignore-not-found",
        f"mutatingwebhookconfiguration/{naming.MUTATING_CONFIGURATION}",
        f"validatingwebhookconfiguration/{naming.VALIDATING_CONFIGURATION}",
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


def test_the_companion_installs_as_the_readme_says(control_plane: Any, removed_after: None, tmp_path: Path) -> None:
    before = cluster_names(control_plane, "crd", "mutatingwebhookconfigurations", "validatingwebhookconfigurations")
    run_as_written(control_plane, readme_block("install-companion"), ROOT)
    stored = kubectl(
        control_plane, "get", "-f", "-", "-o", "name", stdin=yaml.safe_dump_all(generated()["companion"])
    ).split()
    assert len(stored) == len(generated()["companion"]), stored
    assert (
        cluster_names(control_plane, "crd", "mutatingwebhookconfigurations", "validatingwebhookconfigurations")
        == before
    )


def _ready(base: str) -> bool:
    import ssl
    import urllib.request

    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(base + "/readyz", timeout=2, context=ctx) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def test_the_standalone_installs_as_the_readme_says_and_registers_its_webhooks_once_it_serves(
    control_plane: Any, removed_after: None, tmp_path: Path
) -> None:
    pair = control_plane.serving_cert(["127.0.0.1", f"{naming.OPERATOR_NAME}.{naming.OPERATOR_NAMESPACE}.svc"])
    ca = control_plane.ca_cert_pem
    for name, data in (("tls.crt", pair.cert_pem), ("tls.key", pair.key_pem), ("ca.crt", ca)):
        (tmp_path / name).write_bytes(data)
    (tmp_path / "deploy").symlink_to(DEPLOY)  # a checkout with the certificate's files beside it
    webhooks = ("mutatingwebhookconfigurations", "validatingwebhookconfigurations")
    before = cluster_names(control_plane, *webhooks)
    run_as_written(control_plane, readme_block("install-standalone"), tmp_path)
    stored = kubectl(
        control_plane, "get", "-f", "-", "-o", "name", stdin=yaml.safe_dump_all(generated()["standalone"])
    ).split()
    assert len(stored) == len(generated()["standalone"]), stored
    # Installed, and nothing registered: no Pod is refused for want of an endpoint.
    assert cluster_names(control_plane, *webhooks) == before
    # The operator as the Deployment runs it (out of cluster here: registered by URL, since no Pod runs), with the
    # Secret's files: it registers its configurations once it serves, with the CA beside its certificate.
    [dep] = [d for d in generated()["standalone"] if d["kind"] == "Deployment"]
    args = [
        a
        for a in dep["spec"]["template"]["spec"]["containers"][0]["args"]
        if not a.startswith(("--tls-", "--port", "--probe-port", "--webhook-service", "--namespace"))
    ]
    port = free_port()
    base = f"https://127.0.0.1:{port}"
    log = tmp_path / "operator.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gpuctl.operator",
                *args,
                f"--kubeconfig={control_plane.kubeconfig}",
                "--bind=127.0.0.1",
                f"--port={port}",
                f"--tls-cert={tmp_path / 'tls.crt'}",
                f"--tls-key={tmp_path / 'tls.key'}",
                f"--webhook-url={base}",
                "--namespace=default",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    try:
        seen_before_ready = False
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            ready = _ready(base)
            registered = {n.split("/")[-1] for n in cluster_names(control_plane, *webhooks) - before}
            if registered and not ready:
                seen_before_ready = True  # registered while its webhooks did not answer: a window
            if ready and registered == {naming.MUTATING_CONFIGURATION, naming.VALIDATING_CONFIGURATION}:
                break
            assert proc.poll() is None, log.read_text()[-3000:]
            time.sleep(0.1)
        else:
            raise AssertionError(f"the operator did not register its webhooks: {log.read_text()[-3000:]}")
        assert not seen_before_ready
        config = json.loads(
            kubectl(control_plane, "get", "mutatingwebhookconfiguration", naming.MUTATING_CONFIGURATION, "-o", "json")
        )
        assert {w["clientConfig"]["caBundle"] for w in config["webhooks"]} == {base64.b64encode(ca).decode()}
        assert config["metadata"]["name"] < naming.KUEUE_MUTATING_CONFIGURATION
        result = CliRunner().invoke(
            app, ["doctor", "-o", "json", "--no-probe", "--kubeconfig", str(control_plane.kubeconfig)]
        )
        [mode] = [i for i in json.loads(result.stdout)["items"] if i["check"] == "operator-mode"]
        assert mode["status"] == "ok" and "runs as the standalone" in mode["saw"], mode
    finally:
        stop(proc)
