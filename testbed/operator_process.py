"""The operator as a separate process against the test control plane, and an HTTPS client for it."""

from __future__ import annotations

import base64
import contextlib
import os
import socket
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from testbed.gpucluster import wait_for

ROOT = Path(__file__).resolve().parents[1]


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after 10 s: a process the tests started never outlives them."""
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Operator:
    def __init__(self, url: str, ca_file: Path, proc: subprocess.Popen[bytes], log: Path) -> None:
        self.url, self.ca_file, self.proc, self.log = url, ca_file, proc, log

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def get(self, path: str) -> tuple[int, bytes]:
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        try:
            with urllib.request.urlopen(self.url + path, timeout=10, context=ctx) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        request = urllib.request.Request(
            self.url + path, data=body, headers={"Content-Type": "application/json"}, method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=10, context=ctx) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def rss_mib(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0


def serving_secret(ca_pem: bytes, cert_pem: bytes, key_pem: bytes) -> dict[str, Any]:
    """The operator's serving Secret as cert-manager writes it (``ca.crt`` is what doctor's CA fix copies)."""
    from gpuctl.core import naming

    return {
        "metadata": {"name": naming.OPERATOR_TLS_SECRET},
        "type": "kubernetes.io/tls",
        "data": {
            k: base64.b64encode(v).decode()
            for k, v in (("ca.crt", ca_pem), ("tls.crt", cert_pem), ("tls.key", key_pem))
        },
    }


def ready(op: Operator) -> bool:
    if op.proc.poll() is not None:
        raise AssertionError(f"the operator exited: {op.log.read_text()[-3000:]}")
    try:
        return op.get("/readyz")[0] == 200
    except OSError:
        return False


def operator_argv(kubeconfig: Path, port: int, work: Path, mode: str = "standalone") -> list[str]:
    """The operator on loopback, serving with the certificate pair ``work/tls.{crt,key}`` (the test control plane
    runs no GPUStack worker: the standalone operator takes its place)."""
    return [
        sys.executable,
        "-m",
        "gpuctl.operator",
        f"--mode={mode}",
        "--kubeconfig",
        str(kubeconfig),
        "--bind",
        "127.0.0.1",
        "--port",
        str(port),
        "--tls-cert",
        str(work / "tls.crt"),
        "--tls-key",
        str(work / "tls.key"),
        "--namespace",
        "default",
    ]


@contextlib.contextmanager
def running_operator(control_plane: Any, work: Path, *args: str, kubeconfig: Path | None = None) -> Iterator[Operator]:
    """Start ``python -m gpuctl.operator`` on a free port with a serving certificate of the run's CA; stop it after."""
    pair = control_plane.serving_cert(["127.0.0.1", "localhost"])
    (work / "tls.crt").write_bytes(pair.cert_pem)
    (work / "tls.key").write_bytes(pair.key_pem)
    ca = work / "ca.crt"
    ca.write_bytes(base64.b64decode(control_plane.ca_bundle))
    port = free_port()
    log = work / "operator.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [*operator_argv(Path(kubeconfig or control_plane.kubeconfig), port, work), *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    op = Operator(f"https://127.0.0.1:{port}", ca, proc, log)
    try:
        wait_for("the operator ready", lambda: ready(op), timeout=30)
        yield op
    finally:
        stop(proc)
        sys.stdout.write(f"\n--- operator log ({log}) ---\n" + log.read_text()[-6000:])


@contextlib.contextmanager
def webhooks_registered(control_plane: Any, api: Any, work: Path) -> Iterator[Operator]:
    """The operator running, with its webhook configurations registered by ``url:`` with the run's CA (and removed
    after): the API server calls it for every Pod, Workload, InstanceType and Instance."""
    import time

    from kubernetes import client
    from kubernetes.client.rest import ApiException

    from gpuctl.operator.manifests import webhook_configurations

    with running_operator(control_plane, work) as op:
        adm = client.AdmissionregistrationV1Api(api)
        configs = webhook_configurations(ca_bundle=control_plane.ca_bundle, url=op.url)
        adm.create_mutating_webhook_configuration(configs[0])
        adm.create_validating_webhook_configuration(configs[1])
        time.sleep(1)  # the API server picks up new webhook configurations asynchronously
        try:
            yield op
        finally:
            for delete, name in (
                (adm.delete_mutating_webhook_configuration, configs[0]["metadata"]["name"]),
                (adm.delete_validating_webhook_configuration, configs[1]["metadata"]["name"]),
            ):
                with contextlib.suppress(ApiException):
                    delete(name)
