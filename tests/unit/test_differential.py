"""The CLI judges exactly as the operator does: a differential property test over generated cluster states.

Each state has several pools sharing nodes (a derived and a custom InstanceType over the same A10G cards, a
partitioned H100 pool), Workloads in every phase (pending, reserved, Ready, admitted, evicted, finished,
deactivated) and Pods with and without allocation records. The operator side runs its own watch-fed cache (its
informers list the in-memory cluster and receive every later change as an event) and its controllers' reconciles,
with the check's uncached read of the judged nodes' Pods; the CLI side reads the same objects through its ``Source``.

- Gate 3, Workload by Workload in key order: the CLI's verdict on the cluster as the operator's earlier writes left it
  equals the operator's verdict; and once repeated rounds settle, the CLI's recomputation equals every stored verdict.
- The four views the status writer publishes equal ``views -o json``.
- The fit labels the operator writes on each Node equal the ones ``views --by-node`` shows for it.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuctl.cli.commands.views import node_breakdown
from gpuctl.cli.usecases import compute_items, explained, public
from gpuctl.cluster import kinds
from gpuctl.core import naming
from gpuctl.core.fit import judgeable
from gpuctl.core.units import SHARE, M
from gpuctl.core.workloads import parse_workload
from gpuctl.operator.cache import OperatorCache
from gpuctl.operator.controllers import Controllers
from gpuctl.operator.controllers.check import CheckController
from gpuctl.operator.controllers.fit_labels import FitLabelController
from gpuctl.operator.controllers.status import StatusController
from gpuctl.operator.metrics import Metrics
from testbed.factories import (
    H100_PROFILES,
    card_row,
    container,
    devices,
    flavor,
    h100_devices,
    instancetype,
    node,
    topology,
)
from tests.memory_cluster import MemoryCluster

JSON = dict[str, Any]
NS = "team-a"
A10G_KEY = "nvidia-a10g"
H100_KEY = "nvidia-h100-80gb-hbm3"
POOL_LABELS = {"gpustack.ai/managed": "true", "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}
# pool → (InstanceType, flavor, accelerator key)
POOLS = {
    "derived": ("gpustack--nvidia-a10g-linux-amd64", "f-a10g", A10G_KEY),
    "custom": ("a10g-custom", "f-a10g-custom", A10G_KEY),
    "h100": ("gpustack--nvidia-h100-80gb-hbm3-linux-amd64", "f-h100", H100_KEY),
}
PROFILES = sorted(H100_PROFILES)
PHASES = ("pending", "reserved", "retry", "ready", "admitted", "evicted", "finished", "inactive")


def cluster_queue(name: str, flavor_name: str) -> JSON:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": name, "labels": {naming.LABEL_RESOURCE_TYPE: naming.RESOURCE_TYPE_INSTANCETYPES}},
        "spec": {
            "stopPolicy": "None",
            "resourceGroups": [
                {
                    "coveredResources": ["credits.gpustack.ai/nvidia"],
                    "flavors": [
                        {
                            "name": flavor_name,
                            "resources": [{"name": "credits.gpustack.ai/nvidia", "nominalQuota": "0"}],
                        }
                    ],
                }
            ],
            "admissionChecksStrategy": {"admissionChecks": [{"name": naming.NODE_DEVICES_CHECK}]},
        },
        "status": {},
    }


def local_queue(cq: str) -> JSON:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": naming.queue_entrance(cq), "namespace": NS},
        "spec": {"clusterQueue": cq},
    }


def h100_instancetype() -> JSON:
    from testbed.factories import physical_profiles

    return instancetype(
        group_id="h100-80gb-hbm3", memory="80Gi", logical_count=0, profiles=physical_profiles(H100_PROFILES)
    )


# ----------------------------------------------------------------------------------------------- demands


def limits_of(pool: str, draw: st.DrawFn) -> list[JSON]:
    """The containers of one Pod: one family, as the request rules allow."""
    if pool == "h100":
        profile = draw(st.sampled_from(PROFILES))
        mib = H100_PROFILES[profile][3]
        units = mib * M // 81920
        return [
            container(
                "main",
                {
                    "nvidia.com/gpu.partitioned": "1",
                    f"nvidia.com/gpu.partitioned.mig-{profile}": "1",
                    "nvidia.com/gpu.partitioned.units": str(units),
                },
            )
        ]
    family = draw(st.sampled_from(("exclusive", "shared", "sliced")))
    if family == "exclusive":
        return [
            container(f"c{i}", {"nvidia.com/gpu": str(n)})
            for i, n in enumerate(draw(st.lists(st.integers(1, 3), min_size=1, max_size=2)))
        ]
    if family == "shared":
        return [
            container(f"c{i}", {"nvidia.com/gpu.shared": str(n)})
            for i, n in enumerate(draw(st.lists(st.integers(1, 3), min_size=1, max_size=2)))
        ]
    pct = draw(st.sampled_from((10, 30, 50, 60, 100)))
    return [
        container(
            "main",
            {
                "nvidia.com/gpu.sliced": "1",
                "nvidia.com/gpu.sliced.memory-percentage": str(pct),
                "nvidia.com/gpu.sliced.units": str(pct * 16000),
                "nvidia.com/gpu.sliced.cores-percentage": "100",
            },
        )
    ]


def allocation_record(containers: list[JSON], cards: list[str], group_id: str, draw: st.DrawFn) -> JSON:
    """What ``Allocate`` would write for this Pod on the given cards (container → card list)."""
    record: JSON = {}
    for c in containers:
        limits = c["resources"]["limits"]
        accs: list[JSON] = []
        if "nvidia.com/gpu" in limits:
            for cid in draw(
                st.lists(st.sampled_from(cards), min_size=1, max_size=int(limits["nvidia.com/gpu"]), unique=True)
            ):
                accs.append({"id": cid, "mode": 1, "allocated": M})
        elif "nvidia.com/gpu.shared" in limits:
            for cid in draw(
                st.lists(st.sampled_from(cards), min_size=1, max_size=int(limits["nvidia.com/gpu.shared"]), unique=True)
            ):
                accs.append({"id": cid, "mode": 2, "allocated": SHARE})
        elif "nvidia.com/gpu.sliced" in limits:
            accs.append(
                {"id": draw(st.sampled_from(cards)), "mode": 3, "allocated": int(limits["nvidia.com/gpu.sliced.units"])}
            )
        else:
            profile = next(k.rsplit("mig-", 1)[1] for k in limits if "mig-" in k)
            _, length, starts, _, _ = H100_PROFILES[profile]
            accs.append(
                {
                    "id": draw(st.sampled_from(cards)),
                    "mode": 4,
                    "allocated": int(limits["nvidia.com/gpu.partitioned.units"]),
                    "allocatedPhysicalProfile": profile,
                    "allocatedPhysicalPlacements": [{"start": draw(st.sampled_from(starts)), "length": length}],
                }
            )
        record[c["name"]] = {"devices": {"groups": [{"id": group_id, "manufacturer": "nvidia", "accelerators": accs}]}}
    return record


def pod_object(
    name: str,
    node_name: str,
    containers: list[JSON],
    *,
    workload: str | None,
    podset: str,
    phase: str,
    record: JSON | None,
) -> JSON:
    annotations: JSON = {}
    if workload:
        annotations[naming.ANNOTATION_WORKLOAD] = workload
    if record is not None:
        annotations[naming.ANNOTATION_ALLOCATED] = json.dumps(record)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {naming.LABEL_PODSET: podset},
            "annotations": annotations,
        },
        "spec": {"nodeName": node_name, "containers": containers},
        "status": {"phase": phase},
    }


@st.composite
def cluster_states(draw: st.DrawFn) -> list[JSON]:
    objects: list[JSON] = []
    a10g_nodes = [f"a10g-{i}" for i in range(draw(st.integers(1, 3)))]
    h100_nodes = [f"h100-{i}" for i in range(draw(st.integers(0, 2)))]
    cards: dict[str, list[str]] = {}
    for n in a10g_nodes:
        count = draw(st.sampled_from((2, 4)))
        rows = [card_row(i, mode=draw(st.sampled_from((0, 0, 1, 2, 3))), allocated=0) for i in range(count)]
        objects.append(devices(n, cards=count, rows=rows))
        cards[n] = [f"GPU-{i:04d}" for i in range(count)]
        objects.append(node(n, labels={**POOL_LABELS, naming.accelerator_label(A10G_KEY): "true"}))
    for n in h100_nodes:
        count = draw(st.sampled_from((1, 2)))
        objects.append(h100_devices(n, cards=count))
        cards[n] = [f"GPU-{i:04d}" for i in range(count)]
        objects.append(node(n, labels={**POOL_LABELS, naming.accelerator_label(H100_KEY): "true"}))
    pools = ["derived", "custom"] + (["h100"] if h100_nodes else [])
    for pool in pools:
        it_name, flavor_name, key = POOLS[pool]
        it = h100_instancetype() if pool == "h100" else instancetype(it_name)
        objects += [it, flavor(flavor_name, key), cluster_queue(it_name, flavor_name), local_queue(it_name)]
    for i in range(draw(st.integers(0, 6))):
        pool = draw(st.sampled_from(pools))
        it_name, flavor_name, _ = POOLS[pool]
        nodes = h100_nodes if pool == "h100" else a10g_nodes
        phase = draw(st.sampled_from(PHASES))
        count = draw(st.integers(1, 2))
        containers = limits_of(pool, draw)
        name = f"w{i}"
        conditions: dict[str, str] = {}
        if phase != "pending":
            conditions["QuotaReserved"] = "True"
        if phase in ("admitted", "finished"):
            conditions["Admitted"] = "True"
        if phase == "evicted":
            conditions["Evicted"] = "True"
        if phase == "finished":
            conditions["Finished"] = "True"
        status: JSON = {"conditions": [{"type": t, "status": s, "reason": t} for t, s in conditions.items()]}
        hosts: list[tuple[str, int]] = []
        if phase != "pending":
            if draw(st.integers(0, 9)) > 0:
                for _ in range(count):
                    n = draw(st.sampled_from(nodes))
                    hosts = (
                        [(h, c + 1) if h == n else (h, c) for h, c in hosts]
                        if any(h == n for h, _ in hosts)
                        else [*hosts, (n, 1)]
                    )
            assignment: JSON = {"name": "main", "count": count, "flavors": {"credits.gpustack.ai/nvidia": flavor_name}}
            if hosts:
                assignment["topologyAssignment"] = topology(sorted(hosts))
            status["admission"] = {"clusterQueue": it_name, "podSetAssignments": [assignment]}
            state = {"retry": "Retry", "ready": "Ready", "admitted": "Ready", "finished": "Ready"}.get(phase, "Pending")
            status["admissionChecks"] = [{"name": naming.NODE_DEVICES_CHECK, "state": state, "message": ""}]
        objects.append(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "Workload",
                "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}"},
                "spec": {
                    "queueName": naming.queue_entrance(it_name),
                    "active": phase != "inactive",
                    "podSets": [{"name": "main", "count": count, "template": {"spec": {"containers": containers}}}],
                },
                "status": status,
            }
        )
        # Pods of a Workload that holds its cards: some allocated, some not yet, some finished.
        if phase in ("admitted", "ready", "finished", "evicted") and hosts:
            j = 0
            for host, pods_there in hosts:
                for _ in range(pods_there):
                    if draw(st.booleans()):
                        record = (
                            allocation_record(
                                containers, cards[host], "h100-80gb-hbm3" if pool == "h100" else "a10g", draw
                            )
                            if draw(st.booleans())
                            else None
                        )
                        pod_phase = draw(st.sampled_from(("Running", "Running", "Succeeded", "Failed", "Pending")))
                        objects.append(
                            pod_object(
                                f"{name}-{j}",
                                host,
                                containers,
                                workload=name,
                                podset="main",
                                phase=pod_phase,
                                record=record,
                            )
                        )
                    j += 1
    # A Pod outside Kueue holding cards (the ledger charges every allocation, Kueue-routed or not).
    if draw(st.booleans()):
        host = draw(st.sampled_from(a10g_nodes))
        containers = [container("main", {"nvidia.com/gpu": "1"})]
        objects.append(
            pod_object(
                "outsider",
                host,
                containers,
                workload=None,
                podset="",
                phase="Running",
                record=allocation_record(containers, cards[host], "a10g", draw),
            )
        )
    return objects


# ----------------------------------------------------------------------------------------------- the two sides


def operator(cluster: MemoryCluster) -> Controllers:
    """The operator's cache, fed by the cluster, and its controllers."""
    cache = OperatorCache(cluster)
    cluster.feed(cache)
    return Controllers(cache, cluster, Metrics())


def operator_round(cluster: MemoryCluster, controllers: Controllers) -> int:
    """The check reconciles every Workload once, in key order; returns the number of verdicts written."""
    before = len(cluster.writes)
    for key in sorted(controllers.cache.keys(kinds.WORKLOAD)):
        controllers.get(CheckController).reconcile(key)
    return len(cluster.writes) - before


def cli_check(cluster: MemoryCluster, namespace: str, name: str) -> tuple[str, str] | None:
    """The (state, message) the CLI's explain computes for gate 3, or None when the check does not judge it."""
    e = explained(cluster, namespace, name)
    return e.gates[2].check


def stored_check(cluster: MemoryCluster, namespace: str, name: str) -> tuple[str, str]:
    w = parse_workload(cluster.get(kinds.WORKLOAD, name, namespace) or {})
    c = w.check(naming.NODE_DEVICES_CHECK)
    assert c is not None
    return c.state, c.message


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(cluster_states())
def test_the_cli_and_the_operator_give_the_same_gate3_verdicts(objects: list[JSON]) -> None:
    cluster = MemoryCluster(objects)
    controllers = operator(cluster)
    # Round 1, Workload by Workload: the CLI on the cluster as the operator's earlier writes left it.
    replay = MemoryCluster(json.loads(json.dumps(objects)))
    workloads = sorted((parse_workload(o) for o in cluster.list(kinds.WORKLOAD)), key=lambda w: w.key)
    operator_round(cluster, controllers)
    writes = {(w.namespace, w.name): w for w in cluster.writes if w.kind == "Workload"}
    for w in workloads:
        expected = cli_check(replay, w.namespace, w.name)
        judged = judgeable(w) is None and w.check(naming.NODE_DEVICES_CHECK) is not None
        write = writes.get((w.namespace, w.name))
        if not judged:
            assert write is None, f"{w.key}: the operator wrote a verdict for a Workload it does not judge"
            continue
        assert expected is not None, f"{w.key}: the CLI does not judge a Workload the operator judges"
        if write is None:
            assert expected == stored_check(replay, w.namespace, w.name), w.key
        else:
            entry = write.body["status"]["admissionChecks"][0]
            assert expected == (entry["state"], entry["message"]), w.key
            replay.patch(
                kinds.WORKLOAD,
                w.name,
                write.body,
                namespace=w.namespace,
                subresource="status",
                patch_type=write.patch_type,
            )
    # Rounds until nothing changes: the check is level-triggered, so it settles.
    for _ in range(8):
        if operator_round(cluster, controllers) == 0:
            break
    else:
        raise AssertionError("the check's rounds never settle")
    # Settled: the CLI recomputes every stored verdict.
    for w in workloads:
        got = cli_check(cluster, w.namespace, w.name)
        if got is not None:
            assert got == stored_check(cluster, w.namespace, w.name), w.key


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(cluster_states())
def test_the_status_writer_and_fit_labels_equal_the_cli_views(objects: list[JSON]) -> None:
    cluster = MemoryCluster(objects)
    controllers = operator(cluster)
    for name in controllers.cache.keys(kinds.INSTANCETYPE):
        controllers.get(StatusController).reconcile(name)
    for name in controllers.cache.keys(kinds.NODE):
        controllers.get(FitLabelController).reconcile(name)
    items = compute_items(cluster, [], None)
    for item in items:
        published = (cluster.get(kinds.INSTANCETYPE, item["name"]) or {})["status"]
        view = public(item)
        for key in ("accelerator", "acceleratorShared", "acceleratorSliced", "acceleratorPartitioned", "cpu"):
            assert published[key] == view[key], (item["name"], key)
    shown: dict[str, dict[str, str]] = {}
    for item in items:
        for n in node_breakdown(item):
            shown.setdefault(n["node"], {}).update(n["fitLabels"])
    for obj in cluster.list(kinds.NODE):
        labels = obj["metadata"].get("labels") or {}
        fit = {k: v for k, v in labels.items() if k.startswith((naming.SLICED_FIT_PREFIX, naming.SHARED_FIT_PREFIX))}
        assert fit == shown.get(obj["metadata"]["name"], {}), obj["metadata"]["name"]
