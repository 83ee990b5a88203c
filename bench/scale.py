"""``make bench-scale``: the operator at cluster scale on the real control plane (etcd, kube-apiserver, Kueue).

For each size (1,000 and 5,000 nodes x 8 A10G cards), a pool is built the way the operator derives one: ready Nodes
with the pool's labels and capacity, their Devices ledgers, 2 Pods per node holding a card each (their allocation
records), and one admitted Workload per Pod with its topology assignment, as Kueue leaves them. Then the operator is
started with its API traffic going through a counting TCP proxy, and measured:

- webhooks ready (``/readyz``) and cache synced after start;
- idle operator CPU and idle API traffic over a window after the sync settled;
- RSS after the sync and its peak;
- the gate-3 verdict latency of 20 new Workloads: from just before the quota reservation is written to the moment a
  watch on Workloads sees the check's verdict (a watch cannot time the reservation itself: both events can arrive in
  one read).

Every Workload's reservation is written in the shape Kueue writes it (``QuotaReserved``, the admission with its
flavor and hostname-level topology assignment, the check ``Pending``), in a queue whose LocalQueue does not exist, so
Kueue's own scheduler never races the setup: what is measured is the operator. (Kueue's scheduling of Workloads the
check holds or lets through is covered by the integration suite.)

It writes its results between the scale markers of docs/benchmarks.md (``make bench`` keeps that section).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from gpuctl.cluster import kinds
from gpuctl.cluster.live import Connection, LiveSource
from gpuctl.core import naming
from gpuctl.core.units import M
from testbed import controlplane as cpmod
from testbed.factories import card_row, devices
from testbed.gpucluster import GpuPool, now
from testbed.proxy import Proxy

ROOT = Path(__file__).resolve().parents[1]
BEGIN, END = "<!-- scale -->", "<!-- /scale -->"
CARDS = 8
PODS_PER_NODE = 2
BEFORE = {
    1000: "pass 7.7 s; verdict p50 7.6 s, max 8.7 s; idle CPU 65 %; RSS 180 MiB; idle traffic ~260 MB/min",
    5000: "pass 38 s; verdict p50 90 s, max 94 s; idle CPU 59 %; RSS 581 MiB; idle traffic ~245 MB/min",
}
"""The re-reading operator on the same shape of cluster (with one admitted Workload per Pod), as measured before."""


def _parallel(fn: Any, items: list[Any], workers: int = 12) -> None:
    with ThreadPoolExecutor(workers) as pool:
        for result in pool.map(fn, items):
            del result


def _sources(kubeconfig: Path, n: int) -> list[LiveSource]:
    return [LiveSource(Connection(str(kubeconfig), None, 60)) for _ in range(n)]


def build_pool(cp: Any, api: Any, namespace: str, nodes: int) -> GpuPool:
    """Nodes, ledgers, Pods and admitted Workloads of one pool of ``nodes`` nodes."""
    suffix = f"s{nodes}"
    pool = GpuPool(api, namespace, f"a10g-{suffix}", [f"n{suffix}-{i:05d}" for i in range(nodes)], CARDS)
    pool.name = f"gpustack--{pool.accelerator_key}-linux-amd64"
    pool.flavor = f"gpustack--generic--{pool.accelerator_key}-linux-amd64-{CARDS}d"
    pool.topology = f"hostname-{suffix}"
    local = threading.local()
    all_sources = _sources(cp.kubeconfig, 12)
    counter = iter(range(10**9))
    lock = threading.Lock()

    def source() -> LiveSource:
        if not hasattr(local, "s"):
            with lock:
                local.s = all_sources[next(counter) % len(all_sources)]
        s: LiveSource = local.s
        return s

    resources = {
        "credits.gpustack.ai/nvidia": str(CARDS * M),
        "nvidia.com/gpu": str(CARDS),
        "nvidia.com/gpu.shared": str(10 * CARDS),
        "cpu": "48",
        "memory": "192Gi",
        "pods": "110",
    }
    ready = {
        "type": "Ready",
        "status": "True",
        "reason": "KubeletReady",
        "lastHeartbeatTime": now(),
        "lastTransitionTime": now(),
    }

    def make_node(name: str) -> None:
        s = source()
        s.create(
            kinds.NODE,
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": {naming.LABEL_HOSTNAME: name, **pool.node_labels()}},
            },
        )
        s.patch(
            kinds.NODE,
            name,
            {"status": {"capacity": resources, "allocatable": resources, "conditions": [ready]}},
            subresource="status",
        )
        s.patch(kinds.NODE, name, {"spec": {"taints": None}})
        obj = devices(
            name,
            group_id=pool.group_id,
            cards=CARDS,
            rows=[card_row(c, mode=1, allocated=M) if c < PODS_PER_NODE else card_row(c) for c in range(CARDS)],
        )
        status = obj.pop("status")
        s.create(kinds.DEVICES, obj)
        s.patch(kinds.DEVICES, name, {"status": status}, subresource="status")

    started = time.monotonic()
    _parallel(make_node, pool.nodes)
    print(f"  {nodes} nodes and ledgers in {time.monotonic() - started:.0f}s", file=sys.stderr)
    # The Workloads are written as Kueue leaves them, in a queue whose LocalQueue does not exist, so Kueue's scheduler
    # never picks them up itself (its admission of many Workloads at once is not what is measured here).
    pool.create_pool_objects(nodes * CARDS, local_queue=False)

    def make_running(args: tuple[int, str]) -> None:
        i, node = args
        s = source()
        for p in range(PODS_PER_NODE):
            name = f"run-{i:05d}-{p}"
            write_workload(s, pool, name, node, admitted=True)
            record = {
                "main": {
                    "devices": {
                        "groups": [
                            {
                                "id": pool.group_id,
                                "manufacturer": "nvidia",
                                "accelerators": [{"id": f"GPU-{p:04d}", "index": p, "mode": 1, "allocated": M}],
                            }
                        ]
                    }
                }
            }
            s.create(
                kinds.POD,
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": name,
                        "namespace": namespace,
                        "labels": {naming.LABEL_PODSET: "main"},
                        "annotations": {
                            naming.ANNOTATION_WORKLOAD: name,
                            naming.ANNOTATION_ALLOCATED: json.dumps(record),
                        },
                    },
                    "spec": {
                        "nodeName": node,
                        "containers": [
                            {"name": "main", "image": "bench/none", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
                        ],
                    },
                },
                namespace=namespace,
            )

    started = time.monotonic()
    _parallel(make_running, list(enumerate(pool.nodes)))
    expected = nodes * PODS_PER_NODE
    print(f"  {expected} Pods and admitted Workloads in {time.monotonic() - started:.0f}s", file=sys.stderr)
    return pool


def write_workload(
    s: LiveSource, pool: GpuPool, name: str, node: str, *, admitted: bool, reserved: bool = True
) -> None:
    """A one-Pod Workload asking one card, with its quota reserved on ``node`` as Kueue writes it: admitted with the
    check Ready (a running Workload), or waiting for the check (``admitted=False``); ``reserved=False`` leaves the
    reservation to a later ``reserve``."""
    s.create(
        kinds.WORKLOAD,
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Workload",
            "metadata": {"name": name, "namespace": pool.namespace},
            "spec": {
                "queueName": pool.entrance,
                "podSets": [
                    {
                        "name": "main",
                        "count": 1,
                        "topologyRequest": {"required": naming.LABEL_HOSTNAME},
                        "template": {
                            "spec": {
                                "restartPolicy": "Never",
                                "containers": [
                                    {
                                        "name": "main",
                                        "image": "bench/none",
                                        "resources": {
                                            "requests": {"nvidia.com/gpu": "1"},
                                            "limits": {"nvidia.com/gpu": "1"},
                                        },
                                    }
                                ],
                            }
                        },
                    }
                ],
            },
        },
        namespace=pool.namespace,
    )
    if reserved:
        reserve(s, pool, name, node, admitted=admitted)


def reserve(s: LiveSource, pool: GpuPool, name: str, node: str, *, admitted: bool = False) -> None:
    """Reserve quota as Kueue does, the check's state set with it: Ready for a running Workload, else Pending (Kueue
    resets the check to Pending whenever it reserves again)."""
    kinds_true = ("QuotaReserved", "Admitted") if admitted else ("QuotaReserved",)
    conditions = [
        {"type": t, "status": "True", "reason": t, "message": "", "lastTransitionTime": now()} for t in kinds_true
    ]
    checks = [
        {
            "name": naming.NODE_DEVICES_CHECK,
            "state": "Ready" if admitted else "Pending",
            "message": "",
            "lastTransitionTime": now(),
        }
    ]
    body = {"status": {"conditions": conditions, "admission": admission_on(pool, node), "admissionChecks": checks}}
    s.patch(kinds.WORKLOAD, name, body, namespace=pool.namespace, subresource="status")


def admission_on(pool: GpuPool, node: str) -> dict[str, Any]:
    """A one-Pod PodSet's admission to the pool's flavor, placed by TAS on ``node``."""
    return {
        "clusterQueue": pool.name,
        "podSetAssignments": [
            {
                "name": "main",
                "count": 1,
                "flavors": {"credits.gpustack.ai/nvidia": pool.flavor},
                "resourceUsage": {"credits.gpustack.ai/nvidia": str(M)},
                "topologyAssignment": {
                    "levels": [naming.LABEL_HOSTNAME],
                    "slices": [
                        {"domainCount": 1, "valuesPerLevel": [{"universal": node}], "podCounts": {"universal": 1}}
                    ],
                },
            }
        ],
    }


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError:
        return 0, ""


def _metric(text: str, name: str) -> list[float]:
    return [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name)]


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


class Watcher:
    """When a watch of Workloads first sees each one's check verdict, and whether each holds a reservation now."""

    def __init__(self, kubeconfig: Path, namespace: str) -> None:
        self.judged: dict[str, float] = {}
        self.holding: dict[str, bool] = {}
        self.source = LiveSource(Connection(str(kubeconfig), None, 60))
        self.namespace = namespace
        self._stop = threading.Event()
        first = next(self.source.list_pages(kinds.WORKLOAD, namespace=namespace, page_size=1))
        self.version = first.resource_version
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(Exception):
                for event in self.source.watch(
                    kinds.WORKLOAD, self.version, namespace=self.namespace, timeout_seconds=30
                ):
                    obj = event.get("object") or {}
                    self.version = (obj.get("metadata") or {}).get("resourceVersion") or self.version
                    name = (obj.get("metadata") or {}).get("name", "")
                    if not name.startswith("new-"):
                        continue
                    status = obj.get("status") or {}
                    seen = time.monotonic()
                    reserved = any(
                        c.get("type") == "QuotaReserved" and c.get("status") == "True"
                        for c in status.get("conditions") or []
                    )
                    if name in self.judged:
                        continue
                    self.holding[name] = reserved
                    # Every reservation is written with the check Pending, so a verdict seen after it is the
                    # check's answer to it, even when Kueue has already taken the reservation back.
                    for c in status.get("admissionChecks") or []:
                        if c.get("name") == naming.NODE_DEVICES_CHECK and c.get("state") in ("Ready", "Retry"):
                            self.judged[name] = seen

    def stop(self) -> None:
        self._stop.set()


def measure(cp: Any, api: Any, nodes: int, work: Path) -> dict[str, Any]:
    from kubernetes import client

    namespace = f"scale-{nodes}"
    client.CoreV1Api(api).create_namespace({"metadata": {"name": namespace}})
    pool = build_pool(cp, api, namespace, nodes)
    proxy = Proxy(("127.0.0.1", cp.api_port))
    import yaml

    config = yaml.safe_load(cp.kubeconfig.read_text())
    for c in config["clusters"]:
        c["cluster"]["server"] = f"https://127.0.0.1:{proxy.port}"
    kubeconfig = work / f"operator-{nodes}.kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(config))
    probe = cpmod.free_port()
    log = (work / f"operator-{nodes}.log").open("wb")
    started = time.monotonic()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpuctl.operator",
            "--kubeconfig",
            str(kubeconfig),
            "--insecure-http",
            "--bind",
            "127.0.0.1",
            "--port",
            str(cpmod.free_port()),
            "--probe-port",
            str(probe),
            "--namespace",
            "default",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    base = f"http://127.0.0.1:{probe}"
    result: dict[str, Any] = {"nodes": nodes}
    try:
        while _get(base + "/readyz")[0] != 200:
            if proc.poll() is not None:
                raise RuntimeError("the operator exited; see " + str(log.name))
            time.sleep(0.05)
        result["ready"] = time.monotonic() - started
        while True:
            synced = _metric(_get(base + "/metrics")[1], "gpuctl_cache_synced{")
            if synced and all(v == 1.0 for v in synced):
                break
            time.sleep(0.1)
        result["synced"] = time.monotonic() - started
        # The first resync goes over every key; wait for the queues to drain, then for quiet.
        quiet_since = None
        while True:
            depth = sum(_metric(_get(base + "/metrics")[1], "gpuctl_workqueue_depth{"))
            if depth == 0:
                quiet_since = quiet_since or time.monotonic()
                if time.monotonic() - quiet_since > 5:
                    break
            else:
                quiet_since = None
            time.sleep(0.5)
        result["settled"] = time.monotonic() - started
        window = 60.0
        cpu0, bytes0, t0 = _cpu_seconds(proc.pid), proxy.bytes, time.monotonic()
        time.sleep(window)
        elapsed = time.monotonic() - t0
        result["idle_cpu"] = (_cpu_seconds(proc.pid) - cpu0) / elapsed * 100
        result["idle_traffic"] = (proxy.bytes - bytes0) / elapsed * 60 / 1e6
        result["rss"] = _status_kib(proc.pid, "VmRSS") / 1024
        # A scrape of /metrics: the first after the idle window recomputes every pool's fragmentation.
        scrapes = []
        for _ in range(3):
            t = time.monotonic()
            _get(base + "/metrics")
            scrapes.append(time.monotonic() - t)
        result["scrape"] = max(scrapes)
        # Verdict latency: 20 new Workloads, each reserved by Kueue (TAS picks the node) and judged by the check.
        # 20 new Workloads, each reserved on a node with free cards (spread over the pool), one at a time.
        watcher = Watcher(cp.kubeconfig, namespace)
        writer = LiveSource(Connection(str(cp.kubeconfig), None, 60))
        reserved_at: dict[str, float] = {}
        for i in range(20):
            name = f"new-{i:02d}"
            node = pool.nodes[(i * 7919) % len(pool.nodes)]
            write_workload(writer, pool, name, node, admitted=False, reserved=False)
            reserved_at[name] = time.monotonic()
            reserve(writer, pool, name, node)
            deadline = time.monotonic() + 30
            while name not in watcher.judged and time.monotonic() < deadline:
                time.sleep(0.02)
                if time.monotonic() - reserved_at[name] > 3 and not watcher.holding.get(name):
                    # Kueue's reconciler can reset a reservation it did not make (its LocalQueue is absent): reserve
                    # again, as Kueue would; the latency counts from the reservation that held.
                    reserved_at[name] = time.monotonic()
                    reserve(writer, pool, name, node)
        watcher.stop()
        latencies = [watcher.judged[n] - reserved_at[n] for n in watcher.judged]
        result["verdicts"] = len(latencies)
        result["p50"] = statistics.median(latencies) if latencies else float("nan")
        result["max"] = max(latencies) if latencies else float("nan")
        result["peak_rss"] = _status_kib(proc.pid, "VmHWM") / 1024
    finally:
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(10)
        proxy.close()
        log.close()
    return result


def render(results: list[dict[str, Any]]) -> str:
    lines = [
        BEGIN,
        "## The operator at cluster scale (`make bench-scale`)",
        "",
        f"Last run: {time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores; the real control plane (etcd, kube-apiserver,",
        f"Kueue) holding pools of 8-card nodes with {PODS_PER_NODE} Pods each and one admitted Workload per Pod. The",
        "operator's API traffic goes through a counting proxy; idle figures are over 60 s after its first resync",
        "settled; verdict latency is from writing a Workload's quota reservation (in Kueue's shape) to a watch seeing",
        "the check's verdict, over 20 new Workloads.",
        "",
        "| nodes | webhooks ready | cache synced | first resync settled | verdict latency | idle CPU | idle API traffic | "
        "RSS (peak) | /metrics scrape | before the watch cache |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['nodes']:,} | {r['ready']:.1f} s | {r['synced']:.1f} s | {r['settled']:.0f} s | "
            f"p50 {r['p50']:.2f} s, max {r['max']:.2f} s ({r['verdicts']} verdicts) | {r['idle_cpu']:.1f} % | "
            f"{r['idle_traffic']:.3f} MB/min | {r['rss']:.0f} MiB ({r['peak_rss']:.0f} MiB) | {r['scrape']:.2f} s | "
            f"{BEFORE.get(r['nodes'], '-')} |"
        )
    last = results[-1]
    checks = [
        ("verdicts of 20 Workloads", last["verdicts"] >= 20),
        ("verdict p50 < 0.5 s", last["p50"] < 0.5),
        ("verdict max < 2 s", last["max"] < 2.0),
        ("idle CPU < 5 %", last["idle_cpu"] < 5.0),
        ("idle API traffic < 1 MB/min", last["idle_traffic"] < 1.0),
        ("RSS < 400 MiB", last["rss"] < 400),
        ("initial sync < 30 s", last["synced"] < 30.0),
        ("webhooks ready < 5 s", last["ready"] < 5.0),
        ("a /metrics scrape < 1 s", last["scrape"] < 1.0),
    ]
    lines += [
        "",
        f"Targets at {last['nodes']:,} nodes: "
        + "; ".join(f"{n}: {'met' if ok else '**not met**'}" for n, ok in checks),
        END,
    ]
    return "\n".join(lines) + "\n"


def write_section(path: Path, section: str) -> None:
    text = path.read_text() if path.exists() else ""
    if BEGIN in text and END in text:
        head, _, rest = text.partition(BEGIN)
        _, _, tail = rest.partition(END)
        text = head + section.rstrip("\n") + tail
    else:
        text = text.rstrip("\n") + "\n\n" + section
    path.write_text(text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", type=Path, help="write the section into this Markdown file")
    parser.add_argument("--nodes", type=int, action="append", help="pool sizes (default 1000 and 5000)")
    args = parser.parse_args()
    sizes = args.nodes or [1000, 5000]
    results = []
    with tempfile.TemporaryDirectory(prefix="gpuctl-scale-") as tmp:
        work = Path(tmp)
        for nodes in sizes:
            # A fresh control plane per size, so one size's objects do not weigh on the next.
            cp = cpmod.start_control_plane(work / f"cp-{nodes}", cpmod.bin_dir())
            from kubernetes import config

            api = config.new_client_from_config(config_file=str(cp.kubeconfig))
            try:
                print(f"scale: {nodes} nodes", file=sys.stderr)
                results.append(measure(cp, api, nodes, work))
                print(json.dumps(results[-1]), file=sys.stderr)
            finally:
                api.close()
                cp.stop()
    section = render(results)
    print(section)
    if args.write:
        write_section(args.write, section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
