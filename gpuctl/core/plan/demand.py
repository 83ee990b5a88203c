"""The demand a partition plan places: the queue's pending Workloads, or ``--for``'s requests as Pods; and what a
submission asks of the cards (the mode, the partition instances, the whole cards at the least)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gpuctl.core import modes, naming
from gpuctl.core.fit import podset_demands
from gpuctl.core.instancetypes import InstanceType
from gpuctl.core.ledger import Capability
from gpuctl.core.naming import Family
from gpuctl.core.plan.steps import PlanError
from gpuctl.core.queueing import order_key, pending
from gpuctl.core.simulate import Simulator
from gpuctl.core.submissions import Submission, SubmittedPodSet, resubmission
from gpuctl.core.units import SHARES_PER_CARD, M
from gpuctl.core.workloads import PodSet, Workload


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


def target_mode(sub: Submission) -> tuple[str | None, str]:
    """The mode of card a submission needs (partitioned for a partition, whole for the other families) and its
    profile."""
    for ps in sub.podsets:
        for d in podset_demands(PodSet(ps.name, ps.count, ps.spec)):
            if d.family is Family.PARTITIONED:
                return modes.PARTITIONED, d.profile
            return modes.WHOLE, ""
    return None, ""


def slices_per_card(cap: Capability) -> int:
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


def whole_cards(subs: Sequence[Submission]) -> int:
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


def instances_of(sub: Submission) -> list[str]:
    """The partition profile of each instance a submission asks for."""
    out: list[str] = []
    for ps in sub.podsets:
        for d in podset_demands(PodSet(ps.name, ps.count, ps.spec)):
            if d.family is Family.PARTITIONED:
                out.extend([d.profile] * d.pods)
    return out


def asks_of(sub: Submission) -> str:
    from gpuctl.core.queueing import asks
    from gpuctl.core.workloads import parse_workload

    return asks(parse_workload(sub.workload_object()))


def demand_of(sim: Simulator, pool: str) -> list[Submission]:
    """The pool's pending Workloads as submissions in Kueue's order, taken out of the working copy (they are the
    demand a plan places)."""
    line = queue_demand(sim, pool)
    if line:
        sim.remove(w.key for w in line)
    return [resubmission(w) for w in line]
