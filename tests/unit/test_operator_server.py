"""The operator's HTTPS server in-process: AdmissionReview answers, health and readiness, metrics, certificates
reloaded on rotation without a restart, and the bounds on every review (body, deadline, concurrency, connections)."""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import logging
import os
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuctl.core.instancetypes import parse_instancetype
from gpuctl.core.webhooks import WebhookContext
from gpuctl.operator.metrics import Metrics
from gpuctl.operator.server import CertificateReloader, Limits, WebhookServer
from testbed.factories import instancetype
from testbed.pki import loopback_tls_files
from testbed.request_examples import EXAMPLES


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
    cert, key, ca = loopback_tls_files(tmp_path)
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
    cert, key, new_ca = loopback_tls_files(rotated)
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
        answer = json.loads(request(srv, ca, "POST", "/mutate-pod-accelerators", review(accept.pod))[1])["response"]
        # The context answers after 1.5 s and would allow it: a refusal by the deadline came first.
        assert answer["allowed"] is False and "no answer within" in answer["status"]["message"]
    finally:
        srv.shutdown()


def test_a_connection_that_dawdles_over_its_request_is_closed(tmp_path: Path) -> None:
    srv, ca, _ = start(tmp_path, limits=Limits(request_timeout=1.0))
    try:
        raw = socket.create_connection(("127.0.0.1", srv.port))
        tls = ssl.create_default_context(cafile=str(ca)).wrap_socket(raw, server_hostname="127.0.0.1")
        tls.sendall(b"POST /mutate-pod-accelerators HTTP/1.1\r\nHost: x\r\n")  # and never the rest
        tls.settimeout(30)  # a hang guard only: the server's 1 s request timeout closes it
        assert tls.recv(1024) == b""  # closed by the server
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


# ----------------------------------------------------------------------------------------------- abuse

SECRET = b"S3CRET-REQUEST-BYTES"
BAD_HTTP = [
    b"G\x00T / HTTP/1.1\r\n\r\n",
    b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nPO\x01ST /" + SECRET + b" HTTP/1.1\r\n\r\n",  # after a good one
    b"POST /mutate-pod-accelerators HTTP/1.1\r\nHost: x\r\nBad Header Line " + SECRET + b"\r\n\r\n",
    b"POST /mutate-pod-accelerators HTTP/1.1\r\nHost: x\r\nContent-Length: 12" + SECRET + b"\r\n\r\n",
    b"POST /mutate-pod-accelerators HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nZZ" + SECRET + b"\r\n",
    b"POST /mutate-pod-accelerators HTTP/1.1\r\nHost: x\r\nX: " + SECRET * 1000 + b"\r\n\r\n",
    b"GET /" + SECRET + b" HTTP/9.9\r\n\r\n",
    b"POST /" + SECRET + b" HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}",
    b"POST /mutate-pod-accelerators HTTP/1.1\r\nHost: x\r\nContent-Length: 23\r\nConnection: close\r\n\r\n{"
    + SECRET
    + b"\x00\xff",
]
"""Requests that are not well-formed HTTP (or not a review), each carrying bytes an answer must never echo."""


def _send_raw(srv: WebhookServer, ca: Path, data: bytes) -> bytes:
    raw = socket.create_connection(("127.0.0.1", srv.port))
    tls = ssl.create_default_context(cafile=str(ca)).wrap_socket(raw, server_hostname="127.0.0.1")
    tls.settimeout(5)
    tls.sendall(data)
    got = b""
    with contextlib.suppress(OSError):
        while chunk := tls.recv(65536):
            got += chunk
    tls.close()
    return got


def test_bad_requests_get_fixed_answers_and_one_log_line_each(
    server: tuple[WebhookServer, Path, CertificateReloader], caplog: pytest.LogCaptureFixture
) -> None:
    srv, ca, _ = server
    caplog.set_level(logging.DEBUG)
    for data in BAD_HTTP:
        answer = _send_raw(srv, ca, data)
        assert answer.startswith(b"HTTP/1.") and SECRET not in answer, answer[-400:]
    # Plain HTTP and garbage on the TLS port: refused in the handshake.
    for data in (b"GET / HTTP/1.1\r\n\r\n", os.urandom(512)):
        with socket.create_connection(("127.0.0.1", srv.port)) as plain:
            plain.sendall(data)
            plain.settimeout(5)
            with contextlib.suppress(OSError):
                plain.recv(1024)
    time.sleep(0.3)
    assert request(srv, ca, "GET", "/healthz")[0] == 200
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == len(BAD_HTTP), [r.getMessage() for r in warnings]
    for record in caplog.records:
        assert record.exc_info is None and record.exc_text is None, record.getMessage()
        assert "\n" not in record.getMessage() and SECRET.decode() not in record.getMessage(), record.getMessage()


def test_a_flood_of_bad_requests_is_rate_limited_in_the_log(
    server: tuple[WebhookServer, Path, CertificateReloader], caplog: pytest.LogCaptureFixture
) -> None:
    from gpuctl.operator.ratelog import BURST

    srv, ca, _ = server
    caplog.set_level(logging.WARNING)
    started = time.monotonic()
    for _ in range(200):
        _send_raw(srv, ca, BAD_HTTP[2])
    took = time.monotonic() - started
    lines = [r.getMessage() for r in caplog.records if r.name.startswith(("gpuctl", "aiohttp", "asyncio"))]
    assert len(lines) <= BURST + took + 1, len(lines)
    assert any("dropped" in line for line in lines[BURST:]) or len(lines) <= BURST


def test_the_rate_limited_log_counts_what_it_drops() -> None:
    from gpuctl.operator.ratelog import RateLimitedLog

    now = [0.0]
    written: list[str] = []

    class Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            written.append(record.getMessage())

    logger = logging.getLogger("test-ratelog")
    logger.addHandler(Capture())
    limited = RateLimitedLog(logger, burst=3, per_second=1.0, clock=lambda: now[0])
    sent = [limited(f"bad request {i}\nforged: line") for i in range(10)]
    assert sent == [True] * 3 + [False] * 7
    now[0] = 2.5
    assert limited("later") and limited("later again") and not limited("and again")
    assert written[:3] == [f"bad request {i}\\nforged: line" for i in range(3)]
    assert written[3:] == ["later (7 similar line(s) dropped)", "later again"]
