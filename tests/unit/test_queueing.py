"""Kueue's pending order, positions, what a Workload asks, and the honest upper bound on a wait."""

from __future__ import annotations

from typing import Any

from gpuctl.core.queueing import asks, pending, pending_order, position_of, queue_timestamp, wait_bound
from gpuctl.core.units import M
from gpuctl.core.workloads import parse_workload
from testbed.factories import workload

CQ = "gpustack--nvidia-a10g-linux-amd64"


def waiting(
    name: str, priority: int, created: str, *, evicted_at: str = "", limits: dict[str, str] | None = None
) -> Any:
    obj = workload(name, [("main", 1, limits or {"nvidia.com/gpu": "1"})], reserved=False)
    obj["metadata"]["creationTimestamp"] = created
    obj["spec"]["priority"] = priority
    if evicted_at:
        obj["status"]["conditions"].append(
            {"type": "Evicted", "status": "True", "reason": "AdmissionCheck", "lastTransitionTime": evicted_at}
        )
    return parse_workload(obj)


def running(name: str, admitted_at: str, max_seconds: int | None, label: str | None = None) -> Any:
    obj = workload(name, [("main", 1, {"nvidia.com/gpu": "1"})], admitted=True)
    obj["status"]["conditions"] = [
        {"type": "QuotaReserved", "status": "True"},
        {"type": "Admitted", "status": "True", "lastTransitionTime": admitted_at},
    ]
    if max_seconds is not None:
        obj["spec"]["maximumExecutionTimeSeconds"] = max_seconds
    if label is not None:
        obj["metadata"]["labels"] = {"example.com/max-runtime": label}
    return parse_workload(obj)


def test_priority_first_then_the_time_it_joined_the_queue() -> None:
    ws = [
        waiting("old-low", 0, "2026-12-01T00:00:00Z"),
        waiting("new-high", 10, "2026-12-01T02:00:00Z"),
        waiting("mid-low", 0, "2026-12-01T01:00:00Z"),
        # Evicted by the check at 03:00: it joined the queue again then, behind mid-low.
        waiting("evicted-low", 0, "2026-11-30T00:00:00Z", evicted_at="2026-12-01T03:00:00Z"),
    ]
    assert queue_timestamp(ws[3]) == "2026-12-01T03:00:00Z"
    order = pending_order(ws, {w.key: CQ for w in ws}, CQ)
    assert [w.name for w in order] == ["new-high", "old-low", "mid-low", "evicted-low"]
    where = position_of(ws[2], order)
    assert where is not None and (where.position, where.total) == (3, 4)
    assert [w.name for w in where.ahead] == ["new-high", "old-low"]
    assert pending_order(ws, {w.key: "other" for w in ws}, CQ) == []
    assert not pending(running("r", "2026-12-01T00:00:00Z", 60))


def test_what_a_workload_asks_in_its_view_unit() -> None:
    assert asks(waiting("a", 0, "t", limits={"nvidia.com/gpu": "3"})) == "1 x 3 whole cards"
    sliced = {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.units": str(60 * M // 100)}
    assert asks(waiting("b", 0, "t", limits=sliced)) == "1 x 60 % slice"
    assert asks(waiting("c", 0, "t", limits={"nvidia.com/gpu.shared": "2"})) == "1 x shares on 2 cards"


def test_the_wait_is_bounded_only_when_every_runtime_is() -> None:
    now = 1_764_554_400.0  # 2025-12-01T02:00:00Z
    r1 = running("r1", "2025-12-01T01:30:00Z", 3600)  # ends by 02:30 -> 1800 s from now
    r2 = running("r2", "2025-12-01T01:50:00Z", None, label="1200")  # the admin's label: ends by 02:10
    ahead = [waiting("a1", 0, "t"), running("x", "2025-12-01T00:00:00Z", 600)]
    assert wait_bound([], [r1, r2], now, "example.com/max-runtime") == 1800
    assert wait_bound(ahead[1:], [r1, r2], now, "example.com/max-runtime") == 1800 + 600
    assert wait_bound(ahead[:1], [r1], now, None) is None  # one ahead has no runtime bound: unknown, never a guess
    assert wait_bound([], [r2], now, None) is None  # the label is not named: r2's runtime is unbounded
    assert wait_bound([], [], now, None) == 0
