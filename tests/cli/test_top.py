"""``gpuctl top`` on a snapshot (or piped): one frame of pools, queues and held Workloads, in 80 columns."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from gpuctl.cli.main import app
from gpuctl.cli.top import View, frame, read_once
from gpuctl.cluster.snapshot import SnapshotSource

ROOT = Path(__file__).resolve().parents[2]
SNAPSHOT = ROOT / "examples" / "snapshot"


def test_one_frame_shows_the_pools_queues_and_held_workloads_in_80_columns() -> None:
    result = CliRunner().invoke(app, ["top", "--snapshot", str(SNAPSHOT)], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines)
    text = result.stdout
    assert "Pools (remaining/capacity)" in text and "Queues" in text and "Held workloads" in text
    assert "4/8" in text and "48/80" in text and "520/800" in text  # the A10G pool's EX, SH and SL
    for held in ("team-a/batch", "team-a/embed", "team-a/train-big"):
        assert held in text


def test_the_selection_and_sort_keys_change_the_frame() -> None:
    from rich.console import Console

    records = read_once(SnapshotSource(SNAPSHOT))
    view = View(sort=1, selected=1)
    console = Console(width=80, record=True, color_system=None)
    console.print(frame(records, view, 0.0))
    text = console.export_text()
    assert "sort: free cards (s)" in text
    held = [line for line in text.splitlines() if "team-a/" in line and line.lstrip().startswith((">", "team"))]
    assert any(line.lstrip().startswith("> ") and "team-a/embed" in line for line in held)  # the second row
    assert view.held_keys == ["team-a/batch", "team-a/embed", "team-a/train-big"]


def test_named_pools_only() -> None:
    result = CliRunner().invoke(
        app, ["top", "gpustack--nvidia-h100-80gb-hbm3-linux-amd64", "--snapshot", str(SNAPSHOT)], env={"COLUMNS": "200"}
    )
    assert result.exit_code == 0, result.stderr
    assert "h100" in result.stdout and "a10g" not in result.stdout
