"""The manager: every controller of this package, the cache events passed to the watches they declare, the workers,
the resync and the health check.

It knows no controller by name. Each module of this package that defines a :class:`Controller` subclass adds one:
its watches are registered by kind, its workers started, its keys resynced and its progress watched.
"""

from __future__ import annotations

import importlib
import logging
import pkgutil
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from gpuctl.cluster.kinds import Kind
from gpuctl.core.gpustack import COMPANION, STANDALONE
from gpuctl.operator.cache import OperatorCache
from gpuctl.operator.controllers.base import Controller, Watch, Writer
from gpuctl.operator.events import EventSink
from gpuctl.operator.metrics import Metrics, workqueue_gauges
from gpuctl.operator.shadow import ShadowBook

log = logging.getLogger(__name__)

C = TypeVar("C", bound=Controller)
PACKAGE = __name__.rpartition(".")[0]


def controller_classes() -> list[type[Controller]]:
    """Every controller the operator runs: the named :class:`Controller` subclasses defined in this package, in the
    order of their modules."""
    package = importlib.import_module(PACKAGE)
    for info in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{PACKAGE}.{info.name}")
    found: list[type[Controller]] = []
    pending = list(Controller.__subclasses__())
    while pending:
        cls = pending.pop(0)
        pending.extend(cls.__subclasses__())
        if cls.name and cls.__module__.startswith(f"{PACKAGE}."):
            found.append(cls)
    return sorted(found, key=lambda c: (c.__module__, c.name))


class Controllers:
    """Every controller, the mapping of cache events to their keys, the workers and the resync."""

    def __init__(
        self,
        cache: OperatorCache,
        source: Writer,
        metrics: Metrics,
        *,
        resync_seconds: float = 300.0,
        stuck_after: float = 120.0,
        events: EventSink | None = None,
        shadow: ShadowBook | None = None,
    ) -> None:
        """``shadow`` set runs the companion: the controllers of that mode, each reporting to the book instead of
        writing; unset, the standalone operator's, writing."""
        self.cache = cache
        self.metrics = metrics
        self.mode = STANDALONE if shadow is None else COMPANION
        self.shadow = shadow
        self.all: tuple[Controller, ...] = tuple(
            cls(cache, source, metrics, events, shadow=shadow) for cls in controller_classes() if self.mode in cls.modes
        )
        self.watching: dict[Kind, list[tuple[Controller, Watch]]] = {}
        """Kind → each controller's watch of it."""
        for c in self.all:
            for watch in c.watches():
                self.watching.setdefault(watch.kind, []).append((c, watch))
        self.resync_seconds = resync_seconds
        self.stuck_after = stuck_after
        self._threads: list[threading.Thread] = []
        self._was_leading = False
        self._synced = False
        cache.listeners.append(self.on_event)
        metrics.gauge(self._gauges)

    def get(self, cls: type[C]) -> C:
        """The running instance of one controller class."""
        return next(c for c in self.all if isinstance(c, cls))

    def on_event(self, kind: Kind, event: str, key: str, old: Any, new: Any) -> None:
        """Pass one applied cache event to the watches of its kind (called under the cache lock: only queues keys).

        Until the whole cache holds its first lists, nothing is queued: the first resync, once it does, goes over
        every key anyway, so the tens of thousands of keys the first lists wake would only stand in the queue ahead
        of the changes that follow (a new reservation judged after every admitted Workload was looked at again)."""
        synced = self._synced or self._check_synced()
        for controller, watch in self.watching.get(kind, ()):
            woken = watch.keys(key, old, new)  # called even so: a watch may note what it saw (the check's clock)
            if not synced:
                continue
            for k in woken:
                if watch.delay:
                    controller.queue.add_after(k, watch.delay)
                else:
                    controller.queue.add(k)

    def _check_synced(self) -> bool:
        self._synced = self.cache.synced()  # it stays set through re-lists
        return self._synced

    # ------------------------------------------------------------------------------------------- running

    def resync(self) -> None:
        """Queue every key of every controller from the cache (the safety net; no LIST)."""
        for c in self.all:
            for key in c.owned_keys():
                c.queue.add(key)

    def start(self, stop: threading.Event, leading: Callable[[], bool]) -> None:
        def ready() -> bool:
            return self.cache.synced()

        def leads_synced() -> bool:
            return ready() and leading()

        for c in self.all:
            c.leading = leads_synced
        for c in self.all:
            for i in range(c.workers):
                t = threading.Thread(target=c.run, args=(stop, leading, ready), name=f"{c.name}-{i}", daemon=True)
                t.start()
                self._threads.append(t)
        t = threading.Thread(target=self._resync_loop, args=(stop, leading, ready), name="resync", daemon=True)
        t.start()
        self._threads.append(t)

    def _resync_loop(self, stop: threading.Event, leading: Callable[[], bool], ready: Callable[[], bool]) -> None:
        last = 0.0
        while not stop.is_set():
            now_leading = ready() and leading()
            # A replica that starts leading (or finishes its first sync) goes over everything once.
            if now_leading and (not self._was_leading or time.monotonic() - last >= self.resync_seconds):
                if not self._was_leading:
                    # What a scrape reads is computed now, beside the workers, not by the first scrape (at 20,000
                    # nodes that takes longer than Prometheus waits for an answer).
                    threading.Thread(target=self._warm, name="warm", daemon=True).start()
                self.resync()
                last = time.monotonic()
            self._was_leading = now_leading
            stop.wait(0.5)

    def _warm(self) -> None:
        for c in self.all:
            try:
                c.warm()
            except Exception:  # a scrape computes it anyway; the warm-up must never stop the replica
                log.exception("%s: computing the metrics ahead of the first scrape failed", c.name)

    def stuck(self) -> str | None:
        """Why the controllers are stuck (a key held longer than ``stuck_after``), or None."""
        for c in self.all:
            held = c.stuck_for()
            if held > self.stuck_after:
                on = f" on {c.current[0]}" if c.current else ""
                return f"{c.name} has made no progress for {held:.0f}s{on}"
        return None

    def _gauges(self) -> Iterable[Any]:
        for c in self.all:
            yield from c.gauges()
        if self.shadow is not None and self.all and self.all[0].leading():
            yield from self.shadow.gauges()
        yield from workqueue_gauges([(c.name, c.queue) for c in self.all])
