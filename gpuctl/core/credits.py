"""Gate 2, Kueue's ``credits`` quota: the resource transformation, credits per Pod and PodSet, nominal quota.

Kueue replaces each accelerator key by ``credits.gpustack.ai/<manufacturer>`` (strategy ``Replace``): a whole card is
M credits, a share token M/10, ``.sliced.units`` counts once per ``.sliced`` token (``multiplyBy``), and
``.partitioned.units`` counts as it is (for manufacturers that partition). A scalar total cannot see fragmentation.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from gpuctl.core import naming
from gpuctl.core.naming import KeyKind
from gpuctl.core.units import SHARE, M, QuantityError, parse_quantity


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if type(value) is dict or isinstance(value, Mapping) else {}  # dicts first: the ABC check is slow


def _list(value: Any) -> list[Any]:
    return value if type(value) is list else []


def _quantity(raw: Any) -> Fraction:
    try:
        return parse_quantity(raw)
    except QuantityError:
        return Fraction(0)


def container_requests(container: Mapping[str, Any]) -> dict[str, Fraction]:
    """A container's effective requests: limits merged with requests, requests winning (as Kubernetes defaults them)."""
    resources = _mapping(container.get("resources"))
    merged = {str(k): _quantity(v) for k, v in _mapping(resources.get("limits")).items()}
    merged.update({str(k): _quantity(v) for k, v in _mapping(resources.get("requests")).items()})
    return merged


def _add(total: dict[str, Fraction], extra: Mapping[str, Fraction]) -> None:
    for k, v in extra.items():
        total[k] = total.get(k, Fraction(0)) + v


def resources_key(spec: Mapping[str, Any]) -> tuple[Any, ...] | None:
    """What :func:`pod_requests` reads of a Pod spec, as a hashable key; None where a part is anything but the plain
    data an API object holds (a map of text or whole numbers), which is then read uncached.

    Thousands of Pods and Workloads of a cluster share a few shapes: each shape's requests are computed once."""
    return _containers_key(spec, None)


def template_key(spec: Mapping[str, Any]) -> tuple[Any, ...] | None:
    """:func:`resources_key` with each container's name (as written: a missing name and a null one differ): what a
    Pod template's shape is read for, its requests and which containers ask what; None as for resources_key."""
    names: list[Any] = []
    resources = _containers_key(spec, names)
    return None if resources is None else (resources, tuple(names))


def _containers_key(spec: Mapping[str, Any], names: list[Any] | None) -> tuple[Any, ...] | None:
    key: list[Any] = []
    for section in ("initContainers", "containers"):
        for c in _list(spec.get(section)):
            if type(c) is not dict:
                return None
            if names is not None:
                name = c.get("name", "")
                if name is not None and type(name) is not str:
                    return None
                names.append(name)
            resources = c.get("resources")
            if resources is not None and type(resources) is not dict:
                return None
            parts: list[Any] = [section, section == "initContainers" and c.get("restartPolicy") == "Always"]
            for part in ("limits", "requests"):
                values = resources.get(part) if resources else None
                if values is None:
                    parts.append(())
                    continue
                if type(values) is not dict or len(values) > MEMO_CONTAINERS:
                    return None
                for k, v in values.items():
                    if type(k) is not str or (type(v) is not str and type(v) is not int):
                        return None
                parts.append(tuple(sorted(values.items())))
            key.append(tuple(parts))
            if len(key) > MEMO_CONTAINERS:
                return None
    return tuple(key)


MEMO_CONTAINERS = 32
"""The most containers (and resources per container) a memoised shape has: a key is kept as long as the process,
so an outsized Pod is read uncached."""


_MEMO_SIZE = 4096
_POD_REQUESTS: dict[Any, dict[str, Fraction]] = {}


def pod_requests(spec: Mapping[str, Any]) -> dict[str, Fraction]:
    """A Pod's effective requests, as the scheduler and Kueue count them.

    The larger of (app containers + native sidecars) and, for each init container, itself plus the sidecars started
    before it.
    """
    key = resources_key(spec)
    got = _POD_REQUESTS.get(key) if key is not None else None
    if got is None:
        got = _pod_requests(spec)
        if key is not None and len(_POD_REQUESTS) < _MEMO_SIZE:
            _POD_REQUESTS[key] = got
    return dict(got)


def _pod_requests(spec: Mapping[str, Any]) -> dict[str, Fraction]:
    running: dict[str, Fraction] = {}
    sidecars: dict[str, Fraction] = {}
    init_peak: dict[str, Fraction] = {}
    for c in _list(spec.get("initContainers")):
        c = _mapping(c)
        req = container_requests(c)
        if c.get("restartPolicy") == "Always":
            _add(sidecars, req)
            continue
        during = dict(sidecars)
        _add(during, req)
        for k, v in during.items():
            init_peak[k] = max(init_peak.get(k, Fraction(0)), v)
    for c in _list(spec.get("containers")):
        _add(running, container_requests(_mapping(c)))
    _add(running, sidecars)
    keys = set(running) | set(init_peak)
    return {k: max(running.get(k, Fraction(0)), init_peak.get(k, Fraction(0))) for k in keys}


def transform(requests: Mapping[str, Fraction]) -> dict[str, int]:
    """Kueue's resource transformation: accelerator keys become ``credits.gpustack.ai/<manufacturer>``.

    Keys that are not transformed (cpu, memory, …) are left out.
    """
    credits: dict[str, Fraction] = {}
    per_mfr: dict[str, dict[KeyKind, Fraction]] = {}
    for name, value in requests.items():
        key = naming.classify_resource(name)
        if key is None:
            continue
        per_mfr.setdefault(key.manufacturer.name, {})[key.kind] = value
    for mfr_name, kinds in per_mfr.items():
        mfr = naming.MANUFACTURERS[mfr_name]
        total = kinds.get(KeyKind.EXCLUSIVE, Fraction(0)) * M
        total += kinds.get(KeyKind.SHARED, Fraction(0)) * SHARE
        total += kinds.get(KeyKind.SLICED_UNITS, Fraction(0)) * kinds.get(KeyKind.SLICED, Fraction(0))
        if mfr.partition_kind is not None:
            total += kinds.get(KeyKind.PARTITIONED_UNITS, Fraction(0))
        if total:
            credits[mfr.credits] = credits.get(mfr.credits, Fraction(0)) + total
    return {k: int(v) for k, v in credits.items()}


def pod_credits(spec: Mapping[str, Any]) -> dict[str, int]:
    """Credits one Pod of this spec consumes, per credits resource."""
    return transform(pod_requests(spec))


def podset_credits(podset: Mapping[str, Any]) -> dict[str, int]:
    """Credits of a Workload PodSet: one Pod's credits times its count."""
    template = _mapping(_mapping(podset.get("template")).get("spec"))
    count = podset.get("count", 1)
    n = count if isinstance(count, int) and not isinstance(count, bool) else 1
    return {k: v * n for k, v in pod_credits(template).items()}


def workload_credits(podsets: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    total: dict[str, int] = {}
    for ps in podsets:
        for k, v in podset_credits(ps).items():
            total[k] = total.get(k, 0) + v
    return total


def nominal_quota(nodes: int, cards_per_node: int) -> int:
    """A flavor's nominal quota in credits: its capacity (nodes x cards) times M."""
    return nodes * cards_per_node * M


@dataclass(frozen=True, slots=True)
class QuotaCheck:
    """Whether a request fits a ClusterQueue's quota for one credits resource, and by how much it falls short."""

    resource: str
    requested: int
    nominal: int
    used: int

    @property
    def available(self) -> int:
        return max(0, self.nominal - self.used)

    @property
    def fits(self) -> bool:
        return self.requested <= self.available

    @property
    def shortfall(self) -> int:
        return max(0, self.requested - self.available)

    @property
    def shortfall_cards(self) -> Fraction:
        return Fraction(self.shortfall, M)

    def summary(self) -> str:
        def cards(credits: int) -> str:
            c = Fraction(credits, M)
            return cards_text(c)

        if self.fits:
            return (
                f"{self.resource}: requests {self.requested} credits ({cards(self.requested)}); "
                f"{self.available} of {self.nominal} free ({cards(self.available)} of {cards(self.nominal)})"
            )
        return (
            f"{self.resource}: requests {self.requested} credits ({cards(self.requested)}) but only "
            f"{self.available} of {self.nominal} are free; short by {self.shortfall} credits "
            f"({cards(self.shortfall)})"
        )


def cards_text(cards: Fraction) -> str:
    """``1 card``, ``3 cards``, ``0.5 cards``."""
    if cards.denominator == 1:
        return f"{cards.numerator} card" + ("" if cards.numerator == 1 else "s")
    return f"{float(cards):.2f} cards"


def check_quota(requested: Mapping[str, int], nominal: Mapping[str, int], used: Mapping[str, int]) -> list[QuotaCheck]:
    """One QuotaCheck per requested credits resource, against a queue's nominal quota and current usage."""
    return [QuotaCheck(r, v, nominal.get(r, 0), used.get(r, 0)) for r, v in sorted(requested.items())]


def quota_from_cluster_queue(resource_groups: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """Σ nominalQuota per covered resource over every flavor of a ClusterQueue's ``spec.resourceGroups``."""
    total: dict[str, int] = {}
    for rg in _list(resource_groups):
        for flavor in _list(_mapping(rg).get("flavors")):
            for res in _list(_mapping(flavor).get("resources")):
                res = _mapping(res)
                name = str(res.get("name", ""))
                total[name] = total.get(name, 0) + int(_quantity(res.get("nominalQuota", 0)))
    return total


def usage_from_cluster_queue(status: Mapping[str, Any], field: str = "flavorsReservation") -> dict[str, int]:
    """Σ ``total`` per resource over a ClusterQueue's ``status.flavorsReservation`` (or ``flavorsUsage``)."""
    total: dict[str, int] = {}
    for flavor in _list(status.get(field)):
        for res in _list(_mapping(flavor).get("resources")):
            res = _mapping(res)
            name = str(res.get("name", ""))
            total[name] = total.get(name, 0) + int(_quantity(res.get("total", 0)))
    return total


def kueue_resources_config() -> dict[str, Any]:
    """Kueue's ``resources`` configuration that folds every accelerator key into ``credits.gpustack.ai/<mfr>``.

    Whole cards, shares and ``.units`` become credits (strategy ``Replace``); the bare slice and partition tokens only
    scale or mark a request and count 0; the percent, MiB and per-profile sub-keys and the visibility keys are left
    out, so a queue that covers only credits never sees an undeclared accelerator key.
    """
    transformations: list[dict[str, Any]] = []
    exclude: list[str] = ["device.gpustack.ai/"]

    def replace(name: str, credits: str, factor: int, multiply_by: str | None = None) -> None:
        t: dict[str, Any] = {"input": name, "strategy": "Replace", "outputs": {credits: str(factor)}}
        if multiply_by:
            t["multiplyBy"] = multiply_by
        transformations.append(t)

    for mfr in sorted(naming.MANUFACTURERS.values(), key=lambda m: m.name):
        names = mfr.resources
        replace(names.base, mfr.credits, M)
        replace(names.shared, mfr.credits, SHARE)
        replace(names.sliced_units, mfr.credits, 1, names.sliced)
        replace(names.sliced, mfr.credits, 0)
        exclude += [names.sliced + ".cores-", names.sliced + ".memory-"]
        if mfr.partition_kind is not None:
            replace(names.partitioned_units, mfr.credits, 1)
            replace(names.partitioned, mfr.credits, 0)
            exclude.append(f"{names.partitioned}.{mfr.partition_kind}-")
    return {"excludeResourcePrefixes": exclude, "transformations": transformations}


@dataclass(frozen=True, slots=True)
class QuotaRoom:
    """How much of one resource a ClusterQueue can still take in one flavor: its own nominal left, plus what its
    cohort can lend within its borrowing limit."""

    resource: str
    flavor: str
    nominal: Fraction
    used: Fraction
    available: Fraction

    @property
    def borrowable(self) -> Fraction:
        """What the cohort adds beyond the queue's own nominal left (negative when others borrowed from it)."""
        return self.available - max(Fraction(0), self.nominal - self.used)


def quota_room(
    cq: str,
    flavor: str,
    resource: str,
    quotas: Mapping[str, Sequence[Any]],
    cohorts: Mapping[str, str],
    usage: Mapping[tuple[str, str, str], Fraction | int],
) -> QuotaRoom | None:
    """Kueue's available quota of ``resource`` in ``flavor`` for ClusterQueue ``cq`` in a flat cohort, or None when
    the queue covers no such pair.

    ``quotas`` maps each queue to its :class:`~gpuctl.core.workloads.FlavorQuota` entries, ``cohorts`` a queue to
    its cohort, ``usage`` (queue, flavor, resource) to what its reserved Workloads take. A queue keeps
    ``nominal - lendingLimit`` to itself; the rest of every member's nominal is the cohort's, and a queue may take
    from the cohort what the other members leave unused, at most ``borrowingLimit`` beyond its own nominal.
    """
    own = next((q for q in quotas.get(cq, ()) if q.flavor == flavor and q.resource == resource), None)
    if own is None:
        return None
    used = Fraction(usage.get((cq, flavor, resource), 0))
    cohort = cohorts.get(cq, "")
    if not cohort:
        return QuotaRoom(resource, flavor, own.nominal, used, max(Fraction(0), own.nominal - used))

    def guaranteed(q: Any) -> Fraction:
        return max(Fraction(0), q.nominal - q.lending_limit) if q.lending_limit is not None else Fraction(0)

    pool = Fraction(0)
    pool_used = Fraction(0)
    for member, entries in quotas.items():
        if cohorts.get(member) != cohort:
            continue
        for q in entries:
            if q.flavor == flavor and q.resource == resource:
                g = guaranteed(q)
                pool += q.nominal - g
                pool_used += max(Fraction(0), usage.get((member, flavor, resource), Fraction(0)) - g)
    local_left = max(Fraction(0), guaranteed(own) - used)
    from_cohort = max(Fraction(0), pool - pool_used)
    if own.borrowing_limit is not None:
        stored = own.nominal - guaranteed(own)
        in_cohort = max(Fraction(0), used - guaranteed(own))
        from_cohort = min(from_cohort, max(Fraction(0), stored - in_cohort + own.borrowing_limit))
    return QuotaRoom(resource, flavor, own.nominal, used, local_left + from_cohort)
