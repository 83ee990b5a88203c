"""Maintenance plans, each step proven by simulation on the working copy (:mod:`gpuctl.core.simulate`).

- **Partitions** (:func:`plan_partitions`): which cards of a pool to switch mode so its pending demand is admitted —
  the fewest switches that admit the most of it. Cards switch by their vendor's rule (:mod:`gpuctl.core.modes`);
  idle cards first, then cards whose holders would have to finish (named, from the Pods' allocation records). The
  number of cards is estimated from the held demand (partition instances packed by the model's geometry), the layout
  simulated with the demand placed in order, grown while it admits more, then shrunk to the fewest switches that
  still admit as much. Every step is then simulated cumulatively: the demand it claims admitted is admitted. A
  layout that admitted nothing more is reported apart, never as a step.
- **Drain** (:func:`plan_drain`): ``kubectl drain`` in the working copy — the nodes cordoned, then node by node the
  Workloads (and the Pods outside Kueue, and the Instances) there evicted, and each evicted Workload queued again and
  simulated through the five gates on the nodes left, in Kueue's order.

Views before and after each step are the pools' views as the operator's status writer computes them, kept per node
(:class:`PoolTally`) so a step recomputes only the nodes it touches.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuctl.core import modes, naming
from gpuctl.core.fit import podset_demands
from gpuctl.core.instances import Instance
from gpuctl.core.instancetypes import InstanceType
from gpuctl.core.ledger import Capability, Card, Group, NodeDevices
from gpuctl.core.lifecycle import should_stop_instance
from gpuctl.core.naming import Family
from gpuctl.core.queueing import order_key, pending
from gpuctl.core.simulate import Outcome, Simulator
from gpuctl.core.submissions import Submission, SubmittedPodSet, resubmission
from gpuctl.core.suggest import Suggestions, Tried, unblockers
from gpuctl.core.units import SHARES_PER_CARD, M
from gpuctl.core.views import (
    ZERO,
    PartitionView,
    PoolViews,
    ProfileCount,
    View,
    accelerator_views,
    in_pool,
    views_to_status,
)
from gpuctl.core.workloads import PodSet, Workload

WORKLOAD_API = "kueue.x-k8s.io/v1beta2"
INSTANCE_API = "worker.gpustack.ai/v1alpha1"
MAX_ROUNDS = 8
"""Layouts the growing search of :func:`plan_partitions` simulates before it stops."""
MAX_UNITS = 256
"""Candidate units (cards, or Hygon nodes) a plan considers per mode, the preferred first."""


class PlanError(ValueError):
    """A plan that cannot be asked as given (an unknown node, a pool without queue, a demand that cannot be read)."""


# ----------------------------------------------------------------------------------------------- views, per node


@dataclass(frozen=True, slots=True)
class _NodeViews:
    ex: View
    sh: View
    sl: View
    pt: PartitionView
    memory: tuple[tuple[str, int], ...]
    """Each profile name the node's cards offer or hold, with its memory (the order the views sort profiles by)."""


def _node_views(d: NodeDevices, key: str) -> _NodeViews:
    ex, sh, sl, pt = accelerator_views([d], key)
    memory: dict[str, int] = {}
    g = d.group(key)
    if g is not None:
        for c in g.cards:
            for p in c.profiles:
                memory.setdefault(p.published, p.memory_mib)
            for name in c.allocated_profiles:
                memory.setdefault(naming.publish_profile(g.manufacturer, name), 1 << 62)
    return _NodeViews(ex, sh, sl, pt, tuple(memory.items()))


class PoolTally:
    """A pool's views kept per node, so a plan's step recomputes only the nodes it changes; :meth:`status` equals
    ``views_to_status(instancetype_views(...))`` of the pool's ledgers (nodes :meth:`leave` left out)."""

    def __init__(self, it: InstanceType, ledgers: Mapping[str, NodeDevices]) -> None:
        self.instancetype = it
        self.key = it.accelerator_group
        self.selector = it.pool_labels()
        self.nodes: dict[str, _NodeViews] = {}
        for name in sorted(ledgers):
            d = ledgers[name]
            if in_pool(d.labels, self.selector):
                self.nodes[name] = _node_views(d, self.key)

    def covers(self, node: str) -> bool:
        return node in self.nodes

    def update(self, ledgers: Mapping[str, NodeDevices], nodes: Iterable[str]) -> None:
        for name in nodes:
            if name in self.nodes and name in ledgers:
                self.nodes[name] = _node_views(ledgers[name], self.key)

    def leave(self, nodes: Iterable[str]) -> None:
        """Nodes out of service (cordoned): they no longer count in what the pool can give."""
        for name in nodes:
            self.nodes.pop(name, None)

    def status(self) -> dict[str, Any]:
        """``{"name", "accelerator", "acceleratorShared", "acceleratorSliced", "acceleratorPartitioned"}`` as
        ``gpuctl views -o json`` prints a pool."""
        parts = [self.nodes[n] for n in sorted(self.nodes)]

        def summed(views: list[View]) -> View:
            top = max((v.once_max_request for v in views), default=0)
            return View(top, sum(v.remaining for v in views), sum(v.capacity for v in views))

        memory: dict[str, int] = {}
        remaining: dict[str, int] = {}
        allocated: dict[str, int] = {}
        for p in parts:
            for name, mib in p.memory:
                memory.setdefault(name, mib)
            for pc in p.pt.remaining_profiles:
                remaining[pc.name] = remaining.get(pc.name, 0) + pc.count
            for pc in p.pt.allocated_profiles:
                allocated[pc.name] = allocated.get(pc.name, 0) + pc.count
        order = sorted(memory, key=lambda n: (memory[n], n))
        pt_remaining = sum(p.pt.remaining for p in parts)
        pt = PartitionView(
            1 if pt_remaining > 0 else 0,
            pt_remaining,
            sum(p.pt.capacity for p in parts),
            tuple(ProfileCount(n, remaining.get(n, 0)) for n in order),
            tuple(ProfileCount(n, allocated[n]) for n in order if allocated.get(n, 0) > 0),
        )
        views = PoolViews(
            summed([p.ex for p in parts]),
            summed([p.sh for p in parts]),
            summed([p.sl for p in parts]),
            pt,
            ZERO,
        )
        out = views_to_status(views)
        out.pop("cpu")
        return {"name": self.instancetype.name, **out}


def cost(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, dict[str, int]]:
    """What a plan takes from (negative) or adds to each view of a pool: remaining and capacity, in the view's unit."""
    out: dict[str, dict[str, int]] = {}
    for view in ("accelerator", "acceleratorShared", "acceleratorSliced", "acceleratorPartitioned"):
        b, a = before[view], after[view]
        out[view] = {"remaining": a["remaining"] - b["remaining"], "capacity": a["capacity"] - b["capacity"]}
    return out


# ----------------------------------------------------------------------------------------------- demand


@dataclass(frozen=True, slots=True)
class ForSpec:
    """``--for WHAT=N``: N in the view's own unit — partition instances of a profile, whole cards (ex), shares (sh),
    percent units of slice memory (sl) — asked one request at a time (a slice at most a whole card)."""

    what: str
    count: int

    def __str__(self) -> str:
        return f"{self.what}={self.count}"


FOR_FAMILIES = {"ex": Family.EXCLUSIVE, "sh": Family.SHARED, "sl": Family.SLICED}


def parse_for(text: str) -> ForSpec:
    what, sep, n = text.partition("=")
    what = what.strip()
    if not sep or not what or not n.strip().isdigit() or int(n) <= 0:
        raise PlanError(
            f"--for {text!r}: give PROFILE=N (partition instances, e.g. 3g.40gb=4), ex=N (whole cards), sh=N "
            "(shares) or sl=N (percent of a card's memory, in slices of up to 100)"
        )
    count = int(n)
    if count > 4096:
        raise PlanError(f"--for {text!r}: at most 4096")
    return ForSpec(what.lower() if what.lower() in FOR_FAMILIES else what, count)


def for_demand(specs: Sequence[ForSpec], it: InstanceType, namespace: str, entrance: str) -> list[Submission]:
    """Pods asking what ``--for`` says, one request each, on the pool's entrance: Kueue's Pod integration makes each a
    Workload after the Pod webhook folded it (a partition profile the pool does not publish yet is refused there,
    until a switch publishes it)."""
    mfr = naming.MANUFACTURERS.get(it.manufacturer or it.accelerator_group.split("-", 1)[0])
    if mfr is None:
        raise PlanError(f"pool {it.name} names no accelerator manufacturer gpuctl knows ({it.accelerator_group!r})")
    names = mfr.resources
    out: list[Submission] = []
    for spec in specs:
        family = FOR_FAMILIES.get(spec.what)
        requests: list[dict[str, str]]
        if family is Family.EXCLUSIVE:
            requests = [{names.base: "1"}] * spec.count
        elif family is Family.SHARED:
            requests = [{names.shared: "1"}] * spec.count
        elif family is Family.SLICED:
            sizes = [100] * (spec.count // 100) + ([spec.count % 100] if spec.count % 100 else [])
            requests = [{names.sliced: "1", names.sliced_memory_percentage: str(p)} for p in sizes]
        else:
            if mfr.partition_kind is None:
                raise PlanError(f"--for {spec}: {mfr.name} cards have no partition profiles")
            requests = [{names.partitioned: "1", names.partitioned_profile(spec.what): "1"}] * spec.count
        tag = spec.what.replace(".", "-")
        for i, limits in enumerate(requests, start=len(out) + 1):
            name = f"for-{tag}-{i}"
            spec_of: dict[str, Any] = {"containers": [{"name": "main", "resources": {"limits": dict(limits)}}]}
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": namespace, "labels": {naming.LABEL_QUEUE_NAME: entrance}},
                "spec": spec_of,
            }
            out.append(Submission("Pod", namespace, name, entrance, (SubmittedPodSet("main", 1, spec_of),), pod=pod))
    return out


def queue_demand(sim: Simulator, pool: str) -> list[Workload]:
    """The pool's pending Workloads in Kueue's order."""
    queue_of = {k: q.cluster_queue for k, q in sim.state.local_queues.items()}
    line = [
        w
        for w in sim.workloads
        if pending(w) and (w.cluster_queue or queue_of.get((w.namespace, w.queue_name))) == pool
    ]
    return sorted(line, key=order_key)


def _target(sub: Submission) -> tuple[str | None, str]:
    """The mode of card a submission needs (partitioned for a partition, whole for the other families) and its
    profile."""
    for ps in sub.podsets:
        for d in podset_demands(PodSet(ps.name, ps.count, ps.spec)):
            if d.family is Family.PARTITIONED:
                return modes.PARTITIONED, d.profile
            return modes.WHOLE, ""
    return None, ""


def _slices_per_card(cap: Capability) -> int:
    return max((pl.end for p in cap.profiles for pl in p.placements), default=0)


def partition_cards(profiles: Sequence[str], cap: Capability) -> int:
    """Cards of this geometry that host these partition instances, packed largest first on each card's first free
    legal placement (an estimate to start from: the simulation decides)."""
    by_name = {p.published: p for p in cap.profiles}
    cards: list[list[tuple[int, int]]] = []
    for name in sorted(profiles, key=lambda n: -(by_name[n].memory_slices if n in by_name else 0)):
        p = by_name.get(name)
        if p is None:
            continue
        for taken in cards:
            spot = next((pl for pl in p.placements if all(pl.end <= a or b <= pl.start for a, b in taken)), None)
            if spot is not None:
                taken.append((spot.start, spot.end))
                break
        else:
            cards.append([(p.placements[0].start, p.placements[0].end)] if p.placements else [])
    return len(cards)


def _whole_cards(subs: Sequence[Submission]) -> int:
    """Whole cards requests of the other families ask at the least (shares ten to a card, slices by their memory)."""
    cards = shares = percent = 0
    for sub in subs:
        for ps in sub.podsets:
            for d in podset_demands(PodSet(ps.name, ps.count, ps.spec)):
                if d.family is Family.EXCLUSIVE:
                    cards += d.cards * d.pods
                elif d.family is Family.SHARED:
                    shares += d.cards * d.pods
                elif d.family is Family.SLICED:
                    percent += max(1, -(-d.units * 100 // M)) * d.pods
    return max(1, cards + -(-shares // SHARES_PER_CARD) + -(-percent // 100))


def _instances(sub: Submission) -> list[str]:
    """The partition profile of each instance a submission asks for."""
    out: list[str] = []
    for ps in sub.podsets:
        for d in podset_demands(PodSet(ps.name, ps.count, ps.spec)):
            if d.family is Family.PARTITIONED:
                out.extend([d.profile] * d.pods)
    return out


# ----------------------------------------------------------------------------------------------- partition plans


@dataclass(frozen=True, slots=True)
class Holder:
    """An object that must finish (or move) before a card switches, or that a drain evicts."""

    kind: str
    namespace: str
    name: str
    cards: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def to_dict(self) -> dict[str, Any]:
        api = {"Workload": WORKLOAD_API, "Pod": "v1", "Instance": INSTANCE_API}[self.kind]
        return {"apiVersion": api, "kind": self.kind, "namespace": self.namespace, "name": self.name} | (
            {"cards": list(self.cards)} if self.cards else {}
        )


@dataclass(frozen=True, slots=True)
class Unit:
    """Cards that switch together: one card (NVIDIA), or every card of the model on a node (Hygon)."""

    node: str
    cards: tuple[str, ...]
    to: str
    holders: tuple[Holder, ...] = ()
    blocked: str = ""
    """Why it cannot be planned at all ("" when it can): a Pod outside Kueue holds it, a Workload is starting there."""
    free_from: int = 0
    """The node's free cards in the mode the cards leave (fewer first: the least of the largest node's room)."""
    has_to: bool = False
    """The node already has cards of the model in the target mode."""
    index: int = 0


def _card_holders(sim: Simulator, node: str) -> dict[str, list[Holder]]:
    per: dict[str, dict[tuple[str, str, str], list[str]]] = {}
    for p in sim.pods_by_node.get(node, ()):
        if p.finished:
            continue
        for a in p.allocations:
            who = ("Workload", p.namespace, p.workload) if p.workload else ("Pod", p.namespace, p.name)
            per.setdefault(a.card_id, {}).setdefault(who, []).append(a.card_id)
    return {card: [Holder(k, ns, n) for (k, ns, n) in who] for card, who in per.items()}


def units(
    sim: Simulator,
    it: InstanceType,
    to: str,
    taken: frozenset[tuple[str, str]] = frozenset(),
    need: int = 1,
    limit: int = MAX_UNITS,
) -> list[Unit]:
    """The first ``limit`` units of the pool's cards that could switch to ``to``, the ones to prefer first: idle
    before held, cards the demand admitted as things are does not take (``taken``: (node, card)) before those it
    does; and by node: those that already have cards in ``to``, then one that holds the ``need`` cards alone (the
    one with the fewest free, keeping the emptiest whole), then those with the most free. Kueue's TAS charges the
    Workloads it placed on a node their credits, not their partition keys, so it keeps placing partitions on the
    node that first offers them: cards switched together on one node are the ones the demand lands on."""
    selector = it.pool_labels()
    want_partitioned = to == modes.PARTITIONED
    nodes: list[tuple[tuple[Any, ...], str, Group, list[Card], int, bool]] = []
    for name, d in sim.ledgers.items():
        node = sim.state.nodes.get(name)
        if not in_pool(d.labels, selector) or (node is not None and (not node.ready or node.unschedulable)):
            continue
        g = d.group(it.accelerator_group)
        if g is None or not modes.partitionable(g.manufacturer):
            continue
        leaving = [c for c in g.cards if c.partitioned != want_partitioned]
        has_to = len(leaving) < len(g.cards)
        if not leaving or (g.manufacturer in modes.NODE_WIDE and has_to):
            continue  # a node-wide model is one mode on a node: a mixed node is not one to plan on
        free_from = sum(1 for c in leaving if not modes.busy(c))
        fits = free_from >= need
        key = (0 if has_to else 1, 0 if fits else 1, free_from if fits else -free_from, name)
        nodes.append((key, name, g, leaving, free_from, has_to))
    nodes.sort(key=lambda n: n[0])
    out: list[Unit] = []
    for rank in (0, 1, 2):  # idle and not taken; idle and taken; held
        for _, name, g, leaving, free_from, has_to in nodes:
            if len(out) >= limit:
                return out
            holders: dict[str, list[Holder]] | None = None
            starting: list[str] | None = None
            for cards in [leaving] if g.manufacturer in modes.NODE_WIDE else [[c] for c in leaving]:
                held = any(modes.busy(c) for c in cards)
                if (2 if held else 1 if any((name, c.id) in taken for c in cards) else 0) != rank:
                    continue
                if holders is None:
                    holders, starting = _card_holders(sim, name), sim.starting_on(name)
                merged: dict[tuple[str, str, str], list[str]] = {}
                for c in cards:
                    for h in holders.get(c.id, []):
                        merged.setdefault((h.kind, h.namespace, h.name), []).append(c.id)
                who = tuple(Holder(k, ns, n, tuple(cs)) for (k, ns, n), cs in sorted(merged.items()))
                blocked = ""
                if any(h.kind == "Pod" for h in who):
                    pods = ", ".join(h.key for h in who if h.kind == "Pod")
                    blocked = f"held by Pod {pods} outside Kueue, which no queue says when it finishes"
                elif held and not who:
                    blocked = "held by allocations no Pod read accounts for"
                elif starting:
                    blocked = f"{', '.join(starting)} is starting on {name} (admitted, Pods not yet allocated)"
                out.append(Unit(name, tuple(c.id for c in cards), to, who, blocked, free_from, has_to, cards[0].index))
    return out


@dataclass(frozen=True, slots=True)
class Step:
    """One node's switch in a plan (or one node's drain), proven by the simulation of every step up to it."""

    step: int
    pool: str
    node: str
    cards: tuple[str, ...]
    to: str
    blocked_by: tuple[Holder, ...]
    views_before: tuple[dict[str, Any], ...]
    views_after: tuple[dict[str, Any], ...]
    admits: tuple[str, ...]
    """The demand (``namespace/name``) this step admits beyond the steps before it."""
    displaces: tuple[str, ...] = ()
    """Demand admitted after the step before that this one's layout no longer admits (a later step admits it
    again: the plan as a whole never takes what is admitted already)."""
    detail: tuple[dict[str, Any], ...] = ()
    """Per card: its mode and holders before, its mode and free profiles after (``-o wide``)."""
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "pool": self.pool,
            "node": self.node,
            "cards": list(self.cards),
            "to": self.to,
            "blockedBy": [h.to_dict() for h in self.blocked_by],
            "viewsBefore": list(self.views_before),
            "viewsAfter": list(self.views_after),
            "admits": [_workload_ref(k) for k in self.admits],
            "displaces": [_workload_ref(k) for k in self.displaces],
            "proven": True,
            "cardDetail": list(self.detail),
            **self.extra,
        }


def _workload_ref(key: str) -> dict[str, str]:
    ns, _, name = key.partition("/")
    return {"apiVersion": WORKLOAD_API, "kind": "Workload", "namespace": ns, "name": name}


@dataclass(frozen=True, slots=True)
class PartitionPlan:
    pool: str
    demand: tuple[str, ...]
    """Every demand's ``namespace/name``, in the order it was simulated."""
    asks: Mapping[str, str]
    steps: tuple[Step, ...]
    admitted_before: tuple[str, ...]
    admitted_after: tuple[str, ...]
    still_held: tuple[tuple[str, str], ...]
    """(demand, why) of what even the plan does not admit."""
    tried: tuple[Tried, ...]
    views_before: dict[str, Any]
    views_after: dict[str, Any]
    switches: int
    placed: Mapping[str, list[dict[str, Any]]] = field(default_factory=dict)
    """Where the plan's simulation puts each demand it admits: ``simulate``'s ``placement.nodes`` (node, Pods, cards,
    the allocations ``Allocate`` would record)."""

    def summary(self) -> dict[str, Any]:
        return {
            "pool": self.pool,
            "demand": [{"workload": k, "asks": self.asks.get(k, "")} for k in self.demand],
            "admittedBefore": list(self.admitted_before),
            "admittedAfter": list(self.admitted_after),
            "placement": dict(self.placed),
            "stillHeld": [{"workload": k, "why": why} for k, why in self.still_held],
            "switches": self.switches,
            "cost": cost(self.views_before, self.views_after) if self.views_before else {},
            "tried": [t.to_dict() for t in self.tried],
        }


def _held_why(o: Outcome) -> str:
    e = o.explanation
    g = e.gates[(e.held_by or 1) - 1]
    why = f"held at gate {g.gate} ({g.name}): {g.summary}"
    return f"{why}: {g.evidence[-1]}" if g.gate == 1 and g.evidence else why  # the webhook's own words


def _apply(sim: Simulator, chosen: Sequence[Unit], known: modes.Catalog) -> Simulator:
    """A copy with the holders of the chosen units finished and their cards switched."""
    trial = sim.copy()
    gone = {h.key for u in chosen for h in u.holders if h.kind == "Workload"}
    if gone:
        trial.remove(gone)
    by: dict[tuple[str, str], list[str]] = {}
    for u in chosen:
        by.setdefault((u.node, u.to), []).extend(u.cards)
    for (node, to), cards in by.items():
        trial.set_mode(node, cards, to, known)
    return trial


def _admitted(sim: Simulator, demand: Sequence[Submission]) -> tuple[list[Outcome], set[str]]:
    outcomes = [sim.simulate(s) for s in demand]
    return outcomes, {o.submission.key for o in outcomes if o.admitted}


def _asks(sub: Submission) -> str:
    from gpuctl.core.queueing import asks
    from gpuctl.core.workloads import parse_workload

    return asks(parse_workload(sub.workload_object()))


def plan_partitions(
    sim: Simulator, it: InstanceType, demand: Sequence[Submission], known: modes.Catalog | None = None
) -> PartitionPlan:
    """The plan with the fewest card switches that admits the most of ``demand`` (simulated in the order given), on
    the cards of pool ``it``. ``sim`` is the working copy with the demand not in it (pending Workloads removed)."""
    known = known or modes.catalog(sim.base_devices.values())
    key = it.accelerator_group
    keys = tuple(s.key for s in demand)
    asks = {s.key: _asks(s) for s in demand}
    baseline, admitted0 = _admitted(sim.copy(), demand)
    tally = PoolTally(it, sim.ledgers)
    before_views = tally.status()
    tried: list[Tried] = []
    held = [o for o in baseline if not o.admitted]

    def finish(steps: tuple[Step, ...], last: list[Outcome], switched: int) -> PartitionPlan:
        after_views = steps[-1].views_after[0] if steps else before_views
        return PartitionPlan(
            it.name,
            keys,
            asks,
            steps,
            tuple(k for k in keys if k in admitted0),
            tuple(o.submission.key for o in last if o.admitted),
            tuple((o.submission.key, _held_why(o)) for o in last if not o.admitted),
            tuple(tried),
            before_views,
            after_views,
            switched,
            {o.submission.key: o.to_dict()["placement"]["nodes"] for o in last if o.admitted},
        )

    if not held:
        return finish((), baseline, 0)
    manufacturer = it.manufacturer or key.split("-", 1)[0]
    product = next((g.product for d in sim.base_devices.values() for g in d.groups if g.accelerator_key == key), "")
    taken = frozenset((n.name, c) for o in baseline if o.admitted for n in o.placement for c in n.cards)
    pools: dict[str, list[Unit]] = {}
    wanted: dict[str, list[Submission]] = {}
    hopeless: dict[str, list[str]] = {}
    """Why no switch can help, and the demand it concerns."""
    for o in held:
        to, profile = _target(o.submission)
        if to is None:
            continue
        if to == modes.PARTITIONED:
            cap = known.capability(key, manufacturer, modes.PARTITIONED, product)
            why = ""
            if not modes.partitionable(manufacturer):
                why = f"{manufacturer} cards have no partition mode"
            elif cap is None:
                why = f"no card of model {key} reports partition profiles and its profile table is not known here"
            elif not modes.offers(cap, profile):
                why = f"model {key} has no {profile} profile (it offers {', '.join(p.published for p in cap.profiles)})"
            if why:
                hopeless.setdefault(why, []).append(o.submission.key)
                continue
        wanted.setdefault(to, []).append(o.submission)
    tried.extend(Tried("partition", f"{', '.join(who)}: {why}") for why, who in hopeless.items())

    def estimate(to: str, subs: Sequence[Submission]) -> int:
        if to == modes.PARTITIONED:
            cap = known.capability(key, manufacturer, modes.PARTITIONED, product)
            assert cap is not None
            return partition_cards([p for s in subs for p in _instances(s)], cap)
        return _whole_cards(subs)

    for to, subs in wanted.items():
        pools[to] = units(sim, it, to, taken, estimate(to, subs))
    usable: dict[str, list[Unit]] = {}
    for to, found in pools.items():
        usable[to] = [u for u in found if not u.blocked]
        blocked = [u for u in found if u.blocked]
        if not found:
            tried.append(Tried(to, f"every card of pool {it.name} that can switch is {to} already: no switch helps"))
        elif not usable[to]:
            tried.append(
                Tried(to, f"every card that could switch to {to} is busy: " + "; ".join(_unit_text(u) for u in blocked))
            )

    def cards_in(to: str, n: int) -> int:
        return sum(len(u.cards) for u in current[to][:n])

    def units_for(to: str, cards: int) -> int:
        """The fewest of the first units that hold ``cards`` cards (every unit when they do not)."""
        total = 0
        for i, u in enumerate(current[to]):
            total += len(u.cards)
            if total >= cards:
                return i + 1
        return len(current[to])

    def chosen(k: Mapping[str, int]) -> list[Unit]:
        return [u for to in sorted(k) for u in current[to][: k[to]]]

    def attempt(k: Mapping[str, int]) -> tuple[list[Outcome], set[str]]:
        return _admitted(_apply(sim, chosen(k), known), demand)

    def grow() -> tuple[dict[str, int], tuple[list[Outcome], set[str]]]:
        """The estimate first, then more for what is still held, while a layout admits more (never at the cost of
        what is admitted already); doubling when one admits nothing more."""
        k = {to: units_for(to, estimate(to, subs)) for to, subs in wanted.items() if current.get(to)}
        best_k = dict.fromkeys(k, 0)
        best = (baseline, admitted0)
        for _ in range(MAX_ROUNDS):
            if not k or k == best_k:
                break
            got = attempt(k)
            if len(got[1]) > len(best[1]) and got[1] >= admitted0:
                best, best_k = got, dict(k)
                still = {o.submission.key for o in got[0] if not o.admitted}
                if not still:
                    break
                k = {
                    to: min(
                        len(current[to]),
                        units_for(to, cards_in(to, n) + estimate(to, [s for s in wanted[to] if s.key in still])),
                    )
                    if any(s.key in still for s in wanted[to])
                    else n
                    for to, n in best_k.items()
                }
                continue
            why = _no_more(got, best, admitted0, len(keys), sum(cards_in(t, n) for t, n in k.items()))
            if all(t.why != why for t in tried):
                tried.append(Tried("switch", why, 1))
            if not got[1] >= admitted0:
                break  # it takes what is admitted now away: more cards of that mode only take more
            doubled = {to: min(len(current[to]), max(2 * n, n + 1)) for to, n in k.items()}
            if doubled == k:
                break
            k = doubled
        return best_k, best

    # The preferred order first (the fullest nodes' cards, keeping the emptiest whole); then, when that admits no
    # more, the cards of the emptiest nodes first (TAS charges a node's credits: partitions there can crowd out what
    # is admitted now).
    current = usable
    best_k, best = grow()
    if len(best[1]) <= len(admitted0):
        current = {to: sorted(us, key=_spread) for to, us in usable.items()}
        if current != usable:
            best_k, best = grow()
    if len(best[1]) <= len(admitted0):
        return finish((), baseline, 0)
    # Shrink: the fewest units of each mode, the others kept, that still admit as many (bisection, each a proof),
    # from the fewest cards that can hold the partitions the plan admits when the pool has none to start with.
    target = len(best[1])
    for to in sorted(best_k):
        low, high = 0, best_k[to]
        cap = known.capability(key, manufacturer, to, product)
        if to == modes.PARTITIONED and cap is not None and not any(u.has_to for u in current[to]):
            gained = [s for s in wanted[to] if s.key in best[1] and s.key not in admitted0]
            sizes = {p.published: p.memory_slices for p in cap.profiles}
            slices = sum(sizes.get(p, 0) for s in gained for p in _instances(s))
            per_card = _slices_per_card(cap)
            low = min(high, units_for(to, -(-slices // per_card))) if per_card and slices else 0
        while low < high:
            mid = (low + high) // 2
            got = attempt({**best_k, to: mid})
            if len(got[1]) >= target and got[1] >= admitted0:
                high, best = mid, got
            else:
                low = mid + 1
        best_k[to] = high
    picked = chosen(best_k)
    steps, last = _partition_steps(sim, it, picked, demand, admitted0, known, tally, best[0])
    return finish(steps, last, sum(len(u.cards) for u in picked))


def _spread(u: Unit) -> tuple[Any, ...]:
    """The other order of units: idle first, then on the nodes with the most free cards in the mode they leave."""
    return (bool(u.holders), -u.free_from, u.node, u.index)


def _no_more(
    got: tuple[list[Outcome], set[str]], best: tuple[list[Outcome], set[str]], before: set[str], total: int, cards: int
) -> str:
    """Why a layout was not taken: it admits no more than the best so far, or takes what is admitted now away."""
    lost = sorted(before - got[1])
    text = f"switching {cards} card(s) admits {len(got[1])} of {total}"
    text += f" but sets aside {', '.join(lost)}, admitted as things are" if lost else f", no more than {len(best[1])}"
    held = [f"{o.submission.key} {_held_why(o)}" for o in got[0] if not o.admitted]
    return text + (": " + "; ".join(held[:3]) if held else "")


def _unit_text(u: Unit) -> str:
    return f"{u.node}/{','.join(u.cards)} {u.blocked}"


def _card_detail(
    before: NodeDevices, after: NodeDevices, key: str, cards: Sequence[str], holders: Sequence[Holder]
) -> list[dict[str, Any]]:
    out = []
    gb, ga = before.group(key), after.group(key)
    for cid in cards:
        cb = next((c for c in gb.cards if c.id == cid), None) if gb else None
        ca = next((c for c in ga.cards if c.id == cid), None) if ga else None
        if cb is None or ca is None:
            continue
        entry: dict[str, Any] = {
            "card": cid,
            "from": modes.mode_of(cb),
            "fromHeldIn": cb.mode.name.lower(),
            "heldBy": [h.key for h in holders if cid in h.cards],
            "to": modes.mode_of(ca),
        }
        if ca.partitioned:
            entry["freeProfiles"] = [
                {"name": p.published, "count": ca.profile_remaining(p.published)} for p in ca.profiles
            ]
        else:
            entry["logicalSlices"] = ca.logical_slots
        out.append(entry)
    return out


def _partition_steps(
    sim: Simulator,
    it: InstanceType,
    chosen: Sequence[Unit],
    demand: Sequence[Submission],
    admitted0: set[str],
    known: modes.Catalog,
    tally: PoolTally,
    proof: list[Outcome],
) -> tuple[tuple[Step, ...], list[Outcome]]:
    """One step per node and mode, in the order the units were chosen; each proven by simulating the demand with
    every step up to it applied (a plan of one step by ``proof``, the simulation of exactly that layout).
    ``viewsBefore``/``viewsAfter`` are the pools' views around the step's switch alone."""
    groups: list[tuple[str, str]] = []
    for u in chosen:
        if (u.node, u.to) not in groups:
            groups.append((u.node, u.to))
    nodes = [n for n, _ in groups]
    others = [
        PoolTally(t, sim.ledgers)
        for t in sim.state.instancetypes.values()
        if t.name != it.name and t.acceleratable and t.accelerator_group == it.accelerator_group
    ]
    tallies = [tally, *[t for t in others if any(t.covers(n) for n in nodes)]]
    layout = sim.copy()
    steps: list[Step] = []
    seen = set(admitted0)
    last: list[Outcome] = []
    for i, (node, to) in enumerate(groups, start=1):
        mine = [u for u in chosen if (u.node, u.to) == (node, to)]
        before = [t.status() for t in tallies if t.covers(node)]
        ledger_before = layout.ledgers[node]
        layout = _apply(layout, mine, known)
        touched = {node} | {n for u in mine for h in u.holders for n in _nodes_of(sim, h)}
        for t in tallies:
            t.update(layout.ledgers, touched)
        after = [t.status() for t in tallies if t.covers(node)]
        if len(groups) == 1:
            last, admitted = proof, {o.submission.key for o in proof if o.admitted}
        else:
            last, admitted = _admitted(layout.copy(), demand)
        new = tuple(k for k in (o.submission.key for o in last) if k in admitted and k not in seen)
        lost = tuple(k for k in (o.submission.key for o in last) if k in seen and k not in admitted)
        seen = admitted
        merged: dict[tuple[str, str, str], list[str]] = {}
        for u in mine:
            for h in u.holders:
                merged.setdefault((h.kind, h.namespace, h.name), []).extend(h.cards)
        holders = tuple(Holder(k, ns, n, tuple(dict.fromkeys(cs))) for (k, ns, n), cs in merged.items())
        steps.append(
            Step(
                i,
                it.name,
                node,
                tuple(c for u in mine for c in u.cards),
                to,
                holders,
                tuple(before),
                tuple(after),
                new,
                lost,
                tuple(
                    _card_detail(
                        ledger_before,
                        layout.ledgers[node],
                        it.accelerator_group,
                        [c for u in mine for c in u.cards],
                        holders,
                    )
                ),
            )
        )
    return tuple(steps), last


def _nodes_of(sim: Simulator, h: Holder) -> set[str]:
    if h.kind != "Workload":
        return set()
    return {p.node_name for p in sim.pods if p.namespace == h.namespace and p.workload == h.name and p.node_name}


# ----------------------------------------------------------------------------------------------- drain


@dataclass(frozen=True, slots=True)
class Evicted:
    """One object a drain evicts, and where it goes."""

    holder: Holder
    node: str
    outcome: Outcome | None = None
    """The evicted Workload simulated again on the nodes left (None: not a Kueue Workload)."""
    what: str = ""
    """``readmitted``, ``held`` (nowhere to go), ``outside-kueue`` (a Pod the default scheduler places anew),
    ``stopped`` or ``requeued`` (an Instance: stopped by the operator, or its Pod made again and queued)."""
    why: str = ""
    instance: str = ""
    """The Instance a Workload's Pod backs ("")."""
    suggestions: Suggestions | None = None

    @property
    def nowhere(self) -> bool:
        return self.outcome is not None and not self.outcome.admitted

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {**self.holder.to_dict(), "from": self.node, "result": self.what, "why": self.why}
        if self.instance:
            out["instance"] = self.instance
        if self.outcome is not None:
            o = self.outcome
            out["readmitted"] = o.admitted
            out["heldBy"] = o.explanation.held_by
            if o.explanation.held_by is not None:
                out["heldAt"] = o.explanation.gates[o.explanation.held_by - 1].name
                out["heldGate"] = o.explanation.to_dict()["gates"][o.explanation.held_by - 1]
            if o.admitted:
                out["placement"] = o.to_dict()["placement"]
            if o.preempted:
                out["preempts"] = list(o.preempted)
        if self.suggestions is not None:
            out["unblockers"] = [u.to_dict() for u in self.suggestions.found]
            out["tried"] = [t.to_dict() for t in self.suggestions.tried]
        return out


@dataclass(frozen=True, slots=True)
class DrainPlan:
    nodes: tuple[str, ...]
    steps: tuple[Step, ...]
    evicted: tuple[tuple[Evicted, ...], ...]
    """Per step, what it evicts."""

    @property
    def nowhere(self) -> list[Evicted]:
        return [e for per in self.evicted for e in per if e.nowhere]


def _on_node(sim: Simulator, node: str) -> tuple[list[Workload], list[Holder], dict[str, list[str]]]:
    """The Workloads holding quota with a Pod or a topology assignment on the node, the Pods outside Kueue holding
    cards there, and each Workload's cards there."""
    cards: dict[str, list[str]] = {}
    outside: list[Holder] = []
    for p in sim.pods_by_node.get(node, ()):
        if p.finished:
            continue
        held = [a.card_id for a in p.allocations]
        if p.workload:
            cards.setdefault(f"{p.namespace}/{p.workload}", []).extend(held)
        elif held or p.accelerator_containers:
            outside.append(Holder("Pod", p.namespace, p.name, tuple(dict.fromkeys(held))))
    assigned = {w.key for w in sim.by_node.get(node, ())}
    workloads = [
        w
        for w in sim.workloads
        if (w.key in cards or w.key in assigned) and (w.quota_reserved or w.admitted) and not w.finished
    ]
    return sorted(workloads, key=order_key), outside, cards


def plan_drain(
    sim: Simulator, nodes: Sequence[str], *, instances: Sequence[Instance] = (), suggest: bool = False
) -> DrainPlan:
    """``kubectl drain`` of these nodes in the working copy: all cordoned first, then node by node its Workloads
    evicted and queued again (in Kueue's order) on the nodes left, each through the five gates."""
    missing = [n for n in nodes if n not in sim.ledgers and n not in sim.state.nodes]
    if missing:
        raise PlanError(f"node {missing[0]!r} has no Node or Devices object (`gpuctl views --by-node` lists them)")
    work = sim.copy()
    work.cordon(nodes)
    tallies = [
        PoolTally(t, work.ledgers)
        for t in sorted(sim.state.instancetypes.values(), key=lambda t: t.name)
        if t.acceleratable and t.accelerator_group
    ]
    by_pod = {(i.namespace, i.name): i for i in instances}
    steps: list[Step] = []
    evicted_per: list[tuple[Evicted, ...]] = []
    for i, node in enumerate(nodes, start=1):
        mine = [t for t in tallies if t.covers(node)]
        before = [t.status() for t in mine]
        workloads, outside, cards = _on_node(work, node)
        ledger = work.ledgers.get(node)
        node_cards = tuple(c.id for g in (ledger.groups if ledger else ()) for c in g.cards)
        work.remove([w.key for w in workloads])
        for t in mine:
            t.leave([node])
        out: list[Evicted] = [
            Evicted(h, node, what="outside-kueue", why="a Pod outside Kueue: the default scheduler places it anew")
            for h in outside
        ]
        touched: set[str] = set()
        for w in workloads:
            sub = resubmission(w)
            pods_here = [
                p for p in sim.pods_by_node.get(node, ()) if p.workload == w.name and p.namespace == w.namespace
            ]
            inst = next((by_pod[(p.namespace, p.name)] for p in pods_here if (p.namespace, p.name) in by_pod), None)
            holder = Holder("Workload", w.namespace, w.name, tuple(dict.fromkeys(cards.get(w.key, []))))
            if inst is not None:
                cq = work.state.cluster_queues.get(inst.type)
                it = work.state.instancetypes.get(inst.type)
                stop = should_stop_instance(it is not None, bool(it and it.deleting), cq.stop_policy if cq else "")
                if stop.stop:
                    out.append(
                        Evicted(
                            holder,
                            node,
                            None,
                            "stopped",
                            f"the operator stops Instance {inst.name}: {stop.reason}",
                            inst.name,
                        )
                    )
                    continue
            before_sim = work.copy() if suggest else None
            outcome = work.simulate(sub)
            found = None
            if outcome.admitted:
                touched |= {n.name for n in outcome.placement}
                where = "; ".join(f"{n.name} ({', '.join(n.cards) or 'no card'})" for n in outcome.placement)
                why = f"re-admitted on {where}" if where else "re-admitted"
                what = "readmitted"
            else:
                why = _held_why(outcome)
                if inst is not None and inst.node_name == node:
                    why = f"Instance {inst.name} is pinned to {node} (spec.nodeName): its Pod waits for {node}; " + why
                what = "held"
                if before_sim is not None:
                    found = unblockers(before_sim, sub, outcome)
            out.append(Evicted(holder, node, outcome, what, why, inst.name if inst else "", found))
        for t in tallies:
            t.update(work.ledgers, touched)
        after = [t.status() for t in mine]
        readmitted = tuple(e.holder.key for e in out if e.outcome is not None and e.outcome.admitted)
        steps.append(
            Step(
                i,
                ", ".join(t.instancetype.name for t in mine),
                node,
                node_cards,
                "cordoned",
                tuple(e.holder for e in out),
                tuple(before),
                tuple(after),
                readmitted,
                extra={"evicted": [e.to_dict() for e in out]},
            )
        )
        evicted_per.append(tuple(out))
    return DrainPlan(tuple(nodes), tuple(steps), tuple(evicted_per))


def demand_of(sim: Simulator, pool: str) -> list[Submission]:
    """The pool's pending Workloads as submissions in Kueue's order, taken out of the working copy (they are the
    demand a plan places)."""
    line = queue_demand(sim, pool)
    if line:
        sim.remove(w.key for w in line)
    return [resubmission(w) for w in line]


def partition_hint(sim: Simulator, w: Workload) -> str:
    """For a held Workload asking for a partition: the plan that admits it, as a hint ("" when it asks for none or
    no plan admits it). ``sim`` is used up (the Workload leaves it, to be placed anew)."""
    if not any(d.family is Family.PARTITIONED for ps in w.podsets for d in podset_demands(ps)):
        return ""
    queue = sim.state.local_queues.get((w.namespace, w.queue_name))
    pool = w.cluster_queue or (queue.cluster_queue if queue else "")
    it = sim.state.instancetypes.get(pool)
    if it is None or not it.acceleratable:
        return ""
    sim.remove([w.key])
    found = plan_partitions(sim, it, [resubmission(w)])
    if w.key not in found.admitted_after or not found.steps:
        return ""
    where = "; ".join(f"{s.node}: {', '.join(s.cards)}" for s in found.steps)
    return (
        f"`gpuctl plan partitions {pool}` admits it once {found.switches} card(s) switch to "
        f"{found.steps[0].to} ({where}), simulated"
    )
