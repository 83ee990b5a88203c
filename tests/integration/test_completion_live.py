"""Name completion from a real API server: the app reads the names and remembers them, the next TAB is answered
from what it remembered without starting the app, and names older than a few seconds are read again in the
background so that the TAB after sees what changed."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from gpuctl.cli import namecache
from gpuctl.cli.shells import COMPLETE_VAR
from testbed.factories import instancetype
from testbed.gpucluster import WORKER, WV

ROOT = Path(__file__).resolve().parents[2]


def tab(words: str, *, app: bool = False) -> tuple[list[str], float, set[str]]:
    """One TAB as bash asks for it: the candidates, the seconds it took, and the modules the process loaded."""
    env = {**os.environ, "COMP_WORDS": words, "COMP_CWORD": str(len(words.split()) - (0 if words.endswith(" ") else 1))}
    env[COMPLETE_VAR] = "complete_bash"
    code = (
        "import sys\n"
        + ("from gpuctl.cli.main import run\n" if app else "from gpuctl.cli.startup import run\n")
        + "try:\n    run()\nexcept SystemExit:\n    pass\n"
        "sys.stderr.write(' '.join(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=ROOT, timeout=60)
    return proc.stdout.split(), time.perf_counter() - started, set(proc.stderr.split())


@pytest.fixture()
def types(api: Any) -> Iterator[tuple[str, list[str], Callable[[str], None]]]:
    """InstanceTypes of a prefix of their own, a function that makes another, and the names made."""
    objs = client.CustomObjectsApi(api)
    prefix = f"compl-{uuid.uuid4().hex[:6]}"
    made: list[str] = []

    def make(suffix: str) -> None:
        body = {k: v for k, v in instancetype().items() if k != "status"}
        body["metadata"] = {"name": f"{prefix}-{suffix}"}
        objs.create_cluster_custom_object(WORKER, WV, "instancetypes", body)
        made.append(body["metadata"]["name"])

    make("a")
    make("b")
    try:
        yield prefix, made, make
    finally:
        for name in made:
            objs.delete_cluster_custom_object(WORKER, WV, "instancetypes", name)


def test_names_from_the_cluster_are_remembered_and_refreshed(control_plane: Any, types: Any) -> None:
    prefix, made, make = types
    words = f"gpuctl views --kubeconfig {control_plane.kubeconfig} {prefix}"
    first, _, loaded = tab(words)
    assert first == made and "kubernetes" in loaded  # nothing remembered yet: the app read the cluster
    warm, _, loaded = tab(words)
    assert warm == made and not loaded & {"typer", "kubernetes", "yaml", "rich"}
    # Another one appears; names a few seconds old answer at once and are read again in the background.
    make("c")
    ident, exact = namecache.identity("instancetype", {"kubeconfig": str(control_plane.kubeconfig)}, os.environ) or (
        "",
        True,
    )
    held = namecache.read(ident, os.environ)
    assert not exact and held is not None
    namecache.write(ident, held[0], os.environ, written=time.time() - namecache.FRESH - 1)
    stale, _, _ = tab(words)
    assert stale == made[:2]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = namecache.read(ident, os.environ)
        if found is not None and found[1] < namecache.FRESH:
            break
        time.sleep(0.2)
    fresh, _, loaded = tab(words)
    assert fresh == made and "kubernetes" not in loaded
