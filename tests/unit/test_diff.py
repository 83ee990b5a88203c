"""The differences between two reads: views, Workload states and gates, card modes, disagreements."""

from __future__ import annotations

from gpuctl.core.diff import WorkloadState, card_changes, disagreement_changes, view_changes, workload_changes
from gpuctl.core.shadow import Disagreement, Kind


def test_views_that_moved_appeared_or_went() -> None:
    before = {"a": {"accelerator": {"onceMaxRequest": 2, "remaining": 5, "capacity": 8}}, "gone": {}}
    after = {"a": {"accelerator": {"onceMaxRequest": 1, "remaining": 3, "capacity": 8}}, "new": {}}
    changes = {c.name: c.change for c in view_changes(before, after)}
    assert changes == {"a/accelerator": "onceMaxRequest 2→1, remaining 5→3", "gone": "removed", "new": "added"}


def test_workloads_admitted_evicted_newly_held_released() -> None:
    before = {
        "ns/a": WorkloadState("reserved", 3),
        "ns/b": WorkloadState("admitted", None),
        "ns/c": WorkloadState("pending", 2),
        "ns/d": WorkloadState("admitted", 4),
        "ns/e": WorkloadState("pending", 2),
    }
    after = {
        "ns/a": WorkloadState("admitted", None),
        "ns/b": WorkloadState("evicted", 2),
        "ns/c": WorkloadState("reserved", 3),
        "ns/d": WorkloadState("admitted", None),
        "ns/f": WorkloadState("pending", 2),
    }
    got = {c.name: c.change for c in workload_changes(before, after)}
    assert got == {
        "ns/a": "admitted",
        "ns/b": "evicted, held at gate 2",
        "ns/c": "newly held at gate 3 (was gate 2)",
        "ns/d": "released from gate 4",
        "ns/e": "gone",
        "ns/f": "created, held at gate 2",
    }


def test_cards_whose_mode_changed() -> None:
    got = card_changes({("n", "c0"): "none", ("n", "c1"): "sliced"}, {("n", "c0"): "exclusive", ("n", "c1"): "sliced"})
    assert [(c.name, c.change) for c in got] == [("n/c0", "none → exclusive")]


def test_events_come_oldest_first_as_instants_with_their_time() -> None:
    """A core v1 Event last seen at 10:00:05 (whole seconds) and an events.k8s.io one at 10:00:05.5 (microseconds):
    as text the second sorts first ('.' before 'Z'); as instants it is the later one."""
    from gpuctl.core.diff import event_changes
    from gpuctl.core.history import parse_event

    core = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "p.FailedScheduling", "namespace": "team-a"},
        "involvedObject": {"kind": "Pod", "name": "p", "namespace": "team-a"},
        "reason": "FailedScheduling",
        "message": "0/3 nodes are available",
        "firstTimestamp": "2026-11-30T10:00:00Z",
        "lastTimestamp": "2026-11-30T10:00:05Z",
        "count": 1,
    }
    new = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": "w.Retry", "namespace": "team-a"},
        "eventTime": "2026-11-30T10:00:05.500000Z",
        "regarding": {"kind": "Workload", "name": "w", "namespace": "team-a"},
        "reason": "Retry",
        "note": "card fragmentation",
    }
    after = {(e.namespace, e.name): e for e in map(parse_event, (new, core))}
    changes = event_changes({}, after)
    assert [c.name for c in changes] == ["team-a/p.FailedScheduling", "team-a/w.Retry"]
    assert [c.time for c in changes] == ["2026-11-30T10:00:05Z", "2026-11-30T10:00:05Z"]
    assert changes[1].to_dict()["time"] == "2026-11-30T10:00:05Z"


def _d(field: str, published: str, computed: str, name: str = "pool") -> Disagreement:
    return Disagreement(Kind.VIEW, "InstanceType", name, "", field, published, computed, "from 2 ledgers")


def test_disagreements_appeared_changed_resolved_and_unchanged_left_out() -> None:
    before = [_d("accelerator.remaining", "3", "2"), _d("cpu.remaining", "8", "6"), _d("x.remaining", "1", "0", "b")]
    after = [
        _d("accelerator.remaining", "3", "2"),
        _d("cpu.remaining", "8", "7"),
        _d("acceleratorShared.capacity", "4", "3"),
    ]
    changes = {(c.name, c.change.split(":")[0]): c for c in disagreement_changes(before, after)}
    assert set(changes) == {
        ("InstanceType/pool", "cpu.remaining"),
        ("InstanceType/pool", "acceleratorShared.capacity"),
        ("InstanceType/b", "x.remaining"),
    }
    moved = changes[("InstanceType/pool", "cpu.remaining")]
    assert moved.change == "cpu.remaining: published 8 → 8, gpuctl computes 6 → 7 (from 2 ledgers)"
    assert (moved.before["computed"], moved.after["computed"]) == ("6", "7")
    new = changes[("InstanceType/pool", "acceleratorShared.capacity")]
    assert new.before is None and "appeared: published 4, gpuctl computes 3" in new.change
    gone = changes[("InstanceType/b", "x.remaining")]
    assert gone.after is None and gone.change == "x.remaining: resolved (was published 1, gpuctl computes 0)"
    assert disagreement_changes(after, after) == []
