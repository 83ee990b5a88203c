"""The operator's HTTPS server in-process: AdmissionReview answers, health, metrics, and certificates reloaded on
rotation without a restart."""

from __future__ import annotations

import base64
import http.client
import json
import os
import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.run import _tls_files
from gpuctl.core.instancetypes import parse_instancetype
from gpuctl.core.webhooks import WebhookContext
from gpuctl.operator.metrics import Metrics
from gpuctl.operator.server import CertificateReloader, OperatorServer, serve
from tests.factories import instancetype
from tests.request_examples import EXAMPLES


class Fixed:
    def webhook_context(self, namespace: str, obj: Any = None) -> WebhookContext:
        return WebhookContext(instancetypes=(parse_instancetype(instancetype()),))


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[OperatorServer, Path, CertificateReloader]]:
    cert, key, ca = _tls_files(tmp_path)
    certs = CertificateReloader(str(cert), str(key))
    srv = serve(("127.0.0.1", 0), certs, Fixed(), Metrics(), lambda: True)
    try:
        yield srv, ca, certs
    finally:
        srv.shutdown()


def request(srv: OperatorServer, ca: Path, method: str, path: str, body: bytes = b"") -> tuple[int, bytes, bytes]:
    conn = http.client.HTTPSConnection(
        "127.0.0.1", srv.server_address[1], context=ssl.create_default_context(cafile=str(ca)), timeout=5
    )
    conn.request(method, path, body=body or None, headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    data = response.read()
    peer = conn.sock.getpeercert(binary_form=True) if conn.sock else b""
    conn.close()
    return response.status, data, peer or b""


def review(pod: dict[str, Any]) -> bytes:
    return json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {"uid": "u-1", "operation": "CREATE", "object": pod},
        }
    ).encode()


def test_a_review_is_answered_with_the_cores_patch(server: tuple[OperatorServer, Path, CertificateReloader]) -> None:
    srv, ca, _ = server
    accept = next(e for e in EXAMPLES if e.id == "rule2-accept")
    code, data, _ = request(srv, ca, "POST", "/mutate-pod-accelerators", review(accept.pod))
    answer = json.loads(data)["response"]
    assert code == 200 and answer["uid"] == "u-1" and answer["allowed"] is True and answer["patchType"] == "JSONPatch"
    assert [op["path"] for op in json.loads(base64.b64decode(answer["patch"]))] == [
        "/spec/containers/0/resources/limits/nvidia.com~1gpu.sliced.units",
        "/spec/containers/0/resources/limits/nvidia.com~1gpu.sliced.cores-percentage",
    ]
    reject = next(e for e in EXAMPLES if e.id == "rule7-reject")
    answer = json.loads(request(srv, ca, "POST", "/mutate-pod-accelerators", review(reject.pod))[1])["response"]
    assert answer["allowed"] is False and answer["status"]["message"] == reject.message


def test_health_metrics_and_unknown_paths(server: tuple[OperatorServer, Path, CertificateReloader]) -> None:
    srv, ca, _ = server
    assert request(srv, ca, "GET", "/healthz")[:2] == (200, b"ok")
    assert request(srv, ca, "GET", "/readyz")[:2] == (200, b"ok")
    assert request(srv, ca, "POST", "/nowhere", b"{}")[0] == 404
    request(srv, ca, "POST", "/mutate-pod-accelerators", b"not json")
    metrics = request(srv, ca, "GET", "/metrics")[1].decode()
    assert 'gpuctl_webhook_requests_total{webhook="pod-accelerators.gpustack.ai"} 1' in metrics
    assert 'gpuctl_webhook_denials_total{webhook="pod-accelerators.gpustack.ai"} 1' in metrics


def test_a_rotated_certificate_is_served_without_a_restart(
    server: tuple[OperatorServer, Path, CertificateReloader], tmp_path: Path
) -> None:
    srv, ca, certs = server
    _, _, before = request(srv, ca, "GET", "/healthz")
    rotated = tmp_path / "rotated"
    rotated.mkdir()
    cert, key, new_ca = _tls_files(rotated)
    time.sleep(1.1)  # the files are looked at, at most, once a second
    os.replace(cert, certs.cert_file)
    os.replace(key, certs.key_file)
    time.sleep(1.1)
    code, _, after = request(srv, new_ca, "GET", "/healthz")
    assert code == 200 and after != before and certs.reloads == 2
