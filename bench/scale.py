"""``make bench-scale``: the operator at cluster scale on the real control plane (etcd, kube-apiserver, Kueue).

For each size (5,000 and 20,000 nodes x 8 A10G cards by default; ``--nodes`` chooses), a pool is built the way the
operator derives one: ready Nodes with the pool's labels and capacity, their Devices ledgers, 2 Pods per node holding a
card each (their allocation records), and one admitted Workload per Pod with its topology assignment, as Kueue leaves
them. Then the operator is started (its Event recorder and usage gauges on, as deployed) with its API traffic going
through a counting TCP proxy, and measured:

- webhooks ready (``/readyz``) and cache synced after start;
- the first resync settled (every work queue empty, and the Events it recorded written);
- idle operator CPU and idle API traffic over a window after that;
- RSS after the idle window and its peak;
- the gate-3 verdict latency of 100 new Workloads: from just before the quota reservation is written to the moment a
  watch on Workloads sees the check's verdict (a watch cannot time the reservation itself: both events can arrive in
  one read); beside it the operator's own share (its latency histogram, from its cache seeing the reservation to its
  write of the check state) and the CPU each process of the machine spent while the verdicts were timed;
- a ``/metrics`` scrape after that (the first computes the usage, queue and pool gauges again: the Workloads changed);
- fail-over: two replicas with ``--leader-elect``; once one leads and the other's cache is synced, the leader is
  killed (SIGKILL), a new Workload's quota is reserved at once, and the time from the kill to the check's verdict on
  it is measured (the standby must first see the Lease expire).

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
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from gpuctl.cluster import kinds
from gpuctl.cluster.live import Connection, LiveSource
from gpuctl.core import naming
from gpuctl.core.units import M
from gpuctl.operator.leader import LEASE_SECONDS
from gpuctl.operator.shadow import REASON as SHADOW_REASON
from testbed import controlplane as cpmod
from testbed.factories import card_row, devices
from testbed.gpucluster import GpuPool, now
from testbed.proxy import Proxy

ROOT = Path(__file__).resolve().parents[1]
BEGIN, END = "<!-- scale -->", "<!-- /scale -->"
SIZES = (5000, 20000)
CARDS = 8
PODS_PER_NODE = 2
VERDICTS = 100
"""New Workloads judged one at a time for the verdict latency."""
GPUSTACK_CHECK_OWNER = "gpustack-node-devices"
"""The field owner GPUStack's check writes its verdicts as."""
PLANTED = 1_000_000
"""The first wrong EX remaining published (more cards than any pool here has, so never the computed figure)."""
VIEW_PLANTS = 20
"""Wrong EX figures published one at a time for the view latency (the Event recorder's burst per object is 25)."""
IDLE_WINDOW = 60.0
WORKERS = 16
"""Threads creating the pool (the API server, Kueue's webhooks and etcd share the machine's cores with them)."""
TARGETS = {
    "p99": 0.2,
    "rss": 1024.0,
    "synced": 60.0,
    "failover": LEASE_SECONDS + 5.0,
    "idle_cpu": 5.0,
    "idle_traffic": 1.0,
    "ready": 5.0,
    "scrape": 1.0,
    "companion_ratio": 1.2,
}
BEFORE = {
    1000: "pass 7.7 s; verdict p50 7.6 s, max 8.7 s; idle CPU 65 %; RSS 180 MiB; idle traffic ~260 MB/min",
    5000: "pass 38 s; verdict p50 90 s, max 94 s; idle CPU 59 %; RSS 581 MiB; idle traffic ~245 MB/min",
}
"""The re-reading operator on the same shape of cluster (with one admitted Workload per Pod), as measured before."""


def _parallel(fn: Callable[[Any], None], items: list[Any], what: str, workers: int = WORKERS) -> float:
    """Run ``fn`` over ``items`` on ``workers`` threads, reporting progress on stderr; the seconds it took."""
    started = time.monotonic()
    step = max(1, len(items) // 10)
    with ThreadPoolExecutor(workers) as pool:
        for done, result in enumerate(pool.map(fn, items), 1):
            del result
            if done % step == 0 and done < len(items):
                print(f"    {what}: {done}/{len(items)} in {time.monotonic() - started:.0f}s", file=sys.stderr)
    took = time.monotonic() - started
    print(f"  {len(items)} {what} in {took:.0f}s", file=sys.stderr)
    return took


class Sources:
    """One API connection per creating thread, so no two threads share a client's connection pool."""

    def __init__(self, kubeconfig: Path) -> None:
        self.kubeconfig = kubeconfig
        self._local = threading.local()

    def __call__(self) -> LiveSource:
        s: LiveSource | None = getattr(self._local, "source", None)
        if s is None:
            s = self._local.source = LiveSource(Connection(str(self.kubeconfig), None, 60))
        return s


def pool_of(namespace: str, nodes: int, api: Any = None) -> GpuPool:
    """The pool a size builds (its names follow from the size alone)."""
    suffix = f"s{nodes}"
    pool = GpuPool(api, namespace, f"a10g-{suffix}", [f"n{suffix}-{i:05d}" for i in range(nodes)], CARDS)
    pool.name = f"gpustack--{pool.accelerator_key}-linux-amd64"
    pool.flavor = f"gpustack--generic--{pool.accelerator_key}-linux-amd64-{CARDS}d"
    pool.topology = f"hostname-{suffix}"
    return pool


RESOURCES = {
    "credits.gpustack.ai/nvidia": str(CARDS * M),
    "nvidia.com/gpu": str(CARDS),
    "nvidia.com/gpu.shared": str(10 * CARDS),
    "cpu": "48",
    "memory": "192Gi",
    "pods": "110",
}
"""What each Node offers."""


def node_object(pool: GpuPool, name: str) -> dict[str, Any]:
    """A ready Node of the pool, with its status (written in one create)."""
    ready = {
        "type": "Ready",
        "status": "True",
        "reason": "KubeletReady",
        "lastHeartbeatTime": now(),
        "lastTransitionTime": now(),
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {naming.LABEL_HOSTNAME: name, **pool.node_labels()}},
        "status": {"capacity": RESOURCES, "allocatable": RESOURCES, "conditions": [ready]},
    }


FULL_EVERY = 200
"""One node in this many has a Pod on every card: where a Workload reserved on it is one the check says Retry to
(the companion's planted verdicts)."""


def held_cards(node: str) -> int:
    """The cards a node's Pods hold: :data:`PODS_PER_NODE`, or every card on one node in :data:`FULL_EVERY`."""
    return CARDS if int(node.rsplit("-", 1)[1]) % FULL_EVERY == FULL_EVERY - 1 else PODS_PER_NODE


def full_nodes(pool: GpuPool) -> list[str]:
    return [n for n in pool.nodes if held_cards(n) == CARDS]


def ledger_object(pool: GpuPool, name: str) -> dict[str, Any]:
    """A node's Devices with its ledger: the cards its Pods hold (:func:`held_cards`) held whole, the rest free."""
    held = held_cards(name)
    rows = [card_row(c, mode=1, allocated=M) if c < held else card_row(c) for c in range(CARDS)]
    return devices(name, group_id=pool.group_id, cards=CARDS, rows=rows)


def running_pod(pool: GpuPool, name: str, node: str, card: int) -> dict[str, Any]:
    """A bound Pod of the Workload ``name`` holding one card whole (its allocation record, as ``Allocate`` leaves
    it)."""
    record = {
        "main": {
            "devices": {
                "groups": [
                    {
                        "id": pool.group_id,
                        "manufacturer": "nvidia",
                        "accelerators": [{"id": f"GPU-{card:04d}", "index": card, "mode": 1, "allocated": M}],
                    }
                ]
            }
        }
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": pool.namespace,
            "labels": {naming.LABEL_PODSET: "main"},
            "annotations": {naming.ANNOTATION_WORKLOAD: name, naming.ANNOTATION_ALLOCATED: json.dumps(record)},
        },
        "spec": {
            "nodeName": node,
            "containers": [{"name": "main", "image": "bench/none", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
        },
    }


def build_pool(cp: Any, api: Any, namespace: str, nodes: int) -> tuple[GpuPool, dict[str, float]]:
    """Nodes, ledgers, Pods and admitted Workloads of one pool of ``nodes`` nodes; the seconds each step took.

    Each object is written in as few calls as the API allows: a Node with its status in one create (the control plane
    runs without the admission plugin that taints a new Node until a node lifecycle controller sees it ready, and none
    runs here); a Devices object and a Workload in two (the status subresource drops a status given on create); a Pod
    in one."""
    pool = pool_of(namespace, nodes, api)
    source = Sources(cp.kubeconfig)

    def make_node(name: str) -> None:
        s = source()
        s.create(kinds.NODE, node_object(pool, name))
        obj = ledger_object(pool, name)
        status = obj.pop("status")
        s.create(kinds.DEVICES, obj)
        s.patch(kinds.DEVICES, name, {"status": status}, subresource="status")

    took = {"nodes": _parallel(make_node, pool.nodes, "nodes and ledgers")}
    # The Workloads are written as Kueue leaves them, in a queue whose LocalQueue does not exist, so Kueue's scheduler
    # never picks them up itself (its admission of many Workloads at once is not what is measured here).
    pool.create_pool_objects(nodes * CARDS, local_queue=False)

    def make_running(args: tuple[int, str]) -> None:
        i, node = args
        s = source()
        for p in range(held_cards(node)):
            name = f"run-{i:05d}-{p}"
            write_workload(s, pool, name, node, admitted=True)
            s.create(kinds.POD, running_pod(pool, name, node, p), namespace=namespace)

    took["pods"] = _parallel(make_running, list(enumerate(pool.nodes)), "nodes' Pods and admitted Workloads")
    return pool, took


def workload_object(pool: GpuPool, name: str) -> dict[str, Any]:
    """A one-Pod Workload asking one card, in the pool's queue (no status)."""
    return {
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
    }


def write_workload(
    s: LiveSource, pool: GpuPool, name: str, node: str, *, admitted: bool, reserved: bool = True
) -> None:
    """A one-Pod Workload asking one card, with its quota reserved on ``node`` as Kueue writes it: admitted with the
    check Ready (a running Workload), or waiting for the check (``admitted=False``); ``reserved=False`` leaves the
    reservation to a later ``reserve``."""
    s.create(kinds.WORKLOAD, workload_object(pool, name), namespace=pool.namespace)
    if reserved:
        reserve(s, pool, name, node, admitted=admitted)


def reservation(pool: GpuPool, node: str, *, admitted: bool = False) -> dict[str, Any]:
    """A Workload's status with its quota reserved on ``node`` as Kueue writes it, the check's state with it: Ready for
    a running Workload, else Pending (Kueue resets the check to Pending whenever it reserves again)."""
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
    return {"conditions": conditions, "admission": admission_on(pool, node), "admissionChecks": checks}


def reserve(s: LiveSource, pool: GpuPool, name: str, node: str, *, admitted: bool = False) -> None:
    """Reserve quota as Kueue does (:func:`reservation`)."""
    body = {"status": reservation(pool, node, admitted=admitted)}
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


def _cpu_of(cp: Any, op: Operator) -> dict[str, float]:
    """CPU seconds so far of each control-plane process and of the operator (what shares the machine's cores)."""
    pids = {p.name: p.pid for p in cp.processes if p.pid}
    pids["operator"] = op.pid
    return {name: _cpu_seconds(pid) for name, pid in pids.items()}


def _status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


class Watch:
    """A watch of one kind (in one namespace) on its own thread, from now on: ``seen`` gets each object and the moment
    it arrived."""

    def __init__(self, kubeconfig: Path, kind: kinds.Kind, namespace: str | None) -> None:
        self.source = LiveSource(Connection(str(kubeconfig), None, 60))
        self.kind = kind
        self.namespace = namespace
        self._stop = threading.Event()
        first = next(self.source.list_pages(kind, namespace=namespace, page_size=1))
        self.version = first.resource_version
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(Exception):
                for event in self.source.watch(self.kind, self.version, namespace=self.namespace, timeout_seconds=30):
                    obj = event.get("object") or {}
                    self.version = (obj.get("metadata") or {}).get("resourceVersion") or self.version
                    if event.get("type") in ("ADDED", "MODIFIED"):
                        self.seen(obj, time.monotonic())

    def seen(self, obj: dict[str, Any], at: float) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        self._stop.set()


class Watcher(Watch):
    """When a watch of Workloads first sees each one's check verdict, and whether each holds a reservation now (only
    the Workloads whose names start with ``prefix``)."""

    def __init__(self, kubeconfig: Path, namespace: str, prefix: str) -> None:
        self.judged: dict[str, float] = {}
        self.holding: dict[str, bool] = {}
        self.prefix = prefix
        super().__init__(kubeconfig, kinds.WORKLOAD, namespace)

    def seen(self, obj: dict[str, Any], at: float) -> None:
        name = (obj.get("metadata") or {}).get("name", "")
        if not name.startswith(self.prefix) or name in self.judged:
            return
        status = obj.get("status") or {}
        self.holding[name] = any(
            c.get("type") == "QuotaReserved" and c.get("status") == "True" for c in status.get("conditions") or []
        )
        # Every reservation is written with the check Pending, so a verdict seen after it is the check's answer to
        # it, even when Kueue has already taken the reservation back.
        for c in status.get("admissionChecks") or []:
            if c.get("name") == naming.NODE_DEVICES_CHECK and c.get("state") in ("Ready", "Retry"):
                self.judged[name] = at

    def wait(
        self, writer: LiveSource, pool: GpuPool, name: str, node: str, reserved_at: float, timeout: float
    ) -> float:
        """Wait for the verdict on ``name``, reserved on ``node`` at ``reserved_at``; the seconds from the reservation
        that held to the verdict (NaN when none came)."""
        deadline = time.monotonic() + timeout
        while name not in self.judged and time.monotonic() < deadline:
            time.sleep(0.02)
            if time.monotonic() - reserved_at > 3 and not self.holding.get(name):
                # Kueue's reconciler can reset a reservation it did not make (its LocalQueue is absent): reserve
                # again, as Kueue would; the latency counts from the reservation that held.
                reserved_at = time.monotonic()
                reserve(writer, pool, name, node)
        return self.judged[name] - reserved_at if name in self.judged else float("nan")


class ShadowEvents(Watch):
    """The companion's ``ShadowDisagreement`` Events in one namespace, as a watch sees them: when, about which object,
    and their notes."""

    def __init__(self, kubeconfig: Path, namespace: str) -> None:
        self.events: list[tuple[float, str, str]] = []
        super().__init__(kubeconfig, kinds.EVENT, namespace)

    def seen(self, obj: dict[str, Any], at: float) -> None:
        if obj.get("reason") == SHADOW_REASON:
            self.events.append((at, (obj.get("regarding") or {}).get("name", ""), obj.get("note", "")))

    def wait(self, name: str, text: str, since: float, timeout: float) -> float:
        """The moment an Event about ``name`` whose note holds ``text`` was first seen after ``since`` (NaN when none
        came in ``timeout`` seconds)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for at, regarding, note in list(self.events):
                if at >= since and regarding == name and text in note:
                    return at
            time.sleep(0.01)
        return float("nan")


class Published(Watch):
    """An InstanceType's published EX remaining (``status.accelerator.remaining``), each time a watch sees it, with
    the object's resourceVersion."""

    def __init__(self, kubeconfig: Path, name: str) -> None:
        self.name = name
        self.values: list[tuple[float, int, str]] = []
        super().__init__(kubeconfig, kinds.INSTANCETYPE, None)

    def seen(self, obj: dict[str, Any], at: float) -> None:
        meta = obj.get("metadata") or {}
        if meta.get("name") == self.name:
            remaining = ((obj.get("status") or {}).get("accelerator") or {}).get("remaining", "")
            self.values.append((at, int(meta.get("resourceVersion") or 0), str(remaining)))

    def wait_other(self, than: str, after_version: int, timeout: float) -> float:
        """The moment a version newer than ``after_version`` publishing another figure than ``than`` was seen."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for at, version, remaining in list(self.values):
                if version > after_version and remaining != than:
                    return at
            time.sleep(0.01)
        return float("nan")


def _published_ex(writer: LiveSource, pool: GpuPool) -> dict[str, Any]:
    found = writer.get(kinds.INSTANCETYPE, pool.name)
    if found is None:
        raise RuntimeError(f"InstanceType {pool.name} is gone")
    accelerator: dict[str, Any] = found["status"]["accelerator"]
    return accelerator


def _plant_ex(writer: LiveSource, pool: GpuPool, value: str) -> int:
    """Publish ``value`` as the pool's EX remaining, as a status writer would; the resourceVersion written."""
    written = writer.patch(
        kinds.INSTANCETYPE, pool.name, {"status": {"accelerator": {"remaining": value}}}, subresource="status"
    )
    return int(written["metadata"]["resourceVersion"])


def views_corrected(cp: Any, pool: GpuPool, count: int = VIEW_PLANTS) -> list[float]:
    """The standalone: seconds from publishing a wrong EX remaining (:data:`PLANTED`, then one more, ...) to the
    status writer's correction, seen by a watch, one at a time."""
    writer = LiveSource(Connection(str(cp.kubeconfig), None, 60))
    published = Published(cp.kubeconfig, pool.name)
    latencies = []
    try:
        for i in range(count):
            planted = str(PLANTED + i)
            at = time.monotonic()
            version = _plant_ex(writer, pool, planted)
            seen = published.wait_other(planted, version, 30.0)
            if not math.isnan(seen):
                latencies.append(seen - at)
    finally:
        published.stop()
    return latencies


def views_reported(cp: Any, pool: GpuPool, count: int = VIEW_PLANTS) -> list[float]:
    """The companion: seconds from publishing a wrong EX remaining (each time another figure) to the
    ``ShadowDisagreement`` Event saying so, seen by a watch, one at a time; the right figure published again after."""
    writer = LiveSource(Connection(str(cp.kubeconfig), None, 60))
    events = ShadowEvents(cp.kubeconfig, "default")
    latencies = []
    right = _published_ex(writer, pool)["remaining"]
    try:
        for i in range(count):
            planted = str(PLANTED + i)
            at = time.monotonic()
            _plant_ex(writer, pool, planted)
            seen = events.wait(pool.name, f"GPUStack publishes {planted},", at, 30.0)
            if not math.isnan(seen):
                latencies.append(seen - at)
    finally:
        events.stop()
        _plant_ex(writer, pool, right)
    return latencies


def verdicts_reported(cp: Any, pool: GpuPool, prefix: str, count: int = VERDICTS) -> list[float]:
    """The companion: seconds from a verdict Ready written with a new Workload's reservation on a node whose ledger
    holds every card (as GPUStack's check would write it, its field owner) to the ``ShadowDisagreement`` Event saying
    the ledger says Retry, seen by a watch, one Workload at a time."""
    writer = LiveSource(Connection(str(cp.kubeconfig), None, 60))
    events = ShadowEvents(cp.kubeconfig, pool.namespace)
    full = full_nodes(pool)
    latencies = []
    try:
        for i in range(count):
            name = f"{prefix}{i:03d}"
            node = full[i % len(full)]
            write_workload(writer, pool, name, node, admitted=False, reserved=False)
            seen = float("nan")
            for _ in range(3):  # Kueue's reconciler can take a reservation it did not make back before it is read
                at = time.monotonic()
                status = reservation(pool, node)
                status["admissionChecks"][0].update(state="Ready", message="planted: the ledger holds every card")
                writer.patch(
                    kinds.WORKLOAD,
                    name,
                    {"status": status},
                    namespace=pool.namespace,
                    subresource="status",
                    field_manager=GPUSTACK_CHECK_OWNER,
                )
                seen = events.wait(name, "GPUStack publishes Ready, gpuctl computes Retry", at, 5.0)
                if not math.isnan(seen):
                    latencies.append(seen - at)
                    break
    finally:
        events.stop()
    return latencies


class Operator:
    """One ``gpuctl-operator`` process (Event recorder and usage gauges on, as deployed), its probe port and log."""

    def __init__(self, kubeconfig: Path, log_path: Path, *args: str) -> None:
        self.probe = cpmod.free_port()
        self.base = f"http://127.0.0.1:{self.probe}"
        self.log_path = log_path
        self._log = log_path.open("wb")
        self.started = time.monotonic()
        self.tag = "operator"
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gpuctl.operator",
                "--kubeconfig",
                str(kubeconfig),
                *(() if any(a.startswith("--mode") for a in args) else ("--mode=standalone",)),
                "--insecure-http",
                "--bind",
                "127.0.0.1",
                "--port",
                str(cpmod.free_port()),
                "--probe-port",
                str(self.probe),
                "--namespace",
                "default",
                *args,
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def get(self, path: str) -> tuple[int, str]:
        if self.proc.poll() is not None:
            raise RuntimeError(f"the operator exited ({self.proc.returncode}); see {self.log_path}")
        return _get(self.base + path)

    def checks(self) -> dict[str, str]:
        """``/readyz?verbose``: each check's detail, by name."""
        found = {}
        for line in self.get("/readyz?verbose")[1].splitlines():
            if line.startswith("[") and "]" in line:
                name, _, rest = line.partition("]")[2].partition(" ")
                found[name] = rest.partition(": ")[2]
        return found

    def synced(self) -> bool:
        """Every kind of the controllers' cache holds its first list."""
        return self.checks().get("controller-cache") == "synced"

    def leading(self) -> bool:
        return self.checks().get("leader") == "leading"

    def wait(self, what: str, done: Callable[[], bool], timeout: float, interval: float) -> float:
        """Seconds from the start of the process until ``done()``."""
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}; see {self.log_path}")
            time.sleep(interval)
        return time.monotonic() - self.started

    def wait_settled(self, timeout: float = 7200.0) -> float:
        """Seconds from the start until every work queue and the Event recorder's queue are empty on two scrapes 5 s
        apart (a scrape can cost the operator a pass over its cache, so they are as far apart as the answer's
        resolution allows)."""
        empty_before = False
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.get("/metrics")[1]
            empty = sum(_metric(text, "gpuctl_workqueue_depth{")) + sum(_metric(text, "gpuctl_events_queued ")) == 0
            if empty and empty_before:
                return time.monotonic() - self.started
            empty_before = empty
            time.sleep(5.0)
        raise RuntimeError(f"the work queues did not drain in {timeout:.0f}s; see {self.log_path}")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log.close()

    def kill(self) -> None:
        """SIGKILL, as a node's failure or the OOM killer ends it: no Lease released, nothing flushed."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self._log.close()


def _via_proxy(cp: Any, proxy: Proxy, path: Path) -> Path:
    """The control plane's kubeconfig with its server behind ``proxy``."""
    import yaml

    config = yaml.safe_load(cp.kubeconfig.read_text())
    for c in config["clusters"]:
        c["cluster"]["server"] = f"https://127.0.0.1:{proxy.port}"
    path.write_text(yaml.safe_dump(config))
    return path


def judge_new(cp: Any, pool: GpuPool, prefix: str, count: int = VERDICTS) -> list[float]:
    """Seconds from each of ``count`` new Workloads' reservation to the check's verdict, one Workload at a time, each
    reserved on another node with free cards (spread over the pool)."""
    watcher = Watcher(cp.kubeconfig, pool.namespace, prefix)
    writer = LiveSource(Connection(str(cp.kubeconfig), None, 60))
    latencies = []
    full = set(full_nodes(pool))
    try:
        for i in range(count):
            name = f"{prefix}{i:03d}"
            node = pool.nodes[(i * 7919) % len(pool.nodes)]
            if node in full:
                node = pool.nodes[(i * 7919 + 1) % len(pool.nodes)]
            write_workload(writer, pool, name, node, admitted=False, reserved=False)
            reserved_at = time.monotonic()
            reserve(writer, pool, name, node)
            latency = watcher.wait(writer, pool, name, node, reserved_at, 30.0)
            if not math.isnan(latency):
                latencies.append(latency)
    finally:
        watcher.stop()
    return latencies


VERDICT_HISTOGRAM = "gpuctl_check_verdict_latency_seconds"
"""The operator's own share of a verdict: from its cache seeing the reservation to its write of the check state."""


def _buckets(text: str, name: str) -> dict[float, int]:
    """A histogram's cumulative bucket counts by upper bound, from a scrape."""
    out: dict[float, int] = {}
    for line in text.splitlines():
        if line.startswith(name + "_bucket{"):
            bound = line.split('le="', 1)[1].split('"', 1)[0]
            out[float(bound)] = int(float(line.rsplit(" ", 1)[1]))
    return out


def bucket_quantile(cumulative: dict[float, int], q: float) -> float:
    """The upper bound of the bucket holding the ``q`` quantile (NaN for an empty histogram)."""
    total = cumulative.get(math.inf, 0)
    if total <= 0:
        return float("nan")
    rank = math.ceil(q * total)
    return next(bound for bound, count in sorted(cumulative.items()) if count >= rank)


def quantile(values: list[float], q: float) -> float:
    """The nearest-rank quantile (p99 of 100 values is the 99th smallest)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def _start(op: Operator, result: dict[str, Any], what: str) -> None:
    """Ready, synced, the first resync settled; then idle CPU, idle API traffic and RSS over the idle window."""
    result["ready"] = op.wait(what, lambda: op.get("/readyz")[0] == 200, 300, 0.05)
    result["synced"] = op.wait("the cache synced", op.synced, 3600, 0.2)
    print(f"  {op.tag}: ready {result['ready']:.1f}s, synced {result['synced']:.1f}s", file=sys.stderr)
    result["settled"] = op.wait_settled()
    print(f"  {op.tag}: first resync settled {result['settled']:.0f}s", file=sys.stderr)


def _idle(op: Operator, proxy: Proxy, result: dict[str, Any]) -> None:
    cpu0, bytes0, t0 = _cpu_seconds(op.pid), proxy.bytes, time.monotonic()
    time.sleep(IDLE_WINDOW)
    elapsed = time.monotonic() - t0
    result["idle_cpu"] = (_cpu_seconds(op.pid) - cpu0) / elapsed * 100
    result["idle_traffic"] = (proxy.bytes - bytes0) / elapsed * 60 / 1e6
    result["rss"] = _status_kib(op.pid, "VmRSS") / 1024


def _latencies(result: dict[str, Any], prefix: str, latencies: list[float]) -> None:
    result[f"{prefix}count"] = len(latencies)
    result[f"{prefix}p50"] = statistics.median(latencies) if latencies else float("nan")
    result[f"{prefix}p99"] = quantile(latencies, 0.99)
    result[f"{prefix}max"] = max(latencies) if latencies else float("nan")


def _scrape(op: Operator, result: dict[str, Any]) -> str:
    """The slowest of three ``/metrics`` scrapes (the first computes the usage, queue and pool gauges again when the
    Workloads changed and the last scrape is older than the gauges' TTL); the last scrape's text."""
    scrapes = []
    text = ""
    for _ in range(3):
        t = time.monotonic()
        text = op.get("/metrics")[1]
        scrapes.append(time.monotonic() - t)
    result["scrape"] = max(scrapes)
    # The per-holder series are part of what is timed: one per Pod holding a card.
    result["holder_series"] = sum(1 for line in text.splitlines() if line.startswith("gpuctl_card_holder{"))
    result["peak_rss"] = _status_kib(op.pid, "VmHWM") / 1024
    return text


def measure_operator(cp: Any, pool: GpuPool, work: Path, tag: str) -> dict[str, Any]:
    """One standalone operator through the counting proxy: start, sync, first resync, idle, RSS, verdict latency,
    views corrected, scrape."""
    proxy = Proxy(("127.0.0.1", cp.api_port))
    op = Operator(_via_proxy(cp, proxy, work / f"operator-{tag}.kubeconfig"), work / f"operator-{tag}.log")
    result: dict[str, Any] = {}
    try:
        _start(op, result, "the webhooks ready")
        before = _buckets(op.get("/metrics")[1], VERDICT_HISTOGRAM)  # scraped before the idle window, not in it
        _idle(op, proxy, result)
        busy0, v0 = _cpu_of(cp, op), time.monotonic()
        latencies = judge_new(cp, pool, f"new-{tag}-")
        busy1, spent = _cpu_of(cp, op), time.monotonic() - v0
        result["busy"] = {name: (busy1[name] - busy0.get(name, 0.0)) / spent * 100 for name in busy1}
        _latencies(result, "", latencies)
        result["verdicts"] = result.pop("count")
        _latencies(result, "view_", views_corrected(cp, pool))
        after = _buckets(_scrape(op, result), VERDICT_HISTOGRAM)
        own = {bound: after.get(bound, 0) - before.get(bound, 0) for bound in after}
        result["own_p50"] = bucket_quantile(own, 0.5)
        result["own_p99"] = bucket_quantile(own, 0.99)
        print(
            f"  operator: verdicts p50 {result['p50']:.3f}s p99 {result['p99']:.3f}s max {result['max']:.3f}s, "
            f"views corrected p99 {result['view_p99']:.3f}s, RSS {result['rss']:.0f} MiB, "
            f"scrape {result['scrape']:.2f}s",
            file=sys.stderr,
        )
    finally:
        op.stop()
        proxy.close()
    return result


def measure_companion(cp: Any, pool: GpuPool, work: Path, tag: str) -> dict[str, Any]:
    """The companion on the same cluster, through the counting proxy, reporting at once (``--shadow-settle=0``):
    start, sync, first resync (every admitted Workload's verdict and the pool's views compared), the disagreements it
    then reports (none: the standalone wrote the views, the Workloads' verdicts agree with their ledgers), idle,
    RSS, planted verdicts and views to their Events, scrape."""
    proxy = Proxy(("127.0.0.1", cp.api_port))
    op = Operator(
        _via_proxy(cp, proxy, work / f"companion-{tag}.kubeconfig"),
        work / f"companion-{tag}.log",
        "--mode=companion",
        "--shadow-settle=0",
    )
    op.tag = "companion"
    result: dict[str, Any] = {}
    try:
        _start(op, result, "ready")
        text = op.get("/metrics")[1]
        result["at_rest"] = sum(_metric(text, "gpuctl_shadow_disagreements{"))
        result["at_rest_series"] = [
            line for line in text.splitlines() if line.startswith("gpuctl_shadow_disagreement{")
        ]
        _idle(op, proxy, result)
        _latencies(result, "", verdicts_reported(cp, pool, f"planted-{tag}-"))
        _latencies(result, "view_", views_reported(cp, pool))
        _scrape(op, result)
        print(
            f"  companion: {result['at_rest']:.0f} disagreements at rest; planted verdicts reported p50 "
            f"{result['p50']:.3f}s p99 {result['p99']:.3f}s ({result['count']}), views p99 {result['view_p99']:.3f}s "
            f"({result['view_count']}); RSS {result['rss']:.0f} MiB, scrape {result['scrape']:.2f}s",
            file=sys.stderr,
        )
    finally:
        op.stop()
        proxy.close()
    return result


def measure_failover(cp: Any, pool: GpuPool, work: Path, tag: str) -> dict[str, Any]:
    """Two replicas with ``--leader-elect``: the seconds from SIGKILL of the leader to the standby's verdict on a
    Workload reserved right after the kill, and when the standby took the Lease over."""
    writer = LiveSource(Connection(str(cp.kubeconfig), None, 60))
    writer.delete(kinds.LEASE, naming.OPERATOR_NAME, namespace="default")  # a fresh election
    leader = Operator(cp.kubeconfig, work / f"leader-{tag}.log", "--leader-elect")
    standby: Operator | None = None
    result: dict[str, Any] = {}
    try:
        leader.wait("the first replica to lead", lambda: leader.synced() and leader.leading(), 3600, 0.5)
        leader.wait_settled()
        standby = Operator(cp.kubeconfig, work / f"standby-{tag}.log", "--leader-elect")
        result["standby_synced"] = standby.wait("the standby's cache synced", standby.synced, 3600, 0.2)
        if standby.leading():
            raise RuntimeError("the standby leads while the first replica is alive")
        name = f"failover-{tag}"
        node = pool.nodes[len(pool.nodes) // 2 + 1]
        write_workload(writer, pool, name, node, admitted=False, reserved=False)
        watcher = Watcher(cp.kubeconfig, pool.namespace, name)
        time.sleep(2.0)  # both replicas have seen the new Workload
        killed = time.monotonic()
        leader.kill()
        reserve(writer, pool, name, node)
        took_over = float("nan")
        deadline = killed + LEASE_SECONDS + 120
        try:
            while name not in watcher.judged and time.monotonic() < deadline:
                if math.isnan(took_over) and standby.leading():
                    took_over = time.monotonic() - killed
                if time.monotonic() - killed > 3 and not watcher.holding.get(name):
                    reserve(writer, pool, name, node)  # Kueue took the reservation back: reserve again
                time.sleep(0.05)
        finally:
            watcher.stop()
        result["failover"] = watcher.judged[name] - killed if name in watcher.judged else float("nan")
        result["took_over"] = took_over
        print(
            f"  fail-over: verdict {result['failover']:.1f}s after the kill (Lease taken over after {took_over:.1f}s)",
            file=sys.stderr,
        )
    finally:
        if leader.proc.poll() is None:
            leader.stop()
        if standby is not None:
            standby.stop()
    return result


def measure(cp: Any, api: Any, nodes: int, work: Path) -> dict[str, Any]:
    from kubernetes import client

    namespace = f"scale-{nodes}"
    client.CoreV1Api(api).create_namespace({"metadata": {"name": namespace}})
    pool, took = build_pool(cp, api, namespace, nodes)
    result: dict[str, Any] = {"nodes": nodes, "setup": took}
    result.update(measure_operator(cp, pool, work, "0"))
    result.update(measure_failover(cp, pool, work, "0"))
    result["companion"] = measure_companion(cp, pool, work, "0")
    result["apiserver_rss"] = next(
        (_status_kib(p.pid, "VmRSS") / 1024 / 1024 for p in cp.processes if p.name == "kube-apiserver" and p.pid), 0.0
    )
    return result


# ----------------------------------------------------------------------------------------------- the scrape alone

SCRAPE_BEGIN, SCRAPE_END = "<!-- scrape -->", "<!-- /scrape -->"
CHURN = 100
"""Nodes whose Pods turn over between two timed scrapes (a Pod and its Workload finish, another takes the card), and
new Workloads reserved beside them: about what changes in the 15 s between two scrapes of a busy cluster."""
SCRAPE_ROUNDS = 7
SCRAPE_BEFORE = {
    20000: "first scrape 8.48 s, nothing changed 1.962 s, after churn 6.430 s (max 6.568 s), 12.9 MB: every pool's "
    "fragmentation, every Workload's gate and every node's holdings computed again, and the holder series written by "
    "prometheus_client, at each scrape",
}
"""The same measurement before the scrape was kept node by node (the holder series on)."""


class _Listed:
    """A source of fixed objects for an operator cache fed by hand: each kind listed in one page, no watch (changes
    are applied as the informers' events); the controllers' writes are not made."""

    def __init__(self, objects: list[dict[str, Any]]) -> None:
        self.by_kind: dict[str, list[dict[str, Any]]] = {}
        for o in objects:
            self.by_kind.setdefault(str(o["kind"]), []).append(o)

    def list_pages(self, kind: Any, **_: Any) -> Iterator[Any]:
        from types import SimpleNamespace

        yield SimpleNamespace(items=self.by_kind.get(kind.kind, []), resource_version="1")

    def watch(self, *_: Any, **__: Any) -> Iterator[dict[str, Any]]:
        return iter(())

    def list(self, *_: Any, **__: Any) -> list[dict[str, Any]]:
        return []


def scrape_objects(pool: GpuPool) -> list[dict[str, Any]]:
    """What :func:`build_pool` writes, as the API server would hold it (every status in place)."""
    from testbed.factories import instancetype

    out: list[dict[str, Any]] = [
        instancetype(pool.name, group_id=pool.group_id),
        pool.flavor_object(),
        pool.cluster_queue_object(len(pool.nodes) * CARDS),
    ]
    for i, node in enumerate(pool.nodes):
        out += [node_object(pool, node), ledger_object(pool, node)]
        for p in range(held_cards(node)):
            out.append(running_workload(pool, f"run-{i:05d}-{p}", node))
            out.append(running_pod(pool, f"run-{i:05d}-{p}", node, p))
    return out


def running_workload(pool: GpuPool, name: str, node: str, *, admitted: bool = True) -> dict[str, Any]:
    w = workload_object(pool, name)
    w["status"] = reservation(pool, node, admitted=admitted)
    return w


def measure_scrape(nodes: int, rounds: int = SCRAPE_ROUNDS, churn: int = CHURN) -> dict[str, Any]:
    """The operator's ``/metrics`` text at ``nodes`` nodes, in this process: its cache fed with the objects
    :func:`build_pool` writes, the status writer's views computed, then the exposition rendered (the CPU time it takes,
    the median of ``rounds``): the first scrape (every gauge computed), a scrape with nothing changed, and scrapes each
    after ``churn`` nodes' Pods and Workloads turned over and as many new Workloads were reserved, past the gauges'
    TTL (what a scrape of a busy cluster costs)."""
    from prometheus_client.parser import text_string_to_metric_families

    from gpuctl.operator.cache import OperatorCache
    from gpuctl.operator.controllers import Controllers
    from gpuctl.operator.controllers import status as status_module
    from gpuctl.operator.controllers.status import StatusController
    from gpuctl.operator.metrics import Metrics

    pool = pool_of("scale", nodes)
    started = time.monotonic()
    source = _Listed(scrape_objects(pool))
    cache = OperatorCache(source)
    for informer in cache.informers.values():
        informer.relist()
    controllers = Controllers(cache, source, Metrics())  # type: ignore[arg-type]
    status = controllers.get(StatusController)
    for cached in cache.instancetypes().values():
        status.desired_status(cached)  # the views its reconcile computes (the pool gauges read them)
    del source
    loaded = time.monotonic() - started

    def timed() -> tuple[float, float, bytes]:
        cpu, wall = time.process_time(), time.perf_counter()
        text = controllers.metrics.render()
        return time.process_time() - cpu, time.perf_counter() - wall, text

    result: dict[str, Any] = {"nodes": nodes, "loaded": loaded, "churn": churn}
    result["first_cpu"], result["first_wall"], text = timed()
    result["idle_cpu"], result["idle_wall"], _ = timed()
    families = {f.name: len(f.samples) for f in text_string_to_metric_families(text.decode())}
    result["bytes"] = len(text)
    result["holders"] = families.get("gpuctl_card_holder", 0)
    ttl, status_module.FRAGMENTATION_TTL = status_module.FRAGMENTATION_TTL, 0.0
    informers = cache.informers
    cpu_times, wall_times = [], []
    try:
        for r in range(rounds):
            for j in range(churn):
                i = (r * churn + j) * 7919 % nodes
                node = pool.nodes[i]
                old, new = f"run-{i:05d}-0", f"run-{i:05d}-0-r{r}"
                informers[kinds.POD].apply_event({"type": "DELETED", "object": running_pod(pool, old, node, 0)})
                informers[kinds.WORKLOAD].apply_event({"type": "DELETED", "object": running_workload(pool, old, node)})
                informers[kinds.WORKLOAD].apply_event({"type": "ADDED", "object": running_workload(pool, new, node)})
                informers[kinds.POD].apply_event({"type": "ADDED", "object": running_pod(pool, new, node, 0)})
                pending = running_workload(pool, f"new-{r}-{j}", pool.nodes[(i + 1) % nodes], admitted=False)
                informers[kinds.WORKLOAD].apply_event({"type": "ADDED", "object": pending})
            cpu, wall, text = timed()
            cpu_times.append(cpu)
            wall_times.append(wall)
    finally:
        status_module.FRAGMENTATION_TTL = ttl
    text_string_to_metric_families(text.decode())  # the exposition parses
    result["churn_cpu"] = statistics.median(cpu_times)
    result["churn_cpu_max"] = max(cpu_times)
    result["churn_wall"] = statistics.median(wall_times)
    print(
        f"  scrape at {nodes} nodes: first {result['first_cpu']:.2f}s CPU, idle {result['idle_cpu']:.3f}s, after "
        f"churn {result['churn_cpu']:.3f}s (max {result['churn_cpu_max']:.3f}s); {result['holders']} holder series, "
        f"{result['bytes'] / 1e6:.1f} MB",
        file=sys.stderr,
    )
    return result


def _holders(r: dict[str, Any]) -> str:
    """How many ``gpuctl_card_holder`` series the timed scrape held (runs before it was counted: nothing)."""
    return f" ({r['holder_series']:,} holder series)" if "holder_series" in r else ""


def render_scrape(results: list[dict[str, Any]]) -> str:
    lines = [
        SCRAPE_BEGIN,
        "### The `/metrics` scrape alone (`python -m bench.scale --scrape`)",
        "",
        f"Last run: {time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores. The operator's cache fed in its own process "
        "with the objects `make bench-scale`",
        f"writes ({CARDS}-card nodes, {PODS_PER_NODE} Pods each holding a card (every card on one node in "
        f"{FULL_EVERY}), one admitted Workload per Pod), the "
        "status writer's views computed, then",
        "the exposition rendered: CPU seconds of the first scrape (every gauge computed), of one with nothing changed, "
        f"and the median of {SCRAPE_ROUNDS}",
        f"scrapes each after {CHURN} nodes' Pods and Workloads turned over and {CHURN} new Workloads were reserved, "
        "past the gauges' TTL.",
        "",
        "| nodes | first scrape | nothing changed | after churn (median, max) | `gpuctl_card_holder` series | text |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['nodes']:,} | {r['first_cpu']:.2f} s | {r['idle_cpu']:.3f} s | {r['churn_cpu']:.3f} s, "
            f"{r['churn_cpu_max']:.3f} s | {r['holders']:,} | {r['bytes'] / 1e6:.1f} MB |"
        )
    lines.append("")
    lines.append(
        "The `/metrics scrape` column of `make bench-scale` is the same scrape over HTTP in the running operator, the "
        "first after its verdicts."
    )
    for nodes, before in SCRAPE_BEFORE.items():
        if any(r["nodes"] == nodes for r in results):
            lines.append(f"Before, at {nodes:,} nodes: {before}.")
    lines.append(SCRAPE_END)
    return "\n".join(lines) + "\n"


def checks(r: dict[str, Any]) -> list[tuple[str, bool]]:
    """Each target at one size, and whether it was met."""
    t = TARGETS
    return [
        (f"verdicts of {VERDICTS} Workloads", r["verdicts"] >= VERDICTS),
        (f"verdict p99 < {t['p99']} s", r["p99"] < t["p99"]),
        (f"RSS < {t['rss'] / 1024:.0f} GiB", r["rss"] < t["rss"]),
        (f"initial sync < {t['synced']:.0f} s", r["synced"] < t["synced"]),
        (
            f"fail-over to the first verdict < the Lease's {LEASE_SECONDS} s + 5 s",
            r["failover"] < t["failover"],
        ),
        (f"idle CPU < {t['idle_cpu']:.0f} %", r["idle_cpu"] < t["idle_cpu"]),
        (f"idle API traffic < {t['idle_traffic']:.0f} MB/min", r["idle_traffic"] < t["idle_traffic"]),
        (f"webhooks ready < {t['ready']:.0f} s", r["ready"] < t["ready"]),
        (f"a /metrics scrape < {t['scrape']:.0f} s", r["scrape"] < t["scrape"]),
    ]


def companion_checks(r: dict[str, Any]) -> list[tuple[str, bool]]:
    """The companion's targets at one size: the standalone's, and its figures within the standalone's."""
    c, t = r["companion"], TARGETS
    return [
        ("no disagreement reported where the cluster agrees", c["at_rest"] == 0),
        (f"{VERDICTS} planted verdicts reported", c["count"] >= VERDICTS),
        (f"verdict p99 < {t['p99']} s", c["p99"] < t["p99"]),
        (f"{VIEW_PLANTS} planted views reported", c["view_count"] >= VIEW_PLANTS),
        (
            f"view p99 within {t['companion_ratio']}x the standalone's correction",
            c["view_p99"] <= t["companion_ratio"] * r["view_p99"],
        ),
        (f"a /metrics scrape < {t['scrape']:.0f} s", c["scrape"] < t["scrape"]),
        (f"RSS within {t['companion_ratio']}x the standalone's", c["rss"] <= t["companion_ratio"] * r["rss"]),
    ]


def _latency(r: dict[str, Any], prefix: str = "") -> str:
    return f"p50 {r[prefix + 'p50']:.3f} s, p99 {r[prefix + 'p99']:.3f} s, max {r[prefix + 'max']:.3f} s"


def _busy(r: dict[str, Any]) -> str:
    """What kept the cores busy while the verdicts were timed, where the run measured it."""
    busy = r.get("busy")
    if not busy:
        return ""
    parts = ", ".join(f"{name} {share:.0f} %" for name, share in sorted(busy.items(), key=lambda kv: -kv[1]))
    return f" While the verdicts were timed, CPU of one core: {parts}."


def _own(r: dict[str, Any]) -> str:
    """The operator's own share of the verdicts, where the run measured it."""
    if math.isnan(r.get("own_p99", math.nan)):
        return ""
    return f"; the operator's own: p50 <= {r['own_p50']:g} s, p99 <= {r['own_p99']:g} s"


def render(results: list[dict[str, Any]]) -> str:
    lines = [
        BEGIN,
        "## The operator at cluster scale (`make bench-scale`)",
        "",
        f"Last run: {time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores; the real control plane (etcd, kube-apiserver,",
        f"Kueue) holding pools of 8-card nodes with {PODS_PER_NODE} Pods each (one node in {FULL_EVERY}: a Pod on every "
        "card) and one admitted Workload per Pod. The",
        "operator runs as deployed, its Event recorder and usage gauges on; its API traffic goes through a counting",
        f"proxy; idle figures are over {IDLE_WINDOW:.0f} s after its first resync settled; verdict latency is from",
        "writing a Workload's quota reservation (in Kueue's shape) to a watch seeing the check's verdict, over",
        f"{VERDICTS} new Workloads judged one at a time; fail-over is from SIGKILL of the leader of two `--leader-elect`",
        "replicas to the standby's verdict on a Workload reserved right after the kill.",
        "",
        "| nodes | webhooks ready | cache synced | first resync settled | verdict latency | views corrected | "
        "idle CPU | idle API traffic | RSS (peak) | /metrics scrape | fail-over |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['nodes']:,} | {r['ready']:.1f} s | {r['synced']:.1f} s | {r['settled']:.0f} s | "
            f"{_latency(r)} ({r['verdicts']} verdicts){_own(r)} | {_latency(r, 'view_')} | "
            f"{r['idle_cpu']:.1f} % | {r['idle_traffic']:.3f} MB/min | {r['rss']:.0f} MiB ({r['peak_rss']:.0f} MiB) | "
            f"{r['scrape']:.2f} s{_holders(r)} | {r['failover']:.1f} s (Lease taken over after {r['took_over']:.1f} s) |"
        )
    lines.append("")
    for r in results:
        lines.append(
            f"Targets at {r['nodes']:,} nodes: "
            + "; ".join(f"{n}: {'met' if ok else '**not met**'}" for n, ok in checks(r))
            + "."
        )
        lines.append("")
    lines += [
        "### The companion beside the same cluster",
        "",
        "The companion (`--mode=companion`, reporting at once: `--shadow-settle=0`) started on each cluster after the",
        "standalone operator above had written its views and verdicts, through the same counting proxy. A planted",
        f"verdict is a new Workload's reservation written with `{naming.NODE_DEVICES_CHECK}` Ready on a node whose",
        "ledger holds every card (as GPUStack's check writes its verdicts, its field owner), timed to the watch seeing",
        f"the `{SHADOW_REASON}` Event that says the ledger says Retry; a planted view is a wrong EX `remaining`",
        "published on the pool's InstanceType, timed to its Event (for the standalone, to its status writer's",
        f"correction: `views corrected` above), {VIEW_PLANTS} of them one at a time.",
        "",
        "| nodes | ready | cache synced | first resync settled | disagreements at rest | planted verdict to Event | "
        "planted view to Event | idle CPU | idle API traffic | RSS (peak) | /metrics scrape |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        c = r["companion"]
        lines.append(
            f"| {r['nodes']:,} | {c['ready']:.1f} s | {c['synced']:.1f} s | {c['settled']:.0f} s | "
            f"{c['at_rest']:.0f} | {_latency(c)} ({c['count']}) | {_latency(c, 'view_')} ({c['view_count']}) | "
            f"{c['idle_cpu']:.1f} % | {c['idle_traffic']:.3f} MB/min | {c['rss']:.0f} MiB ({c['peak_rss']:.0f} MiB) | "
            f"{c['scrape']:.2f} s |"
        )
    lines.append("")
    for r in results:
        lines.append(
            f"Companion targets at {r['nodes']:,} nodes: "
            + "; ".join(f"{n}: {'met' if ok else '**not met**'}" for n, ok in companion_checks(r))
            + "."
        )
        lines.append("")
    lines.append("Notes:")
    for r in results:
        setup = r["setup"]
        lines.append(
            f"- {r['nodes']:,} nodes: built in {setup['nodes']:.0f} s (Nodes and ledgers) + {setup['pods']:.0f} s "
            f"({sum(held_cards(n) for n in pool_of('', r['nodes']).nodes):,} Pods and Workloads); the kube-apiserver "
            "then held "
            f"{r['apiserver_rss']:.1f} GiB; the standby's cache synced {r['standby_synced']:.0f} s after its start."
            + _busy(r)
        )
    for r in results:
        if r["companion"]["at_rest"]:
            seen = "; ".join(f"`{line}`" for line in r["companion"]["at_rest_series"][:5])
            lines.append(f"- {r['nodes']:,} nodes: the companion found at rest: {seen}.")
    for nodes, before in BEFORE.items():
        if any(r["nodes"] == nodes for r in results):
            lines.append(f"- Before the watch cache, at {nodes:,} nodes: {before}.")
    lines.append(
        "- The counting proxy forwards each segment as it arrives (`TCP_NODELAY`). With Nagle's algorithm on, a "
        "request's second segment waited for the API server's delayed ACK, up to 40 ms on each operator call it "
        "carried: at 20,000 nodes that run measured verdict p50 0.147 s, p99 0.470 s, a first resync of 721 s."
    )
    lines.append(END)
    return "\n".join(lines) + "\n"


def write_section(path: Path, section: str, begin: str = BEGIN, end: str = END) -> None:
    text = path.read_text() if path.exists() else ""
    if begin in text and end in text:
        head, _, rest = text.partition(begin)
        _, _, tail = rest.partition(end)
        text = head + section.rstrip("\n") + tail
    else:
        text = text.rstrip("\n") + "\n\n" + section
    path.write_text(text)


@contextlib.contextmanager
def control_plane(work: Path) -> Iterator[tuple[Any, Any]]:
    """A fresh control plane (its Nodes untainted as a node lifecycle controller would leave them) and a client."""
    from kubernetes import config

    cp = cpmod.start_control_plane(work, cpmod.bin_dir(), disabled_admission=("TaintNodesByCondition",))
    api = config.new_client_from_config(config_file=str(cp.kubeconfig))
    try:
        yield cp, api
    finally:
        api.close()
        cp.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", type=Path, help="write the section into this Markdown file")
    parser.add_argument("--nodes", type=int, action="append", help="pool sizes (default 5000 and 20000)")
    parser.add_argument(
        "--scrape",
        action="store_true",
        help="measure only the /metrics scrape, in this process on a cache fed by hand (no control plane)",
    )
    args = parser.parse_args()
    sizes = args.nodes or list(SIZES)
    if args.scrape:
        scraped = [measure_scrape(n) for n in sizes]
        section = render_scrape(scraped)
        print(section)
        if args.write:
            write_section(args.write, section, SCRAPE_BEGIN, SCRAPE_END)
        return 0
    results = []
    with tempfile.TemporaryDirectory(prefix="gpuctl-scale-") as tmp:
        work = Path(tmp)
        for nodes in sizes:
            # A fresh control plane per size, so one size's objects do not weigh on the next.
            with control_plane(work / f"cp-{nodes}") as (cp, api):
                print(f"scale: {nodes} nodes", file=sys.stderr)
                results.append(measure(cp, api, nodes, work))
                print(json.dumps(results[-1]), file=sys.stderr)
    section = render(results)
    print(section)
    if args.write:
        write_section(args.write, section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
