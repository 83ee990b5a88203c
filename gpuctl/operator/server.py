"""The operator's HTTPS server: one path per admission webhook, health and readiness, Prometheus metrics.

TLS comes from mounted files and is reloaded when they change (checked on each new connection, at most once a
second), so a rotated certificate is served without a restart.
"""

from __future__ import annotations

import os
import socket
import ssl
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from gpuctl.operator.admission import BY_PATH, ContextProvider, answer
from gpuctl.operator.metrics import Metrics

MAX_BODY = 8 * 1024 * 1024


class CertificateReloader:
    """An SSL context for the current certificate files, rebuilt when their modification time changes."""

    def __init__(self, cert_file: str, key_file: str) -> None:
        self.cert_file = cert_file
        self.key_file = key_file
        self._stamp: tuple[float, float] | None = None
        self._context: ssl.SSLContext | None = None
        self._checked = 0.0
        self._lock = threading.Lock()
        self.reloads = 0

    def _current_stamp(self) -> tuple[float, float]:
        return (os.stat(self.cert_file).st_mtime, os.stat(self.key_file).st_mtime)

    def context(self) -> ssl.SSLContext:
        with self._lock:
            now = time.monotonic()
            if self._context is not None and now - self._checked < 1.0:
                return self._context
            self._checked = now
            stamp = self._current_stamp()
            if self._context is None or stamp != self._stamp:
                ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
                ctx.minimum_version = ssl.TLSVersion.TLSv1_2
                ctx.load_cert_chain(self.cert_file, self.key_file)
                self._context, self._stamp = ctx, stamp
                self.reloads += 1
            return self._context


class OperatorServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(
        self,
        address: tuple[str, int],
        certs: CertificateReloader | None,
        contexts: ContextProvider,
        metrics: Metrics,
        ready: Callable[[], bool],
    ) -> None:
        self.certs = certs
        self.contexts = contexts
        self.metrics = metrics
        self.ready = ready
        super().__init__(address, _Handler)

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, addr = super().get_request()
        # Answers are small: send them at once instead of waiting on the peer's delayed acknowledgement.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.certs is None:
            return sock, addr
        sock.settimeout(10)
        return self.certs.context().wrap_socket(sock, server_side=True, do_handshake_on_connect=False), addr

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that drops the connection or fails the handshake is not the server's failure.
        self.metrics.connection_errors += 1


class _Handler(BaseHTTPRequestHandler):
    server: OperatorServer
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        if isinstance(self.connection, ssl.SSLSocket):
            self.connection.do_handshake()

    def log_message(self, format: str, *args: Any) -> None:
        return

    def _send(self, code: int, body: bytes, content_type: str = "application/json") -> None:
        reason = self.responses.get(code, ("",))[0]
        head = f"HTTP/1.1 {code} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
        if self.close_connection:
            head += "Connection: close\r\n"
        # Status, headers and body in one write.
        self.wfile.write(head.encode("latin-1") + b"\r\n" + body)

    def do_GET(self) -> None:
        if self.path == "/healthz":
            self._send(200, b"ok", "text/plain")
        elif self.path == "/readyz":
            ok = self.server.ready()
            self._send(200 if ok else 503, b"ok" if ok else b"not ready", "text/plain")
        elif self.path == "/metrics":
            self._send(200, self.server.metrics.render().encode(), "text/plain; version=0.0.4")
        else:
            self._send(404, b'{"message": "not found"}')

    def do_POST(self) -> None:
        import json

        webhook = BY_PATH.get(self.path.split("?", 1)[0])
        if webhook is None:
            self._send(404, b'{"message": "no webhook is served at this path"}')
            return
        started = time.perf_counter()
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length < 0 or length > MAX_BODY:
            body = b""
            self.close_connection = True
        else:
            body = self.rfile.read(length)
        result = answer(webhook, body, self.server.contexts)
        payload = json.dumps(result.review, separators=(",", ":")).encode()
        self._send(200, payload)
        self.server.metrics.observe(webhook.name, time.perf_counter() - started, result.allowed, result.mutated)


def serve(
    address: tuple[str, int],
    certs: CertificateReloader | None,
    contexts: ContextProvider,
    metrics: Metrics,
    ready: Callable[[], bool],
) -> OperatorServer:
    """Start serving in a background thread; returns the server (``shutdown()`` stops it)."""
    server = OperatorServer(address, certs, contexts, metrics, ready)
    threading.Thread(target=server.serve_forever, name="webhook-server", daemon=True).start()
    return server
