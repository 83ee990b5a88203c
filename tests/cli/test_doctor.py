"""``gpuctl doctor`` on the example snapshot (a hand-written one, with the gaps the operator would have filled)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from gpuctl.cli.main import app

ROOT = Path(__file__).resolve().parents[2]
SNAPSHOT = str(ROOT / "examples" / "snapshot")


def test_findings_as_a_list_and_exit_3_when_a_check_fails() -> None:
    result = CliRunner().invoke(app, ["doctor", "--snapshot", SNAPSHOT, "-o", "json"])
    assert result.exit_code == 3
    data = json.loads(result.stdout)
    assert data["kind"] == "DoctorFindingList"
    assert all(set(i) == {"check", "status", "saw", "why", "fix"} for i in data["items"])
    by_check = {(i["check"], i["status"]) for i in data["items"]}
    assert ("admissioncheck", "ok") in by_check
    # The example's CPU queue declares no resource groups and admits: the design says never leave one so.
    assert ("queue-resources", "fail") in by_check
    fails = [i for i in data["items"] if i["status"] == "fail"]
    assert all(i["fix"] and i["why"] for i in fails)


def test_the_table_has_one_line_per_finding() -> None:
    result = CliRunner().invoke(app, ["doctor", "--snapshot", SNAPSHOT])
    assert result.exit_code == 3
    lines = result.stdout.splitlines()
    assert lines[0].split()[:4] == ["STATUS", "CHECK", "SAW", "FIX"]
    assert len(lines) - 1 == len(
        json.loads(CliRunner().invoke(app, ["doctor", "--snapshot", SNAPSHOT, "-o", "json"]).stdout)["items"]
    )
