"""Kueue's pending order: which Workloads wait in a ClusterQueue, and in which order Kueue will try them.

Kueue orders a ClusterQueue's pending Workloads (StrictFIFO and BestEffortFIFO alike) by priority, highest first
(``spec.priority``), then by its queue-order timestamp, then by UID. The timestamp is the Workload's creation, except
for a Workload evicted by the AdmissionCheck, or (with the default requeuing timestamp, ``Eviction``) by the PodsReady
timeout: then it is that eviction's time. A Workload evicted by preemption keeps its creation time. A Workload is
pending while it is active and holds no quota reservation, and is not finished.

The two strategies differ in what a head that cannot be admitted does: under ``BestEffortFIFO`` Kueue sets it aside
and tries the next; under ``StrictFIFO`` it stays at the head and every Workload behind it in its ClusterQueue waits.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gpuctl.core import gpustack, naming
from gpuctl.core.pods import Pod
from gpuctl.core.workloads import Condition, LocalQueue, Workload


def pending(w: Workload) -> bool:
    return w.active and not w.quota_reserved and not w.admitted and not w.finished


EVICTION = "Eviction"
CREATION = "Creation"
"""Kueue's ``waitForPodsReady.requeuingStrategy.timestamp`` values (``Eviction`` is its default)."""
EVICTED_BY_PODS_READY_TIMEOUT = "PodsReadyTimeout"
EVICTED_BY_ADMISSION_CHECK = "AdmissionCheck"
STRICT_FIFO = "StrictFIFO"


def queue_timestamp(w: Workload, requeuing: str = EVICTION) -> str:
    """The time Kueue orders a pending Workload by: the eviction's, while it is evicted by the AdmissionCheck (or by
    the PodsReady timeout, when requeuing by eviction time); else its creation."""
    evicted = w.conditions.get("Evicted")
    by_eviction = evicted is not None and (
        evicted.reason == EVICTED_BY_ADMISSION_CHECK
        or (evicted.reason == EVICTED_BY_PODS_READY_TIMEOUT and requeuing == EVICTION)
    )
    if evicted is not None and by_eviction and evicted.true and evicted.last_transition:
        return evicted.last_transition
    return w.created


def order_key(w: Workload, requeuing: str = EVICTION) -> tuple[int, float, str, str]:
    """Kueue's order: priority (highest first), queue-order timestamp (earliest first; none is Kubernetes' zero
    time, before any other), then UID."""
    ts = queue_timestamp(w, requeuing)
    seconds = epoch_seconds(ts) if ts else None
    return (-w.priority, seconds if seconds is not None else float("-inf"), ts, w.uid)


def cluster_queues_of(workloads: Iterable[Workload], local_queues: Iterable[LocalQueue]) -> dict[str, str]:
    """Each Workload's ClusterQueue (by key): its admission's, else the one its LocalQueue points at ("" for none)."""
    lq = {(q.namespace, q.name): q.cluster_queue for q in local_queues}
    return {w.key: cluster_queue_of(w, lq) for w in workloads}


def cluster_queue_of(w: Workload, local_queues: Mapping[tuple[str, str], str]) -> str:
    """One Workload's ClusterQueue: its admission's, else the one its LocalQueue (``local_queues``: ClusterQueue by
    LocalQueue ``(namespace, name)``) points at ("" for none)."""
    return w.cluster_queue or local_queues.get((w.namespace, w.queue_name), "")


def pending_order(
    workloads: Iterable[Workload], cluster_queue_of: Mapping[str, str], cluster_queue: str, requeuing: str = EVICTION
) -> list[Workload]:
    """The pending Workloads of one ClusterQueue in Kueue's order (``cluster_queue_of`` maps a Workload key to the
    ClusterQueue its LocalQueue points at)."""
    return sorted(
        (w for w in workloads if pending(w) and cluster_queue_of.get(w.key) == cluster_queue),
        key=lambda w: order_key(w, requeuing),
    )


@dataclass(frozen=True, slots=True)
class Position:
    """Where a pending Workload stands in its ClusterQueue (1-based), and who is ahead."""

    position: int
    total: int
    ahead: tuple[Workload, ...]


def position_of(w: Workload, ordered: list[Workload]) -> Position | None:
    for i, other in enumerate(ordered):
        if other.key == w.key:
            return Position(i + 1, len(ordered), tuple(ordered[:i]))
    return None


def epoch_seconds(rfc3339: str) -> float | None:
    """An RFC 3339 time (as the API server writes it) in seconds since the epoch; None when it is not one."""
    from datetime import datetime

    try:
        return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def runtime_bound(w: Workload, label: str | None) -> int | None:
    """The longest a Workload can run: ``spec.maximumExecutionTimeSeconds``, else the value of the label the admin
    names (whole seconds); None when neither says."""
    if w.max_execution_seconds is not None and w.max_execution_seconds > 0:
        return w.max_execution_seconds
    raw = w.labels.get(label) if label else None
    return int(raw) if raw is not None and raw.isdigit() and int(raw) > 0 else None


def wait_bound(ahead: Iterable[Workload], running: Iterable[Workload], now: float, label: str | None) -> int | None:
    """An upper bound on a pending Workload's wait, in seconds, or None when it cannot be honest.

    Every Workload its queue has admitted finishes at the latest when its runtime bound runs out after its admission,
    and every one ahead of it then runs at most its own bound, one after another. The bound holds while no Workload of
    higher priority joins the queue and nothing is preempted; it needs a runtime bound on every admitted Workload and
    every one ahead (``maximumExecutionTimeSeconds`` or the admin's label), else there is none.
    """
    latest = 0.0
    for r in running:
        bound = runtime_bound(r, label)
        admitted = r.conditions.get("Admitted")
        started = epoch_seconds(admitted.last_transition) if admitted is not None and admitted.last_transition else None
        if bound is None or started is None:
            return None
        latest = max(latest, started + bound - now)
    total = max(0.0, latest)
    for a in ahead:
        bound = runtime_bound(a, label)
        if bound is None:
            return None
        total += bound
    return int(total + 0.999)


def asks(w: Workload) -> str:
    """What a Workload asks, per PodSet, in its view's own unit: ``2 x 60 % slice``, ``1 x 3 whole cards``."""
    from gpuctl.core.fit import podset_demands
    from gpuctl.core.naming import Family

    parts = []
    for ps in w.podsets:
        demands = podset_demands(ps)
        if not demands:
            parts.append(f"{ps.count} x no accelerator")
            continue
        d = demands[0]
        if d.family is Family.EXCLUSIVE:
            what = f"{d.cards} whole card{'s' if d.cards != 1 else ''}"
        elif d.family is Family.SHARED:
            what = f"shares on {d.cards} card{'s' if d.cards != 1 else ''}"
        elif d.family is Family.SLICED:
            what = f"{-(-d.units * 100 // 1_600_000)} % slice"
        else:
            what = f"{d.profile} partition"
        parts.append(f"{ps.count} x {what}")
    return ", ".join(parts)


def pods_by_workload(pods: Iterable[Pod]) -> dict[str, list[Pod]]:
    """Pods by the ``namespace/name`` of the Workload they belong to (once, rather than a scan per Workload)."""
    out: dict[str, list[Pod]] = {}
    for p in pods:
        if p.workload:
            out.setdefault(f"{p.namespace}/{p.workload}", []).append(p)
    return out


def standing_eviction(w: Workload) -> Condition | None:
    """Kueue's eviction of the Workload that still stands: ``Evicted`` (or ``Preempted``) true and not older than
    its quota reservation (a Workload admitted again after an eviction keeps the old condition)."""
    reserved = w.conditions.get("QuotaReserved")
    reserved_at = epoch_seconds(reserved.last_transition) if reserved and reserved.true else None
    for kind in ("Evicted", "Preempted"):
        c = w.conditions.get(kind)
        if c is None or not c.true:
            continue
        at = epoch_seconds(c.last_transition)
        if reserved_at is None or at is None or at >= reserved_at:
            return c
    return None


def held_gate(w: Workload, own_pods: Iterable[Pod]) -> int | None:
    """The gate that holds a Workload, read from its conditions and its own Pods alone (None when it runs or has
    finished): 3 for one GPUStack's joint check parked; 2 before quota is reserved (a deactivated Workload too) and while an eviction is carried out, 3 until Kueue admits it, 4 while it has no Pod
    or a Pod is unbound, 5 while a bound Pod's accelerators are not recorded by Allocate or Allocate refused one. These
    are the verdicts ``explain`` reaches on the same records (its gate 1 aside: :func:`gpuctl.core.explain.held_at`
    adds it); ``explain`` gives the reasons, this is the count a dashboard needs."""
    if w.finished:
        return None
    joint = w.check(gpustack.JOINT_CHECK)
    if joint is not None and gpustack.parked(w.active, joint.message):
        return 3  # parked by GPUStack's joint check: deactivated, it holds no quota
    if not w.quota_reserved or standing_eviction(w) is not None:
        return 2
    if not w.admitted:
        return 3
    pods = list(own_pods)
    if not pods or any(not p.node_name for p in pods):
        return 4
    if any(p.reason == "UnexpectedAdmissionError" for p in pods):
        return 5
    if any(p.accelerator_containers and not p.held and not p.finished for p in pods):
        return 5
    return None


def missing_local_queue_hint(queue_name: str, namespace: str, pools: Iterable[str] = ()) -> str:
    """What to do when a Workload names a LocalQueue its namespace does not have: an entrance's name (of one of
    ``pools``, or shaped as one) is created by the operator in every non-system namespace, so the namespace is the
    question; any other name is not a queue gpuctl's pools serve."""
    owner = next((p for p in pools if naming.queue_entrance(p) == queue_name), None)
    if owner is not None or (queue_name.startswith(naming.ENTRANCE_PREFIX) and len(queue_name) == 31):
        whose = f"InstanceType {owner}'s entrance" if owner else "an InstanceType's entrance"
        return (
            f"{queue_name} is {whose}, which the operator creates in every non-system namespace: namespace "
            f"{namespace} has none yet (a system namespace, or one created moments ago); "
            f"kubectl get localqueues.kueue.x-k8s.io -n {namespace}"
        )
    return "submit to the entrance of an InstanceType (its status.entrance)"
