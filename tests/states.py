"""Cluster states consistent by construction, for the what-if tests.

The design binds the objects of a cluster together; a state built here keeps every binding, so a what-if answer on
it can be checked against the rules rather than against an accident of the fixture:

- each card is whole (reporting its manufacturer's logical slicing) or partitioned (reporting its model's geometry),
  card by card (``State.node(..., partitioned=...)``), and each pool's InstanceType publishes the catalog its cards
  sum to (the partitioned cards' profiles, the whole cards' slices), as the status writer does;
- each card's ledger row (``Devices.status``) is what the allocation records of the Pods bound to its node hold: the
  units summed, one slice slot per slice, the records' mode, partitions at their placements and the profiles still
  free by the card's geometry;
- each Node advertises the device plugin's keys for that ledger (a card held in one mode reports the tokens of the
  other modes unhealthy, so they are not allocatable) and its cards' credits, which Kueue's topology-aware
  scheduling counts the admitted Workloads' credits against;
- each Workload holding cards is admitted on its node by a hostname-level TAS assignment, with the check's ``Ready``,
  and its Pod carries the ``kueue.x-k8s.io/workload`` annotation and the podset label;
- each ClusterQueue's ``status.flavorsReservation`` is the credits its reserved Workloads take.

The ledger rows and credits are computed here from the records, with the device manager's and Kueue's arithmetic
written out (not by the code under test); only the keys a ledger advertises come from ``core.capacity``.
:func:`overcommits` checks a simulated working copy against the same bindings: no card holds more than it can.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from gpuctl.core import naming
from gpuctl.core.capacity import node_allocatable
from gpuctl.core.ledger import parse_devices
from gpuctl.core.units import PERCENT, SHARE, M
from testbed.factories import (
    A10G_MIB,
    H100_MIB,
    H100_PROFILES,
    HYGON_BW_MIB,
    HYGON_BW_PROFILES,
    container,
    devices,
    instancetype,
    physical_profiles,
)

JSON = dict[str, Any]
NS = "team-a"
MODE_EXCLUSIVE, MODE_SHARED, MODE_SLICED, MODE_PARTITIONED = 1, 2, 3, 4
CREATED = "2026-12-01T00:00:00Z"


@dataclass(frozen=True)
class Model:
    """One accelerator model of the state, with its pool (InstanceType, flavor, queues)."""

    group_id: str
    product: str
    memory_mib: int
    profiles: dict[str, tuple[int, int, tuple[int, ...], int, int]] = field(default_factory=dict, hash=False)
    """The model's partition geometry (empty: it cannot be partitioned)."""
    manufacturer: str = "nvidia"

    @property
    def key(self) -> str:
        return naming.accelerator_key(self.manufacturer, self.group_id)

    @property
    def base(self) -> str:
        return naming.MANUFACTURERS[self.manufacturer].base

    @property
    def credits(self) -> str:
        return naming.MANUFACTURERS[self.manufacturer].credits

    @property
    def slots(self) -> int:
        return naming.MANUFACTURERS[self.manufacturer].slice_slots or 0

    @property
    def overcommit(self) -> bool:
        return naming.MANUFACTURERS[self.manufacturer].cores_overcommit

    @property
    def pool(self) -> str:
        return f"gpustack--{self.key}-linux-amd64"

    @property
    def entrance(self) -> str:
        return naming.queue_entrance(self.pool)

    @property
    def flavor(self) -> str:
        return f"f-{self.group_id}"


A10G = Model("a10g", "NVIDIA A10G", A10G_MIB)
H100 = Model("h100-80gb-hbm3", "NVIDIA H100 80GB HBM3", H100_MIB, H100_PROFILES)
HYGON = Model("bw", "Hygon BW", HYGON_BW_MIB, HYGON_BW_PROFILES, "hygon")
BASE = "nvidia.com/gpu"


@dataclass(frozen=True)
class Hold:
    """What one Pod holds of one card: ``mode`` 1 exclusive, 2 shared, 3 a slice of ``percent``, 4 a partition of
    ``profile`` at memory slice ``start``."""

    card: int
    mode: int
    percent: int = 0
    profile: str = ""
    start: int = 0


def whole(*cards: int) -> list[Hold]:
    return [Hold(c, MODE_EXCLUSIVE) for c in cards]


def shares(*cards: int) -> list[Hold]:
    return [Hold(c, MODE_SHARED) for c in cards]


def slice_of(card: int, percent: int) -> list[Hold]:
    return [Hold(card, MODE_SLICED, percent)]


def partition(card: int, profile: str, start: int) -> list[Hold]:
    return [Hold(card, MODE_PARTITIONED, profile=profile, start=start)]


def units_of(model: Model, h: Hold) -> int:
    """The units Allocate records for one hold: a whole card M, a share M/10, a slice its percent, a partition its
    profile's memory over the card's."""
    if h.mode == MODE_EXCLUSIVE:
        return M
    if h.mode == MODE_SHARED:
        return SHARE
    if h.mode == MODE_SLICED:
        return h.percent * PERCENT
    return model.profiles[h.profile][3] * M // model.memory_mib


def limits_for(model: Model, holds: list[Hold]) -> dict[str, str]:
    """The requests of a Pod holding ``holds`` (all of one mode), folded as the Pod webhook folds them."""
    mode, base = holds[0].mode, model.base
    if mode == MODE_EXCLUSIVE:
        return {base: str(len(holds))}
    if mode == MODE_SHARED:
        return {f"{base}.shared": str(len(holds))}
    if mode == MODE_SLICED:
        return {
            f"{base}.sliced": "1",
            f"{base}.sliced.units": str(units_of(model, holds[0])),
            f"{base}.sliced.memory-percentage": str(holds[0].percent),
        }
    return {
        f"{base}.partitioned": "1",
        f"{base}.partitioned.units": str(units_of(model, holds[0])),
        f"{base}.partitioned.mig-{holds[0].profile}": "1",
    }


def credits_of(limits: dict[str, str], count: int = 1, base: str = BASE) -> int:
    """Kueue's credits for Pods of these requests (its resource transformation, written out)."""
    n = {k: int(v) for k, v in limits.items() if k.startswith(base)}
    per_pod = (
        n.get(base, 0) * M
        + n.get(f"{base}.shared", 0) * SHARE
        + n.get(f"{base}.sliced.units", 0) * n.get(f"{base}.sliced", 0)
        + n.get(f"{base}.partitioned.units", 0)
    )
    return per_pod * count


def free_profile_counts(model: Model, taken: list[tuple[int, int]]) -> dict[str, int]:
    """Each profile's instances one card can still host around the taken memory slices: its legal starts that overlap
    nothing taken, packed left to right (optimal for one profile's equal-sized slots)."""
    out = {}
    for name, (count, length, starts, _mib, _compute) in model.profiles.items():
        chosen: list[tuple[int, int]] = []
        for s in starts:
            span = (s, s + length)
            if all(span[1] <= a or b <= span[0] for a, b in [*taken, *chosen]):
                chosen.append(span)
        out[name] = min(count, len(chosen))
    return out


@dataclass
class _Holder:
    name: str | None
    node: str
    model: Model
    holds: list[Hold]
    priority: int
    limits: dict[str, str]
    namespace: str


@dataclass
class State:
    """A cluster being built: nodes of one or two models, Workloads holding cards, Workloads waiting."""

    strategy: str = "BestEffortFIFO"
    check: bool = True
    preemption: str = "Never"
    """Every ClusterQueue's ``spec.preemption.withinClusterQueue``."""
    nodes: dict[str, tuple[Model, int]] = field(default_factory=dict)
    partitioned: dict[str, frozenset[int]] = field(default_factory=dict)
    """Node → its partitioned cards (a model with a geometry is partitioned on every card unless a node says)."""
    holders: list[_Holder] = field(default_factory=list)
    waiting: list[JSON] = field(default_factory=list)
    extra: list[JSON] = field(default_factory=list)
    nominal: dict[str, int] = field(default_factory=dict)
    """Pool → nominal quota in cards (default: every card of the pool)."""
    namespace: str = NS
    topology: str = "hostname"

    def node(self, name: str, cards: int, model: Model = A10G, *, partitioned: Iterable[int] | None = None) -> State:
        """A node of ``cards`` cards of ``model``: partitioned (those ``partitioned`` names, else every one when the
        model has a geometry) or whole."""
        self.nodes[name] = (model, cards)
        chosen = range(cards) if partitioned is None and model.profiles else (partitioned or ())
        self.partitioned[name] = frozenset(chosen)
        assert not self.partitioned[name] or model.profiles, f"{model.key} has no partition geometry"
        return self

    def card_partitioned(self, node: str, card: int) -> bool:
        return card in self.partitioned.get(node, frozenset())

    def hold(
        self, name: str | None, node: str, holds: list[Hold], *, priority: int = 0, namespace: str | None = None
    ) -> State:
        """A Workload ``name`` (None: a Pod outside Kueue) whose one Pod on ``node`` holds ``holds``, in
        ``namespace`` (default: the state's)."""
        model = self.nodes[node][0]
        self.holders.append(
            _Holder(name, node, model, holds, priority, limits_for(model, holds), namespace or self.namespace)
        )
        return self

    def wait(
        self,
        name: str,
        limits: dict[str, str],
        *,
        count: int = 1,
        priority: int = 0,
        created: str = CREATED,
        model: Model = A10G,
        conditions: list[JSON] | None = None,
    ) -> State:
        """A pending Workload (no quota reserved yet) asking ``limits`` per Pod."""
        self.waiting.append(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "Workload",
                "metadata": {
                    "name": name,
                    "namespace": self.namespace,
                    "uid": f"uid-{name}",
                    "creationTimestamp": created,
                },
                "spec": {
                    "queueName": model.entrance,
                    "priority": priority,
                    "podSets": [
                        {
                            "name": "main",
                            "count": count,
                            "template": {"spec": {"containers": [container("main", limits)]}},
                        }
                    ],
                },
                "status": {"conditions": conditions or []},
            }
        )
        return self

    # -- the objects ------------------------------------------------------------------------------------------

    def _models(self) -> list[Model]:
        return list(dict.fromkeys(m for m, _ in self.nodes.values()))

    def _devices(self, node: str) -> JSON:
        model, cards = self.nodes[node]
        rows = []
        for i in range(cards):
            records = [(h, units_of(model, h)) for x in self.holders if x.node == node for h in x.holds if h.card == i]
            row: JSON = {"id": f"GPU-{i:04d}", "index": i, "mode": 0, "allocated": 0, "remaining": M}
            if records:
                allocated = sum(u for _, u in records)
                row.update(mode=records[0][0].mode, allocated=allocated, remaining=M - allocated)
                slices = sum(1 for h, _ in records if h.mode == MODE_SLICED)
                if slices:
                    row["allocatedSlices"] = slices
            if self.card_partitioned(node, i):
                parts = [h for h, _ in records if h.mode == MODE_PARTITIONED]
                taken = [(h.start, h.start + model.profiles[h.profile][1]) for h in parts]
                counts: dict[str, int] = {}
                for h in parts:
                    counts[h.profile] = counts.get(h.profile, 0) + 1
                row["allocatedProfiles"] = [{"name": n, "count": c} for n, c in counts.items()]
                row["remainingProfiles"] = [
                    {"name": n, "count": c} for n, c in free_profile_counts(model, taken).items()
                ]
            rows.append(row)
        obj = devices(
            node,
            manufacturer=model.manufacturer,
            group_id=model.group_id,
            product=model.product,
            memory_mib=model.memory_mib,
            cards=cards,
            rows=rows,
            profiles=physical_profiles(model.profiles) if model.profiles else None,
        )
        for i, a in enumerate(obj["spec"]["groups"][0]["accelerators"]):
            if not self.card_partitioned(node, i):  # a whole card reports its logical slicing, no geometry
                a["status"] = {
                    "unhealthy": False,
                    "logicalSliced": {"count": model.slots, "coresPercentageOvercommit": model.overcommit},
                }
        return obj

    def _pool_objects(self, model: Model) -> list[JSON]:
        cards = sum(c for m, c in self.nodes.values() if m == model)
        used = sum(credits_of(h.limits, base=model.base) for h in self.holders if h.model == model and h.name)
        # The status writer's catalog: the pool's partitioned cards' profiles and its whole cards' slices, summed.
        carved = sum(len(self.partitioned.get(n, ())) for n, (m, _) in self.nodes.items() if m == model)
        profiles = [{**p, "count": p["count"] * carved} for p in physical_profiles(model.profiles)] if carved else None
        spec: JSON = {
            "namespaceSelector": {},
            "stopPolicy": "None",
            "queueingStrategy": self.strategy,
            "preemption": {"withinClusterQueue": self.preemption},
            "resourceGroups": [
                {
                    "coveredResources": [model.credits],
                    "flavors": [
                        {
                            "name": model.flavor,
                            "resources": [
                                {
                                    "name": model.credits,
                                    "nominalQuota": str(self.nominal.get(model.pool, cards) * M),
                                }
                            ],
                        }
                    ],
                }
            ],
        }
        if self.check:
            spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": naming.NODE_DEVICES_CHECK}]}
        whole_cards = cards - carved
        it = instancetype(
            model.pool,
            manufacturer=model.manufacturer,
            group_id=model.group_id,
            memory=f"{model.memory_mib}Mi",
            logical_count=whole_cards * model.slots,
            profiles=profiles,
        )
        return [
            it,
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "ClusterQueue",
                "metadata": {
                    "name": model.pool,
                    "labels": {naming.LABEL_RESOURCE_TYPE: naming.RESOURCE_TYPE_INSTANCETYPES},
                },
                "spec": spec,
                "status": {
                    "flavorsReservation": [
                        {
                            "name": model.flavor,
                            "resources": [{"name": model.credits, "total": str(used)}],
                        }
                    ]
                },
            },
            *(
                {
                    "apiVersion": "kueue.x-k8s.io/v1beta2",
                    "kind": "LocalQueue",
                    "metadata": {"name": model.entrance, "namespace": ns},
                    "spec": {"clusterQueue": model.pool},
                }
                for ns in dict.fromkeys([self.namespace, *(h.namespace for h in self.holders)])
            ),
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "ResourceFlavor",
                "metadata": {"name": model.flavor, "labels": {naming.LABEL_RESOURCE_TYPE: "nodes"}},
                "spec": {
                    "nodeLabels": {
                        naming.LABEL_OS: "linux",
                        naming.LABEL_ARCH: "amd64",
                        naming.LABEL_MANAGED: "true",
                        naming.accelerator_label(model.key): "true",
                    },
                    "topologyName": self.topology,
                },
            },
        ]

    def _holder_objects(self, h: _Holder, i: int) -> list[JSON]:
        pod_name = f"{h.name or 'outside'}-{i}"
        record = {
            "main": {
                "devices": {
                    "groups": [
                        {
                            "id": h.model.group_id,
                            "manufacturer": h.model.manufacturer,
                            "accelerators": [
                                {
                                    "id": f"GPU-{x.card:04d}",
                                    "mode": x.mode,
                                    "allocated": units_of(h.model, x),
                                    **(
                                        {
                                            "allocatedPhysicalProfile": x.profile,
                                            "allocatedPhysicalPlacements": [
                                                {"start": x.start, "length": h.model.profiles[x.profile][1]}
                                            ],
                                        }
                                        if x.mode == MODE_PARTITIONED
                                        else {}
                                    ),
                                }
                                for x in h.holds
                            ],
                        }
                    ]
                }
            }
        }
        annotations = {naming.ANNOTATION_ALLOCATED: json.dumps(record)}
        if h.name:  # a Pod of a Workload Kueue placed by topology: it carries Kueue's topology annotation
            annotations[naming.ANNOTATION_WORKLOAD] = h.name
            annotations["kueue.x-k8s.io/podset-unconstrained-topology"] = "true"
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": pod_name,
                "namespace": h.namespace,
                "labels": {
                    naming.LABEL_PODSET: "main",
                    **({naming.LABEL_QUEUE_NAME: h.model.entrance} if h.name else {}),
                },
                "annotations": annotations,
            },
            "spec": {"nodeName": h.node, "containers": [container("main", h.limits)]},
            "status": {"phase": "Running"},
        }
        if not h.name:
            return [pod]
        workload = {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Workload",
            "metadata": {
                "name": h.name,
                "namespace": h.namespace,
                "uid": f"uid-{h.name}",
                "creationTimestamp": CREATED,
            },
            "spec": {
                "queueName": h.model.entrance,
                "priority": h.priority,
                "podSets": [
                    {"name": "main", "count": 1, "template": {"spec": {"containers": [container("main", h.limits)]}}}
                ],
            },
            "status": {
                "conditions": [
                    {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved"},
                    {"type": "Admitted", "status": "True", "reason": "Admitted"},
                ],
                "admission": {
                    "clusterQueue": h.model.pool,
                    "podSetAssignments": [
                        {
                            "name": "main",
                            "count": 1,
                            "flavors": {h.model.credits: h.model.flavor},
                            "topologyAssignment": {
                                "levels": [naming.LABEL_HOSTNAME],
                                "slices": [
                                    {
                                        "domainCount": 1,
                                        "valuesPerLevel": [{"universal": h.node}],
                                        "podCounts": {"universal": 1},
                                    }
                                ],
                            },
                        }
                    ],
                },
                "admissionChecks": [{"name": naming.NODE_DEVICES_CHECK, "state": "Ready", "message": ""}],
            },
        }
        return [workload, pod]

    def objects(self) -> list[JSON]:
        out: list[JSON] = [
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "AdmissionCheck",
                "metadata": {"name": naming.NODE_DEVICES_CHECK},
                "spec": {"controllerName": naming.NODE_DEVICES_CONTROLLER},
                "status": {"conditions": [{"type": "Active", "status": "True", "reason": "Ready"}]},
            },
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "Topology",
                "metadata": {"name": self.topology},
                "spec": {"levels": [{"nodeLabel": naming.LABEL_HOSTNAME}]},
            },
        ]
        for model in self._models():
            out += self._pool_objects(model)
        for name, (model, cards) in self.nodes.items():
            d = self._devices(name)
            keys = {k: str(v) for k, v in node_allocatable(parse_devices(d)).items()}
            keys[model.credits] = str(cards * M)
            out.append(d)
            out.append(
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {
                        "name": name,
                        "labels": {
                            naming.LABEL_HOSTNAME: name,
                            naming.LABEL_MANAGED: "true",
                            naming.LABEL_OS: "linux",
                            naming.LABEL_ARCH: "amd64",
                            naming.accelerator_label(model.key): "true",
                        },
                    },
                    "spec": {},
                    "status": {
                        "allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110", **keys},
                        "capacity": {"cpu": "64"},
                        "conditions": [{"type": "Ready", "status": "True"}],
                    },
                }
            )
        for i, h in enumerate(self.holders):
            out += self._holder_objects(h, i)
        return out + self.waiting + self.extra


def overcommits(sim: Any) -> list[str]:
    """Every way a card's allocation records — of the Pods the state had and those a simulation placed — exceed the
    card as its (possibly switched) capability describes it: two modes, more than M units, a whole card given twice,
    more slices than its slots, two shares of one container, partitions that do not fit its geometry, or records in a
    mode its capability does not serve (a partition on a whole card, a whole card, share or slice on a partitioned
    one). Empty when every card holds."""
    cards = {(node, c.id): c for node, d in sim.base_devices.items() for g in d.groups for c in g.cards}
    records: dict[tuple[str, str], list[Any]] = {}
    for p in sim.pods:
        if p.finished or not p.node_name:
            continue
        for a in p.allocations:
            records.setdefault((p.node_name, a.card_id), []).append((p, a))
    out = []
    for where, recs in sorted(records.items()):
        card = cards.get(where)
        if card is None:
            out.append(f"{where}: records on a card the node does not have")
            continue
        modes = {a.mode for _, a in recs}
        if len(modes) != 1:
            out.append(f"{where}: held in modes {sorted(modes)}")
            continue
        mode = modes.pop()
        if sum(a.allocated for _, a in recs) > M:
            out.append(f"{where}: {sum(a.allocated for _, a in recs)} units")
        if (mode == MODE_PARTITIONED) != card.partitioned:
            out.append(f"{where}: mode {mode} on a {'partitioned' if card.partitioned else 'whole'} card")
        if mode == MODE_EXCLUSIVE and len(recs) != 1:
            out.append(f"{where}: a whole card given {len(recs)} times")
        if mode == MODE_SLICED and len(recs) > card.logical_slots:
            out.append(f"{where}: {len(recs)} slices on {card.logical_slots} slots")
        if mode == MODE_SHARED:
            held = [(p.namespace, p.name, a.container) for p, a in recs]
            if len(held) != len(set(held)) or any(a.allocated != SHARE for _, a in recs):
                out.append(f"{where}: shares {held}")
        if mode == MODE_PARTITIONED and not _fits(card, [a.profile for _, a in recs]):
            out.append(f"{where}: partitions {[a.profile for _, a in recs]} do not fit its geometry")
    return out


def _fits(card: Any, profiles: list[str]) -> bool:
    """Whether these partitions can all sit on the card (every arrangement of its legal placements tried)."""
    by_name = {p.name: p for p in card.profiles}
    if any(name not in by_name for name in profiles):
        return False

    def place(rest: list[str], taken: list[tuple[int, int]]) -> bool:
        if not rest:
            return True
        p = by_name[rest[0]]
        return any(
            place(rest[1:], [*taken, (pl.start, pl.end)])
            for pl in p.placements
            if all(pl.end <= a or b <= pl.start for a, b in taken)
        )

    return place(sorted(profiles, key=lambda n: -by_name[n].memory_slices), [])
