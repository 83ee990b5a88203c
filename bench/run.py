"""Benchmarks, each measured as a ratio against a reference run in the same process or on the same machine.

    python -m bench.run [--write docs/benchmarks.md] [--nodes 5000]

The machine is shared and noisy: every figure is the median of several runs, and every target is a ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuctl.cluster.bulk import bulk_allocation
from gpuctl.core.instancetypes import parse_instancetype
from gpuctl.core.ledger import parse_devices
from gpuctl.core.units import M
from gpuctl.core.views import instancetype_views
from testbed.factories import ZERO_VIEWS, instancetype
from testbed.pki import loopback_tls_files
from testbed.synthetic import simulation_snapshot, synthetic_devices

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Row:
    name: str
    measured: str
    reference: str
    ratio: float | None
    target: str
    ok: bool | None


def median_seconds(fn: Callable[[], object], repeat: int = 5) -> float:
    """The median CPU time of ``fn`` in this process: work done here, not the time other processes on the shared
    machine hold the cores (single-threaded work, so CPU time is what it takes)."""
    times = []
    for _ in range(repeat):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    return statistics.median(times)


def bench_views_core(nodes: int) -> list[Row]:
    """The core's share of ``gpuctl views``: parse every Devices and compute the views, against json.loads."""
    raw = json.dumps({"apiVersion": "v1", "kind": "List", "items": synthetic_devices(nodes)})
    it = parse_instancetype(instancetype())
    items = json.loads(raw)["items"]

    def views() -> None:
        capabilities: dict[Any, Any] = {}  # one read's, as a snapshot or a live list keeps it
        instancetype_views(it, [parse_devices(d, capabilities) for d in items])

    # Both under the CLI's policy: the cyclic collector paused while a large object graph is built.
    with bulk_allocation():
        reference = median_seconds(lambda: json.loads(raw))
        measured = median_seconds(views)
    ratio = measured / reference
    return [
        Row(
            f"views core, {nodes} nodes x 8 cards",
            f"{measured * 1000:.0f} ms",
            f"json.loads of the same list: {reference * 1000:.0f} ms ({len(raw) / 2**20:.1f} MiB)",
            ratio,
            "core share < 150 ms",
            measured < 0.150,
        )
    ]


# A small launcher reports the child's peak RSS: measured from this (large) process, the high-water mark would also
# count the pages a forked child shares with its parent before it execs.
_LAUNCHER = (
    "import resource, subprocess, sys, time\n"
    "t = time.perf_counter()\n"
    "r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL)\n"
    "print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, r.returncode)\n"
)


def _run(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, int]:
    """Wall time and peak RSS (KiB) of one child process."""
    out = subprocess.run([sys.executable, "-c", _LAUNCHER, *cmd], capture_output=True, text=True, check=True, env=env)
    elapsed, rss, code = out.stdout.split()
    if code != "0":
        raise RuntimeError(f"{' '.join(cmd)} failed: {out.stderr.strip()}")
    return float(elapsed), int(rss)


def _median_run(cmd: list[str], repeat: int = 5) -> tuple[float, int]:
    runs = [_run(cmd) for _ in range(repeat)]
    return statistics.median(r[0] for r in runs), max(r[1] for r in runs)


def _interleaved(
    cmds: dict[str, list[str]], repeat: int = 5, env: dict[str, str] | None = None
) -> dict[str, tuple[float, int]]:
    """The median wall time and peak RSS of each command, run in turn round after round, so that a change in the
    machine's load falls on all of them alike."""
    runs: dict[str, list[tuple[float, int]]] = {name: [] for name in cmds}
    for _ in range(repeat):
        for name, cmd in cmds.items():
            runs[name].append(_run(cmd, env))
    return {name: (statistics.median(t for t, _ in r), max(m for _, m in r)) for name, r in runs.items()}


def bench_views_process(nodes: int) -> list[Row]:
    """``gpuctl views -o json`` on a snapshot file, against a process that only json.loads the same file."""
    gpuctl = str(Path(sys.executable).with_name("gpuctl"))
    with tempfile.TemporaryDirectory() as tmp:
        snap = Path(tmp) / "snapshot"
        snap.mkdir()
        data = {"apiVersion": "v1", "kind": "List", "items": [*synthetic_devices(nodes), instancetype()]}
        path = snap / "cluster.json"
        path.write_text(json.dumps(data))
        size_kib = path.stat().st_size / 1024
        both = _interleaved(
            {
                "json": [sys.executable, "-c", f"import json; json.load(open({str(path)!r}))"],
                "views": [gpuctl, "views", "-o", "json", "--snapshot", str(snap)],
            }
        )
        (ref, ref_rss), (got, rss) = both["json"], both["views"]
        small = Path(tmp) / "small.json"
        small.write_text(json.dumps(instancetype()))
        _, idle_rss = _median_run([gpuctl, "views", "-o", "json", "--snapshot", str(small)])
    ratio = got / ref
    return [
        Row(
            f"gpuctl views -o json, {nodes}-node snapshot",
            f"{got * 1000:.0f} ms",
            f"python json.load of the file: {ref * 1000:.0f} ms",
            ratio,
            "< 2x",
            ratio < 2.0,
        ),
        Row(
            "peak RSS of that views process",
            f"{rss / 1024:.0f} MiB ({(rss - idle_rss) / 1024:.0f} MiB above views of one InstanceType: {(rss - idle_rss) / size_kib:.1f}x the JSON)",
            f"raw JSON read: {size_kib / 1024:.0f} MiB (json.load alone: {ref_rss / 1024:.0f} MiB)",
            rss / size_kib,
            "< 4x the JSON size",
            rss / size_kib < 4.0,
        ),
    ]


def bench_cluster_snapshot(nodes: int) -> list[Row]:
    """``views -o json`` and ``workloads -A`` on a snapshot of a whole cluster (Nodes, Devices, Pods, Workloads and
    queues, as :func:`simulation_snapshot` builds it), against a process that only json.loads the same file."""
    gpuctl = str(Path(sys.executable).with_name("gpuctl"))
    with tempfile.TemporaryDirectory() as tmp:
        snap = Path(tmp) / "snapshot"
        snap.mkdir()
        path = snap / "cluster.json"
        path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": simulation_snapshot(nodes)}))
        size_kib = path.stat().st_size / 1024
        got = _interleaved(
            {
                "json": [sys.executable, "-c", f"import json; json.load(open({str(path)!r}))"],
                "views": [gpuctl, "views", "-o", "json", "--snapshot", str(snap)],
                "workloads": [gpuctl, "workloads", "-A", "--snapshot", str(snap)],
            }
        )
    (ref, ref_rss), (views, views_rss), (workloads, workloads_rss) = got["json"], got["views"], got["workloads"]
    where = f"{nodes}-node cluster snapshot ({size_kib / 1024:.0f} MiB: Nodes, Devices, Pods, Workloads)"
    reference = f"python json.load of the file: {ref * 1000:.0f} ms"
    return [
        Row(
            f"gpuctl views -o json, {where}", f"{views * 1000:.0f} ms", reference, views / ref, "< 2x", views / ref < 2
        ),
        Row(
            f"gpuctl workloads -A, {where}",
            f"{workloads * 1000:.0f} ms",
            reference,
            workloads / ref,
            "< 2x",
            workloads / ref < 2,
        ),
        Row(
            "gpuctl workloads -A against views on the same snapshot",
            f"{workloads * 1000:.0f} ms",
            f"gpuctl views -o json: {views * 1000:.0f} ms",
            workloads / views,
            "< 1.5x",
            workloads / views < 1.5,
        ),
        *(
            Row(
                f"peak RSS of {what} on that snapshot",
                f"{rss / 1024:.0f} MiB",
                f"raw JSON read: {size_kib / 1024:.0f} MiB (json.load alone: {ref_rss / 1024:.0f} MiB)",
                rss / size_kib,
                "< 4x the JSON size",
                rss / size_kib < 4,
            )
            for what, rss in (("views -o json", views_rss), ("workloads -A", workloads_rss))
        ),
    ]


def bench_gate3(nodes: int) -> list[Row]:
    """One gate-3 verdict on a pool of ``nodes`` nodes: TAS-assigned, and a whole-pool search that finds no room."""
    from gpuctl.core.fit import FitContext, judge_workload
    from gpuctl.core.workloads import parse_resource_flavor, parse_workload
    from testbed.factories import flavor, workload

    with bulk_allocation():
        ledgers = {d.node: d for d in (parse_devices(x) for x in synthetic_devices(nodes))}
    ctx = FitContext({"f-a10g": parse_resource_flavor(flavor("f-a10g"))}, ledgers)
    target = sorted(ledgers)[nodes // 2]
    tas = parse_workload(workload("w", [("main", 1, {"nvidia.com/gpu": "1"})], hosts={"main": [(target, 1)]}))
    pool = parse_workload(workload("w", [("main", 1, {"nvidia.com/gpu": "9"})]))
    reference = median_seconds(lambda: [n for n in ledgers.values() if n.node == target], repeat=9)
    rows = []
    for name, w in (("TAS-assigned node", tas), ("no hostname assignment, no node fits (scans the pool)", pool)):
        t = median_seconds(lambda w=w: judge_workload(w, ctx), repeat=9)  # type: ignore[misc]
        target_ms = 10.0 if w is tas else None
        rows.append(
            Row(
                f"gate-3 verdict, {nodes}-node pool, {name}",
                f"{t * 1000:.2f} ms",
                f"one pass over the pool's records: {reference * 1000:.2f} ms",
                t / reference,
                "< 10 ms" if target_ms else "informational",
                (t * 1000 < target_ms) if target_ms else None,
            )
        )
    return rows


def bench_simulate(nodes: int) -> list[Row]:
    """`gpuctl simulate` on a snapshot of a whole cluster: the simulator's share once the snapshot is read, and the
    whole process against `gpuctl views` on the same snapshot."""
    from gpuctl.cluster import read
    from gpuctl.cluster.snapshot import SnapshotSource
    from gpuctl.core import naming
    from gpuctl.core.simulate import Simulator
    from gpuctl.core.submissions import submissions_from_manifest
    from testbed.factories import container, pod

    gpuctl = str(Path(sys.executable).with_name("gpuctl"))
    manifest = pod(
        [container("main", {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-percentage": "40"})],
        name="embed",
        namespace="team-a",
        queue=naming.queue_entrance("gpustack--nvidia-a10g-linux-amd64"),
    )
    [sub] = submissions_from_manifest(manifest, "pod.yaml")
    with tempfile.TemporaryDirectory() as tmp:
        snap = Path(tmp) / "snapshot"
        snap.mkdir()
        (snap / "cluster.json").write_text(
            json.dumps({"apiVersion": "v1", "kind": "List", "items": simulation_snapshot(nodes)})
        )
        (Path(tmp) / "pod.json").write_text(json.dumps(manifest))
        with bulk_allocation():
            state = read.simulation_state(SnapshotSource(snap))
            after_read = median_seconds(lambda: Simulator(state).simulate(sub))
            ready = Simulator(state)
            one = median_seconds(lambda: ready.copy().simulate(sub, commit=False), repeat=9)
        admitted = ready.simulate(sub, commit=False).admitted
        # Run in turn, round after round, so that a change in the machine's load falls on all of them alike.
        pod = str(Path(tmp) / "pod.json")
        commands = {
            "views": ["views"],
            "simulate": ["simulate", "-f", pod],
            "fragmentation": ["fragmentation"],
            "queue": ["queue"],
            "usage -A": ["usage", "-A"],
        }
        timed = _interleaved(
            {name: [gpuctl, *args, "-o", "json", "--snapshot", str(snap)] for name, args in commands.items()}, repeat=3
        )
        views, whole = timed["views"][0], timed["simulate"][0]
        others = {name: timed[name][0] for name in ("fragmentation", "queue", "usage -A")}
    rows = [
        Row(
            f"gpuctl {command} -o json, {nodes}-node snapshot (whole process)",
            f"{t * 1000:.0f} ms",
            f"gpuctl views -o json on the same snapshot: {views * 1000:.0f} ms",
            t / views,
            "< 2x",
            t / views < 2.0,
        )
        for command, t in others.items()
    ]
    return [
        *rows,
        Row(
            f"simulate one Pod, {nodes}-node snapshot, after it is read (working copy built, five gates)",
            f"{after_read * 1000:.0f} ms" + ("" if admitted else " (held)"),
            f"the same simulation on a copy of a built working copy: {one * 1000:.1f} ms",
            after_read / one,
            "< 300 ms",
            after_read < 0.3,
        ),
        Row(
            f"gpuctl simulate -f pod -o json, {nodes}-node snapshot (whole process)",
            f"{whole * 1000:.0f} ms",
            f"gpuctl views -o json on the same snapshot: {views * 1000:.0f} ms",
            whole / views,
            "informational",
            None,
        ),
    ]


def bench_plan(nodes: int) -> list[Row]:
    """`gpuctl plan partitions` and `plan drain` on a snapshot of a whole cluster of whole H100 cards (the synthetic
    pool's states, one admitted Workload per node, a queue of 3g.40gb requests), against `gpuctl views` on it."""
    gpuctl = str(Path(sys.executable).with_name("gpuctl"))
    three_g = {"nvidia.com/gpu.partitioned": "1", "nvidia.com/gpu.partitioned.mig-3g.40gb": "1"}
    objects = simulation_snapshot(
        nodes, group_id="h100-80gb-hbm3", product="NVIDIA H100 80GB HBM3", memory_mib=81920, pending=three_g
    )
    busy = next(o["spec"]["nodeName"] for o in objects if o["kind"] == "Pod")
    with tempfile.TemporaryDirectory() as tmp:
        snap = Path(tmp) / "snapshot"
        snap.mkdir()
        (snap / "cluster.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
        runs = {
            "views": [gpuctl, "views", "-o", "json", "--snapshot", str(snap)],
            "plan partitions": [gpuctl, "plan", "partitions", "-o", "json", "--snapshot", str(snap)],
            f"plan drain {busy}": [gpuctl, "plan", "drain", busy, "-o", "json", "--snapshot", str(snap)],
        }
        # Interleaved, so the machine's load weighs on the reference as on the plans.
        times: dict[str, list[float]] = {name: [] for name in runs}
        for _ in range(5):
            for name, cmd in runs.items():
                times[name].append(_run(cmd)[0])
        measured = {name: statistics.median(t) for name, t in times.items()}
        views = measured.pop("views")
        found = json.loads(subprocess.run(runs["plan partitions"], capture_output=True, text=True, check=True).stdout)
    [summary] = found["plans"]
    detail = f"{summary['switches']} switch(es) admit {len(summary['admittedAfter'])} of {len(summary['demand'])}"
    return [
        Row(
            f"gpuctl {name} -o json, {nodes}-node H100 snapshot (whole process)"
            + (f"; {detail}" if name == "plan partitions" else ""),
            f"{t * 1000:.0f} ms",
            f"gpuctl views -o json on the same snapshot: {views * 1000:.0f} ms",
            t / views,
            "< 3x",
            t / views < 3.0,
        )
        for name, t in measured.items()
    ]


def _load(
    url_host: str, port: int, ca: Path, path: str, body: bytes, rate: float, seconds: float, workers: int
) -> tuple[list[float], int, float]:
    """Send ``body`` at ``rate`` requests/s (0: as fast as ``workers`` keep-alive connections go) for ``seconds``.

    Returns the latencies, the errors and the elapsed time. Bounded in count and time; loopback only.
    """
    import http.client
    import ssl
    import threading

    ctx = ssl.create_default_context(cafile=str(ca))
    latencies: list[float] = []
    errors = 0
    lock = threading.Lock()
    start = time.perf_counter()
    deadline = start + seconds
    interval = workers / rate if rate else 0.0

    def worker(offset: float) -> None:
        nonlocal errors
        conn = http.client.HTTPSConnection(url_host, port, context=ctx, timeout=10)
        next_at = start + offset
        while True:
            now = time.perf_counter()
            if now >= deadline:
                break
            if interval and now < next_at:
                time.sleep(next_at - now)
            sent = time.perf_counter()
            try:
                conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
                response = conn.getresponse()
                data = response.read()
                ok = response.status == 200 and b'"allowed"' in data
            except OSError:
                ok = False
                conn.close()
                conn = http.client.HTTPSConnection(url_host, port, context=ctx, timeout=10)
            took = time.perf_counter() - sent
            with lock:
                latencies.append(took)
                errors += 0 if ok else 1
            next_at += interval
        conn.close()

    threads = [
        threading.Thread(target=worker, args=(i * interval / workers if interval else 0.0,)) for i in range(workers)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return latencies, errors, time.perf_counter() - start


def bench_webhook(_nodes: int) -> list[Row]:
    """The Pod webhook's round trip over TLS on loopback at 200 requests/s, and what the server sustains."""
    from gpuctl.core.instancetypes import parse_instancetype
    from gpuctl.core.webhooks import WebhookContext
    from gpuctl.operator.metrics import Metrics
    from gpuctl.operator.server import CertificateReloader, WebhookServer
    from testbed.request_examples import EXAMPLES

    class Fixed:
        def __init__(self) -> None:
            self.ctx = WebhookContext(instancetypes=(parse_instancetype(instancetype()),))

        def webhook_context(self, namespace: str, obj: Any = None) -> WebhookContext:
            return self.ctx

    pod = next(e for e in EXAMPLES if e.id == "rule2-accept").pod
    body = json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {"uid": "bench", "operation": "CREATE", "namespace": "default", "object": pod},
        }
    ).encode()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        cert, key, ca = loopback_tls_files(Path(tmp))
        server = WebhookServer(
            ("127.0.0.1", 0),
            CertificateReloader(str(cert), str(key)),
            Fixed(),
            Metrics(),
            ready=lambda: [],
            healthy=lambda: [],
        ).start()
        port = server.port
        try:
            # Reference: the same transport answering /healthz (TLS, HTTP, keep-alive; no admission work).
            ref, _, _ = _load("127.0.0.1", port, ca, "/healthz", b"", 200, 5, 8)
            lat, errors, _ = _load("127.0.0.1", port, ca, "/mutate-pod-accelerators", body, 200, 10, 8)
            p50, p99 = _percentile(lat, 50), _percentile(lat, 99)
            ref_p99 = _percentile(ref, 99)
            rows.append(
                Row(
                    "Pod webhook round trip at 200 req/s, 10 s, TLS loopback",
                    f"p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms, {errors} errors of {len(lat)}",
                    f"transport only (GET /healthz): p99 {ref_p99 * 1000:.1f} ms",
                    p99 / ref_p99,
                    "p99 < 20 ms, 0 errors",
                    p99 < 0.020 and errors == 0,
                )
            )
            lat, errors, took = _load("127.0.0.1", port, ca, "/mutate-pod-accelerators", body, 0, 5, 8)
            rows.append(
                Row(
                    "Pod webhook sustained, 8 keep-alive clients, 5 s",
                    f"{len(lat) / took:.0f} req/s, {errors} errors",
                    "-",
                    None,
                    "informational",
                    None,
                )
            )
        finally:
            server.shutdown()
    return rows


def _percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * pct / 100))] if ordered else float("nan")


def _installed_gpuctl() -> Path:
    """gpuctl as users install it (a regular, not an editable, install), in a venv of its own under build/."""
    venv = ROOT / "build" / "bench-venv"
    script = venv / "bin" / "gpuctl"
    if not script.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet", str(ROOT)], check=True)
    else:
        subprocess.run(
            [str(venv / "bin" / "pip"), "install", "--quiet", "--no-deps", "--force-reinstall", str(ROOT)], check=True
        )
    return script


NODE_KEYS = {
    "cpu": "64",
    "memory": "512Gi",
    "pods": "110",
    "nvidia.com/gpu": "8",
    "credits.gpustack.ai/nvidia": str(8 * M),
}
"""What a kubelet reports of a pool node (the Node objects of the live benchmark)."""


def bench_live(nodes: int) -> list[Row]:
    """`gpuctl views -o json` against a real API server holding ``nodes`` Nodes and their Devices, against
    `kubectl get devices -o json` on the same server (whole processes). views lists the Nodes too (as metadata
    only): a Devices object whose Node is gone counts nowhere."""
    from concurrent.futures import ThreadPoolExecutor

    from gpuctl.cluster import kinds
    from gpuctl.cluster.live import Connection, LiveSource
    from testbed.controlplane import ControlPlane, bin_dir
    from testbed.factories import node

    binaries = bin_dir()
    kubectl = binaries / "kubectl"
    gpuctl = str(Path(sys.executable).with_name("gpuctl"))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        cp = ControlPlane(work_dir=Path(tmp), bin_dir=binaries, with_kueue=False)
        cp.start()
        try:
            source = LiveSource(Connection(str(cp.kubeconfig)))
            it = instancetype()
            it_status = it.pop("status")
            source.create(kinds.INSTANCETYPE, it)
            source.patch(
                kinds.INSTANCETYPE,
                it["metadata"]["name"],
                {"status": {**ZERO_VIEWS, **it_status}},
                subresource="status",
            )

            def put(obj: dict[str, Any]) -> None:
                status = obj.pop("status")
                name = obj["metadata"]["name"]
                source.create(kinds.NODE, node(name, labels=obj["metadata"]["labels"], allocatable=NODE_KEYS))
                source.create(kinds.DEVICES, obj)
                source.patch(kinds.DEVICES, name, {"status": status}, subresource="status")

            started = time.perf_counter()
            with ThreadPoolExecutor(8) as pool:
                list(pool.map(put, synthetic_devices(nodes)))
            print(f"loaded {nodes} Nodes and Devices in {time.perf_counter() - started:.0f}s", file=sys.stderr)
            kc = str(cp.kubeconfig)
            ref, ref_rss = _median_run([str(kubectl), "--kubeconfig", kc, "get", "devices", "-o", "json"], repeat=3)
            got, rss = _median_run([gpuctl, "views", "-o", "json", "--kubeconfig", kc], repeat=3)
            rows.append(
                Row(
                    f"gpuctl views -o json, live, {nodes} Nodes and Devices",
                    f"{got * 1000:.0f} ms (peak RSS {rss / 1024:.0f} MiB)",
                    f"kubectl get devices -o json: {ref * 1000:.0f} ms (peak RSS {ref_rss / 1024:.0f} MiB)",
                    got / ref,
                    "< 1x",
                    got / ref < 1.0,
                )
            )
        finally:
            cp.stop()
    return rows


def bench_startup(_nodes: int) -> list[Row]:
    """`gpuctl --help`, `gpuctl version` and a shell completion, as users install gpuctl, against `kubectl --help`."""
    from testbed.controlplane import bin_dir

    kubectl = bin_dir() / "kubectl"
    gpuctl = str(_installed_gpuctl())
    bare, _ = _median_run([sys.executable, "-c", "pass"], repeat=9)
    k_help, _ = _median_run([str(kubectl), "--help"], repeat=9)
    rows = []
    for args in (["--help"], ["version"]):
        t, _ = _median_run([gpuctl, *args], repeat=9)
        rows.append(
            Row(
                f"gpuctl {' '.join(args)}",
                f"{t * 1000:.0f} ms",
                f"kubectl --help: {k_help * 1000:.0f} ms (python -c pass: {bare * 1000:.0f} ms)",
                t / k_help,
                "< 2x kubectl --help",
                t / k_help < 2.0,
            )
        )
    # A command that runs the app itself (Typer, the command, the core) on the small example snapshot.
    t, _ = _median_run([gpuctl, "views", "--snapshot", str(ROOT / "examples" / "snapshot")], repeat=9)
    rows.append(
        Row(
            "gpuctl views on the example snapshot (the whole app)",
            f"{t * 1000:.0f} ms",
            f"kubectl --help: {k_help * 1000:.0f} ms",
            t / k_help,
            "informational",
            None,
        )
    )
    env = {**os.environ, "COMP_WORDS": "gpuctl views --by", "COMP_CWORD": "2", "_GPUCTL_COMPLETE": "complete_bash"}
    runs = []
    for _ in range(9):
        started = time.perf_counter()
        subprocess.run([gpuctl], env=env, capture_output=True, check=True)
        runs.append(time.perf_counter() - started)
    t = statistics.median(runs)
    rows.append(
        Row(
            "shell completion (gpuctl views --by<TAB>)",
            f"{t * 1000:.0f} ms",
            f"kubectl --help: {k_help * 1000:.0f} ms",
            t / k_help,
            "< 2x kubectl --help",
            t / k_help < 2.0,
        )
    )
    return rows


def _tabs(cmd: list[str], words: str, env: dict[str, str], repeat: int) -> tuple[float, float, list[str]]:
    """bash asking for the completion of ``words``: the first TAB (nothing remembered yet), the median of those that
    follow, and the candidates."""
    tab = {
        **env,
        "COMP_WORDS": words,
        "COMP_CWORD": str(len(words.split()) - (0 if words.endswith(" ") else 1)),
        "_GPUCTL_COMPLETE": "complete_bash",
    }
    times = []
    out = ""
    for _ in range(repeat + 1):
        started = time.perf_counter()
        out = subprocess.run(cmd, env=tab, capture_output=True, text=True, check=True).stdout
        times.append(time.perf_counter() - started)
    return times[0], statistics.median(times[1:]), out.split()


def bench_completion(_nodes: int) -> list[Row]:
    """TAB on a name, from the example snapshot, as users install gpuctl: the first TAB reads the snapshot, the next
    ones are answered from what it read."""
    gpuctl = str(_installed_gpuctl())
    snapshot = ROOT / "examples" / "snapshot"
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "GPUCTL_CACHE_DIR": cache}
        rows = []
        for shown, words in (
            ("views ", f"gpuctl views --snapshot {snapshot} "),
            ("explain workload team-a/", f"gpuctl explain workload --snapshot {snapshot} team-a/"),
        ):
            first, warm, names = _tabs([gpuctl], words, env, 9)
            if not names:
                raise RuntimeError(f"no names completed for {words!r}")
            rows.append(
                Row(
                    f"name completion (gpuctl {shown}<TAB>), example snapshot",
                    f"{warm * 1000:.0f} ms (the first TAB, reading the snapshot: {first * 1000:.0f} ms)",
                    "a person notices 150 ms",
                    warm / 0.150,
                    "< 150 ms",
                    warm < 0.150,
                )
            )
    return rows


def bench_local_cluster(_nodes: int) -> list[Row]:
    """On ``make cluster`` (etcd, kube-apiserver, Kueue, the operator, the example pools), as users install gpuctl:
    name completion, and ``views`` and ``explain`` against ``kubectl get`` of the same objects, with where gpuctl's
    time goes."""
    from testbed.controlplane import bin_dir

    gpuctl = _installed_gpuctl()
    python = str(gpuctl.with_name("python"))
    kubectl = str(bin_dir() / "kubectl")
    with tempfile.TemporaryDirectory() as tmp:
        env = {
            **os.environ,
            "GPUCTL_LOCAL_CLUSTER": str(Path(tmp) / "cluster"),
            "GPUCTL_CACHE_DIR": str(Path(tmp) / "c"),
        }
        up = subprocess.run(
            [sys.executable, "-m", "hack.cluster.local", "up"], env=env, cwd=ROOT, capture_output=True, text=True
        )
        if up.returncode != 0:
            raise RuntimeError(f"make cluster failed: {up.stderr.strip()[-400:]}")
        try:
            kc = up.stdout.strip().rpartition("=")[2]
            env["KUBECONFIG"] = kc
            rows = []
            first, warm, names = _tabs([str(gpuctl)], "gpuctl explain workload team-a/", env, 9)
            if not names:
                raise RuntimeError("no Workload names completed on the local cluster")
            rows.append(
                Row(
                    "name completion (gpuctl explain workload team-a/<TAB>), make cluster",
                    f"{warm * 1000:.0f} ms (the first TAB, reading the cluster: {first * 1000:.0f} ms)",
                    "a person notices 150 ms",
                    warm / 0.150,
                    "< 150 ms",
                    warm < 0.150,
                )
            )
            workload = names[0]
            namespace, name = workload.split("/", 1)
            cases = {
                "views": ([str(gpuctl), "views"], [kubectl, "get", "instancetypes"], ["views", kc]),
                f"explain workload {workload}": (
                    [str(gpuctl), "explain", "workload", workload],
                    [kubectl, "get", "workloads.kueue.x-k8s.io", "-n", namespace, name],
                    ["explain", kc, workload],
                ),
            }
            bare = _interleaved({"python": [python, "-c", "pass"]}, 9, env)["python"][0]
            for what, (ours, theirs, phases) in cases.items():
                got = _interleaved({"gpuctl": ours, "kubectl": theirs}, 7, env)
                (t, _), (k, _) = got["gpuctl"], got["kubectl"]
                split = [
                    json.loads(
                        subprocess.run(
                            [python, str(ROOT / "bench" / "live_phases.py"), *phases],
                            env=env,
                            capture_output=True,
                            text=True,
                            check=True,
                        ).stdout
                    )
                    for _ in range(7)
                ]
                parts = {key: statistics.median(p[key] for p in split) for key in split[0]}
                # What the phases leave out: Typer building and parsing the command line, and the exit.
                other = max(0.0, t - bare - sum(parts.values()))
                breakdown = ", ".join(
                    f"{key} {value * 1000:.0f}" for key, value in {"interpreter": bare, **parts, "other": other}.items()
                )
                rows.append(
                    Row(
                        f"gpuctl {what}, live on make cluster (whole process)",
                        f"{t * 1000:.0f} ms ({breakdown} ms)",
                        f"kubectl {' '.join(theirs[1:])}: {k * 1000:.0f} ms",
                        t / k,
                        "informational: as close as the design allows",
                        None,
                    )
                )
            return rows
        finally:
            subprocess.run([sys.executable, "-m", "hack.cluster.local", "down"], env=env, cwd=ROOT, capture_output=True)


def _median_in(cmd: list[str], env: dict[str, str], repeat: int) -> float:
    runs = []
    for _ in range(repeat):
        started = time.perf_counter()
        subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        runs.append(time.perf_counter() - started)
    return statistics.median(runs)


def bench_plugin(_nodes: int) -> list[Row]:
    """The kubectl plugin as krew lays it out (``make dist``'s archive unpacked), on every Python this machine has
    that gpuctl supports: its first run (which compiles the sources for that version) and later runs, each version
    in turn round after round, against the same plugin on Python 3.11 and against ``kubectl --help``."""
    import tarfile

    from hack import dist
    from testbed.controlplane import bin_dir
    from testbed.pythons import SUPPORTED, available

    kubectl = bin_dir() / "kubectl"
    k_help, _ = _median_run([str(kubectl), "--help"], repeat=9)
    snapshot = str(ROOT / "examples" / "snapshot")
    pythons = available()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "dist"
        dist.main(["--out", str(out)])
        [archive] = out.glob("gpuctl-v*.tar.gz")
        layouts: dict[tuple[int, int], tuple[str, dict[str, str]]] = {}
        first: dict[tuple[int, int], float] = {}
        for (major, minor), python in pythons.items():
            plugin = Path(tmp) / f"plugin-{major}.{minor}"
            with tarfile.open(archive) as tar:
                tar.extractall(plugin, filter="data")
            shim = Path(tmp) / f"python-{major}.{minor}"
            shim.mkdir()
            (shim / "python3").symlink_to(python)
            # As a user runs it: python3 on PATH, bytecode written where the plugin is installed.
            env = {"PATH": f"{shim}:/usr/bin:/bin", "HOME": tmp, "NO_COLOR": "1"}
            launcher = str(plugin / "kubectl-gpuctl")
            layouts[(major, minor)] = (launcher, env)
            first[(major, minor)] = _median_in([launcher, "views", "--snapshot", snapshot], env, repeat=1)
        views: dict[tuple[int, int], list[float]] = {v: [] for v in layouts}
        helps: dict[tuple[int, int], list[float]] = {v: [] for v in layouts}
        for _ in range(9):
            for version, (launcher, env) in layouts.items():
                views[version].append(_median_in([launcher, "views", "--snapshot", snapshot], env, repeat=1))
                helps[version].append(_median_in([launcher, "--help"], env, repeat=1))
    warm = {v: statistics.median(t) for v, t in views.items()}
    reference = warm.get((3, 11))
    for (major, minor), t in warm.items():
        helped = statistics.median(helps[(major, minor)])
        rows.append(
            Row(
                f"plugin --help, Python {major}.{minor}",
                f"{helped * 1000:.0f} ms",
                f"kubectl --help: {k_help * 1000:.0f} ms",
                helped / k_help,
                "< 2x kubectl --help",
                helped / k_help < 2.0,
            )
        )
        rows.append(
            Row(
                f"plugin views on the example snapshot, Python {major}.{minor}",
                f"{t * 1000:.0f} ms (first run, compiling: {first[(major, minor)] * 1000:.0f} ms)",
                f"the plugin on Python 3.11: {reference * 1000:.0f} ms" if reference else "no Python 3.11 here",
                t / reference if reference else None,
                "< 1.2x Python 3.11's",
                t / reference < 1.2 if reference else None,
            )
        )
    missing = [f"{v[0]}.{v[1]}" for v in SUPPORTED if v not in pythons]
    rows.append(
        Row(
            "Pythons the plugin was measured on",
            ", ".join(f"{v[0]}.{v[1]}" for v in pythons) or "none",
            f"not on this machine: {', '.join(missing) or 'none'}",
            None,
            "every supported version here",
            bool(pythons),
        )
    )
    return rows


MEMORY_BEFORE = "1238 MiB = 161 % of the limit, 40 of 48 reviews unanswered"
"""The same mix on the same cache before reviews were admitted by their cost (by their body's bytes), measured once."""


def bench_operator_memory(nodes: int) -> list[Row]:
    """The operator's peak RSS under the worst concurrent mix of maximal reviews, its cache holding the synthetic
    cluster, as a share of its memory limit (``bench.operator_memory``)."""
    from bench.operator_memory import LIMIT, MIX, measure

    with tempfile.TemporaryDirectory() as tmp:
        r = measure(Path(tmp), nodes=nodes)
    judged = r.outcomes.get("judged", 0)
    refused = ", ".join(f"{n} {k}" for k, n in sorted(r.outcomes.items()) if k != "judged")
    return [
        Row(
            f"operator peak RSS, {len(MIX)} concurrent 6.9 MiB reviews x 2 rounds (the costliest shapes on 4 webhooks), "
            f"{nodes}-node cache",
            f"{r.peak >> 20} MiB = {100 * r.fraction:.0f} % of the {LIMIT >> 20} MiB limit; {judged} judged, {refused}"
            + (f", {len(r.failures)} unanswered" if r.failures else ""),
            f"the cache loaded: {r.baseline >> 20} MiB (before the cost budget: {MEMORY_BEFORE})",
            r.peak / r.baseline,
            "< 60 % of the limit, every review answered",
            r.fraction < 0.6 and not r.failures and r.exit_code is None,
        )
    ]


def bench_no_bytecode_writes(_nodes: int) -> list[Row]:
    """The plugin (``make dist``'s archive unpacked) and an installed ``gpuctl`` (the wheel, in fresh environments that
    reuse this one's libraries: installed by pip, which compiles it, and with ``--no-compile``, where only the wheel's
    own bytecode is there) running ``views`` on the example snapshot with ``PYTHONDONTWRITEBYTECODE=1``, as many images
    set it, against the same with bytecode written, in alternation; the ratio is the median of each pair's."""
    import tarfile

    from hack import dist

    snapshot = str(ROOT / "examples" / "snapshot")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "dist"
        dist.main(["--out", str(out)])
        [archive] = out.glob("gpuctl-v*.tar.gz")
        plugin = Path(tmp) / "plugin"
        with tarfile.open(archive) as tar:
            tar.extractall(plugin, filter="data")
        shim = Path(tmp) / "python"
        shim.mkdir()
        (shim / "python3").symlink_to(os.path.realpath(sys.executable))
        base = {"PATH": f"{shim}:/usr/bin:/bin", "HOME": tmp, "NO_COLOR": "1"}
        wheels = Path(tmp) / "wheels"
        subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(wheels), str(ROOT)], check=True
        )
        [wheel] = wheels.glob("*.whl")
        here = next(p for p in sys.path if p.endswith("site-packages"))
        commands = {"plugin": [str(plugin / "kubectl-gpuctl"), "views", "--snapshot", snapshot]}
        for what, options in (
            ("installed gpuctl", []),
            ("installed gpuctl (--no-compile: the wheel's bytecode alone)", ["--no-compile"]),
        ):
            venv = Path(tmp) / f"venv{len(commands)}"
            subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
            site = next((venv / "lib").glob("python3.*/site-packages"))
            (site / "libraries.pth").write_text(here + "\n")
            python = str(venv / "bin" / "python")
            pip = [sys.executable, "-m", "pip", "--python", python, "install", "--quiet", "--no-deps", *options]
            subprocess.run([*pip, str(wheel)], check=True)
            where = subprocess.run(
                [python, "-c", "import gpuctl; print(gpuctl.__file__)"],
                capture_output=True,
                text=True,
                check=True,
                cwd=tmp,  # not this checkout, which `-c` would put first on the path
            )
            assert where.stdout.startswith(str(site)), where.stdout  # the wheel's gpuctl, not this checkout's
            commands[what] = [str(venv / "bin" / "gpuctl"), "views", "--snapshot", snapshot]
        frozen = {**base, "PYTHONDONTWRITEBYTECODE": "1"}
        times: dict[tuple[str, bool], list[float]] = {(w, f): [] for w in commands for f in (False, True)}
        for cmd in commands.values():
            _median_in(cmd, base, repeat=1)  # bytecode written where it may be, as a first run does
        for _ in range(9):
            for what, cmd in commands.items():
                times[(what, False)].append(_median_in(cmd, base, repeat=1))
                times[(what, True)].append(_median_in(cmd, frozen, repeat=1))
    rows = []
    for what in commands:
        with_writes = statistics.median(times[(what, False)])
        without = statistics.median(times[(what, True)])
        ratio = statistics.median(a / b for a, b in zip(times[(what, True)], times[(what, False)], strict=True))
        rows.append(
            Row(
                f"{what} views on the example snapshot, PYTHONDONTWRITEBYTECODE=1",
                f"{without * 1000:.0f} ms",
                f"the same, bytecode written: {with_writes * 1000:.0f} ms",
                ratio,
                "< 1.5x with bytecode written",
                ratio < 1.5,
            )
        )
    return rows


BENCHMARKS: dict[str, Callable[[int], list[Row]]] = {
    "startup": bench_startup,
    "completion": bench_completion,
    "plugin": bench_plugin,
    "no-bytecode-writes": bench_no_bytecode_writes,
    "local-cluster": bench_local_cluster,
    "live": bench_live,
    "webhook": bench_webhook,
    "gate3": bench_gate3,
    "views-core": bench_views_core,
    "views-process": bench_views_process,
    "cluster-snapshot": bench_cluster_snapshot,
    "simulate": bench_simulate,
    "plan": bench_plan,
    "operator-memory": bench_operator_memory,
}


def render(rows: list[Row], nodes: int) -> str:
    lines = [
        "# Benchmarks",
        "",
        "Written by `make bench` (`python -m bench.run --write docs/benchmarks.md`). Every figure is the median of",
        "several runs; targets are ratios against a reference measured in the same run, because the",
        "machine is shared and noisy.",
        "",
        f"Last run: {time.strftime('%Y-%m-%d')} on {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
        f"synthetic pool of {nodes} nodes x 8 A10G cards (60 % free, 15 % sliced, 10 % shared, 15 % exclusive).",
        "",
        "| benchmark | measured | reference | ratio | target | met |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        ratio = f"{r.ratio:.2f}x" if r.ratio is not None else "-"
        met = {True: "yes", False: "**no**", None: "-"}[r.ok]
        lines.append(f"| {r.name} | {r.measured} | {r.reference} | {ratio} | {r.target} | {met} |")
    lines += ["", NOTES]
    return "\n".join(lines) + "\n"


NOTES = """Notes:
- Start-up is measured on a regular (non-editable) install in `build/bench-venv`; an editable install adds about
  9 ms of import-hook overhead to every Python process. Help, `version` and the completion of command names and
  flags are answered from a table generated from the command tree (`gpuctl.cli.startup`) without importing Typer,
  whose import alone takes longer than kubectl's whole `--help` here; the "whole app" row is a command that runs
  Typer, the command and the core.
- Peak RSS: the views of a single InstanceType already hold about 22 MiB (the interpreter, Typer, the command's
  module, the core); what the views add above it is what grows with the snapshot.
- Commands compared in one row are run in turn, round after round (medians), so a change in the machine's load falls
  on all of them alike; the machine is shared, and absolute figures move by 2x between runs.
- Rows timed inside the benchmark's own process (views core, gate-3 verdicts, simulate after the read) are the CPU
  time the work takes, the median of several runs: its wall time would also count the time other processes of the
  shared machine hold the cores. Whole-process rows are wall times.
- The cluster snapshot is the simulation's (`simulation_snapshot`): 5,000 Nodes with their Devices, a Running Pod
  holding each node's taken cards and its admitted Workload, the pool's queues, and 10 Workloads waiting. `views`
  reads the Devices and the Nodes' names; `workloads -A` reads every Pod and Workload and explains each, reading
  the Nodes and Devices of the nodes a gate judges.
- Name completion rows: the first TAB starts the app and reads the snapshot or the cluster; the TABs after are
  answered from what it read (`gpuctl.cli.namecache`), the median of 9.
- Live rows run against `make cluster` (started by the benchmark in a directory of its own): the breakdown is
  measured inside one process (`bench/live_phases.py`) beside a bare interpreter's start, and "other" is what the
  whole process takes beyond them (Typer building and parsing the command line, the exit); kubectl is one Go
  binary, with neither.
- The plugin rows run `make dist`'s archive unpacked as krew installs it, with the `python3` on PATH being each
  version in turn: its first run compiles the plugin's sources for that version (beside them, as any install
  does), later runs start from that bytecode; the archive carries the building Python's (3.11's) already. kubectl
  execs the plugin, so `kubectl gpuctl` adds kubectl's own start.
- The `PYTHONDONTWRITEBYTECODE=1` rows run the plugin (the archive unpacked, on the building Python) and the wheel
  installed into fresh environments (by pip, which compiles it as it installs, and with `--no-compile`, which
  leaves only the bytecode the wheel carries), each against itself with bytecode written, 9 rounds in alternation;
  the ratio is the median of the rounds'. Another Python than the building one compiles the plugin on every run
  where it may not write bytecode: still correct, about 2x a run from bytecode.
- The whole-pool gate-3 scan only happens for a PodSet without a hostname-level assignment; every queue the operator
  derives is TAS-only, so the TAS row is the one the check runs.

## The profiles behind the figures

Each was profiled first (cProfile for time, tracemalloc for memory, CPU seconds where the machine was loaded), and
the cause fixed where the profile put it.

- **`workloads -A`, 5,000-node cluster snapshot: 5.1-7 s before, now 0.7-0.8 s.** 4.1 s of a 9.6 s profile was
  `explain._own_pods`: each of 4,901 Workloads scanned all 4,891 Pods for its own. `check_inputs` now indexes the
  Pods by (namespace, Workload). The next costs were per-Workload work on shapes a cluster repeats: the quota book
  summed each Pod's requests with Fractions (0.20 s; now once per Pod shape), gate 1 re-read every PodSet template
  (0.22 s; now once per PodSet shape), each Node, Pod and Workload was decoded twice, to check the snapshot and
  again for the read (about 14 us each; a command that reads them as records now has them parsed as they are
  read), and every node's ledger was rebuilt from its Pods (170-200 ms of CPU) where only the Workloads still
  waiting are judged at gate 3 (each ledger is now rebuilt when a verdict first reads it).
- **`workloads -A` against `views` on that snapshot: 1.9x, now 1.35-1.45x.** Timed inside one process, function
  by function (CPU, the same machine, the version before and this one in turn): the read parsed all 5,000 Devices
  (90-100 ms) and Nodes (50-60 ms), and explaining the admitted Workloads reads none of them; the check's inputs
  indexed the held Pods and the Workloads by node (20 ms) for verdicts that never run. The Nodes and ledgers are
  now records by name, each parsed when first read (`read.node_map`, `read.ledger_map`: a snapshot keeps their
  text), and the two indexes are made when a verdict first reads them; a malformed ledger is refused, in one line,
  when it is read. A frozen dataclass sets each field through `object.__setattr__` (about 130 ns a field against
  25 ns for a plain one): the records built for every object and every gate (conditions, check states, topology
  domains, a Pod's cards, each of a Workload's five gate verdicts) are named tuples, built several times faster. A
  PodSet's shape key is made once as it is parsed, and gate 1 and the quota book key on it (each made its own
  before); a table's items no longer get the metadata only structured output shows. Pods 99-114 ms, now 71-73;
  Workloads 88-102, now 82-85 (their shape key moved here); explanations 86, now 63-74; quota book 37, now 27;
  table 34-40, now 20-28; the check's inputs 23, now 5. What remains beyond `views` is parsing the Pods and
  Workloads every explanation reads, the explanations and the table.
- **`views -o json`, 5,000-node snapshot: peak RSS 49 MiB (4.9x the JSON), now 36 MiB (3.6x).** tracemalloc at the
  end of the read: the file was read whole, its bytes and its text held together (20 MiB) before the first item was
  decoded; 5,000 identical `Capability` records, one per node; and each node's own copies of the label strings (2.2
  MiB). The file is now decoded through a window of 256 KiB, one `Capability` serves every identical card of a read,
  and labels and group names are interned. Parsing the 5,000 Devices: 127 ms, now 104 ms (the same process, A/B), by
  reusing the previous card's capability when a card reports the same status.
- **`views -o json`, cluster snapshot: peak RSS 152 MiB (6.5x), now 58 MiB (2.5x); 0.9-1.3 s, now about 0.6 s.**
  Every object but the Devices was kept as a dict, about six times its JSON text; they are kept as their text, by
  kind, and `views` decodes only what it reads. Interning the strings a cluster's records repeat took the Nodes'
  records from 13.4 to 5.1 MiB and `workloads -A`'s peak from 128 to 116 MiB; keeping no object of a kind parsed
  into records as it is read, and rebuilding only the ledgers a verdict reads, to 80 MiB (3.5x).
- **`usage`, `queue` and `fragmentation` on that snapshot decoded each Pod and Workload twice** (about 14 us each):
  once to check the snapshot, again from the text kept for their read. Each now says first which kinds it reads as
  records (`read.read_as_records`), as `workloads` does: 7-9 % of CPU and 25-30 MiB of peak RSS less. Their rows
  are ratios against `views`, whose time on this snapshot fell from about 0.8 s to 0.5-0.7 s.
- **Name completion: 250-460 ms, now about 30 ms after the first TAB.** A TAB ran the app (Typer and every command
  module, about 150 ms), then read the snapshot or imported the client and connected (350 ms and more), to print a
  few names. The names read are now kept (`gpuctl.cli.namecache`) and the start-up table, which knows what each
  argument completes from, answers the next TAB from them without starting the app.
- **Live reads: importing the client took 0.32-0.37 s of CPU, now 0.14-0.16 s.** `import kubernetes` loads about
  815 modules (every API class and every model); a read uses 13. The client's packages are now loaded without their
  initialisers (any other name runs them, so the whole client is there for whoever asks). What remains is in the
  breakdown: the interpreter's own start, the app's imports (Typer, the root group and the command's module), the
  client's own dependencies (urllib3, the date parser its API client imports, requests and oauthlib for the
  kubeconfig's auth providers: about 140 ms together), the kubeconfig and the TLS handshake, and the requests
  themselves (3 for `views`, about 10 for `explain`, each a few ms on loopback).
- **The plugin on each Python.** Run in turn, 12 rounds, the plugin's `views` took 0.31-0.35 s of CPU on 3.10, 3.11,
  3.12 and 3.13 alike; a version's first run compiles the sources (0.6-0.8 s on every version). A plugin shipped as
  one archive of one version's bytecode recompiles everything on every run of any other version; this one ships
  sources with the building version's bytecode beside them (3.11 starts from it even under
  `PYTHONDONTWRITEBYTECODE=1`), and each other Python compiles them once — or, where it may not write bytecode,
  on every run.
- **Where no bytecode may be written (`PYTHONDONTWRITEBYTECODE=1`, as many images set it).** Whole processes, the
  two in alternation, 7 runs each: the plugin without the bytecode it now carries compiled what it imports on every
  run, 1.8x the same plugin with it; an installed gpuctl whose installer compiled nothing (`pip install
  --no-compile`) did the same, 1.8x. The archive and the wheel now carry the building Python's bytecode, hash-based
  (the archive's unchecked, its sources never change; the wheel's checked against each source, so an edited file
  is compiled again), which that Python reads without writing anything. And where one user installs the plugin and
  another runs it (the install not writable), the launcher sent Python to that user's cache for bytecode, which hid
  the archive's: 2.8x the run that reads it, as the launcher now lets it (it uses the cache only for a version the
  archive has no bytecode for)."""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", type=Path, help="write the results as Markdown to this file")
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--only", choices=sorted(BENCHMARKS), action="append")
    args = parser.parse_args()
    rows: list[Row] = []
    for name, bench in BENCHMARKS.items():
        if args.only and name not in args.only:
            continue
        print(f"running {name} ...", file=sys.stderr)
        rows.extend(bench(args.nodes))
    text = render(rows, args.nodes)
    print(text)
    if args.write:
        from bench.scale import BEGIN, END, SCRAPE_BEGIN, SCRAPE_END

        # Keep the sections `make bench-scale` and `python -m bench.scale --scrape` write (runs of their own).
        old = args.write.read_text() if args.write.exists() else ""
        for begin, end in ((BEGIN, END), (SCRAPE_BEGIN, SCRAPE_END)):
            if begin in old and end in old:
                text += "\n" + begin + old.split(begin, 1)[1].split(end, 1)[0] + end + "\n"
        args.write.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
