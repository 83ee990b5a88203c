"""Time and liveness on the real control plane: `workloads` reads each hold's start from the times Kueue wrote,
`workloads -w` prints what changes, and `top` in a terminal says it is stale while the kube-apiserver is stopped
(SIGSTOP) and recovers when it runs again."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from typer.testing import CliRunner

from gpuctl.cli.main import app
from testbed.gpucluster import GpuPool, condition, new_pool, wait_for

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-c", "from gpuctl.cli.startup import run; run()"]
runner = CliRunner()


@pytest.fixture(scope="module")
def pool(api: Any, test_namespace: str) -> Iterator[GpuPool]:
    p = new_pool(api, test_namespace)
    try:
        p.submit("too-big", {"nvidia.com/gpu": "9"})
        p.submit("at-check", {"nvidia.com/gpu": "1"})
        wait_for(
            "at-check reserves quota",
            lambda: (condition(p.workload("at-check"), "QuotaReserved") or {}).get("status") == "True",
        )
        wait_for("too-big is pending", lambda: condition(p.workload("too-big"), "QuotaReserved") is not None)
        yield p
    finally:
        p.cleanup()


def _items(pool: GpuPool, control_plane: Any) -> dict[str, dict[str, Any]]:
    result = runner.invoke(
        app, ["workloads", "-n", pool.namespace, "--kubeconfig", str(control_plane.kubeconfig), "-o", "json"]
    )
    assert result.exit_code == 0, result.stderr
    return {i["name"]: i for i in json.loads(result.stdout)["items"]}


def test_holds_start_at_the_times_kueue_wrote(pool: GpuPool, control_plane: Any) -> None:
    items = _items(pool, control_plane)
    big, check = pool.workload("too-big"), pool.workload("at-check")
    # Held for quota: since Kueue set QuotaReserved=False (the Workload was created just before).
    assert items["too-big"]["heldBy"] == 2
    assert items["too-big"]["creationTimestamp"] == big["metadata"]["creationTimestamp"]
    assert items["too-big"]["heldSince"] == condition(big, "QuotaReserved")["lastTransitionTime"]
    # Held at the check: since the quota reservation or the check's last change, whichever Kueue wrote last.
    assert items["at-check"]["heldBy"] == 3
    stamps = [condition(check, "QuotaReserved")["lastTransitionTime"]]
    stamps += [c["lastTransitionTime"] for c in check["status"].get("admissionChecks") or []]
    assert items["at-check"]["heldSince"] == max(stamps)
    kubeconfig = str(control_plane.kubeconfig)
    result = runner.invoke(
        app, ["workloads", "-A", "--sort-by=.metadata.creationTimestamp", "--kubeconfig", kubeconfig]
    )
    assert result.exit_code == 0, result.stderr
    assert re.split(r"\s{2,}", result.stdout.splitlines()[0])[5:8] == ["HELD-FOR", "AGE", "SUMMARY"]
    result = runner.invoke(
        app, ["workloads", "-A", "--sort-by=.metadata.creationTimestamp", "--kubeconfig", kubeconfig, "-o", "json"]
    )
    stamps = [i["metadata"]["creationTimestamp"] for i in json.loads(result.stdout)["items"]]
    assert len(stamps) >= 2 and stamps == sorted(stamps)


def test_workloads_watch_prints_each_change(pool: GpuPool, control_plane: Any, tmp_path: Path) -> None:
    out = tmp_path / "watch.out"
    with out.open("w") as sink:
        proc = subprocess.Popen(
            [
                *CLI,
                "workloads",
                "-n",
                pool.namespace,
                "-w",
                "--interval",
                "0.5",
                "--kubeconfig",
                str(control_plane.kubeconfig),
            ],
            stdout=sink,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        try:
            rows = lambda name: [ln for ln in out.read_text().splitlines() if re.search(rf"\s{name}\s", ln)]  # noqa: E731
            wait_for("the first table", lambda: rows("at-check"), timeout=30)
            assert "HELD-FOR" in out.read_text().splitlines()[0]
            pool.submit("late", {"nvidia.com/gpu": "1"})
            wait_for("the new Workload's row", lambda: rows("late"), timeout=30)
            pool.set_check("at-check", "Ready", "the assigned flavor pool has enough free cards to place the request")
            assert "3 gpustack-node-devices" in rows("at-check")[0]
            # Admitted, it is next held for its Pods (none are created here): a row says so.
            wait_for("at-check's row at gate 4", lambda: "4 scheduler / kubelet" in rows("at-check")[-1], timeout=30)
            assert proc.poll() is None
        finally:
            proc.terminate()
            proc.wait(10)


class Terminal:
    """A process on a pseudo-terminal (200 columns), its screen output kept as text."""

    def __init__(self, argv: list[str]) -> None:
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 60, 200, 0, 0))
        self.master = master
        self.proc = subprocess.Popen(
            argv,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            cwd=ROOT,
            env={**os.environ, "NO_COLOR": "1", "TERM": "xterm", "COLUMNS": "200", "LINES": "60"},
            start_new_session=True,
        )
        os.close(slave)
        self.text = ""
        self.lock = threading.Lock()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        while True:
            ready, _, _ = select.select([self.master], [], [], 0.5)
            if not ready:
                if self.proc.poll() is not None:
                    return
                continue
            try:
                chunk = os.read(self.master, 65536)
            except OSError:
                return
            if not chunk:
                return
            with self.lock:
                self.text += chunk.decode("utf-8", "replace")

    def since(self, mark: int) -> str:
        with self.lock:
            return self.text[mark:]

    def mark(self) -> int:
        with self.lock:
            return len(self.text)

    def press(self, key: str) -> None:
        os.write(self.master, key.encode())

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        os.close(self.master)


def test_top_says_it_is_stale_while_the_api_server_is_stopped(pool: GpuPool, control_plane: Any, api: Any) -> None:
    apiserver = next(p for p in control_plane.processes if p.name == "kube-apiserver")
    assert apiserver.pid is not None
    term = Terminal([*CLI, "top", "--interval", "1", "--kubeconfig", str(control_plane.kubeconfig)])
    stopped = False
    try:
        wait_for("top's first live frame", lambda: "last answer from the API server" in term.since(0), timeout=60)
        mark = term.mark()
        os.kill(apiserver.pid, signal.SIGSTOP)
        stopped = True
        started = time.monotonic()
        # Stale is said while the server is still stopped (it stays stopped 30 s: far longer than the interval).
        wait_for("the stale frame", lambda: "STALE: no answer from the API server" in term.since(mark), timeout=25)
        time.sleep(max(0.0, 30 - (time.monotonic() - started)))
        resumed = term.mark()
        os.kill(apiserver.pid, signal.SIGCONT)
        stopped = False
        wait_for(
            "the frame after the server answers again",
            lambda: "last answer from the API server" in term.since(resumed),
            timeout=60,
        )
        assert term.proc.poll() is None  # still running
        term.press("q")
        wait_for("top quits on q", lambda: term.proc.poll() is not None, timeout=30)
        assert term.proc.returncode == 0
    finally:
        if stopped:
            os.kill(apiserver.pid, signal.SIGCONT)
        term.close()
        # The control plane's other clients (Kueue) reconnect before the next test.
        wait_for("the API server answers", lambda: _answers(api), timeout=60)


def _answers(api: Any) -> bool:
    try:
        client.VersionApi(api).get_code(_request_timeout=5)
    except Exception:  # noqa: BLE001 - not yet
        return False
    return True
