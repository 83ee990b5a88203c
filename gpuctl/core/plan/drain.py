"""The drain plan (:func:`plan_drain`): ``kubectl drain`` in the working copy, and where each evicted Workload goes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gpuctl.core.instances import Instance
from gpuctl.core.lifecycle import should_stop_instance
from gpuctl.core.plan.steps import Holder, PlanError, Step, held_why
from gpuctl.core.plan.tally import PoolTally
from gpuctl.core.queueing import order_key
from gpuctl.core.simulate import Outcome, Simulator
from gpuctl.core.submissions import resubmission
from gpuctl.core.suggest import Suggestions, unblockers
from gpuctl.core.workloads import Workload


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
    published: tuple[dict[str, Any], ...] = ()
    """The first step's pools as their published ledgers (the Devices objects ``gpuctl views`` reads) give them,
    where those differ from the ledgers rebuilt from the Pods' allocation records that the plan (as gate 3) reads."""

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
        raise PlanError(
            f'node "{missing[0]}" not found: no Node or Devices object (`gpuctl views --by-node` lists them)'
        )
    work = sim.copy()
    work.cordon(nodes)
    tallies = [
        PoolTally(t, work.ledgers)
        for t in sorted(sim.state.instancetypes.values(), key=lambda t: t.name)
        if t.acceleratable and t.accelerator_group
    ]
    by_pod = {(i.namespace, i.name): i for i in instances}
    steps: list[Step] = []
    published: list[dict[str, Any]] = []
    evicted_per: list[tuple[Evicted, ...]] = []
    for i, node in enumerate(nodes, start=1):
        mine = [t for t in tallies if t.covers(node)]
        before = [t.status() for t in mine]
        if i == 1:
            for t, rebuilt in zip(mine, before, strict=True):
                as_published = PoolTally(t.instancetype, sim.state.devices).status()
                if as_published != rebuilt:
                    published.append(as_published)
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
                why = held_why(outcome)
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
    return DrainPlan(tuple(nodes), tuple(steps), tuple(evicted_per), tuple(published))
