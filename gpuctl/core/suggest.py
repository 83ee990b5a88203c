"""What would make room for a held Workload: the smallest changes that admit it, each proven by simulating it.

- **Workloads that would have to finish**: the fewest of them, searched by size — every set of one Workload, then of
  two, up to :data:`MAX_SET`, lowest priorities first within a size — so the first set the simulation admits is the
  fewest among all sets up to that size. For a Workload held by quota the sets come from its ClusterQueue's (and its
  cohort's) running Workloads; otherwise from the Workloads of one node, for at most :data:`MAX_NODES_TRIED` nodes
  whose Workloads, all gone, would admit it. At most :data:`MAX_TRIALS` simulations are spent; a search the bound
  stops says so.
- **A node drained of slices**: the slice- and share-holding Workloads of one node moved away, the held Workload
  placed, then the moved ones placed again; it counts only when the held Workload is admitted.
- **Another pool**: the same manifest on another InstanceType's entrance, as is.
- **More nodes**: how many nodes shaped like one of the pool's would admit it (bisection).

Every change listed is one the simulation admitted; what was tried and did not admit is reported apart
(:class:`Tried`), never as a proposal.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from gpuctl.core import naming
from gpuctl.core.fit import podset_demands
from gpuctl.core.naming import Family
from gpuctl.core.simulate import Outcome, Simulator
from gpuctl.core.submissions import Submission, SubmittedPodSet, resubmission
from gpuctl.core.workloads import Workload

MAX_TRIALS = 256
"""Simulations one search for Workloads that would have to finish may spend."""
MAX_SET = 3
"""The largest set of Workloads that search considers."""
MAX_NODES_TRIED = 16
"""Nodes whose Workloads that search considers, for a Workload held on the nodes' cards."""
MAX_DRAINS = 64
"""Nodes the drain-slices suggestion tries."""
MAX_NODES = 1024
"""The most nodes ``add-nodes`` bisects over."""


@dataclass(frozen=True, slots=True)
class Unblocker:
    """A change the simulation admitted the held Workload with."""

    kind: str
    """``finish``, ``drain-slices``, ``other-pool`` or ``add-nodes``."""
    change: str
    workloads: tuple[str, ...] = ()
    nodes: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "change": self.change, "admitted": True}
        if self.workloads:
            out["workloads"] = list(self.workloads)
        if self.nodes:
            out["nodes"] = list(self.nodes)
        return out | self.extra


@dataclass(frozen=True, slots=True)
class Tried:
    """A kind of change that was tried and admitted nothing (or that the search's bound stopped), and why."""

    kind: str
    why: str
    trials: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "why": self.why, "trials": self.trials}


@dataclass(frozen=True, slots=True)
class Suggestions:
    found: tuple[Unblocker, ...]
    tried: tuple[Tried, ...]


def _admits_without(sim: Simulator, sub: Submission, keys: Sequence[str]) -> bool:
    """Whether ``sub`` is admitted once these Workloads have finished."""
    trial = sim.copy()
    trial.remove(keys)
    return trial.simulate(sub, commit=False).admitted


def _running(sim: Simulator) -> list[Workload]:
    """Workloads that hold quota or cards: admitted, or reserved and not finished."""
    return [w for w in sim.workloads if (w.admitted or w.quota_reserved) and not w.finished and w.active]


def _by_node(sim: Simulator, workloads: Sequence[Workload]) -> dict[str, list[Workload]]:
    """Each node and the Workloads on it: by their topology assignment, or by their bound Pods."""
    pod_nodes: dict[str, set[str]] = {}
    for p in sim.pods:
        if p.node_name and p.workload:
            pod_nodes.setdefault(f"{p.namespace}/{p.workload}", set()).add(p.node_name)
    out: dict[str, list[Workload]] = {}
    for w in workloads:
        nodes = {n for a in w.assignments for n, _ in (a.hostnames or [])} | pod_nodes.get(w.key, set())
        for n in nodes:
            out.setdefault(n, []).append(w)
    return out


def _by_priority(workloads: Iterable[Workload]) -> list[Workload]:
    return sorted(workloads, key=lambda w: (w.priority, w.key))


@dataclass
class _Search:
    """The fewest-Workloads search: sets by size, lowest priorities first, within a budget of simulations."""

    sim: Simulator
    sub: Submission
    budget: int = MAX_TRIALS
    spent: int = 0

    def admits(self, keys: Sequence[str]) -> bool | None:
        """Whether these Workloads' finishing admits ``sub``; None once the budget is spent."""
        if self.spent >= self.budget:
            return None
        self.spent += 1
        return _admits_without(self.sim, self.sub, keys)

    def fewest(self, groups: Sequence[Sequence[Workload]]) -> tuple[list[Workload] | None, bool]:
        """The smallest set, within one group, whose finishing admits ``sub``; and whether the search was complete
        (every set up to :data:`MAX_SET` of every group tried)."""
        ordered = [_by_priority(g) for g in groups]
        for k in range(1, MAX_SET + 1):
            for group in ordered:
                for combo in itertools.combinations(group, k):
                    got = self.admits([w.key for w in combo])
                    if got is None:
                        return None, False
                    if got:
                        return list(combo), True
        return None, all(len(g) <= MAX_SET for g in ordered)


def _finish(sim: Simulator, sub: Submission, held: Outcome) -> Unblocker | Tried:
    gate = held.explanation.held_by
    running = _running(sim)
    search = _Search(sim, sub)
    pool = held.cluster_queue
    g2 = held.explanation.gates[1]
    if gate == 2 and g2.part == "quota":
        cohort = sim.state.cluster_queues[pool].cohort if pool in sim.state.cluster_queues else ""
        members = {n for n, q in sim.state.cluster_queues.items() if cohort and q.cohort == cohort} | {pool}
        groups: list[list[Workload]] = [[w for w in running if w.cluster_queue in members] or running]
    else:
        by_node = _by_node(sim, running)
        groups = []
        for node in sorted(by_node, key=lambda n: (len(by_node[n]), n)):
            if len(groups) >= MAX_NODES_TRIED:
                break
            everything = search.admits([w.key for w in by_node[node]])  # the node's Workloads, all gone
            if everything is None:
                break
            if everything:
                groups.append(by_node[node])
    best, complete = search.fewest(groups)
    if best is None:
        where = "its queue's running Workloads" if gate == 2 and g2.part == "quota" else "one node's Workloads"
        why = (
            f"no set of up to {MAX_SET} of {where} admits it"
            if complete
            else f"no set of {where} tried admits it; the search stopped at its bound ({MAX_TRIALS} simulations, "
            f"sets of up to {MAX_SET}, {MAX_NODES_TRIED} nodes)"
        )
        return Tried("finish", why, search.spent)
    keys = tuple(w.key for w in best)
    return Unblocker(
        "finish",
        f"{len(keys)} Workload(s) finish: {', '.join(keys)}"
        + f" (priority {', '.join(str(w.priority) for w in best)})",
        workloads=keys,
        extra={"trials": search.spent},
    )


def _drain_slices(sim: Simulator, sub: Submission) -> Unblocker | Tried | None:
    """Move the slice and share holders off one node, place ``sub``, then place the moved ones again."""
    holders = _by_node(
        sim,
        [
            w
            for w in _running(sim)
            if {d.family for ps in w.podsets for d in podset_demands(ps)} & {Family.SLICED, Family.SHARED}
        ],
    )
    if not holders:
        return None
    nodes = sorted(holders, key=lambda n: (len(holders[n]), n))[:MAX_DRAINS]
    for node in nodes:
        moved = holders[node]
        trial = sim.copy()
        trial.remove([w.key for w in moved])
        outcome = trial.simulate(sub)
        if not outcome.admitted:
            continue
        replaced = [trial.simulate(resubmission(w)) for w in moved]
        placed = sum(1 for o in replaced if o.admitted)
        return Unblocker(
            "drain-slices",
            f"drain the slices and shares from {node}: {len(moved)} Workload(s) move "
            f"({placed} of them find room elsewhere)",
            workloads=tuple(w.key for w in moved),
            nodes=(node,),
            extra={"movedPlaced": placed},
        )
    return Tried(
        "drain-slices", f"draining the slices and shares of any one of {len(nodes)} node(s) admits nothing", len(nodes)
    )


def _retarget(sub: Submission, entrance: str) -> Submission:
    pod = sub.pod
    if pod is not None:
        meta = dict(pod.get("metadata") or {})
        meta["labels"] = {**(meta.get("labels") or {}), naming.LABEL_QUEUE_NAME: entrance}
        pod = {**pod, "metadata": meta}
    instance = sub.instance
    return replace(sub, queue_name=entrance, pod=pod, instance=instance)


def _other_pools(sim: Simulator, sub: Submission, held: Outcome) -> tuple[list[Unblocker], list[Tried]]:
    if sub.instance is not None:
        return [], []
    found, tried = [], []
    for name, it in sorted(sim.state.instancetypes.items()):
        if name == held.cluster_queue or it.inactive:
            continue
        entrance = it.entrance or it.expected_entrance
        if (sub.namespace, entrance) not in sim.state.local_queues:
            continue
        outcome = sim.copy().simulate(_retarget(sub, entrance), commit=False)
        if outcome.admitted:
            found.append(
                Unblocker("other-pool", f"submit to pool {name} (entrance {entrance}) as is", extra={"pool": name})
            )
        else:
            gate = outcome.explanation.gates[(outcome.explanation.held_by or 1) - 1]
            tried.append(
                Tried("other-pool", f"pool {name} holds it at gate {gate.gate} ({gate.name}): {gate.summary}", 1)
            )
    return found, tried


def fewest_nodes(
    sim: Simulator, submissions: Sequence[Submission], like: str, limit: int = MAX_NODES
) -> tuple[int, list[Outcome]] | None:
    """The fewest nodes shaped like ``like`` (0 to ``limit``) with which every submission is admitted, and the
    outcomes then; None when even ``limit`` do not do. Doubling, then bisection: each step a simulation."""

    def attempt(n: int) -> list[Outcome]:
        trial = sim.copy()
        if n:
            trial.add_nodes(n, like)
        return [trial.simulate(s) for s in submissions]

    found = attempt(0)
    if all(o.admitted for o in found):
        return 0, found
    low, high = 0, 1
    found = attempt(high)
    while not all(o.admitted for o in found):
        if high >= limit:
            return None
        low, high = high, min(limit, high * 2)
        found = attempt(high)
    while high - low > 1:
        mid = (low + high) // 2
        trial = attempt(mid)
        if all(o.admitted for o in trial):
            high, found = mid, trial
        else:
            low = mid
    return high, found


def _add_nodes(sim: Simulator, sub: Submission, held: Outcome) -> Unblocker | Tried | None:
    like = sim.pool_node(held.cluster_queue)
    if like is None:
        return None
    grown = fewest_nodes(sim, [sub], like)
    if grown is None:
        trial = sim.copy()
        trial.add_nodes(MAX_NODES, like)
        e = trial.simulate(sub, commit=False).explanation
        g = e.gates[(e.held_by or 1) - 1]
        return Tried(
            "add-nodes",
            f"even {MAX_NODES} more nodes like {like} do not admit it: it is still held at gate {g.gate} "
            f"({g.name}): {g.summary}",
        )
    return Unblocker(
        "add-nodes", f"add {grown[0]} node(s) like {like}", nodes=(like,), extra={"count": grown[0], "like": like}
    )


def unblockers(sim: Simulator, sub: Submission, held: Outcome) -> Suggestions:
    """The smallest changes that admit a held submission, on the simulator's state just before it; and what was
    tried that did not."""
    if held.admitted:
        return Suggestions((), ())
    gate = held.explanation.held_by
    if gate == 1:
        return Suggestions((), (Tried("none", "the manifest itself must change: the Pod webhook refuses it"),))
    found: list[Unblocker] = []
    tried: list[Tried] = []

    def keep(result: Unblocker | Tried | None) -> None:
        if isinstance(result, Unblocker):
            found.append(result)
        elif isinstance(result, Tried):
            tried.append(result)

    keep(_finish(sim, sub, held))
    if gate in (2, 3, 4, 5):
        keep(_drain_slices(sim, sub))
    pools, pools_tried = _other_pools(sim, sub, held)
    found.extend(pools)
    tried.extend(pools_tried)
    keep(_add_nodes(sim, sub, held))
    return Suggestions(tuple(found), tuple(tried))


# ----------------------------------------------------------------------------------------------- defragmentation


MAX_DEFRAG_SET = 4
"""The largest set of Workloads a defragmentation hint considers moving off one node."""
MAX_DEFRAG_SETS = 4096
"""Sets one node's search examines (from the allocation records, without simulating)."""


@dataclass(frozen=True, slots=True)
class DefragHint:
    """The fewest Workloads to move off (or let finish on) one node so it has ``cards`` whole cards free; a hint is
    listed only once a Workload asking for them there is admitted by the simulation, else it is one ``tried``."""

    node: str
    cards: int
    workloads: tuple[str, ...]
    admitted: bool
    why: str = ""
    """For a hint tried and not admitted: the gate that held the probe there."""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "node": self.node,
            "freeCards": self.cards,
            "workloads": list(self.workloads),
            "admitted": self.admitted,
        }
        if self.why:
            out["why"] = self.why
        return out


def _holders(sim: Simulator, node: str, accelerator_key: str) -> tuple[int, int, dict[str, set[str]], set[str]]:
    """A node's cards of one model: how many there are, how many are free, which Workload holds which card (by its
    Pods' allocation records) and which cards something else holds (a Pod outside Kueue, a record of no Pod)."""
    ledger = sim.ledgers.get(node)
    g = ledger.group(accelerator_key) if ledger else None
    if g is None:
        return 0, 0, {}, set()
    free = {c.id for c in g.cards if c.free and not c.partitioned}
    held_by: dict[str, set[str]] = {}
    holders: dict[str, set[str]] = {}
    for p in sim.pods_by_node.get(node, ()):
        if p.finished:
            continue
        for a in p.allocations:
            if a.group == g.id and a.manufacturer == g.manufacturer:
                holders.setdefault(a.card_id, set()).add(f"{p.namespace}/{p.workload}" if p.workload else "")
    other = {c.id for c in g.cards if c.id not in free and (not holders.get(c.id) or "" in holders[c.id])}
    for card, keys in holders.items():
        for key in keys - {""}:
            held_by.setdefault(key, set()).add(card)
    unpartitioned = sum(1 for c in g.cards if not c.partitioned)
    return unpartitioned, len(free), held_by, other | {c.id for c in g.cards if c.partitioned}


def fewest_to_free(
    free: int,
    cards: int,
    held_by: dict[str, set[str]],
    movable: Sequence[str],
    other: set[str],
) -> tuple[str, ...] | None:
    """The fewest of ``movable`` (in the order given: lowest priority first) whose going leaves ``cards`` cards free:
    every set of one, then of two, up to :data:`MAX_DEFRAG_SET`, judged from the allocation records; None when no set
    within the bound does."""
    examined = 0
    for k in range(1, min(len(movable), MAX_DEFRAG_SET) + 1):
        for combo in itertools.combinations(movable, k):
            examined += 1
            if examined > MAX_DEFRAG_SETS:
                return None
            if free + _freed(combo, held_by, other) >= cards:
                return combo
    return None


def defrag_hints(
    sim: Simulator, pool: str, nodes: Sequence[str], accelerator_key: str, cards: int, *, limit: int = 3
) -> tuple[list[DefragHint], list[DefragHint]]:
    """For the pool's nodes with too few whole cards free, the fewest Workloads (lowest priority first) whose going
    frees ``cards`` on one node, each proven by a simulated Workload of ``cards`` whole cards pinned to that node.

    Candidates are found from the allocation records alone (a card frees when every Workload holding it goes and
    nothing else holds it), the nodes needing the fewest first; up to ``limit`` proven hints are returned, with the
    candidates the simulation did not admit (at most ``limit`` of them) apart."""
    queue = next(
        ((ns, name) for (ns, name), lq in sorted(sim.state.local_queues.items()) if lq.cluster_queue == pool), None
    )
    priority = {w.key: (w.priority, w.key) for w in _running(sim)}
    found: list[tuple[int, str, tuple[str, ...]]] = []
    for node in nodes:
        total, free, held_by, other = _holders(sim, node, accelerator_key)
        if total < cards or free >= cards:
            continue  # the node cannot hold them at all, or already has them free
        movable = sorted((k for k in held_by if k in priority), key=lambda k: priority[k])
        chosen = fewest_to_free(free, cards, held_by, movable, other)
        if chosen is not None:
            found.append((len(chosen), node, chosen))
    hints: list[DefragHint] = []
    tried: list[DefragHint] = []
    for _, node, moved in sorted(found):
        if len(hints) >= limit or len(tried) >= limit or queue is None:
            break
        trial = sim.copy()
        trial.remove(moved)
        probe = Submission(
            "Workload",
            queue[0],
            f"gpuctl-defrag-probe-{cards}",
            queue[1],
            (
                SubmittedPodSet(
                    "main",
                    1,
                    {
                        "nodeSelector": {naming.LABEL_HOSTNAME: node},
                        "containers": [
                            {"name": "probe", "resources": {"limits": {_base_key(accelerator_key): str(cards)}}}
                        ],
                    },
                ),
            ),
        )
        outcome = trial.simulate(probe, commit=False)
        if outcome.admitted:
            hints.append(DefragHint(node, cards, moved, True))
        else:
            g = outcome.explanation.gates[(outcome.explanation.held_by or 1) - 1]
            tried.append(DefragHint(node, cards, moved, False, f"held at gate {g.gate} ({g.name}): {g.summary}"))
    return hints, tried


def _freed(keys: Sequence[str], held_by: dict[str, set[str]], other: set[str]) -> int:
    """Cards that free when these Workloads go: every Workload holding them goes, and nothing else holds them."""
    gone = set(keys)
    return sum(
        1
        for c in {c for k in gone for c in held_by[k]}
        if c not in other and all(k in gone for k, v in held_by.items() if c in v)
    )


def _base_key(accelerator_key: str) -> str:
    manufacturer = naming.MANUFACTURERS.get(accelerator_key.split("-", 1)[0])
    return manufacturer.base if manufacturer else "nvidia.com/gpu"
