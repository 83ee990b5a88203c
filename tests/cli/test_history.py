"""``explain workload --history`` and ``diff`` on snapshots that carry Events (the ticket example): the story in
order with its summary, both Event APIs, the JSON for tickets; the Events recorded between two snapshots; the bound
on what is read."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from gpuctl.cli.main import app
from gpuctl.cluster.events import MAX_EVENT_TEXT, newest
from tests.history_snapshot import PATH, build, event, text

runner = CliRunner()
TICKET = str(PATH)


def test_the_ticket_example_is_what_its_generator_writes() -> None:
    assert PATH.read_text() == text(), "regenerate it: python -m tests.history_snapshot"


def test_the_story_in_order_with_kueues_the_checks_and_the_pods_events_and_the_time_in_each_state() -> None:
    result = runner.invoke(app, ["explain", "workload", "team-a/train", "--snapshot", TICKET, "--history"])
    assert result.exit_code == 0, result.stderr
    story = result.stdout[result.stdout.index("History (oldest first):") :]
    reasons = [line.split()[2] for line in story.splitlines()[2:] if line.startswith("  2026")]
    assert reasons == [
        "Created",
        "QuotaReserved=True",  # the condition's transition
        "QuotaReserved",  # Kueue's Event (core v1)
        "Retry",  # the check's (events.k8s.io), a series of 40
        "Ready",
        "Admitted=True",
        "Admitted",
        "PodScheduled=True",  # the Pod's condition
        "Scheduled",  # the scheduler's Event on the Pod
        "Ready=True",
    ]
    assert "(x40, last 2026-12-01T11:09:30.518302Z)" in story and "pod/train-0: bound to a10g-1" in story
    # 50 minutes for quota, 20 at the check, 1 placing; running since 11:11 when the dump was taken at 12:00.
    assert "Summary: waited 1h11m: 50m for quota, 20m at the check, 1m at the scheduler and device plugin" in story
    assert "Incomplete: the API server deletes Events after its --event-ttl" in story


def test_json_for_tickets() -> None:
    result = runner.invoke(
        app, ["explain", "workload", "train", "-n", "team-a", "--snapshot", TICKET, "--history", "-o", "json"]
    )
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["heldBy"] is None and data["incomplete"]
    assert data["states"] == [
        {"state": "quota", "seconds": 3000.0},
        {"state": "check", "seconds": 1200.0},
        {"state": "placing", "seconds": 60.0},
        {"state": "running", "seconds": 2940.0},
    ]
    retry = next(line for line in data["history"] if line["reason"] == "Retry")
    assert (retry["gate"], retry["count"], retry["source"]) == (3, 40, "event")
    assert next(line for line in data["history"] if line["reason"] == "Scheduled")["about"] == "pod/train-0"


def test_diff_lists_the_events_recorded_between_its_two_sides(tmp_path: Path) -> None:
    before, after = build(), build()
    items: list[dict[str, Any]] = before["items"]
    before["items"] = [o for o in items if o["kind"] != "Event" or o["metadata"]["name"] in ("train.1", "train.2")]
    retry = next(o for o in before["items"] if o["metadata"]["name"] == "train.2")
    retry["series"] = {"count": 38, "lastObservedTime": "2026-12-01T11:08:30Z"}
    after["items"].append(copy.deepcopy(event("other", "Retry", "not about train", "2026-12-01T11:30:00Z")))
    (tmp_path / "a.json").write_text(json.dumps(before))
    (tmp_path / "b.json").write_text(json.dumps(after))
    result = runner.invoke(app, ["diff", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "-o", "json"])
    assert result.exit_code == 0, result.stderr
    events = [c for c in json.loads(result.stdout)["items"] if c["kind"] == "Event"]
    assert [c["name"] for c in events] == [
        "team-a/train.2",
        "team-a/train.3",
        "team-a/train.4",
        "team-a/train.5",
        "team-a/other",
    ]
    assert events[0]["change"].endswith("(again, x2)") and (events[0]["before"], events[0]["after"]) == (38, 40)
    assert events[1]["change"] == (
        "Ready on workload team-a/train: gpustack-node-devices: the assigned flavor pool has enough free cards to place the request"
    )
    assert events[3]["change"].startswith("Scheduled on pod team-a/train-0: ")
    names = runner.invoke(app, ["diff", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "-o", "name"]).stdout
    assert "event.events.k8s.io/train.3" in names.splitlines()


def test_what_is_read_of_events_is_bounded() -> None:
    many = [
        event(f"e{i}", "Retry", "x" * 5000 if i == 7 else "n", f"2026-12-01T10:{i // 60:02d}:{i % 60:02d}Z")
        for i in range(300)
    ]
    kept, left_out = newest(reversed(many), limit=100)
    assert left_out == 200 and [e["metadata"]["name"] for e in kept] == [f"e{i}" for i in range(200, 300)]
    kept, _ = newest(many[:10], limit=100)
    assert len(kept[7]["note"]) == MAX_EVENT_TEXT and kept[7]["note"].endswith("…")
    assert newest([None, 3, "x"], limit=5) == ([], 0)  # not Events: skipped
