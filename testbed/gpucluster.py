"""Build a GPU pool on the real API server the way the operator derives one: managed Nodes with accelerator labels and
allocatable keys, their Devices ledgers, an InstanceType, its TAS ResourceFlavor, its ClusterQueue (same name, the
InstanceType mark, the gpustack-node-devices check) and the LocalQueue named by its entrance."""

from __future__ import annotations

import contextlib
import datetime
import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from gpuctl.core import naming
from gpuctl.core.units import M
from testbed.factories import ZERO_VIEWS, card_row, devices, instancetype

WORKER, WV = "worker.gpustack.ai", "v1alpha1"
KUEUE, KV = "kueue.x-k8s.io", "v1beta2"


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def wait_for(what: str, fn: Any, timeout: float = 30.0, interval: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; last value: {last!r}")


def condition(obj: dict[str, Any], ctype: str) -> dict[str, Any] | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return dict(c)
    return None


@dataclass
class GpuPool:
    api: Any
    namespace: str
    group_id: str
    nodes: list[str]
    cards: int
    name: str = ""
    flavor: str = ""
    topology: str = ""
    created: list[tuple[str, str, str | None]] = field(default_factory=list)

    @property
    def accelerator_key(self) -> str:
        return naming.accelerator_key("nvidia", self.group_id)

    @property
    def entrance(self) -> str:
        return naming.queue_entrance(self.name)

    @property
    def objs(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api)

    # ------------------------------------------------------------------------------------------- building

    def node_labels(self) -> dict[str, str]:
        return {
            naming.LABEL_MANAGED: "true",
            naming.LABEL_OS: "linux",
            naming.LABEL_ARCH: "amd64",
            naming.accelerator_label(self.accelerator_key): "true",
            naming.accelerator_count_label(self.accelerator_key): str(self.cards),
        }

    def create_nodes(self) -> None:
        for node in self.nodes:
            resources = {
                "credits.gpustack.ai/nvidia": str(self.cards * M),
                "nvidia.com/gpu": str(self.cards),
                "nvidia.com/gpu.shared": str(10 * self.cards),
                "cpu": "48",
                "memory": "192Gi",
                "pods": "110",
            }
            create_ready_node(self.api, node, self.node_labels(), resources)
            self.created.append(("node", node, None))

    def write_ledger(self, node: str, rows: list[dict[str, Any]]) -> None:
        """Create or update a node's Devices and write its ledger through the status subresource."""
        obj = devices(node, group_id=self.group_id, cards=self.cards, rows=rows)
        status = obj.pop("status")
        try:
            self.objs.create_cluster_custom_object(WORKER, WV, "devices", obj)
            self.created.append(("devices", node, None))
        except ApiException as exc:
            if exc.status != 409:
                raise
        self.objs.patch_cluster_custom_object_status(WORKER, WV, "devices", node, {"status": status})

    def flavor_object(self) -> dict[str, Any]:
        """The pool's TAS ResourceFlavor (hostname topology), pinning its Nodes' labels."""
        return {
            "apiVersion": f"{KUEUE}/{KV}",
            "kind": "ResourceFlavor",
            "metadata": {"name": self.flavor, "labels": {naming.LABEL_RESOURCE_TYPE: "nodes"}},
            "spec": {"nodeLabels": dict(self.node_labels()), "topologyName": self.topology},
        }

    def cluster_queue_object(self, nominal_cards: int, *, check: bool = True) -> dict[str, Any]:
        """The pool's ClusterQueue: the InstanceType's name and mark, its flavor's credits quota, the check."""
        return {
            "apiVersion": f"{KUEUE}/{KV}",
            "kind": "ClusterQueue",
            "metadata": {
                "name": self.name,
                "labels": {naming.LABEL_RESOURCE_TYPE: naming.RESOURCE_TYPE_INSTANCETYPES},
            },
            "spec": {
                "namespaceSelector": {},
                "stopPolicy": "None",
                "resourceGroups": [
                    {
                        "coveredResources": ["credits.gpustack.ai/nvidia"],
                        "flavors": [
                            {
                                "name": self.flavor,
                                "resources": [
                                    {"name": "credits.gpustack.ai/nvidia", "nominalQuota": str(nominal_cards * M)}
                                ],
                            }
                        ],
                    }
                ],
                **(
                    {"admissionChecksStrategy": {"admissionChecks": [{"name": naming.NODE_DEVICES_CHECK}]}}
                    if check
                    else {}
                ),
            },
        }

    def create_pool_objects(self, nominal_cards: int, *, check: bool = True, local_queue: bool = True) -> None:
        it = instancetype(self.name, group_id=self.group_id)
        status = it.pop("status")
        self.objs.create_cluster_custom_object(WORKER, WV, "instancetypes", it)
        self.objs.patch_cluster_custom_object_status(
            WORKER, WV, "instancetypes", self.name, {"status": {**ZERO_VIEWS, **status}}
        )
        self.created.append(("instancetypes", self.name, None))
        self.objs.create_cluster_custom_object(
            KUEUE,
            KV,
            "topologies",
            {
                "apiVersion": f"{KUEUE}/{KV}",
                "kind": "Topology",
                "metadata": {"name": self.topology},
                "spec": {"levels": [{"nodeLabel": naming.LABEL_HOSTNAME}]},
            },
        )
        self.created.append(("topologies", self.topology, None))
        self.objs.create_cluster_custom_object(KUEUE, KV, "resourceflavors", self.flavor_object())
        self.created.append(("resourceflavors", self.flavor, None))
        ensure_active_check(self.api)
        self.objs.create_cluster_custom_object(
            KUEUE, KV, "clusterqueues", self.cluster_queue_object(nominal_cards, check=check)
        )
        self.created.append(("clusterqueues", self.name, None))
        if local_queue:
            self.create_local_queue()

    def create_local_queue(self) -> None:
        self.objs.create_namespaced_custom_object(
            KUEUE,
            KV,
            self.namespace,
            "localqueues",
            {
                "apiVersion": f"{KUEUE}/{KV}",
                "kind": "LocalQueue",
                "metadata": {"name": self.entrance, "annotations": {naming.ANNOTATION_QUEUE: self.name}},
                "spec": {"clusterQueue": self.name},
            },
        )
        self.created.append(("localqueues", self.entrance, self.namespace))
        wait_for(
            f"ClusterQueue {self.name} Active",
            lambda: (
                (
                    condition(self.objs.get_cluster_custom_object(KUEUE, KV, "clusterqueues", self.name), "Active")
                    or {}
                ).get("status")
                == "True"
            ),
        )

    def allocated_pod(self, name: str, node: str, accelerators: list[dict[str, Any]]) -> None:
        """A Pod outside Kueue bound to a node, holding cards by its allocation record (as ``Allocate`` leaves it):
        the check rebuilds the node's ledger from such records."""
        record = {
            "main": {
                "devices": {"groups": [{"id": self.group_id, "manufacturer": "nvidia", "accelerators": accelerators}]}
            }
        }
        client.CoreV1Api(self.api).create_namespaced_pod(
            self.namespace,
            {
                "metadata": {"name": name, "annotations": {naming.ANNOTATION_ALLOCATED: json.dumps(record)}},
                "spec": {"nodeName": node, "containers": [{"name": "main", "image": "gpuctl-it/none"}]},
            },
        )
        self.created.append(("pod", name, self.namespace))

    def sibling(self, name: str) -> GpuPool:
        """A second InstanceType over the same nodes' cards (a custom type beside a derived one): its own flavor,
        ClusterQueue and LocalQueue."""
        other = GpuPool(self.api, self.namespace, self.group_id, self.nodes, self.cards, name=name)
        other.flavor = f"{name}-flavor"
        other.topology = f"{name}-hostname"
        return other

    def submit(self, name: str, limits: dict[str, str], *, count: int = 1) -> str:
        """A Workload in the pool's queue, as Kueue's pod-group integration would create it (TAS at hostname)."""
        requests = dict(limits)  # Kueue's resource transformation folds them into credits
        self.objs.create_namespaced_custom_object(
            KUEUE,
            KV,
            self.namespace,
            "workloads",
            {
                "apiVersion": f"{KUEUE}/{KV}",
                "kind": "Workload",
                "metadata": {"name": name},
                "spec": {
                    "queueName": self.entrance,
                    "podSets": [
                        {
                            "name": "main",
                            "count": count,
                            "topologyRequest": {"required": naming.LABEL_HOSTNAME},
                            "template": {
                                "spec": {
                                    "restartPolicy": "Never",
                                    "containers": [
                                        {
                                            "name": "main",
                                            "image": "gpuctl-it/none",
                                            "resources": {"requests": requests, "limits": requests},
                                        }
                                    ],
                                }
                            },
                        }
                    ],
                },
            },
        )
        self.created.append(("workloads", name, self.namespace))
        return name

    def submit_job(self, name: str, limits: dict[str, str]) -> str:
        """A suspended Job in the pool's queue (TAS at hostname), as a user submits one: Kueue's job integration
        creates its Workload, and completes each eviction by suspending the Job and releasing its quota."""
        client.BatchV1Api(self.api).create_namespaced_job(
            self.namespace,
            {
                "metadata": {"name": name, "labels": {naming.LABEL_QUEUE_NAME: self.entrance}},
                "spec": {
                    "suspend": True,
                    "template": {
                        "metadata": {"annotations": {"kueue.x-k8s.io/podset-required-topology": naming.LABEL_HOSTNAME}},
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [
                                {"name": "main", "image": "gpuctl-it/none", "resources": {"limits": dict(limits)}}
                            ],
                        },
                    },
                },
            },
        )
        self.created.append(("job", name, self.namespace))
        return name

    def workload_of_job(self, job: str) -> dict[str, Any] | None:
        """The Workload Kueue made for a Job (its owner reference), or None while there is none."""
        listed = self.objs.list_namespaced_custom_object(KUEUE, KV, self.namespace, "workloads")["items"]
        mine = [w for w in listed if any(o.get("name") == job for o in w["metadata"].get("ownerReferences") or [])]
        return dict(mine[0]) if mine else None

    def workload(self, name: str) -> dict[str, Any]:
        result: dict[str, Any] = self.objs.get_namespaced_custom_object(KUEUE, KV, self.namespace, "workloads", name)
        return result

    def set_check(self, name: str, state: str, message: str) -> None:
        self.objs.patch_namespaced_custom_object_status(
            KUEUE,
            KV,
            self.namespace,
            "workloads",
            name,
            {
                "status": {
                    "admissionChecks": [
                        {
                            "name": naming.NODE_DEVICES_CHECK,
                            "state": state,
                            "message": message,
                            "lastTransitionTime": now(),
                        }
                    ]
                }
            },
        )

    def instance(self, name: str, *, phase: str = "Running", stop: bool = False) -> None:
        """An Instance of this pool's type, with a phase written through the status subresource."""
        obj = {
            "apiVersion": f"{WORKER}/{WV}",
            "kind": "Instance",
            "metadata": {"name": name, "labels": {"gpuctl.test/pool": self.name}},
            "spec": {
                "type": self.name,
                "image": "gpuctl-it/none",
                "stop": stop,
                "volume": {"ephemeral": {"capacity": "10Gi"}},
            },
        }
        self.objs.create_namespaced_custom_object(WORKER, WV, self.namespace, "instances", obj)
        self.created.append(("instances", name, self.namespace))
        self.objs.patch_namespaced_custom_object_status(
            WORKER, WV, self.namespace, "instances", name, {"status": {"phase": phase}}
        )

    def cleanup(self) -> None:
        core = client.CoreV1Api(self.api)
        for kind, name, ns in reversed(self.created):
            with contextlib.suppress(ApiException):
                if kind == "node":
                    core.delete_node(name)
                elif kind == "pod":
                    core.delete_namespaced_pod(name, ns, grace_period_seconds=0)
                elif kind == "job":
                    client.BatchV1Api(self.api).delete_namespaced_job(name, ns, propagation_policy="Background")
                elif kind in ("devices", "instancetypes"):
                    self.objs.delete_cluster_custom_object(WORKER, WV, kind, name)
                elif kind == "instances":
                    self.objs.delete_namespaced_custom_object(WORKER, WV, ns, kind, name)
                elif ns:
                    self.objs.delete_namespaced_custom_object(KUEUE, KV, ns, kind, name)
                else:
                    self.objs.delete_cluster_custom_object(KUEUE, KV, kind, name)


def create_ready_node(api: Any, name: str, labels: dict[str, str], resources: dict[str, str]) -> None:
    """A Node as a kubelet would report it: Ready, with capacity and allocatable, untainted."""
    core = client.CoreV1Api(api)
    core.create_node({"metadata": {"name": name, "labels": {naming.LABEL_HOSTNAME: name, **labels}}})
    ready = {
        "type": "Ready",
        "status": "True",
        "reason": "KubeletReady",
        "message": "test node",
        "lastHeartbeatTime": now(),
        "lastTransitionTime": now(),
    }
    core.patch_node_status(name, {"status": {"capacity": resources, "allocatable": resources, "conditions": [ready]}})
    # The API server's TaintNodesByCondition admission adds the not-ready taint on create; with no node lifecycle
    # controller, drop it here.
    core.patch_node(name, {"spec": {"taints": None}})


def ensure_active_check(api: Any) -> None:
    objs = client.CustomObjectsApi(api)
    try:
        objs.create_cluster_custom_object(
            KUEUE,
            KV,
            "admissionchecks",
            {
                "apiVersion": f"{KUEUE}/{KV}",
                "kind": "AdmissionCheck",
                "metadata": {"name": naming.NODE_DEVICES_CHECK},
                "spec": {"controllerName": naming.NODE_DEVICES_CONTROLLER},
            },
        )
    except ApiException as exc:
        if exc.status != 409:
            raise
    objs.patch_cluster_custom_object_status(
        KUEUE,
        KV,
        "admissionchecks",
        naming.NODE_DEVICES_CHECK,
        {
            "status": {
                "conditions": [
                    {
                        "type": "Active",
                        "status": "True",
                        "reason": "Ready",
                        "message": "the node-devices admission check controller is running",
                        "lastTransitionTime": now(),
                    }
                ]
            }
        },
    )


def new_pool(
    api: Any,
    namespace: str,
    *,
    nodes: int = 2,
    cards: int = 4,
    nominal_cards: int = 8,
    ledgers: dict[int, list[dict[str, Any]]] | None = None,
    check: bool = True,
) -> GpuPool:
    suffix = uuid.uuid4().hex[:5]
    pool = GpuPool(api, namespace, f"a10g-{suffix}", [f"gpu-{suffix}-{i}" for i in range(nodes)], cards)
    pool.name = f"gpustack--{pool.accelerator_key}-linux-amd64"
    pool.flavor = f"gpustack--generic--{pool.accelerator_key}-linux-amd64-{cards}d"
    pool.topology = f"hostname-{suffix}"
    pool.create_nodes()
    for i, node in enumerate(pool.nodes):
        pool.write_ledger(node, (ledgers or {}).get(i, [card_row(c) for c in range(cards)]))
    pool.create_pool_objects(nominal_cards, check=check)
    return pool
