"""The what-if suites' part of the real control plane: a state of ``tests.states`` loaded into the API server, and the
kubelet, device plugin and job controller the control plane does not run, played for what Kueue admits; and where
Kueue and the operator hold a Workload, read back from the cluster."""

from __future__ import annotations

import contextlib
import json
import time
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from gpuctl.core import naming
from gpuctl.core.capacity import node_allocatable
from gpuctl.core.ledger import parse_devices
from gpuctl.core.pending import message_part
from gpuctl.core.pins import node_fit_labels
from gpuctl.core.pods import parse_pod
from gpuctl.core.quota import quota_book
from gpuctl.core.rebuilt import rebuild_ledger
from gpuctl.core.units import M
from gpuctl.core.workloads import parse_cluster_queue, parse_workload
from testbed.factories import ZERO_VIEWS, container
from testbed.gpucluster import KUEUE, KV, WORKER, WV, condition, create_ready_node, ensure_active_check, wait_for
from tests.states import Model

TRANSIENT = ("Pending the preemption of",)
"""Kueue's mark on a Workload that waits for the Workloads it preempts to release their quota."""


class Cluster:
    """The state's objects on the real API server (and their removal)."""

    def __init__(self, api: Any, namespace: str) -> None:
        self.api, self.namespace = api, namespace
        self.objs = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)
        self.created: list[tuple[str, str, str | None]] = []
        self.devices: dict[str, dict[str, Any]] = {}
        """Each node's Devices as created (its spec: the capabilities the ledger is rebuilt over)."""
        self.running: dict[str, list[tuple[str, str, bool]]] = {}
        """Workload → (Pod, node, whether this suite created the Pod) for the Pods it runs."""

    def load(self, objects: list[dict[str, Any]]) -> None:
        ensure_active_check(self.api)
        for o in objects:
            kind, name = o["kind"], o["metadata"]["name"]
            if kind == "AdmissionCheck":
                continue
            if kind == "Node":
                create_ready_node(self.api, name, o["metadata"]["labels"], o["status"]["allocatable"])
                self.created.append(("node", name, None))
            elif kind == "Pod":
                self.core.create_namespaced_pod(self.namespace, {k: v for k, v in o.items() if k != "status"})
                self.created.append(("pod", name, self.namespace))
            elif kind in ("Devices", "InstanceType"):
                plural = "devices" if kind == "Devices" else "instancetypes"
                if kind == "Devices":
                    self.devices[name] = o
                status = o["status"]
                self.objs.create_cluster_custom_object(
                    WORKER, WV, plural, {k: v for k, v in o.items() if k != "status"}
                )
                if kind == "InstanceType":
                    status = {**ZERO_VIEWS, **status}  # its types require every view
                self.objs.patch_cluster_custom_object_status(WORKER, WV, plural, name, {"status": status})
                self.created.append((plural, name, None))
            else:
                plural = {
                    "Topology": "topologies",
                    "ClusterQueue": "clusterqueues",
                    "LocalQueue": "localqueues",
                    "ResourceFlavor": "resourceflavors",
                }[kind]
                body = {k: v for k, v in o.items() if k != "status"}
                if kind == "LocalQueue":
                    self.objs.create_namespaced_custom_object(KUEUE, KV, self.namespace, plural, body)
                    self.created.append((plural, name, self.namespace))
                else:
                    self.objs.create_cluster_custom_object(KUEUE, KV, plural, body)
                    self.created.append((plural, name, None))

    def wait_active(self, cluster_queue: str) -> None:
        """Until Kueue marks the ClusterQueue Active (its flavors, topology and check found)."""

        def active() -> bool:
            obj = self.objs.get_cluster_custom_object(KUEUE, KV, "clusterqueues", cluster_queue)
            return (condition(obj, "Active") or {}).get("status") == "True"

        wait_for(f"ClusterQueue {cluster_queue} Active", active)

    # -- the kubelet, the device plugin and the job controller, which the control plane does not run ------------

    def run(self, workload_name: str, item: dict[str, Any], pod_name: str | None, template: dict[str, Any]) -> None:
        """Start an admitted Workload's Pods where Kueue placed them, with the allocation records ``Allocate``
        writes (the cards ``simulate`` predicted, which the suite has just seen Kueue admit on those nodes), then
        report the node's ledger and keys as the device manager would. ``pod_name`` is the Pod Kueue's Pod
        integration manages (it is bound); a Job's or Workload's Pods are created, as its controller would."""
        pods: list[tuple[str, str, bool]] = []
        for node in item["placement"]["nodes"]:
            for i in range(node["pods"]):
                record: dict[str, Any] = {}
                for a in (a for a in node["allocations"] if a["pod"] == i):
                    card = {"id": a["card"], "mode": a["mode"], "allocated": a["units"]}
                    if a.get("profile"):
                        card["allocatedPhysicalProfile"] = a["profile"]
                    groups = record.setdefault(a["container"], {"devices": {"groups": []}})["devices"]["groups"]
                    group = next((g for g in groups if g["id"] == a["group"]), None)
                    if group is None:
                        groups.append(group := {"id": a["group"], "manufacturer": "nvidia", "accelerators": []})
                    group["accelerators"].append(card)
                annotations = {naming.ANNOTATION_ALLOCATED: json.dumps(record)}
                if pod_name is not None:
                    wait_for(
                        f"Kueue to ungate Pod {pod_name}",
                        lambda: not (self.core.read_namespaced_pod(pod_name, self.namespace).spec.scheduling_gates),
                    )
                    self.core.create_namespaced_pod_binding(
                        pod_name,
                        self.namespace,
                        {"metadata": {"name": pod_name}, "target": {"kind": "Node", "name": node["name"]}},
                        _preload_content=False,  # the client cannot read a Binding back
                    )
                    self.core.patch_namespaced_pod(pod_name, self.namespace, {"metadata": {"annotations": annotations}})
                    pods.append((pod_name, node["name"], False))
                    name = pod_name
                else:
                    name = f"{workload_name}-{node['name']}-{i}"
                    self.core.create_namespaced_pod(
                        self.namespace,
                        {
                            "metadata": {
                                "name": name,
                                "labels": {naming.LABEL_PODSET: "main"},
                                "annotations": {
                                    **annotations,
                                    naming.ANNOTATION_WORKLOAD: workload_name,
                                    # Kueue writes it on the Pods of a Workload it places without a topology request
                                    "kueue.x-k8s.io/podset-unconstrained-topology": "true",
                                },
                            },
                            "spec": {**template, "nodeName": node["name"]},
                        },
                    )
                    self.created.append(("pod", name, self.namespace))
                    pods.append((name, node["name"], True))
                self.core.patch_namespaced_pod_status(name, self.namespace, {"status": {"phase": "Running"}})
        self.running[workload_name] = pods
        for node_name in {n for _, n, _ in pods}:
            self.report(node_name)

    def report(self, node: str) -> None:
        """The device manager's report for a node: its ledger rebuilt from the allocation records of the Pods bound
        there, and its keys (the tokens of a card held in another mode unhealthy)."""
        raw = self.core.list_namespaced_pod(
            self.namespace, field_selector=f"spec.nodeName={node}", _preload_content=False
        )
        bound = [parse_pod(p) for p in json.loads(raw.data)["items"]]
        obj = self.devices[node]
        ledger = rebuild_ledger(parse_devices({**obj, "status": {"groups": []}}), bound)
        rows = [
            {
                "id": c.id,
                "index": c.index,
                "mode": int(c.mode),
                "allocated": c.allocated,
                "remaining": c.remaining,
                "allocatedSlices": c.allocated_slices,
                "allocatedProfiles": [{"name": n, "count": k} for n, k in c.allocated_profiles.items() if k],
                "remainingProfiles": [{"name": n, "count": k} for n, k in c.remaining_profiles.items()],
            }
            for g in ledger.groups
            for c in g.cards
        ]
        groups = [{"id": g.id, "manufacturer": g.manufacturer, "accelerators": rows} for g in ledger.groups]
        self.objs.patch_cluster_custom_object_status(WORKER, WV, "devices", node, {"status": {"groups": groups}})
        cards = sum(len(g.cards) for g in ledger.groups)
        keys = {k: str(v) for k, v in node_allocatable(ledger).items()}
        allocatable = {
            "cpu": "64",
            "memory": "512Gi",
            "pods": "110",
            "credits.gpustack.ai/nvidia": str(cards * M),
            **keys,
        }
        self.core.patch_node_status(node, {"status": {"allocatable": allocatable, "capacity": allocatable}})
        labels = node_fit_labels(ledger)
        wait_for(
            f"the operator to publish {node}'s fit labels",
            lambda: all(self.core.read_node(node).metadata.labels.get(k) == v for k, v in labels.items()),
        )

    def stop_evicted(self) -> None:
        """The job controller's part: the Pods of a Workload Kueue evicted (or that holds no quota any more) are
        deleted, and their cards come back."""
        by_name = {w["metadata"]["name"]: w for w in self.workloads()}
        for name, pods in list(self.running.items()):
            w = by_name.get(name)
            if (
                w is not None
                and (condition(w, "Admitted") or {}).get("status") == "True"
                and (condition(w, "Evicted") or {}).get("status") != "True"
            ):
                continue
            for pod, _, _ in pods:
                with contextlib.suppress(ApiException):
                    self.core.delete_namespaced_pod(pod, self.namespace, grace_period_seconds=0)
            wait_for(
                f"the Pods of {name} gone",
                lambda pods=pods: (
                    not any(
                        p.metadata.name in {x for x, _, _ in pods}
                        for p in self.core.list_namespaced_pod(self.namespace).items
                    )
                ),
            )
            del self.running[name]
            for node in {n for _, n, _ in pods}:
                self.report(node)

    def cleanup(self) -> None:
        for kind, name, ns in reversed(self.created):
            try:
                if kind == "node":
                    self.core.delete_node(name)
                elif kind == "pod":
                    self.core.delete_namespaced_pod(name, ns, grace_period_seconds=0)
                elif kind == "job":
                    client.BatchV1Api(self.api).delete_namespaced_job(name, ns, propagation_policy="Background")
                elif kind in ("devices", "instancetypes"):
                    self.objs.delete_cluster_custom_object(WORKER, WV, kind, name)
                elif ns:
                    self.objs.delete_namespaced_custom_object(KUEUE, KV, ns, kind, name)
                else:
                    self.objs.delete_cluster_custom_object(KUEUE, KV, kind, name)
            except ApiException:
                pass

    def workloads(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.objs.list_namespaced_custom_object(KUEUE, KV, self.namespace, "workloads")[
            "items"
        ]
        return items

    def workload_of(self, owner_uid: str) -> dict[str, Any] | None:
        for w in self.workloads():
            if any(r.get("uid") == owner_uid for r in w["metadata"].get("ownerReferences") or []):
                return w
        return None


def workload(name: str, model: Model, limits: dict[str, str], priority: int = 0, count: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": f"{KUEUE}/{KV}",
        "kind": "Workload",
        "metadata": {"name": name},
        "spec": {
            "queueName": model.entrance,
            "priority": priority,
            "podSets": [
                {
                    "name": "main",
                    "count": count,
                    "template": {"spec": {"restartPolicy": "Never", "containers": [container("main", limits)]}},
                }
            ],
        },
    }


def job(
    name: str, model: Model, limits: dict[str, str], parallelism: int, labelled_template: bool, priority: str = ""
) -> dict[str, Any]:
    labels = {naming.LABEL_QUEUE_NAME: model.entrance}
    if priority:
        labels[naming.LABEL_PRIORITY_CLASS] = priority
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "parallelism": parallelism,
            "completions": parallelism,
            "suspend": True,
            "template": {
                "metadata": {"labels": dict(labels) if labelled_template else {}},
                "spec": {"restartPolicy": "Never", "containers": [container("main", limits)]},
            },
        },
    }


def real_class(cluster: Cluster, name: str, waiting: bool) -> tuple[Any, ...]:
    """Where Kueue and the operator hold a Workload: admitted (on which nodes), Retry (with the message), pending
    (quota or TAS placement, from Kueue's message), or — in a StrictFIFO line — never tried."""

    def seen() -> tuple[Any, ...] | None:
        w = next((x for x in cluster.workloads() if x["metadata"]["name"] == name), None)
        if w is None:
            return None
        if (condition(w, "Admitted") or {}).get("status") == "True":
            nodes = set()
            for a in ((w.get("status") or {}).get("admission") or {}).get("podSetAssignments") or []:
                for sl in (a.get("topologyAssignment") or {}).get("slices") or []:
                    for level in sl.get("valuesPerLevel") or []:
                        if level.get("universal"):
                            nodes.add(level["universal"])
                        nodes.update(
                            f"{(level.get('individual') or {}).get('prefix', '')}{r}"
                            f"{(level.get('individual') or {}).get('suffix', '')}"
                            for r in (level.get("individual") or {}).get("roots") or []
                        )
            return ("admitted", tuple(sorted(nodes)))
        checks = {c["name"]: c for c in (w.get("status") or {}).get("admissionChecks") or []}
        retry = checks.get(naming.NODE_DEVICES_CHECK) or {}
        if retry.get("state") == "Retry":
            return ("retry", retry.get("message"))
        reserved = condition(w, "QuotaReserved")
        message = (reserved or {}).get("message") or ""
        if (
            reserved is not None
            and reserved["status"] == "False"
            and message
            and not any(t in message for t in TRANSIENT)
        ):
            return ("pending", message_part(message) or message)
        return None

    if waiting:
        time.sleep(4)  # a StrictFIFO line tries only its head: nothing is written on those behind it
        got = seen()
        return got if got is not None else ("waiting",)
    deadline = time.monotonic() + 60
    last: tuple[Any, ...] | None = None
    since = time.monotonic()
    while time.monotonic() < deadline:
        cluster.stop_evicted()
        now = seen()
        if now is not None and now[0] in ("admitted", "retry"):
            return now
        evicting = any(
            (condition(w, "Evicted") or {}).get("status") == "True"
            and (condition(w, "QuotaReserved") or {}).get("status") == "True"
            for w in cluster.workloads()
        )
        if now != last or evicting:  # an eviction under way releases quota: the verdict may still move
            last, since = now, time.monotonic()
        elif now is not None and time.monotonic() - since >= 3:
            return now  # held, and still held the same way 3 s later
        time.sleep(0.3)
    w = next((x for x in cluster.workloads() if x["metadata"]["name"] == name), None)
    raise AssertionError(f"no verdict on {name} in 60 s; last seen {last}; its status: {(w or {}).get('status')}")


def settled(cluster: Cluster, queues: list[str]) -> None:
    """Wait until each ClusterQueue's reported usage is what its reserved Workloads hold, so the next simulation
    reads the usage Kueue admits against, not one a moment behind."""

    def books() -> list[str]:
        raw = {q: cluster.objs.get_cluster_custom_object(KUEUE, KV, "clusterqueues", q) for q in queues}
        book = quota_book({q: parse_cluster_queue(o) for q, o in raw.items()}, map(parse_workload, cluster.workloads()))
        return [line for q in queues for line in book.differences(q)]

    wait_for("the queues' reported usage to match their Workloads", lambda: not books(), timeout=30)
