"""The watch-fed informer and the work queue: their guarantees, against a scripted API."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from gpuctl.cluster import kinds
from gpuctl.cluster.errors import SourceError
from gpuctl.cluster.informer import Informer
from gpuctl.cluster.live import WatchExpired
from gpuctl.operator.workqueue import WorkQueue


@dataclass(frozen=True)
class Page:
    items: list[dict[str, Any]]
    resource_version: str


def obj(name: str, rv: str, value: int = 0) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": rv}, "value": value}


class Scripted:
    """Lists come from ``lists`` in turn; each watch plays the next script (events, then an outcome)."""

    def __init__(self, lists: list[list[dict[str, Any]]], watches: list[tuple[list[dict[str, Any]], Exception | None]]):
        self.lists = lists
        self.watches = watches
        self.list_calls = 0
        self.watch_from: list[str] = []

    def list_pages(self, kind: Any, **_: Any) -> Iterator[Page]:
        items = self.lists[min(self.list_calls, len(self.lists) - 1)]
        self.list_calls += 1
        rv = max((int(o["metadata"]["resourceVersion"]) for o in items), default=1)
        yield Page(items[:1], str(rv))
        yield Page(items[1:], str(rv))

    def watch(self, kind: Any, resource_version: str, **_: Any) -> Iterator[dict[str, Any]]:
        self.watch_from.append(resource_version)
        if not self.watches:
            time.sleep(0.05)
            return
        events, outcome = self.watches.pop(0)
        yield from events
        if outcome is not None:
            raise outcome


def recording(informer_events: list[tuple[str, str, Any, Any]]) -> Any:
    def handler(event: str, key: str, old: Any, new: Any) -> None:
        informer_events.append((event, key, old, new))

    return handler


def run_until(informer: Informer[Any], source: Scripted, done: Any, timeout: float = 5.0) -> None:
    informer.start()
    deadline = time.monotonic() + timeout
    while not done() and time.monotonic() < deadline:
        time.sleep(0.01)
    informer.stop()
    assert done(), "the informer did not get there"


def test_list_then_watch_resumes_from_the_last_version_and_keeps_order() -> None:
    source = Scripted(
        [[obj("a", "1"), obj("b", "2")]],
        [
            (
                [
                    {"type": "MODIFIED", "object": obj("a", "3", 1)},
                    {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "7"}}},
                ],
                None,
            ),
            ([{"type": "DELETED", "object": obj("b", "8")}, {"type": "ADDED", "object": obj("c", "9")}], None),
        ],
    )
    events: list[tuple[str, str, Any, Any]] = []
    informer: Informer[Any] = Informer(source, kinds.NODE, lambda o: o["value"], handler=recording(events))
    run_until(informer, source, lambda: len(events) >= 5)
    assert [(e, k) for e, k, _, _ in events] == [
        ("ADDED", "a"),
        ("ADDED", "b"),
        ("MODIFIED", "a"),
        ("DELETED", "b"),
        ("ADDED", "c"),
    ]
    assert source.watch_from[:2] == ["2", "7"]  # the second window resumes from the bookmark
    assert informer.store == {"a": 1, "c": 0} and informer.synced.is_set() and source.list_calls == 1


def test_a_410_relists_and_reconciles_what_changed_meanwhile() -> None:
    source = Scripted(
        [[obj("a", "1"), obj("b", "2")], [obj("a", "5", 9), obj("c", "6")]],
        [([], WatchExpired("too old"))],
    )
    events: list[tuple[str, str, Any, Any]] = []
    informer: Informer[Any] = Informer(source, kinds.NODE, lambda o: o["value"], handler=recording(events))
    run_until(informer, source, lambda: len(events) >= 5)
    assert sorted((e, k) for e, k, _, _ in events[2:]) == [("ADDED", "c"), ("DELETED", "b"), ("MODIFIED", "a")]
    assert informer.store == {"a": 9, "c": 0} and informer.relists == 1


def test_a_broken_stream_resumes_without_relisting() -> None:
    source = Scripted(
        [[obj("a", "1")]],
        [
            ([{"type": "MODIFIED", "object": obj("a", "2", 1)}], SourceError("connection reset")),
            ([{"type": "MODIFIED", "object": obj("a", "3", 2)}], None),
        ],
    )
    events: list[tuple[str, str, Any, Any]] = []
    informer: Informer[Any] = Informer(source, kinds.NODE, lambda o: o["value"], handler=recording(events))
    run_until(informer, source, lambda: informer.store.get("a") == 2)
    assert source.list_calls == 1 and source.watch_from[:2] == ["1", "2"]
    assert "connection reset" in informer.last_error


def test_an_object_that_stops_parsing_is_delivered_as_deleted() -> None:
    source = Scripted([[obj("a", "1", 1)]], [([{"type": "MODIFIED", "object": obj("a", "2", 0)}], None)])
    events: list[tuple[str, str, Any, Any]] = []
    informer: Informer[Any] = Informer(source, kinds.NODE, lambda o: o["value"] or None, handler=recording(events))
    run_until(informer, source, lambda: len(events) >= 2)
    assert [(e, k) for e, k, _, _ in events] == [("ADDED", "a"), ("DELETED", "a")] and informer.store == {}


def test_an_api_not_served_counts_as_an_empty_synced_list_when_optional() -> None:
    class NotServed(Scripted):
        def list_pages(self, kind: Any, **_: Any) -> Iterator[Page]:
            raise SourceError("the KVCachePool API is not served by this cluster")
            yield  # pragma: no cover

    informer: Informer[Any] = Informer(NotServed([], []), kinds.KVCACHE_POOL, lambda o: o, optional=True)
    run_until(informer, NotServed([], []), lambda: informer.synced.is_set())
    assert informer.store == {} and informer.contact_age() < 5


def test_a_handlers_failure_does_not_stop_the_stream() -> None:
    source = Scripted([[obj("a", "1")]], [([{"type": "ADDED", "object": obj("b", "2")}], None)])
    seen: list[str] = []

    def handler(event: str, key: str, old: Any, new: Any) -> None:
        seen.append(key)
        if key == "a":
            raise RuntimeError("a bug in a listener")

    informer: Informer[Any] = Informer(source, kinds.NODE, lambda o: o["value"], handler=handler)
    run_until(informer, source, lambda: "b" in informer.store)
    assert seen == ["a", "b"]


# ----------------------------------------------------------------------------------------------- the work queue


def test_a_queued_key_is_queued_once_and_never_handed_to_two_workers() -> None:
    q: WorkQueue[str] = WorkQueue("t")
    for _ in range(3):
        q.add("k")
    q.add("j")
    assert len(q) == 2
    key = q.get(timeout=0)
    assert key == "k"
    q.add("k")  # added while processed: queued again only when done
    assert q.get(timeout=0) == "j"
    assert q.get(timeout=0.05) is None
    q.done("k")
    assert q.get(timeout=0) == "k"


def test_delays_coalesce_and_backoff_grows_per_key() -> None:
    q: WorkQueue[str] = WorkQueue("t", base_delay=0.02, max_delay=1.0)
    q.add_after("k", 0.3)
    q.add_after("k", 0.05)  # the earlier wins
    q.add_after("k", 0.6)
    q.add_after("m", 0.15)
    # Ordered by when each is due, not by wall-clock bounds: "k" (0.05) before "m" (0.15); had a later delay won,
    # "m" would come first.
    assert q.get(timeout=5) == "k" and q.get(timeout=5) == "m"
    q.done("k")
    q.done("m")
    assert [q.add_rate_limited("f") for _ in range(4)] == [0.02, 0.04, 0.08, 0.16]
    q.forget("f")
    assert q.add_rate_limited("f") == 0.02


def test_get_wakes_for_a_key_added_by_another_thread() -> None:
    q: WorkQueue[str] = WorkQueue("t")
    threading.Timer(0.05, q.add, args=("k",)).start()
    assert q.get(timeout=2) == "k"
    q.shut_down()
    assert q.get(timeout=2) is None


class _ClosingServer:
    """An HTTP API server (or a proxy in front of one) that answers every watch with an empty stream, closed at once:
    a list of no Nodes, and watches that end before they start."""

    def __init__(self) -> None:
        import http.server

        outer = self
        self.watches = 0

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                if "watch=1" in self.path:
                    outer.watches += 1
                    body = b""
                else:
                    body = b'{"kind":"NodeList","apiVersion":"v1","metadata":{"resourceVersion":"5"},"items":[]}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_a_server_that_closes_every_watch_at_once_costs_almost_no_cpu(tmp_path: Any) -> None:
    import yaml

    from gpuctl.cluster.live import Connection, LiveSource

    server = _ClosingServer()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": server.url}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    informer: Informer[Any] = Informer(LiveSource(Connection(str(kubeconfig))), kinds.NODE, lambda o: o)
    try:
        informer.start()
        assert informer.synced.wait(10)
        assert informer._thread is not None and informer._thread.ident is not None
        clock = time.pthread_getcpuclockid(informer._thread.ident)
        cpu0, wall0, watches0 = time.clock_gettime(clock), time.monotonic(), server.watches
        time.sleep(8)
        cpu, wall = time.clock_gettime(clock) - cpu0, time.monotonic() - wall0
        watches = server.watches - watches0
    finally:
        informer.stop()
        server.close()
    # Backing off 0.5 s doubling: a handful of watches in 8 s, where resuming at once makes thousands.
    assert watches <= 6, watches
    assert cpu / wall < 0.01, f"{100 * cpu / wall:.1f} % CPU"
    assert informer.early_ends >= 3


class Streaming(Scripted):
    """A server that streams lists: each ``watch_list`` plays the next stream (events, then an outcome)."""

    def __init__(self, streams: list[tuple[list[dict[str, Any]], Exception | None]], *args: Any) -> None:
        super().__init__(*args)
        self.streams = streams
        self.stream_calls = 0

    def watch_list(self, kind: Any, **_: Any) -> Iterator[dict[str, Any]]:
        self.stream_calls += 1
        events, outcome = self.streams.pop(0) if self.streams else ([], None)
        if outcome is not None and not events:
            raise outcome
        yield from events
        if outcome is not None:
            raise outcome


def end_of_initial_events(rv: str) -> dict[str, Any]:
    return {
        "type": "BOOKMARK",
        "object": {"metadata": {"resourceVersion": rv, "annotations": {"k8s.io/initial-events-end": "true"}}},
    }


def test_a_streamed_list_fills_the_store_and_the_watch_resumes_from_its_end_bookmark() -> None:
    from gpuctl.cluster.errors import RefusedError

    follows = [{"type": "ADDED", "object": obj("late", "99")}]
    source = Streaming(
        [
            (
                [
                    {"type": "ADDED", "object": obj("a", "3", 1)},
                    {"type": "ADDED", "object": obj("b", "2", 2)},
                    end_of_initial_events("5"),
                    *follows,  # the stream goes on as a watch: the informer closes it and watches from "5"
                ],
                None,
            ),
            ([], RefusedError("the API server refused the list: resourceVersionMatch is forbidden for watch")),
        ],
        [[obj("a", "6", 1), obj("b", "7", 3)]],
        [([], WatchExpired("too old"))],
    )
    events: list[tuple[str, str, Any, Any]] = []
    informer: Informer[Any] = Informer(source, kinds.NODE, lambda o: o["value"], handler=recording(events))
    run_until(informer, source, lambda: informer.relists >= 1 and informer.store.get("b") == 3)
    assert [(e, k) for e, k, _, _ in events][:2] == [("ADDED", "a"), ("ADDED", "b")]
    assert source.watch_from[0] == "5" and "late" not in informer.store
    # The second list (after the 410) was refused as a stream: by pages from then on.
    assert source.stream_calls == 2 and source.list_calls == 1 and informer.streaming is False
    assert informer.synced.is_set()


def test_a_stream_that_never_ends_its_initial_events_is_listed_by_pages() -> None:
    source = Streaming([([{"type": "ADDED", "object": obj("a", "3", 1)}], None)], [[obj("a", "4", 2)]], [])
    informer: Informer[Any] = Informer(source, kinds.NODE, lambda o: o["value"])
    informer.relist()
    assert informer.store == {"a": 2} and informer.resource_version == "4" and not informer.streaming
    informer.relist()
    assert source.stream_calls == 1 and source.list_calls == 2


def test_a_server_that_ignores_the_streamed_list_is_listed_by_pages_at_its_first_bookmark() -> None:
    plain = {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "4"}}}
    source = Streaming([([plain, {"type": "ADDED", "object": obj("x", "5")}], None)], [[obj("a", "4", 2)]], [])
    informer: Informer[Any] = Informer(source, kinds.NODE, lambda o: o["value"])
    informer.relist()
    assert informer.store == {"a": 2} and not informer.streaming and source.list_calls == 1
