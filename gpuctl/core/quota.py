"""Gate 2's books: what each ClusterQueue has used of each flavor's quota, as Kueue admits against it.

Kueue admits a Workload against the usage its ClusterQueue reports in ``status.flavorsReservation`` (falling back to
``status.flavorsUsage``), not against a sum of the Workloads it holds. ``explain`` and ``simulate`` both start from
:func:`quota_book`: a queue's own reported usage where its status carries one, else the sum of the reserved Workloads
read. Where the two disagree (a status a moment behind, a snapshot cut between writes), :meth:`QuotaBook.differences`
says so with both numbers, so neither command hides which one it judged by.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from gpuctl.core import naming
from gpuctl.core.credits import QuotaRoom, cards_text, pod_requests, quota_room, resources_key, transform
from gpuctl.core.units import M
from gpuctl.core.workloads import ClusterQueue, PodSet, Workload

UsageKey = tuple[str, str, str]
"""(ClusterQueue, flavor, resource)."""


_TRANSFORMED = frozenset(
    {
        naming.KeyKind.EXCLUSIVE,
        naming.KeyKind.SHARED,
        naming.KeyKind.SLICED,
        naming.KeyKind.SLICED_UNITS,
        naming.KeyKind.PARTITIONED,
        naming.KeyKind.PARTITIONED_UNITS,
    }
)
"""The accelerator keys Kueue's resource transformations turn into credits (the percent, MiB and per-profile ones
are excluded from quota)."""


def quota_requests(spec: Mapping[str, Any]) -> dict[str, Fraction]:
    """One Pod's requests as Kueue's quota counts them: accelerator keys folded into credits, the rest as is (the
    device-visibility keys are excluded from quota).

    A Pod asking any transformed key of a manufacturer asks its credits, even when they come to 0 (a slice whose
    template carries no folded units): Kueue still assigns the queue's flavor to that zero request, so the Workload
    is placed by TAS and carries the check."""
    return dict(_memoised(spec, resources_key(spec)))


def podset_quota_requests(ps: PodSet) -> Mapping[str, Fraction]:
    """:func:`quota_requests` of one Pod of a PodSet, read once per template shape (shared: the caller only reads
    it)."""
    return _memoised(ps.spec, ps.shape[0] if ps.shape is not None else None)


_QUOTA_REQUESTS: dict[Any, dict[str, Fraction]] = {}


def _memoised(spec: Mapping[str, Any], key: Any) -> dict[str, Fraction]:
    got = _QUOTA_REQUESTS.get(key) if key is not None else None
    if got is None:
        got = _quota_requests(spec)
        if key is not None and len(_QUOTA_REQUESTS) < 4096:
            _QUOTA_REQUESTS[key] = got
    return got


def _quota_requests(spec: Mapping[str, Any]) -> dict[str, Fraction]:
    raw = pod_requests(spec)
    out: dict[str, Fraction] = {k: Fraction(v) for k, v in transform(raw).items()}
    for k, v in raw.items():
        key = naming.classify_resource(k)
        if key is None:
            if not k.startswith("device.gpustack.ai/") and v:
                out[k] = out.get(k, Fraction(0)) + v
        elif key.kind in _TRANSFORMED and v:
            out.setdefault(key.manufacturer.credits, Fraction(0))
    return out


def amount_text(resource: str, value: Fraction | int) -> str:
    """A quota amount in its resource's words: credits with their cards, anything else as a plain number."""
    value = Fraction(value)
    if resource.startswith(naming.CREDITS_PREFIX):
        return f"{int(value)} credits ({cards_text(value / M)})"
    return str(value.numerator) if value.denominator == 1 else f"{float(value):g}"


def workload_usage(
    w: Workload, requests: Callable[[PodSet], Mapping[str, Any]] = podset_quota_requests
) -> dict[UsageKey, Fraction]:
    """What a reserved Workload takes of its ClusterQueue's quota, per flavor and resource (empty when it holds no
    reservation). ``requests`` maps a PodSet to one Pod's quota requests (callers memoise it)."""
    out: dict[UsageKey, Fraction] = {}
    if not w.quota_reserved or w.finished or not w.cluster_queue:
        return out
    for ps in w.podsets:
        a = w.assignment(ps.name)
        if a is None:
            continue
        count = a.count or ps.count
        for resource, value in requests(ps).items():
            flavor = a.flavors.get(resource)
            if flavor:
                key = (w.cluster_queue, flavor, resource)
                out[key] = out.get(key, 0) + value * count  # ints stay ints: thousands of Workloads are summed
    return out


@dataclass(frozen=True)
class QuotaBook:
    """Every ClusterQueue's quota and what it has used of it, as Kueue admits against it."""

    queues: Mapping[str, ClusterQueue]
    usage: Mapping[UsageKey, Fraction]
    """What each queue has used: its status's report where it carries one, else the sum of its Workloads."""
    counted: Mapping[UsageKey, Fraction] = field(default_factory=dict)
    """The same, summed over the reserved Workloads read."""

    def room(
        self, cq: str, flavor: str, resource: str, usage: Mapping[UsageKey, Fraction] | None = None
    ) -> QuotaRoom | None:
        """Kueue's available quota of ``resource`` in ``flavor`` for ``cq`` (with cohort borrowing), against this
        book's usage or the one given (a working copy's)."""
        return quota_room(
            cq,
            flavor,
            resource,
            {n: q.quotas for n, q in self.queues.items()},
            {n: q.cohort for n, q in self.queues.items()},
            self.usage if usage is None else usage,
        )

    def differences(self, cq: str) -> list[str]:
        """Where a queue's reported usage and its Workloads' sum disagree, one line each with both numbers."""
        queue = self.queues.get(cq)
        if queue is None or not queue.reported_field:
            return []
        out = []
        keys = sorted({k for k in (*self.usage, *self.counted) if k[0] == cq})
        for key in keys:
            reported = self.usage.get(key, Fraction(0))
            counted = self.counted.get(key, Fraction(0))
            if reported != counted:
                _, flavor, resource = key
                out.append(
                    f"ClusterQueue {cq} reports {amount_text(resource, reported)} of {resource} used in flavor "
                    f"{flavor} (status.{queue.reported_field}), which Kueue admits against; the reserved Workloads "
                    f"read add up to {amount_text(resource, counted)}"
                )
        return out


def quota_book(
    queues: Mapping[str, ClusterQueue],
    workloads: Iterable[Workload],
    requests: Callable[[PodSet], Mapping[str, Any]] = podset_quota_requests,
) -> QuotaBook:
    """The books of every queue: each one's reported usage where its status has one, else its Workloads' sum."""
    counted: dict[UsageKey, Fraction] = {}
    for w in workloads:
        for key, value in workload_usage(w, requests).items():
            counted[key] = counted.get(key, 0) + value
    usage = dict(counted)
    for name, q in queues.items():
        if not q.reported_field:
            continue
        for key in [k for k in usage if k[0] == name]:
            del usage[key]
        for flavor, resource, total in q.reported:
            usage[(name, flavor, resource)] = total
    return QuotaBook(queues, usage, counted)


@dataclass(frozen=True, slots=True)
class FlavorQuota:
    """One flavor tried for a PodSet's quota: its lines of evidence and what it is short of (empty when it fits)."""

    flavor: str
    lines: tuple[str, ...]
    short: tuple[str, ...]


def flavor_quotas(
    book: QuotaBook,
    cq: ClusterQueue,
    wanted: Mapping[str, Fraction | int],
    usage: Mapping[UsageKey, Fraction] | None = None,
    taken: Mapping[tuple[str, str], Fraction] | None = None,
) -> list[FlavorQuota]:
    """Each flavor of ``cq`` that covers a PodSet's requests (``wanted``, resource → amount for all its Pods), in the
    order Kueue tries them, with the quota room of each resource; ``taken`` is what earlier PodSets of the same
    Workload already took (flavor, resource → amount)."""
    flavors = list(dict.fromkeys(q.flavor for q in cq.quotas if q.resource in wanted))
    out = []
    for fname in flavors:
        lines = []
        short = []
        for resource, value in sorted(wanted.items()):
            room = book.room(cq.name, fname, resource, usage)
            if room is None:
                continue
            available = room.available - (taken or {}).get((fname, resource), Fraction(0))
            lines.append(
                f"{resource} in flavor {fname}: requests {amount_text(resource, value)}; "
                f"{amount_text(resource, max(available, Fraction(0)))} available "
                f"(nominal {amount_text(resource, room.nominal)}, used {amount_text(resource, room.used)})"
            )
            if value > available:
                short.append(
                    f"insufficient unused quota for {resource} in flavor {fname}, "
                    f"{amount_text(resource, value - max(available, Fraction(0)))} more needed"
                )
        out.append(FlavorQuota(fname, tuple(lines), tuple(short)))
    return out
