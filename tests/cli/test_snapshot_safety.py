"""A snapshot is untrusted input: every malformed or hostile file is refused with one line and exit code 1, quickly
and in bounded memory — never a traceback, a hang or an exhausted machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "snapshot"
NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}}


# A small launcher starts gpuctl and reports its peak RSS: measured as a child of this (large) test process, the
# high-water mark would also count the pages a forked child shares with its parent before it execs.
LAUNCHER = (
    "import os, resource, subprocess, sys\n"
    "code = subprocess.call(sys.argv[2:])\n"
    "with open(sys.argv[1], 'w') as f: f.write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))\n"
    "sys.exit(code)\n"
)


def gpuctl(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str, float]:
    """Run gpuctl as its own process: exit code, stdout, stderr and that process's peak RSS in MiB."""
    import tempfile

    fd, rss_path = tempfile.mkstemp(suffix=".rss")
    os.close(fd)
    command = [sys.executable, "-c", "from gpuctl.cli.startup import run; run()", *args]
    proc = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, rss_path, *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "NO_COLOR": "1", **(env or {})},
        cwd=ROOT,
        start_new_session=True,
    )
    streams: dict[str, bytes] = {}
    readers = [
        threading.Thread(target=lambda k=k, f=f: streams.__setitem__(k, f.read()))
        for k, f in (("out", proc.stdout), ("err", proc.stderr))
    ]
    for r in readers:
        r.start()
    watchdog = threading.Timer(20, lambda: os.killpg(proc.pid, 9))  # the launcher and gpuctl under it
    watchdog.start()
    _, status, _ = os.wait4(proc.pid, 0)
    hung = not watchdog.is_alive()
    watchdog.cancel()
    for r in readers:
        r.join()
    assert not hung, f"gpuctl {' '.join(args)} hung"
    rss_text = Path(rss_path).read_text()
    os.unlink(rss_path)
    return (
        os.waitstatus_to_exitcode(status),
        streams["out"].decode(),
        streams["err"].decode(),
        int(rss_text or 0) / 1024,
    )


def refused(path: Path, *extra: str, env: dict[str, str] | None = None) -> str:
    code, out, err, rss = gpuctl("views", "--snapshot", str(path), *extra, env=env)
    assert code == 1, (code, out, err)
    assert out == "" and err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err, err
    assert rss < 200, f"{rss:.0f} MiB"
    return err


def test_yaml_aliases_that_expand_without_bound_are_refused(tmp_path: Path) -> None:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, 12):
        lines.append(f"a{i}: &a{i} [" + ", ".join(f"*a{i - 1}" for _ in range(9)) + "]")
    lines.append("apiVersion: v1\nkind: Node\nmetadata: {name: bomb}")
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("\n".join(lines) + "\n")
    assert "aliases expand to more than" in refused(bomb)


def test_a_fifo_is_refused_without_being_opened(tmp_path: Path) -> None:
    fifo = tmp_path / "nodes.yaml"
    os.mkfifo(fifo)
    assert "not a regular file" in refused(tmp_path)
    assert "not a regular file" in refused(fifo)


def test_a_file_over_the_size_limit_is_refused(tmp_path: Path) -> None:
    big = tmp_path / "nodes.json"
    big.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [NODE] * 2000}))
    err = refused(tmp_path, env={"GPUCTL_SNAPSHOT_MAX_BYTES": "10000"})
    assert "over the 10000-byte limit" in err and "GPUCTL_SNAPSHOT_MAX_BYTES" in err


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_nesting_beyond_any_object_is_refused(tmp_path: Path, suffix: str) -> None:
    deep = tmp_path / f"deep{suffix}"
    depth = 100_000 if suffix == ".json" else 200
    deep.write_text("[" * depth + "]" * depth)
    assert "nested" in refused(deep)


def test_an_object_twice_is_refused_naming_both_files(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text(json.dumps(NODE))
    (tmp_path / "b.yaml").write_text("apiVersion: v1\nkind: Node\nmetadata:\n  name: n\n")
    err = refused(tmp_path)
    assert "Node n appears twice" in err and "a.json" in err and "b.yaml" in err


def test_the_same_object_in_two_api_versions_is_one_object_twice(tmp_path: Path) -> None:
    it = {"kind": "InstanceType", "metadata": {"name": "t"}, "spec": {}}
    (tmp_path / "a.json").write_text(json.dumps({"apiVersion": "worker.gpustack.ai/v1alpha1", **it}))
    (tmp_path / "b.json").write_text(json.dumps({"apiVersion": "worker.gpustack.ai/v1", **it}))
    assert "InstanceType t appears twice" in refused(tmp_path)


def test_the_example_snapshot_still_reads(tmp_path: Path) -> None:
    code, out, err, _ = gpuctl("views", "--snapshot", str(EXAMPLE), "-o", "json")
    assert code == 0 and json.loads(out)["items"], err
