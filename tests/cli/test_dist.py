"""make dist: a krew archive whose plugin runs with nothing but python3, and a manifest that names it."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import yaml

from tests.cli.test_kubectl_style import SNAPSHOT, run

ROOT = Path(__file__).resolve().parents[2]


def test_the_krew_archive_is_self_contained_and_named_by_its_manifest(tmp_path: Path) -> None:
    out = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "hack.dist", "--out", str(out), "--release-url", "https://releases.invalid/v1"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=600,
    )
    [archive] = out.glob("gpuctl-v*.tar.gz")
    manifest = yaml.safe_load((out / "gpuctl.yaml").read_text())
    [platform] = manifest["spec"]["platforms"]
    assert platform["sha256"] == hashlib.sha256(archive.read_bytes()).hexdigest()
    assert platform["uri"] == f"https://releases.invalid/v1/{archive.name}"
    assert manifest["spec"]["version"].startswith("v") and "${" not in (out / "gpuctl.yaml").read_text()
    with tarfile.open(archive) as tar:
        assert sorted(tar.getnames()) == ["README.md", "kubectl-gpuctl", "kubectl_complete-gpuctl"]
        assert {m.name for m in tar.getmembers() if m.mode & 0o111} == {"kubectl-gpuctl", "kubectl_complete-gpuctl"}
        tar.extractall(tmp_path / "krew", filter="data")
    assert {f["from"] for f in platform["files"]} <= {"kubectl-gpuctl", "completions/kubectl_complete-gpuctl"} | set(
        os.listdir(tmp_path / "krew")
    )
    bin_dir = tmp_path / "krew"
    # As krew lays it out: the plugin and its shim on PATH, no gpuctl, no site-packages.
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path), "NO_COLOR": "1"}
    python = [sys.executable, "-I", "-S"]
    views = subprocess.run(
        [*python, str(bin_dir / "kubectl-gpuctl"), "views", "--snapshot", SNAPSHOT, "-o", "json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert views.returncode == 0, views.stderr
    assert json.loads(views.stdout) == json.loads(run("views", "--snapshot", SNAPSHOT, "-o", "json")[1])
    usage = subprocess.run(
        [*python, str(bin_dir / "kubectl-gpuctl"), "drain", "-h"], capture_output=True, text=True, env=env, timeout=120
    )
    assert "Usage: kubectl gpuctl drain" in usage.stdout, usage.stdout
    # The shim asks the plugin beside it; the plugin's shebang finds python3 on PATH (the base interpreter, not this
    # environment's).
    interpreter = tmp_path / "python"
    interpreter.mkdir()
    (interpreter / "python3").symlink_to(os.path.realpath(sys.executable))
    shim = subprocess.run(
        [
            str(bin_dir / "kubectl_complete-gpuctl"),
            "__complete",
            "explain",
            "workload",
            "--snapshot",
            SNAPSHOT,
            "team-a/",
        ],
        capture_output=True,
        text=True,
        env={**env, "PATH": f"{bin_dir}:{interpreter}:/usr/bin:/bin"},
        timeout=120,
    )
    assert shim.stdout.split() == ["team-a/batch", "team-a/chat", "team-a/embed", "team-a/train-big", ":4"], shim
