"""Builders of raw Kubernetes objects in the shapes the real cluster serves (Devices, InstanceTypes, Pods, Nodes).

Used by the tests, the benchmarks and the example snapshot.
"""

from __future__ import annotations

import json
from typing import Any

from gpuctl.core import naming
from gpuctl.core.units import M

JSON = dict[str, Any]

A10G_MIB = 24576
H100_MIB = 81920
HYGON_BW_MIB = 65520

# H100-80GB HBM3: profile → (count per card, memory slices, legal starts, memory MiB, compute slices)
H100_PROFILES: dict[str, tuple[int, int, tuple[int, ...], int, int]] = {
    "1g.10gb": (7, 1, (0, 1, 2, 3, 4, 5, 6), 9856, 1),
    "1g.20gb": (4, 2, (0, 2, 4, 6), 19968, 1),
    "2g.20gb": (3, 2, (0, 2, 4), 19968, 2),
    "3g.40gb": (2, 4, (0, 4), 40192, 3),
    "4g.40gb": (1, 4, (0,), 40192, 4),
    "7g.80gb": (1, 8, (0,), 80896, 7),
}
HYGON_BW_PROFILES: dict[str, tuple[int, int, tuple[int, ...], int, int]] = {
    "2g.15gb": (4, 1, (0, 1, 2, 3), 16380, 1),
    "4g.31gb": (2, 2, (0, 2), 32760, 2),
    "8g.63gb": (1, 4, (0,), 65520, 4),
}


def physical_profiles(table: dict[str, tuple[int, int, tuple[int, ...], int, int]]) -> list[JSON]:
    return [
        {
            "name": name,
            "memoryMib": mib,
            "computeSlices": compute,
            "memorySlices": mem_slices,
            "count": count,
            "placements": [{"start": s, "length": mem_slices} for s in starts],
        }
        for name, (count, mem_slices, starts, mib, compute) in table.items()
    ]


def card_row(
    index: int,
    *,
    mode: int = 0,
    allocated: int = 0,
    remaining: int | None = None,
    slices: int = 0,
    allocated_profiles: dict[str, int] | None = None,
    remaining_profiles: dict[str, int] | None = None,
    card_id: str | None = None,
) -> JSON:
    """A ledger row (``status.groups[].accelerators[]``) as GPUStack's device manager writes it: ``allocated`` and
    ``remaining`` left out where they are 0 (its types omit them empty)."""
    left = (M - allocated) if remaining is None else remaining
    row: JSON = {"id": card_id or f"GPU-{index:04d}", "index": index, "mode": mode}
    if allocated:
        row["allocated"] = allocated
    if left:
        row["remaining"] = left
    if slices:
        row["allocatedSlices"] = slices
    if allocated_profiles is not None:
        row["allocatedProfiles"] = [{"name": n, "count": c} for n, c in allocated_profiles.items()]
    if remaining_profiles is not None:
        row["remainingProfiles"] = [{"name": n, "count": c} for n, c in remaining_profiles.items()]
    return row


def devices(
    node: str,
    *,
    manufacturer: str = "nvidia",
    group_id: str = "a10g",
    product: str = "NVIDIA A10G",
    memory_mib: int = A10G_MIB,
    cards: int = 4,
    rows: list[JSON] | None = None,
    logical_slots: int | None = None,
    overcommit: bool = True,
    profiles: list[JSON] | None = None,
    os: str = "linux",
    arch: str = "amd64",
    managed: bool = True,
    extra_labels: dict[str, str] | None = None,
) -> JSON:
    """A ``Devices`` object with one accelerator group; ``rows`` is the ledger (absent rows mean none written)."""
    akey = naming.accelerator_key(manufacturer, group_id)
    slots = naming.MANUFACTURERS[manufacturer].slice_slots if logical_slots is None else logical_slots
    ids = [f"GPU-{i:04d}" for i in range(cards)]
    accelerators = []
    for i in range(cards):
        status: JSON = {"unhealthy": False}
        if profiles:
            status["physicalSliced"] = {"count": max(p["count"] for p in profiles), "profiles": profiles}
            status["logicalSliced"] = {"count": 0}
        elif slots:
            status["logicalSliced"] = {"count": slots, "coresPercentageOvercommit": overcommit}
        accelerators.append(
            {"id": ids[i], "index": i, "physicalIndexes": [i], "topology": card_topology(i), "status": status}
        )
    labels = {
        naming.accelerator_label(akey): "true",
        naming.LABEL_OS: os,
        naming.LABEL_ARCH: arch,
        **({naming.LABEL_MANAGED: "true"} if managed else {}),
        **(extra_labels or {}),
    }
    obj: JSON = {
        "apiVersion": "worker.gpustack.ai/v1alpha1",
        "kind": "Devices",
        "metadata": {"name": node, "labels": labels},
        "spec": {
            "groups": [
                {
                    "id": group_id,
                    "manufacturer": manufacturer,
                    "name": product,
                    "memory": memory_mib,
                    "accelerators": accelerators,
                }
            ]
        },
        "status": {"groups": []},
    }
    if rows is not None:
        obj["status"]["groups"] = [{"id": group_id, "manufacturer": manufacturer, "accelerators": rows}]
    return obj


def card_topology(index: int) -> JSON:
    """Where a card sits on its node's PCI tree, as GPUStack's detector reports it."""
    return {
        "pciBusId": f"0000:{0x10 + index:02x}:00.0",
        "pciRootId": f"pci0000:{index // 4:02x}",
        "pciClass": "0302",
        "numaAffinity": str(index // 4),
        "cpuAffinity": "",
    }


def h100_devices(node: str, *, cards: int = 8, rows: list[JSON] | None = None) -> JSON:
    return devices(
        node,
        group_id="h100-80gb-hbm3",
        product="NVIDIA H100 80GB HBM3",
        memory_mib=H100_MIB,
        cards=cards,
        rows=rows,
        profiles=physical_profiles(H100_PROFILES),
    )


def instancetype(
    name: str | None = None,
    *,
    manufacturer: str = "nvidia",
    group_id: str = "a10g",
    memory: str | None = "24Gi",
    acceleratable: bool = True,
    os: str = "linux",
    arch: str = "amd64",
    logical_count: int = 128,
    profiles: list[JSON] | None = None,
    unit_cpu: str = "8",
    unit_ram: str = "64Gi",
    local_storage: str = "100Gi",
    phase: str = "Active",
    general_group: str = "generic",
) -> JSON:
    """An InstanceType as the defaulting webhook and the status writer leave it."""
    akey = naming.accelerator_key(manufacturer, group_id) if acceleratable else ""
    if name is None:
        name = f"gpustack--{akey}-{os}-{arch}" if acceleratable else f"gpustack--{general_group}-{os}-{arch}"
    labels = {
        naming.LABEL_OS: os,
        naming.LABEL_ARCH: arch,
        naming.LABEL_ACCELERATABLE: "true" if acceleratable else "false",
        naming.LABEL_QUEUE_ENTRANCE: naming.queue_entrance(name),
    }
    if acceleratable:
        labels[naming.accelerator_label(akey)] = "true"
    spec: JSON = {
        "acceleratable": acceleratable,
        "generalGroup": general_group,
        "os": os,
        "arch": arch,
        "unitResources": {"cpu": unit_cpu if acceleratable else "1", "ram": unit_ram},
        "localStorage": local_storage,
    }
    detail: JSON = {}
    if acceleratable:
        spec["acceleratorGroup"] = akey
        detail = {"manufacturer": manufacturer, "product": group_id}
        if memory is not None:
            detail["memory"] = memory
        physical: JSON = {"count": 0}
        if profiles:
            physical = {
                "count": max(p["count"] for p in profiles),
                "profiles": [{"name": p["name"], "count": p["count"], "memoryMib": p["memoryMib"]} for p in profiles],
            }
        detail["slicedDetail"] = {"logical": {"count": logical_count}, "physical": physical}
    return {
        "apiVersion": "worker.gpustack.ai/v1alpha1",
        "kind": "InstanceType",
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
        "status": {"detail": detail, "entrance": naming.queue_entrance(name), "phase": phase},
    }


ZERO_VIEWS: JSON = {
    **{v: {"onceMaxRequest": "0", "remaining": "0", "capacity": "0"} for v in ("accelerator", "acceleratorShared")},
    **{v: {"onceMaxRequest": "0", "remaining": "0", "capacity": "0"} for v in ("acceleratorSliced", "cpu")},
    "acceleratorPartitioned": {"onceMaxRequest": "0", "remaining": "0", "capacity": "0"},
}
"""Every view at zero, as GPUStack's status writer writes a status it has not counted yet (its types require all
five): what a status written through the API carries beside the fields it sets."""


def container(name: str = "main", limits: dict[str, Any] | None = None, **extra: Any) -> JSON:
    c: JSON = {"name": name, "image": "registry.invalid/app:1"}
    if limits is not None:
        c["resources"] = {"limits": dict(limits)}
    c.update(extra)
    return c


def pod(
    containers: list[JSON],
    *,
    init_containers: list[JSON] | None = None,
    queue: str | None = naming.queue_entrance("gpustack--nvidia-a10g-linux-amd64"),
    name: str = "p",
    namespace: str = "default",
) -> JSON:
    labels = {naming.LABEL_QUEUE_NAME: queue} if queue else {}
    spec: JSON = {"containers": containers}
    if init_containers:
        spec["initContainers"] = init_containers
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": spec,
    }


def node(
    name: str, *, labels: dict[str, str] | None = None, cpu: str = "16", allocatable: dict[str, str] | None = None
) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {naming.LABEL_HOSTNAME: name, **(labels or {})}},
        "spec": {},
        "status": {
            "allocatable": {"cpu": cpu, **(allocatable or {})},
            "capacity": {"cpu": cpu, **(allocatable or {})},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def flavor(
    name: str, accelerator_key: str = "nvidia-a10g", *, count: int | None = None, os: str = "linux", arch: str = "amd64"
) -> JSON:
    """A derived ResourceFlavor pinning one accelerator model (and, with ``count``, its per-node card count)."""
    labels = {
        naming.LABEL_OS: os,
        naming.LABEL_ARCH: arch,
        naming.LABEL_MANAGED: "true",
        naming.accelerator_label(accelerator_key): "true",
    }
    if count is not None:
        labels[naming.accelerator_count_label(accelerator_key)] = str(count)
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {"name": name, "labels": {naming.LABEL_RESOURCE_TYPE: "nodes"}},
        "spec": {"nodeLabels": labels, "topologyName": "hostname"},
    }


def topology(hosts: list[tuple[str, int]]) -> JSON:
    """A v1beta2 TopologyAssignment at the hostname level, one slice per node."""
    return {
        "levels": [naming.LABEL_HOSTNAME],
        "slices": [
            {"domainCount": 1, "valuesPerLevel": [{"universal": n}], "podCounts": {"universal": c}} for n, c in hosts
        ],
    }


def workload(
    name: str,
    podsets: list[tuple[str, int, dict[str, Any]]],
    *,
    namespace: str = "team-a",
    flavor_name: str | None = "f-a10g",
    hosts: dict[str, list[tuple[str, int]]] | None = None,
    reserved: bool = True,
    admitted: bool = False,
    check_state: str = "Pending",
    conditions: dict[str, str] | None = None,
    queue: str = naming.queue_entrance("gpustack--nvidia-a10g-linux-amd64"),
    manufacturer: str = "nvidia",
) -> JSON:
    """A Workload with PodSets ``(name, count, limits)``; reserved quota puts each PodSet on ``flavor_name`` and, with
    ``hosts``, on the given nodes."""
    spec = {
        "queueName": queue,
        "podSets": [
            {"name": ps, "count": count, "template": {"spec": {"containers": [container("main", limits)]}}}
            for ps, count, limits in podsets
        ],
    }
    conds = {
        "QuotaReserved": "True" if reserved else "False",
        **({"Admitted": "True"} if admitted else {}),
        **(conditions or {}),
    }
    status: JSON = {"conditions": [{"type": t, "status": s, "reason": t} for t, s in conds.items()]}
    if reserved:
        assignments = []
        for ps, count, _ in podsets:
            a: JSON = {
                "name": ps,
                "count": count,
                "flavors": {} if flavor_name is None else {f"credits.gpustack.ai/{manufacturer}": flavor_name},
            }
            if hosts and ps in hosts:
                a["topologyAssignment"] = topology(hosts[ps])
            assignments.append(a)
        status["admission"] = {"clusterQueue": "gpustack--nvidia-a10g-linux-amd64", "podSetAssignments": assignments}
        status["admissionChecks"] = [{"name": naming.NODE_DEVICES_CHECK, "state": check_state, "message": ""}]
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"},
        "spec": spec,
        "status": status,
    }


def bound_pod(
    name: str,
    node_name: str,
    limits: dict[str, Any],
    *,
    workload_name: str | None,
    podset: str = "main",
    namespace: str = "team-a",
    allocations: dict[str, list[JSON]] | None = None,
    phase: str = "Running",
    group: tuple[str, str] = ("nvidia", "a10g"),
) -> JSON:
    """A Pod of a Workload bound to a node, with its allocation record (container → accelerators of ``group``,
    manufacturer and id) when Allocate ran."""
    # Kueue writes the unconstrained topology annotation on the Pods of a Workload it places by topology.
    annotations = (
        {naming.ANNOTATION_WORKLOAD: workload_name, "kueue.x-k8s.io/podset-unconstrained-topology": "true"}
        if workload_name
        else {}
    )
    if allocations is not None:
        record = {
            c: {"devices": {"groups": [{"id": group[1], "manufacturer": group[0], "accelerators": accs}]}}
            for c, accs in allocations.items()
        }
        annotations[naming.ANNOTATION_ALLOCATED] = json.dumps(record)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {naming.LABEL_PODSET: podset},
            "annotations": annotations,
        },
        "spec": {"nodeName": node_name, "containers": [container("main", limits)]},
        "status": {"phase": phase},
    }
