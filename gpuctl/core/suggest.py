"""What would make room for a held Workload: the smallest changes that admit it, each proven by simulating it.

- **Workloads that would have to finish**: the fewest, lowest priority first — one alone if one suffices, else the
  Workloads of the one node (or the one queue, for quota) that need the fewest to go, pruned of any not needed.
- **A node drained of slices**: the slice- and share-holding Workloads of one node moved away, the held Workload
  placed, then the moved ones placed again; it counts only when the held Workload is admitted.
- **Another pool**: the same manifest on another InstanceType's entrance, as is.
- **More nodes**: how many nodes shaped like one of the pool's would admit it (bisection).

Every change is simulated on a working copy; its ``admitted`` is the simulation's answer, never a guess.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from gpuctl.core import naming
from gpuctl.core.fit import podset_demands
from gpuctl.core.naming import Family
from gpuctl.core.simulate import Outcome, Simulator
from gpuctl.core.submissions import Submission, SubmittedPodSet
from gpuctl.core.workloads import Workload

MAX_TRIALS = 64
"""Simulations one kind of suggestion may spend."""
MAX_NODES = 1024
"""The most nodes ``add-nodes`` bisects over."""


@dataclass(frozen=True, slots=True)
class Unblocker:
    kind: str
    """``finish``, ``drain-slices``, ``other-pool`` or ``add-nodes``."""
    change: str
    admitted: bool
    workloads: tuple[str, ...] = ()
    nodes: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "change": self.change, "admitted": self.admitted}
        if self.workloads:
            out["workloads"] = list(self.workloads)
        if self.nodes:
            out["nodes"] = list(self.nodes)
        return out | self.extra


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


def _fewest(
    sim: Simulator, sub: Submission, candidates: Sequence[Workload], budget: list[int]
) -> list[Workload] | None:
    """The fewest of ``candidates`` (tried lowest priority first) whose finishing admits ``sub``, or None."""
    ordered = sorted(candidates, key=lambda w: (w.priority, w.key))
    for w in ordered:
        if budget[0] <= 0:
            return None
        budget[0] -= 1
        if _admits_without(sim, sub, [w.key]):
            return [w]
    if len(ordered) < 2 or budget[0] <= 0:
        return None
    budget[0] -= 1
    if not _admits_without(sim, sub, [w.key for w in ordered]):
        return None
    chosen = list(ordered)
    for w in sorted(ordered, key=lambda x: (-x.priority, x.key)):  # keep the lowest priorities, drop what is not needed
        if budget[0] <= 0:
            break
        rest = [c for c in chosen if c.key != w.key]
        budget[0] -= 1
        if rest and _admits_without(sim, sub, [c.key for c in rest]):
            chosen = rest
    return chosen


def _finish(sim: Simulator, sub: Submission, held: Outcome) -> Unblocker | None:
    gate = held.explanation.held_by
    running = _running(sim)
    budget = [MAX_TRIALS]
    pool = held.cluster_queue
    if gate == 2 and "quota" in held.explanation.gates[1].summary:
        candidates = [w for w in running if w.cluster_queue == pool] or running
        best = _fewest(sim, sub, candidates, budget)
    else:
        by_node = _by_node(sim, running)
        best = None
        for node in sorted(by_node, key=lambda n: (len(by_node[n]), n)):
            if budget[0] <= 0:
                break
            found = _fewest(sim, sub, by_node[node], budget)
            if found is not None and (best is None or len(found) < len(best)):
                best = found
                if len(best) == 1:
                    break
    if best is None:
        return None
    keys = tuple(w.key for w in best)
    return Unblocker(
        "finish",
        f"{len(keys)} Workload(s) finish: {', '.join(keys)}"
        + f" (priority {', '.join(str(w.priority) for w in best)})",
        True,
        workloads=keys,
    )


def resubmission(w: Workload) -> Submission:
    """An existing Workload as a new submission of the same PodSets to the same queue."""
    return Submission(
        "Workload",
        w.namespace,
        w.name,
        w.queue_name,
        tuple(SubmittedPodSet(ps.name, ps.count, dict(ps.spec), labels=ps.labels) for ps in w.podsets),
        w.priority,
    )


def _drain_slices(sim: Simulator, sub: Submission) -> Unblocker | None:
    """Move the slice and share holders off one node, place ``sub``, then place the moved ones again."""
    holders = _by_node(
        sim,
        [
            w
            for w in _running(sim)
            if {d.family for ps in w.podsets for d in podset_demands(ps)} & {Family.SLICED, Family.SHARED}
        ],
    )
    for node in sorted(holders, key=lambda n: (len(holders[n]), n))[:MAX_TRIALS]:
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
            True,
            workloads=tuple(w.key for w in moved),
            nodes=(node,),
            extra={"movedPlaced": placed},
        )
    return None


def _retarget(sub: Submission, entrance: str) -> Submission:
    pod = sub.pod
    if pod is not None:
        meta = dict(pod.get("metadata") or {})
        meta["labels"] = {**(meta.get("labels") or {}), naming.LABEL_QUEUE_NAME: entrance}
        pod = {**pod, "metadata": meta}
    instance = sub.instance
    return replace(sub, queue_name=entrance, pod=pod, instance=instance)


def _other_pools(sim: Simulator, sub: Submission, held: Outcome) -> list[Unblocker]:
    if sub.instance is not None:
        return []
    out = []
    for name, it in sorted(sim.state.instancetypes.items()):
        if name == held.cluster_queue or it.inactive:
            continue
        entrance = it.entrance or it.expected_entrance
        if (sub.namespace, entrance) not in sim.state.local_queues:
            continue
        outcome = sim.copy().simulate(_retarget(sub, entrance), commit=False)
        if outcome.admitted:
            out.append(
                Unblocker(
                    "other-pool", f"submit to pool {name} (entrance {entrance}) as is", True, extra={"pool": name}
                )
            )
    return out


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


def _add_nodes(sim: Simulator, sub: Submission, held: Outcome) -> Unblocker | None:
    like = sim.pool_node(held.cluster_queue)
    grown = fewest_nodes(sim, [sub], like) if like is not None else None
    if like is None or grown is None:
        return None
    return Unblocker(
        "add-nodes",
        f"add {grown[0]} node(s) like {like}",
        True,
        nodes=(like,),
        extra={"count": grown[0], "like": like},
    )


def unblockers(sim: Simulator, sub: Submission, held: Outcome) -> list[Unblocker]:
    """The smallest changes that admit a held submission, on the simulator's state just before it."""
    if held.admitted:
        return []
    gate = held.explanation.held_by
    if gate == 1:
        return []  # the manifest itself must change
    found: list[Unblocker] = []
    finish = _finish(sim, sub, held)
    if finish is not None:
        found.append(finish)
    if gate in (2, 3, 4, 5):
        drained = _drain_slices(sim, sub)
        if drained is not None:
            found.append(drained)
    found.extend(_other_pools(sim, sub, held))
    more = _add_nodes(sim, sub, held)
    if more is not None:
        found.append(more)
    if not found:
        found.append(Unblocker("none", "no single change tried admits it", False))
    return found


# ----------------------------------------------------------------------------------------------- defragmentation


@dataclass(frozen=True, slots=True)
class DefragHint:
    """The fewest Workloads to move off (or let finish on) one node so it has ``cards`` whole cards free, proven by
    simulating a Workload that asks for them there."""

    node: str
    cards: int
    workloads: tuple[str, ...]
    admitted: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "freeCards": self.cards,
            "workloads": list(self.workloads),
            "admitted": self.admitted,
        }


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


def defrag_hints(
    sim: Simulator, pool: str, nodes: Sequence[str], accelerator_key: str, cards: int, *, limit: int = 3
) -> list[DefragHint]:
    """For the pool's nodes with too few whole cards free, the fewest Workloads (lowest priority first) whose going
    frees ``cards`` on one node; each proven by a simulated Workload of ``cards`` whole cards pinned to that node.

    Candidates are found from the allocation records alone (a card frees when every Workload holding it goes and
    nothing else holds it); only the best ``limit`` nodes are simulated."""
    queue = next(
        ((ns, name) for (ns, name), lq in sorted(sim.state.local_queues.items()) if lq.cluster_queue == pool), None
    )
    priority = {w.key: (w.priority, w.key) for w in _running(sim)}
    found: list[tuple[int, str, tuple[str, ...]]] = []
    for node in nodes:
        total, free, held_by, other = _holders(sim, node, accelerator_key)
        if total < cards or free >= cards:
            continue  # the node cannot hold them at all, or already has them free
        movable = {k: v for k, v in held_by.items() if k in priority}
        chosen: list[str] = []
        for key in sorted(movable, key=lambda k: priority[k]):
            chosen.append(key)
            if free + _freed(chosen, held_by, movable, other) >= cards:
                break
        else:
            continue  # the node's Workloads are not what holds its cards
        for key in sorted(chosen, key=lambda k: (-priority[k][0], k)):  # drop what is not needed
            rest = [k for k in chosen if k != key]
            if rest and free + _freed(rest, held_by, movable, other) >= cards:
                chosen = rest
        found.append((len(chosen), node, tuple(chosen)))
    hints: list[DefragHint] = []
    for _, node, moved in sorted(found)[:limit]:
        trial = sim.copy()
        trial.remove(moved)
        admitted = False
        if queue is not None:
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
            admitted = trial.simulate(probe, commit=False).admitted
        hints.append(DefragHint(node, cards, moved, admitted))
    return hints


def _freed(keys: Sequence[str], held_by: dict[str, set[str]], movable: dict[str, set[str]], other: set[str]) -> int:
    """Cards that free when these Workloads go: every Workload holding them goes, and nothing else holds them."""
    gone = set(keys)
    return sum(
        1
        for c in {c for k in gone for c in movable[k]}
        if c not in other and all(k in gone for k, v in held_by.items() if c in v)
    )


def _base_key(accelerator_key: str) -> str:
    manufacturer = naming.MANUFACTURERS.get(accelerator_key.split("-", 1)[0])
    return manufacturer.base if manufacturer else "nvidia.com/gpu"
