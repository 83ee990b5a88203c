"""The working copy the gates run on: the ledgers (two ways: with the simulated Pods allocated, and as the check
reads them before Allocate records them), each node's room two ways (as Kueue's TAS counts it and as the scheduler
does), the quota used per queue, flavor and resource, and the scenarios that change it (``finish``, ``stop``,
``add_nodes``, ``set_mode``, ``cordon``). Copies are cheap: records are immutable and shared, only the containers are
copied.

A node's keys and fit labels are its Node's own as read until the working copy changes its ledger; from then on
they are computed from that ledger, as the device plugin and the operator would publish them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from fractions import Fraction
from typing import Any, TypeVar

from gpuctl.core import modes, naming
from gpuctl.core.capacity import advertised, node_allocatable
from gpuctl.core.fit import (
    READY,
    FitContext,
    workloads_by_node,
)
from gpuctl.core.ledger import NodeDevices
from gpuctl.core.pins import FIT_PREFIXES, node_fit_labels
from gpuctl.core.pods import Pod
from gpuctl.core.quota import QuotaBook, quota_book
from gpuctl.core.rebuilt import rebuild_ledger
from gpuctl.core.simulate.requests import PodRequests, RequestsBySpec, add_times
from gpuctl.core.simulate.state import ClusterState, ScenarioError, with_added_nodes
from gpuctl.core.tas import Amount, NodeRoom, Room, TasFailure, TasPlacement, node_selector, with_pod_slot
from gpuctl.core.units import M
from gpuctl.core.workloads import (
    Condition,
    ResourceFlavor,
    Workload,
)

W = TypeVar("W", bound="WorkingCopy")


class WorkingCopy:
    """A working copy of the cluster: the ledgers, each node's room two ways (as TAS and as the scheduler count
    it), the quota used per queue, flavor and resource, and the Workloads and Pods placed so far."""

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
        self.requests = RequestsBySpec()
        self.tas_raw = state.kueue.tas_charges_raw_requests
        """TAS charges an admitted Workload's raw requests (Kueue 0.18+), not its quota usage (0.17)."""
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
        self.book: QuotaBook = quota_book(state.cluster_queues, self.workloads, lambda ps: self.requests(ps.spec).quota)
        """Each queue's quota and usage as read: its status's report where it has one (what Kueue admits against),
        else its reserved Workloads' sum."""
        self.usage: dict[tuple[str, str, str], Fraction] = dict(self.book.usage)
        """The working copy's usage: the book's, changed by every Workload admitted or removed since."""
        self.fit_context = self._context()

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

    def _tas_placements(self, w: Workload) -> list[tuple[PodRequests, str, int]]:
        """(one Pod's requests, node, Pods) for each node a reserved Workload's topology assignment names."""
        if not w.quota_reserved or w.finished:
            return []
        out: list[tuple[PodRequests, str, int]] = []
        for ps in w.podsets:
            a = w.assignment(ps.name)
            hosts = a.hostnames if a else None
            if hosts:
                per_pod = self.requests(ps.spec)
                out.extend((per_pod, node, pods) for node, pods in hosts)
        return out

    def _charge(self, per_pod: PodRequests) -> Mapping[str, Amount]:
        """What TAS charges a node for one Pod of an admitted Workload: its raw requests and a ``pods`` slot on Kueue
        0.18 and later (whatever flavor placed it); its quota usage (credits, not the raw accelerator keys) on 0.17."""
        return per_pod.slot if self.tas_raw else per_pod.charge

    def _init_room(self) -> None:
        """Each node's room two ways: as Kueue's TAS counts it, its allocatable less the bound Pods that carry no
        topology annotation (their raw requests) and the Workloads TAS placed there (:meth:`_charge`), and as the
        scheduler counts it, less every Pod's raw requests (a placed Workload's Pods whether or not they exist
        yet)."""
        self.tas_usage: dict[str, dict[str, list[PodRequests]]] = {}
        self.tas_workloads: set[tuple[str, str]] = set()
        charged: dict[str, dict[str, Amount]] = {}
        asked: dict[str, dict[str, Amount]] = {}
        for w in self.workloads:
            placed = self._tas_placements(w)
            if placed:
                self.tas_workloads.add((w.namespace, w.name))
            for per_pod, node, pods in placed:  # nothing is shared yet: built in place
                self.tas_usage.setdefault(node, {}).setdefault(w.key, []).extend([per_pod] * pods)
                add_times(charged.setdefault(node, {}), self._charge(per_pod), pods)
                add_times(asked.setdefault(node, {}), per_pod.slot, pods)
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
            add_times(charged, slot, 1)
        if (p.namespace, p.workload) not in self.tas_workloads:
            add_times(asked, slot, 1)

    def _rooms(self, node: str) -> tuple[Room, Room]:
        """A node's room as TAS and as the scheduler count it (see :meth:`_init_room`)."""
        charged: dict[str, Amount] = {}
        asked: dict[str, Amount] = {}
        for requests in self.tas_usage.get(node, {}).values():
            for r in requests:
                add_times(charged, self._charge(r), 1)
                add_times(asked, r.slot, 1)
        for p in self.pods_by_node.get(node, ()):
            self._count_pod(p, charged, asked)
        allocatable = self._allocatable(node)
        return Room(allocatable, charged), Room(allocatable, asked)

    def copy(self: W) -> W:
        """An independent working copy (containers are copied; records are immutable and shared)."""
        other = object.__new__(type(self))
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
        """The ``--add-nodes N --like NODE`` scenario (see :func:`with_added_nodes`)."""
        grown = with_added_nodes(self.state, count, like)
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
