"""The operator's HTTPS server: one path per registered webhook, health and readiness, Prometheus metrics.

It is aiohttp on uvloop's event loop, chosen by measurement (docs/operator.md): on loopback over TLS, aiohttp and
uvicorn answer a review alike (p99 ≈ 2-3 ms at 200 requests/s), but an idle TLS connection costs about 280 KiB on
asyncio's own loop against about 28 KiB on uvloop (3,600 slow connections: 1,027 MiB against 139 MiB), and aiohttp
takes the process's SSL context as it is, so a rotated certificate is served without a restart and without a
framework in between.

Every review is bounded:

- **body**: at most :attr:`Limits.max_body` (the API server's own 3 MiB request limit, twice for an UPDATE's
  ``object`` and ``oldObject``, plus room for the envelope); a larger review is answered by failure policy with the uid
  read from its first bytes, and its connection closed;
- **memory**: each review is charged what decoding and judging it can cost (:func:`~gpuctl.operator.memory.review_cost`,
  up to 40x its bytes for the worst shapes), and starts only while the process stays under
  :attr:`Limits.memory_target` of its memory limit (:class:`~gpuctl.operator.memory.MemoryBudget`); its body is
  read only once its bytes fit. At most :attr:`Limits.concurrent_reviews` run at once; a review that cannot start
  before its deadline is answered by failure policy as busy, one that could never fit at once;
- **time**: each review has a deadline below the webhook timeout (:attr:`Limits.deadline`); a rule still running
  then is answered by failure policy;
- **connections**: at most :attr:`Limits.max_connections`; a connection must finish its TLS handshake within
  :attr:`Limits.handshake_timeout` and send each request within :attr:`Limits.request_timeout`, or it is closed.

And quiet under abuse: a request that is not HTTP, a review that is malformed or refused, a connection that fails —
each is one log line, rate-limited (:class:`~gpuctl.operator.ratelog.RateLimitedLog`), never a traceback; and every
error answer is fixed text, never the request's bytes echoed back.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import re
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpuctl.operator.admission import BY_PATH, Answer, ContextProvider, answer, read_uid, refusal
from gpuctl.operator.memory import Charge, MemoryBudget, review_cost
from gpuctl.operator.metrics import Metrics
from gpuctl.operator.ratelog import RateLimitedLog

log = logging.getLogger("gpuctl.operator.server")

Check = Callable[[], list[tuple[str, bool, str]]]
"""Named checks: ``(name, ok, detail)`` each (the verbose health answer lists them)."""


@dataclass(frozen=True)
class Limits:
    max_body: int = 7 * 1024 * 1024
    memory_limit: int | None = None
    """The process's memory limit in bytes (None: unknown, and the reviews running at once may cost
    :data:`~gpuctl.operator.memory.UNLIMITED_BUDGET`)."""
    memory_target: float = 0.55
    """The share of the memory limit the process may reach with its reviews running (the rest is headroom for what
    reviews cannot account for: connections' buffers, the allocator's slack)."""
    concurrent_reviews: int = 16
    deadline: float = 8.0
    max_connections: int = 4096
    handshake_timeout: float = 5.0
    request_timeout: float = 10.0
    keepalive_timeout: float = 30.0
    rule_threads: int = 4


class CertificateReloader:
    """One SSL context for the serving certificate, its chain reloaded in place when the files change, so new
    connections get the new certificate while the server keeps its listening socket."""

    def __init__(self, cert_file: str, key_file: str) -> None:
        self.cert_file = cert_file
        self.key_file = key_file
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self._stamp = self._current_stamp()
        self.context.load_cert_chain(cert_file, key_file)
        self.reloads = 1

    def _current_stamp(self) -> tuple[float, float]:
        return (os.stat(self.cert_file).st_mtime, os.stat(self.key_file).st_mtime)

    def refresh(self) -> bool:
        """Reload the chain if the files changed; whether it did."""
        try:
            stamp = self._current_stamp()
            if stamp == self._stamp:
                return False
            self.context.load_cert_chain(self.cert_file, self.key_file)
        except (OSError, ssl.SSLError):
            return False  # a rotation caught half-written: the next check retries
        self._stamp = stamp
        self.reloads += 1
        return True


class _Guard(asyncio.Protocol):
    """Wraps aiohttp's protocol for one connection: counts it against the cap and notes when a request is pending,
    so a connection that dawdles over a request is closed."""

    def __init__(self, inner: Any, server: WebhookServer) -> None:
        self.inner = inner
        self.server = server
        self.transport: Any = None
        self.pending_since: float | None = None

    def connection_made(self, transport: Any) -> None:
        server = self.server
        if len(server.connections) >= server.limits.max_connections:
            server.metrics.connections_refused.labels("too-many").inc()
            transport.abort()
            self.inner = None
            return
        self.transport = transport
        self.pending_since = time.monotonic()
        server.connections[transport] = self
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self.inner is None:
            return
        if self.pending_since is None:
            self.pending_since = time.monotonic()
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        result: bool | None = self.inner.eof_received() if self.inner is not None else None
        return result

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.connections.pop(self.transport, None)
        if self.inner is not None:
            self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        if self.inner is not None:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.inner is not None:
            self.inner.resume_writing()


def _quiet_handler(note: RateLimitedLog) -> Any:
    """aiohttp's protocol for one connection, but quiet: an HTTP error is one rate-limited log line (not a
    traceback) and is answered with its status line alone (aiohttp's own answer quotes the offending bytes)."""
    from http import HTTPStatus

    from aiohttp import web
    from aiohttp.web_protocol import RequestHandler

    class QuietHandler(RequestHandler):
        __slots__ = ()

        def log_exception(self, *args: Any, **kwargs: Any) -> None:
            exc = kwargs.get("exc_info")
            what = f"{type(exc).__name__}: {exc}" if isinstance(exc, BaseException) else ""
            note(f"HTTP: {args[0] if args else 'error'} {what}")

        def handle_error(
            self, request: Any, status: int = 500, exc: BaseException | None = None, message: str | None = None
        ) -> Any:
            # The parser's message quotes the offending bytes below its first line: only that first line is kept.
            reason = (getattr(exc, "message", None) or message or str(exc or "")).strip().split("\n")[0]
            reason = re.split(r":\s*b['\"]", reason)[0].rstrip(":")
            note(f"HTTP {status} to {request.remote}: {type(exc).__name__ if exc else 'error'}: {reason}")
            if request.writer.output_size > 0:
                raise ConnectionError("the answer was already started; closing the connection")
            try:
                phrase = HTTPStatus(status).phrase
            except ValueError:
                phrase = "Error"
            response = web.Response(status=status, text=f"{status} {phrase}\n", content_type="text/plain")
            response.force_close()
            return response

    return QuietHandler


class WebhookServer:
    def __init__(
        self,
        address: tuple[str, int],
        certs: CertificateReloader | None,
        contexts: ContextProvider,
        metrics: Metrics,
        *,
        ready: Check,
        healthy: Check,
        limits: Limits | None = None,
        probe_address: tuple[str, int] | None = None,
        webhooks: bool = True,
    ) -> None:
        self.address = address
        self.webhooks = webhooks
        """Whether admission reviews are answered (the companion serves none: health, readiness and metrics only)."""
        self.probe_address = probe_address
        """Where health, readiness and metrics are also served over plain HTTP (for probes and scrapers that a network
        policy keeps off the webhook port); None: only on the webhook port."""
        self.certs = certs
        self.contexts = contexts
        self.metrics = metrics
        self.ready = ready
        self.healthy = healthy
        self.limits = limits or Limits()
        self.connections: dict[Any, _Guard] = {}
        self.port = address[1]
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._started = threading.Event()
        self._error: BaseException | None = None
        self._pool = concurrent.futures.ThreadPoolExecutor(self.limits.rule_threads, thread_name_prefix="review")
        self.bad_requests = RateLimitedLog(log)
        """One line per bad request or failed connection, rate-limited."""
        metrics.gauge(self._gauges)

    # ------------------------------------------------------------------------------------------- lifecycle

    def start(self) -> WebhookServer:
        """Serve from a background thread; returns once listening (raises if the address cannot be bound)."""
        self._thread = threading.Thread(target=self._run, name="webhook-server", daemon=True)
        self._thread.start()
        self._started.wait(30)
        if self._error is not None:
            raise self._error
        return self

    def _run(self) -> None:
        import uvloop

        loop = uvloop.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._serve())
        except BaseException as exc:  # noqa: BLE001 - reported to start()
            self._error = exc
            self._started.set()
            return
        self._started.set()
        loop.run_forever()

    async def _serve(self) -> None:
        from aiohttp import web

        app = web.Application()
        app.router.add_get("/healthz", self._health)
        app.router.add_get("/livez", self._health)
        app.router.add_get("/readyz", self._readiness)
        app.router.add_get("/metrics", self._metrics)
        if self.webhooks:
            app.router.add_post("/{path:.*}", self._review)
        handler_options: dict[str, Any] = {"access_log": None, "keepalive_timeout": self.limits.keepalive_timeout}
        self._runner = web.AppRunner(app, **handler_options)
        await self._runner.setup()
        inner = self._runner.server
        assert inner is not None
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(self._loop_exception)
        quiet = _quiet_handler(self.bad_requests)
        self._server = await loop.create_server(
            lambda: _Guard(quiet(inner, loop=loop, **handler_options), self),
            self.address[0],
            self.address[1],
            ssl=self.certs.context if self.certs else None,
            ssl_handshake_timeout=self.limits.handshake_timeout if self.certs else None,
            backlog=1024,
            reuse_address=True,
        )
        self.port = self._server.sockets[0].getsockname()[1]
        self._probes: Any = None
        if self.probe_address is not None:
            probes = web.Application()
            probes.router.add_get("/healthz", self._health)
            probes.router.add_get("/livez", self._health)
            probes.router.add_get("/readyz", self._readiness)
            probes.router.add_get("/metrics", self._metrics)
            self._probe_runner = web.AppRunner(probes, **handler_options)
            await self._probe_runner.setup()
            probe_inner = self._probe_runner.server
            assert probe_inner is not None
            self._probes = await loop.create_server(
                lambda: _Guard(quiet(probe_inner, loop=loop, **handler_options), self),
                self.probe_address[0],
                self.probe_address[1],
                reuse_address=True,
            )
            self.probe_port = self._probes.sockets[0].getsockname()[1]
        self.budget = MemoryBudget(self.limits.memory_limit, self.limits.memory_target)
        self._running = asyncio.Semaphore(self.limits.concurrent_reviews)
        self._held: set[Charge] = set()
        self._releasing: set[asyncio.Future[None]] = set()
        self._reaper = asyncio.ensure_future(self._reap())

    def _loop_exception(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        """A connection's failure (a TLS error, a reset) is one rate-limited line; anything else keeps the default
        report with its traceback."""
        if "transport" not in context and "protocol" not in context:
            loop.default_exception_handler(context)
            return
        exc = context.get("exception")
        what = f": {type(exc).__name__}: {exc}" if exc is not None else ""
        self.bad_requests(f"connection: {context.get('message', 'failed')}{what}")

    async def _reap(self) -> None:
        """Once a second: close connections that dawdle over a request, and reload a rotated certificate."""
        while True:
            await asyncio.sleep(1.0)
            now = time.monotonic()
            for transport, guard in list(self.connections.items()):
                if guard.pending_since is not None and now - guard.pending_since > self.limits.request_timeout:
                    self.metrics.connections_refused.labels("slow").inc()
                    transport.abort()
            if self.certs is not None:
                self.certs.refresh()
            await self.budget.recheck()  # resident memory moves without a review ending

    def shutdown(self) -> None:
        loop = self._loop
        if loop is None:
            return

        async def close() -> None:
            self._reaper.cancel()
            self._server.close()
            if self._probes is not None:
                self._probes.close()
            for transport in list(self.connections):
                transport.abort()
            await self._runner.cleanup()
            if self._probes is not None:
                await self._probe_runner.cleanup()
            loop.stop()

        asyncio.run_coroutine_threadsafe(close(), loop)
        if self._thread is not None:
            self._thread.join(10)
        self._pool.shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------------------------------------------------- health

    async def _checks(self, request: Any, checks: Check) -> Any:
        from aiohttp import web

        results = checks()
        ok = all(passed for _, passed, _ in results)
        if "verbose" in request.query:
            lines = [
                f"[{'+' if passed else '-'}]{name} {'ok' if passed else 'failed'}: {detail}"
                for name, passed, detail in results
            ]
            text = "\n".join(lines) + f"\n{'ok' if ok else 'failed'}\n"
        else:
            text = "ok" if ok else "failed: " + "; ".join(f"{n}: {d}" for n, p, d in results if not p)
        return web.Response(status=200 if ok else 503, text=text)

    async def _health(self, request: Any) -> Any:
        return await self._checks(request, self.healthy)

    async def _readiness(self, request: Any) -> Any:
        return await self._checks(request, self.ready)

    async def _metrics(self, request: Any) -> Any:
        from aiohttp import web

        body = await asyncio.get_running_loop().run_in_executor(self._pool, self.metrics.render)
        return web.Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})

    def _gauges(self) -> Any:
        from gpuctl.operator.metrics import gauge_family

        yield gauge_family(
            "gpuctl_webhook_connections",
            "Open connections to the webhook server.",
            [],
            [([], float(len(self.connections)))],
        )
        budget = getattr(self, "budget", None)
        if budget is not None:
            yield gauge_family(
                "gpuctl_webhook_memory_bytes",
                "The reviews' memory budget: what the running reviews are charged, and what they may be.",
                ["state"],
                [(["charged"], float(budget.charged)), (["capacity"], float(budget.capacity()))],
            )

    # ------------------------------------------------------------------------------------------- reviews

    async def _review(self, request: Any) -> Any:
        from aiohttp import web

        started = time.perf_counter()
        webhook = BY_PATH.get(request.path)
        if webhook is None:
            self.bad_requests(f"POST from {request.remote} to a path no webhook is served at")
            return web.json_response({"message": "no webhook is served at this path"}, status=404)
        guard = self.connections.get(request.transport)
        deadline = time.monotonic() + self.limits.deadline
        charge = Charge()
        keep_alive = True
        try:
            result, keep_alive = await self._answer(webhook, request, deadline, charge)
        finally:
            if charge not in self._held:  # else its rule still runs, and releases it when it ends
                await self.budget.release(charge)
        if guard is not None:
            guard.pending_since = None
        if result.outcome != "answered":
            self.bad_requests(f"{webhook.name}: review from {request.remote} {result.outcome}: {result.detail}")
        self.metrics.observe(
            webhook.name, time.perf_counter() - started, result.allowed, result.mutated, result.outcome
        )
        response = web.Response(body=result.body(), content_type="application/json")
        if not keep_alive:
            response.force_close()
        return response

    async def _answer(self, webhook: Any, request: Any, deadline: float, charge: Charge) -> tuple[Answer, bool]:
        """The answer to one review and whether its connection may be kept. Its body is read once its bytes fit in
        the budget; it is judged once what judging it can cost fits too."""
        limit = self.limits.max_body
        length = request.content_length
        if length is not None and length > limit:
            head = await self._head(request, deadline)
            return refusal(
                webhook, read_uid(head), f"the review is larger than {limit // (1024 * 1024)} MiB", "too-large"
            ), False
        # Reading holds the body: at most half the budget goes to bodies, so reviews holding theirs can proceed.
        reserve = length if length is not None else limit
        if not await self.budget.acquire(charge, reserve, self._left(deadline), share=0.5):
            return self._busy(webhook, await self._head(request, deadline)), False
        body = await self._read_body(request, deadline, reserve)
        if isinstance(body, tuple):
            head, why = body
            return refusal(webhook, read_uid(head), why, "too-large" if "larger" in why else "malformed"), False
        cost = review_cost(body, webhook.mutating)
        if cost > self.budget.capacity():
            return (
                refusal(
                    webhook,
                    read_uid(body),
                    "the review would take more memory to judge than the operator may spend on reviews",
                    "too-large",
                    f"{len(body)} bytes, {cost} bytes to judge, {self.budget.capacity()} bytes of budget",
                ),
                True,
            )
        if not await self.budget.acquire(charge, max(0, cost - charge.amount), self._left(deadline)):
            return self._busy(webhook, body), True
        return await self._judge(webhook, body, deadline, charge), True

    def _busy(self, webhook: Any, head: bytes | bytearray) -> Answer:
        return refusal(webhook, read_uid(head), "the operator is busy with other reviews; retry", "busy")

    @staticmethod
    def _left(deadline: float) -> float:
        return max(0.0, deadline - time.monotonic())

    async def _head(self, request: Any, deadline: float) -> bytes:
        """The first bytes of a body that will not be read whole (where its uid is)."""
        try:
            return bytes(await asyncio.wait_for(request.content.read(65536), max(0.01, min(1.0, self._left(deadline)))))
        except (TimeoutError, asyncio.TimeoutError, OSError, ValueError):
            return b""

    async def _read_body(self, request: Any, deadline: float, expected: int) -> bytearray | tuple[bytes, str]:
        """The body, read into one buffer, or (its first bytes, why not) when it is larger than the limit or does not
        arrive in time."""
        limit = self.limits.max_body
        body = bytearray()
        try:
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError
                chunk = await asyncio.wait_for(request.content.readany(), remaining)
                if not chunk:
                    break
                body += chunk
                if len(body) > min(limit, expected):
                    return bytes(body[:65536]), f"the review is larger than {limit // (1024 * 1024)} MiB"
        except (TimeoutError, asyncio.TimeoutError):  # one class from 3.11 on, two before
            return bytes(body[:65536]), "the review's body did not arrive before the deadline"
        return body

    async def _judge(self, webhook: Any, body: bytearray, deadline: float, charge: Charge) -> Answer:
        loop = asyncio.get_running_loop()
        try:
            await asyncio.wait_for(self._running.acquire(), self._left(deadline))
        except (TimeoutError, asyncio.TimeoutError):  # one class from 3.11 on, two before
            return self._busy(webhook, body)
        future = loop.run_in_executor(self._pool, answer, webhook, body, self.contexts)
        # The rule holds its memory and its slot until it ends, even past the deadline.
        self._held.add(charge)

        def done(_: Any) -> None:
            self._running.release()
            self._held.discard(charge)
            task = asyncio.ensure_future(self.budget.release(charge))
            self._releasing.add(task)
            task.add_done_callback(self._releasing.discard)

        future.add_done_callback(done)
        try:
            return await asyncio.wait_for(asyncio.shield(future), self._left(deadline))
        except (TimeoutError, asyncio.TimeoutError):  # one class from 3.11 on, two before
            return refusal(webhook, read_uid(body), f"no answer within {self.limits.deadline:.0f}s", "deadline")
