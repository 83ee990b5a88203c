"""Ages as kubectl prints AGE, and when the gate that holds a Workload began holding it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuctl.core.ages import age_text, hold_started, since
from gpuctl.core.queueing import epoch_seconds
from gpuctl.core.workloads import CheckState, Condition, Workload

M, H, D, Y = 60, 3600, 86400, 365 * 86400


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (None, "<unknown>"),
        (-2, "<invalid>"),
        (-1, "0s"),
        (0, "0s"),
        (119, "119s"),
        (2 * M, "2m"),
        (2 * M + 1, "2m1s"),
        (9 * M + 59, "9m59s"),
        (10 * M, "10m"),
        (3 * H - 1, "179m"),
        (3 * H, "3h"),
        (3 * H + 30 * M, "3h30m"),
        (8 * H - 1, "7h59m"),
        (8 * H, "8h"),
        (48 * H - 1, "47h"),
        (2 * D, "2d"),
        (2 * D + 5 * H, "2d5h"),
        (8 * D - 1, "7d23h"),
        (8 * D, "8d"),
        (2 * Y - 1, "729d"),
        (2 * Y, "2y"),
        (2 * Y + D, "2y1d"),
        (8 * Y, "8y"),
        (20 * Y, "20y"),
    ],
)
def test_age_text_prints_as_kubectl_prints_age(seconds: float | None, text: str) -> None:
    assert age_text(seconds) == text


@given(st.integers(min_value=0, max_value=10 * Y), st.integers(min_value=0, max_value=10 * Y))
def test_an_older_age_never_prints_as_a_smaller_number_of_its_largest_unit(a: int, b: int) -> None:
    units = {"s": 1, "m": M, "h": H, "d": D, "y": Y}

    def lead(text: str) -> int:
        digits = ""
        for ch in text:
            if ch.isdigit():
                digits += ch
            else:
                return int(digits) * units[ch]
        raise AssertionError(text)

    lo, hi = sorted((a, b))
    assert lead(age_text(lo)) <= lead(age_text(hi))


def test_since_measures_from_an_rfc3339_time() -> None:
    now = epoch_seconds("2026-11-30T12:00:00Z")
    assert now is not None
    assert since("2026-11-30T11:00:00Z", now) == "60m"
    assert since("", now) == "<unknown>" and since("yesterday", now) == "<unknown>"


def _w(
    conditions: list[Condition], checks: tuple[CheckState, ...] = (), created: str = "2026-11-30T08:00:00Z"
) -> Workload:
    return Workload(
        "ns",
        "w",
        "q",
        (),
        conditions={c.type: c for c in conditions},
        checks=checks,
        created=created,
    )


def test_each_gate_holds_from_its_own_transition() -> None:
    pending = _w([Condition("QuotaReserved", "False", "Pending", "", "2026-11-30T08:00:01Z")])
    assert hold_started(pending, 2) == "2026-11-30T08:00:01Z"
    assert hold_started(pending, None) == "" and hold_started(pending, 1) == "2026-11-30T08:00:00Z"
    reserved = _w(
        [Condition("QuotaReserved", "True", "QuotaReserved", "", "2026-11-30T08:05:00Z")],
        (CheckState("gpustack-node-devices", "Retry", "", None, "2026-11-30T08:09:00Z"),),
    )
    assert hold_started(reserved, 3) == "2026-11-30T08:09:00Z"
    ready_then = _w(
        [Condition("QuotaReserved", "True", "QuotaReserved", "", "2026-11-30T08:05:00Z")],
        (CheckState("gpustack-node-devices", "Ready", "", None, "2026-11-30T08:04:00Z"),),
    )
    assert hold_started(ready_then, 3) == "2026-11-30T08:05:00Z"
    admitted = _w(
        [
            Condition("QuotaReserved", "True", "QuotaReserved", "", "2026-11-30T08:05:00Z"),
            Condition("Admitted", "True", "Admitted", "", "2026-11-30T08:06:00Z"),
        ]
    )
    assert hold_started(admitted, 4) == hold_started(admitted, 5) == "2026-11-30T08:06:00Z"


def test_an_evicted_workload_waits_anew_from_its_eviction() -> None:
    evicted = _w(
        [
            Condition("QuotaReserved", "False", "Pending", "", "2026-11-30T09:00:05Z"),
            Condition("Evicted", "True", "Preempted", "", "2026-11-30T09:00:00Z"),
            Condition("Requeued", "True", "Preempted", "", "2026-11-30T09:00:06Z"),
        ]
    )
    assert hold_started(evicted, 2) == "2026-11-30T09:00:06Z"
    # Times as the API server writes them are compared as instants, not text.
    mixed = _w(
        [Condition("QuotaReserved", "False", "Pending", "", "2026-11-30T09:30:00+01:00")],
        created="2026-11-30T08:40:00Z",
    )
    assert hold_started(mixed, 2) == "2026-11-30T08:40:00Z"
