"""Kubernetes Events (``events.k8s.io/v1``) for the operator's decisions, recorded the way controllers record them.

``record`` never blocks and never fails: it decides under a lock what to write and hands it to a writer thread
through a bounded queue, so a slow or failing events API costs a verdict nothing (what cannot be written is counted
and dropped). Repeats of one event — the same object, action, reason, type and note — become one Event with a
``series``: the second occurrence writes ``series.count = 2`` at once, later ones are folded into a heartbeat
patch, and a series not seen again within :data:`SERIES_WINDOW` ends (a later repeat starts a new Event). Each
object has a token bucket (:data:`BURST` new Events at once, one more every :data:`REFILL_SECONDS`), so one object
retrying all day cannot flood the API server.
"""

from __future__ import annotations

import collections
import datetime
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from gpuctl.cluster import kinds
from gpuctl.cluster.kinds import Kind
from gpuctl.cluster.live import NotFoundError
from gpuctl.operator.ratelog import RateLimitedLog

log = logging.getLogger("gpuctl.operator.events")

CONTROLLER = "gpuctl.gpustack.ai/operator"
"""``reportingController`` of every Event the operator records."""
BURST = 25
REFILL_SECONDS = 300.0
SERIES_WINDOW = 1800.0
"""Seconds a series stays open without a repeat."""
HEARTBEAT = 60.0
"""Seconds between the patches that carry a series' new count."""
QUEUE_SIZE = 4096
MAX_SERIES = 50_000
"""Open series kept at most (the oldest is closed first): bounded memory however many objects repeat."""
MAX_NOTE = 1024
"""The API server refuses a longer ``note``."""
NORMAL, WARNING = "Normal", "Warning"


class EventWriter(Protocol):
    """The two calls the recorder makes (a :class:`~gpuctl.cluster.live.LiveSource`)."""

    def create(
        self, kind: Kind, body: dict[str, Any], *, namespace: str | None = None, dry_run: bool = False
    ) -> dict[str, Any]: ...

    def patch(
        self,
        kind: Kind,
        name: str,
        body: Any,
        *,
        namespace: str | None = None,
        patch_type: str = ...,
        subresource: str | None = None,
        dry_run: bool = False,
        field_manager: str | None = None,
        force: bool = False,
    ) -> dict[str, Any]: ...


@dataclass(frozen=True, slots=True)
class Regarding:
    """The object an Event is about."""

    kind: Kind
    name: str
    namespace: str = ""
    uid: str = ""

    def reference(self) -> dict[str, str]:
        ref = {"apiVersion": self.kind.api_version, "kind": self.kind.kind, "name": self.name}
        if self.namespace:
            ref["namespace"] = self.namespace
        if self.uid:
            ref["uid"] = self.uid
        return ref

    @property
    def event_namespace(self) -> str:
        """Where the Event lives: the object's namespace, ``default`` for a cluster-scoped object."""
        return self.namespace or "default"


def bounded_note(note: str) -> str:
    """``note`` within :data:`MAX_NOTE` bytes of UTF-8 (the API server measures it in bytes), cut with "…"."""
    encoded = note.encode()
    if len(encoded) <= MAX_NOTE:
        return note
    return encoded[: MAX_NOTE - len("…".encode())].decode(errors="ignore") + "…"


class EventSink(Protocol):
    """Where a controller records its decisions: an :class:`EventRecorder`, or :class:`DiscardEvents`."""

    def record(self, regarding: Regarding, event_type: str, reason: str, action: str, note: str) -> None: ...


class DiscardEvents:
    """Records nothing: controllers built without a recorder (unit tests, ``--no-events``)."""

    def record(self, regarding: Regarding, event_type: str, reason: str, action: str, note: str) -> None:
        return None


@dataclass(slots=True)
class _Series:
    name: str
    namespace: str
    count: int
    first: float
    last: float
    last_wall: str
    written: int
    """The count the API server last acknowledged (0: not created yet)."""


@dataclass(frozen=True, slots=True)
class _Job:
    op: str  # "create" or "series"
    key: tuple[str, ...]
    name: str
    namespace: str
    body: dict[str, Any]


def micro_time(moment: datetime.datetime) -> str:
    """A MicroTime as the API server writes it: RFC 3339 with microseconds."""
    return moment.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


class EventRecorder:
    """Records Events without ever holding up the caller; see the module's notes."""

    def __init__(
        self,
        writer: EventWriter,
        instance: str,
        *,
        controller: str = CONTROLLER,
        burst: int = BURST,
        refill_seconds: float = REFILL_SECONDS,
        window: float = SERIES_WINDOW,
        heartbeat: float = HEARTBEAT,
        queue_size: int = QUEUE_SIZE,
        max_series: int = MAX_SERIES,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime.datetime] = _now,
    ) -> None:
        self.writer = writer
        self.instance = instance
        self.controller = controller
        self.burst = burst
        self.refill_seconds = refill_seconds
        self.window = window
        self.heartbeat = heartbeat
        self.max_series = max_series
        self.clock = clock
        self.wall = wall
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._queue: collections.deque[_Job] = collections.deque()
        self._queue_size = queue_size
        self._series: collections.OrderedDict[tuple[str, ...], _Series] = collections.OrderedDict()
        self._buckets: dict[tuple[str, str, str], tuple[float, float]] = {}
        self._last_heartbeat = clock()
        self._warn = RateLimitedLog(log, burst=5, per_second=1 / 60)
        self.recorded = 0
        """Events created or series advanced, as the API server acknowledged them."""
        self.aggregated = 0
        """Occurrences folded into an open series."""
        self.dropped: collections.Counter[str] = collections.Counter()
        """Occurrences not written, by why: ``rate-limited``, ``queue-full``, ``failed``."""

    # -- the caller's side: decide, enqueue, return -------------------------------------------------------------

    def record(self, regarding: Regarding, event_type: str, reason: str, action: str, note: str) -> None:
        """Record one occurrence; returns at once (the write happens on the recorder's thread)."""
        note = bounded_note(note)
        key = (*_ref_key(regarding), regarding.uid, event_type, reason, action, note)
        now = self.clock()
        moment = self.wall()
        wall = micro_time(moment)
        with self._lock:
            series = self._series.get(key)
            if series is not None and now - series.last <= self.window:
                series.count += 1
                series.last, series.last_wall = now, wall
                self._series.move_to_end(key)
                self.aggregated += 1
                if series.count == 2 and series.written:
                    self._enqueue(self._series_job(key, series))
                return
            if not self._take_token(_ref_key(regarding), now):
                self.dropped["rate-limited"] += 1
                return
            name = f"{regarding.name}.{int(moment.timestamp() * 1e9):x}"
            self._series[key] = _Series(name, regarding.event_namespace, 1, now, now, wall, 0)
            self._series.move_to_end(key)
            while len(self._series) > self.max_series:
                self._series.popitem(last=False)
            body = {
                "apiVersion": "events.k8s.io/v1",
                "kind": "Event",
                "metadata": {"name": name, "namespace": regarding.event_namespace},
                "eventTime": wall,
                "reportingController": self.controller,
                "reportingInstance": self.instance,
                "action": action,
                "reason": reason,
                "regarding": regarding.reference(),
                "note": note,
                "type": event_type,
            }
            self._enqueue(_Job("create", key, name, regarding.event_namespace, body))

    def _take_token(self, obj: tuple[str, str, str], now: float) -> bool:
        tokens, since = self._buckets.get(obj, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - since) / self.refill_seconds)
        if tokens < 1.0:
            self._buckets[obj] = (tokens, now)
            return False
        self._buckets[obj] = (tokens - 1.0, now)
        return True

    def _enqueue(self, job: _Job) -> None:
        if len(self._queue) >= self._queue_size:
            self.dropped["queue-full"] += 1
            return
        self._queue.append(job)
        self._wake.notify()

    @staticmethod
    def _series_job(key: tuple[str, ...], series: _Series) -> _Job:
        body = {"series": {"count": series.count, "lastObservedTime": series.last_wall}}
        return _Job("series", key, series.name, series.namespace, body)

    # -- the recorder's thread: write, and keep the series up to date -------------------------------------------

    def pending(self) -> int:
        with self._lock:
            return len(self._queue)

    def counts(self) -> tuple[int, int, int, dict[str, int]]:
        """Queued, recorded, aggregated, and dropped by why (the recorder's metrics)."""
        with self._lock:
            return len(self._queue), self.recorded, self.aggregated, dict(self.dropped)

    def run(self, stop: threading.Event) -> None:
        """Write queued Events until ``stop`` is set; heartbeat the open series."""
        while not stop.is_set():
            with self._lock:
                if not self._queue:
                    self._wake.wait(timeout=min(1.0, self.heartbeat))
                job = self._queue.popleft() if self._queue else None
                due = self.clock() - self._last_heartbeat >= self.heartbeat
            if job is not None:
                self._write(job)
            elif due:
                self.flush_series()

    def start(self, stop: threading.Event) -> threading.Thread:
        def wake_on_stop() -> None:
            stop.wait()
            with self._lock:
                self._wake.notify_all()

        threading.Thread(target=wake_on_stop, name="events-stop", daemon=True).start()
        thread = threading.Thread(target=self.run, args=(stop,), name="events", daemon=True)
        thread.start()
        return thread

    def drain(self) -> None:
        """Write everything queued now, on the caller's thread (tests and shutdown)."""
        while True:
            with self._lock:
                job = self._queue.popleft() if self._queue else None
            if job is None:
                return
            self._write(job)

    def flush_series(self) -> None:
        """Patch every open series whose count moved since it was written; close the series past the window."""
        now = self.clock()
        with self._lock:
            self._last_heartbeat = now
            for key in [k for k, s in self._series.items() if now - s.last > self.window]:
                series = self._series.pop(key)
                if series.written and series.count > series.written:
                    self._enqueue(self._series_job(key, series))
            for key, series in self._series.items():
                if series.written and series.count > max(series.written, 1):
                    self._enqueue(self._series_job(key, series))
            for obj in [
                o for o, (t, since) in self._buckets.items() if t + (now - since) / self.refill_seconds >= self.burst
            ]:
                del self._buckets[obj]
        self.drain()

    def _write(self, job: _Job) -> None:
        try:
            if job.op == "create":
                self.writer.create(kinds.EVENT, job.body, namespace=job.namespace)
                self._acknowledge(job, 1)
            else:
                self.writer.patch(kinds.EVENT, job.name, job.body, namespace=job.namespace)
                self._acknowledge(job, int(job.body["series"]["count"]))
            with self._lock:
                self.recorded += 1
        except Exception as exc:  # noqa: BLE001 - an Event is best effort: its failure never reaches a reconcile
            with self._lock:
                self.dropped["failed"] += 1
                series = self._series.get(job.key)
                if job.op == "series" and series is not None and series.name == job.name and _gone(exc):
                    del self._series[job.key]  # expired by the API server's TTL: the next repeat starts anew
            self._warn(f"recording an Event failed: {type(exc).__name__}: {exc}")

    def _acknowledge(self, job: _Job, count: int) -> None:
        with self._lock:
            series = self._series.get(job.key)
            if series is not None and series.name == job.name:
                series.written = max(series.written, count)


def _ref_key(regarding: Regarding) -> tuple[str, str, str]:
    return (f"{regarding.kind.api_version}/{regarding.kind.kind}", regarding.namespace, regarding.name)


def _gone(exc: Exception) -> bool:
    return isinstance(exc, NotFoundError)
