"""``make dist``: the kubectl plugin as a krew-installable archive, and its krew manifest.

    python -m hack.dist [--out DIR] [--release-url URL]

The plugin is ``kubectl-gpuctl``, a launcher any ``python3`` can read, and ``lib/``: gpuctl and the pure-Python parts
of the libraries the CLI imports (typer, rich, the kubernetes client, PyYAML without its C loader, jsonpatch and what
they need), resolved by pip for the oldest Python gpuctl supports (:data:`MIN_PYTHON`), so one archive runs on every
supported version, on Linux and macOS alike. Below that version the launcher refuses in one line.

The plugin's sources are plain files, beside the bytecode of the Python that builds it (``__pycache__``, hash-checked
against nothing: the archive's sources never change, and unpacking sets no times to compare), so that version starts
from bytecode even where ``PYTHONDONTWRITEBYTECODE`` forbids writing any, as it does in many images, and where the
install is not the running user's to write. Every other version finds no bytecode of its own tag and compiles the
sources once, on its first run, into the install directory (or, where that is not writable, the user's cache) — every
run, where it may not write bytecode: the same answers, each run slower by the compiling (see docs/benchmarks.md).

The archive ``gpuctl-v<version>.tar.gz`` holds the launcher and the completion shim ``kubectl_complete-gpuctl`` (krew
puts both on PATH), ``lib/`` and the README; it is byte-for-byte reproducible (sorted entries, fixed times and
owners), so its SHA-256 in the manifest names one build. The manifest is ``deploy/krew/gpuctl.yaml`` filled in for
that archive, and it moves exactly the archive's entries.

Before anything is written under ``--out``, the plugin is run from a fresh interpreter that sees no site-packages
(``python -I -S``), on the bundled example snapshot: an archive that would need something from the build environment is
never produced.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import importlib.metadata as metadata
import io
import os
import re
import shutil
import string
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MIN_PYTHON = (3, 10)
"""The oldest Python gpuctl supports (``requires-python`` in pyproject.toml)."""
CLI_REQUIREMENTS = ("typer", "rich", "kubernetes", "pyyaml", "jsonpatch")
"""What the CLI imports; the operator's server libraries (aiohttp, uvloop, prometheus-client) stay out of the plugin."""
EPOCH = 315532800  # 1980-01-01
SKIPPED_SUFFIXES = (".so", ".pyd", ".pyc", ".dylib")

LAUNCHER = """\
#!/usr/bin/env python3
# kubectl-gpuctl: runs the gpuctl beside it (lib/) on the python3 found on PATH.
import os
import sys

if sys.version_info[:2] < {min_python!r}:
    sys.stderr.write(
        "error: kubectl-gpuctl needs Python {min_text} or newer; %s is Python %d.%d\\n"
        % (sys.executable or "python3", sys.version_info[0], sys.version_info[1])
    )
    sys.exit(1)
lib = os.path.join(os.path.dirname(os.path.realpath(__file__)), "lib")
own = os.path.join(lib, "gpuctl", "__pycache__", "__init__.%s.pyc" % sys.implementation.cache_tag)
if not os.access(lib, os.W_OK) and not os.path.exists(own):
    # The archive holds one version's bytecode; any other compiles the sources once, into the install where it may
    # write, else into the user's cache. (A cache prefix hides the bytecode beside the sources: only without any.)
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    sys.pycache_prefix = os.path.join(cache, "gpuctl", "pycache")
sys.path.insert(0, lib)
from gpuctl.cli.startup import run  # noqa: E402

run()
"""


def _requirements() -> list[str]:
    """The CLI's requirements as gpuctl declares them (pyproject's ranges, from the installed metadata)."""
    wanted = {re.sub(r"[-_.]+", "-", n).lower() for n in CLI_REQUIREMENTS}
    out = []
    for spec in metadata.requires("gpuctl") or []:
        if ";" in spec:
            continue
        name = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", spec)
        if name and re.sub(r"[-_.]+", "-", name.group(1)).lower() in wanted:
            out.append(spec.replace(" ", ""))
    missing = wanted - {re.sub(r"[-_.]+", "-", re.split(r"[<>=!~\[]", s)[0]).lower() for s in out}
    if missing:
        raise SystemExit(f"dist: gpuctl's metadata names no requirement for {', '.join(sorted(missing))}")
    return sorted(out)


def bundle_dir() -> Path:
    """The libraries of the plugin, resolved by pip for :data:`MIN_PYTHON` once per set of requirements and kept in the
    user's cache (``GPUCTL_DIST_CACHE``)."""
    requirements = _requirements()
    key = hashlib.sha256(repr((requirements, MIN_PYTHON)).encode()).hexdigest()[:16]
    root = Path(os.environ.get("GPUCTL_DIST_CACHE") or Path.home() / ".cache" / "gpuctl" / "dist-bundle")
    target = root / f"py{MIN_PYTHON[0]}.{MIN_PYTHON[1]}-{key}"
    if target.is_dir():
        return target
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".bundle-", dir=root))
    command = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "--no-compile",
        "--target",
        str(staging),
        "--python-version",
        f"{MIN_PYTHON[0]}.{MIN_PYTHON[1]}",
        "--only-binary=:all:",
        *requirements,
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=900)
    if result.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise SystemExit(f"dist: pip could not resolve the plugin's libraries: {result.stderr.strip()[-2000:]}")
    staging.rename(target)
    return target


def _files(base: Path) -> list[Path]:
    """The importable files under ``base``: no compiled extensions, caches or console scripts."""
    out = []
    for path in sorted(base.rglob("*")):
        relative = path.relative_to(base)
        if not path.is_file() or relative.parts[0] == "bin" or "__pycache__" in relative.parts:
            continue
        if path.suffix in SKIPPED_SUFFIXES:
            continue
        if ".." in str(relative):
            raise SystemExit(f"dist: {relative}: krew refuses archive entries whose names hold '..'")
        out.append(path)
    return out


def build_plugin(target: Path) -> None:
    """The plugin laid out as krew installs it: ``kubectl-gpuctl`` and ``lib/``."""
    lib = target / "lib"
    shutil.copytree(ROOT / "gpuctl", lib / "gpuctl", ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.so"))
    bundle = bundle_dir()
    for source in _files(bundle):
        copy = lib / source.relative_to(bundle)
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, copy)
    launcher = target / "kubectl-gpuctl"
    launcher.write_text(LAUNCHER.format(min_python=MIN_PYTHON, min_text=".".join(map(str, MIN_PYTHON))))
    launcher.chmod(0o755)
    shutil.copyfile(ROOT / "completions" / "kubectl_complete-gpuctl", target / "kubectl_complete-gpuctl")
    (target / "kubectl_complete-gpuctl").chmod(0o755)
    shutil.copyfile(ROOT / "README.md", target / "README.md")


def check_plugin(plugin_dir: Path) -> None:
    """Run the plugin as a user's python3 would, with nothing from this environment importable."""
    snapshot = ROOT / "examples" / "snapshot"
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": tempfile.gettempdir(), "NO_COLOR": "1"}
    launcher = plugin_dir / "kubectl-gpuctl"
    for args in (["--help"], ["views", "--snapshot", str(snapshot), "-o", "json"], ["version"]):
        result = subprocess.run(
            [sys.executable, "-I", "-S", str(launcher), *args], capture_output=True, text=True, env=env, timeout=300
        )
        if result.returncode != 0:
            raise SystemExit(f"dist: the plugin failed `{' '.join(args)}`: {result.stderr.strip()[-2000:]}")
        if args == ["--help"] and "kubectl gpuctl" not in result.stdout:
            raise SystemExit("dist: the plugin's usage does not read `kubectl gpuctl`")
    for cache in plugin_dir.rglob("__pycache__"):  # the check's own bytecode stays out of the archive
        shutil.rmtree(cache)


def compile_plugin(plugin_dir: Path) -> None:
    """The building Python's bytecode of every module in ``lib/``, invalidated by nothing (``unchecked-hash``: no
    source times to compare once unpacked) and reproducible (no times in it)."""
    result = subprocess.run(
        [
            sys.executable,
            "-I",
            "-S",
            "-m",
            "compileall",
            "-q",
            "-j",
            "1",
            "--invalidation-mode",
            "unchecked-hash",
            # Names relative to lib/, not this build's directory (the import system puts the real path back).
            "-s",
            str(plugin_dir),
            str(plugin_dir / "lib"),
        ],
        capture_output=True,
        text=True,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "SOURCE_DATE_EPOCH": str(EPOCH)},
        timeout=600,
    )
    if result.returncode != 0:
        raise SystemExit(f"dist: compiling the plugin failed: {(result.stdout + result.stderr).strip()[-2000:]}")


EXECUTABLE = ("kubectl-gpuctl", "kubectl_complete-gpuctl")


def build_archive(plugin_dir: Path, target: Path) -> list[str]:
    """A reproducible tar.gz of the plugin; the top-level entries it holds."""
    raw = io.BytesIO()
    paths = sorted(p for p in plugin_dir.rglob("*") if p.is_file())
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in paths:
            name = path.relative_to(plugin_dir).as_posix()
            data = path.read_bytes()
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), EPOCH
            info.mode = 0o755 if name in EXECUTABLE else 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(data))
    with target.open("wb") as sink, gzip.GzipFile(filename="", mode="wb", fileobj=sink, mtime=EPOCH) as gz:
        gz.write(raw.getvalue())
    return sorted({p.relative_to(plugin_dir).parts[0] for p in paths})


def krew_manifest(version: str, uri: str, sha256: str, homepage: str | None) -> str:
    """The template filled in; without a homepage its (optional) line is left out."""
    lines = (ROOT / "deploy" / "krew" / "gpuctl.yaml").read_text().splitlines()
    kept = [ln for ln in lines if not ln.startswith("# Template") and (homepage or "${HOMEPAGE}" not in ln)]
    text = string.Template("\n".join(kept) + "\n")
    return text.substitute(VERSION=version, URI=uri, SHA256=sha256, HOMEPAGE=homepage or "")


def main(argv: list[str] | None = None) -> int:
    from gpuctl import __version__

    parser = argparse.ArgumentParser(prog="python -m hack.dist", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "dist", help="where to write (default: dist/)")
    parser.add_argument(
        "--release-url",
        default=None,
        help="the URL the archive is published under (default: the file's own location, for "
        "`kubectl krew install --manifest=... --archive=...`)",
    )
    parser.add_argument("--homepage", default=None, help="the plugin's homepage (left out when not given)")
    args = parser.parse_args(argv)
    out: Path = args.out.resolve()
    name = f"gpuctl-v{__version__}.tar.gz"
    with tempfile.TemporaryDirectory() as tmp:
        plugin = Path(tmp) / "plugin"
        build_plugin(plugin)
        check_plugin(plugin)
        compile_plugin(plugin)
        archive = Path(tmp) / name
        build_archive(plugin, archive)
        sha256 = hashlib.sha256(archive.read_bytes()).hexdigest()
        base = args.release_url.rstrip("/") if args.release_url else out.as_uri()
        manifest = krew_manifest(__version__, f"{base}/{name}", sha256, args.homepage)
        out.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(archive, out / name)
        (out / "gpuctl.yaml").write_text(manifest)
    size = (out / name).stat().st_size
    sys.stderr.write(f"dist: {out / name} ({size / 1e6:.1f} MB, sha256 {sha256}) and {out / 'gpuctl.yaml'}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
