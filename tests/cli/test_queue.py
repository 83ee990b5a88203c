"""``gpuctl queue`` and explain's place in line, on the example snapshot with more Workloads waiting."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuctl.cli.main import app
from gpuctl.core import naming
from testbed.factories import workload

ROOT = Path(__file__).resolve().parents[2]
CQ = "gpustack--nvidia-a10g-linux-amd64"
runner = CliRunner()


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The example snapshot plus three Workloads waiting in the A10G queue: priorities 5, 0 and 0."""
    root = tmp_path_factory.mktemp("queue") / "snapshot"
    shutil.copytree(ROOT / "examples" / "snapshot", root)
    extra = []
    for name, priority, created, limits in (
        ("urgent", 5, "2026-12-01T03:00:00Z", {"nvidia.com/gpu": "1"}),
        ("early", 0, "2026-12-01T01:00:00Z", {"nvidia.com/gpu.shared": "2"}),
        ("late", 0, "2026-12-01T04:00:00Z", {"nvidia.com/gpu": "2"}),
    ):
        w = workload(name, [("main", 1, limits)], reserved=False, queue=naming.queue_entrance(CQ))
        w["metadata"]["creationTimestamp"] = created
        w["spec"]["priority"] = priority
        extra.append(w)
    (root / "waiting.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": extra}))
    return str(root)


def run(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_the_queue_in_kueues_order_with_what_each_asks(snapshot: str) -> None:
    code, out, _ = run("queue", CQ, "--snapshot", snapshot, "-o", "json")
    assert code == 0
    items = json.loads(out)["items"]
    # Priority first; then the time each joined (train-big, the example's, on the day before).
    assert [(i["name"], i["position"], i["total"]) for i in items] == [
        ("urgent", 1, 4),
        ("train-big", 2, 4),
        ("early", 3, 4),
        ("late", 4, 4),
    ]
    by_name = {i["name"]: i for i in items}
    assert by_name["early"]["asks"] == "1 x shares on 2 cards"
    assert by_name["urgent"]["fitsNow"] is True  # one whole card is free on a10g-2
    assert by_name["train-big"]["fitsNow"] is False and by_name["train-big"]["simulatedHeldBy"] == 2
    assert all(i["waitBoundSeconds"] is None and i["orderFrom"] == "computed" for i in items)


def test_explain_says_where_a_pending_workload_stands(snapshot: str) -> None:
    code, out, _ = run("explain", "workload", "team-a/early", "--snapshot", snapshot, "-o", "json")
    assert code == 0
    data = json.loads(out)
    assert data["queue"]["position"] == 3 and data["queue"]["total"] == 4
    assert [a["name"] for a in data["queue"]["ahead"]] == ["urgent", "train-big"]
    line = data["gates"][1]["evidence"][-1]
    assert line.startswith(f"position 3 of 4 in ClusterQueue {CQ}; ahead: team-a/urgent needing 1 x 1 whole card")


def test_the_table_and_an_unknown_queue(snapshot: str) -> None:
    code, out, _ = run("queue", "--snapshot", snapshot)
    assert code == 0
    assert out.splitlines()[0].split() == [
        "CLUSTERQUEUE",
        "POS",
        "NAMESPACE",
        "NAME",
        "PRIORITY",
        "ASKS",
        "FITS-NOW",
        "HELD-BY",
        "WAITED",
        "WAIT-BOUND",
    ]
    assert "unknown" in out
    code, _, err = run("queue", "nope", "--snapshot", snapshot)
    assert code == 1 and 'clusterqueue "nope" not found' in err


def test_each_waits_since_it_joined_the_queue(snapshot: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """At 05:00 on 12-01: urgent joined at 03:00 (120m), early at 01:00 (4h), late at 04:00 (60m); train-big since
    Kueue set QuotaReserved=False at 09:12:01 the day before (19h47m59s: 19h)."""
    from gpuctl.cli import clock
    from gpuctl.core.queueing import epoch_seconds

    monkeypatch.setattr(clock, "now", lambda: epoch_seconds("2026-12-01T05:00:00Z"))
    code, out, _ = run("queue", CQ, "--snapshot", snapshot)
    assert code == 0
    rows = [re.split(r"\s{2,}", line.strip()) for line in out.splitlines()]
    waited = {r[3]: r[rows[0].index("WAITED")] for r in rows[1:]}
    assert waited == {"urgent": "120m", "early": "4h", "late": "60m", "train-big": "19h"}
    _, body, _ = run("queue", CQ, "--snapshot", snapshot, "-o", "json")
    by_name = {i["name"]: i for i in json.loads(body)["items"]}
    assert by_name["train-big"]["waitingSince"] == "2026-11-30T09:12:01Z"
    assert by_name["train-big"]["waitedSeconds"] == 19 * 3600 + 47 * 60 + 59
