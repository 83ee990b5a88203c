"""``explain workload --history`` and ``diff`` on snapshots that carry Events: the story in order with its summary,
both Event APIs, the JSON for tickets; the Events recorded between two snapshots; the bound on what is read."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import yaml
from typer.testing import CliRunner

from gpuctl.cli.main import app
from gpuctl.cluster.events import MAX_EVENT_TEXT, newest

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


def event(
    name: str, reason: str, note: str, at: str, *, kind: str = "Workload", about: str = "batch", **more: Any
) -> dict[str, Any]:
    return {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": "team-a", "creationTimestamp": at},
        "eventTime": at,
        "reportingController": more.pop("controller", "gpuctl.gpustack.ai/operator"),
        "reportingInstance": "replica-0",
        "action": "AdmissionCheck",
        "reason": reason,
        "regarding": {"apiVersion": "v1", "kind": kind, "name": about, "namespace": "team-a"},
        "note": note,
        "type": "Warning" if reason == "Retry" else "Normal",
        **more,
    }


def kueue_event(name: str, reason: str, message: str, at: str) -> dict[str, Any]:
    """As Kueue records them: core v1 Events."""
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": "team-a"},
        "involvedObject": {"kind": "Workload", "name": "batch", "namespace": "team-a"},
        "reason": reason,
        "message": message,
        "type": "Normal",
        "source": {"component": "kueue-admission"},
        "firstTimestamp": at,
        "lastTimestamp": at,
        "count": 1,
    }


def snapshot(tmp: Path, events: list[dict[str, Any]], taken: str = "2026-12-01T12:00:00Z") -> Path:
    """The example snapshot, with team-a/batch's times filled in, its Events, and when it was taken."""
    out = tmp / "snap"
    shutil.copytree(ROOT / "examples" / "snapshot", out)
    docs = list(yaml.safe_load_all((out / "workloads.yaml").read_text()))
    for doc in docs:
        for w in doc.get("items", [doc]) if isinstance(doc, dict) else []:
            if w["metadata"]["name"] == "batch":
                w["metadata"]["creationTimestamp"] = "2026-12-01T10:00:00Z"
                for c in w["status"]["conditions"]:
                    c["lastTransitionTime"] = {
                        "QuotaReserved": "2026-12-01T10:50:00Z",
                        "Admitted": "2026-12-01T11:10:00Z",
                    }[c["type"]]
    (out / "workloads.yaml").write_text(yaml.safe_dump_all(docs))
    (out / "events.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": events}))
    (out / "dump.json").write_text(
        json.dumps(
            {
                "apiVersion": "gpuctl.gpustack.ai/v1",
                "kind": "Dump",
                "metadata": {"name": "dump", "creationTimestamp": taken},
            }
        )
    )
    return out


STORY = [
    kueue_event(
        "batch.1",
        "QuotaReserved",
        "Quota reserved in ClusterQueue gpustack--nvidia-a10g-linux-amd64",
        "2026-12-01T10:50:00Z",
    ),
    event(
        "batch.2",
        "Retry",
        "gpustack-node-devices: a10g-2 has 0 free of 1 whole card(s)",
        "2026-12-01T10:50:01Z",
        series={"count": 40, "lastObservedTime": "2026-12-01T11:09:30Z"},
    ),
    event(
        "batch.3",
        "Ready",
        "gpustack-node-devices: the assigned flavor pool has enough free cards",
        "2026-12-01T11:10:00Z",
    ),
    kueue_event(
        "batch.4", "Admitted", "Admitted by ClusterQueue gpustack--nvidia-a10g-linux-amd64", "2026-12-01T11:10:00Z"
    ),
    event("other", "Retry", "not about batch", "2026-12-01T10:55:00Z", about="chat"),
]


def test_the_story_in_order_with_kueues_and_the_checks_events_and_the_time_in_each_state(tmp_path: Path) -> None:
    snap = snapshot(tmp_path, STORY)
    result = runner.invoke(app, ["explain", "workload", "team-a/batch", "--snapshot", str(snap), "--history"])
    assert result.exit_code == 0, result.stderr
    text = result.stdout
    story = text[text.index("History (oldest first):") :]
    reasons = [line.split()[2] for line in story.splitlines()[2:] if line.startswith("  2026")]
    assert reasons == [
        "Created",
        "QuotaReserved=True",  # the condition's transition
        "QuotaReserved",  # Kueue's Event
        "Retry",  # the check's, a series of 40
        "Admitted=True",
        "Ready",
        "Admitted",
    ]
    assert "(x40, last 2026-12-01T11:09:30Z)" in story and "not about batch" not in story
    # 50 minutes for quota, 20 at the check, then placing until the snapshot was taken.
    assert "Summary: waiting 2h: 50m for quota, 20m at the check, 50m at the scheduler and device plugin" in story
    assert "Incomplete: the API server deletes Events after its --event-ttl" in story


def test_json_for_tickets(tmp_path: Path) -> None:
    snap = snapshot(tmp_path, STORY)
    result = runner.invoke(
        app, ["explain", "workload", "batch", "-n", "team-a", "--snapshot", str(snap), "--history", "-o", "json"]
    )
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["heldBy"] == 4 and data["incomplete"]
    assert [s["state"] for s in data["states"]] == ["quota", "check", "placing"]
    assert [s["seconds"] for s in data["states"]] == [3000.0, 1200.0, 3000.0]
    retry = next(line for line in data["history"] if line["reason"] == "Retry")
    assert retry["gate"] == 3 and retry["count"] == 40 and retry["source"] == "event"


def test_diff_lists_the_events_recorded_between_its_two_sides(tmp_path: Path) -> None:
    first = snapshot(tmp_path / "a", STORY[:2])
    grown = dict(STORY[1], series={"count": 42, "lastObservedTime": "2026-12-01T11:09:59Z"})
    second = snapshot(tmp_path / "b", [STORY[0], grown, *STORY[2:]])
    result = runner.invoke(app, ["diff", str(first), str(second), "-o", "json"])
    assert result.exit_code == 0, result.stderr
    events = [c for c in json.loads(result.stdout)["items"] if c["kind"] == "Event"]
    assert [c["name"] for c in events] == ["team-a/other", "team-a/batch.2", "team-a/batch.3", "team-a/batch.4"]
    assert events[1]["change"].endswith("(again, x2)") and (events[1]["before"], events[1]["after"]) == (40, 42)
    assert events[2]["change"].startswith("Ready on workload team-a/batch: gpustack-node-devices:")
    names = runner.invoke(app, ["diff", str(first), str(second), "-o", "name"]).stdout.splitlines()
    assert "event.events.k8s.io/batch.3" in names


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
