"""The kubernetes client range gpuctl declares, tested at both ends on the real API server: the CLI run with the oldest
and the newest client it allows answers exactly as with the client of the test environment, reads and writes alike.

Each end gets a virtual environment of its own (kept in the test-binary cache, made once per client version) holding
that client and the CLI's other libraries at the versions installed here; gpuctl itself is run from the checkout.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tomllib
from packaging.requirements import Requirement

from gpuctl.core.units import M
from testbed.factories import card_row
from testbed.gpucluster import GpuPool, condition, new_pool, wait_for

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
TESTED: list[str] = PYPROJECT["tool"]["gpuctl"]["kubernetes-client-tested"]
OTHERS = ("typer", "rich", "pyyaml", "jsonpatch", "click", "shellingham", "typing-extensions")
"""The CLI's other libraries, pinned to the versions this environment runs, so only the client differs."""


def _declared() -> Requirement:
    [spec] = [Requirement(r) for r in PYPROJECT["project"]["dependencies"] if Requirement(r).name == "kubernetes"]
    return spec


def test_the_tested_ends_are_the_declared_range() -> None:
    spec = _declared()
    low, high = TESTED
    assert spec.specifier.contains(low) and spec.specifier.contains(high)
    # The ends: the range starts at the low end's major and stops before the major after the high end's.
    assert f">={low.split('.')[0]}" in str(spec.specifier) and f"<{int(high.split('.')[0]) + 1}" in str(spec.specifier)


def _installed(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _env(version: str) -> Path:
    """A virtual environment with kubernetes==version and the CLI's other libraries as installed here."""
    root = Path(os.environ.get("GPUCTL_TESTBIN", Path.home() / ".cache" / "gpuctl" / "testbin")) / "pyclients"
    env = root / f"kubernetes-{version}-py{sys.version_info[0]}.{sys.version_info[1]}"
    python = env / "bin" / "python"
    stamp = env / ".complete"
    if stamp.exists():
        return python
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(env)], check=True, timeout=300)
    pins = [f"{n}=={v}" for n in OTHERS if (v := _installed(n))]
    result = subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            f"kubernetes=={version}",
            *pins,
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    stamp.write_text(version)
    return python


def _gpuctl(python: Path, kubeconfig: Path, *args: str) -> tuple[int, str, str]:
    """The CLI of this checkout on ``python``'s libraries."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1", "COLUMNS": "200"}
    result = subprocess.run(
        [str(python), "-c", "from gpuctl.cli.startup import run; run()", *args, "--kubeconfig", str(kubeconfig)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=ROOT,
    )
    return result.returncode, result.stdout, result.stderr


@pytest.fixture(scope="module")
def pool(api: Any, test_namespace: str) -> Iterator[GpuPool]:
    p = new_pool(api, test_namespace, ledgers={0: [card_row(0, mode=3, allocated=M // 2, slices=1)]})
    try:
        p.submit("client-held", {"nvidia.com/gpu": "2"})
        p.submit("client-quota", {"nvidia.com/gpu": "99"})
        wait_for(
            "client-held reserves quota",
            lambda: (condition(p.workload("client-held"), "QuotaReserved") or {}).get("status") == "True",
        )
        yield p
    finally:
        p.cleanup()


def _timeless(answer: Any) -> Any:
    """An answer without what the clock moves between two runs (a wait so far, in seconds)."""
    if isinstance(answer, dict):
        return {k: _timeless(v) for k, v in answer.items() if k != "waitedSeconds"}
    if isinstance(answer, list):
        return [_timeless(v) for v in answer]
    return answer


@pytest.mark.parametrize("version", TESTED)
def test_the_cli_answers_alike_on_each_end_of_the_client_range(version: str, pool: GpuPool, control_plane: Any) -> None:
    kubeconfig = control_plane.kubeconfig
    here = Path(sys.executable)
    there = _env(version)
    probe = subprocess.run(
        [str(there), "-c", "import kubernetes; print(kubernetes.__version__)"], capture_output=True, text=True
    )
    assert probe.stdout.strip() == version
    ns = pool.namespace
    reads = [
        ("views", pool.name, "-o", "json"),
        ("workloads", "-n", ns, "-o", "json"),
        ("explain", "workload", f"{ns}/client-held", "-o", "json"),
        ("explain", "workload", f"{ns}/client-quota", "-o", "json"),
        ("queue", pool.name, "-o", "json"),
        ("views", "--by-node", pool.name, "-o", "json"),
    ]
    for args in reads:
        want = _gpuctl(here, kubeconfig, *args)
        got = _gpuctl(there, kubeconfig, *args)
        assert got[0] == want[0], (args, got[2])
        assert _timeless(json.loads(got[1])) == _timeless(json.loads(want[1])), args
    # A write through the client (a server-side dry run stores nothing) and an error the API server answers.
    code, out, err = _gpuctl(there, kubeconfig, "hold", pool.name, "--dry-run=server")
    assert code == 0 and "server dry run: nothing stored" in out, err
    code, out, err = _gpuctl(there, kubeconfig, "explain", "workload", f"{ns}/no-such-workload")
    assert code == 1 and re.search(r'workload "[^"]+/no-such-workload" not found', err) and len(err.splitlines()) == 1
