"""Pod records: where a Pod runs, which Workload it belongs to, what it asks for, and what ``Allocate`` gave it."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from sys import intern
from typing import Any, NamedTuple

from gpuctl.core import naming
from gpuctl.core.credits import pod_requests, template_key
from gpuctl.core.workloads import Condition, parse_conditions


def _m(value: Any) -> Mapping[str, Any]:
    return value if type(value) is dict or isinstance(value, Mapping) else {}  # dicts first: the ABC check is slow


def _l(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


class CardAllocation(NamedTuple):
    """One card a container was given, as its allocation record names it."""

    container: str
    manufacturer: str
    group: str
    card_id: str
    mode: int
    allocated: int
    profile: str = ""
    placements: tuple[tuple[int, int], ...] = ()
    physical_id: str = ""
    """A partition's own id as the record names it (``allocatedPhysicalID``: the MIG device's UUID); "" otherwise.
    The record carries no GPU instance id."""


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
    started_at: str = ""
    """When its first container started (RFC 3339; empty when none has, or the record does not say)."""
    finished_at: str = ""
    """When its last container finished, once every container has (RFC 3339; empty otherwise)."""
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
    return value if type(value) is int or (isinstance(value, int) and not isinstance(value, bool)) else 0


_decode_json = json.JSONDecoder().decode


def parse_allocation_annotation(raw: str) -> tuple[CardAllocation, ...]:
    """The ``device.gpustack.ai/accelerator.allocated`` annotation: a JSON map keyed by container name.

    Read once per Pod of a cluster, so each level is looked at once and each container's and group's names are made
    once for all of its cards."""
    if not raw:
        return ()
    try:
        data = _decode_json(raw)
    except (TypeError, ValueError):
        return ()
    out: list[CardAllocation] = []
    for container, record in _m(data).items():
        groups = _m(_m(record).get("devices")).get("groups")
        if type(groups) is not list:
            continue
        name = intern(str(container))
        for g in groups:
            g = g if type(g) is dict else _m(g)
            accelerators = g.get("accelerators")
            if type(accelerators) is not list or not accelerators:
                continue
            manufacturer, group = intern(str(g.get("manufacturer", ""))), intern(str(g.get("id", "")))
            for a in accelerators:
                a = a if type(a) is dict else _m(a)
                physical = a.get("allocatedPhysicalPlacements")
                placements = (
                    tuple((_int(_m(p).get("start")), _int(_m(p).get("length"))) for p in physical)
                    if type(physical) is list
                    else ()
                )
                out.append(
                    CardAllocation(
                        name,
                        manufacturer,
                        group,
                        str(a.get("id", "")),
                        _int(a.get("mode")),
                        _int(a.get("allocated")),
                        str(a.get("allocatedPhysicalProfile") or ""),
                        placements,
                        str(a.get("allocatedPhysicalID") or ""),
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


_SHAPES: dict[Any, tuple[Mapping[str, Fraction], tuple[str, ...]]] = {}
"""A Pod spec's requests and accelerator containers by what they are read from: a cluster's Pods share a few."""


def _shape(spec: Mapping[str, Any]) -> tuple[Mapping[str, Fraction], tuple[str, ...]]:
    """The Pod's effective requests and the containers that ask for an accelerator."""
    key = template_key(spec)
    got = _SHAPES.get(key) if key is not None else None
    if got is None:
        got = (pod_requests(spec), _accelerator_containers(spec))
        if key is not None and len(_SHAPES) < 4096:
            _SHAPES[key] = got
    return got


def parse_pod(obj: Mapping[str, Any]) -> Pod:
    meta = _m(obj.get("metadata"))
    spec = _m(obj.get("spec"))
    status = _m(obj.get("status"))
    annotations = _m(meta.get("annotations"))
    labels = {intern(str(k)): intern(str(v)) for k, v in _m(meta.get("labels")).items()}
    requests, accelerator_containers = _shape(spec)
    gates = _l(spec.get("schedulingGates"))
    return Pod(
        namespace=intern(str(meta.get("namespace") or "default")),
        name=str(meta.get("name", "")),
        node_name=intern(str(spec.get("nodeName") or "")),
        phase=intern(str(status.get("phase") or "")),
        labels=labels,
        workload=str(annotations.get(naming.ANNOTATION_WORKLOAD) or ""),
        podset=labels.get(naming.LABEL_PODSET, ""),
        accelerator_containers=accelerator_containers,
        allocations=parse_allocation_annotation(str(annotations.get(naming.ANNOTATION_ALLOCATED) or "")),
        requests=requests,
        reason=str(status.get("reason") or ""),
        message=str(status.get("message") or ""),
        conditions=parse_conditions(status.get("conditions")),
        scheduling_gates=tuple(str(_m(g).get("name", "")) for g in gates) if gates else (),
        deleting=bool(meta.get("deletionTimestamp")),
        topology_annotated=not annotations.keys().isdisjoint(TOPOLOGY_ANNOTATIONS),
        **_run_bounds(status),
    )


def _run_bounds(status: Mapping[str, Any]) -> dict[str, str]:
    """``started_at`` and ``finished_at`` from the container statuses: the first start of any container (this run
    or a restarted one's last), and the last finish once every container is terminated."""
    starts: list[str] = []
    finishes: list[str] = []
    statuses = [_m(c) for c in _l(status.get("containerStatuses"))]
    for c in statuses:
        state, last = _m(c.get("state")), _m(c.get("lastState"))
        for phase in (_m(state.get("running")), _m(state.get("terminated")), _m(last.get("terminated"))):
            if phase.get("startedAt"):
                starts.append(str(phase["startedAt"]))
        if _m(state.get("terminated")).get("finishedAt"):
            finishes.append(str(_m(state.get("terminated"))["finishedAt"]))
    out = {}
    if starts:
        out["started_at"] = min(starts)
    if statuses and len(finishes) == len(statuses):
        out["finished_at"] = max(finishes)
    return out
