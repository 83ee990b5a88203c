"""The four capacity views of a pool (EX, SH, SL, PT), its partition table and the CPU view.

Each card feeds exactly one group by its capability: EX, SH and SL count unpartitioned cards, PT partitioned ones.
Views are computed from the ``Devices`` ledger, never from credits.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gpuctl.core import naming
from gpuctl.core.instancetypes import InstanceType
from gpuctl.core.ledger import Card, Mode, NodeDevices
from gpuctl.core.units import PERCENT, SHARE, SHARES_PER_CARD, M
from gpuctl.core.workloads import ClusterQueue


@dataclass(frozen=True, slots=True)
class View:
    """One view in its own unit: cards (EX), shares (SH), percent units (SL), partition instances (PT), cores (CPU)."""

    once_max_request: int
    remaining: int
    capacity: int

    def cell(self) -> str:
        return f"{self.once_max_request}/{self.remaining}"


ZERO = View(0, 0, 0)


@dataclass(frozen=True, slots=True)
class ProfileCount:
    name: str
    count: int


@dataclass(frozen=True, slots=True)
class PartitionView:
    once_max_request: int
    remaining: int
    capacity: int
    remaining_profiles: tuple[ProfileCount, ...]
    """Every profile the pool offers, zeros kept."""
    allocated_profiles: tuple[ProfileCount, ...]
    """Profiles holding instances, zeros dropped."""

    def cell(self) -> str:
        return f"{self.once_max_request}/{self.remaining}"


ZERO_PARTITIONS = PartitionView(0, 0, 0, (), ())


@dataclass(frozen=True, slots=True)
class PoolViews:
    accelerator: View
    shared: View
    sliced: View
    partitioned: PartitionView
    cpu: View


def in_pool(labels: Mapping[str, str], selector: Mapping[str, str]) -> bool:
    """An object (Devices or Node) belongs to a pool when it is managed and carries every pool label."""
    return labels.get(naming.LABEL_MANAGED) == "true" and all(labels.get(k) == v for k, v in selector.items())


def pool_devices(devices: Iterable[NodeDevices], instancetype: InstanceType) -> list[NodeDevices]:
    """The Devices of an InstanceType's pool, by node name."""
    selector = instancetype.pool_labels()
    return sorted((d for d in devices if in_pool(d.labels, selector)), key=lambda d: d.node)


def accelerator_views(pool: Iterable[NodeDevices], accelerator_key: str) -> tuple[View, View, View, PartitionView]:
    """EX, SH, SL and PT of the cards of one accelerator model across a pool's Devices, as GPUStack's status writer
    counts them: a card is free whole when its ledger leaves all M units, whatever its mode says (a mode-0 row that
    leaves less gives nothing but capacity); a share is counted on a free or shared card, a slice on a free or sliced
    card with a free slot. A partitioned card gives PT its largest free count over its profiles — its catalog ceiling
    while its ledger has no per-profile counts — and nothing else."""
    ex_cap = ex_rem = ex_once = 0
    sh_cap = sh_rem = sh_once = 0
    sl_cap = sl_rem = sl_once = 0
    pt_cap = pt_rem = 0
    remaining_by_profile: dict[str, int] = {}
    allocated_by_profile: dict[str, int] = {}
    for node in pool:
        group = node.group(accelerator_key)
        if group is None:
            continue
        node_free = node_shareable = 0
        for card in group.cards:
            capability = card.capability
            if capability.partition_ceiling > 0:
                pt_cap += capability.partition_ceiling
                pt_rem += _partition_remaining(card)
                _add_profiles(card, group.manufacturer, remaining_by_profile, allocated_by_profile)
                continue
            ex_cap += 1
            sh_cap += SHARES_PER_CARD
            sliceable = capability.logical_slots > 0
            if sliceable:
                sl_cap += 100
            left = card.remaining
            free = left >= M
            if free:
                ex_rem += 1
                node_free += 1
            if free or card.mode is Mode.SHARED:
                sh_rem += left // SHARE
                if left >= SHARE:
                    node_shareable += 1
            if sliceable and (free or card.mode is Mode.SLICED) and card.free_slots > 0:
                pct = left // PERCENT
                sl_rem += pct
                sl_once = max(sl_once, pct)
        ex_once = max(ex_once, node_free)
        sh_once = max(sh_once, node_shareable)
    order = sorted(remaining_by_profile.keys() | allocated_by_profile.keys())
    partitioned = PartitionView(
        once_max_request=1 if pt_rem > 0 else 0,
        remaining=pt_rem,
        capacity=pt_cap,
        remaining_profiles=tuple(ProfileCount(n, remaining_by_profile[n]) for n in order if n in remaining_by_profile),
        allocated_profiles=tuple(
            ProfileCount(n, allocated_by_profile[n]) for n in order if allocated_by_profile.get(n, 0) > 0
        ),
    )
    return View(ex_once, ex_rem, ex_cap), View(sh_once, sh_rem, sh_cap), View(sl_once, sl_rem, sl_cap), partitioned


def _partition_ledger_ready(card: Card) -> bool:
    """Whether a partitioned card's ledger row carries per-profile counts (else its catalog stands in)."""
    return card.has_ledger and (
        bool(card.allocated_profiles) or dict(card.remaining_profiles) != {p.name: p.count for p in card.profiles}
    )


def _partition_remaining(card: Card) -> int:
    """A partitioned card's share of PT's remaining: its largest free count over the profiles its ledger counts
    (they compete for the same slices), or its catalog ceiling while the ledger counts none."""
    if not _partition_ledger_ready(card):
        return card.partition_ceiling
    return max((max(0, n) for n in card.remaining_profiles.values()), default=0)


def _add_profiles(card: Card, manufacturer: str, remaining: dict[str, int], allocated: dict[str, int]) -> None:
    """Every profile the card offers (at 0 where none is free), plus its ledger's counts, by published name."""
    for p in card.profiles:
        remaining.setdefault(p.published, 0)
    for name, count in card.remaining_profiles.items():
        published = naming.publish_profile(manufacturer, name)
        remaining[published] = remaining.get(published, 0) + count
    for name, count in card.allocated_profiles.items():
        published = naming.publish_profile(manufacturer, name)
        allocated[published] = allocated.get(published, 0) + max(0, count)


def flavor_node_count(flavor: str) -> int:
    """The per-node count a derived ResourceFlavor's name ends with (``…-16c`` cores, ``…-8d`` cards); 0 if none."""
    for segment in reversed(flavor.split("-")):
        if len(segment) >= 2 and segment[-1] in "cd" and segment[:-1].isdigit():
            return int(segment[:-1])
    return 0


OVERCOMMIT_MILLI_PER_CORE = 800
"""With ``instance-general-resources-overcommit`` on (GPUStack's default), a CPU pool's Pods ask the scheduler for
800m per core of their limit: a reservation is scaled back by it."""


def cpu_view(queue: ClusterQueue | None, *, overcommit: bool = True) -> View:
    """The CPU view of a CPU pool as GPUStack's status writer computes it from the pool's ClusterQueue: capacity the
    nominal ``cpu`` quota of its flavors, remaining that less what the queue reserved (scaled back from the
    scheduler's requests to cores while general overcommit is on), and one request's most the largest node's cores
    (read from the flavors' names) within what remains."""
    if queue is None:
        return ZERO
    capacity = queue.nominal.get("cpu", 0)
    milli = queue.reservation_milli("cpu")
    reserved = (milli // OVERCOMMIT_MILLI_PER_CORE) if overcommit else -(-milli // 1000)
    remaining = max(0, capacity - reserved)
    once = max((flavor_node_count(f) for f in queue.flavors), default=0)
    return View(min(once, remaining), remaining, capacity)


def instancetype_views(
    instancetype: InstanceType,
    devices: Iterable[NodeDevices],
    queue: ClusterQueue | None = None,
    *,
    overcommit: bool = True,
) -> PoolViews:
    """All views of one InstanceType, computed as its status writer computes them.

    An accelerated type reads its accelerator model's cards in its pool and shows CPU 0/0; a CPU-only type shows
    zero accelerator views and the CPU view of its ClusterQueue. While that queue is ``HoldAndDrain`` every view is
    zero, as GPUStack publishes it (:func:`draining`)."""
    if draining(queue):
        return PoolViews(ZERO, ZERO, ZERO, ZERO_PARTITIONS, ZERO)
    if not instancetype.acceleratable:
        return PoolViews(ZERO, ZERO, ZERO, ZERO_PARTITIONS, cpu_view(queue, overcommit=overcommit))
    pool = pool_devices(devices, instancetype)
    ex, sh, sl, pt = accelerator_views(pool, instancetype.accelerator_group)
    return PoolViews(ex, sh, sl, pt, ZERO)


DRAINING_REASON = "its ClusterQueue is HoldAndDrain: the status writer publishes every view as 0 while it drains"


def draining(queue: ClusterQueue | None) -> bool:
    """Whether a pool's queue drains (``HoldAndDrain``), when its published views are all zero."""
    return queue is not None and queue.stop_policy == "HoldAndDrain"


def views_to_status(views: PoolViews) -> dict[str, object]:
    """The views as the InstanceType status carries them (and as ``gpuctl views -o json`` prints them)."""

    def plain(v: View | PartitionView) -> dict[str, object]:
        return {"onceMaxRequest": v.once_max_request, "remaining": v.remaining, "capacity": v.capacity}

    pt = plain(views.partitioned)
    pt["remainingProfiles"] = [{"name": p.name, "count": p.count} for p in views.partitioned.remaining_profiles]
    pt["allocatedProfiles"] = [{"name": p.name, "count": p.count} for p in views.partitioned.allocated_profiles]
    return {
        "accelerator": plain(views.accelerator),
        "acceleratorShared": plain(views.shared),
        "acceleratorSliced": plain(views.sliced),
        "acceleratorPartitioned": pt,
        "cpu": plain(views.cpu),
    }


def instancetype_detail(instancetype: InstanceType, devices: Iterable[NodeDevices]) -> dict[str, object] | None:
    """``status.detail`` of an accelerated InstanceType, from its pool's Devices: the model's descriptors (product,
    memory, cores, family, compute capability) and the slicing **capability** catalog — logical slots and partition
    profiles summed over the pool's cards, from the spec side, so it does not move as instances are carved and
    released. None for a CPU-only type, or while no node of the pool reports the model.

    Every accelerated type gets it, derived or custom, so a custom type's Pods fold ``memory-mib`` and partitions."""
    if not instancetype.acceleratable or not instancetype.accelerator_group:
        return None
    groups = [
        g
        for d in pool_devices(devices, instancetype)
        for g in d.groups
        if g.accelerator_key == instancetype.accelerator_group
    ]
    if not groups:
        return None
    first = groups[0]
    cards = [c for g in groups for c in g.cards]
    profiles: dict[str, list[int]] = {}
    for c in cards:
        for p in c.profiles:
            entry = profiles.setdefault(p.name, [0, p.memory_mib])
            entry[0] += p.count
    logical = sum(c.logical_slots for c in cards if not c.partitioned)
    detail: dict[str, object] = {"manufacturer": first.manufacturer, "product": first.product}
    if first.family:
        detail["family"] = first.family
    if first.memory_mib > 0:
        detail["memory"] = f"{first.memory_mib}Mi"
    if first.cores > 0:
        detail["cores"] = str(first.cores)
    if first.compute_capability:
        detail["computeCapability"] = first.compute_capability
    versions = runtime_versions(g.runtime_version for g in groups)
    if versions:
        detail["runtimeVersion"] = versions[0]
        detail["runtimeVersions"] = list(versions)
    detail["slicedDetail"] = {
        "logical": {
            "count": logical,
            "coresPercentageOvercommit": any(c.cores_overcommit for c in cards if c.sliceable),
        },
        "physical": {
            "count": sum(c.partition_ceiling for c in cards),
            "profiles": [
                {"name": name, "count": count, "memoryMib": mib} for name, (count, mib) in sorted(profiles.items())
            ],
        },
    }
    return detail


def runtime_versions(values: Iterable[str]) -> tuple[str, ...]:
    """The distinct runtime versions of a pool's groups, lowest first, as GPUStack's status writer lists them: only
    ``major[.minor]`` with whole numbers, ``9`` and ``9.0`` one version (written as first seen)."""
    seen: dict[tuple[int, int], str] = {}
    for v in values:
        parts = v.split(".")
        if not v or len(parts) > 2 or not all(p.isdigit() for p in parts):
            continue
        key = (int(parts[0]), int(parts[1]) if len(parts) > 1 else 0)
        seen.setdefault(key, v)
    return tuple(seen[k] for k in sorted(seen))
