"""What Kueue makes of a manifest: the Workload(s) a Pod, Job, Deployment, StatefulSet, Kueue Workload or Instance
turns into, and which of them the Pod webhook sees first.

- A **Pod** (Kueue's pod integration) is one Workload of one PodSet; the Pod webhook mutates the Pod before Kueue
  builds it, so the Workload carries the folded units and the card-count pin.
- A **Deployment** is one such Workload per replica (Kueue admits each of its Pods on its own); a **StatefulSet** is
  one pod group, a Workload with one PodSet of ``replicas`` Pods. Their Pods carry the queue label, so the Pod
  webhook sees them too.
- A **Job** is one Workload built from its template (``parallelism`` Pods) before any Pod exists: the template is
  taken as written, unfolded, as Kueue's job integration takes it. Its Pods carry the template's labels, so the Pod
  webhook reviews them (and folds them) only when the template itself carries the queue label.
- A **Workload** is taken as it is.
- An **Instance** is defaulted by its webhook, then its Pod is rendered with the InstanceType's entrance as queue.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from gpuctl.core import naming
from gpuctl.core.admission import JSON, deep_copy
from gpuctl.core.apivalidation import refusal
from gpuctl.core.errors import InputError
from gpuctl.core.instancetypes import InstanceType
from gpuctl.core.tas import TopologyRequest, request_from_podset
from gpuctl.core.workloads import Workload

KINDS = ("Pod", "Job", "Deployment", "StatefulSet", "Workload", "Instance")
MAX_REPLICAS = 1000
"""The most Workloads (or Pods of one PodSet) one manifest may ask the simulator for."""


class ManifestError(InputError, ValueError):
    """A manifest the simulator cannot turn into Workloads; the message names the field and the fix."""


@dataclass(frozen=True, slots=True)
class SubmittedPodSet:
    name: str
    count: int
    spec: JSON
    """The Pod template's spec."""
    topology: TopologyRequest | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    """The Pod template's labels (what the Pod webhook's selector reads on the Pods a template-built PodSet makes)."""
    pod_spec: JSON | None = None
    """The spec of the Pods this PodSet creates as the Pod webhook leaves them, once gate 1 has reviewed them (None:
    the template's own). Gates 4 and 5 size each Pod by it; Kueue's quota and TAS see the template."""

    @property
    def pods_spec(self) -> JSON:
        return self.spec if self.pod_spec is None else self.pod_spec


@dataclass(frozen=True, slots=True)
class Submission:
    """One Workload to simulate, as Kueue would create it from the manifest."""

    kind: str
    namespace: str
    name: str
    queue_name: str
    podsets: tuple[SubmittedPodSet, ...]
    priority: int = 0
    pod: JSON | None = None
    """The Pod the Pod webhook reviews before Kueue builds the Workload (None when it builds it from a template)."""
    instance: JSON | None = None
    """An Instance manifest: defaulted and rendered into ``pod`` once its InstanceType is known."""
    labels: Mapping[str, str] = field(default_factory=dict)
    priority_class: str = ""
    """The ``kueue.x-k8s.io/priority-class`` label: a WorkloadPriorityClass, which sets ``priority`` first."""
    pod_priority_class: str = ""
    """The Pods' ``priorityClassName``: a PriorityClass, which sets ``priority`` when no WorkloadPriorityClass does."""
    created: str = ""
    """When its Workload was created (an existing one simulated anew); "" for one not created yet, which joins its
    queue after every Workload there of its priority."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def workload_object(self) -> JSON:
        """The Workload object Kueue would create (before the Workload webhook pins it)."""
        podsets = []
        for ps in self.podsets:
            template: JSON = {"spec": deep_copy(ps.spec)}
            if ps.labels:
                template["metadata"] = {"labels": dict(ps.labels)}
            entry: JSON = {"name": ps.name, "count": ps.count, "template": template}
            if ps.topology is not None:
                entry["topologyRequest"] = (
                    {"unconstrained": True}
                    if ps.topology.mode == "unconstrained"
                    else {ps.topology.mode: ps.topology.level}
                )
            podsets.append(entry)
        meta: JSON = {"name": self.name, "namespace": self.namespace}
        if self.created:
            meta["creationTimestamp"] = self.created
        return {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Workload",
            "metadata": meta,
            "spec": {"queueName": self.queue_name, "podSets": podsets, "priority": self.priority},
        }


def resubmission(w: Workload) -> Submission:
    """An existing Workload as a new submission of the same PodSets to the same queue, keeping its priority and its
    place in line."""
    return Submission(
        "Workload",
        w.namespace,
        w.name,
        w.queue_name,
        tuple(SubmittedPodSet(ps.name, ps.count, dict(ps.spec), labels=ps.labels) for ps in w.podsets),
        w.priority,
        labels=dict(w.labels),
        created=w.created,
    )


def _mapping(value: Any, where: str, source: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ManifestError(f"{source}: {where} must be a mapping, not {type(value).__name__}")
    return value


def _count(value: Any, where: str, source: str, default: int = 1) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ManifestError(f"{source}: {where} must be a non-negative integer, not {value!r}")
    if value > MAX_REPLICAS:
        raise ManifestError(f"{source}: {where} is {value}; the simulator takes at most {MAX_REPLICAS}")
    return value


def _template(obj: Mapping[str, Any], source: str) -> tuple[Mapping[str, Any], JSON]:
    spec = _mapping(obj.get("spec"), "spec", source)
    template = _mapping(spec.get("template"), "spec.template", source)
    meta = _mapping(template.get("metadata"), "spec.template.metadata", source)
    pod_spec = _mapping(template.get("spec"), "spec.template.spec", source)
    if not pod_spec.get("containers"):
        raise ManifestError(f"{source}: spec.template.spec.containers is empty: the template needs a container")
    return meta, deep_copy(dict(pod_spec))


def _queue(meta: Mapping[str, Any], source: str, kind: str) -> str:
    labels = _mapping(meta.get("labels"), "metadata.labels", source)
    queue = labels.get(naming.LABEL_QUEUE_NAME)
    if not isinstance(queue, str) or not queue:
        raise ManifestError(
            f"{source}: {kind} has no {naming.LABEL_QUEUE_NAME} label: Kueue would not queue it; set the label to the "
            "pool's entrance (`gpuctl views` shows it)"
        )
    return queue


def _labels_of(template_meta: Mapping[str, Any], source: str) -> dict[str, str]:
    return {str(k): str(v) for k, v in _mapping(template_meta.get("labels"), "labels", source).items()}


def template_pod(name: str, namespace: str, ps: SubmittedPodSet) -> JSON:
    """A Pod a template-built PodSet creates (its template's labels and spec), as the Pod webhook receives it."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(ps.labels)},
        "spec": deep_copy(ps.spec),
    }


def _pod_for(name: str, namespace: str, queue: str, template_meta: Mapping[str, Any], spec: JSON) -> JSON:
    labels = {str(k): str(v) for k, v in _mapping(template_meta.get("labels"), "labels", name).items()}
    labels[naming.LABEL_QUEUE_NAME] = queue
    annotations = {str(k): str(v) for k, v in _mapping(template_meta.get("annotations"), "annotations", name).items()}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels, "annotations": annotations},
        "spec": deep_copy(spec),
    }


def submissions_from_manifest(obj: Any, source: str, default_namespace: str = "default") -> list[Submission]:
    """The Workloads Kueue would create from one manifest, in creation order."""
    if not isinstance(obj, Mapping):
        raise ManifestError(f"{source}: expected a Kubernetes object, found {type(obj).__name__}")
    kind = obj.get("kind")
    if kind not in KINDS:
        raise ManifestError(f"{source}: kind {kind!r} cannot be simulated: use one of {', '.join(KINDS)}")
    if (refused := refusal(obj)) is not None:  # no gate judges what the API server would not store
        raise ManifestError(f"{source}: {refused}")
    meta = _mapping(obj.get("metadata"), "metadata", source)
    name = meta.get("name") or meta.get("generateName")
    if not isinstance(name, str) or not name:
        raise ManifestError(f"{source}: metadata.name is missing: name the {kind}")
    name = name.rstrip("-")
    namespace = str(meta.get("namespace") or default_namespace)
    labels = {str(k): str(v) for k, v in _mapping(meta.get("labels"), "metadata.labels", source).items()}
    wpc = labels.get(naming.LABEL_PRIORITY_CLASS, "")
    if kind == "Pod":
        spec = _mapping(obj.get("spec"), "spec", source)
        if not spec.get("containers"):
            raise ManifestError(f"{source}: spec.containers is empty: the Pod needs a container")
        queue = _queue(meta, source, kind)
        annotations = _mapping(meta.get("annotations"), "metadata.annotations", source)
        pod = deep_copy(dict(obj))
        pod.setdefault("metadata", {})["namespace"] = namespace
        ps = SubmittedPodSet("main", 1, deep_copy(dict(spec)), request_from_podset(None, annotations))
        ppc = str(spec.get("priorityClassName") or "")
        return [
            Submission(
                kind, namespace, name, queue, (ps,), pod=pod, labels=labels, priority_class=wpc, pod_priority_class=ppc
            )
        ]
    if kind in ("Job", "Deployment", "StatefulSet"):
        queue = _queue(meta, source, kind)
        template_meta, spec = _template(obj, source)
        ppc = str(spec.get("priorityClassName") or "")
        topology = request_from_podset(None, _mapping(template_meta.get("annotations"), "annotations", source))
        top = _mapping(obj.get("spec"), "spec", source)
        if kind == "Job":
            n = _count(top.get("parallelism"), "spec.parallelism", source)
            ps = SubmittedPodSet("main", n, spec, topology, _labels_of(template_meta, source))
            return [
                Submission(
                    kind, namespace, name, queue, (ps,), labels=labels, priority_class=wpc, pod_priority_class=ppc
                )
            ]
        replicas = _count(top.get("replicas"), "spec.replicas", source)
        if kind == "StatefulSet":
            ps = SubmittedPodSet("main", replicas, spec, topology)
            pod = _pod_for(f"{name}-0", namespace, queue, template_meta, spec)
            return [
                Submission(
                    kind,
                    namespace,
                    name,
                    queue,
                    (ps,),
                    pod=pod,
                    labels=labels,
                    priority_class=wpc,
                    pod_priority_class=ppc,
                )
            ]
        out = []
        for i in range(replicas):
            pod_name = f"{name}-{i}"
            ps = SubmittedPodSet("main", 1, spec, topology)
            pod = _pod_for(pod_name, namespace, queue, template_meta, spec)
            out.append(
                Submission(
                    "Pod",
                    namespace,
                    pod_name,
                    queue,
                    (ps,),
                    pod=pod,
                    labels=labels,
                    priority_class=wpc,
                    pod_priority_class=ppc,
                )
            )
        return out
    if kind == "Workload":
        spec = _mapping(obj.get("spec"), "spec", source)
        queue_name = spec.get("queueName")
        if not isinstance(queue_name, str) or not queue_name:
            raise ManifestError(f"{source}: spec.queueName is missing: set it to the pool's entrance")
        raw_podsets = spec.get("podSets")
        if not isinstance(raw_podsets, list) or not raw_podsets:
            raise ManifestError(f"{source}: spec.podSets is empty: a Workload needs at least one PodSet")
        podsets = []
        for i, raw in enumerate(raw_podsets):
            raw = _mapping(raw, f"spec.podSets[{i}]", source)
            template = _mapping(raw.get("template"), f"spec.podSets[{i}].template", source)
            tmeta = _mapping(template.get("metadata"), f"spec.podSets[{i}].template.metadata", source)
            pspec = _mapping(template.get("spec"), f"spec.podSets[{i}].template.spec", source)
            podsets.append(
                SubmittedPodSet(
                    str(raw.get("name") or "main"),
                    _count(raw.get("count"), f"spec.podSets[{i}].count", source),
                    deep_copy(dict(pspec)),
                    request_from_podset(
                        _mapping(raw.get("topologyRequest"), "topologyRequest", source),
                        _mapping(tmeta.get("annotations"), "annotations", source),
                    ),
                    _labels_of(tmeta, source),
                )
            )
        priority = spec.get("priority")
        return [
            Submission(
                kind,
                namespace,
                name,
                queue_name,
                tuple(podsets),
                priority if isinstance(priority, int) and not isinstance(priority, bool) else 0,
                labels=labels,
            )
        ]
    # Instance: the queue and the Pod come from its InstanceType, once the simulator knows it.
    spec = _mapping(obj.get("spec"), "spec", source)
    if not isinstance(spec.get("type"), str) or not spec.get("type"):
        raise ManifestError(f"{source}: spec.type is missing: name the InstanceType the Instance runs on")
    instance = deep_copy(dict(obj))
    instance.setdefault("metadata", {})["namespace"] = namespace
    return [Submission(kind, namespace, name, "", (), instance=instance, labels=labels)]


def instance_pod(instance: Mapping[str, Any], instancetype: InstanceType) -> JSON:
    """The Pod an Instance runs as (same name and namespace), queued on its InstanceType's entrance.

    ``spec.resources`` become the Pod's requests: ``cpu``, ``ram`` as memory, and the accelerator in the family its
    shape names — whole cards, a logical slice by memory (and cores) percentage, or a hardware partition profile.
    """
    meta = _mapping(instance.get("metadata"), "metadata", "instance")
    spec = _mapping(instance.get("spec"), "spec", "instance")
    resources = _mapping(spec.get("resources"), "spec.resources", "instance")
    limits: dict[str, str] = {}
    if resources.get("cpu"):
        limits["cpu"] = str(resources["cpu"])
    if resources.get("ram"):
        limits["memory"] = str(resources["ram"])
    mfr = naming.MANUFACTURERS.get(instancetype.manufacturer)
    if instancetype.acceleratable and mfr is not None:
        names = mfr.resources
        memory_percent = resources.get("acceleratorSlicedMemoryPercentage")
        cores_percent = resources.get("acceleratorSlicedCoresPercentage")
        profile = resources.get("acceleratorPartitionedProfile")
        if profile and mfr.partition_kind is not None:
            limits[names.partitioned] = "1"
            limits[names.partitioned_profile(str(profile))] = "1"
        elif memory_percent or cores_percent:
            limits[names.sliced] = "1"
            if memory_percent:
                limits[names.sliced_memory_percentage] = str(memory_percent)
            if cores_percent:
                limits[names.sliced_cores_percentage] = str(cores_percent)
        else:
            limits[names.base] = str(resources.get("accelerator") or "1")
    entrance = instancetype.entrance or instancetype.expected_entrance
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": str(meta.get("name", "")),
            "namespace": str(meta.get("namespace") or "default"),
            "labels": {naming.LABEL_QUEUE_NAME: entrance},
        },
        "spec": {
            "containers": [
                {
                    "name": "instance",
                    "image": str(spec.get("image") or "instance"),
                    "resources": {"limits": dict(limits), "requests": dict(limits)},
                }
            ]
        },
    }


@dataclass(frozen=True, slots=True)
class PriorityClasses:
    """The priority values a cluster defines: Kueue's WorkloadPriorityClasses and the Pods' PriorityClasses, and the
    PriorityClass marked ``globalDefault`` (its value applies to Pods that name none)."""

    workload: Mapping[str, int] = field(default_factory=dict)
    pod: Mapping[str, int] = field(default_factory=dict)
    default: int = 0


def _value(obj: Mapping[str, Any]) -> int:
    value = obj.get("value")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def parse_priority_classes(
    workload_classes: Sequence[Mapping[str, Any]], pod_classes: Sequence[Mapping[str, Any]]
) -> PriorityClasses:
    def name(o: Mapping[str, Any]) -> str:
        meta = o.get("metadata")
        return str(meta.get("name", "")) if isinstance(meta, Mapping) else ""

    defaults = [_value(o) for o in pod_classes if o.get("globalDefault") is True]
    return PriorityClasses(
        {name(o): _value(o) for o in workload_classes},
        {name(o): _value(o) for o in pod_classes},
        max(defaults, default=0),
    )


def with_priority(sub: Submission, classes: PriorityClasses, source: str) -> Submission:
    """The submission with the priority Kueue gives its Workload: its WorkloadPriorityClass's value, else its Pods'
    PriorityClass's, else the default PriorityClass's (a Workload manifest keeps its ``spec.priority``). A class the
    cluster does not have is an error, as it is to Kueue."""
    if sub.kind == "Workload" or sub.instance is not None:
        return sub
    if sub.priority_class:
        if sub.priority_class not in classes.workload:
            raise ManifestError(
                f"{source}: label {naming.LABEL_PRIORITY_CLASS}={sub.priority_class} names no WorkloadPriorityClass "
                "of the cluster (`kubectl get workloadpriorityclasses` lists them)"
            )
        return replace(sub, priority=classes.workload[sub.priority_class])
    if sub.pod_priority_class:
        if sub.pod_priority_class not in classes.pod:
            raise ManifestError(
                f"{source}: priorityClassName {sub.pod_priority_class} names no PriorityClass of the cluster "
                "(`kubectl get priorityclasses` lists them)"
            )
        return replace(sub, priority=classes.pod[sub.pod_priority_class])
    return replace(sub, priority=classes.default)
