"""make dist: a reproducible krew archive whose plugin runs with nothing but python3, and a manifest that moves exactly
what the archive holds. (krew itself installs it in tests/integration/test_krew.py.) Both it and the wheel carry the
building Python's bytecode, which that Python reads where it may write none (``PYTHONDONTWRITEBYTECODE``)."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import yaml

from tests.cli.test_kubectl_style import SNAPSHOT, run

ROOT = Path(__file__).resolve().parents[2]

# Runs gpuctl (PROGRAM: the plugin's launcher, or gpuctl from a directory, with LIBRARIES after it on the path) in this
# interpreter and counts every module compiled from source (one read from valid bytecode is never compiled), then
# names, on stderr's last line, those under WITHIN and the number of modules imported from there at all. Where
# UNWRITABLE is set, os.access answers for everything under it as for a user who may not write there.
COUNTING = """\
import importlib.machinery, json, os, runpy, sys
compiled = []
real = importlib.machinery.SourceFileLoader.source_to_code
def count(self, data, path, *args, **kwargs):
    compiled.append(str(path))
    return real(self, data, path, *args, **kwargs)
importlib.machinery.SourceFileLoader.source_to_code = count
within, program, libraries, argv = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
unwritable = os.environ.get("UNWRITABLE")
if unwritable:
    access = os.access
    os.access = lambda p, mode, **kw: not (mode & os.W_OK and str(p).startswith(unwritable)) and access(p, mode, **kw)
sys.argv = [program, *argv]
try:
    if program.endswith("kubectl-gpuctl"):
        runpy.run_path(program, run_name="__main__")
    else:
        sys.path[:0] = [program, *filter(None, [libraries])]
        from gpuctl.cli.startup import run
        run()
except SystemExit:
    pass
loaded = [m for m in list(sys.modules.values()) if (getattr(m, "__file__", None) or "").startswith(within)]
counted = {"compiled": [p for p in compiled if p.startswith(within)], "loaded": len(loaded)}
counted["unwritable"] = not os.access(within, os.W_OK)
counted["wrote_none"] = sys.dont_write_bytecode
sys.stderr.write("\\n" + json.dumps(counted))
"""


def _compiled_from_source(
    program: Path, within: Path, env: dict[str, str], libraries: str = "", **how: Any
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """``views`` on the example snapshot run by ``program`` where no bytecode may be written, on the interpreter itself
    (no environment's site-packages): what it printed, and which modules under ``within`` it compiled from source."""
    # -B is PYTHONDONTWRITEBYTECODE=1 (which -I would ignore, as it does every PYTHON* variable).
    python = [how.pop("python", os.path.realpath(sys.executable)), "-I", "-S", "-B"]
    snapshot = how.pop("snapshot", SNAPSHOT)
    result = subprocess.run(
        [*python, "-c", COUNTING, str(within), str(program), libraries, "views", "--snapshot", snapshot],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        **how,
    )
    return result, json.loads(result.stderr.strip().splitlines()[-1])


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
    # none of the plugin's modules: it reads the shipped bytecode.
    frozen, counted = _compiled_from_source(bin_dir / "kubectl-gpuctl", bin_dir / "lib", env)
    assert "gpustack--nvidia-a10g-linux-amd64" in frozen.stdout, frozen.stderr[-2000:]
    assert counted["compiled"] == [] and counted["loaded"] > 100 and counted["wrote_none"], counted
    _shipped_bytecode_serves_a_user_who_cannot_write_the_install(bin_dir)
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


def _another_user() -> tuple[str, dict[str, Any]] | None:
    """A Python of this version that a user other than root (``nobody``) can run, and how to run it as that user; None
    where there is none (this one under root's home, and no other of its version)."""
    other: dict[str, Any] = {"user": 65534, "group": 65534, "extra_groups": []}
    same = shutil.which(f"python{sys.version_info[0]}.{sys.version_info[1]}", path="/usr/local/bin:/usr/bin")
    for python in dict.fromkeys(p for p in (os.path.realpath(sys.executable), same) if p):
        tag = [python, "-I", "-S", "-c", "import sys; print(sys.implementation.cache_tag)"]
        try:
            probe = subprocess.run(tag, capture_output=True, text=True, timeout=60, cwd="/", **other)
        except PermissionError:
            continue
        if probe.returncode == 0 and probe.stdout.strip() == sys.implementation.cache_tag:
            return python, other
    return None


def _shipped_bytecode_serves_a_user_who_cannot_write_the_install(unpacked: Path) -> None:
    """The plugin installed by someone else (root, in an image) and run by a user who may not write there: it still
    starts from the shipped bytecode, and writes nothing into that user's cache."""
    shared = Path(tempfile.mkdtemp(prefix="gpuctl-plugin-"))
    try:
        shared.chmod(0o755)
        plugin, home = shared / "plugin", shared / "home"
        shutil.copytree(unpacked, plugin)
        shutil.copytree(SNAPSHOT, shared / "snapshot")
        home.mkdir()
        home.chmod(0o777)
        for path in (plugin / "lib", *(plugin / "lib").rglob("*")):
            path.chmod(path.stat().st_mode & ~0o222)
        env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "NO_COLOR": "1"}
        how: dict[str, Any] = {}
        if os.geteuid() == 0:
            # Root may write anywhere: the run is another user's, or, where no other user can run this version of
            # Python, the launcher is told the install is not writable (the one thing it asks).
            other = _another_user()
            if other is None:
                env["UNWRITABLE"] = str(plugin / "lib")
            else:
                how = {"python": other[0], **other[1]}
        result, counted = _compiled_from_source(
            plugin / "kubectl-gpuctl", plugin / "lib", env, snapshot=str(shared / "snapshot"), **how
        )
        assert "gpustack--nvidia-a10g-linux-amd64" in result.stdout, result.stderr[-2000:]
        assert counted["compiled"] == [] and counted["loaded"] > 100 and counted["wrote_none"], counted
        assert counted["unwritable"], counted
        assert not list(home.rglob("*.pyc")), "bytecode written to the user's cache"
    finally:
        for path in (shared, *shared.rglob("*")):
            if not path.is_symlink():
                path.chmod(path.stat().st_mode | 0o200)
        shutil.rmtree(shared)


def test_the_wheel_carries_bytecode_its_python_reads_where_it_may_write_none(tmp_path: Path) -> None:
    """``pip wheel``: next to every module of gpuctl, this Python's bytecode, hash-checked against that module's source
    (an installer gives the files new times; a hash stays true). Installed without compiling (``pip install
    --no-compile``, as installers that leave compiling to an option do) and run where no bytecode may be written
    (``PYTHONDONTWRITEBYTECODE``), gpuctl compiles none of its modules."""
    # From a copy of what the build reads: the checkout's build/ directory may hold bytecode of an earlier build.
    source = tmp_path / "source"
    for name in ("gpuctl", "man"):
        shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copyfile(ROOT / name, source / name)
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(tmp_path / "wheels"), str(source)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    [wheel] = (tmp_path / "wheels").glob("gpuctl-*.whl")
    tag = sys.implementation.cache_tag
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        sources = sorted(n for n in names if n.startswith("gpuctl/") and n.endswith(".py"))
        assert "gpuctl/cli/startup.py" in sources
        for source in sources:
            folder, _, name = source.rpartition("/")
            cached = f"{folder}/__pycache__/{name[:-3]}.{tag}.pyc"
            assert cached in names, cached
            header = archive.read(cached)[:16]
            assert header[:4] == importlib.util.MAGIC_NUMBER, cached
            assert int.from_bytes(header[4:8], "little") == 0b11, cached  # hash-based, checked against the source
            assert header[8:16] == importlib.util.source_hash(archive.read(source)), cached
        assert {n.rsplit(".", 2)[-2] for n in names if n.endswith(".pyc")} == {tag}
    target = tmp_path / "installed"
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-compile"]
    installed = subprocess.run(
        [*pip, "--target", str(target), str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert installed.returncode == 0, installed.stderr[-2000:]
    # gpuctl from the wheel, its libraries from this environment.
    libraries = next(p for p in sys.path if p.endswith("site-packages"))
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "NO_COLOR": "1"}
    result, counted = _compiled_from_source(target, target, env, libraries)
    assert "gpustack--nvidia-a10g-linux-amd64" in result.stdout, result.stderr[-2000:]
    assert counted["compiled"] == [] and counted["loaded"] > 20 and counted["wrote_none"], counted
