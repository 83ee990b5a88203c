"""Who holds what, per pool: each grant in its mode's own unit and in one comparable unit, the card-equivalent.

A card-equivalent is the design's own credits fold divided by a whole card's ``M``: an exclusive card is 1, a shared
grant its share (0.1), a logical slice its memory share, and a hardware partition what a slice of the same VRAM
costs (``floor(profile MiB x M / card MiB) / M``, so ``3g.40gb`` on an 80 GB card is 0.5). Grants are read from the
Pods' allocation records, priced against the node's ledger; what the ledger charges that no Pod's record names is
kept apart as unattributed, so the rows always add up to the ledger. Cards an admitted Workload reserved whose Pods
hold no allocation yet (quota held, nothing running) are counted beside, from Kueue's ``resourceUsage``.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from fractions import Fraction
from typing import Any

from gpuctl.core import naming
from gpuctl.core.credits import pod_credits, pod_requests
from gpuctl.core.instancetypes import InstanceType
from gpuctl.core.ledger import Card, Group, Mode, NodeDevices
from gpuctl.core.pods import CardAllocation, Pod
from gpuctl.core.requests import partitioned_units
from gpuctl.core.units import PERCENT, SHARE, M
from gpuctl.core.variants import judged, standing
from gpuctl.core.views import in_pool
from gpuctl.core.workloads import LocalQueue, Workload

ZERO = Fraction(0)
UNATTRIBUTED = "<none>"
"""The owner of what the ledger charges that no Pod's allocation record names."""


class By(str, Enum):
    """What the rows of ``usage`` are grouped by."""

    NAMESPACE = "namespace"
    LOCALQUEUE = "localqueue"
    CLUSTERQUEUE = "clusterqueue"
    INSTANCETYPE = "instancetype"
    WORKLOAD = "workload"


MODES = ("exclusive", "shared", "sliced", "partitioned")


@dataclass(frozen=True, slots=True)
class Owner:
    """Whose a grant is: the Pod's namespace, its LocalQueue and ClusterQueue, and its Workload ("" when none)."""

    namespace: str = ""
    local_queue: str = ""
    cluster_queue: str = ""
    workload: str = ""

    def row_key(self, by: By) -> tuple[str, str]:
        """``(namespace, name)`` of the row this owner is summed into ("" namespace for cluster-scoped rows)."""
        if by is By.NAMESPACE:
            return "", self.namespace or UNATTRIBUTED
        if by is By.CLUSTERQUEUE:
            return "", self.cluster_queue or UNATTRIBUTED
        if by is By.INSTANCETYPE:
            return "", ""  # one row per pool: the pool is the row
        if by is By.LOCALQUEUE:
            return self.namespace, self.local_queue or UNATTRIBUTED
        return self.namespace, self.workload or UNATTRIBUTED


@dataclass(slots=True)
class Holding:
    """What one owner holds in one pool: each mode in its own unit, and in card-equivalents."""

    pool: str
    owner: Owner
    cards: int = 0
    """Exclusive cards."""
    shares: int = 0
    slices: int = 0
    slice_units: int = 0
    """Memory units of the slices (M/100 is one percent of a card)."""
    partitions: dict[str, int] = field(default_factory=dict)
    """Partition instances by profile, in the published spelling."""
    cpu: Fraction = ZERO
    """Cores requested by running Pods (CPU pools)."""
    units: dict[str, int] = field(default_factory=dict)
    """Card-equivalents per mode (``MODES``), in the ledger's units (``M`` to a card): integers, summed exactly and
    fast; :attr:`equivalents` gives them as fractions of a card."""
    reserved: Fraction = ZERO
    """Card-equivalents reserved by admitted Workloads whose Pods hold no allocation yet."""
    reserved_cpu: Fraction = ZERO
    reserved_workloads: int = 0
    reserved_pods: int = 0
    pods: int = 0
    node: str = ""
    pod: str = ""
    """The Pod whose grants these are ("" for a sum, the unattributed rest, or a reservation)."""
    per_card: dict[tuple[str, str, str, str], int] = field(default_factory=dict)
    """One Pod's units per (card id, partition profile, partition id, mode): what ``gpuctl_card_holder`` exports."""

    @property
    def equivalents(self) -> dict[str, Fraction]:
        """Card-equivalents per mode."""
        return {mode: Fraction(u, M) for mode, u in self.units.items()}

    @property
    def card_equivalents(self) -> Fraction:
        return Fraction(sum(self.units.values()), M)

    def add(self, other: Holding) -> None:
        self.cards += other.cards
        self.shares += other.shares
        self.slices += other.slices
        self.slice_units += other.slice_units
        for name, n in other.partitions.items():
            self.partitions[name] = self.partitions.get(name, 0) + n
        self.cpu += other.cpu
        for mode, u in other.units.items():
            self.units[mode] = self.units.get(mode, 0) + u
        self.reserved += other.reserved
        self.reserved_cpu += other.reserved_cpu
        self.reserved_workloads += other.reserved_workloads
        self.reserved_pods += other.reserved_pods
        self.pods += other.pods


def _charge(h: Holding, mode: str, units: int) -> None:
    h.units[mode] = h.units.get(mode, 0) + units


def partition_units(card: Card | None, group: Group | None, profile: str) -> tuple[str, int]:
    """A partition's published profile name and its card-equivalent in units: the same-VRAM slice's units (``M`` to a
    card)."""
    if card is not None and group is not None and group.memory_mib > 0:
        for p in card.profiles:
            if profile in (p.name, p.published):
                return p.published, min(partitioned_units(p.memory_mib, group.memory_mib), M)
    return profile, 0


def charge_grant(h: Holding, grant: CardAllocation, card: Card | None, group: Group | None) -> None:
    """Add one card grant of a Pod's allocation record to a holding (and, for a Pod's own, to its card's row)."""
    profile = ""
    if grant.mode == Mode.EXCLUSIVE:
        h.cards += 1
        mode, units = "exclusive", M
    elif grant.mode == Mode.SHARED:
        allocated = max(grant.allocated, 0)
        h.shares += allocated // SHARE
        mode, units = "shared", min(allocated, M)
    elif grant.mode == Mode.SLICED:
        allocated = max(grant.allocated, 0)
        h.slices += 1
        h.slice_units += allocated
        mode, units = "sliced", min(allocated, M)
    elif grant.mode == Mode.PARTITIONED:
        profile, units = partition_units(card, group, grant.profile)
        h.partitions[profile] = h.partitions.get(profile, 0) + 1
        mode = "partitioned"
    else:
        return
    _charge(h, mode, units)
    if h.pod:
        key = (grant.card_id, profile, grant.physical_id, mode)
        h.per_card[key] = h.per_card.get(key, 0) + units


@dataclass(frozen=True, slots=True)
class _Where:
    pool: str
    group: Group
    cards: Mapping[str, Card]


def _node_pools(d: NodeDevices | None, accelerated: Sequence[tuple[str, str, Mapping[str, str]]]) -> dict[str, _Where]:
    """A node's accelerator models, each in the first pool (by name) whose labels its ledger carries, with the cards
    to price grants against."""
    found: dict[str, _Where] = {}
    if d is None:
        return found
    for pool, group_key, selector in accelerated:
        if not in_pool(d.labels, selector):
            continue
        g = d.group(group_key)
        if g is not None and g.accelerator_key not in found:
            found[g.accelerator_key] = _Where(pool, g, {c.id: c for c in g.cards})
    return found


def _queues(local_queues: Iterable[LocalQueue]) -> dict[tuple[str, str], str]:
    return {(q.namespace, q.name): q.cluster_queue for q in local_queues}


def _owner(namespace: str, queue: str, workload: str, queues: Mapping[tuple[str, str], str], cq: str = "") -> Owner:
    return Owner(namespace, queue, cq or queues.get((namespace, queue), ""), workload)


def _charges_cards(pod: Pod) -> bool:
    """A Pod the ledger charges: it holds an allocation record and has not finished (the ledger releases a finished
    Pod's cards)."""
    return bool(pod.allocations) and bool(pod.node_name) and not pod.finished


def _pod_holdings(
    pod: Pod,
    w: Workload | None,
    where: Mapping[str, _Where],
    cpu_pools: Collection[str],
    queues: Mapping[tuple[str, str], str],
    claimed: dict[tuple[str, str], list[CardAllocation]],
) -> list[Holding]:
    """A Pod's grants on its node, one holding per pool (each grant also noted in ``claimed`` by ``(key, card id)``).

    A Pod's queues are its Workload's when that Workload is known (the queue it was submitted to, the ClusterQueue
    that admitted it); else the Pod's own queue label, through its LocalQueue."""
    if w is not None:
        owner = _owner(pod.namespace, w.queue_name or pod.queue_name, pod.workload, queues, w.cluster_queue)
    else:
        owner = _owner(pod.namespace, pod.queue_name, pod.workload, queues)
    if _charges_cards(pod):
        mine: dict[str, Holding] = {}
        for grant in pod.allocations:
            found = where.get(naming.accelerator_key(grant.manufacturer, grant.group))
            if found is None:
                continue
            claimed.setdefault((found.group.accelerator_key, grant.card_id), []).append(grant)
            h = mine.setdefault(found.pool, Holding(found.pool, owner, pods=1, node=pod.node_name, pod=pod.name))
            charge_grant(h, grant, found.cards.get(grant.card_id), found.group)
        return list(mine.values())
    if pod.node_name and not pod.finished and owner.cluster_queue in cpu_pools:
        cpu = pod.requests.get("cpu", ZERO)
        if cpu:
            return [Holding(owner.cluster_queue, owner, cpu=cpu, pods=1)]
    return []


def _unattributed(
    where: Mapping[str, _Where], claimed: Mapping[tuple[str, str], Sequence[CardAllocation]]
) -> list[Holding]:
    """What a node's ledger charges beyond what its Pods' records name: one holding per pool, owner unknown."""
    out: dict[str, Holding] = {}
    for key, found in sorted(where.items()):
        h = out.get(found.pool)
        if h is None:
            h = out[found.pool] = Holding(found.pool, Owner())
        for card in found.group.cards:
            grants = claimed.get((key, card.id), ())
            if card.mode is Mode.EXCLUSIVE and not any(g.mode == Mode.EXCLUSIVE for g in grants):
                charge_grant(h, _grant(card, Mode.EXCLUSIVE, M), card, found.group)
            elif card.mode is Mode.SHARED:
                left = card.allocated - sum(g.allocated for g in grants if g.mode == Mode.SHARED)
                if left > 0:
                    charge_grant(h, _grant(card, Mode.SHARED, left), card, found.group)
            elif card.mode is Mode.SLICED:
                mine = [g for g in grants if g.mode == Mode.SLICED]
                left = card.allocated - sum(g.allocated for g in mine)
                if left > 0:
                    h.slices += max(0, card.allocated_slices - len(mine))
                    h.slice_units += left
                    _charge(h, "sliced", min(left, M))
            elif card.mode is Mode.PARTITIONED:
                for p in card.profiles:
                    named = sum(1 for g in grants if g.profile in (p.name, p.published))
                    for _ in range(card.allocated_profiles.get(p.name, 0) - named):
                        charge_grant(h, _grant(card, Mode.PARTITIONED, 0, p.name), card, found.group)
    return [h for h in out.values() if h.card_equivalents or h.cards or h.shares or h.slices or h.partitions]


def _grant(card: Card, mode: Mode, allocated: int, profile: str = "") -> CardAllocation:
    return CardAllocation("", "", "", card.id, int(mode), allocated, profile)


def _served(pod: Pod, cpu_pool: bool) -> bool:
    """A Pod of an admitted Workload that holds what it was admitted for, or that ran and finished."""
    if pod.finished:
        return True
    return bool(pod.node_name) and (cpu_pool or pod.held)


def _reserved(
    w: Workload,
    pods: Iterable[Pod],
    pools: Collection[str],
    cpu_pools: Collection[str],
    queues: Mapping[tuple[str, str], str],
) -> Holding | None:
    """What Kueue reserved for an admitted, unfinished Workload's Pods that hold no allocation yet (None for
    nothing)."""
    if not w.admitted or w.finished or w.cluster_queue not in pools:
        return None
    cpu_pool = w.cluster_queue in cpu_pools
    running: dict[str, int] = {}
    for pod in pods:
        if _served(pod, cpu_pool):
            running[pod.podset] = running.get(pod.podset, 0) + 1
    h: Holding | None = None
    for ps in w.podsets:
        a = w.assignment(ps.name)
        count = a.count if a is not None and a.count > 0 else ps.count
        waiting = max(0, count - running.get(ps.name, 0))
        if not waiting or count <= 0:
            continue
        if h is None:
            h = Holding(w.cluster_queue, _owner(w.namespace, w.queue_name, w.pod_owner, queues, w.cluster_queue))
        usage = dict(a.usage) if a is not None and a.usage else _template_usage(ps.spec, count)
        credits = sum((v for k, v in usage.items() if k.startswith(naming.CREDITS_PREFIX)), ZERO)
        h.reserved += credits * waiting / count / M
        if cpu_pool:
            h.reserved_cpu += usage.get("cpu", ZERO) * waiting / count
        h.reserved_pods += waiting
    if h is not None and h.reserved_pods and (h.reserved or h.reserved_cpu):
        h.reserved_workloads = 1
        return h
    return None


def _template_usage(spec: Mapping[str, Any], count: int) -> dict[str, Fraction]:
    """A PodSet's reservation from its template, when the admission does not state ``resourceUsage``."""
    out: dict[str, Fraction] = {k: Fraction(v * count) for k, v in pod_credits(spec).items()}
    cpu = pod_requests(spec).get("cpu")
    if cpu:
        out["cpu"] = cpu * count
    return out


PoolsKey = tuple[tuple[str, bool, str, tuple[tuple[str, str], ...]], ...]


def pools_key(instancetypes: Iterable[InstanceType]) -> PoolsKey:
    """What a holding reads of the pools: their names, kinds, card models and labels (a status write makes a new
    InstanceType record, and changes none of them)."""
    return tuple(
        sorted(
            (t.name, t.acceleratable, t.accelerator_group, tuple(sorted(t.pool_labels().items())))
            for t in instancetypes
        )
    )


class _Pools:
    """The pools and queues every node's and Workload's holdings are read against."""

    __slots__ = ("accelerated", "cpu_pools", "names", "queues")

    def __init__(self, types: PoolsKey, queues: dict[tuple[str, str], str]) -> None:
        self.accelerated = [
            (name, group, dict(labels)) for name, acceleratable, group, labels in types if acceleratable
        ]
        self.cpu_pools = {name for name, acceleratable, _, _ in types if not acceleratable}
        self.names = {name for name, _, _, _ in types}
        self.queues = queues

    def node(self, d: NodeDevices | None, pods: Sequence[Pod], owners: Sequence[Workload | None]) -> list[Holding]:
        """One node's holdings: its Pods' grants (each with its Workload, or None), then what its ledger charges
        beyond them."""
        where = _node_pools(d, self.accelerated)
        claimed: dict[tuple[str, str], list[CardAllocation]] = {}
        found = [
            h
            for p, w in zip(pods, owners, strict=True)
            for h in _pod_holdings(p, w, where, self.cpu_pools, self.queues, claimed)
        ]
        return found + _unattributed(where, claimed)

    def reserved(self, w: Workload, pods: Iterable[Pod]) -> Holding | None:
        return _reserved(w, pods, self.names, self.cpu_pools, self.queues)


def owners_of(workloads: Iterable[Workload]) -> dict[tuple[str, str], Workload]:
    """The Workload each Pod's ``kueue.x-k8s.io/workload`` names, by ``(namespace, name)``: a Concurrent Admission
    family by the name its Pods carry, the Variant that stands for it."""
    out: dict[tuple[str, str], Workload] = {}
    for w in judged(workloads):
        key = (w.namespace, w.pod_owner)
        other = out.get(key)
        out[key] = w if other is None else standing((other, w))
    return out


class UsageBook:
    """Holdings kept node by node and Workload by Workload, each replaced when its records change, with the sums
    the usage gauges read kept as they change: the operator updates only what its cache saw change, and a scrape of
    a large cluster costs what changed since the last, not the cluster's size.

    ``set_node`` and ``set_workload`` take the records :func:`holdings` reads for that node or Workload; the book
    then holds what :func:`holdings` finds for the same records, in its order (node by node, then the
    reservations by Workload)."""

    def __init__(self, instancetypes: Iterable[InstanceType], local_queues: Iterable[LocalQueue]) -> None:
        self.key = self.reads(instancetypes, local_queues)
        """What the book's holdings read of the pools and queues: a book whose key changed is made again."""
        self._pools = _Pools(*self.key)
        self.nodes: dict[str, list[Holding]] = {}
        self.reservations: dict[tuple[str, str], Holding] = {}
        self._held: dict[tuple[str, str, str], list[int]] = {}
        """Per (namespace, pool, mode): the units held and how many holdings add to them."""
        self._reserved: dict[tuple[str, str], tuple[Fraction, int]] = {}

    @staticmethod
    def reads(
        instancetypes: Iterable[InstanceType], local_queues: Iterable[LocalQueue]
    ) -> tuple[PoolsKey, dict[tuple[str, str], str]]:
        """The key a book made from these has."""
        return pools_key(instancetypes), _queues(local_queues)

    def set_node(
        self, node: str, d: NodeDevices | None, pods: Iterable[Pod], owners: Mapping[tuple[str, str], Workload]
    ) -> list[Holding]:
        """Replace a node's holdings, from its ledger (None when none is served), the Pods bound to it and the
        Workloads their Pods name (:func:`owners_of`)."""
        mine = sorted(pods, key=lambda p: (p.namespace, p.name))
        owners_ = [owners.get((p.namespace, p.workload)) if p.workload else None for p in mine]
        found = self._pools.node(d, mine, owners_) if d is not None or mine else []
        self._count(self.nodes.pop(node, []), -1)
        if found:
            self.nodes[node] = found
            self._count(found, 1)
        return found

    def set_workload(self, key: tuple[str, str], w: Workload | None, pods: Iterable[Pod]) -> Holding | None:
        """Replace what the Workload that Pods name ``key`` (``(namespace, name)``) reserves: ``w`` is
        ``owners_of(...).get(key)``, ``pods`` the Pods that name it."""
        h = self._pools.reserved(w, pods) if w is not None else None
        old = self.reservations.pop(key, None)
        if old is not None:
            self._count([old], -1)
        if h is not None:
            self.reservations[key] = h
            self._count([h], 1)
        return h

    def _count(self, items: Iterable[Holding], sign: int) -> None:
        held, reserved = self._held, self._reserved
        for h in items:
            for mode, u in h.units.items():
                k = (h.owner.namespace, h.pool, mode)
                total = held.get(k)
                if total is None:
                    total = held[k] = [0, 0]
                total[0] += sign * u
                total[1] += sign
                if not total[1]:
                    del held[k]
            if h.reserved:
                r = (h.owner.namespace, h.pool)
                value, n = reserved.get(r, (ZERO, 0))
                if n + sign:
                    reserved[r] = (value + sign * h.reserved, n + sign)
                else:
                    del reserved[r]

    def holdings(self) -> list[Holding]:
        """Every holding, in the order :func:`holdings` gives them."""
        out = [h for node in sorted(self.nodes) for h in self.nodes[node]]
        return out + [self.reservations[k] for k in sorted(self.reservations)]

    def gauges(self) -> tuple[dict[tuple[str, str, str], float], dict[tuple[str, str], float]]:
        """What :func:`usage_gauges` gives for :meth:`holdings`, from the sums kept."""
        return (
            {k: equivalents(Fraction(u, M)) for k, (u, _) in self._held.items()},
            {k: equivalents(v) for k, (v, _) in self._reserved.items()},
        )


def holdings(
    instancetypes: Sequence[InstanceType],
    devices: Sequence[NodeDevices],
    pods: Sequence[Pod],
    workloads: Iterable[Workload] = (),
    local_queues: Iterable[LocalQueue] = (),
) -> list[Holding]:
    """Every holding of every owner in every pool, node by node: Pods' grants, what the ledger charges beyond them
    (unattributed), then reservations. (The operator keeps the same node by node in a :class:`UsageBook`.)"""
    pools = _Pools(pools_key(instancetypes), _queues(local_queues))
    owners = owners_of(workloads)
    ledger = {d.node: d for d in devices}
    on_node: dict[str, list[Pod]] = {}
    by_workload: dict[tuple[str, str], list[Pod]] = {}
    for pod in pods:
        if pod.node_name:
            on_node.setdefault(pod.node_name, []).append(pod)
        if pod.workload:
            by_workload.setdefault((pod.namespace, pod.workload), []).append(pod)
    out: list[Holding] = []
    for node in sorted(ledger.keys() | on_node.keys()):
        mine = on_node.get(node, [])
        out.extend(
            pools.node(
                ledger.get(node), mine, [owners.get((p.namespace, p.workload)) if p.workload else None for p in mine]
            )
        )
    for key, w in sorted(owners.items()):
        h = pools.reserved(w, by_workload.get(key, []))
        if h is not None:
            out.append(h)
    return out


@dataclass(frozen=True, slots=True)
class Row:
    """One ``usage`` row: an owner (by the grouping asked for) in one pool."""

    namespace: str
    name: str
    pool: str
    holding: Holding


def summarise(items: Iterable[Holding], by: By, namespace: str | None = None) -> list[Row]:
    """Holdings summed per (owner row, pool), in name order; ``namespace`` keeps one namespace's owners only."""
    rows: dict[tuple[str, str, str], Holding] = {}
    for h in items:
        if namespace is not None and h.owner.namespace != namespace:
            continue
        ns, name = h.owner.row_key(by)
        total = rows.get((ns, name, h.pool))
        if total is None:
            rows[(ns, name, h.pool)] = replace(h, partitions=dict(h.partitions), units=dict(h.units))
        else:
            total.add(h)
    return [Row(ns, name, pool, rows[(ns, name, pool)]) for ns, name, pool in sorted(rows)]


def equivalents(value: Fraction) -> float:
    """Card-equivalents as printed: four decimals."""
    return round(float(value), 4)


def percent(units: int) -> float:
    """Slice memory units as percent of one card."""
    return round(units / PERCENT, 2)


def usage_gauges(
    items: Iterable[Holding],
) -> tuple[dict[tuple[str, str, str], float], dict[tuple[str, str], float]]:
    """The operator's usage gauges: card-equivalents held per ``(namespace, pool, mode)``, and reserved per
    ``(namespace, pool)`` ("" namespace for what the ledger charges to no Pod)."""
    held: dict[tuple[str, str, str], int] = {}
    reserved: dict[tuple[str, str], Fraction] = {}
    for h in items:
        for mode, u in h.units.items():
            k = (h.owner.namespace, h.pool, mode)
            held[k] = held.get(k, 0) + u
        if h.reserved:
            r = (h.owner.namespace, h.pool)
            reserved[r] = reserved.get(r, ZERO) + h.reserved
    return (
        {k: equivalents(Fraction(v, M)) for k, v in held.items()},
        {k: equivalents(v) for k, v in reserved.items()},
    )


HOLDER_LABELS = (
    "node",
    "UUID",
    "GPU_I_PROFILE",
    "GPU_I_ID",
    "mig_uuid",
    "namespace",
    "pod",
    "workload",
    "localqueue",
    "clusterqueue",
    "instancetype",
    "mode",
)
"""The labels of ``gpuctl_card_holder``: upper-case ones are the DCGM exporter's names, so the two join by them."""
RESERVED_LABELS = ("namespace", "workload", "localqueue", "clusterqueue", "instancetype")

Rows = list[tuple[tuple[str, ...], float]]


def holder_rows(items: Iterable[Holding]) -> Rows:
    """Per Pod and card it holds part of: the labels of :data:`HOLDER_LABELS` and its card-equivalents there (the
    sum over its containers, by the fold), ordered by the labels.

    ``UUID`` is the card's id as the ledger records it; a partition adds its profile as published (``3g.40gb``) and
    the MIG device's UUID its allocation record names (``allocatedPhysicalID``). The record carries no GPU instance
    id, so ``GPU_I_ID`` is empty: the exporter's series are joined by card and profile. Only Pods' own grants are
    rows (what the ledger charges to no Pod is not); a Pod outside Kueue has empty ``workload`` and queues."""
    rows: Rows = []
    for h in items:
        if not h.pod:
            continue
        o = h.owner
        for (card, profile, partition, mode), units in h.per_card.items():
            labels = (
                h.node,
                card,
                profile,
                "",
                partition,
                o.namespace,
                h.pod,
                o.workload,
                o.local_queue,
                o.cluster_queue,
                h.pool,
                mode,
            )
            rows.append((labels, equivalents(Fraction(units, M))))
    rows.sort()
    return rows


def reserved_rows(items: Iterable[Holding]) -> Rows:
    """Per admitted Workload whose Pods hold no allocation yet: the labels of :data:`RESERVED_LABELS` and what it
    reserves, in card-equivalents, ordered by the labels."""
    out: dict[tuple[str, ...], Fraction] = {}
    for h in items:
        if h.reserved and not h.pod:
            o = h.owner
            key = (o.namespace, o.workload, o.local_queue, o.cluster_queue, h.pool)
            out[key] = out.get(key, ZERO) + h.reserved
    return [(k, equivalents(v)) for k, v in sorted(out.items())]
