"""Gate 2 on the working copy, as Kueue runs it: the Workload's LocalQueue and ClusterQueue, then its flavor
assignment — for each flavor in the queue's order, the quota (with cohort borrowing) and then the TAS placement and
its charge — and, where the quota does not fit and the queue's policy allows it, preemption within the ClusterQueue.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction

from gpuctl.core import naming, preemption
from gpuctl.core.explain import (
    HELD,
    PASSED,
    Gate,
)
from gpuctl.core.pending import QUOTA, TAS_PLACEMENT
from gpuctl.core.queueing import missing_local_queue_hint
from gpuctl.core.quota import amount_text, flavor_quotas
from gpuctl.core.simulate.requests import add_times, quota_of, requests_of
from gpuctl.core.simulate.working_copy import WorkingCopy
from gpuctl.core.submissions import Submission
from gpuctl.core.tas import Amount, Room, TasFailure, place
from gpuctl.core.workloads import (
    ClusterQueue,
    Condition,
    PodSetAssignment,
    TopologyDomain,
    Workload,
)


@dataclass(frozen=True, slots=True)
class Unreserved:
    """Why Kueue reserves no quota: its message, which half of gate 2 said no, and the quota lines read."""

    message: str
    part: str
    evidence: list[str]


@dataclass
class Reserved:
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


NO_LONGER_FITS = "Workload no longer fits after processing another workload"
"""Kueue's pending message when a TAS placement's charge does not fit its node."""


class Reservation(WorkingCopy):
    """Gate 2 on the working copy: the Workload's queues, Kueue's flavor assignment (quota, then the TAS
    placement) and its preemption within the ClusterQueue."""

    def _gate2(self, w: Workload) -> tuple[Gate, ClusterQueue | None]:
        lq = self.state.local_queues.get((w.namespace, w.queue_name))
        if lq is None:
            return (
                Gate(
                    2,
                    HELD,
                    f"LocalQueue {w.queue_name!r} does not exist in namespace {w.namespace}",
                    (),
                    missing_local_queue_hint(w.queue_name, w.namespace, self.state.instancetypes),
                ),
                None,
            )
        evidence = [f"LocalQueue {lq.namespace}/{lq.name} → ClusterQueue {lq.cluster_queue}"]
        cq = self.state.cluster_queues.get(lq.cluster_queue)
        if cq is None:
            return Gate(2, HELD, f"ClusterQueue {lq.cluster_queue} does not exist", tuple(evidence)), None
        if cq.quota_note:
            evidence.append(cq.quota_note)
        if lq.stop_policy not in ("", "None"):
            return (
                Gate(
                    2,
                    HELD,
                    f"LocalQueue {lq.namespace}/{lq.name} is stopped ({lq.stop_policy}): it admits nothing",
                    tuple(evidence),
                    f"kubectl -n {lq.namespace} patch localqueues.kueue.x-k8s.io {lq.name} --type merge "
                    '-p \'{"spec":{"stopPolicy":"None"}}\' puts it back in service',
                ),
                cq,
            )
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

    def _reserve(self, w: Workload, cq: ClusterQueue, sub: Submission) -> Reserved | Unreserved:
        """Kueue's flavor assignment for every PodSet: quota first, then the TAS placement; the first flavor that
        takes the PodSet wins. Returns what it reserved, or why it cannot (and which half of gate 2 said no)."""
        reserved = Reserved()
        usage = self._usage()
        for ps, sps in zip(w.podsets, sub.podsets, strict=True):
            wanted = {r: v * ps.count for r, v in quota_of(ps.spec).items()}
            tried = flavor_quotas(self.book, cq, wanted, usage, reserved.usage)
            if not tried:
                if any(r.startswith(naming.CREDITS_PREFIX) for r in wanted) and cq.quotas:
                    return Unreserved(
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
                    slot = requests_of(ps.spec).slot
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
                    short_charge = self._charges_fit(placed.hosts, self._charge(requests_of(ps.spec)), reserved)
                    if short_charge:
                        # TAS placed the Pods by their raw requests; what Kueue 0.17 charges them (credits, not the
                        # raw keys) does not fit the node beside the Workloads placed there. Kueue's own words:
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
                return Unreserved(
                    f"couldn't assign flavors to pod set {ps.name}: " + ", ".join(reasons),
                    TAS_PLACEMENT if placement_failed else QUOTA,
                    reserved.evidence,
                )
        return reserved

    def _charges_fit(self, hosts: tuple[tuple[str, int], ...], charge: Mapping[str, Amount], reserved: Reserved) -> str:
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
            add_times(reserved.charged.setdefault(node, {}), charge, pods)
        return ""

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
            for r, v in quota_of(ps.spec).items():
                wanted[r] = wanted.get(r, Fraction(0)) + v * ps.count
        if any(v > nominal.get(r, Fraction(0)) for r, v in wanted.items() if r in nominal):
            return None  # Kueue preempts within a queue only for quota its nominal could hold

        def fits(removed: Sequence[Workload]) -> bool:
            trial = self.copy()
            trial.remove(x.key for x in removed)
            return not isinstance(trial._reserve(w, cq, sub), Unreserved)

        return preemption.targets(ordered, fits)


def reserved_record(w: Workload, cq: ClusterQueue, got: Reserved) -> Workload:
    """The Workload as Kueue writes it at reservation: QuotaReserved, each PodSet's flavor and nodes."""
    assignments = []
    for ps in w.podsets:
        fname = got.flavors.get(ps.name)
        flavors = {}
        if fname:
            flavors = {r: fname for r in quota_of(ps.spec)}
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
