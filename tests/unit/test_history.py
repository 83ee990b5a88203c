"""``core.history``: a Workload's story from its conditions and Events, with the time spent in each state."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from gpuctl.core.history import (
    CHECK,
    PLACING,
    QUEUED,
    RUNNING,
    UNRECORDED,
    duration,
    parse_event,
    workload_event_gate,
    workload_history,
)
from gpuctl.core.pods import parse_pod
from gpuctl.core.workloads import parse_workload

T0 = datetime(2026, 12, 1, 8, 0, tzinfo=timezone.utc)


def at(minutes: float) -> str:
    return (T0 + timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%SZ")


def seconds(minutes: float) -> float:
    return (T0 + timedelta(minutes=minutes)).timestamp()


def workload_obj(conditions: list[tuple[str, str, str, float]]) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": "w1", "namespace": "team-a", "uid": "uid-1", "creationTimestamp": at(0)},
        "spec": {"queueName": "q", "podSets": [{"name": "main", "count": 1, "template": {"spec": {}}}]},
        "status": {
            "conditions": [
                {"type": t, "status": s, "reason": r, "message": f"{t} {r}", "lastTransitionTime": at(m)}
                for t, s, r, m in conditions
            ]
        },
    }


def new_event(
    reason: str, note: str, minutes: float, *, kind: str = "Workload", name: str = "w1", **extra: Any
) -> dict[str, Any]:
    """An Event as ``events.k8s.io/v1`` serves it."""
    return {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": f"{name}.{reason}", "namespace": "team-a"},
        "eventTime": (T0 + timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "regarding": {"kind": kind, "name": name, "namespace": "team-a"},
        "reason": reason,
        "note": note,
        "type": "Normal",
        "reportingController": "kueue-admission",
        **extra,
    }


def old_event(reason: str, message: str, minutes: float, *, kind: str = "Pod", name: str = "w1-pod") -> dict[str, Any]:
    """An Event as core ``v1`` serves it (the scheduler's and the kubelet's)."""
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{name}.{reason}", "namespace": "team-a"},
        "involvedObject": {"kind": kind, "name": name, "namespace": "team-a"},
        "reason": reason,
        "message": message,
        "type": "Warning",
        "source": {"component": "default-scheduler"},
        "firstTimestamp": at(minutes),
        "lastTimestamp": at(minutes + 5),
        "count": 3,
    }


def pod_obj(ready_at: float | None) -> dict[str, Any]:
    conditions = [{"type": "PodScheduled", "status": "True", "lastTransitionTime": at(131)}]
    if ready_at is not None:
        conditions.append({"type": "Ready", "status": "True", "lastTransitionTime": at(ready_at)})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "w1-pod", "namespace": "team-a", "annotations": {"kueue.x-k8s.io/workload": "w1"}},
        "spec": {"nodeName": "n3", "containers": [{"name": "main"}]},
        "status": {"phase": "Running" if ready_at else "Pending", "conditions": conditions},
    }


def test_both_event_apis_read_alike() -> None:
    new = parse_event(
        new_event("Retry", "card fragmentation on n3", 10, series={"count": 7, "lastObservedTime": at(40)})
    )
    assert (new.regarding_kind, new.regarding_name, new.count, new.last, new.note) == (
        "Workload",
        "w1",
        7,
        at(40),
        "card fragmentation on n3",
    )
    old = parse_event(old_event("FailedScheduling", "0/3 nodes are available", 5))
    assert (old.regarding_kind, old.count, old.first, old.last, old.controller) == (
        "Pod",
        3,
        at(5),
        at(10),
        "default-scheduler",
    )


def test_the_story_of_a_workload_that_waited_for_quota_then_at_the_check() -> None:
    w = parse_workload(
        workload_obj([("QuotaReserved", "True", "QuotaReserved", 110), ("Admitted", "True", "Admitted", 130)])
    )
    events = [
        parse_event(new_event("Pending", "couldn't assign flavors: insufficient quota", 1)),
        parse_event(new_event("QuotaReserved", "Quota reserved in ClusterQueue pool", 110)),
        parse_event(
            new_event(
                "Retry",
                "card fragmentation on n3",
                111,
                reportingController="gpuctl.gpustack.ai/operator",
                series={"count": 9, "lastObservedTime": at(128)},
            )
        ),
        parse_event(new_event("Admitted", "Admitted by ClusterQueue pool", 130)),
        parse_event(old_event("FailedScheduling", "0/3 nodes are available", 130.5)),
        parse_event(new_event("Pending", "someone else's", 3, name="w2")),
    ]
    h = workload_history(w, events, [parse_pod(pod_obj(ready_at=132))], now=seconds(200))
    reasons = [(line.reason, line.gate, line.source) for line in h.lines]
    assert reasons == [
        ("Created", 1, "condition"),
        ("Pending", 2, "event"),
        ("QuotaReserved=True", 2, "condition"),
        ("QuotaReserved", 2, "event"),
        ("Retry", 3, "event"),
        ("Admitted=True", 3, "condition"),
        ("Admitted", 3, "event"),
        ("FailedScheduling", 4, "event"),
        ("PodScheduled=True", 4, "condition"),
        ("Ready=True", 5, "condition"),
    ]
    assert h.totals() == {QUEUED: 110 * 60, CHECK: 20 * 60, PLACING: 2 * 60, RUNNING: 68 * 60}
    assert h.summary == (
        "waited 2h12m: 1h50m for quota, 20m at the check, 2m at the scheduler and device plugin; "
        "the check last said: card fragmentation on n3; ran 1h8m"
    )
    retry = next(line for line in h.lines if line.reason == "Retry").to_dict()
    assert (retry["count"], retry["lastSeen"]) == (9, at(128))
    assert h.incomplete  # created over an hour before now: older Events may have expired
    assert "--event-ttl" in h.to_dict()["incomplete"]


def test_a_workload_evicted_by_a_drain_goes_back_to_the_queue() -> None:
    w = parse_workload(
        workload_obj(
            [
                ("QuotaReserved", "False", "Pending", 40),
                ("Admitted", "False", "NoReservation", 40),
                ("Evicted", "True", "ClusterQueueStopped", 40),
            ]
        )
    )
    events = [
        parse_event(new_event("QuotaReserved", "reserved", 5)),
        parse_event(new_event("Admitted", "admitted", 6)),
        parse_event(new_event("EvictedDueToClusterQueueStopped", "The ClusterQueue is stopped", 40)),
    ]
    h = workload_history(w, events, [], now=seconds(50))
    # No Pod in the record: from admission to eviction it may have run; the record no longer says, so no gate is
    # charged with that time.
    assert [s.state for s in h.spans] == [QUEUED, CHECK, UNRECORDED, QUEUED]
    assert h.spans[-1].seconds == 600
    assert h.summary == (
        "waiting 16m: 15m for quota, 1m at the check; 34m admitted, then evicted: its Pods are gone, so whether and "
        "how long it ran is not in the record"
    )
    assert not h.incomplete
    assert next(line.gate for line in h.lines if line.reason.startswith("EvictedDueTo")) == 2


def test_each_eviction_cause_names_its_gate() -> None:
    assert workload_event_gate("EvictedDueToAdmissionCheck") == 3
    assert workload_event_gate("EvictedDueToPodsReadyTimeout") == 4
    assert workload_event_gate("EvictedDueToPreempted") == 2
    assert workload_event_gate("SomethingElse") is None


def test_durations_read_as_people_write_them() -> None:
    assert [duration(s) for s in (45, 125, 1200, 7800, 90000)] == ["45s", "2m5s", "20m", "2h10m", "1d1h"]


def finished_pod(phase: str, started: float | None, finished: float | None) -> dict[str, Any]:
    """A Pod whose containers ran from ``started`` to ``finished`` (minutes), and is no longer Ready."""
    obj = pod_obj(None)
    obj["status"]["phase"] = phase
    obj["status"]["conditions"].append({"type": "Ready", "status": "False", "lastTransitionTime": at(finished or 0)})
    terminated: dict[str, Any] = {"exitCode": 0 if phase == "Succeeded" else 1}
    if started is not None:
        terminated["startedAt"] = at(started)
    if finished is not None:
        terminated["finishedAt"] = at(finished)
    obj["status"]["containerStatuses"] = [{"name": "main", "state": {"terminated": terminated}}]
    return obj


FINISHED_RUN = [
    ("QuotaReserved", "True", "QuotaReserved", 5),
    ("Admitted", "True", "Admitted", 10),
    ("Finished", "True", "Succeeded", 50),
]


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_a_finished_run_counts_its_running_time_from_its_containers(phase: str) -> None:
    # Created at 0, quota at 5, admitted at 10, its container ran 11 to 50 and the Pod ended: 39 minutes running,
    # 1 minute at the scheduler and the device plugin, never "40m at the scheduler".
    w = parse_workload(workload_obj(FINISHED_RUN))
    h = workload_history(w, [], [parse_pod(finished_pod(phase, 11, 50))], now=seconds(60))
    assert h.totals() == {QUEUED: 5 * 60, CHECK: 5 * 60, PLACING: 60, RUNNING: 39 * 60}
    assert h.summary == ("waited 11m: 5m for quota, 5m at the check, 1m at the scheduler and device plugin; ran 39m")
    assert [line.message for line in h.lines if line.reason == "Finished"] == [f"pod/w1-pod finished ({phase})"]


def test_the_kubelets_started_event_stands_in_for_a_missing_container_start() -> None:
    w = parse_workload(workload_obj(FINISHED_RUN))
    events = [parse_event(old_event("Started", "Started container main", 12))]
    h = workload_history(w, events, [parse_pod(finished_pod("Succeeded", None, 50))], now=seconds(60))
    assert h.totals()[RUNNING] == 38 * 60 and h.totals()[PLACING] == 2 * 60
