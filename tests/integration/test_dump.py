"""``gpuctl dump`` on the real control plane: it never deletes what it did not write, an interrupted dump leaves the
previous one whole, and credentials in annotations and labels are redacted and counted."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from typer.testing import CliRunner

from gpuctl.cli.main import app

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ".gpuctl-dump.json"
"""What a dump wrote, beside it (docs/snapshot-format.md)."""
runner = CliRunner()


def gpuctl(control_plane: Any, *args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, [*args, "--kubeconfig", str(control_plane.kubeconfig)])
    return result.exit_code, result.stdout, result.stderr


def whole_dump(directory: Path) -> dict[str, str]:
    """The files of a complete dump (name → digest), checked against its manifest: every file it lists is there,
    unchanged, and nothing else is."""
    manifest = json.loads((directory / MANIFEST).read_text())
    listed = {f["name"]: f["sha256"] for f in manifest["files"]}
    present = {p.name for p in directory.iterdir()} - {MANIFEST}
    assert present == set(listed), (present, set(listed))
    for name, digest in listed.items():
        assert hashlib.sha256((directory / name).read_bytes()).hexdigest() == digest, name
    return listed


@pytest.fixture(scope="module")
def credentials_pod(api: Any, test_namespace: str) -> Iterator[str]:
    core = client.CoreV1Api(api)
    name = "dump-credentials"
    core.create_namespaced_pod(
        test_namespace,
        {
            "metadata": {
                "name": name,
                "labels": {"example.com/api-token": "tok123456", "team": "a"},
                "annotations": {
                    "example.com/db-password": "hunter2",
                    "example.com/registry": "https://robot:hunter3@registry.example.com/v2",
                    "example.com/config": "user=app;password=hunter4",
                    "example.com/owner": "team a",
                },
            },
            "spec": {
                "containers": [
                    {"name": "main", "image": "gpuctl-it/none", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
                ]
            },
        },
    )
    try:
        yield name
    finally:
        core.delete_namespaced_pod(name, test_namespace, grace_period_seconds=0)


def test_credentials_in_annotations_and_labels_are_redacted_and_counted(
    control_plane: Any, credentials_pod: str, tmp_path: Path
) -> None:
    target = tmp_path / "dump"
    code, _, err = gpuctl(control_plane, "dump", str(target))
    assert code == 0, err
    text = (target / "pods.json").read_text()
    assert not any(s in text for s in ("tok123456", "hunter2", "hunter3", "hunter4"))
    [pod] = [p for p in json.loads(text)["items"] if p["metadata"]["name"] == credentials_pod]
    assert pod["metadata"]["labels"] == {"example.com/api-token": "<redacted>", "team": "a"}
    assert pod["metadata"]["annotations"]["example.com/owner"] == "team a"
    assert [v for k, v in pod["metadata"]["annotations"].items() if k != "example.com/owner"] == ["<redacted>"] * 3
    summary = err.strip().splitlines()[0]
    assert "redacted" in summary and "annotations 3" in summary and "labels 1" in summary, summary
    manifest = json.loads((target / MANIFEST).read_text())
    assert manifest["kind"] == "GpuctlDump" and manifest["redacted"] >= 4
    assert (target / MANIFEST).stat().st_mode & 0o777 == 0o600
    whole_dump(target)


def test_overwrite_never_deletes_what_the_dump_did_not_write(control_plane: Any, tmp_path: Path) -> None:
    # A working folder: `gpuctl dump . --overwrite` there must not touch it.
    work = tmp_path / "work"
    work.mkdir()
    (work / "main.py").write_text("print('mine')\n")
    (work / "notes.json").write_text("{}")
    code, _, err = gpuctl(control_plane, "dump", str(work), "--overwrite")
    assert code == 2 and f"{work / 'main.py'} is not part of a gpuctl dump" in err and err.count("\n") == 1, err
    assert sorted(p.name for p in work.iterdir()) == ["main.py", "notes.json"]

    target = tmp_path / "dump"
    assert gpuctl(control_plane, "dump", str(target))[0] == 0
    first = whole_dump(target)
    # A file added to a dump: refused by name, and kept.
    (target / "ticket-notes.txt").write_text("mine")
    code, _, err = gpuctl(control_plane, "dump", str(target), "--overwrite")
    assert code == 2 and f"{target / 'ticket-notes.txt'} is not part of the dump written there" in err, err
    assert (target / "ticket-notes.txt").read_text() == "mine" and whole_dump_without(target, "ticket-notes.txt")
    (target / "ticket-notes.txt").unlink()
    # A dump file edited since: refused by name too (the edit may be someone's work).
    (target / "nodes.json").write_text('{"apiVersion": "v1", "kind": "List", "items": []}\n')
    code, _, err = gpuctl(control_plane, "dump", str(target), "--overwrite")
    assert code == 2 and f"{target / 'nodes.json'} changed since gpuctl dump wrote it" in err, err
    (target / "nodes.json").unlink()
    # Exactly a previous dump (a file of it removed is still only its own files): replaced whole.
    code, _, err = gpuctl(control_plane, "dump", str(target), "--overwrite")
    assert code == 0, err
    assert set(whole_dump(target)) == set(first)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dump", "work"]  # nothing staged left beside it


def test_a_dump_into_the_directory_a_shell_is_in(
    control_plane: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    here = tmp_path / "ticket"
    here.mkdir()
    inode = here.stat().st_ino
    monkeypatch.chdir(here)
    code, _, err = gpuctl(control_plane, "dump", ".")
    assert code == 0, err
    assert here.stat().st_ino == inode and here.stat().st_mode & 0o777 == 0o700  # the same directory, made private
    first = whole_dump(here)
    code, _, err = gpuctl(control_plane, "dump", ".", "--overwrite")
    assert code == 0, err
    assert set(whole_dump(tmp_path / "ticket")) == set(first)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ticket"]  # nothing staged left beside it


def whole_dump_without(directory: Path, extra: str) -> bool:
    manifest = json.loads((directory / MANIFEST).read_text())
    return {p.name for p in directory.iterdir()} - {MANIFEST, extra} <= {f["name"] for f in manifest["files"]}


def test_an_interrupted_dump_leaves_the_previous_one_whole(control_plane: Any, tmp_path: Path) -> None:
    target = tmp_path / "dump"
    assert gpuctl(control_plane, "dump", str(target))[0] == 0
    before = whole_dump(target)
    command = [
        sys.executable,
        "-c",
        "from gpuctl.cli.startup import run; run()",
        "dump",
        str(target),
        "--overwrite",
        "--kubeconfig",
        str(control_plane.kubeconfig),
    ]
    env = {**os.environ, "NO_COLOR": "1"}
    started = time.monotonic()
    assert subprocess.run(command, env=env, cwd=ROOT, capture_output=True, timeout=60).returncode == 0
    took = time.monotonic() - started
    outcomes = []
    for fraction in (0.3, 0.5, 0.65, 0.8, 0.9, 0.95):
        proc = subprocess.Popen(command, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(took * fraction)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        outcomes.append(proc.returncode)
        # Killed anywhere: DIR is a whole dump — the previous one or the new one, never a mix or a part.
        files = whole_dump(target)
        assert set(files) == set(before)
    assert -signal.SIGKILL in outcomes  # at least one was killed mid-way (not all had finished)
