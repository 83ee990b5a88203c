"""One log line per bad request, rate-limited: whoever can reach the webhook port must not be able to flood the log.

A line is at most :data:`MAX_LINE` characters, its control characters escaped (a request cannot forge log lines).
Lines beyond the budget (:data:`BURST` at once, refilled at :data:`PER_SECOND`) are counted, and the next line written
says how many were dropped.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

BURST = 20
PER_SECOND = 1.0
MAX_LINE = 300


def one_line(text: str, limit: int = MAX_LINE) -> str:
    """``text`` on one line: control characters escaped, cut to ``limit`` characters."""
    flat = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text[: limit * 2])
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


class RateLimitedLog:
    """A token bucket in front of a logger: ``burst`` lines at once, ``per_second`` after that; thread-safe."""

    def __init__(
        self,
        logger: logging.Logger,
        *,
        burst: int = BURST,
        per_second: float = PER_SECOND,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logger
        self.burst = burst
        self.per_second = per_second
        self.clock = clock
        self._tokens = float(burst)
        self._last = clock()
        self._dropped = 0
        self._lock = threading.Lock()

    def __call__(self, message: str, level: int = logging.WARNING) -> bool:
        """Log ``message`` as one line if the budget allows (whether it did)."""
        with self._lock:
            now = self.clock()
            self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.per_second)
            self._last = now
            if self._tokens < 1.0:
                self._dropped += 1
                return False
            self._tokens -= 1.0
            dropped, self._dropped = self._dropped, 0
        suffix = f" ({dropped} similar line(s) dropped)" if dropped else ""
        self.logger.log(level, "%s%s", one_line(message), suffix)
        return True
