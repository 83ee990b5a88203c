"""The Python interpreters this machine has (on PATH, or held by pyenv), for the tests and benchmarks that run the
kubectl plugin on each version gpuctl supports."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

SUPPORTED = ((3, 10), (3, 11), (3, 12), (3, 13), (3, 14))
"""Every version gpuctl supports that has been released (3.10 is the oldest)."""
OLDER = ((3, 9), (3, 8), (3, 7), (3, 6))


def interpreter(version: tuple[int, int]) -> str | None:
    """The real path of a Python ``version`` (``python3.X`` on PATH, or one pyenv holds), if this machine has one
    that runs (a pyenv shim of a version not selected does not)."""
    name = f"python{version[0]}.{version[1]}"
    pyenv = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"
    candidates = [shutil.which(name), *sorted(str(p) for p in pyenv.glob(f"{version[0]}.{version[1]}.*/bin/{name}"))]
    for found in filter(None, candidates):
        probe = subprocess.run(
            [found, "-c", "import sys; print(sys.version_info[0], sys.version_info[1]); print(sys.executable)"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        lines = probe.stdout.split("\n")
        if probe.returncode == 0 and lines[0].split() == [str(v) for v in version]:
            return lines[1].strip()
    return None


def available(versions: tuple[tuple[int, int], ...] = SUPPORTED) -> dict[tuple[int, int], str]:
    """Each of ``versions`` this machine has, with its interpreter."""
    return {v: p for v in versions if (p := interpreter(v)) is not None}
