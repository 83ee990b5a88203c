"""A cache of one kind fed by the API server's watch: list once, then watch from the list's resourceVersion.

No Python informer library is well kept, so this is a small one on the official client's raw request path
(:class:`gpuctl.cluster.live.LiveSource`), built like client-go's reflector:

- **List** as client-go's reflector does where the server can: a watch that streams every object as an initial event
  (``sendInitialEvents``) and a bookmark ending them, served from the API server's watch cache one object at a time
  (a paginated list of a custom resource is read from etcd page by page and costs the server several times as much:
  at 20,000 nodes its pages took the server 67 s of CPU for the operator's first sync). Where the server refuses
  that, page by page. Either way with the garbage collector paused (decoding a large list allocates millions of
  objects the collector would rescan), parsing each object into its record as it arrives; the raw JSON is not kept.
- **Watch** from the list's resourceVersion with bookmarks, in windows of :data:`~gpuctl.cluster.live.WATCH_SECONDS`;
  each window resumes from the last resourceVersion seen, so nothing between two windows is missed.
- **Re-list** on ``410 Gone`` or a broken stream that cannot resume, and reconcile: every object the new list lacks is
  delivered as deleted, every object whose resourceVersion moved as modified, every new one as added.
- **Back off** after an error, and after a window that ended well before its timeout without one (a server or a
  proxy that closes streams at once): 0.5 s doubling to 30 s, reset by a window that lasted; such a server costs a
  watch request every 30 s, not a hot loop.

Guarantees:

- Events of one kind reach the handlers in the order the API server sent them, one at a time, from the informer's
  thread, after the store has applied them; the store is never ahead of what the handlers were told.
- No change is lost: an object's latest state is delivered at least once after it changes, whether by a watch event
  or by the reconciliation of a re-list (intermediate states may be skipped, as in any level-triggered cache).
- ``synced`` is set once the first list is in the store; it stays set through re-lists (the store keeps serving the
  last known state while the informer catches up).
- Not guaranteed: an order between different kinds, or that the store is current — only that it converges.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from gpuctl.cluster.bulk import bulk_allocation
from gpuctl.cluster.errors import RefusedError, SourceError
from gpuctl.cluster.kinds import Kind

log = logging.getLogger("gpuctl.informer")

R = TypeVar("R")
ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"
MAX_BACKOFF = 30.0
"""Seconds an informer waits at most before listing or watching again after a failure or an early end."""
LIST_SECONDS = 600
"""The longest a streamed list may take (the window of the watch that carries it)."""
INITIAL_EVENTS_END = "k8s.io/initial-events-end"
"""The annotation of the bookmark that ends a streamed list's initial events."""


class ListPage(Protocol):
    @property
    def items(self) -> list[dict[str, Any]]: ...

    @property
    def resource_version(self) -> str: ...


class WatchSource(Protocol):
    """What an informer reads through: paged lists and watches (a :class:`~gpuctl.cluster.live.LiveSource`).

    A source that also has ``watch_list`` (the signature of :meth:`watch` without the resourceVersion) streams a
    list as a watch's initial events; the informer lists through it first."""

    def list_pages(
        self,
        kind: Kind,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        page_size: int = ...,
    ) -> Iterator[Any]: ...

    def watch(
        self,
        kind: Kind,
        resource_version: str,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int = ...,
        opened: Callable[[Any], None] | None = None,
    ) -> Iterator[dict[str, Any]]: ...


def object_key(obj: dict[str, Any]) -> str:
    """``namespace/name`` for a namespaced object, ``name`` otherwise."""
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{ns}/{meta.get('name', '')}" if ns else str(meta.get("name", ""))


Handler = Callable[[str, str, R | None, R | None], None]
"""``(event, key, old record, new record)``: called after the store applied the change."""


@dataclass
class Entry(Generic[R]):
    record: R
    resource_version: str


class Informer(Generic[R]):
    """One kind's store, kept current by list-then-watch in its own thread.

    ``parse`` turns a raw object into its record, or None to leave the object out of the store (a Pod of no
    interest); an object that parses to None after being kept is delivered as deleted.
    """

    def __init__(
        self,
        source: WatchSource,
        kind: Kind,
        parse: Callable[[dict[str, Any]], R | None],
        *,
        handler: Handler[R] | None = None,
        lock: threading.RLock | None = None,
        watch_seconds: int = 60,
        optional: bool = False,
        page_size: int = 500,
    ) -> None:
        self.source = source
        self.kind = kind
        self.parse = parse
        self.handler = handler
        self.lock = lock or threading.RLock()
        """Held while the store and the handler apply one event (the cache shares one lock across kinds)."""
        self.watch_seconds = watch_seconds
        self.optional = optional
        """A kind the cluster may not serve (an API not installed): a missing API counts as an empty, synced list."""
        self.page_size = page_size
        self.streaming = True
        """Whether to list by a streamed watch (turned off for good once the server refuses one)."""
        self.store: dict[str, R] = {}
        self._versions: dict[str, str] = {}
        self.resource_version = ""
        self.synced = threading.Event()
        self.last_contact = 0.0
        """``time.monotonic()`` of the last list page, event or bookmark received."""
        self.last_error = ""
        self.relists = 0
        self.events = 0
        self.early_ends = 0
        """Watch windows the server ended well before their timeout."""
        self._stop = threading.Event()
        self._response: Any = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------------------------------- running

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name=f"informer-{self.kind.plural}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        response = self._response
        if response is not None:
            # Closing a stream another thread reads may race with its end; stopping wins either way.
            with contextlib.suppress(Exception):
                response.shutdown() if hasattr(response, "shutdown") else response.close()

    def run(self) -> None:
        """List, then watch until stopped; re-list when the watch cannot resume. Backs off on errors."""
        backoff = 0.5
        need_list = True
        while not self._stop.is_set():
            try:
                if need_list:
                    self.relist()
                    need_list = False
                started = time.monotonic()
                self.watch_once()
                lasted = time.monotonic() - started
                if lasted >= self.early_end():
                    backoff = 0.5
                    continue
                # Ended at once without an error: resuming right away would loop as fast as the server answers.
                self.early_ends += 1
                log.debug("%s: the watch ended after %.1fs; resuming in %.1fs", self.kind.plural, lasted, backoff)
                self._stop.wait(backoff * (1 + random.random() / 2))
                backoff = min(backoff * 2, MAX_BACKOFF)
            except SourceError as exc:
                if self._stop.is_set():
                    return
                self.last_error = str(exc)
                expired = type(exc).__name__ == "WatchExpired"
                if expired:
                    log.info("%s: watch expired; re-listing", self.kind.plural)
                    need_list = True
                    continue
                if self.optional and "is not served" in str(exc):
                    self.last_contact = time.monotonic()  # the server answered: the API is not installed
                    self._apply_list({}, "")
                    self.synced.set()
                    self._stop.wait(30.0)
                    need_list = True
                    continue
                log.warning("%s: %s; retrying in %.1fs", self.kind.plural, exc, backoff)
                self._stop.wait(backoff * (1 + random.random() / 2))
                backoff = min(backoff * 2, MAX_BACKOFF)
                need_list = need_list or not self.resource_version
            except Exception:
                log.exception("%s: unexpected failure; re-listing", self.kind.plural)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF)
                need_list = True

    def early_end(self) -> float:
        """A window shorter than this ended early: a tenth of the window, at least a second (at most half of it)."""
        return min(self.watch_seconds / 2, max(1.0, self.watch_seconds / 10))

    # ------------------------------------------------------------------------------------------- list

    def relist(self) -> None:
        """List the kind and reconcile the store with it (deletes, changes and additions delivered as events)."""
        listed: tuple[dict[str, Entry[R]], str] | None = None
        with bulk_allocation():
            stream = getattr(self.source, "watch_list", None) if self.streaming else None
            if stream is not None:
                try:
                    listed = self._streamed_list(stream)
                except (RefusedError, _NotStreamed) as exc:
                    log.info("%s: the API server does not stream lists (%s); listing by pages", self.kind.plural, exc)
                    self.streaming = False
            if listed is None:
                listed = self._paged_list()
        self._apply_list(*listed)
        if self.synced.is_set():
            self.relists += 1
        self.synced.set()
        self.last_error = ""

    def _paged_list(self) -> tuple[dict[str, Entry[R]], str]:
        fresh: dict[str, Entry[R]] = {}
        version = ""
        for page in self.source.list_pages(self.kind, page_size=self.page_size):
            self.last_contact = time.monotonic()
            version = page.resource_version or version
            for obj in page.items:
                record = self.parse(obj)
                if record is not None:
                    fresh[object_key(obj)] = Entry(record, _version(obj))
        return fresh, version

    def _streamed_list(self, stream: Callable[..., Iterator[dict[str, Any]]]) -> tuple[dict[str, Entry[R]], str]:
        """Every object, from a watch's initial events up to the bookmark that ends them (its resourceVersion is the
        list's); the stream is closed there, and the watch resumes from that version."""

        def opened(response: Any) -> None:
            self._response = response

        fresh: dict[str, Entry[R]] = {}
        events = stream(self.kind, timeout_seconds=LIST_SECONDS, opened=opened)
        try:
            for event in events:
                self.last_contact = time.monotonic()
                if self._stop.is_set():
                    raise SourceError("stopped")
                obj = event.get("object")
                if not isinstance(obj, dict):
                    continue
                kind = event.get("type")
                if kind == "BOOKMARK":
                    annotations = (obj.get("metadata") or {}).get("annotations") or {}
                    if annotations.get(INITIAL_EVENTS_END) == "true":
                        return fresh, _version(obj)
                    # The API server sends no other bookmark before that one: a server that ignored the request
                    # watches from now on, and would send its objects as they change, never all of them.
                    raise _NotStreamed("a bookmark came before the end of the initial events")
                key = object_key(obj)
                record = self.parse(obj) if kind != DELETED else None
                if record is None:
                    fresh.pop(key, None)
                else:
                    fresh[key] = Entry(record, _version(obj))
        finally:
            close = getattr(events, "close", None)
            if close is not None:
                close()
            self._response = None
        # A server that ignores ``sendInitialEvents`` watches from now on and never marks the end.
        raise _NotStreamed("the stream ended before its initial events did")

    def _apply_list(self, fresh: dict[str, Entry[R]], version: str) -> None:
        with self.lock:
            for key in [k for k in self.store if k not in fresh]:
                old = self.store.pop(key)
                self._versions.pop(key, None)
                self._notify(DELETED, key, old, None)
            for key, entry in fresh.items():
                previous = self.store.get(key)
                if previous is not None and self._versions.get(key) == entry.resource_version:
                    continue
                self.store[key] = entry.record
                self._versions[key] = entry.resource_version
                self._notify(ADDED if previous is None else MODIFIED, key, previous, entry.record)
            self.resource_version = version

    # ------------------------------------------------------------------------------------------- watch

    def watch_once(self) -> None:
        """One watch window from the current resourceVersion."""

        def opened(response: Any) -> None:
            self._response = response

        try:
            for event in self.source.watch(
                self.kind, self.resource_version, timeout_seconds=self.watch_seconds, opened=opened
            ):
                self.last_contact = time.monotonic()
                if self._stop.is_set():
                    return
                self.apply_event(event)
        finally:
            self._response = None
        self.last_contact = time.monotonic()

    def apply_event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        obj = event.get("object")
        if not isinstance(obj, dict):
            return
        version = _version(obj)
        if kind == "BOOKMARK":
            if version:
                self.resource_version = version
            return
        key = object_key(obj)
        with self.lock:
            self.events += 1
            previous = self.store.get(key)
            record = self.parse(obj) if kind != DELETED else None
            if record is None:
                if previous is not None:
                    del self.store[key]
                    self._versions.pop(key, None)
                    self._notify(DELETED, key, previous, None)
            else:
                self.store[key] = record
                self._versions[key] = version
                self._notify(ADDED if previous is None else MODIFIED, key, previous, record)
            if version:
                self.resource_version = version

    def _notify(self, event: str, key: str, old: R | None, new: R | None) -> None:
        if self.handler is None:
            return
        try:
            self.handler(event, key, old, new)
        except Exception:
            log.exception("%s: handler failed on %s %s", self.kind.plural, event, key)

    # ------------------------------------------------------------------------------------------- health

    def contact_age(self) -> float:
        """Seconds since the API server last answered this informer (inf before the first answer)."""
        return time.monotonic() - self.last_contact if self.last_contact else float("inf")


class _NotStreamed(SourceError):
    """A streamed list that never said its initial events were all sent."""


def _version(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")
