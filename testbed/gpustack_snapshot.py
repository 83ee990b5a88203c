"""Write the example snapshot of a cluster that runs GPUStack's worker (examples/gpustack): python -m
testbed.gpustack_snapshot DIR.

Everything in it is in the shapes GPUStack's code writes (:mod:`testbed.standin`): an NVIDIA H100 node partitioned by
MIG, a Hygon K100_AI node (its group id keeps the ``_``), a T-Head PPU node whose profiles its driver names without a
separator, a CPU node; the worker's Deployment renaming Hygon's resources (``GPUSTACK_HYGON_ACCELERATABLE_RESOURCE_NAME``)
and its Lease; its webhook configurations and both of its AdmissionChecks; a ModelDeployment replica held by the
joint check and one it parked; the PPU pool draining; runtime versions and a RDMA interface on the ledgers. One figure
is planted stale — the H100 pool's published PT remaining, one more than its ledger gives — for ``views``,
``doctor`` and ``diff`` to show.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from gpuctl.core import gpustack, naming
from gpuctl.core.capacity import node_allocatable
from gpuctl.core.instancetypes import parse_instancetype
from gpuctl.core.ledger import parse_devices
from gpuctl.core.pins import node_fit_labels
from gpuctl.core.units import M
from gpuctl.core.workloads import parse_cluster_queue
from testbed import standin
from testbed.example_snapshot import EXAMPLE_DAY, EXAMPLE_NOW
from testbed.factories import (
    H100_MIB,
    H100_PROFILES,
    bound_pod,
    card_row,
    devices,
    flavor,
    instancetype,
    node,
    physical_profiles,
    workload,
)

JSON = dict[str, Any]
HYGON_RESOURCE = "hygon.com/gpu"
WORKER_ENV = {"GPUSTACK_HYGON_ACCELERATABLE_RESOURCE_NAME": HYGON_RESOURCE}
"""The chart's ``global.manufacturers`` row for Hygon, renaming its resource (GPUStack's default is hygon.com/dcu)."""
KUEUE_VERSION = "v0.18.10"
"""The Kueue GPUStack's chart bundles."""
NS = "team-a"
H100 = "nvidia-h100-80gb-hbm3"
K100 = "hygon-k100_ai"
PPU = "thead-ppu-zw810e"
PPU_PROFILES = {"4g48gb": (2, 4, (0, 4), 49152, 4), "8g96gb": (1, 8, (0,), 98304, 8)}
K100_MIB = 65520
PPU_MIB = 98304
UNITS_3G = 40192 * M // H100_MIB
UNITS_4G48 = 49152 * M // PPU_MIB


def _stamp(obj: JSON, created: str, conditions: dict[str, str], check: str | None = None) -> None:
    obj["metadata"]["creationTimestamp"] = f"{EXAMPLE_DAY}T{created}Z"
    for c in obj["status"].get("conditions") or []:
        c["lastTransitionTime"] = f"{EXAMPLE_DAY}T{conditions.get(c['type'], created)}Z"
    for c in obj["status"].get("admissionChecks") or []:
        c["lastTransitionTime"] = f"{EXAMPLE_DAY}T{check or created}Z"


def _with_switches(d: JSON, interface: bool = False) -> JSON:
    """A ledger's cards behind their PCI switches, its groups' runtime version; a RDMA NIC where ``interface``."""
    for g in d["spec"]["groups"]:
        for a in g["accelerators"]:
            a["topology"]["pciSwitches"] = [f"0000:{0x0F + a['index']:02x}:00.0"]
    if interface:
        d["spec"]["interfaces"] = [
            {
                "name": "ib0",
                "bus": "pci",
                "pciBusId": "0000:3b:00.0",
                "pciVendor": "15b3",
                "pciDevice": "101b",
                "numaAffinity": "0",
                "mtu": 4092,
                "up": True,
                "rdma": True,
                "rdmaDevice": "mlx5_0",
                "link": {"state": "ok"},
            }
        ]
    return d


def _ledgers() -> list[JSON]:
    h100 = devices(
        "h100-1",
        group_id="h100-80gb-hbm3",
        product="NVIDIA H100 80GB HBM3",
        memory_mib=H100_MIB,
        cards=8,
        profiles=physical_profiles(H100_PROFILES),
        rows=[
            card_row(
                0,
                mode=4,
                allocated=2 * UNITS_3G,
                allocated_profiles={"3g.40gb": 2},
                remaining_profiles={n: 0 for n in H100_PROFILES},
            ),
            *[card_row(i) for i in range(1, 8)],
        ],
    )
    h100["spec"]["groups"][0]["runtimeVersion"] = "12.4"
    k100 = devices(
        "k100-1",
        manufacturer="hygon",
        group_id="k100_ai",
        product="K100_AI",
        memory_mib=K100_MIB,
        cards=4,
        logical_slots=4,
        overcommit=False,
        rows=[
            card_row(0),
            card_row(1),
            card_row(2, mode=3, allocated=M // 2, slices=1),
            card_row(3, mode=1, allocated=M),
        ],
    )
    k100["spec"]["groups"][0]["runtimeVersion"] = "6.2"
    ppu = devices(
        "ppu-1",
        manufacturer="thead",
        group_id="ppu-zw810e",
        product="PPU ZW810E",
        memory_mib=PPU_MIB,
        cards=4,
        profiles=physical_profiles(PPU_PROFILES),
        rows=[
            card_row(
                0,
                mode=4,
                allocated=UNITS_4G48,
                allocated_profiles={"4g48gb": 1},
                remaining_profiles={"4g48gb": 1, "8g96gb": 0},
            ),
            *[card_row(i) for i in range(1, 4)],
        ],
    )
    ppu["spec"]["groups"][0]["runtimeVersion"] = "1.5"
    return [_with_switches(h100, interface=True), _with_switches(k100), _with_switches(ppu)]


def _flavor_name(key: str, cards: int) -> str:
    return f"gpustack--generic--{key}-linux-amd64-{cards}d"


def _queue(name: str, resource: str, flavors: list[tuple[str, int]], checks: list[str], **more: Any) -> JSON:
    spec: JSON = {
        "namespaceSelector": {},
        "stopPolicy": more.pop("stop", "None"),
        "resourceGroups": [
            {
                "coveredResources": [resource],
                "flavors": [{"name": f, "resources": [{"name": resource, "nominalQuota": str(q)}]} for f, q in flavors],
            }
        ],
        "admissionChecksStrategy": {"admissionChecks": [{"name": c} for c in checks]},
    }
    status: JSON = {
        "conditions": [{"type": "Active", "status": "True", "reason": "Ready", "message": "Can admit new workloads"}],
        **more,
    }
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": name, "labels": {naming.LABEL_RESOURCE_TYPE: naming.RESOURCE_TYPE_INSTANCETYPES}},
        "spec": spec,
        "status": status,
    }


def build() -> dict[str, list[JSON]]:
    table = naming.manufacturer_table(WORKER_ENV)
    with naming.use_manufacturers(table):
        return _build()


def _build() -> dict[str, list[JSON]]:
    ledgers = _ledgers()
    parsed = {d["metadata"]["name"]: parse_devices(d) for d in ledgers}
    base = {naming.LABEL_MANAGED: "true", naming.LABEL_OS: "linux", naming.LABEL_ARCH: "amd64"}

    def gpu_node(name: str, key: str, cards: int, cpu: str) -> JSON:
        led = parsed[name]
        keys = {k: str(v) for k, v in node_allocatable(led).items()}
        mfr = key.split("-", 1)[0]
        keys[naming.CREDITS_PREFIX + mfr] = str(cards * M)
        labels = {
            **base,
            naming.accelerator_label(key): "true",
            naming.accelerator_count_label(key): str(cards),
            **node_fit_labels(led),  # as GPUStack's fit-label writer left them
        }
        return node(name, labels=labels, cpu=cpu, allocatable={**keys, "memory": "512Gi", "pods": "110"})

    nodes = [
        gpu_node("h100-1", H100, 8, "192"),
        gpu_node("k100-1", K100, 4, "64"),
        gpu_node("ppu-1", PPU, 4, "64"),
        node("cpu-1", labels=base, cpu="32", allocatable={"memory": "128Gi", "pods": "110"}),
    ]
    names = {key: f"gpustack--{key}-linux-amd64" for key in (H100, K100, PPU)}
    generic = "gpustack--generic-linux-amd64"
    types = [
        instancetype(group_id="h100-80gb-hbm3", memory="80Gi", logical_count=0, unit_cpu="12", unit_ram="192Gi"),
        instancetype(
            manufacturer="hygon", group_id="k100_ai", memory="64Gi", logical_count=16, unit_cpu="12", unit_ram="128Gi"
        ),
        instancetype(manufacturer="thead", group_id="ppu-zw810e", memory="96Gi", logical_count=0, unit_ram="64Gi"),
        instancetype(acceleratable=False, unit_ram="2Gi"),
    ]
    for t in types:
        t["status"] = {}  # written below, as GPUStack's status writer writes it
        t["metadata"]["labels"][naming.LABEL_DERIVED_FROM_NODE] = "true"
    joint = gpustack.JOINT_CHECK
    queues = [
        _queue(
            names[H100],
            "credits.gpustack.ai/nvidia",
            [(_flavor_name(H100, 8), 8 * M)],
            [naming.NODE_DEVICES_CHECK, joint],
            reservingWorkloads=1,
            flavorsReservation=[
                {
                    "name": _flavor_name(H100, 8),
                    "resources": [{"name": "credits.gpustack.ai/nvidia", "total": str(UNITS_3G)}],
                }
            ],
        ),
        _queue(
            names[K100],
            "credits.gpustack.ai/hygon",
            [(_flavor_name(K100, 4), 4 * M)],
            [naming.NODE_DEVICES_CHECK, joint],
            admittedWorkloads=2,
            reservingWorkloads=2,
            flavorsReservation=[
                {
                    "name": _flavor_name(K100, 4),
                    "resources": [{"name": "credits.gpustack.ai/hygon", "total": str(M + M // 2)}],
                }
            ],
        ),
        _queue(
            names[PPU],
            "credits.gpustack.ai/thead",
            [(_flavor_name(PPU, 4), 4 * M)],
            [naming.NODE_DEVICES_CHECK, joint],
            stop="HoldAndDrain",
            admittedWorkloads=1,
            reservingWorkloads=1,
            flavorsReservation=[
                {
                    "name": _flavor_name(PPU, 4),
                    "resources": [{"name": "credits.gpustack.ai/thead", "total": str(UNITS_4G48)}],
                }
            ],
        ),
        _queue(
            generic,
            "cpu",
            [
                ("gpustack--generic-linux-amd64-32c", 32),
                ("gpustack--generic-linux-amd64-64c", 128),
                ("gpustack--generic-linux-amd64-192c", 192),
            ],
            [joint],
            flavorsReservation=[
                {"name": "gpustack--generic-linux-amd64-32c", "resources": [{"name": "cpu", "total": "1600m"}]}
            ],
        ),
    ]
    parsed_queues = {q["metadata"]["name"]: parse_cluster_queue(q) for q in queues}
    notes = {
        names[H100]: {"memory": "80Gi", "cores": "132"},
        names[K100]: {"memory": "64Gi", "cores": "120"},
        names[PPU]: {"memory": "96Gi", "cores": "128"},
    }
    for t in types:
        record = parse_instancetype(t)
        t["status"] = standin.instancetype_status(
            record, list(parsed.values()), parsed_queues.get(record.name), notes.get(record.name)
        )
    # Planted: the H100 pool's status one partition instance behind its ledger, as a status written before the
    # ledger last moved would be.
    h100_status = next(t for t in types if t["metadata"]["name"] == names[H100])["status"]
    pt = h100_status["acceleratorPartitioned"]
    pt["remaining"] = str(int(pt["remaining"]) + 1)
    flavors = [
        {**flavor(_flavor_name(key, cards), key, count=cards)} for key, cards in ((H100, 8), (K100, 4), (PPU, 4))
    ]
    kueue: list[JSON] = [
        *flavors,
        *standin.admission_checks(),
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Topology",
            "metadata": {"name": "hostname"},
            "spec": {"levels": [{"nodeLabel": naming.LABEL_HOSTNAME}]},
        },
        *(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "LocalQueue",
                "metadata": {
                    "name": naming.queue_entrance(cq),
                    "namespace": NS,
                    "annotations": {naming.ANNOTATION_QUEUE: cq},
                },
                "spec": {"clusterQueue": cq},
            }
            for cq in (*names.values(), generic)
        ),
    ]
    workloads, pods = _workloads(names)
    return {
        "devices": ledgers,
        "nodes": nodes,
        "instancetypes": types,
        "clusterqueues": queues,
        "kueue": kueue,
        "workloads": workloads,
        "pods": pods,
        "gpustack": _gpustack(),
    }


def _workloads(names: dict[str, str]) -> tuple[list[JSON], list[JSON]]:
    h100_fl, k100_fl, ppu_fl = _flavor_name(H100, 8), _flavor_name(K100, 4), _flavor_name(PPU, 4)
    mig3g = {
        "nvidia.com/gpu.partitioned": "1",
        "nvidia.com/gpu.partitioned.mig-3g.40gb": "1",
        "nvidia.com/gpu.partitioned.units": str(UNITS_3G),
    }
    half = {
        f"{HYGON_RESOURCE}.sliced": "1",
        f"{HYGON_RESOURCE}.sliced.memory-percentage": "50",
        f"{HYGON_RESOURCE}.sliced.units": str(M // 2),
        f"{HYGON_RESOURCE}.sliced.cores-percentage": "100",
    }
    ppu4g = {
        "alibabacloud.com/ppu.partitioned": "1",
        "alibabacloud.com/ppu.partitioned.mig-4g.48gb": "1",
        "alibabacloud.com/ppu.partitioned.units": str(UNITS_4G48),
    }
    joint = gpustack.JOINT_CHECK
    # A multi-role ModelDeployment "chat": its prefill replica reserved and past the node-devices check, held by the
    # joint check while its decode replica waits for quota.
    prefill = workload(
        "chat-prefill-0",
        [("main", 1, mig3g)],
        flavor_name=h100_fl,
        hosts={"main": [("h100-1", 1)]},
        check_state="Ready",
        queue=naming.queue_entrance(names[H100]),
    )
    prefill["status"]["admission"]["clusterQueue"] = names[H100]
    prefill["status"]["admissionChecks"] = [
        {
            "name": naming.NODE_DEVICES_CHECK,
            "state": "Ready",
            "message": 'the node "h100-1" Kueue assigned has enough free cards to place the request',
        },
        {
            "name": joint,
            "state": "Pending",
            "message": "holding this replica until the whole deployment can run: 1 of 2 replicas have reserved quota, "
            "and the ones still waiting belong to the roles decode. Every replica keeps the quota it has reserved while "
            "it waits",
        },
    ]
    decode = workload(
        "chat-decode-0",
        [("main", 1, {HYGON_RESOURCE: "3"})],
        reserved=False,
        queue=naming.queue_entrance(names[K100]),
        manufacturer="hygon",
    )
    decode["status"]["conditions"] = [
        {
            "type": "QuotaReserved",
            "status": "False",
            "reason": "Pending",
            "message": "couldn't assign flavors to pod set main: insufficient unused quota for credits.gpustack.ai/hygon "
            f"in flavor {k100_fl}, 3200k more needed",
        },
    ]
    # One it parked: deactivated after 30 minutes of waiting.
    parked = workload(
        "search-prefill-0",
        [("main", 1, mig3g)],
        reserved=False,
        queue=naming.queue_entrance(names[H100]),
        conditions={"Evicted": "True"},
    )
    parked["spec"]["active"] = False
    parked["status"]["conditions"] = [
        {"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": "The workload is deactivated"},
        {"type": "Evicted", "status": "True", "reason": "Deactivated", "message": "The workload is deactivated"},
    ]
    parked["status"]["admissionChecks"] = [
        {"name": naming.NODE_DEVICES_CHECK, "state": "Pending", "message": ""},
        {
            "name": joint,
            "state": "Pending",
            "message": "holding this replica until the whole deployment can run: 1 of 2 replicas have reserved quota, "
            "and the ones still waiting belong to the roles decode. Every replica keeps the quota it has reserved while "
            "it waits. This has not changed for 30m0s, so the deployment is parked rather than held: its workloads are "
            "deactivated and no longer ask for quota. An identical re-apply does not clear this \u2014 free the capacity "
            "the waiting groups need and reactivate the workloads, or delete the deployment and create it again",
        },
    ]
    for md, role in ((prefill, "prefill"), (decode, "decode"), (parked, "prefill")):
        owner = md["metadata"]["name"].rsplit("-", 2)[0]
        md["metadata"]["labels"] = {
            "app.kubernetes.io/name": gpustack.MODEL_DEPLOYMENT_NAME_LABEL,
            "app.kubernetes.io/instance": owner,
            "app.kubernetes.io/component": role,
        }
    embed = workload(
        "k100-embed",
        [("main", 1, half)],
        flavor_name=k100_fl,
        hosts={"main": [("k100-1", 1)]},
        admitted=True,
        check_state="Ready",
        queue=naming.queue_entrance(names[K100]),
        manufacturer="hygon",
    )
    train = workload(
        "k100-train",
        [("main", 1, {HYGON_RESOURCE: "1"})],
        flavor_name=k100_fl,
        hosts={"main": [("k100-1", 1)]},
        admitted=True,
        check_state="Ready",
        queue=naming.queue_entrance(names[K100]),
        manufacturer="hygon",
    )
    infer = workload(
        "ppu-infer",
        [("main", 1, ppu4g)],
        flavor_name=ppu_fl,
        hosts={"main": [("ppu-1", 1)]},
        admitted=True,
        check_state="Ready",
        queue=naming.queue_entrance(names[PPU]),
        manufacturer="thead",
    )
    for w, cq in ((embed, names[K100]), (train, names[K100]), (infer, names[PPU])):
        w["status"]["admission"]["clusterQueue"] = cq
        w["status"]["admissionChecks"].append(
            {"name": joint, "state": "Ready", "message": gpustack.JOINT_NOTHING_TO_WAIT_FOR}
        )
    _stamp(prefill, "11:20:00", {"QuotaReserved": "11:20:02"}, "11:20:03")
    _stamp(decode, "11:20:00", {"QuotaReserved": "11:20:00"})
    _stamp(parked, "10:00:00", {"QuotaReserved": "10:31:00", "Evicted": "10:31:00"}, "10:00:05")
    _stamp(embed, "09:00:00", {"QuotaReserved": "09:00:01", "Admitted": "09:00:03"}, "09:00:03")
    _stamp(train, "09:10:00", {"QuotaReserved": "09:10:01", "Admitted": "09:10:02"}, "09:10:02")
    _stamp(infer, "08:00:00", {"QuotaReserved": "08:00:01", "Admitted": "08:00:02"}, "08:00:02")
    hygon, thead = ("hygon", "k100_ai"), ("thead", "ppu-zw810e")
    pods = [
        bound_pod(
            "k100-embed-0",
            "k100-1",
            half,
            workload_name="k100-embed",
            group=hygon,
            allocations={"main": [{"id": "GPU-0002", "mode": 3, "allocated": M // 2}]},
        ),
        bound_pod(
            "k100-train-0",
            "k100-1",
            {HYGON_RESOURCE: "1"},
            workload_name="k100-train",
            group=hygon,
            allocations={"main": [{"id": "GPU-0003", "mode": 1, "allocated": M}]},
        ),
        bound_pod(
            "ppu-infer-0",
            "ppu-1",
            ppu4g,
            workload_name="ppu-infer",
            group=thead,
            allocations={
                "main": [
                    {
                        "id": "GPU-0000",
                        "mode": 4,
                        "allocated": UNITS_4G48,
                        "allocatedPhysicalProfile": "4g48gb",
                        "allocatedPhysicalPlacements": [{"start": 0, "length": 4}],
                    }
                ]
            },
        ),
        # Outside Kueue: a notebook holding two 3g.40gb on the H100's first card.
        bound_pod(
            "notebook-0",
            "h100-1",
            {**mig3g},
            workload_name=None,
            namespace="team-b",
            group=("nvidia", "h100-80gb-hbm3"),
            allocations={
                "main": [
                    {
                        "id": "GPU-0000",
                        "mode": 4,
                        "allocated": UNITS_3G,
                        "allocatedPhysicalProfile": "3g.40gb",
                        "allocatedPhysicalPlacements": [{"start": 0, "length": 4}],
                    }
                ]
            },
        ),
        bound_pod(
            "notebook-1",
            "h100-1",
            {**mig3g},
            workload_name=None,
            namespace="team-b",
            group=("nvidia", "h100-80gb-hbm3"),
            allocations={
                "main": [
                    {
                        "id": "GPU-0000",
                        "mode": 4,
                        "allocated": UNITS_3G,
                        "allocatedPhysicalProfile": "3g.40gb",
                        "allocatedPhysicalPlacements": [{"start": 4, "length": 4}],
                    }
                ]
            },
        ),
    ]
    for p in pods:
        if p["metadata"]["annotations"].get(naming.ANNOTATION_WORKLOAD):
            p["metadata"]["labels"]["kueue.x-k8s.io/managed"] = "true"
    return [prefill, decode, parked, embed, train, infer], pods


def _gpustack() -> list[JSON]:
    """The worker's Deployment and Lease, its webhook configurations, Kueue's manager and Configuration, and when the
    snapshot was taken."""
    renewed = EXAMPLE_NOW.replace("Z", ".000000Z").replace("12:00:00", "11:59:58")
    bundle = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg=="
    kueue_config = standin.kueue_configuration(
        {"hygon": HYGON_RESOURCE, "nvidia": "nvidia.com/gpu", "thead": "alibabacloud.com/ppu"},
        ["hygon", "nvidia", "thead"],
    )
    import yaml

    from gpuctl.cli.commands.dump import dump_record

    return [
        standin.worker_deployment(WORKER_ENV),
        standin.worker_lease(renewed),
        *standin.webhook_configurations(bundle),
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": naming.KUEUE_CONFIGMAP, "namespace": naming.KUEUE_NAMESPACE},
            "data": {naming.KUEUE_CONFIGMAP_KEY: yaml.safe_dump(kueue_config, sort_keys=False)},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": naming.KUEUE_DEPLOYMENT, "namespace": naming.KUEUE_NAMESPACE},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"control-plane": "controller-manager"}},
                "template": {
                    "metadata": {"labels": {"control-plane": "controller-manager"}},
                    "spec": {
                        "containers": [
                            {
                                "name": "manager",
                                "image": f"registry.example.com/kueue/kueue:{KUEUE_VERSION}",
                                "args": ["--config=/controller_manager_config.yaml"],
                            }
                        ]
                    },
                },
            },
            "status": {"replicas": 1, "readyReplicas": 1},
        },
        dump_record(
            EXAMPLE_NOW,
            "a GPUStack cluster (example)",
            "v1.36.3",
            {
                "version": KUEUE_VERSION,
                "source": f"the image of deployment {naming.KUEUE_NAMESPACE}/{naming.KUEUE_DEPLOYMENT}",
            },
        ),
    ]


def write(target: Path) -> None:
    target.mkdir(parents=True, exist_ok=True)
    for name, objs in build().items():
        (target / f"{name}.json").write_text(
            json.dumps({"apiVersion": "v1", "kind": "List", "items": objs}, indent=1) + "\n"
        )


if __name__ == "__main__":
    write(Path(sys.argv[1] if len(sys.argv) > 1 else "examples/gpustack"))
