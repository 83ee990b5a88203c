"""Watching screens that say when the API server stops answering: the poller, and `--wait`'s follow."""

from __future__ import annotations

import io
import threading
from typing import Any

import pytest

from gpuctl.cli import pools
from gpuctl.cli.errors import RuntimeFailure
from gpuctl.cli.watching import Poller
from gpuctl.cluster.errors import SourceError


def test_a_poller_is_fresh_while_answers_come_and_stale_after_two_intervals_without() -> None:
    gate = threading.Event()
    calls = []

    def read() -> int:
        calls.append(1)
        if len(calls) > 1:
            gate.wait(10)  # the second read hangs, as on a stopped API server
        return len(calls)

    poller = Poller(read, 0.05).start()
    try:
        poller.changed.wait(5)
        heard = poller.heard_at
        assert heard is not None and poller.latest == 1
        assert poller.stale_for(heard + 0.09, heard) is None
        assert poller.stale_for(heard + 0.2, heard) == pytest.approx(0.2)
        assert poller.status(heard + 0.2, heard).startswith("STALE: no answer from the API server for 0s (since ")
        assert "last answer from the API server" in poller.status(heard, heard)
    finally:
        gate.set()
        poller.stop()


def test_a_failing_read_is_stale_at_once_with_its_error() -> None:
    def read() -> int:
        raise SourceError("cannot reach the API server at https://x: connection refused")

    poller = Poller(read, 10).start()
    try:
        poller.changed.wait(5)
        status = poller.status(0.0, 0.0)
        assert status.startswith("STALE") and status.endswith(
            "retrying: cannot reach the API server at https://x: connection refused"
        )
    finally:
        poller.stop()


def test_wait_keeps_following_through_failed_reads_and_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    answers: list[Any] = [
        (2, "Draining", "2 workload(s) still reserved"),  # the count `follow` starts from
        (2, "Draining", "2 workload(s) still reserved"),
        SourceError("cannot reach the API server at https://x: timed out"),
        SourceError("cannot reach the API server at https://x: timed out"),
        (0, "Inactive", "0 workload(s) still reserved"),
    ]

    def left(_: Any, __: str) -> Any:
        a = answers.pop(0) if len(answers) > 1 else answers[0]
        if isinstance(a, Exception):
            raise a
        return a

    err = io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    pools.follow(None, "p", 30, left, "drain", "drained", every=0.02)  # type: ignore[arg-type]
    lines = err.getvalue().splitlines()
    assert any("STALE" in line and "timed out" in line for line in lines)
    assert lines[-1].endswith("instancetype/p Inactive: 0 workload(s) still reserved")


def test_wait_gives_up_at_its_deadline_naming_the_silence() -> None:
    def left(_: Any, __: str) -> Any:
        if getattr(left, "called", False):
            raise SourceError("cannot reach the API server at https://x: timed out")
        left.called = True  # type: ignore[attr-defined]
        return (1, "Draining", "1 workload(s) still reserved")

    with pytest.raises(RuntimeFailure, match=r"not drained after 0\.2s: .*STALE.*timed out"):
        pools.follow(None, "p", 0.2, left, "drain", "drained", every=0.02)  # type: ignore[arg-type]
