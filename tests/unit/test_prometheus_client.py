"""The Prometheus client's handling of what comes back: answers parsed into samples, and every other answer (an
error, a body that is not Prometheus', the API server's own Status in place of the Service's) one line naming the
query and the cause. A loopback HTTP server plays Prometheus; the real one is in the integration tests."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from gpuctl.cluster.prometheus import Prometheus, PrometheusError, ServiceRef

ANSWERS: dict[str, tuple[int, bytes]] = {}


class Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        status, body = ANSWERS[self.path]
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        return None


@pytest.fixture
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        ANSWERS.clear()


def answer(path: str, body: Any, status: int = 200) -> None:
    ANSWERS[path] = (status, body if isinstance(body, bytes) else json.dumps(body).encode())


def test_a_vector_becomes_samples_and_nan_is_left_out(server: str) -> None:
    answer(
        "/api/v1/query",
        {
            "status": "success",
            "data": {
                "resultType": "vector",
                "result": [
                    {"metric": {"namespace": "team-a"}, "value": [1, "10.5"]},
                    {"metric": {"namespace": "team-b"}, "value": [1, "NaN"]},
                ],
            },
        },
    )
    [sample] = Prometheus(server).query("x", 1.0)
    assert (dict(sample.labels), sample.value) == ({"namespace": "team-a"}, 10.5)


def test_prometheus_refusing_a_query_is_said_in_its_words(server: str) -> None:
    answer("/api/v1/query", {"status": "error", "errorType": "bad_data", "error": "parse error at char 3"}, 400)
    with pytest.raises(PrometheusError, match=r"failed the held query: parse error at char 3$"):
        Prometheus(server).query("x(", 1.0, what="held query")


def test_a_body_that_is_not_prometheus_answer_is_refused(server: str) -> None:
    answer("/api/v1/query", b"<html>login</html>")
    with pytest.raises(PrometheusError, match="with something not JSON"):
        Prometheus(server).query("x", 1.0)
    answer("/api/v1/query", {"status": "success", "data": {"resultType": "matrix", "result": []}})
    with pytest.raises(PrometheusError, match="with a matrix, not a vector"):
        Prometheus(server).query("x", 1.0)


def test_a_body_nested_past_the_parsers_stack_is_refused_in_one_line(server: str) -> None:
    answer("/api/v1/query", b"[" * 200_000 + b"]" * 200_000)
    with pytest.raises(PrometheusError, match="with something not JSON"):
        Prometheus(server).query("x", 1.0)


def test_a_sample_whose_time_is_not_a_number_is_left_out(server: str) -> None:
    values = [[60, "1"], ["NaN", "2"], ["soon", "3"], [180, "4"]]
    matrix = {"resultType": "matrix", "result": [{"metric": {"UUID": "GPU-1"}, "values": values}]}
    answer("/api/v1/query_range", {"status": "success", "data": matrix})
    [series] = Prometheus(server).query_range("x", 60, 180, 60)
    assert series.values == {60: 1.0, 180: 4.0}


def test_an_unreachable_prometheus_is_one_line_without_errno() -> None:
    with pytest.raises(PrometheusError) as caught:
        Prometheus("http://127.0.0.1:1", timeout=2).query("x", 1.0)
    assert str(caught.value).startswith("cannot reach Prometheus at http://127.0.0.1:1: ")
    assert "Errno" not in str(caught.value) and "\n" not in str(caught.value)


class StatusLive:
    """The API server's proxy answering with its own Status (no endpoint ready behind the Service)."""

    def service_get(self, *args: Any, **kwargs: Any) -> tuple[int, str]:
        status = {
            "kind": "Status",
            "apiVersion": "v1",
            "status": "Failure",
            "message": 'no endpoints available for service "http:prometheus:9090"',
            "reason": "ServiceUnavailable",
            "code": 503,
        }
        return 503, json.dumps(status)


def test_the_api_servers_own_status_through_the_proxy_is_said_as_such() -> None:
    client = Prometheus(service=ServiceRef.parse("monitoring/prometheus:9090"), live=StatusLive())
    with pytest.raises(PrometheusError) as caught:
        client.query("x", 1.0, what="held query")
    assert str(caught.value) == (
        "the API server's proxy to service monitoring/prometheus:9090 answered the held query: no endpoints "
        'available for service "http:prometheus:9090"'
    )


@pytest.mark.parametrize("text", ["prometheus:9090", "monitoring/prometheus", "monitoring/prometheus:http", "/p:1"])
def test_a_service_reference_must_be_namespace_name_port(text: str) -> None:
    with pytest.raises(PrometheusError, match="give NAMESPACE/NAME:PORT"):
        ServiceRef.parse(text)
