"""What every controller is: a work queue of keys, the reconcile of one key, and the watches that fill the queue.

A controller declares its watches next to its reconcile: each :class:`Watch` names a kind of the cache and maps one of
its events to the keys it wakes. The manager (:mod:`gpuctl.operator.controllers.manager`) passes every cache event to
the watches of its kind; a slow resync from the cache (``owned_keys``) is the safety net.
"""

from __future__ import annotations

import datetime
import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from gpuctl.cluster import kinds
from gpuctl.cluster.errors import SourceError
from gpuctl.cluster.kinds import Kind
from gpuctl.cluster.live import ConflictError, NotFoundError
from gpuctl.core.gpustack import COMPANION, STANDALONE
from gpuctl.core.shadow import Disagreement
from gpuctl.core.shadow import Kind as ShadowKind
from gpuctl.operator.cache import OperatorCache
from gpuctl.operator.events import DiscardEvents, EventSink, EventWriter, Regarding
from gpuctl.operator.metrics import Metrics
from gpuctl.operator.shadow import ShadowBook
from gpuctl.operator.workqueue import WorkQueue

log = logging.getLogger("gpuctl.operator")


class Writer(EventWriter, Protocol):
    """The API calls controllers make (a :class:`~gpuctl.cluster.live.LiveSource`): the recorder's create and patch,
    and a list."""

    def list(
        self,
        kind: Kind,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        not_older_than: str | None = None,
    ) -> list[dict[str, Any]]: ...


@dataclass(frozen=True, slots=True)
class Watch:
    """A kind whose events wake a controller, and which keys one event wakes.

    ``keys(key, old, new)`` gets the event's object key and its record before and after (None when it was created or
    deleted). It runs under the cache lock, so it reads the cache and never the API; the keys it returns are queued
    at once, or after ``delay`` seconds (a burst of changes is then one reconcile)."""

    kind: Kind
    keys: Callable[[str, Any, Any], Iterable[str]]
    delay: float = 0.0


def now_rfc3339() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def node_moved(old: Any, new: Any) -> bool:
    """A Node that comes or goes, or whose labels or keys change: it takes its ledger into or out of pools."""
    return old is None or new is None or old.labels != new.labels or old.allocatable != new.allocatable


def split_key(key: str) -> tuple[str | None, str]:
    ns, _, name = key.rpartition("/")
    return (ns or None), name


def _always() -> bool:
    return True


class Controller(ABC):
    """A work queue, the watches that fill it, and the reconcile of one key.

    A subclass names itself (``name``, the label of its metrics and threads), says which kind its keys are (``kind``,
    read by the resync), how many workers drain its queue, and declares :meth:`watches`; the manager runs every
    subclass defined in this package."""

    name = ""
    kind: Kind = kinds.NODE
    workers = 1
    modes: frozenset[str] = frozenset({STANDALONE, COMPANION})
    """The operator modes this controller runs in."""

    def __init__(
        self,
        cache: OperatorCache,
        source: Writer,
        metrics: Metrics,
        events: EventSink | None = None,
        *,
        shadow: ShadowBook | None = None,
    ) -> None:
        self.cache = cache
        self.source = source
        self.metrics = metrics
        self.shadow = shadow
        """Set in the companion: what this controller decides is compared with what GPUStack's worker published,
        never written."""
        self.events: EventSink = events if events is not None else DiscardEvents()
        """Where the decisions are recorded as Events (never waited on)."""
        self.queue: WorkQueue[str] = WorkQueue(self.name)
        self.heartbeat = time.monotonic()
        self.current: tuple[str, float] | None = None
        self.reconciled = 0
        self.leading: Callable[[], bool] = _always
        """Whether this replica leads and its cache holds its first lists: set when the controllers start (a controller
        run alone leads). Series read off a half-listed cache would under-count what the cluster holds."""

    def record(self, regarding: Regarding, event_type: str, reason: str, action: str, note: str) -> None:
        """Record a decision as an Event. A recorder that fails must never fail a reconcile that succeeded."""
        try:
            self.events.record(regarding, event_type, reason, action, note)
        except Exception:
            log.exception("%s: recording an Event failed", self.name)

    @abstractmethod
    def watches(self) -> Iterable[Watch]:
        """The kinds whose events wake this controller, and the keys each event wakes."""

    @abstractmethod
    def reconcile(self, key: str) -> None:
        """Bring one key to its desired state: read the cache, decide with the core, write only a difference."""

    def observe(self, kind: ShadowKind, key: str, found: Sequence[Disagreement], uid: str = "") -> None:
        """The companion's report of one object: what differs now (none: it agrees); looked at again once an
        unsettled difference has held long enough to be reported."""
        assert self.shadow is not None
        wait = self.shadow.observe(kind, key, found, uid)
        if wait is not None:
            self.queue.add_after(key, wait + 0.05)

    def owned_keys(self) -> Iterable[str]:
        """Every key this controller owns, from the cache (the resync)."""
        return self.cache.keys(self.kind)

    def gauges(self) -> Iterable[Any]:
        """Metric families this controller publishes at scrape time (none by default)."""
        return ()

    def process(self, key: str) -> None:
        """Reconcile one key: forget its failures on success, requeue it with backoff on failure."""
        self.current = (key, time.monotonic())
        try:
            self.reconcile(key)
            self.queue.forget(key)
        except NotFoundError:
            self.queue.forget(key)  # the object went away under the write: its deletion's event follows
        except ConflictError:
            log.info("%s %s: the object moved under a write; retrying", self.name, key)
            self.queue.add_rate_limited(key)
            self.metrics.retries.labels(self.name).inc()
        except SourceError as exc:
            delay = self.queue.add_rate_limited(key)
            self.metrics.api_errors.labels(self.name).inc()
            self.metrics.retries.labels(self.name).inc()
            log.warning("%s %s: %s (retrying in %.2fs)", self.name, key, exc, delay)
        except Exception:
            self.queue.add_rate_limited(key)
            self.metrics.retries.labels(self.name).inc()
            log.exception("%s %s failed; retrying", self.name, key)
        finally:
            self.current = None
            self.reconciled += 1
            self.heartbeat = time.monotonic()

    def run(self, stop: threading.Event, leading: Callable[[], bool], ready: Callable[[], bool]) -> None:
        """A worker: process keys while this replica leads and the cache is synced."""
        while not stop.is_set():
            self.heartbeat = time.monotonic()
            if not ready() or not leading():
                stop.wait(0.2)
                continue
            key = self.queue.get(timeout=1.0)
            if key is None:
                continue
            try:
                if leading():
                    self.process(key)
                else:
                    self.queue.add(key)  # another replica leads now; keep the key for when this one does again
            finally:
                self.queue.done(key)

    def warm(self) -> None:
        """Compute ahead what a scrape of the metrics reads, once this replica starts leading (nothing by default)."""
        return None

    def stuck_for(self) -> float:
        """Seconds this controller has been on one key, or since its worker last looped (0 when healthy)."""
        now = time.monotonic()
        current = self.current
        busy = now - current[1] if current else 0.0
        return max(busy, now - self.heartbeat - 2.0, 0.0)
