"""Watching screens that say when they last heard from the API server.

A read runs in a background thread, one after another ``interval`` apart; the screen is redrawn on its own clock, so
a read that hangs (an API server stopped, a network black hole) never freezes it: within one interval of a missed
answer the screen says it is stale, since when, and that it is retrying, and it says so again when answers resume.
``views -w``, ``workloads -w``, ``top`` and ``drain --wait`` use it."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import Generic, TextIO, TypeVar

T = TypeVar("T")

_TICK = 0.1


class Poller(Generic[T]):
    """Calls ``read`` again and again in a daemon thread, ``interval`` seconds after each answer (backing off up to
    ``retry_limit`` after a failure); the last answer, when it came, and the error since."""

    def __init__(self, read: Callable[[], T], interval: float, *, retry_limit: float = 60.0) -> None:
        self.read = read
        self.interval = interval
        self.retry_limit = retry_limit
        self.lock = threading.Lock()
        self.latest: T | None = None
        self.answers = 0
        """How many reads have answered (a screen redraws when it grows)."""
        self.heard_at: float | None = None
        """``time.time()`` of the last answer."""
        self.error = ""
        """The last read's error, "" once a read answers again."""
        self.changed = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpuctl-poll", daemon=True)

    def start(self) -> Poller[T]:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        from gpuctl.cluster.errors import SourceError

        delay = self.interval
        while not self._stop.is_set():
            try:
                value = self.read()
            except SourceError as exc:
                with self.lock:
                    self.error = str(exc)
                delay = min(max(delay, self.interval) * 2, self.retry_limit)
            else:
                with self.lock:
                    self.latest, self.heard_at, self.error = value, time.time(), ""
                    self.answers += 1
                delay = self.interval
            self.changed.set()
            self._stop.wait(delay)

    def stale_for(self, now: float, started: float) -> float | None:
        """Seconds without an answer, where that is more than an interval past when one was due (None: fresh)."""
        with self.lock:
            heard = self.heard_at
            failing = bool(self.error)
        if heard is None:  # the first read: stale once it fails (a hung server fails at the request timeout)
            return now - started if failing else None
        silent = now - heard
        return silent if failing or silent > 2 * self.interval else None

    def status(self, now: float, started: float) -> str:
        """One line: when the API server last answered, or that the screen is stale and retrying."""
        silent = self.stale_for(now, started)
        with self.lock:
            heard, error = self.heard_at, self.error
        if silent is None:
            return f"last answer from the API server {_clock(heard)}" if heard is not None else "reading..."
        since = f"since {_clock(heard)}" if heard is not None else "since it started"
        why = f": {error}" if error else ""
        return f"STALE: no answer from the API server for {silent:.0f}s ({since}); retrying{why}"


def _clock(at: float | None) -> str:
    return time.strftime("%H:%M:%S", time.localtime(at)) if at is not None else "-"


def watch_screen(read_text: Callable[[], str], interval: float, title: str, *, stream: TextIO | None = None) -> None:
    """Redraw ``read_text()``'s answer under a header with the time and the API server's liveness, until interrupted.
    On a terminal the screen is redrawn every interval; elsewhere a text is printed when it changes, and a line when
    the answers stop and when they resume."""
    out = stream or sys.stdout
    poller = Poller(read_text, interval).start()
    started = time.time()
    terminal = out.isatty()
    shown: str | None = None
    was_stale = False
    try:
        while True:
            now = time.time()
            status = poller.status(now, started)
            stale = poller.stale_for(now, started) is not None
            with poller.lock:
                text = poller.latest
            if terminal:
                header = f"Every {interval:g}s: {title}    {time.strftime('%H:%M:%S', time.localtime(now))}\n{status}"
                out.write("\x1b[H\x1b[2J" + header + "\n\n" + (text or ""))
            else:
                if stale and not was_stale:
                    out.write(status + "\n")
                elif was_stale and not stale:
                    out.write(f"{status} (recovered)\n")
                if text is not None and text != shown:
                    out.write(text)
                    shown = text
            out.flush()
            was_stale = stale
            poller.changed.clear()
            poller.changed.wait(interval if terminal else _TICK * 10)
    except KeyboardInterrupt:
        return
    finally:
        poller.stop()
