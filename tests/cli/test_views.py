"""``gpuctl views`` on the bundled example snapshot: every output format, golden tables, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gpuctl.cli.main import app

ROOT = Path(__file__).resolve().parents[2]
SNAPSHOT = str(ROOT / "examples" / "snapshot")
GOLDEN = Path(__file__).parent / "golden"
runner = CliRunner()


def run(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize(("output", "golden"), [("table", "views.txt"), ("wide", "views-wide.txt")])
def test_table_matches_golden(output: str, golden: str) -> None:
    code, out, _ = run("views", "--snapshot", SNAPSHOT, "-o", output)
    assert code == 0
    assert out == (GOLDEN / golden).read_text()


def test_json_contract() -> None:
    code, out, _ = run("views", "--snapshot", SNAPSHOT, "-o", "json")
    assert code == 0
    items = {it["name"]: it for it in json.loads(out)["items"]}
    a10g = items["gpustack--nvidia-a10g-linux-amd64"]
    assert set(a10g) == {
        "metadata",
        "name",
        "entrance",
        "phase",
        "accelerator",
        "acceleratorShared",
        "acceleratorSliced",
        "acceleratorPartitioned",
        "cpu",
    }
    assert a10g["metadata"]["name"] == a10g["name"] and "namespace" not in a10g["metadata"]
    assert a10g["metadata"]["labels"]["schedule.gpustack.ai/queue-entrance"] == a10g["entrance"]
    assert a10g["accelerator"] == {"onceMaxRequest": 3, "remaining": 4, "capacity": 8}
    assert a10g["acceleratorShared"] == {"onceMaxRequest": 3, "remaining": 48, "capacity": 80}
    assert a10g["acceleratorSliced"] == {"onceMaxRequest": 100, "remaining": 520, "capacity": 800}
    h100 = items["gpustack--nvidia-h100-80gb-hbm3-linux-amd64"]["acceleratorPartitioned"]
    assert (h100["onceMaxRequest"], h100["remaining"], h100["capacity"]) == (1, 48, 56)
    assert {p["name"]: p["count"] for p in h100["remainingProfiles"]}["4g.40gb"] == 6
    assert h100["allocatedProfiles"] == [{"name": "1g.10gb", "count": 1}, {"name": "3g.40gb", "count": 2}]
    assert items["gpustack--generic-linux-amd64"]["cpu"] == {"onceMaxRequest": 192, "remaining": 330, "capacity": 336}


def test_yaml_equals_json() -> None:
    _, as_json, _ = run("views", "--snapshot", SNAPSHOT, "-o", "json")
    _, as_yaml, _ = run("views", "--snapshot", SNAPSHOT, "-o", "yaml")
    assert yaml.safe_load(as_yaml) == json.loads(as_json)


def test_names_and_no_headers() -> None:
    _, out, _ = run("views", "gpustack--nvidia-a10g-linux-amd64", "--snapshot", SNAPSHOT, "-o", "name")
    assert out == "instancetype.worker.gpustack.ai/gpustack--nvidia-a10g-linux-amd64\n"
    _, out, _ = run("views", "gpustack--nvidia-a10g-linux-amd64", "--snapshot", SNAPSHOT, "--no-headers")
    assert out.startswith("gpustack--nvidia-a10g-linux-amd64 ") and "NAME" not in out


def test_snapshot_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUCTL_SNAPSHOT", SNAPSHOT)
    code, out, _ = run("views", "-o", "name")
    assert code == 0 and len(out.splitlines()) == 3


def test_unknown_instancetype_suggests_close_names() -> None:
    code, out, err = run("views", "gpustack--nvidia-a10-linux-amd64", "--snapshot", SNAPSHOT)
    assert code == 1 and out == ""
    assert err == (
        'error: instancetype "gpustack--nvidia-a10-linux-amd64" not found in snapshot '
        f"{SNAPSHOT}; did you mean gpustack--nvidia-a10g-linux-amd64?\n"
    )


def test_malformed_snapshot_names_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: v1\nkind: List\nitems:\n  - {a: [1, 2}\n")
    code, _, err = run("views", "--snapshot", str(tmp_path))
    assert code == 1
    assert err.startswith(f"error: {bad}:4: not valid YAML") and err.count("\n") == 1
    broken = tmp_path / "bad.yaml"
    broken.write_text('{"kind": "List", "items": [}')
    broken.rename(tmp_path / "bad.json")
    code, _, err = run("views", "--snapshot", str(tmp_path / "bad.json"))
    assert code == 1 and err.startswith(f"error: {tmp_path / 'bad.json'}:1: not valid JSON")


def test_missing_snapshot_and_no_source() -> None:
    code, _, err = run("views", "--snapshot", "/nonexistent/snap")
    assert code == 1 and err == "error: snapshot /nonexistent/snap: no such file or directory\n"
    code, _, err = run("views", "--kubeconfig", "/nonexistent/kubeconfig")
    assert code == 1 and err == (
        "error: kubeconfig /nonexistent/kubeconfig: no such file; pass --kubeconfig with a readable file\n"
    )


def test_malformed_devices_names_the_field(tmp_path: Path) -> None:
    data = json.loads((ROOT / "examples/snapshot/devices.json").read_text())
    data["items"][0]["status"]["groups"][0]["accelerators"][1]["allocated"] = "lots"
    (tmp_path / "devices.json").write_text(json.dumps(data))
    (tmp_path / "types.yaml").write_text((ROOT / "examples/snapshot/instancetypes.yaml").read_text())
    code, _, err = run("views", "--snapshot", str(tmp_path))
    assert code == 1
    assert "Devices a10g-1: spec.groups[0].accelerators[1] (ledger).allocated: expected an integer, got 'lots'" in err


def test_version() -> None:
    code, out, _ = run("--version")
    assert code == 0 and out.startswith("gpuctl ")
