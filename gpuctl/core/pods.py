"""Pod records: where a Pod runs, which Workload it belongs to, what it asks for, and what ``Allocate`` gave it."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from sys import intern
from typing import Any

from gpuctl.core import naming
from gpuctl.core.credits import pod_requests
from gpuctl.core.workloads import Condition, parse_conditions


def _m(value: Any) -> Mapping[str, Any]:
    return value if type(value) is dict or isinstance(value, Mapping) else {}  # dicts first: the ABC check is slow


def _l(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


@dataclass(frozen=True, slots=True)
class CardAllocation:
    """One card a container was given, as its allocation record names it."""

    container: str
    manufacturer: str
    group: str
    card_id: str
    mode: int
    allocated: int
    profile: str = ""
    placements: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True, slots=True)
class Pod:
    namespace: str
    name: str
    node_name: str
    phase: str
    labels: Mapping[str, str]
    workload: str
    """The ``kueue.x-k8s.io/workload`` annotation: the owning Workload's name."""
    podset: str
    accelerator_containers: tuple[str, ...]
    """Containers that request an accelerator family."""
    allocations: tuple[CardAllocation, ...]
    requests: Mapping[str, Fraction] = field(default_factory=dict)
    reason: str = ""
    message: str = ""
    conditions: Mapping[str, Condition] = field(default_factory=dict)
    scheduling_gates: tuple[str, ...] = ()
    deleting: bool = False
    topology_annotated: bool = False
    """It carries one of Kueue's PodSet topology annotations (Kueue writes ``unconstrained`` on the Pods of every
    Workload it places by topology without a request of its own): TAS counts it through its Workload, and leaves its
    raw requests out of the usage of the Pods outside TAS."""

    @property
    def finished(self) -> bool:
        return self.phase in ("Succeeded", "Failed")

    @property
    def held(self) -> bool:
        """Allocate recorded every container that asks for an accelerator."""
        named = {a.container for a in self.allocations}
        return bool(self.accelerator_containers) and all(c in named for c in self.accelerator_containers)

    @property
    def queue_name(self) -> str:
        return self.labels.get(naming.LABEL_QUEUE_NAME, "")


TOPOLOGY_ANNOTATIONS = (
    "kueue.x-k8s.io/podset-required-topology",
    "kueue.x-k8s.io/podset-preferred-topology",
    "kueue.x-k8s.io/podset-unconstrained-topology",
)


def _int(value: Any) -> int:
    """An integer field of an allocation record; anything else reads as 0 (Pod annotations are user-writable)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def parse_allocation_annotation(raw: str) -> tuple[CardAllocation, ...]:
    """The ``device.gpustack.ai/accelerator.allocated`` annotation: a JSON map keyed by container name."""
    if not raw:
        return ()
    try:
        data = json.loads(raw)
    except (TypeError, ValueError):
        return ()
    out: list[CardAllocation] = []
    for container, record in _m(data).items():
        for g in _l(_m(_m(record).get("devices")).get("groups")):
            g = _m(g)
            for a in _l(g.get("accelerators")):
                a = _m(a)
                placements = tuple(
                    (_int(_m(p).get("start")), _int(_m(p).get("length")))
                    for p in _l(a.get("allocatedPhysicalPlacements"))
                )
                out.append(
                    CardAllocation(
                        container=intern(str(container)),
                        manufacturer=intern(str(g.get("manufacturer", ""))),
                        group=intern(str(g.get("id", ""))),
                        card_id=str(a.get("id", "")),
                        mode=_int(a.get("mode")),
                        allocated=_int(a.get("allocated")),
                        profile=str(a.get("allocatedPhysicalProfile") or ""),
                        placements=placements,
                    )
                )
    return tuple(out)


def _accelerator_containers(spec: Mapping[str, Any]) -> tuple[str, ...]:
    names = []
    for section in ("initContainers", "containers"):
        for c in _l(spec.get(section)):
            c = _m(c)
            res = _m(c.get("resources"))
            keys = list(_m(res.get("limits"))) + list(_m(res.get("requests")))
            if any((k := naming.classify_resource(str(r))) is not None and k.family is not None for r in keys):
                names.append(str(c.get("name", "")))
    return tuple(dict.fromkeys(names))


def parse_pod(obj: Mapping[str, Any]) -> Pod:
    meta = _m(obj.get("metadata"))
    spec = _m(obj.get("spec"))
    status = _m(obj.get("status"))
    annotations = _m(meta.get("annotations"))
    labels = {intern(str(k)): intern(str(v)) for k, v in _m(meta.get("labels")).items()}
    return Pod(
        namespace=intern(str(meta.get("namespace") or "default")),
        name=str(meta.get("name", "")),
        node_name=intern(str(spec.get("nodeName") or "")),
        phase=intern(str(status.get("phase") or "")),
        labels=labels,
        workload=str(annotations.get(naming.ANNOTATION_WORKLOAD) or ""),
        podset=labels.get(naming.LABEL_PODSET, ""),
        accelerator_containers=_accelerator_containers(spec),
        allocations=parse_allocation_annotation(str(annotations.get(naming.ANNOTATION_ALLOCATED) or "")),
        requests=pod_requests(spec),
        reason=str(status.get("reason") or ""),
        message=str(status.get("message") or ""),
        conditions=parse_conditions(status.get("conditions")),
        scheduling_gates=tuple(str(_m(g).get("name", "")) for g in _l(spec.get("schedulingGates"))),
        deleting=bool(meta.get("deletionTimestamp")),
        topology_annotated=any(k in annotations for k in TOPOLOGY_ANNOTATIONS),
    )
