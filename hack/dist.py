"""``make dist``: the kubectl plugin as a krew-installable archive, and its krew manifest.

    python -m hack.dist [--out DIR] [--release-url URL]

The plugin is one self-contained file, ``kubectl-gpuctl``: a Python zip application holding gpuctl and the pure-Python
parts of the libraries the CLI imports (typer, rich, the kubernetes client, PyYAML without its C loader, jsonpatch and
what they need), copied from the environment that builds it. It runs on any ``python3`` of 3.11 or newer, on Linux and
macOS alike. The archive ``gpuctl-v<version>.tar.gz`` holds it, the completion shim ``kubectl_complete-gpuctl`` (krew
puts both on PATH) and the README; it is byte-for-byte reproducible (sorted entries, fixed times and owners), so its
SHA-256 in the manifest names one build. The manifest is ``deploy/krew/gpuctl.yaml`` filled in for that archive.

Before writing anything under ``--out`` the plugin is run from a fresh interpreter that sees no site-packages
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
import zipapp
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLI_REQUIREMENTS = ("typer", "rich", "kubernetes", "pyyaml", "jsonpatch")
"""What the CLI imports; the operator's server libraries (aiohttp, uvloop, prometheus-client) stay out of the plugin."""
EPOCH = 315532800  # 1980-01-01, the earliest time a zip entry can carry
MAIN = "from gpuctl.cli.startup import run\n\nrun()\n"


def _requirement_name(spec: str) -> str | None:
    """The distribution a requirement names, or None when its marker excludes it here (extras, Windows only)."""
    requirement, _, marker = spec.partition(";")
    if "extra" in marker or "Windows" in marker or "win32" in marker:
        return None
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    return match.group(1) if match else None


def _closure(names: tuple[str, ...]) -> list[metadata.Distribution]:
    seen: dict[str, metadata.Distribution] = {}
    todo = list(names)
    while todo:
        name = todo.pop()
        key = re.sub(r"[-_.]+", "-", name).lower()
        if key in seen:
            continue
        dist = metadata.distribution(name)
        seen[key] = dist
        todo.extend(n for n in map(_requirement_name, dist.requires or []) if n)
    return [seen[k] for k in sorted(seen)]


def _copy_distribution(dist: metadata.Distribution, app: Path) -> int:
    """Copy a distribution's importable files (no compiled extensions, caches or scripts); return how many."""
    copied = 0
    for file in dist.files or []:
        parts = Path(str(file)).parts
        if not parts or parts[0] == ".." or "__pycache__" in parts or file.suffix in (".so", ".pyd", ".pyc"):
            continue
        source = Path(str(dist.locate_file(file)))
        if not source.is_file():
            continue
        target = app.joinpath(*parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        copied += 1
    return copied


def build_zipapp(target: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        app = Path(tmp) / "app"
        shutil.copytree(ROOT / "gpuctl", app / "gpuctl", ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.so"))
        for dist in _closure(CLI_REQUIREMENTS):
            _copy_distribution(dist, app)
        (app / "__main__.py").write_text(MAIN)
        _precompile(app)
        for path in app.rglob("*"):
            os.utime(path, (EPOCH, EPOCH))
        zipapp.create_archive(app, target, interpreter="/usr/bin/env python3", compressed=True)
    _reproducible_zip(target)
    target.chmod(0o755)


def _precompile(app: Path) -> None:
    """Byte-code beside each module, where zipimport looks for it (it cannot write caches): without it every run
    compiles the kubernetes client's models again (seconds). Unchecked-hash files do not depend on file times; another
    Python version ignores them and compiles from source."""
    import py_compile

    for source in app.rglob("*.py"):
        py_compile.compile(
            str(source),
            cfile=str(source) + "c",
            dfile=str(source.relative_to(app)),
            doraise=True,
            invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
        )


def _reproducible_zip(path: Path) -> None:
    """Rewrite the zip with sorted entries and fixed times and modes (zipapp keeps the walk's order)."""
    import zipfile

    data = path.read_bytes()
    shebang_end = data.index(b"\n") + 1
    with zipfile.ZipFile(io.BytesIO(data[shebang_end:])) as source:
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as sink:
            for name in sorted(source.namelist()):
                info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
                info.external_attr = 0o644 << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                sink.writestr(info, source.read(name))
    path.write_bytes(data[:shebang_end] + out.getvalue())


def check_plugin(plugin: Path) -> None:
    """Run the plugin as a user's python3 would, with nothing from this environment importable."""
    snapshot = ROOT / "examples" / "snapshot"
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": tempfile.gettempdir(), "NO_COLOR": "1"}
    for args in (["--help"], ["views", "--snapshot", str(snapshot), "-o", "json"], ["version"]):
        result = subprocess.run(
            [sys.executable, "-I", "-S", str(plugin), *args], capture_output=True, text=True, env=env, timeout=120
        )
        if result.returncode != 0:
            raise SystemExit(f"dist: the plugin failed `{' '.join(args)}`: {result.stderr.strip()[-2000:]}")
        if args == ["--help"] and "kubectl gpuctl" not in result.stdout:
            raise SystemExit("dist: the plugin's usage does not read `kubectl gpuctl`")


def build_archive(plugin: Path, target: Path) -> None:
    members = [
        ("kubectl-gpuctl", plugin, 0o755),
        ("kubectl_complete-gpuctl", ROOT / "completions" / "kubectl_complete-gpuctl", 0o755),
        ("README.md", ROOT / "README.md", 0o644),
    ]
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, source, mode in members:
            data = source.read_bytes()
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, EPOCH
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(data))
    with target.open("wb") as sink, gzip.GzipFile(filename="", mode="wb", fileobj=sink, mtime=EPOCH) as gz:
        gz.write(raw.getvalue())


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
        plugin = Path(tmp) / "kubectl-gpuctl"
        build_zipapp(plugin)
        check_plugin(plugin)
        archive = Path(tmp) / name
        build_archive(plugin, archive)
        sha256 = hashlib.sha256(archive.read_bytes()).hexdigest()
        base = args.release_url.rstrip("/") if args.release_url else out.as_uri()
        manifest = krew_manifest(__version__, f"{base}/{name}", sha256, args.homepage)
        out.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(plugin, out / "kubectl-gpuctl")
        (out / "kubectl-gpuctl").chmod(0o755)
        shutil.copyfile(archive, out / name)
        (out / "gpuctl.yaml").write_text(manifest)
    size = (out / name).stat().st_size
    sys.stderr.write(f"dist: {out / name} ({size / 1e6:.1f} MB, sha256 {sha256}) and {out / 'gpuctl.yaml'}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
