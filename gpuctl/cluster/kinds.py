"""The Kubernetes kinds gpuctl reads and writes, with where the API serves them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Kind:
    kind: str
    group: str
    version: str
    plural: str
    namespaced: bool
    other_versions: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def matches(self, api_version: str, kind: str) -> bool:
        if kind != self.kind:
            return False
        group, _, version = api_version.rpartition("/")
        return group == self.group and (version == self.version or version in self.other_versions)


WORKER = "worker.gpustack.ai"
KUEUE = "kueue.x-k8s.io"

NODE = Kind("Node", "", "v1", "nodes", False)
NAMESPACE = Kind("Namespace", "", "v1", "namespaces", False)
POD = Kind("Pod", "", "v1", "pods", True)
DEVICES = Kind("Devices", WORKER, "v1alpha1", "devices", False, ("v1",))
INSTANCETYPE = Kind("InstanceType", WORKER, "v1alpha1", "instancetypes", False, ("v1",))
INSTANCE = Kind("Instance", WORKER, "v1alpha1", "instances", True, ("v1",))
RESOURCEFLAVOR = Kind("ResourceFlavor", KUEUE, "v1beta2", "resourceflavors", False, ("v1beta1",))
CLUSTERQUEUE = Kind("ClusterQueue", KUEUE, "v1beta2", "clusterqueues", False, ("v1beta1",))
LOCALQUEUE = Kind("LocalQueue", KUEUE, "v1beta2", "localqueues", True, ("v1beta1",))
WORKLOAD = Kind("Workload", KUEUE, "v1beta2", "workloads", True, ("v1beta1",))
ADMISSIONCHECK = Kind("AdmissionCheck", KUEUE, "v1beta2", "admissionchecks", False, ("v1beta1",))
TOPOLOGY = Kind("Topology", KUEUE, "v1beta2", "topologies", False, ("v1beta1", "v1alpha1"))
WORKLOAD_PRIORITY_CLASS = Kind(
    "WorkloadPriorityClass", KUEUE, "v1beta2", "workloadpriorityclasses", False, ("v1beta1",)
)
PRIORITY_CLASS = Kind("PriorityClass", "scheduling.k8s.io", "v1", "priorityclasses", False)
ADMISSION = "admissionregistration.k8s.io"
MUTATING_WEBHOOKS = Kind("MutatingWebhookConfiguration", ADMISSION, "v1", "mutatingwebhookconfigurations", False)
VALIDATING_WEBHOOKS = Kind("ValidatingWebhookConfiguration", ADMISSION, "v1", "validatingwebhookconfigurations", False)
# Read by name only (doctor): Kueue's Configuration, the operator's and Kueue's Deployments, the leader Lease.
CONFIGMAP = Kind("ConfigMap", "", "v1", "configmaps", True)
DEPLOYMENT = Kind("Deployment", "apps", "v1", "deployments", True)
LEASE = Kind("Lease", "coordination.k8s.io", "v1", "leases", True)
CRD = Kind("CustomResourceDefinition", "apiextensions.k8s.io", "v1", "customresourcedefinitions", False)
"""Created by the standalone operator where the worker.gpustack.ai CRDs do not exist (``--install-crds``)."""
EVENT = Kind("Event", "events.k8s.io", "v1", "events", True)
CORE_EVENT = Kind("Event", "", "v1", "events", True)
"""The same Events through the core API (``kubectl get events -o json`` writes these): read from snapshots."""
# Written by ``gpuctl dump`` beside the objects: when the dump was taken (ages on a snapshot are measured from it).
DUMP = Kind("Dump", "gpuctl.gpustack.ai", "v1", "dumps", False)
# Written by ``gpuctl dump --prometheus``: the step-sampled series ``usage --since`` reads back offline.
PROMETHEUS_SERIES = Kind("PrometheusSeries", "gpuctl.gpustack.ai", "v1", "prometheusseries", False)

ALL = (
    NODE,
    POD,
    DEVICES,
    INSTANCETYPE,
    INSTANCE,
    RESOURCEFLAVOR,
    CLUSTERQUEUE,
    LOCALQUEUE,
    WORKLOAD,
    ADMISSIONCHECK,
    TOPOLOGY,
)

KVCACHE = "kvcache.gpustack.ai"
KVCACHE_BINDING = Kind("KVCachePoolBinding", KVCACHE, "v1alpha1", "kvcachepoolbindings", True)
KVCACHE_POOL = Kind("KVCachePool", KVCACHE, "v1alpha1", "kvcachepools", False)
KVCACHE_BACKEND = Kind("KVCacheBackend", KVCACHE, "v1alpha1", "kvcachebackends", False)
