"""Synthetic clusters for benchmarks and memory tests: a large pool (A10G unless said) in mixed states, and a whole
cluster around it (Nodes, one admitted Workload per node, the pool's type, flavor, queues and check, a queue)."""

from __future__ import annotations

import json
import random
from typing import Any

from gpuctl.core.ledger import parse_devices
from gpuctl.core.units import SHARE, M
from testbed.factories import A10G_MIB, card_row, devices, instancetype


def synthetic_devices(
    nodes: int,
    cards: int = 8,
    seed: int = 7,
    *,
    group_id: str = "a10g",
    product: str = "NVIDIA A10G",
    memory_mib: int = A10G_MIB,
) -> list[dict[str, Any]]:
    """A pool of ``nodes`` nodes (A10G unless said) with ``cards`` whole cards each, in mixed states."""
    rng = random.Random(seed)
    out = []
    for n in range(nodes):
        rows = []
        for i in range(cards):
            roll = rng.random()
            if roll < 0.6:
                rows.append(card_row(i))
            elif roll < 0.75:
                rows.append(card_row(i, mode=3, allocated=rng.randint(1, 100) * 16000, slices=rng.randint(1, 4)))
            elif roll < 0.85:
                rows.append(card_row(i, mode=2, allocated=rng.randint(1, 10) * SHARE))
            else:
                rows.append(card_row(i, mode=1, allocated=M))
        out.append(
            devices(f"node-{n:05d}", group_id=group_id, product=product, memory_mib=memory_mib, cards=cards, rows=rows)
        )
    return out


PENDING_LIMITS = {"nvidia.com/gpu": "9"}
"""What the synthetic queue's Workloads ask: more whole cards than any node has."""


def simulation_snapshot(
    nodes: int,
    *,
    group_id: str = "a10g",
    product: str = "NVIDIA A10G",
    memory_mib: int = A10G_MIB,
    pending: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """A whole cluster around the synthetic pool: Nodes advertising the keys of their ledger and their cards' credits,
    one admitted Workload per node whose Pod holds the node's taken cards by its allocation record (with the topology
    annotation Kueue writes on it), the pool's type, flavor, queues and check, and a queue of Workloads asking
    ``pending`` each."""
    from gpuctl.core import naming
    from gpuctl.core.capacity import node_allocatable
    from gpuctl.core.pins import node_fit_labels
    from testbed.factories import flavor, node, topology

    akey = naming.accelerator_key("nvidia", group_id)
    cq = f"gpustack--{akey}-linux-amd64"
    fname = f"f-{group_id}"
    entrance = naming.queue_entrance(cq)
    objects: list[dict[str, Any]] = [
        instancetype(group_id=group_id, memory=f"{memory_mib}Mi"),
        flavor(fname, akey),
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Topology",
            "metadata": {"name": "hostname"},
            "spec": {"levels": [{"nodeLabel": naming.LABEL_HOSTNAME}]},
        },
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "AdmissionCheck",
            "metadata": {"name": naming.NODE_DEVICES_CHECK},
            "spec": {"controllerName": "gpustack.ai/node-devices"},
            "status": {"conditions": [{"type": "Active", "status": "True", "reason": "Active"}]},
        },
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": cq, "labels": {naming.LABEL_RESOURCE_TYPE: naming.RESOURCE_TYPE_INSTANCETYPES}},
            "spec": {
                "stopPolicy": "None",
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": ["credits.gpustack.ai/nvidia"],
                        "flavors": [
                            {
                                "name": fname,
                                "resources": [
                                    {"name": "credits.gpustack.ai/nvidia", "nominalQuota": str(nodes * 8 * M)}
                                ],
                            }
                        ],
                    }
                ],
                "admissionChecksStrategy": {"admissionChecks": [{"name": naming.NODE_DEVICES_CHECK}]},
            },
        },
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": entrance, "namespace": "team-a"},
            "spec": {"clusterQueue": cq},
        },
    ]
    labels = {
        naming.LABEL_MANAGED: "true",
        naming.LABEL_OS: "linux",
        naming.LABEL_ARCH: "amd64",
        naming.accelerator_label(akey): "true",
    }
    for d in synthetic_devices(nodes, group_id=group_id, product=product, memory_mib=memory_mib):
        name = d["metadata"]["name"]
        keys = {**node_allocatable(parse_devices(d)), "credits.gpustack.ai/nvidia": 8 * M}
        objects.append(d)
        objects.append(
            node(
                name,
                labels={**labels, **node_fit_labels(parse_devices(d))},  # as the operator publishes them
                allocatable={**{k: str(v) for k, v in keys.items()}, "pods": "110", "memory": "512Gi"},
            )
        )
        taken = [r for r in d["status"]["groups"][0]["accelerators"] if r["mode"]]
        if not taken:
            continue
        accelerators = [{"id": r["id"], "mode": r["mode"], "allocated": r["allocated"]} for r in taken]
        record = {
            "main": {"devices": {"groups": [{"id": group_id, "manufacturer": "nvidia", "accelerators": accelerators}]}}
        }
        wname = f"w-{name}"
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": wname,
                    "namespace": "team-a",
                    "labels": {naming.LABEL_PODSET: "main"},
                    "annotations": {
                        naming.ANNOTATION_WORKLOAD: wname,
                        naming.ANNOTATION_ALLOCATED: json.dumps(record),
                        "kueue.x-k8s.io/podset-unconstrained-topology": "true",
                    },
                },
                "spec": {
                    "nodeName": name,
                    "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
                },
                "status": {"phase": "Running"},
            }
        )
        objects.append(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "Workload",
                "metadata": {"name": wname, "namespace": "team-a"},
                "spec": {
                    "queueName": entrance,
                    "podSets": [
                        {
                            "name": "main",
                            "count": 1,
                            "template": {
                                "spec": {
                                    "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]
                                }
                            },
                        }
                    ],
                },
                "status": {
                    "conditions": [{"type": "QuotaReserved", "status": "True"}, {"type": "Admitted", "status": "True"}],
                    "admission": {
                        "clusterQueue": cq,
                        "podSetAssignments": [
                            {
                                "name": "main",
                                "count": 1,
                                "flavors": {"credits.gpustack.ai/nvidia": fname},
                                "topologyAssignment": topology([(name, 1)]),
                            }
                        ],
                    },
                },
            }
        )
    for i in range(PENDING):  # a queue: Workloads waiting for more whole cards than any node has
        objects.append(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "Workload",
                "metadata": {"name": f"waiting-{i:02d}", "namespace": "team-a", "uid": f"uid-waiting-{i:02d}"},
                "spec": {
                    "queueName": entrance,
                    "priority": i % 3,
                    "podSets": [
                        {
                            "name": "main",
                            "count": 1,
                            "template": {
                                "spec": {
                                    "containers": [
                                        {"name": "main", "resources": {"limits": dict(pending or PENDING_LIMITS)}}
                                    ]
                                }
                            },
                        }
                    ],
                },
            }
        )
    return objects


PENDING = 10
"""Workloads waiting in the synthetic cluster's queue."""
