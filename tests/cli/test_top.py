"""``gpuctl top`` on a snapshot (or piped): one frame of pools, queues and held Workloads, in 80 columns."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from gpuctl.cli.commands.top import View, frame, read_once
from gpuctl.cli.main import app
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


def test_pool_names_drop_the_prefix_every_row_shares_and_fold_at_dashes() -> None:
    from gpuctl.cli.commands.top import fold, shared_prefix

    assert shared_prefix(["gpustack--nvidia-a10g-linux-amd64", "gpustack--generic-linux-amd64"]) == "gpustack--"
    assert shared_prefix(["gpustack--nvidia-a10g-linux-amd64"]) == ""  # one name keeps its whole self
    assert shared_prefix(["pool-a", "pool-a-big"]) == "pool-"  # up to a dash, never inside a word
    assert fold("nvidia-h100-80gb-hbm3-linux-amd64", 12) == "nvidia-h100-\n80gb-hbm3-\nlinux-amd64"
    assert fold("abcdefghij-k", 4) == "abcd\nefgh\nij-k"  # a part wider than the column is cut where it must be
    for width in (60, 45):
        result = CliRunner().invoke(app, ["top", "--snapshot", str(SNAPSHOT)], env={"COLUMNS": str(width)})
        assert result.exit_code == 0, result.stderr
        text = result.stdout
        assert all(len(line) <= width for line in text.splitlines()), text
        assert "names without gpustack--" in " ".join(text.split()) and "gpustack--nvidia" not in text
        lines = text.split("Queues")[0].splitlines()
        header = next(i for i, line in enumerate(lines) if line.startswith("POOL "))
        pool_lines = [line.split()[0] for line in lines[header + 1 :] if line.strip()]
        name_parts = [p for p in pool_lines if p[0] not in "█░-" and "/" not in p]
        assert "".join(name_parts) == "nvidia-a10g-linux-amd64nvidia-h100-80gb-hbm3-linux-amd64", name_parts
        assert all(p.endswith("-") or p == "amd64" for p in name_parts), name_parts
        for numbers in ("4/8", "48/80", "520/800", "48/56"):  # never split, whatever the width
            assert numbers in text.split()


def test_no_color_means_no_escape_codes_at_a_terminal() -> None:
    from tests.cli.test_kubectl_style import on_terminal

    styled = on_terminal(["top", "--once", "--snapshot", str(SNAPSHOT)], 120, raw=True)
    assert "\x1b[" in styled  # the status line is dim at a terminal
    plain = on_terminal(["top", "--once", "--snapshot", str(SNAPSHOT)], 120, raw=True, env={"NO_COLOR": "1"})
    assert "\x1b[" not in plain and "nvidia-a10g-linux-amd64" in plain


def test_top_holds_the_workloads_that_workloads_held_lists(tmp_path: Path) -> None:
    """One count of held Workloads: besides the example's three, a deactivated one, one Kueue is evicting (its quota
    still reserved), one admitted whose Pods are not created yet, and one whose template breaks a request rule."""
    import json
    import shutil

    from gpuctl.core import naming
    from testbed.factories import workload

    root = tmp_path / "snapshot"
    shutil.copytree(SNAPSHOT, root)
    queue = naming.queue_entrance("gpustack--nvidia-a10g-linux-amd64")
    one = [("main", 1, {"nvidia.com/gpu": "1"})]
    off = workload("off", one, reserved=False, queue=queue)
    off["spec"]["active"] = False
    leaving = workload("leaving", one, queue=queue, admitted=True, check_state="Ready")
    leaving["status"]["conditions"].append({"type": "Evicted", "status": "True", "reason": "Preempted"})
    no_pods = workload("no-pods", one, queue=queue, admitted=True, check_state="Ready")
    broken = workload("broken", [("main", 1, {"nvidia.com/gpu": "1", "nvidia.com/gpu.shared": "1"})], queue=queue)
    items = [off, leaving, no_pods, broken]
    (root / "more.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    listed = CliRunner().invoke(app, ["workloads", "-A", "--held", "--snapshot", str(root), "-o", "name"])
    assert listed.exit_code == 0, listed.stderr
    held = sorted(f"team-a/{n.rsplit('/', 1)[1]}" for n in listed.stdout.split())
    assert held == sorted(f"team-a/{n}" for n in ("batch", "embed", "train-big", "off", "leaving", "no-pods", "broken"))
    view = View()
    frame(read_once(SnapshotSource(root)), view, 0.0)
    assert view.held_keys == held
