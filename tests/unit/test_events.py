"""The operator's Event recorder: series for repeats, a budget per object, and never a wait for the events API."""

from __future__ import annotations

import datetime
import socket
import threading
import time
from typing import Any

import pytest

from gpuctl.cluster import kinds
from gpuctl.cluster.live import Connection, LiveSource, NotFoundError
from gpuctl.operator.events import BURST, EventRecorder, Regarding

WORKLOAD = Regarding(kinds.WORKLOAD, "w1", "team-a", "uid-1")
RETRY = ("Warning", "Retry", "Judged", "card fragmentation on n3: no card has 40% free")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def wall(self) -> datetime.datetime:
        return datetime.datetime(2026, 12, 1, tzinfo=datetime.timezone.utc) + datetime.timedelta(seconds=self.now)


class Sink:
    """An events API that keeps what it is sent."""

    def __init__(self) -> None:
        self.created: list[dict[str, Any]] = []
        self.patches: list[tuple[str, str, Any]] = []
        self.missing: set[str] = set()

    def create(self, kind: Any, body: dict[str, Any], *, namespace: str | None = None, **_: Any) -> dict[str, Any]:
        assert kind is kinds.EVENT and namespace == body["metadata"]["namespace"]
        self.created.append(body)
        return body

    def patch(self, kind: Any, name: str, body: Any, *, namespace: str | None = None, **_: Any) -> dict[str, Any]:
        if name in self.missing:
            raise NotFoundError(f'events.events.k8s.io "{name}" not found')
        self.patches.append((namespace or "", name, body))
        return {}


def recorder(sink: Any, clock: Clock, **kw: Any) -> EventRecorder:
    return EventRecorder(sink, "gpuctl-operator-0", clock=clock, wall=clock.wall, **kw)


def test_an_event_is_written_as_client_gos_recorder_writes_it() -> None:
    sink, clock = Sink(), Clock()
    rec = recorder(sink, clock)
    rec.record(WORKLOAD, *RETRY)
    rec.record(Regarding(kinds.INSTANCETYPE, "pool-a"), "Normal", "PhaseChanged", "Updated", "Active → Draining")
    rec.drain()
    first, second = sink.created
    assert first["apiVersion"] == "events.k8s.io/v1" and first["kind"] == "Event"
    assert first["metadata"]["namespace"] == "team-a" and first["metadata"]["name"].startswith("w1.")
    assert first["regarding"] == {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "name": "w1",
        "namespace": "team-a",
        "uid": "uid-1",
    }
    assert (first["type"], first["reason"], first["action"], first["note"]) == RETRY
    assert first["reportingController"] == "gpuctl.gpustack.ai/operator"
    assert first["reportingInstance"] == "gpuctl-operator-0"
    assert first["eventTime"].endswith("Z") and "." in first["eventTime"]
    assert "series" not in first
    # A cluster-scoped object's Events live in "default", as client-go puts them.
    assert second["metadata"]["namespace"] == "default" and "namespace" not in second["regarding"]


def test_a_thousand_identical_retries_are_one_event_series() -> None:
    sink, clock = Sink(), Clock()
    rec = recorder(sink, clock, heartbeat=60.0)
    for _ in range(1000):
        rec.record(WORKLOAD, *RETRY)
        rec.drain()
        clock.now += 0.5
    rec.flush_series()
    assert len(sink.created) == 1
    name = sink.created[0]["metadata"]["name"]
    assert {n for _, n, _ in sink.patches} == {name}
    # The second occurrence is written at once; the rest arrive with the heartbeat.
    assert sink.patches[0][2]["series"]["count"] == 2
    assert sink.patches[-1][2]["series"]["count"] == 1000
    assert len(sink.patches) == 2
    assert rec.aggregated == 999


def test_a_retry_every_thirty_seconds_for_a_day_stays_one_series() -> None:
    sink, clock = Sink(), Clock()
    rec = recorder(sink, clock, heartbeat=600.0)
    for _ in range(2880):
        rec.record(WORKLOAD, *RETRY)
        clock.now += 30
        if clock.now - rec._last_heartbeat >= rec.heartbeat:
            rec.flush_series()
        rec.drain()
    rec.flush_series()
    assert len(sink.created) == 1
    assert sink.patches[-1][2]["series"]["count"] == 2880
    assert len(sink.patches) <= 2880 * 30 / 600 + 2


def test_a_changed_note_or_reason_is_a_new_event() -> None:
    sink, clock = Sink(), Clock()
    rec = recorder(sink, clock)
    rec.record(WORKLOAD, *RETRY)
    rec.record(WORKLOAD, "Warning", "Retry", "Judged", "card fragmentation on n4")
    rec.record(WORKLOAD, "Normal", "Ready", "Judged", "fits on n4")
    rec.drain()
    assert [e["note"] for e in sink.created] == [RETRY[3], "card fragmentation on n4", "fits on n4"]


def test_a_series_not_seen_within_the_window_ends() -> None:
    sink, clock = Sink(), Clock()
    rec = recorder(sink, clock, window=600.0)
    rec.record(WORKLOAD, *RETRY)
    clock.now += 601
    rec.record(WORKLOAD, *RETRY)
    rec.drain()
    assert len(sink.created) == 2


def test_each_object_has_a_budget_of_new_events() -> None:
    sink, clock = Sink(), Clock()
    rec = recorder(sink, clock, refill_seconds=300.0)
    for i in range(100):
        rec.record(WORKLOAD, "Warning", "Retry", "Judged", f"reason {i}")
    other = Regarding(kinds.WORKLOAD, "w2", "team-a", "uid-2")
    rec.record(other, *RETRY)
    rec.drain()
    assert len(sink.created) == BURST + 1
    assert rec.dropped["rate-limited"] == 100 - BURST
    clock.now += 300
    rec.record(WORKLOAD, "Warning", "Retry", "Judged", "reason after the refill")
    rec.drain()
    assert sink.created[-1]["note"] == "reason after the refill"


def test_a_series_whose_event_expired_starts_anew() -> None:
    sink, clock = Sink(), Clock()
    rec = recorder(sink, clock)
    rec.record(WORKLOAD, *RETRY)
    rec.drain()
    sink.missing.add(sink.created[0]["metadata"]["name"])
    rec.record(WORKLOAD, *RETRY)
    rec.drain()
    assert rec.dropped["failed"] == 1
    rec.record(WORKLOAD, *RETRY)
    rec.drain()
    assert len(sink.created) == 2


def test_a_full_queue_drops_and_counts() -> None:
    sink, clock = Sink(), Clock()
    rec = recorder(sink, clock, queue_size=3)
    for i in range(5):
        rec.record(Regarding(kinds.WORKLOAD, f"w{i}", "team-a"), *RETRY)
    assert rec.dropped["queue-full"] == 2
    rec.drain()
    assert len(sink.created) == 3


def test_the_recorders_metrics_say_what_waits_and_what_became_of_each_occurrence() -> None:
    from prometheus_client.parser import text_string_to_metric_families

    from gpuctl.operator.metrics import Metrics, event_families

    sink, clock = Sink(), Clock()
    rec = recorder(sink, clock, queue_size=3)
    for i in range(5):
        rec.record(Regarding(kinds.WORKLOAD, f"w{i}", "team-a"), *RETRY)
    rec.record(Regarding(kinds.WORKLOAD, "w0", "team-a"), *RETRY)  # a repeat: folded into its series
    metrics = Metrics()
    metrics.gauge(lambda: event_families(*rec.counts()))

    def read() -> dict[tuple[str, str], float]:
        return {
            (s.name, s.labels.get("outcome", "")): s.value
            for f in text_string_to_metric_families(metrics.render().decode())
            for s in f.samples
            if s.name.startswith("gpuctl_events")
        }

    before = read()
    assert before[("gpuctl_events_queued", "")] == 3
    assert before[("gpuctl_events_total", "dropped-queue-full")] == 2
    assert before[("gpuctl_events_total", "aggregated")] == 1
    rec.drain()
    after = read()
    assert after[("gpuctl_events_queued", "")] == 0 and after[("gpuctl_events_total", "recorded")] == 3


def test_a_long_note_is_cut_to_what_the_api_server_accepts() -> None:
    sink, clock = Sink(), Clock()
    rec = recorder(sink, clock)
    rec.record(WORKLOAD, "Warning", "Retry", "Judged", "x" * 5000)
    rec.record(WORKLOAD, "Warning", "Retry", "Judged", "é" * 1000)  # 2,000 bytes: the API server counts bytes
    rec.record(WORKLOAD, "Warning", "Retry", "Judged", "é" * 512)  # exactly 1,024 bytes: kept whole
    rec.drain()
    notes = [c["note"] for c in sink.created]
    assert [len(n.encode()) for n in notes] == [1024, 1023, 1024]
    assert notes[0].endswith("x…") and notes[1].endswith("é…") and notes[2] == "é" * 512


class Stuck(Sink):
    """An events API that never answers until released."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.calls = 0

    def create(self, kind: Any, body: dict[str, Any], **kw: Any) -> dict[str, Any]:
        self.calls += 1
        self.release.wait(30)
        return super().create(kind, body, **kw)


def test_verdicts_never_wait_for_a_stuck_events_api() -> None:
    sink, stop = Stuck(), threading.Event()
    rec = EventRecorder(sink, "gpuctl-operator-0")
    rec.start(stop)
    try:
        rec.record(WORKLOAD, *RETRY)
        deadline = time.monotonic() + 5
        while sink.calls == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert sink.calls == 1  # the writer thread is inside the call, and stays there
        for i in range(1000):
            rec.record(Regarding(kinds.WORKLOAD, f"other-{i}", "team-a", f"uid-other-{i}"), *RETRY)
        assert sink.calls == 1 and not sink.release.is_set() and rec.pending() == 1000
    finally:
        sink.release.set()
        stop.set()


@pytest.fixture
def black_hole() -> Any:
    """A TCP endpoint that accepts connections and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    held: list[socket.socket] = []
    done = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not done.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    done.set()
    t.join(2)
    for s in held:
        s.close()
    server.close()


def test_a_black_holed_events_endpoint_does_not_slow_verdicts(black_hole: str) -> None:
    """1,000 verdicts' Events recorded while the writer waits on an API server that never answers (with a request
    timeout of ten minutes): ``record`` never waits on the writer, so all 1,000 are recorded long before a single
    request could time out. No duration is asserted: a ``record`` that waited would hang the test until the guard."""
    live = LiveSource(Connection(server=black_hole, token="t", request_timeout=600.0))
    stop = threading.Event()
    holed = EventRecorder(live, "gpuctl-operator-0")
    holed.start(stop)
    recorded: list[int] = []

    def record_all() -> None:
        for i in range(1000):
            holed.record(Regarding(kinds.WORKLOAD, f"other-{i}", "team-a", f"uid-other-{i}"), *RETRY)
            recorded.append(i)

    try:
        holed.record(WORKLOAD, *RETRY)
        time.sleep(0.2)  # the writer is now waiting on the black hole
        recorder = threading.Thread(target=record_all, daemon=True)
        recorder.start()
        recorder.join(120)  # a guard against a hang, far below the writer's 600 s request timeout
        assert not recorder.is_alive() and len(recorded) == 1000, len(recorded)
    finally:
        stop.set()
