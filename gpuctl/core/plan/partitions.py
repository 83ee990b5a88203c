"""The partition plan (:func:`plan_partitions`): which cards of a pool to switch mode so its pending demand is
admitted, the fewest switches that admit the most of it, each step simulated."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuctl.core import modes
from gpuctl.core.fit import podset_demands
from gpuctl.core.instancetypes import InstanceType
from gpuctl.core.ledger import Card, Group, NodeDevices
from gpuctl.core.naming import Family
from gpuctl.core.plan.demand import asks_of, instances_of, partition_cards, slices_per_card, target_mode, whole_cards
from gpuctl.core.plan.steps import Holder, Step, held_why
from gpuctl.core.plan.tally import PoolTally, cost
from gpuctl.core.simulate import Outcome, Simulator
from gpuctl.core.submissions import Submission, resubmission
from gpuctl.core.suggest import Tried
from gpuctl.core.views import in_pool
from gpuctl.core.workloads import Workload

MAX_ROUNDS = 8
"""Layouts the growing search of :func:`plan_partitions` simulates before it stops."""
MAX_UNITS = 256
"""Candidate units (cards, or Hygon nodes) a plan considers per mode, the preferred first."""


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
    ceiling: int = 0
    """How many of the demand any switch of this pool's cards admits: the most of the plan's own layout and of every
    card that can switch switched."""
    ceiling_why: tuple[tuple[str, str], ...] = ()
    """(demand, why) of what even that does not admit."""

    def summary(self) -> dict[str, Any]:
        return {
            "pool": self.pool,
            "demand": [{"workload": k, "asks": self.asks.get(k, "")} for k in self.demand],
            "admittedBefore": list(self.admitted_before),
            "admittedAfter": list(self.admitted_after),
            "placement": dict(self.placed),
            "stillHeld": [{"workload": k, "why": why} for k, why in self.still_held],
            "ceiling": {
                "admitted": self.ceiling,
                "of": len(self.demand),
                "notMore": [{"workload": k, "why": why} for k, why in self.ceiling_why],
            },
            "switches": self.switches,
            "cost": cost(self.views_before, self.views_after) if self.views_before else {},
            "tried": [t.to_dict() for t in self.tried],
        }


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


def plan_partitions(
    sim: Simulator, it: InstanceType, demand: Sequence[Submission], known: modes.Catalog | None = None
) -> PartitionPlan:
    """The plan with the fewest card switches that admits the most of ``demand`` (simulated in the order given), on
    the cards of pool ``it``. ``sim`` is the working copy with the demand not in it (pending Workloads removed)."""
    known = known or modes.catalog(sim.base_devices.values())
    key = it.accelerator_group
    keys = tuple(s.key for s in demand)
    asks = {s.key: asks_of(s) for s in demand}
    baseline, admitted0 = _admitted(sim.copy(), demand)
    tally = PoolTally(it, sim.ledgers)
    before_views = tally.status()
    tried: list[Tried] = []
    held = [o for o in baseline if not o.admitted]

    def finish(
        steps: tuple[Step, ...], last: list[Outcome], switched: int, most: list[Outcome] | None = None
    ) -> PartitionPlan:
        after_views = steps[-1].views_after[0] if steps else before_views
        top = max((last, most or last), key=lambda outcomes: sum(o.admitted for o in outcomes))
        return PartitionPlan(
            it.name,
            keys,
            asks,
            steps,
            tuple(k for k in keys if k in admitted0),
            tuple(o.submission.key for o in last if o.admitted),
            tuple((o.submission.key, held_why(o)) for o in last if not o.admitted),
            tuple(tried),
            before_views,
            after_views,
            switched,
            {o.submission.key: o.to_dict()["placement"]["nodes"] for o in last if o.admitted},
            sum(o.admitted for o in top),
            tuple((o.submission.key, held_why(o)) for o in top if not o.admitted),
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
        to, profile = target_mode(o.submission)
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
            return partition_cards([p for s in subs for p in instances_of(s)], cap)
        return whole_cards(subs)

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
    # The ceiling: every card that can switch, switched (no plan this search makes admits more).
    everything = {to: len(us) for to, us in current.items() if us}
    most = attempt(everything)[0] if everything else baseline
    if len(best[1]) <= len(admitted0):
        return finish((), baseline, 0, most)
    # Shrink: the fewest units of each mode, the others kept, that still admit as many (bisection, each a proof),
    # from the fewest cards that can hold the partitions the plan admits when the pool has none to start with.
    target = len(best[1])
    for to in sorted(best_k):
        low, high = 0, best_k[to]
        cap = known.capability(key, manufacturer, to, product)
        if to == modes.PARTITIONED and cap is not None and not any(u.has_to for u in current[to]):
            gained = [s for s in wanted[to] if s.key in best[1] and s.key not in admitted0]
            sizes = {p.published: p.memory_slices for p in cap.profiles}
            slices = sum(sizes.get(p, 0) for s in gained for p in instances_of(s))
            per_card = slices_per_card(cap)
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
    steps, last, left_out = _partition_steps(sim, it, picked, demand, admitted0, known, tally, best[0])
    tried.extend(left_out)
    if not steps:
        return finish((), baseline, 0, most)
    return finish(steps, last, sum(len(step.cards) for step in steps), most)


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
    held = [f"{o.submission.key} {held_why(o)}" for o in got[0] if not o.admitted]
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
) -> tuple[tuple[Step, ...], list[Outcome], list[Tried]]:
    """One step per node and mode, in the order the units were chosen, each kept only when simulating the demand
    with it and every kept step before it applied admits more than without it (a plan of one step by ``proof``, the
    simulation of exactly that layout); the switches left out, as tried. The outcomes of the last kept step (empty
    when none is). ``viewsBefore``/``viewsAfter`` are the pools' views around the step's switch alone."""
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
    left_out: list[Tried] = []
    remaining = list(groups)
    while remaining:
        # The next step: the first switch left that admits more (or gives back more of what is admitted as things
        # are) and sets nothing admitted by the steps before it aside; else the first that admits more at all.
        tried_now: list[tuple[tuple[str, str], list[Unit], Simulator, list[Outcome], set[str]]] = []
        better: list[tuple[tuple[str, str], list[Unit], Simulator, list[Outcome], set[str]]] = []
        for node, to in remaining:
            mine = [u for u in chosen if (u.node, u.to) == (node, to)]
            trial = _apply(layout, mine, known)
            if len(groups) == 1:
                outcomes, admitted = proof, {o.submission.key for o in proof if o.admitted}
            else:
                outcomes, admitted = _admitted(trial.copy(), demand)
            tried_now.append(((node, to), mine, trial, outcomes, admitted))
            if (len(admitted), len(admitted & admitted0)) > (len(seen), len(seen & admitted0)):
                better.append(tried_now[-1])
                if seen <= admitted:
                    break  # the first that sets nothing aside: the others are not simulated
        if not better:
            # The replay is the test: a switch after which no more is admitted, nor more of what is admitted as
            # things are given back, is no step.
            for (node, to), mine, _, _, admitted in tried_now:
                cards = [c for u in mine for c in u.cards]
                left_out.append(
                    Tried(
                        "switch",
                        f"switching {node}/{','.join(cards)} to {to} after the steps before it admits "
                        f"{len(admitted)} of {len(demand)}, no more than {len(seen)}: left out",
                        len(cards),
                    )
                )
            break
        (node, to), mine, trial, outcomes, admitted = better[-1] if seen <= better[-1][4] else better[0]
        remaining.remove((node, to))
        cards = [c for u in mine for c in u.cards]
        before = [t.status() for t in tallies if t.covers(node)]
        ledger_before = layout.ledgers[node]
        layout, last = trial, outcomes
        touched = {node} | {n for u in mine for h in u.holders for n in _nodes_of(sim, h)}
        for t in tallies:
            t.update(layout.ledgers, touched)
        after = [t.status() for t in tallies if t.covers(node)]
        new = tuple(k for k in (o.submission.key for o in outcomes) if k in admitted and k not in seen)
        lost = tuple(k for k in (o.submission.key for o in outcomes) if k in seen and k not in admitted)
        seen = admitted
        merged: dict[tuple[str, str, str], list[str]] = {}
        for u in mine:
            for h in u.holders:
                merged.setdefault((h.kind, h.namespace, h.name), []).extend(h.cards)
        holders = tuple(Holder(k, ns, n, tuple(dict.fromkeys(cs))) for (k, ns, n), cs in merged.items())
        steps.append(
            Step(
                len(steps) + 1,
                it.name,
                node,
                tuple(cards),
                to,
                holders,
                tuple(before),
                tuple(after),
                new,
                lost,
                tuple(_card_detail(ledger_before, layout.ledgers[node], it.accelerator_group, cards, holders)),
            )
        )
    return tuple(steps), last, left_out


def _nodes_of(sim: Simulator, h: Holder) -> set[str]:
    if h.kind != "Workload":
        return set()
    return {p.node_name for p in sim.pods if p.namespace == h.namespace and p.workload == h.name and p.node_name}


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
