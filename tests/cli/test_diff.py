"""``gpuctl diff``: two snapshots of the example cluster half an hour apart."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import yaml
from typer.testing import CliRunner

from gpuctl.cli.main import app
from gpuctl.core.units import M

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "snapshot"
runner = CliRunner()


def later(tmp_path: Path) -> Path:
    """The example cluster later: train-big admitted, chat finished, a10g-2's free GPU-0003 now holds a half slice."""
    root = tmp_path / "later"
    shutil.copytree(EXAMPLE, root)
    docs = list(yaml.safe_load_all((root / "workloads.yaml").read_text()))
    for w in docs:
        if w["metadata"]["name"] == "chat":
            w["status"]["conditions"].append({"type": "Finished", "status": "True", "reason": "Succeeded"})
    (root / "workloads.yaml").write_text(yaml.safe_dump_all(docs))
    devices = json.loads((root / "devices.json").read_text())
    for d in devices["items"]:
        if d["metadata"]["name"] == "a10g-2":
            rows = d["status"]["groups"][0]["accelerators"]
            row = next(r for r in rows if r["id"] == "GPU-0003")
            row.update({"mode": 3, "allocated": M // 2, "remaining": M // 2, "allocatedSlices": 1})
    (root / "devices.json").write_text(json.dumps(devices))
    return root


def test_what_changed_between_two_snapshots(tmp_path: Path) -> None:
    result = runner.invoke(app, ["diff", str(EXAMPLE), str(later(tmp_path)), "-o", "json", "--exit-code"])
    assert result.exit_code == 3, result.stderr  # --exit-code: something changed
    data = json.loads(result.stdout)
    assert data["kind"] == "ChangeList"
    by_name = {(c["kind"], c["name"]): c for c in data["items"]}
    assert by_name[("Card", "a10g-2/GPU-0003")]["change"] == "none → sliced"
    assert by_name[("Workload", "team-a/chat")]["change"] == "finished"
    ex = by_name[("PoolView", "gpustack--nvidia-a10g-linux-amd64/accelerator")]
    assert ex["before"]["remaining"] - ex["after"]["remaining"] == 1  # one whole card fewer
    assert "remaining" in ex["change"]
    table = runner.invoke(app, ["diff", str(EXAMPLE), str(later(tmp_path / "t"))]).stdout
    assert table.splitlines()[0].split() == ["KIND", "NAME", "TIME", "CHANGE"]


def test_a_snapshot_against_itself_has_no_differences() -> None:
    result = runner.invoke(app, ["diff", str(EXAMPLE), str(EXAMPLE), "--exit-code"])
    assert result.exit_code == 0 and result.stdout == "" and "No differences." in result.stderr
