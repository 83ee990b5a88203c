"""The differences between two reads: views, Workload states and gates, card modes."""

from __future__ import annotations

from gpuctl.core.diff import WorkloadState, card_changes, view_changes, workload_changes


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
