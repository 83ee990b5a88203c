"""The Events the controllers record: a check verdict's transitions, an instance stop and why, an InstanceType's
phase change, a node turned on or off for pinned Workloads — and a recorder that fails costs a reconcile nothing."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from gpuctl.cluster import kinds
from gpuctl.core import naming
from gpuctl.core.units import M
from gpuctl.operator.controllers.check import CheckController
from gpuctl.operator.controllers.fit_labels import FitLabelController
from gpuctl.operator.controllers.instance_stop import InstanceStopController
from gpuctl.operator.controllers.status import StatusController
from gpuctl.operator.events import EventRecorder, Regarding
from testbed.factories import bound_pod, card_row, devices
from tests.unit.controllers.harness import A10G, A10G_TYPE, cluster_with, pending
from tests.unit.controllers.test_instance_stop import instance, queue


@dataclass
class Recorded:
    events: list[tuple[Regarding, str, str, str, str]] = field(default_factory=list)

    def record(self, regarding: Regarding, event_type: str, reason: str, action: str, note: str) -> None:
        self.events.append((regarding, event_type, reason, action, note))

    def reasons(self) -> list[str]:
        return [e[2] for e in self.events]


class Broken:
    def record(self, *_: Any) -> None:
        raise RuntimeError("the recorder is broken")


def holder_on_x() -> dict[str, Any]:
    return bound_pod(
        "holder",
        "node-x",
        {"nvidia.com/gpu": "1"},
        workload_name=None,
        allocations={"main": [{"id": "GPU-0000", "mode": 1, "allocated": M}]},
    )


def test_each_verdict_transition_is_an_event_on_the_workload_with_the_per_card_reason() -> None:
    sink = Recorded()
    cluster, controllers = cluster_with(pending("two", "node-x"), holder_on_x(), events=sink)
    check = controllers.get(CheckController)
    check.reconcile("team-a/two")
    [(regarding, event_type, reason, action, note)] = sink.events
    uid = cluster.get(kinds.WORKLOAD, "two", "team-a")["metadata"].get("uid", "")
    assert regarding == Regarding(kinds.WORKLOAD, "two", "team-a", uid)
    assert (event_type, reason, action) == ("Warning", "Retry", "AdmissionCheck")
    assert note.startswith(f"{naming.NODE_DEVICES_CHECK}: ") and "node-x has 1 free of 2" in note
    check.reconcile("team-a/two")
    assert len(sink.events) == 1  # no change, no write, no Event
    cluster.objects.pop(("Pod", "team-a", "holder"))
    check.reconcile("team-a/two")
    assert sink.reasons() == ["Retry", "Ready"] and sink.events[1][1] == "Normal"


def test_a_thousand_identical_retries_through_the_real_recorder_leave_one_event_series() -> None:
    cluster, controllers = cluster_with(pending("two", "node-x"), holder_on_x())
    recorder = EventRecorder(cluster, "replica-0", heartbeat=0.0)
    check = controllers.get(CheckController)
    check.events = recorder
    for _ in range(1000):
        check.reconcile("team-a/two")
        # Kueue answers a Retry by requeueing the Workload with the check Pending again: the next verdict is a
        # transition again, with the same reason.
        stored = copy.deepcopy(cluster.get(kinds.WORKLOAD, "two", "team-a"))
        assert stored is not None and stored["status"]["admissionChecks"][0]["state"] == "Retry"
        stored["status"]["admissionChecks"][0]["state"] = "Pending"
        cluster.put(stored)
    recorder.drain()
    recorder.flush_series()
    recorder.drain()
    [event] = cluster.list(kinds.EVENT)
    assert event["reason"] == "Retry" and event["regarding"]["name"] == "two"
    assert event["series"]["count"] == 1000 and recorder.aggregated == 999


def test_an_instance_stop_is_an_event_saying_why() -> None:
    sink = Recorded()
    cluster, controllers = cluster_with(queue(A10G_TYPE, "HoldAndDrain"), instance("box", A10G_TYPE), events=sink)
    controllers.get(InstanceStopController).reconcile("team-a/box")
    [(regarding, event_type, reason, action, note)] = sink.events
    assert (regarding.kind, regarding.name, regarding.namespace) == (kinds.INSTANCE, "box", "team-a")
    assert (event_type, reason, action) == ("Normal", "HoldAndDrain", "StopInstance")
    assert "stopPolicy HoldAndDrain" in note
    gone = instance("lost", "gpustack--nvidia-t4-linux-amd64")
    cluster.put(gone)
    controllers.get(InstanceStopController).reconcile("team-a/lost")
    assert sink.reasons() == ["HoldAndDrain", "InstanceTypeGone"]


def test_an_instancetype_phase_change_is_an_event_and_a_rewrite_of_the_same_phase_is_not() -> None:
    sink = Recorded()
    cluster, controllers = cluster_with(queue(A10G_TYPE), events=sink)
    status = controllers.get(StatusController)
    status.reconcile(A10G_TYPE)
    written = cluster.get(kinds.INSTANCETYPE, A10G_TYPE)
    assert written is not None
    first = written["status"]["phase"]
    sink.events.clear()
    cluster.put(devices("node-x", cards=2, rows=[card_row(0, mode=1, allocated=M), card_row(1)]))
    status.reconcile(A10G_TYPE)  # the views change, the phase does not
    assert [w.kind for w in cluster.writes][-1] == "InstanceType" and sink.events == []
    cluster.put(queue(A10G_TYPE, "Hold"))
    status.reconcile(A10G_TYPE)
    [(regarding, event_type, reason, action, note)] = sink.events
    assert (regarding.kind, regarding.name, event_type, action) == (
        kinds.INSTANCETYPE,
        A10G_TYPE,
        "Normal",
        "UpdatePhase",
    )
    assert reason != first and note.startswith(f"phase {first} -> {reason}: ")


def test_a_node_turned_on_or_off_for_pinned_workloads_is_an_event_and_a_count_that_stays_above_zero_is_not() -> None:
    sink = Recorded()
    cluster, controllers = cluster_with(events=sink)
    fit = controllers.get(FitLabelController)
    fit.reconcile("node-x")
    shared = naming.shared_fit_label(A10G)
    assert [(e[0].kind, e[0].name, e[2]) for e in sink.events] == [(kinds.NODE, "node-x", "NodePinned")]
    assert shared in sink.events[0][4]
    cluster.put(devices("node-x", cards=2, rows=[card_row(0, mode=1, allocated=M), card_row(1)]))
    fit.reconcile("node-x")  # 2 → 1 shareable card: still takes pinned Workloads
    assert len(sink.events) == 1
    full = [card_row(0, mode=1, allocated=M), card_row(1, mode=1, allocated=M)]
    cluster.put(devices("node-x", cards=2, rows=full))
    fit.reconcile("node-x")
    assert sink.reasons() == ["NodePinned", "NodeUnpinned"] and shared in sink.events[1][4]


def test_a_recorder_that_fails_never_fails_the_reconcile() -> None:
    cluster, controllers = cluster_with(pending("two", "node-x"), holder_on_x(), events=Broken())
    check = controllers.get(CheckController)
    check.process("team-a/two")
    assert cluster.get(kinds.WORKLOAD, "two", "team-a")["status"]["admissionChecks"][0]["state"] == "Retry"
    assert check.queue.failures("team-a/two") == 0  # a success: not requeued with backoff
