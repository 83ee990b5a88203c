"""The operator's HTTPS server in-process: AdmissionReview answers, health and readiness, metrics, certificates
reloaded on rotation without a restart, and the bounds on every review (body, deadline, concurrency, connections)."""

from __future__ import annotations

import base64
import http.client
import json
import os
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.run import _tls_files
from gpuctl.core.instancetypes import parse_instancetype
from gpuctl.core.webhooks import WebhookContext
from gpuctl.operator.metrics import Metrics
from gpuctl.operator.server import CertificateReloader, Limits, WebhookServer
from tests.factories import instancetype
from tests.request_examples import EXAMPLES


class Fixed:
    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay

    def webhook_context(self, namespace: str, obj: Any = None) -> WebhookContext:
        time.sleep(self.delay)
        return WebhookContext(instancetypes=(parse_instancetype(instancetype()),))


def ok() -> list[tuple[str, bool, str]]:
    return [("cache", True, "synced")]


def start(
    tmp_path: Path, *, contexts: Any = None, limits: Limits | None = None, ready: Any = ok
) -> tuple[WebhookServer, Path, CertificateReloader]:
    cert, key, ca = _tls_files(tmp_path)
    certs = CertificateReloader(str(cert), str(key))
    srv = WebhookServer(
        ("127.0.0.1", 0), certs, contexts or Fixed(), Metrics(), ready=ready, healthy=ok, limits=limits
    ).start()
    return srv, ca, certs


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[WebhookServer, Path, CertificateReloader]]:
    srv, ca, certs = start(tmp_path)
    try:
        yield srv, ca, certs
    finally:
        srv.shutdown()


def connect(srv: WebhookServer, ca: Path, timeout: float = 10) -> http.client.HTTPSConnection:
    return http.client.HTTPSConnection(
        "127.0.0.1", srv.port, context=ssl.create_default_context(cafile=str(ca)), timeout=timeout
    )


def request(srv: WebhookServer, ca: Path, method: str, path: str, body: bytes = b"") -> tuple[int, bytes, bytes]:
    conn = connect(srv, ca)
    conn.request(method, path, body=body or None, headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    data = response.read()
    peer = conn.sock.getpeercert(binary_form=True) if conn.sock else b""
    conn.close()
    return response.status, data, peer or b""


def review(obj: dict[str, Any], uid: str = "u-1", operation: str = "CREATE") -> bytes:
    return json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {"uid": uid, "operation": operation, "object": obj},
        }
    ).encode()


def test_a_review_is_answered_with_the_cores_patch(server: tuple[WebhookServer, Path, CertificateReloader]) -> None:
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


def test_health_readiness_metrics_and_unknown_paths(server: tuple[WebhookServer, Path, CertificateReloader]) -> None:
    srv, ca, _ = server
    assert request(srv, ca, "GET", "/healthz")[:2] == (200, b"ok")
    assert request(srv, ca, "GET", "/readyz")[:2] == (200, b"ok")
    code, text, _ = request(srv, ca, "GET", "/readyz?verbose")
    assert code == 200 and b"[+]cache ok: synced" in text
    assert request(srv, ca, "POST", "/nowhere", b"{}")[0] == 404
    request(srv, ca, "POST", "/mutate-pod-accelerators", b"not json")
    metrics = request(srv, ca, "GET", "/metrics")[1].decode()
    assert 'gpuctl_webhook_requests_total{outcome="malformed",webhook="pod-accelerators.gpustack.ai"} 1.0' in metrics
    assert 'gpuctl_webhook_denials_total{webhook="pod-accelerators.gpustack.ai"} 1.0' in metrics
    assert "gpuctl_webhook_duration_seconds_bucket" in metrics


def test_readiness_fails_and_says_why(tmp_path: Path) -> None:
    srv, ca, _ = start(tmp_path, ready=lambda: [("webhook-cache", False, "InstanceTypes not synced")])
    try:
        code, text, _ = request(srv, ca, "GET", "/readyz")
        assert code == 503 and b"webhook-cache: InstanceTypes not synced" in text
    finally:
        srv.shutdown()


def test_a_rotated_certificate_is_served_without_a_restart(
    server: tuple[WebhookServer, Path, CertificateReloader], tmp_path: Path
) -> None:
    srv, ca, certs = server
    _, _, before = request(srv, ca, "GET", "/healthz")
    rotated = tmp_path / "rotated"
    rotated.mkdir()
    cert, key, new_ca = _tls_files(rotated)
    time.sleep(1.1)  # modification times have a resolution; the files are looked at once a second
    os.replace(cert, certs.cert_file)
    os.replace(key, certs.key_file)
    deadline = time.monotonic() + 5
    while certs.reloads < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    code, _, after = request(srv, new_ca, "GET", "/healthz")
    assert code == 200 and after != before and certs.reloads == 2


# ----------------------------------------------------------------------------------------------- bounds


def test_a_review_over_the_body_limit_is_answered_by_policy_with_its_uid(tmp_path: Path) -> None:
    srv, ca, _ = start(tmp_path, limits=Limits(max_body=64 * 1024))
    try:
        big = {"kind": "Pod", "metadata": {"name": "big", "annotations": {"x": "y" * 200_000}}, "spec": {}}
        code, data, _ = request(srv, ca, "POST", "/mutate-pod-accelerators", review(big, uid="big-1"))
        answer = json.loads(data)["response"]
        assert code == 200 and answer["uid"] == "big-1" and answer["allowed"] is False
        assert "larger than" in answer["status"]["message"]
        ignore = json.loads(request(srv, ca, "POST", "/mutate-workloads", review(big, uid="big-2"))[1])["response"]
        assert ignore["uid"] == "big-2" and ignore["allowed"] is True  # failurePolicy Ignore allows
    finally:
        srv.shutdown()


def test_a_review_past_its_deadline_is_answered_by_policy(tmp_path: Path) -> None:
    srv, ca, _ = start(tmp_path, contexts=Fixed(delay=1.5), limits=Limits(deadline=0.5))
    try:
        accept = next(e for e in EXAMPLES if e.id == "rule2-accept")
        started = time.monotonic()
        answer = json.loads(request(srv, ca, "POST", "/mutate-pod-accelerators", review(accept.pod))[1])["response"]
        assert time.monotonic() - started < 1.4
        assert answer["allowed"] is False and "no answer within" in answer["status"]["message"]
    finally:
        srv.shutdown()


def test_a_connection_that_dawdles_over_its_request_is_closed(tmp_path: Path) -> None:
    srv, ca, _ = start(tmp_path, limits=Limits(request_timeout=1.0))
    try:
        raw = socket.create_connection(("127.0.0.1", srv.port))
        tls = ssl.create_default_context(cafile=str(ca)).wrap_socket(raw, server_hostname="127.0.0.1")
        tls.sendall(b"POST /mutate-pod-accelerators HTTP/1.1\r\nHost: x\r\n")  # and never the rest
        tls.settimeout(5)
        started = time.monotonic()
        assert tls.recv(1024) == b""  # closed by the server
        assert time.monotonic() - started < 4
        assert request(srv, ca, "GET", "/healthz")[0] == 200
    finally:
        srv.shutdown()


def test_connections_beyond_the_cap_are_refused_and_good_ones_served(tmp_path: Path) -> None:
    srv, ca, _ = start(tmp_path, limits=Limits(max_connections=8))
    try:
        kept = connect(srv, ca)
        kept.request("GET", "/healthz")
        assert kept.getresponse().read() == b"ok"
        held = []
        for _ in range(12):
            s = socket.create_connection(("127.0.0.1", srv.port))
            held.append(ssl.create_default_context(cafile=str(ca)).wrap_socket(s, server_hostname="127.0.0.1"))
        time.sleep(0.2)
        assert len(srv.connections) <= 8
        kept.request("GET", "/healthz")  # the established connection keeps being served
        assert kept.getresponse().read() == b"ok"
        for s in held:
            s.close()
    finally:
        srv.shutdown()


def test_concurrent_reviews_beyond_the_cap_wait_and_all_get_answers(tmp_path: Path) -> None:
    srv, ca, _ = start(tmp_path, contexts=Fixed(delay=0.2), limits=Limits(concurrent_reviews=2, deadline=5.0))
    try:
        accept = next(e for e in EXAMPLES if e.id == "rule2-accept")
        answers: list[bool] = []

        def one(i: int) -> None:
            data = request(srv, ca, "POST", "/mutate-pod-accelerators", review(accept.pod, uid=f"c-{i}"))[1]
            answers.append(json.loads(data)["response"]["allowed"])

        threads = [threading.Thread(target=one, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        assert answers == [True] * 6
    finally:
        srv.shutdown()
