"""What-if: run Workloads through the five gates on an in-memory copy of the cluster, in sequence.

Each gate is the function the cluster's own gate runs, or Kueue's rule as its source states it:

1. the Pod webhook (:func:`gpuctl.core.webhooks.review`) on the Pod Kueue's integration creates, then the Workload
   fit-pin webhook on the Workload;
2. Kueue's ``credits`` quota (with cohort borrowing, :func:`gpuctl.core.credits.quota_room`) and its TAS placement
   (:mod:`gpuctl.core.tas`), flavor by flavor in the queue's order;
3. the ``gpustack-node-devices`` check (:func:`gpuctl.core.fit.judge_workload`) on the Workload as Kueue reserved it;
4. the capacity keys left on each assigned node;
5. the allocator's picks (:func:`gpuctl.core.allocator.allocate`), card by card.

An admitted Workload is then committed: its Pods are bound with the allocation records ``Allocate`` would write, the
ledgers of their nodes are rebuilt from them, and the quota and node room they take are charged, so the next
Workload sees it placed. Nothing is ever written to the cluster.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any

from gpuctl.core import modes, naming, preemption
from gpuctl.core.admission import JSON
from gpuctl.core.allocator import FAMILY_MODE, Grant, Refusal, allocate
from gpuctl.core.capacity import advertised, node_allocatable
from gpuctl.core.credits import pod_requests
from gpuctl.core.explain import (
    CLEARED,
    FAILED,
    HELD,
    NOT_APPLICABLE,
    NOT_REACHED,
    PASSED,
    QUOTA,
    STRICT_ORDER,
    TAS_PLACEMENT,
    Explanation,
    Gate,
    gate1,
)
from gpuctl.core.fit import (
    READY,
    FitContext,
    judge_workload,
    podset_demands,
    rebuild_ledger,
    workloads_by_node,
)
from gpuctl.core.instancetypes import InstanceType
from gpuctl.core.ledger import Card, NodeDevices
from gpuctl.core.naming import Family
from gpuctl.core.nodes import Node
from gpuctl.core.pins import FIT_PREFIXES, PinContext, node_fit_labels
from gpuctl.core.pods import CardAllocation, Pod
from gpuctl.core.queueing import STRICT_FIFO, order_key, pending
from gpuctl.core.quota import QuotaBook, amount_text, flavor_quotas, quota_book, quota_requests
from gpuctl.core.requests import slice_units_on_card
from gpuctl.core.submissions import Submission, SubmittedPodSet, instance_pod, resubmission, template_pod
from gpuctl.core.tas import Amount, NodeRoom, Room, TasFailure, TasPlacement, node_selector, place, plain, with_pod_slot
from gpuctl.core.units import M
from gpuctl.core.webhooks import Kind, WebhookContext, review
from gpuctl.core.workloads import (
    AdmissionCheck,
    ClusterQueue,
    Condition,
    LocalQueue,
    PodSet,
    PodSetAssignment,
    ResourceFlavor,
    TopologyDomain,
    Workload,
    parse_workload,
)


class ScenarioError(ValueError):
    """A scenario that names something the cluster does not have; the message says what and how to list them."""


@dataclass(frozen=True)
class ClusterState:
    """Every object the gates read, as records (the simulator never touches the cluster)."""

    local_queues: Mapping[tuple[str, str], LocalQueue]
    cluster_queues: Mapping[str, ClusterQueue]
    instancetypes: Mapping[str, InstanceType]
    flavors: Mapping[str, ResourceFlavor]
    topologies: Mapping[str, tuple[str, ...]]
    """Topology name → its levels' node labels."""
    nodes: Mapping[str, Node]
    """Empty when the read holds no Node objects (a snapshot of ledgers only): room then comes from the ledgers."""
    devices: Mapping[str, NodeDevices]
    """The Devices as read (capabilities; the published ledgers)."""
    admission_check: AdmissionCheck | None
    check: FitContext
    """Gate 3's inputs, built by :func:`gpuctl.core.fit.check_inputs` as the operator builds them: every Workload,
    the Pods read, and each node's ledger rebuilt from the Pods bound to it."""

    @property
    def workloads(self) -> Sequence[Workload]:
        return self.check.workloads


def _grown(state: ClusterState, count: int, like: str) -> ClusterState:
    """``count`` more nodes shaped like ``like`` (its labels, allocatable and cards, every card free); every queue
    whose flavor selects them grows by their cards x M credits, as a derived pool's quota follows its nodes."""
    template = state.devices.get(like)
    if template is None:
        raise ScenarioError(
            f"--like {like}: no node of that name has a Devices ledger (`gpuctl views --by-node` lists them)"
        )
    devices = dict(state.devices)
    nodes = dict(state.nodes)
    base = state.nodes.get(like)
    fresh = rebuild_ledger(template, ())  # every card free
    for i in range(1, count + 1):
        name = f"{like}-sim-{i}"
        devices[name] = NodeDevices(name, {**template.labels, naming.LABEL_HOSTNAME: name}, fresh.groups, "")
        if base is not None:
            nodes[name] = replace(
                base,
                name=name,
                labels={**base.labels, naming.LABEL_HOSTNAME: name},
                unschedulable=False,  # a new node, even one shaped like a cordoned one
                allocatable=advertised(base.allocatable, fresh),
                capacity=advertised(base.capacity, fresh),
            )
    node_labels = base.labels if base is not None else template.labels
    queues = dict(state.cluster_queues)
    for name, cq in state.cluster_queues.items():
        grown = []
        for q in cq.quotas:
            f = state.flavors.get(q.flavor)
            extra = Fraction(0)
            if f is not None and all(node_labels.get(k) == v for k, v in f.device_selector.items()):
                if q.resource.startswith(naming.CREDITS_PREFIX):
                    mfr = q.resource[len(naming.CREDITS_PREFIX) :]
                    cards = sum(
                        len(g.cards)
                        for g in template.groups
                        if g.manufacturer == mfr and (not f.accelerator_keys or g.accelerator_key in f.accelerator_keys)
                    )
                    extra = Fraction(count * cards * M)
                elif base is not None and q.resource in base.allocatable:
                    extra = Fraction(count * base.allocatable[q.resource])
            grown.append(replace(q, nominal=q.nominal + extra) if extra else q)
        queues[name] = replace(cq, quotas=tuple(grown))
    return replace(state, devices=devices, nodes=nodes, cluster_queues=queues)


# ----------------------------------------------------------------------------------------------- results


@dataclass(frozen=True, slots=True)
class PlacedNode:
    name: str
    pods: int
    cards: tuple[str, ...]
    allocations: tuple[tuple[int, CardAllocation], ...] = ()
    """(the Pod's place among this node's Pods, a card it is given), as ``Allocate`` would record them."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """One simulated Workload: explain's five gates, and where it lands when admitted."""

    submission: Submission
    explanation: Explanation
    placement: tuple[PlacedNode, ...] = ()
    cluster_queue: str = ""
    reservation: tuple[PodSetAssignment, ...] = ()
    """Each PodSet's flavors and nodes as Kueue would reserve them (empty when quota is not reserved)."""
    preempted: tuple[str, ...] = ()
    """The Workloads (``namespace/name``) Kueue evicts to make room for it."""

    @property
    def admitted(self) -> bool:
        return self.explanation.held_by is None

    def to_dict(self) -> dict[str, Any]:
        out = self.explanation.to_dict() | {"admitted": self.admitted}
        if self.preempted:
            out["preempts"] = list(self.preempted)
        if self.admitted:
            out["placement"] = {
                "nodes": [
                    {
                        "name": n.name,
                        "pods": n.pods,
                        "cards": list(n.cards),
                        "allocations": [
                            {
                                "pod": i,
                                "container": a.container,
                                "card": a.card_id,
                                "group": a.group,
                                "mode": a.mode,
                                "units": a.allocated,
                                **({"profile": a.profile} if a.profile else {}),
                            }
                            for i, a in n.allocations
                        ],
                    }
                    for n in self.placement
                ]
            }
        return out


def _not_reached(after: int) -> list[Gate]:
    why = {
        2: "Kueue queues the Workload once its Pods are accepted",
        3: "the check runs once quota is reserved",
        4: "Pods are scheduled once the Workload is admitted",
        5: "Allocate runs when the kubelet admits a bound Pod",
    }
    return [Gate(g, NOT_REACHED, why[g]) for g in range(after + 1, 6)]


# ----------------------------------------------------------------------------------------------- the simulator


def _resources_key(spec: Mapping[str, Any]) -> tuple[Any, ...] | None:
    """What a Pod's effective requests depend on, as a hashable key (None when a value is not plain text)."""
    key: list[Any] = []
    for section in ("initContainers", "containers"):
        for c in spec.get(section) or []:
            if not isinstance(c, Mapping):
                return None
            res = c.get("resources")
            parts: list[Any] = [section, c.get("restartPolicy")]
            for part in ("limits", "requests"):
                values = res.get(part) if isinstance(res, Mapping) else None
                if values is None:
                    parts.append(None)
                    continue
                if not isinstance(values, Mapping):
                    return None
                parts.append(tuple(sorted((str(k), str(v)) for k, v in values.items())))
            key.append(tuple(parts))
    return tuple(key)


@dataclass(frozen=True, slots=True)
class _PodRequests:
    """One Pod shape's requests: raw (as the scheduler counts them), with a ``pods`` slot (as TAS places a Pod), as
    Kueue's quota counts them (accelerator keys folded into credits), and as TAS charges an admitted Workload's Pod
    to its node (its quota usage and a ``pods`` slot: raw accelerator keys are not among them)."""

    raw: Mapping[str, Fraction]
    slot: Mapping[str, Amount]
    quota: Mapping[str, Amount]
    charge: Mapping[str, Amount]


_REQUESTS_MEMO: dict[tuple[Any, ...], _PodRequests] = {}


def _requests(spec: Mapping[str, Any]) -> _PodRequests:
    """A Pod spec's requests; thousands of Workloads share a few shapes, so each shape is computed once."""
    key = _resources_key(spec)
    got = _REQUESTS_MEMO.get(key) if key is not None else None
    if got is None:
        raw = pod_requests(spec)
        quota = plain(quota_requests(spec))
        got = _PodRequests(raw, with_pod_slot(raw), quota, with_pod_slot(quota))
        if key is not None and len(_REQUESTS_MEMO) < 4096:
            _REQUESTS_MEMO[key] = got
    return got


def _quota_requests(spec: Mapping[str, Any]) -> Mapping[str, Amount]:
    return _requests(spec).quota


class _SpecRequests:
    """Requests per Pod spec object: the records are immutable and kept alive by the state, so their identity is a
    key that costs nothing to compute."""

    def __init__(self) -> None:
        self._by_id: dict[int, tuple[Mapping[str, Any], _PodRequests]] = {}

    def __call__(self, spec: Mapping[str, Any]) -> _PodRequests:
        got = self._by_id.get(id(spec))
        if got is None or got[0] is not spec:
            got = (spec, _requests(spec))
            self._by_id[id(spec)] = got
        return got[1]


@dataclass(frozen=True, slots=True)
class _Unreserved:
    """Why Kueue reserves no quota: its message, which half of gate 2 said no, and the quota lines read."""

    message: str
    part: str
    evidence: list[str]


@dataclass
class _Reserved:
    """A Workload as Kueue reserves it: the flavor and nodes of each PodSet."""

    flavors: dict[str, str] = field(default_factory=dict)
    """PodSet → flavor."""
    hosts: dict[str, tuple[tuple[str, int], ...] | None] = field(default_factory=dict)
    """PodSet → ``(node, pods)`` (None without a topology)."""
    usage: dict[tuple[str, str], Fraction] = field(default_factory=dict)
    """(flavor, resource) → quota taken."""
    charged: dict[str, dict[str, Amount]] = field(default_factory=dict)
    """Node → what the PodSets placed so far charge it, as TAS counts it."""
    evidence: list[str] = field(default_factory=list)


class Simulator:
    """A working copy of the cluster that Workloads are placed on one after another."""

    def __init__(self, state: ClusterState, *, at_quota: Iterable[str] = ()) -> None:
        self.state = state
        missing = sorted(set(at_quota) - set(state.cluster_queues))
        if missing:
            raise ScenarioError(f"--at-quota {missing[0]}: no ClusterQueue of that name")
        self.at_quota = frozenset(at_quota)
        fit = state.check
        self.base_devices = dict(state.devices)
        self.ledgers: dict[str, NodeDevices] = dict(fit.devices)
        """Every node's ledger with the simulated Workloads' Pods allocated (what gates 4 and 5 and TAS see)."""
        self.check_ledgers: dict[str, NodeDevices] = dict(fit.devices)
        """The ledgers the check reads: Allocate has recorded no simulated Pod yet, so the check counts the
        simulated Workloads as admitted and in flight, as it would right after Kueue admits them."""
        self.simulated: set[tuple[str, str]] = set()
        self.workloads: list[Workload] = list(fit.workloads)
        self.by_node: dict[str, Sequence[Workload]] = dict(
            fit.by_node if fit.by_node is not None else workloads_by_node(self.workloads)
        )
        self.pods: list[Pod] = list(fit.pods)
        self.held: dict[tuple[str, str, str, str], int] = dict(fit.held or {})
        self.ledger_kind = fit.ledger
        self.pods_by_node: dict[str, list[Pod]] = {}
        for p in self.pods:
            if p.node_name:
                self.pods_by_node.setdefault(p.node_name, []).append(p)
        self.free: dict[str, Room] = {}
        """Each node's room as Kueue's TAS counts it."""
        self.sched: dict[str, Room] = {}
        """Each node's room as the scheduler and kubelet count it."""
        self.requests = _SpecRequests()
        self.touched: set[str] = set()
        """Nodes whose ledger the simulation changed: their keys and fit labels are recomputed from it."""
        self._init_room()
        self.labels: dict[str, Mapping[str, str]] = {}
        """Labels as TAS reads them, computed when a node is first considered."""
        self.flavor_nodes: dict[str, list[str]] = {}
        self.candidates: dict[tuple[str, str, str], tuple[list[NodeRoom], int, dict[str, int]]] = {}
        """Candidate nodes per (flavor, node selector, affinity), until the working copy changes."""
        self.placements: dict[tuple[Any, ...], TasPlacement | TasFailure] = {}
        """TAS's answer per (candidates, Pods, one Pod's requests, topology), until the working copy changes."""
        """Flavor → the Ready, schedulable nodes carrying its labels (fit labels are not among them)."""
        self.book: QuotaBook = quota_book(state.cluster_queues, self.workloads, lambda spec: self.requests(spec).quota)
        """Each queue's quota and usage as read: its status's report where it has one (what Kueue admits against),
        else its reserved Workloads' sum."""
        self.usage: dict[tuple[str, str, str], Fraction] = dict(self.book.usage)
        """The working copy's usage: the book's, changed by every Workload admitted or removed since."""
        self.fit_context = self._context()

    # -- derived state ----------------------------------------------------------------------------------------

    def _context(self) -> FitContext:
        return FitContext(
            self.state.flavors,
            self.check_ledgers,
            self.state.nodes or None,
            tuple(self.workloads),
            tuple(p for p in self.pods if (p.namespace, p.workload) not in self.simulated),
            self.ledger_kind,
            self.held,
            self.by_node,
        )

    def _labels(self, node: str) -> Mapping[str, str]:
        """A node's labels as TAS reads them. The fit labels are the Node's own, as the operator published them,
        until the simulation changes the node's ledger (or when the Node carries none): then they are computed
        from the ledger, as the operator will publish them."""
        n = self.state.nodes.get(node)
        d = self.ledgers.get(node)
        if (
            n is not None
            and node not in self.touched
            and d is not None
            and any(
                naming.sliced_fit_label(g.accelerator_key) in n.labels
                or naming.shared_fit_label(g.accelerator_key) in n.labels
                for g in d.groups
            )
        ):
            return n.labels
        labels = dict(n.labels) if n is not None else dict(d.labels if d else {})
        if d is None or not d.managed:
            return labels
        for k in [k for k in labels if k.startswith(FIT_PREFIXES)]:
            del labels[k]
        labels.update(node_fit_labels(d))
        return labels

    def _allocatable(self, node: str) -> Mapping[str, Amount]:
        """A node's keys as the device plugin advertises them: the Node's own as read, until the working copy changes
        the node's ledger; then recomputed from that ledger (a card freed of its slices advertises its whole-card
        token healthy again, a card taken in another mode its other tokens unhealthy)."""
        n = self.state.nodes.get(node)
        d = self.ledgers.get(node)
        if n is not None:
            return advertised(n.allocatable, d) if node in self.touched and d is not None else n.allocatable
        room: dict[str, Amount] = dict(node_allocatable(d)) if d else {}
        room["pods"] = 110
        return room

    def _tas_placements(self, w: Workload) -> list[tuple[_PodRequests, str, int]]:
        """(one Pod's requests, node, Pods) for each node a reserved Workload's topology assignment names."""
        if not w.quota_reserved or w.finished:
            return []
        out: list[tuple[_PodRequests, str, int]] = []
        for ps in w.podsets:
            a = w.assignment(ps.name)
            hosts = a.hostnames if a else None
            if hosts:
                per_pod = self.requests(ps.spec)
                out.extend((per_pod, node, pods) for node, pods in hosts)
        return out

    def _init_room(self) -> None:
        """Each node's room two ways: as Kueue's TAS counts it, its allocatable less the bound Pods that carry no
        topology annotation (their raw requests) and the Workloads TAS placed there (what their quota charges:
        credits, not the raw accelerator keys), and as the scheduler counts it, less every Pod's raw requests (a
        placed Workload's Pods whether or not they exist yet)."""
        self.tas_usage: dict[str, dict[str, list[_PodRequests]]] = {}
        self.tas_workloads: set[tuple[str, str]] = set()
        charged: dict[str, dict[str, Amount]] = {}
        asked: dict[str, dict[str, Amount]] = {}
        for w in self.workloads:
            placed = self._tas_placements(w)
            if placed:
                self.tas_workloads.add((w.namespace, w.name))
            for per_pod, node, pods in placed:  # nothing is shared yet: built in place
                self.tas_usage.setdefault(node, {}).setdefault(w.key, []).extend([per_pod] * pods)
                _add(charged.setdefault(node, {}), per_pod.charge, pods)
                _add(asked.setdefault(node, {}), per_pod.slot, pods)
        for node, pods_there in self.pods_by_node.items():
            for p in pods_there:
                self._count_pod(p, charged.setdefault(node, {}), asked.setdefault(node, {}))
        for name in set(self.state.nodes) or set(self.ledgers):
            allocatable = self._allocatable(name)
            self.free[name] = Room(allocatable, charged.get(name, {}))
            self.sched[name] = Room(allocatable, asked.get(name, {}))

    def _add_tas_usage(self, w: Workload) -> None:
        placed = self._tas_placements(w)
        if placed:
            self.tas_workloads.add((w.namespace, w.name))
        for per_pod, node, pods in placed:  # copy-on-write: working copies share these containers
            per = dict(self.tas_usage.get(node, {}))
            per[w.key] = [*per.get(w.key, ()), *([per_pod] * pods)]
            self.tas_usage[node] = per

    def _count_pod(self, p: Pod, charged: dict[str, Amount], asked: dict[str, Amount]) -> None:
        """A bound Pod's raw requests: TAS counts them unless the Pod carries a topology annotation (Kueue's test of
        a TAS Pod); the scheduler, unless its Workload's TAS placement already stands for it."""
        if p.finished or not p.node_name:
            return
        slot = with_pod_slot(p.requests)
        if not p.topology_annotated:
            _add(charged, slot, 1)
        if (p.namespace, p.workload) not in self.tas_workloads:
            _add(asked, slot, 1)

    def _rooms(self, node: str) -> tuple[Room, Room]:
        """A node's room as TAS and as the scheduler count it (see :meth:`_init_room`)."""
        charged: dict[str, Amount] = {}
        asked: dict[str, Amount] = {}
        for requests in self.tas_usage.get(node, {}).values():
            for r in requests:
                _add(charged, r.charge, 1)
                _add(asked, r.slot, 1)
        for p in self.pods_by_node.get(node, ()):
            self._count_pod(p, charged, asked)
        allocatable = self._allocatable(node)
        return Room(allocatable, charged), Room(allocatable, asked)

    # -- working copies ---------------------------------------------------------------------------------------

    def copy(self) -> Simulator:
        """An independent working copy (containers are copied; records are immutable and shared)."""
        other = object.__new__(Simulator)
        other.__dict__.update(self.__dict__)
        other.ledgers = dict(self.ledgers)
        other.check_ledgers = dict(self.check_ledgers)
        other.simulated = set(self.simulated)
        other.workloads = list(self.workloads)
        other.by_node = dict(self.by_node)
        other.pods = list(self.pods)
        other.held = dict(self.held)
        other.pods_by_node = dict(self.pods_by_node)
        other.free = dict(self.free)
        other.sched = dict(self.sched)
        other.labels = dict(self.labels)
        other.touched = set(self.touched)
        other.flavor_nodes = dict(self.flavor_nodes)
        other.candidates = {}
        other.placements = {}
        other.usage = dict(self.usage)
        other.tas_usage = dict(self.tas_usage)
        other.tas_workloads = set(self.tas_workloads)
        other.base_devices = dict(self.base_devices)
        return other

    def finish(self, keys: Iterable[str]) -> None:
        """The ``--without`` scenario: as if these Workloads (``namespace/name``) had finished."""
        gone = set(keys)
        missing = sorted(gone - {w.key for w in self.workloads})
        if missing:
            raise ScenarioError(f"--without {missing[0]}: no such Workload (`gpuctl workloads -A` lists them)")
        self.remove(gone)

    def stop(self, pool: str, policy: str) -> None:
        """The ``--hold`` (``Hold``: admit nothing new) and ``--drain`` (``HoldAndDrain``: also evict what the queue
        admitted, so its Pods free their cards) scenarios."""
        cq = self.state.cluster_queues.get(pool)
        if cq is None:
            known = ", ".join(sorted(self.state.cluster_queues)) or "none"
            raise ScenarioError(f"pool {pool!r} has no ClusterQueue of that name (known: {known})")
        if policy == "HoldAndDrain":
            self.remove(w.key for w in self.workloads if w.cluster_queue == pool and (w.quota_reserved or w.admitted))
        self.state = replace(
            self.state, cluster_queues={**self.state.cluster_queues, pool: replace(cq, stop_policy=policy)}
        )

    def remove(self, keys: Iterable[str]) -> None:
        """As if these Workloads had finished: their quota, their TAS room and their Pods' cards come back."""
        gone = set(keys)
        leaving = [w for w in self.workloads if w.key in gone]
        self.workloads = [w for w in self.workloads if w.key not in gone]
        if not any(w.quota_reserved or w.admitted for w in leaving) and not any(
            f"{p.namespace}/{p.workload}" in gone for p in self.pods if p.workload
        ):
            self.fit_context = self._context()  # pending ones hold nothing: only the line changes
            return
        for w in leaving:
            self._charge_quota(w, sign=-1)
        touched: set[str] = set()
        for node, per in list(self.tas_usage.items()):
            if gone & per.keys():
                self.tas_usage[node] = {k: v for k, v in per.items() if k not in gone}
                touched.add(node)
        self.tas_workloads -= {(w.namespace, w.name) for w in leaving}
        self.simulated -= {(w.namespace, w.name) for w in leaving}
        for w in leaving:
            for node in {n for a in w.assignments for n, _ in (a.hostnames or ())}:
                self.by_node[node] = [x for x in self.by_node.get(node, ()) if x.key not in gone]
        kept = []
        for p in self.pods:
            if f"{p.namespace}/{p.workload}" in gone:
                touched.add(p.node_name)
                self.held.pop((p.namespace, p.workload, p.podset, p.node_name), None)
            else:
                kept.append(p)
        self.pods = kept
        for node in touched - {""}:
            self.pods_by_node[node] = [
                p for p in self.pods_by_node.get(node, ()) if f"{p.namespace}/{p.workload}" not in gone
            ]
            self._refresh(node)
        self.fit_context = self._context()

    def add_nodes(self, count: int, like: str) -> None:
        """The ``--add-nodes N --like NODE`` scenario (see :func:`_grown`)."""
        grown = _grown(self.state, count, like)
        added = [n for n in grown.devices if n not in self.state.devices]
        self.state = grown
        self.book = replace(self.book, queues=grown.cluster_queues)
        self.flavor_nodes = {}
        self.candidates = {}
        self.placements = {}
        for name in added:
            self.base_devices[name] = grown.devices[name]
            self.ledgers[name] = self.check_ledgers[name] = grown.devices[name]
            self.free[name] = self.sched[name] = Room(self._allocatable(name), {})
            self.touched.add(name)
        self.fit_context = self._context()

    def set_mode(
        self, node: str, cards: Sequence[str] | None, mode: str, known: modes.Catalog | None = None
    ) -> list[modes.Switch]:
        """The ``--set-mode NODE[/CARD]=partitioned|whole`` scenario: cards switch mode by their vendor's rule
        (:mod:`gpuctl.core.modes`), free in the new one. Their capability and ledger rows change; the node's keys and
        fit labels are recomputed from the new ledger, and every InstanceType of the node's pool publishes its new
        catalog (offered profiles, logical slices), which the Pod webhook folds partitions by. Returns what switched
        (nothing for cards already in ``mode``)."""
        base, ledger = self.base_devices.get(node), self.ledgers.get(node)
        if base is None or ledger is None:
            raise ScenarioError(
                f"--set-mode {node}: no node of that name has a Devices ledger (`gpuctl views --by-node` lists them)"
            )
        holders: dict[str, list[str]] = {}
        for p in self.pods_by_node.get(node, ()):
            for a in () if p.finished else p.allocations:
                holders.setdefault(a.card_id, []).append(
                    f"Workload {p.namespace}/{p.workload}" if p.workload else f"Pod {p.namespace}/{p.name}"
                )
        try:
            done = modes.switches(
                ledger,
                cards,
                mode,
                known or modes.catalog(self.base_devices.values()),
                holders=holders,
                in_flight=self.starting_on(node),
            )
        except modes.ModeError as exc:
            raise ScenarioError(f"--set-mode {exc}") from None
        if not done:
            return done
        self.base_devices[node] = modes.remode(base, done)
        if self.ledger_kind != "rebuilt":
            self.ledgers[node] = modes.remode(ledger, done)
            self.check_ledgers[node] = modes.remode(self.check_ledgers[node], done)
        self.state = replace(
            self.state,
            devices={**self.state.devices, node: self.base_devices[node]},
            instancetypes={n: modes.republished(it, base.labels, done) for n, it in self.state.instancetypes.items()},
        )
        self._refresh(node)
        self.fit_context = self._context()
        return done

    def starting_on(self, node: str) -> list[str]:
        """Workloads read as admitted (or Ready) on a node whose Pods there Allocate has not all recorded yet (none
        told when the read holds no Pods: the published ledger is all there is)."""
        if self.ledger_kind != "rebuilt":
            return []
        out = []
        for w in self.by_node.get(node, ()):
            if w.finished or (w.namespace, w.name) in self.simulated:
                continue
            check = w.check(naming.NODE_DEVICES_CHECK)
            if not (w.admitted or (check is not None and check.state == READY)):
                continue
            for a in w.assignments:
                for n, count in a.hostnames or ():
                    if n == node and self.held.get((w.namespace, w.name, a.name, node), 0) < count:
                        out.append(w.key)
        return sorted(set(out))

    def cordon(self, nodes: Iterable[str]) -> None:
        """``kubectl cordon``: the nodes take no new Pod, and Kueue's TAS leaves them out of every placement."""
        names = set(nodes)
        cordoned = {n: replace(self.state.nodes[n], unschedulable=True) for n in names if n in self.state.nodes}
        self.state = replace(self.state, nodes={**self.state.nodes, **cordoned})
        for name in names - set(cordoned):  # a ledger without a Node: it leaves the rooms placement reads
            self.free.pop(name, None)
            self.sched.pop(name, None)
        self.flavor_nodes = {}
        self.candidates = {}
        self.placements = {}
        self.fit_context = self._context()

    def pool_node(self, cluster_queue: str) -> str | None:
        """The first node (by name) of a queue's first flavor: the shape ``add-nodes`` copies."""
        cq = self.state.cluster_queues.get(cluster_queue)
        for q in cq.quotas if cq else ():
            flavor = self.state.flavors.get(q.flavor)
            if flavor is None:
                continue
            for name in sorted(self.ledgers):
                if all(self.ledgers[name].labels.get(k) == v for k, v in flavor.device_selector.items()):
                    return name
        return None

    def _refresh(self, node: str) -> None:
        base = self.base_devices.get(node)
        if base is not None and self.ledger_kind == "rebuilt":
            pods = self.pods_by_node.get(node, ())
            self.ledgers[node] = rebuild_ledger(base, pods)
            self.check_ledgers[node] = rebuild_ledger(
                base, [p for p in pods if (p.namespace, p.workload) not in self.simulated]
            )
        self.touched.add(node)
        if node in self.free:
            self.free[node], self.sched[node] = self._rooms(node)
        self.labels.pop(node, None)
        self.candidates.clear()
        self.placements.clear()

    def _charge_quota(self, w: Workload, sign: int = 1) -> None:
        for ps in w.podsets:
            a = w.assignment(ps.name)
            if a is None:
                continue
            per_pod = self.requests(ps.spec).quota
            count = a.count or ps.count
            for resource, value in per_pod.items():
                flavor = a.flavors.get(resource)
                if flavor:
                    key = (w.cluster_queue, flavor, resource)
                    self.usage[key] = self.usage.get(key, Fraction(0)) + sign * value * count

    def _usage(self) -> dict[tuple[str, str, str], Fraction]:
        """The usage quota is judged against: the working copy's, with every ``--at-quota`` queue using all its
        nominal."""
        usage = dict(self.usage)
        for q in self.at_quota:
            for fq in self.state.cluster_queues[q].quotas:
                key = (q, fq.flavor, fq.resource)
                usage[key] = max(usage.get(key, Fraction(0)), fq.nominal)
        return usage

    # -- gates ------------------------------------------------------------------------------------------------

    def _webhook_context(self) -> WebhookContext:
        lq = {k: q.cluster_queue for k, q in self.state.local_queues.items()}
        pins = PinContext(
            lq, {n: q.labels for n, q in self.state.cluster_queues.items()}, dict(self.state.instancetypes)
        )
        stops = {n: q.stop_policy for n, q in self.state.cluster_queues.items()}
        return WebhookContext(instancetypes=tuple(self.state.instancetypes.values()), pins=pins, stop_policies=stops)

    def _gate1(self, sub: Submission) -> tuple[Submission, Workload | None, Gate]:
        """The Pod webhook on the Pod Kueue's integration creates, then the Workload pin: the Workload Kueue sees."""
        ctx = self._webhook_context()
        evidence: list[str] = []
        if sub.instance is not None:
            type_name = str((sub.instance.get("spec") or {}).get("type"))
            it = self.state.instancetypes.get(type_name)
            answer = review(Kind.INSTANCE, "CREATE", sub.instance, None, ctx)
            if not answer.allowed:
                return (
                    sub,
                    None,
                    Gate(1, FAILED, f"the Instance webhook denies it: {answer.message}", (), "fix the Instance's spec"),
                )
            if it is None:
                return (
                    sub,
                    None,
                    Gate(1, FAILED, f"InstanceType {type_name} does not exist", (), "`gpuctl views` lists the pools"),
                )
            pod = instance_pod(answer.mutated or sub.instance, it)
            spec = pod["spec"]
            sub = replace(
                sub,
                queue_name=pod["metadata"]["labels"][naming.LABEL_QUEUE_NAME],
                podsets=(SubmittedPodSet("main", 1, spec),),
                pod=pod,
            )
            evidence.append(f"the Instance's Pod asks {_limits_text(spec)} on entrance {sub.queue_name}")
        if sub.pod is not None:
            answer = review(Kind.POD, "CREATE", sub.pod, None, ctx)
            if not answer.allowed:
                return (
                    sub,
                    None,
                    Gate(
                        1,
                        FAILED,
                        "the Pod webhook denies the Pod",
                        (str(answer.message),),
                        "fix the request in the Pod; `gpuctl webhook dry-run pod -f FILE` shows the webhook's answer",
                    ),
                )
            mutated = answer.mutated or sub.pod
            spec = mutated.get("spec") or {}
            if spec != sub.pod.get("spec"):
                evidence.append("the Pod webhook folded the request (and pinned it where the rules say)")
            sub = replace(sub, podsets=tuple(replace(ps, spec=spec) for ps in sub.podsets))
        else:
            reviewed = []
            for ps in sub.podsets:
                # A template-built PodSet: its Pods reach the Pod webhook only after admission, and only when the
                # template carries the queue label; Kueue's quota and TAS see the template as written.
                pod = template_pod(f"{sub.name}-{ps.name}", sub.namespace, ps)
                answer = review(Kind.POD, "CREATE", pod, None, ctx)
                if not answer.allowed:
                    return (
                        sub,
                        None,
                        Gate(
                            1,
                            FAILED,
                            f"the Pod webhook will deny the Pods of pod set {ps.name}",
                            (str(answer.message),),
                            "fix the request in the Pod template; `gpuctl webhook dry-run pod -f FILE` shows the webhook's answer",
                        ),
                    )
                spec = (answer.mutated or pod).get("spec") or {}
                if naming.LABEL_QUEUE_NAME not in ps.labels:
                    evidence.append(
                        f"the Pods of pod set {ps.name} carry no {naming.LABEL_QUEUE_NAME} label: the Pod webhook "
                        "does not review them, and the allocator sizes them as the template writes them"
                    )
                elif spec != ps.spec:
                    evidence.append(
                        f"the Pod webhook folds the Pods of pod set {ps.name} (the template Kueue reads stays unfolded)"
                    )
                reviewed.append(replace(ps, pod_spec=spec))
            sub = replace(sub, podsets=tuple(reviewed))
        obj = sub.workload_object()
        pinned = review(Kind.WORKLOAD, "CREATE", obj, None, ctx)
        wobj = pinned.mutated if pinned.allowed and pinned.mutated is not None else obj
        if wobj != obj:
            evidence.append("the Workload webhook pinned each PodSet to nodes whose fit label says one card fits")
        w = _workload_record(sub, wobj)
        g = gate1(w)
        return sub, w, replace(g, evidence=tuple(evidence) + g.evidence)

    def labels_of(self, node: str) -> Mapping[str, str]:
        labels = self.labels.get(node)
        if labels is None:
            labels = self.labels[node] = self._labels(node)
        return labels

    def _flavor_nodes(self, flavor: ResourceFlavor) -> list[str]:
        names = self.flavor_nodes.get(flavor.name)
        if names is None:
            names = []
            for name in self.free:
                node = self.state.nodes.get(name)
                if node is not None:
                    if not node.ready or node.unschedulable or naming.LABEL_HOSTNAME not in node.labels:
                        continue
                    labels, wanted = node.labels, flavor.node_labels
                else:
                    d = self.ledgers.get(name)
                    labels, wanted = (d.labels if d else {}), flavor.device_selector
                if all(labels.get(k) == v for k, v in wanted.items()):
                    names.append(name)
            self.flavor_nodes[flavor.name] = names
        return names

    def _nodes_for(self, flavor: ResourceFlavor, spec: Mapping[str, Any]) -> tuple[list[NodeRoom], int, dict[str, int]]:
        """Candidate nodes for a PodSet on a flavor: Ready, schedulable, matching the flavor's labels and the
        PodSet's selectors; with how many matched the flavor and why the others were excluded (kept until the
        working copy changes: a queue of Workloads asking alike is placed against the same candidates)."""
        key = (
            flavor.name,
            json.dumps(spec.get("nodeSelector"), sort_keys=True),
            json.dumps(spec.get("affinity"), sort_keys=True),
        )
        cached = self.candidates.get(key)
        if cached is None:
            cached = self.candidates[key] = self._select_nodes(flavor, spec)
        return cached

    def _select_nodes(
        self, flavor: ResourceFlavor, spec: Mapping[str, Any]
    ) -> tuple[list[NodeRoom], int, dict[str, int]]:
        excluded: dict[str, int] = {}
        out: list[NodeRoom] = []
        by_selector = node_selector({"nodeSelector": spec.get("nodeSelector")}) if spec.get("nodeSelector") else None
        by_affinity = node_selector({"affinity": spec.get("affinity")}) if spec.get("affinity") else None
        names = self._flavor_nodes(flavor)
        selector = spec.get("nodeSelector")
        pinned = selector.get(naming.LABEL_HOSTNAME) if isinstance(selector, Mapping) else None
        candidates = names
        if isinstance(pinned, str):  # a node selected by name: the others fail the selector without reading them
            candidates = [n for n in names if n == pinned]
            excluded["nodeSelector"] = len(names) - len(candidates)
        for name in candidates:
            labels = self.labels_of(name)
            if by_selector is not None and not by_selector(labels):
                excluded["nodeSelector"] = excluded.get("nodeSelector", 0) + 1
                continue
            if by_affinity is not None and not by_affinity(labels):
                excluded["affinity"] = excluded.get("affinity", 0) + 1
                continue
            out.append(NodeRoom(name, labels, self.free[name]))
        return out, len(names), excluded

    def _reserve(self, w: Workload, cq: ClusterQueue, sub: Submission) -> _Reserved | _Unreserved:
        """Kueue's flavor assignment for every PodSet: quota first, then the TAS placement; the first flavor that
        takes the PodSet wins. Returns what it reserved, or why it cannot (and which half of gate 2 said no)."""
        reserved = _Reserved()
        usage = self._usage()
        for ps, sps in zip(w.podsets, sub.podsets, strict=True):
            wanted = {r: v * ps.count for r, v in _quota_requests(ps.spec).items()}
            tried = flavor_quotas(self.book, cq, wanted, usage, reserved.usage)
            if not tried:
                if any(r.startswith(naming.CREDITS_PREFIX) for r in wanted) and cq.quotas:
                    return _Unreserved(
                        f"couldn't assign flavors to pod set {ps.name}: the ClusterQueue covers none of "
                        f"{', '.join(sorted(wanted))}",
                        QUOTA,
                        reserved.evidence,
                    )
                reserved.hosts[ps.name] = None
                reserved.evidence.append(f"pod set {ps.name}: the ClusterQueue covers none of its resources")
                continue
            reasons: list[str] = []
            placement_failed = False
            for fq in tried:
                reserved.evidence.extend(fq.lines)
                if fq.short:
                    reasons.extend(fq.short)
                    continue
                fname = fq.flavor
                flavor = self.state.flavors.get(fname)
                hosts: tuple[tuple[str, int], ...] | None = None
                if flavor is not None and flavor.topology_name:
                    levels = self.state.topologies.get(flavor.topology_name, (naming.LABEL_HOSTNAME,))
                    if not levels or levels[-1] != naming.LABEL_HOSTNAME:
                        reasons.append(
                            f"flavor {fname}: topology {flavor.topology_name} does not end at {naming.LABEL_HOSTNAME}, which this simulator places at"
                        )
                        placement_failed = True
                        continue
                    nodes, total, excluded = self._nodes_for(flavor, ps.spec)
                    slot = _requests(ps.spec).slot
                    shape = (id(nodes), ps.count, tuple(sorted(slot.items())), sps.topology, flavor.topology_name)
                    placed = self.placements.get(shape)
                    if placed is None:  # Workloads asking alike are placed alike until the working copy changes
                        placed = self.placements[shape] = place(
                            ps.count,
                            slot,
                            nodes,
                            sps.topology,
                            topology=flavor.topology_name,
                            total_nodes=total,
                            excluded=excluded,
                        )
                    if isinstance(placed, TasFailure):
                        reasons.append(placed.message)
                        placement_failed = True
                        continue
                    short_charge = self._charges_fit(placed.hosts, _requests(ps.spec).charge, reserved)
                    if short_charge:
                        # TAS placed the Pods by their raw requests; what Kueue charges them (credits, not the raw
                        # keys) does not fit the node beside the Workloads placed there. Kueue's own words:
                        reasons.append(NO_LONGER_FITS)
                        reserved.evidence.append(short_charge)
                        placement_failed = True
                        continue
                    hosts = placed.hosts
                reserved.flavors[ps.name] = fname
                reserved.hosts[ps.name] = hosts
                for resource, value in wanted.items():
                    reserved.usage[(fname, resource)] = reserved.usage.get((fname, resource), Fraction(0)) + value
                if hosts:
                    reserved.evidence.append(
                        f"TAS places pod set {ps.name} on "
                        + ", ".join(f"{n} ({c} pod{'s' if c != 1 else ''})" for n, c in hosts)
                    )
                break
            else:
                return _Unreserved(
                    f"couldn't assign flavors to pod set {ps.name}: " + ", ".join(reasons),
                    TAS_PLACEMENT if placement_failed else QUOTA,
                    reserved.evidence,
                )
        return reserved

    def _charges_fit(
        self, hosts: tuple[tuple[str, int], ...], charge: Mapping[str, Amount], reserved: _Reserved
    ) -> str:
        """Kueue's last check of a TAS placement: each node's room, as TAS counts it, holds what the Pods placed
        there charge (their quota usage with a ``pods`` slot each), besides earlier PodSets of the same Workload.
        A resource the node does not have at all is room for none. "" when it fits, else what does not."""
        for node, pods in hosts:
            room = self.free.get(node) or Room({}, {})
            earlier = reserved.charged.get(node, {})
            for k, v in sorted(charge.items()):
                left = room.get(k, 0) - earlier.get(k, 0)
                if v > 0 and left < v * pods:
                    return (
                        f"TAS places {pods} Pod(s) on {node} by their raw requests, which the Workloads it placed "
                        f"there do not take; it then charges them {amount_text(k, Fraction(v * pods))} of {k}, and "
                        f"{node} has {amount_text(k, Fraction(max(left, 0)))} left of its "
                        f"{amount_text(k, Fraction(room.allocatable.get(k, 0)))}: Kueue sets the Workload aside on "
                        "every try, however much room other nodes have"
                    )
        for node, pods in hosts:
            _add(reserved.charged.setdefault(node, {}), charge, pods)
        return ""

    def _gate2(self, w: Workload) -> tuple[Gate, ClusterQueue | None]:
        lq = self.state.local_queues.get((w.namespace, w.queue_name))
        if lq is None:
            return (
                Gate(
                    2,
                    HELD,
                    f"LocalQueue {w.queue_name!r} does not exist in namespace {w.namespace}",
                    (),
                    "submit to the entrance of an InstanceType (its status.entrance)",
                ),
                None,
            )
        evidence = [f"LocalQueue {lq.namespace}/{lq.name} → ClusterQueue {lq.cluster_queue}"]
        cq = self.state.cluster_queues.get(lq.cluster_queue)
        if cq is None:
            return Gate(2, HELD, f"ClusterQueue {lq.cluster_queue} does not exist", tuple(evidence)), None
        if cq.stop_policy not in ("", "None"):
            return (
                Gate(
                    2,
                    HELD,
                    f"ClusterQueue {cq.name} is stopped ({cq.stop_policy}): it admits nothing",
                    tuple(evidence),
                    f"`gpuctl resume {cq.name}` puts the pool back in service",
                ),
                cq,
            )
        check = self.state.admission_check
        if naming.NODE_DEVICES_CHECK in cq.admission_checks and (check is None or not check.active):
            return (
                Gate(
                    2,
                    HELD,
                    f"ClusterQueue {cq.name} is inactive: AdmissionCheck {naming.NODE_DEVICES_CHECK} is "
                    + ("missing" if check is None else "not Active"),
                    tuple(evidence),
                    "the operator creates the check and keeps it Active; see `gpuctl doctor`",
                ),
                cq,
            )
        return Gate(2, PASSED, "", tuple(evidence)), cq

    # -- one Workload -----------------------------------------------------------------------------------------

    def simulate(self, sub: Submission, *, commit: bool = True, preempt: bool = True) -> Outcome:
        """Run one submission through the gates; when admitted (and ``commit``), place it for the next one.

        Where its quota does not fit and its ClusterQueue's policy lets it evict lower-priority Workloads, Kueue's
        preemption is followed: the victims leave the working copy (when ``commit``) and the rest of the gates run
        without them."""
        original = sub
        sub, w, g1 = self._gate1(sub)

        def outcome(gates: Sequence[Gate], **extra: Any) -> Outcome:
            return Outcome(
                sub, Explanation(sub.namespace, sub.name, (*gates, *_not_reached(len(gates))), sub.kind), **extra
            )

        if w is None or g1.verdict == FAILED:
            return outcome([g1])
        g2, cq = self._gate2(w)
        if cq is None or g2.verdict != PASSED:
            return outcome([g1, g2])
        blocked = self._behind_strict_head(w, cq, sub)
        if blocked is not None:
            return outcome([g1, replace(blocked, evidence=g2.evidence + blocked.evidence)], cluster_queue=cq.name)
        got = self._reserve(w, cq, sub)
        books = tuple(self.book.differences(cq.name))
        if isinstance(got, _Unreserved) and got.part == QUOTA and preempt:
            victims = self._victims(w, cq, sub)
            if victims:
                target = self if commit else self.copy()
                target.remove(v.key for v in victims)
                after = target.simulate(original, commit=commit, preempt=False)
                lines = tuple(
                    f"Kueue preempts {v.key} (priority {v.priority}, policy {cq.preemption_within}): it is evicted "
                    "(reason Preempted) and queued again"
                    for v in victims
                )
                gates = tuple(
                    replace(g, evidence=(*lines, *g.evidence)) if g.gate == 2 else g for g in after.explanation.gates
                )
                return replace(
                    after,
                    explanation=replace(after.explanation, gates=gates),
                    preempted=tuple(v.key for v in victims),
                )
        if isinstance(got, _Unreserved):
            g2 = Gate(
                2,
                HELD,
                got.message,
                g2.evidence + tuple(_dedupe(got.evidence)) + books,
                (
                    "wait for admitted Workloads of this pool to finish, or grow the pool; `--suggest` tries both"
                    if got.part == QUOTA
                    else "no node of the flavor has room for the Pods as TAS counts it (capacity keys, fit labels, "
                    "selectors); `--suggest` tries what would make room"
                ),
                part=got.part,
            )
            return outcome([g1, g2], cluster_queue=cq.name)
        g2 = Gate(2, PASSED, f"quota reserved in ClusterQueue {cq.name}", g2.evidence + tuple(got.evidence) + books)
        reserved = _reserved_record(w, cq, got)
        kept = {"cluster_queue": cq.name, "reservation": reserved.assignments}
        g3, verdict_ok = self._gate3(reserved, cq)
        if not verdict_ok:
            return outcome([g1, g2, g3], **kept)
        # Past the check, Kueue admits it: its quota, its TAS placement and the check's count of it in flight stand
        # whether or not its Pods are then scheduled and allocated.
        specs = {ps.name: ps.pods_spec for ps in sub.podsets}
        hosts = self._schedule(reserved, got, specs)
        g4 = self._gate4(reserved, hosts, specs)
        if g4.verdict != PASSED:
            if commit:
                self._commit(reserved, [])  # its Pods stay Pending on their node
            return outcome([g1, g2, g3, g4], **kept)
        g5, pods = self._gate5(reserved, got, hosts, specs)
        if g5.verdict not in CLEARED:
            if commit:
                self._commit(reserved, [])  # Allocate refuses its Pods: they fail and hold no card
            return outcome([g1, g2, g3, g4, g5], **kept)
        if commit:
            self._commit(reserved, pods)
        return outcome([g1, g2, g3, g4, g5], placement=_placement(pods), **kept)

    def _behind_strict_head(self, w: Workload, cq: ClusterQueue, sub: Submission) -> Gate | None:
        """Under ``StrictFIFO`` Kueue tries only the head of a ClusterQueue's line: a Workload behind a head that
        cannot be admitted waits, whatever room there is. The gate that says so, or None when nothing holds it so."""
        if cq.queueing_strategy != STRICT_FIFO:
            return None
        queue_of = {k: q.cluster_queue for k, q in self.state.local_queues.items()}
        line = [
            x
            for x in self.workloads
            if pending(x) and x.key != w.key and queue_of.get((x.namespace, x.queue_name)) == cq.name
        ]
        if not line:
            return None
        head = min(line, key=order_key)
        ahead = head.priority > w.priority or (
            head.priority == w.priority and (not sub.created or order_key(head) < order_key(w))
        )
        if not ahead:
            return None
        tried = self.copy()
        tried.remove([head.key])
        seen = tried.simulate(resubmission(head), commit=False)
        if seen.admitted:
            return None  # the head goes first and is admitted: the line moves
        g = seen.explanation.gates[(seen.explanation.held_by or 2) - 1]
        return Gate(
            2,
            HELD,
            f"ClusterQueue {cq.name} is StrictFIFO and its head {head.key} (priority {head.priority}) cannot be "
            "admitted: nothing behind it is tried",
            (f"the head is held at gate {g.gate} ({g.name}): {g.summary}",),
            f"the line moves once {head.key} is admitted or leaves the queue",
            part=STRICT_ORDER,
        )

    def _victims(self, w: Workload, cq: ClusterQueue, sub: Submission) -> list[Workload] | None:
        """The Workloads Kueue would preempt for ``w`` within its ClusterQueue (:mod:`gpuctl.core.preemption`), or
        None when its policy allows none, its request is over the queue's nominal quota, or no set makes it fit."""
        holding = [x for x in self.workloads if x.cluster_queue == cq.name and x.quota_reserved and not x.finished]
        ordered = preemption.candidates(w, holding, cq.preemption_within)
        if not ordered:
            return None
        nominal: dict[str, Fraction] = {}
        for q in cq.quotas:
            nominal[q.resource] = nominal.get(q.resource, Fraction(0)) + q.nominal
        wanted: dict[str, Fraction] = {}
        for ps in w.podsets:
            for r, v in _quota_requests(ps.spec).items():
                wanted[r] = wanted.get(r, Fraction(0)) + v * ps.count
        if any(v > nominal.get(r, Fraction(0)) for r, v in wanted.items() if r in nominal):
            return None  # Kueue preempts within a queue only for quota its nominal could hold

        def fits(removed: Sequence[Workload]) -> bool:
            trial = self.copy()
            trial.remove(x.key for x in removed)
            return not isinstance(trial._reserve(w, cq, sub), _Unreserved)

        return preemption.targets(ordered, fits)

    def _gate3(self, w: Workload, cq: ClusterQueue) -> tuple[Gate, bool]:
        if naming.NODE_DEVICES_CHECK not in cq.admission_checks:
            return Gate(
                3, NOT_APPLICABLE, f"ClusterQueue {cq.name} does not reference the {naming.NODE_DEVICES_CHECK} check"
            ), True
        if not any(a.credit_flavors for a in w.assignments):
            return Gate(3, NOT_APPLICABLE, "the Workload gets no accelerator flavor, so it carries no check"), True
        verdict = judge_workload(w, self.fit_context)
        evidence = [f"check: {verdict.state}: {verdict.message}"]
        if verdict.inflight:
            others = sorted({c.workload for c in verdict.inflight})
            evidence.append(
                f"{len(verdict.inflight)} card charge(s) promised to {', '.join(others)} (admitted, Pods not allocated yet)"
            )
        if verdict.state == READY:
            return Gate(
                3,
                PASSED,
                "every assigned node holds the demand card by card",
                tuple(evidence),
                "",
                (verdict.state, verdict.message),
            ), True
        return (
            Gate(
                3,
                HELD,
                verdict.message,
                tuple(evidence),
                (
                    "room is promised to a Workload still starting: this passes once its Pods are allocated"
                    if verdict.inflight
                    else "the check answers Retry every 30 s until the cards free up; `--suggest` finds what would free them"
                ),
                (verdict.state, verdict.message),
            ),
            False,
        )

    def _schedule(
        self, w: Workload, got: _Reserved, specs: Mapping[str, Mapping[str, Any]]
    ) -> dict[str, tuple[tuple[str, int], ...]]:
        """The nodes each PodSet's Pods are bound to: TAS's assignment, or (without one) the first nodes by name
        whose keys hold a Pod — the scheduler's scoring is not modelled."""
        out: dict[str, tuple[tuple[str, int], ...]] = {}
        for ps in w.podsets:
            hosts = got.hosts.get(ps.name)
            if hosts:
                out[ps.name] = hosts
                continue
            fname = got.flavors.get(ps.name)
            flavor = self.state.flavors.get(fname) if fname else None
            per_pod = _requests(specs.get(ps.name, ps.spec)).slot
            if flavor is not None:
                names = [r.name for r in self._nodes_for(flavor, ps.spec)[0]]
            else:
                selects = node_selector(ps.spec)
                names = [n for n in self.sched if selects(self.labels_of(n))]
            rooms = [NodeRoom(n, self.labels_of(n), self.sched[n]) for n in names]
            placed: list[tuple[str, int]] = []
            left = ps.count
            for room in sorted(rooms, key=lambda r: r.name):
                take = min(left, room.pods_that_fit(per_pod))
                if take > 0:
                    placed.append((room.name, take))
                    left -= take
                if left == 0:
                    break
            out[ps.name] = tuple(placed) if left == 0 else ()
        return out

    def _gate4(
        self, w: Workload, hosts: Mapping[str, tuple[tuple[str, int], ...]], specs: Mapping[str, Mapping[str, Any]]
    ) -> Gate:
        """Each Pod, as the Pod webhook left it, against the keys its node has left."""
        evidence: list[str] = []
        short: list[str] = []
        used: dict[str, dict[str, Amount]] = {}
        for ps in w.podsets:
            per_pod = _requests(specs.get(ps.name, ps.spec)).slot
            if not hosts.get(ps.name):
                short.append(f"pod set {ps.name}: no node's keys hold its {ps.count} Pod(s)")
                continue
            for node, pods in hosts[ps.name]:
                free = self.sched.get(node) or Room({}, {})
                taken = used.setdefault(node, {})
                for k, v in sorted(per_pod.items()):
                    need = v * pods + taken.get(k, 0)
                    have = free.get(k, 0)
                    if (naming.classify_resource(k) is not None or k in ("cpu", "memory", "pods")) and need > have:
                        short.append(
                            f"{node}: {k}: requests {amount_text(k, Fraction(need))}, {amount_text(k, Fraction(max(have, 0)))} free"
                        )
                    taken[k] = need
                evidence.append(f"{node}: {pods} Pod(s) of {ps.name} fit its keys")
        if short:
            return Gate(
                4,
                HELD,
                "a Pod does not fit its node's capacity keys: it stays Pending on the node TAS assigned",
                tuple(evidence + short),
                "on a TAS queue the Pod is pinned to its assigned node: it waits until that node's keys free up",
            )
        return Gate(4, PASSED, "every Pod fits its node's capacity keys", tuple(evidence))

    def _gate5(
        self,
        w: Workload,
        got: _Reserved,
        hosts: Mapping[str, tuple[tuple[str, int], ...]],
        specs: Mapping[str, Mapping[str, Any]],
    ) -> tuple[Gate, list[Pod]]:
        """Allocate, card by card, for each Pod as the Pod webhook left it (a template-built Workload's Pods carry the
        folded units its template lacks; a slice no webhook folded is sized by the memory it asks)."""
        pods: list[Pod] = []
        evidence: list[str] = []
        working: dict[str, dict[tuple[str, str], list[Card]]] = {}
        asked_any = False
        for ps in w.podsets:
            fname = got.flavors.get(ps.name)
            flavor = self.state.flavors.get(fname) if fname else None
            spec = specs.get(ps.name, ps.spec)
            containers = _accelerator_container(spec)
            requests = pod_requests(spec)
            demands = podset_demands(PodSet(ps.name, 1, spec))
            asked_any = asked_any or bool(demands)
            for node, count in hosts.get(ps.name, ()):
                ledger = self.ledgers.get(node)
                for i in range(count):
                    allocations: list[CardAllocation] = []
                    for d in demands:
                        if ledger is None:
                            return (
                                Gate(
                                    5,
                                    FAILED,
                                    f"{node} has no Devices ledger: Allocate has no card to give",
                                    tuple(evidence),
                                ),
                                [],
                            )
                        groups = [
                            g
                            for g in ledger.groups
                            if g.manufacturer == d.manufacturer
                            and (
                                flavor is None
                                or not flavor.accelerator_keys
                                or g.accelerator_key in flavor.accelerator_keys
                            )
                        ]
                        node_cards = working.setdefault(node, {})
                        for g in groups:
                            node_cards.setdefault((g.manufacturer, g.id), list(g.cards))
                        asked = d.shares if d.family is Family.SHARED and d.shares else (d.cards,)
                        for n in asked * (d.pods if d.family in (Family.SLICED, Family.PARTITIONED) else 1):
                            result: tuple[list[Grant], list[Card]] | Refusal = Refusal("-", "no card of the flavor")
                            for g in groups:
                                units = d.units
                                if d.family is Family.SLICED and not units:
                                    units = slice_units_on_card(spec, d.manufacturer, g.memory_mib)
                                result = allocate(
                                    node_cards[(g.manufacturer, g.id)],
                                    d.family,
                                    count=n,
                                    units=units,
                                    profile=d.profile,
                                )
                                if not isinstance(result, Refusal):
                                    grants, after = result
                                    node_cards[(g.manufacturer, g.id)] = after
                                    for grant in grants:
                                        card = next(c for c in g.cards if c.id == grant.card_id)
                                        profile = card.profile(grant.profile) if grant.profile else None
                                        allocations.append(
                                            CardAllocation(
                                                containers.get(d.family, "main"),
                                                g.manufacturer,
                                                g.id,
                                                grant.card_id,
                                                int(FAMILY_MODE[grant.family]),
                                                grant.units,
                                                profile.name if profile else "",
                                            )
                                        )
                                    break
                            if isinstance(result, Refusal):
                                return (
                                    Gate(
                                        5,
                                        FAILED,
                                        f"Allocate refuses a Pod of {ps.name} on {node}: it fails with UnexpectedAdmissionError",
                                        (*tuple(evidence), result.message),
                                        "the gates before let it through because the check does not guard this queue or the kubelet ignored the hint; the owner recreates the Pod",
                                    ),
                                    [],
                                )
                    pod = Pod(
                        namespace=w.namespace,
                        name=f"{w.name}-{ps.name}-{len(pods)}",
                        node_name=node,
                        phase="Running",
                        labels={naming.LABEL_PODSET: ps.name},
                        workload=w.name,
                        podset=ps.name,
                        accelerator_containers=tuple(dict.fromkeys(a.container for a in allocations)),
                        allocations=tuple(allocations),
                        requests=requests,
                        topology_annotated=bool(got.hosts.get(ps.name)),
                    )
                    pods.append(pod)
                    if allocations:
                        evidence.append(
                            f"pod {i + 1} of {ps.name} on {node}: " + ", ".join(a.card_id for a in allocations)
                        )
        if not asked_any:
            return Gate(5, NOT_APPLICABLE, "no container asks for an accelerator: Allocate has nothing to settle"), pods
        return Gate(5, PASSED, "Allocate grants every accelerator container its cards", tuple(evidence)), pods

    # -- commit -----------------------------------------------------------------------------------------------

    def _commit(self, w: Workload, pods: list[Pod]) -> None:
        admitted = replace(w, conditions={**w.conditions, "Admitted": Condition("Admitted", "True", "Admitted")})
        self.workloads.append(admitted)
        self.simulated.add((admitted.namespace, admitted.name))
        self._charge_quota(admitted)
        self._add_tas_usage(admitted)
        touched: set[str] = {n for a in admitted.assignments for n, _ in (a.hostnames or [])}
        for node in touched:
            self.by_node[node] = [*self.by_node.get(node, ()), admitted]
        for p in pods:
            self.pods.append(p)
            self.pods_by_node[p.node_name] = [*self.pods_by_node.get(p.node_name, ()), p]
            touched.add(p.node_name)
        for node in touched:
            if self.ledger_kind != "rebuilt" and node in self.ledgers:
                self.ledgers[node] = _charged(self.ledgers[node], [p for p in pods if p.node_name == node])
            self._refresh(node)
        self.fit_context = self._context()


NO_LONGER_FITS = "Workload no longer fits after processing another workload"
"""Kueue's pending message when a TAS placement's charge does not fit its node."""


def _add(into: dict[str, Amount], amounts: Mapping[str, Amount], times: int) -> None:
    for k, v in amounts.items():
        into[k] = into.get(k, 0) + v * times


def _charged(ledger: NodeDevices, pods: Sequence[Pod]) -> NodeDevices:
    """A published ledger (no Pods read) with these Pods' allocations added on top."""
    extra = [a for p in pods for a in p.allocations]
    groups = []
    for g in ledger.groups:
        cards = []
        for c in g.cards:
            mine = [a for a in extra if a.group == g.id and a.manufacturer == g.manufacturer and a.card_id == c.id]
            if not mine:
                cards.append(c)
                continue
            allocated = min(M, c.allocated + sum(a.allocated for a in mine))
            profiles = dict(c.allocated_profiles)
            remaining_profiles = dict(c.remaining_profiles)
            for a in mine:
                if a.profile:
                    profiles[a.profile] = profiles.get(a.profile, 0) + 1
                    remaining_profiles[a.profile] = max(0, remaining_profiles.get(a.profile, 0) - 1)
            cards.append(
                c._replace(
                    mode=type(c.mode)(mine[0].mode),
                    allocated=allocated,
                    remaining=M - allocated,
                    allocated_slices=c.allocated_slices + sum(1 for a in mine if a.mode == 3),
                    allocated_profiles=profiles,
                    remaining_profiles=remaining_profiles,
                )
            )
        groups.append(replace(g, cards=tuple(cards)))
    return replace(ledger, groups=tuple(groups))


def _dedupe(lines: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(lines))


def _limits_text(spec: Mapping[str, Any]) -> str:
    containers = spec.get("containers") or []
    limits = ((containers[0] or {}).get("resources") or {}).get("limits") if containers else None
    return ", ".join(f"{k}={v}" for k, v in sorted((limits or {}).items())) or "nothing"


def _accelerator_container(spec: Mapping[str, Any]) -> dict[Family, str]:
    """The first container asking for each family (its allocation record names it)."""
    out: dict[Family, str] = {}
    for section in ("initContainers", "containers"):
        for c in spec.get(section) or []:
            if not isinstance(c, Mapping):
                continue
            res = c.get("resources")
            for part in ("limits", "requests"):
                values = res.get(part) if isinstance(res, Mapping) else None
                for k in values if isinstance(values, Mapping) else {}:
                    key = naming.classify_resource(str(k))
                    if key is not None and key.family is not None:
                        out.setdefault(key.family, str(c.get("name", "main")))
    return out


def _workload_record(sub: Submission, obj: JSON) -> Workload:
    w = parse_workload(obj)
    return replace(w, labels=dict(sub.labels))


def _reserved_record(w: Workload, cq: ClusterQueue, got: _Reserved) -> Workload:
    """The Workload as Kueue writes it at reservation: QuotaReserved, each PodSet's flavor and nodes."""
    assignments = []
    for ps in w.podsets:
        fname = got.flavors.get(ps.name)
        flavors = {}
        if fname:
            flavors = {r: fname for r in _quota_requests(ps.spec)}
        hosts = got.hosts.get(ps.name)
        assignments.append(
            PodSetAssignment(
                ps.name,
                flavors,
                ps.count,
                (naming.LABEL_HOSTNAME,) if hosts else (),
                tuple(TopologyDomain((n,), c) for n, c in hosts) if hosts else (),
            )
        )
    return replace(
        w,
        cluster_queue=cq.name,
        conditions={**w.conditions, "QuotaReserved": Condition("QuotaReserved", "True", "QuotaReserved")},
        assignments=tuple(assignments),
    )


def _placement(pods: Sequence[Pod]) -> tuple[PlacedNode, ...]:
    by_node: dict[str, list[Pod]] = {}
    for p in pods:
        by_node.setdefault(p.node_name, []).append(p)
    return tuple(
        PlacedNode(
            n,
            len(ps),
            tuple(dict.fromkeys(a.card_id for p in ps for a in p.allocations)),
            tuple((i, a) for i, p in enumerate(ps) for a in p.allocations),
        )
        for n, ps in sorted(by_node.items())
    )
