"""The kubectl plugin as krew installs it: ``make dist``'s archive and manifest, installed by krew itself (built from its
Go module into the test cache, as the control plane is) into a temporary KREW_ROOT, then run through kubectl's own
plugin lookup on every Python 3 this machine has that gpuctl supports; an older one is refused in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpuctl.cli.main import app
from testbed import controlplane as cpmod
from testbed.pythons import OLDER, available, interpreter

ROOT = Path(__file__).resolve().parents[2]
SNAPSHOT = str(ROOT / "examples" / "snapshot")


def _ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def krew_dir() -> Path:
    """Where build.sh puts kubectl-krew; built when missing (a failure to build fails the test; without go the test
    is skipped, except under CI=true, where that fails it too)."""
    directory = Path(
        subprocess.run(
            [str(cpmod.BUILD_SH), "--print-dir", "krew"], capture_output=True, text=True, check=True, timeout=30
        ).stdout.strip()
    )
    if (directory / "kubectl-krew").exists():
        return directory
    if not cpmod.go_available():
        if _ci():
            pytest.fail("kubectl-krew is not built and 'go' is not found (CI=true)", pytrace=False)
        pytest.skip("krew: 'go' not found and kubectl-krew not built (run hack/cluster/build.sh krew)")
    built = subprocess.run([str(cpmod.BUILD_SH), "krew"], capture_output=True, text=True, timeout=1800)
    if built.returncode != 0:
        pytest.fail(f"building krew failed: {built.stderr[-2000:]}", pytrace=False)
    return directory


@dataclass
class Installed:
    root: Path
    kubectl_dir: Path
    home: Path

    def run(self, python: str, *args: str) -> subprocess.CompletedProcess[str]:
        """``kubectl gpuctl ARGS`` with ``python`` as the python3 the plugin's shebang finds."""
        shim = self.home / f"python-{Path(python).name}"
        shim.mkdir(exist_ok=True)
        if not (shim / "python3").exists():
            (shim / "python3").symlink_to(python)
        env = {
            "PATH": f"{shim}:{self.root / 'bin'}:{self.kubectl_dir}:/usr/bin:/bin",
            "HOME": str(self.home),
            "KREW_ROOT": str(self.root),
            "NO_COLOR": "1",
        }
        return subprocess.run(
            [str(self.kubectl_dir / "kubectl"), "gpuctl", *args], capture_output=True, text=True, env=env, timeout=300
        )


@pytest.fixture(scope="module")
def installed(control_plane: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    krew = krew_dir()
    out = tmp_path_factory.mktemp("dist")
    subprocess.run([sys.executable, "-m", "hack.dist", "--out", str(out)], cwd=ROOT, check=True, timeout=900)
    [archive] = out.glob("gpuctl-v*.tar.gz")
    root, home = tmp_path_factory.mktemp("krew-root"), tmp_path_factory.mktemp("home")
    env = {
        "PATH": f"{krew}:{control_plane.bin_dir}:/usr/bin:/bin",
        "HOME": str(home),
        "KREW_ROOT": str(root),
    }
    kubectl = str(control_plane.bin_dir / "kubectl")
    result = subprocess.run(
        [kubectl, "krew", "install", f"--manifest={out / 'gpuctl.yaml'}", f"--archive={archive}"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "Installed plugin: gpuctl" in result.stderr + result.stdout
    # krew's record of what it installed (`krew list` would need the plugin index, a download)
    assert (root / "receipts" / "gpuctl.yaml").is_file()
    yield Installed(root, control_plane.bin_dir, home)


def test_krew_installs_the_archive_as_its_manifest_says(installed: Installed) -> None:
    [store] = (installed.root / "store" / "gpuctl").iterdir()
    assert {p.name for p in store.iterdir()} == {"kubectl-gpuctl", "kubectl_complete-gpuctl", "lib", "README.md"}
    assert os.path.realpath(installed.root / "bin" / "kubectl-gpuctl") == str(store / "kubectl-gpuctl")


def test_the_installed_plugin_runs_views_on_the_example_snapshot_on_every_python_here(installed: Installed) -> None:
    pythons = available()
    assert sys.version_info[:2] in pythons, pythons  # at least the one running the suite
    expected = json.loads(CliRunner().invoke(app, ["views", "--snapshot", SNAPSHOT, "-o", "json"]).stdout)
    [store] = (installed.root / "store" / "gpuctl").iterdir()
    for version, python in pythons.items():
        result = installed.run(python, "views", "--snapshot", SNAPSHOT, "-o", "json")
        assert result.returncode == 0 and result.stderr == "", (version, result.stderr)
        assert json.loads(result.stdout) == expected, version
        table = installed.run(python, "views", "--snapshot", SNAPSHOT)
        assert table.returncode == 0 and table.stdout.splitlines()[0].split()[0] == "NAME", version
        # The first run compiled the sources for this version beside them; later runs start from that bytecode.
        tag = f"cpython-{version[0]}{version[1]}"
        assert (store / "lib" / "gpuctl" / "cli" / "__pycache__" / f"views.{tag}.pyc").exists(), version


def test_the_plugins_help_reads_kubectl_gpuctl(installed: Installed) -> None:
    python = interpreter(sys.version_info[:2])
    assert python is not None
    result = installed.run(python, "hold", "-h")
    assert result.returncode == 0 and result.stdout.startswith("Usage: kubectl gpuctl hold")


def test_an_older_python_is_refused_in_one_line(installed: Installed) -> None:
    [store] = (installed.root / "store" / "gpuctl").iterdir()
    launcher = store / "kubectl-gpuctl"
    older = available(OLDER)
    for (major, minor), python in older.items():
        result = installed.run(python, "views", "--snapshot", SNAPSHOT)
        assert result.returncode == 1 and result.stdout == ""
        assert result.stderr.startswith("error: kubectl-gpuctl needs Python 3.10 or newer; ")
        assert result.stderr.endswith(f"python3 is Python {major}.{minor}\n") and result.stderr.count("\n") == 1
    # However many older Pythons this machine has: the launcher's check itself, under a version it must refuse.
    fake = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; sys.version_info = (3, 9, 18); exec(open(sys.argv[1]).read())",
            str(launcher),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert fake.returncode == 1 and fake.stderr.endswith("is Python 3.9\n") and "needs Python 3.10" in fake.stderr
