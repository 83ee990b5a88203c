"""`make demo` on a fresh clone: a virtual environment with gpuctl and its runtime dependencies alone (no test or lint
tool), and then the views table of the example snapshot — and nothing else on either stream (no build warning, no
command echoed)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.cli.test_kubectl_style import SNAPSHOT, run

ROOT = Path(__file__).resolve().parents[2]


def test_make_demo_on_a_fresh_clone_prints_the_views_table_alone(tmp_path: Path) -> None:
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True, timeout=120)
    # As a user at a shell runs it: not inside this environment, nor inside another make (`make test`).
    ours = ("VIRTUAL_ENV", "PYTHON", "PIP_REQUIRE", "MAKEFLAGS", "MAKELEVEL", "MFLAGS", "MAKEOVERRIDES")
    env = {k: v for k, v in os.environ.items() if not k.startswith(ours)}
    demo = subprocess.run(
        ["make", "demo", f"PYTHON={sys.executable}"], cwd=clone, capture_output=True, text=True, env=env, timeout=1200
    )
    assert demo.returncode == 0, demo.stderr
    assert demo.stderr == ""
    assert demo.stdout == run("views", "--snapshot", SNAPSHOT)[1]
    venv = clone / ".venv-demo"
    installed = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "list", "--format=freeze"],
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout.lower()
    assert "gpuctl==" in installed and "typer==" in installed and "kubernetes==" in installed
    for tool in ("pytest", "ruff", "mypy", "hypothesis"):
        assert f"{tool}==" not in installed, tool
    # `man gpuctl` finds its pages once the environment's bin is on PATH (man derives its path from PATH).
    pages = venv / "share" / "man" / "man1"
    assert (pages / "gpuctl.1").is_file() and (pages / "gpuctl-views.1").is_file()
    if shutil.which("man"):
        found = subprocess.run(
            ["man", "-w", "gpuctl-views"],
            capture_output=True,
            text=True,
            env={"PATH": f"{venv / 'bin'}:/usr/bin:/bin"},
            timeout=60,
        )
        assert found.stdout.strip() == str(pages / "gpuctl-views.1"), found.stderr
