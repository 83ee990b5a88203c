"""A work queue of keys, as client-go's controllers use one.

- **De-duplication**: a key waiting in the queue is queued once however often it is added; a key added while a worker
  processes it is queued again when the worker is done, never handed to two workers at once.
- **Delays**: ``add_after`` queues a key later (a burst of events for one key within the delay becomes one item).
- **Rate-limited requeue**: ``add_rate_limited`` queues a failed key after a per-key exponential delay (5 ms doubling to
  5 minutes); ``forget`` resets it once the key succeeds.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections import deque
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class WorkQueue(Generic[K]):
    def __init__(self, name: str, *, base_delay: float = 0.005, max_delay: float = 300.0) -> None:
        self.name = name
        self.base_delay = base_delay
        self.max_delay = max_delay
        self._queue: deque[K] = deque()
        self._dirty: set[K] = set()
        self._processing: set[K] = set()
        self._waiting: list[tuple[float, int, K]] = []
        self._waiting_at: dict[K, float] = {}
        self._failures: dict[K, int] = {}
        self._sequence = 0
        self._cond = threading.Condition()
        self._shutdown = False
        self.adds = 0

    def __len__(self) -> int:
        """Keys waiting to be processed now (not the delayed ones)."""
        with self._cond:
            return len(self._queue)

    @property
    def delayed(self) -> int:
        with self._cond:
            return len(self._waiting_at)

    def add(self, key: K) -> None:
        with self._cond:
            self._add(key)

    def _add(self, key: K) -> None:
        if self._shutdown or key in self._dirty:
            return
        self.adds += 1
        self._dirty.add(key)
        if key not in self._processing:
            self._queue.append(key)
            self._cond.notify()

    def add_after(self, key: K, delay: float) -> None:
        """Queue the key once ``delay`` seconds have passed (the earliest of several pending delays wins)."""
        if delay <= 0:
            self.add(key)
            return
        with self._cond:
            if self._shutdown:
                return
            at = time.monotonic() + delay
            current = self._waiting_at.get(key)
            if current is not None and current <= at:
                return
            self._waiting_at[key] = at
            self._sequence += 1
            heapq.heappush(self._waiting, (at, self._sequence, key))
            self._cond.notify()

    def add_rate_limited(self, key: K) -> float:
        """Queue a key that failed, after its own exponential backoff; returns the delay."""
        with self._cond:
            failures = self._failures.get(key, 0)
            self._failures[key] = failures + 1
        delay = min(self.max_delay, self.base_delay * float(2 ** min(failures, 64)))
        self.add_after(key, delay)
        return delay

    def forget(self, key: K) -> None:
        with self._cond:
            self._failures.pop(key, None)

    def failures(self, key: K) -> int:
        with self._cond:
            return self._failures.get(key, 0)

    def get(self, timeout: float | None = None) -> K | None:
        """The next key to process (the caller must call ``done``), or None after ``timeout`` or shutdown."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                self._release_due()
                if self._queue:
                    key = self._queue.popleft()
                    self._dirty.discard(key)
                    self._processing.add(key)
                    return key
                if self._shutdown:
                    return None
                now = time.monotonic()
                wait = None if deadline is None else deadline - now
                if self._waiting:
                    until = self._waiting[0][0] - now
                    wait = until if wait is None else min(wait, until)
                if wait is not None and wait <= 0:
                    if deadline is not None and time.monotonic() >= deadline:
                        return None
                    continue
                self._cond.wait(wait)

    def _release_due(self) -> None:
        now = time.monotonic()
        while self._waiting and self._waiting[0][0] <= now:
            at, _, key = heapq.heappop(self._waiting)
            if self._waiting_at.get(key) == at:
                del self._waiting_at[key]
                self._add(key)

    def done(self, key: K) -> None:
        with self._cond:
            self._processing.discard(key)
            if key in self._dirty:
                self._queue.append(key)
                self._cond.notify()

    def shut_down(self) -> None:
        with self._cond:
            self._shutdown = True
            self._cond.notify_all()
