"""make dist: a reproducible krew archive whose plugin runs with nothing but python3, and a manifest that moves exactly
what the archive holds. (krew itself installs it in tests/integration/test_krew.py.)"""

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


def _dist(out: Path) -> Path:
    subprocess.run(
        [sys.executable, "-m", "hack.dist", "--out", str(out), "--release-url", "https://releases.invalid/v1"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=900,
    )
    [archive] = out.glob("gpuctl-v*.tar.gz")
    return archive


def test_the_krew_archive_is_self_contained_reproducible_and_named_by_its_manifest(tmp_path: Path) -> None:
    archive = _dist(tmp_path / "dist")
    manifest = yaml.safe_load((tmp_path / "dist" / "gpuctl.yaml").read_text())
    [platform] = manifest["spec"]["platforms"]
    assert platform["sha256"] == hashlib.sha256(archive.read_bytes()).hexdigest()
    assert platform["uri"] == f"https://releases.invalid/v1/{archive.name}"
    assert manifest["spec"]["version"].startswith("v") and "${" not in (tmp_path / "dist" / "gpuctl.yaml").read_text()
    with tarfile.open(archive) as tar:
        names = tar.getnames()
        top = {n.split("/")[0] for n in names}
        assert top == {"README.md", "kubectl-gpuctl", "kubectl_complete-gpuctl", "lib"}
        # krew moves each `from` of the manifest and refuses one that matches nothing; every entry is moved.
        assert {f["from"] for f in platform["files"]} == top and platform["bin"] == "kubectl-gpuctl"
        assert {m.name for m in tar.getmembers() if m.mode & 0o111} == {"kubectl-gpuctl", "kubectl_complete-gpuctl"}
        assert all(m.isfile() and m.uid == 0 and m.mtime == 315532800 for m in tar.getmembers())
        # Sources, and the building Python's bytecode beside them (no other version's, no compiled extension).
        tag = sys.implementation.cache_tag
        assert not [n for n in names if n.endswith((".so", ".pyd")) or ".." in n]
        assert {n.rsplit(".", 2)[-2] for n in names if n.endswith(".pyc")} == {tag}
        assert f"lib/gpuctl/cli/__pycache__/startup.{tag}.pyc" in names
        assert "lib/gpuctl/cli/startup.py" in names and "lib/typer/__init__.py" in names
        tar.extractall(tmp_path / "krew", filter="data")
    # Built again: the same bytes.
    assert hashlib.sha256(_dist(tmp_path / "again").read_bytes()).hexdigest() == platform["sha256"]
    bin_dir = tmp_path / "krew"
    # As krew lays it out: the plugin beside its lib/, no gpuctl installed, no site-packages.
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
    # Where no bytecode may be written (PYTHONDONTWRITEBYTECODE, as many images set it), the building Python compiles
    # none of the plugin's modules: it reads the shipped bytecode. Every compilation from source is counted.
    counting = (
        "import importlib.machinery as m, sys, runpy\n"
        "compiled = []\n"
        "real = m.SourceFileLoader.source_to_code\n"
        "def count(self, data, path, *a, **k):\n"
        "    compiled.append(str(path))\n"
        "    return real(self, data, path, *a, **k)\n"
        "m.SourceFileLoader.source_to_code = count\n"
        f"sys.argv = [{str(bin_dir / 'kubectl-gpuctl')!r}, 'views', '--snapshot', {SNAPSHOT!r}]\n"
        "try:\n"
        f"    runpy.run_path({str(bin_dir / 'kubectl-gpuctl')!r}, run_name='__main__')\n"
        "except SystemExit:\n"
        "    pass\n"
        f"sys.stderr.write('COMPILED ' + repr([p for p in compiled if p.startswith({str(bin_dir / 'lib')!r})]))\n"
    )
    frozen = subprocess.run(
        [*python, "-c", counting],
        capture_output=True,
        text=True,
        env={**env, "PYTHONDONTWRITEBYTECODE": "1"},
        timeout=120,
    )
    assert "gpustack--nvidia-a10g-linux-amd64" in frozen.stdout, frozen.stderr
    assert frozen.stderr.strip().endswith("COMPILED []"), frozen.stderr[-2000:]
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
