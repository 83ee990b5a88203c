"""The four capacity views of a pool (EX, SH, SL, PT), its partition table and the CPU view.

Each card feeds exactly one group by its capability: EX, SH and SL count unpartitioned cards, PT partitioned ones.
Views are computed from the ``Devices`` ledger, never from credits.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gpuctl.core import naming
from gpuctl.core.instancetypes import InstanceType
from gpuctl.core.ledger import Card, Mode, NodeDevices
from gpuctl.core.units import SHARES_PER_CARD, M


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


def _profile_order(memory: Mapping[str, int]) -> list[str]:
    return sorted(memory, key=lambda name: (memory[name], name))


def accelerator_views(pool: Iterable[NodeDevices], accelerator_key: str) -> tuple[View, View, View, PartitionView]:
    """EX, SH, SL and PT of the cards of one accelerator model across a pool's Devices."""
    ex_cap = ex_rem = ex_once = 0
    sh_cap = sh_rem = sh_once = 0
    sl_cap = sl_rem = sl_once = 0
    pt_cap = pt_rem = 0
    remaining_by_profile: dict[str, int] = {}
    allocated_by_profile: dict[str, int] = {}
    profile_memory: dict[str, int] = {}
    for node in pool:
        group = node.group(accelerator_key)
        if group is None:
            continue
        node_free = node_shareable = 0
        for card in group.cards:
            capability = card.capability
            if capability.partition_ceiling > 0:
                pt_cap += capability.partition_ceiling
                pt_rem += card.partition_free
                _add_profiles(card, group.manufacturer, remaining_by_profile, allocated_by_profile, profile_memory)
                continue
            ex_cap += 1
            sh_cap += SHARES_PER_CARD
            sliceable = capability.logical_slots > 0
            if sliceable:
                sl_cap += 100
            if card.mode is Mode.NONE and card.remaining >= M and not card.unhealthy and card.allocated_slices == 0:
                # The common case, read once: a free card gives one whole card, all its shares, a whole slice.
                ex_rem += 1
                node_free += 1
                sh_rem += SHARES_PER_CARD
                node_shareable += 1
                if sliceable:
                    sl_rem += 100
                    sl_once = 100 if sl_once < 100 else sl_once
                continue
            shares = card.free_shares
            sh_rem += shares
            if shares:
                node_shareable += 1
            if sliceable:
                pct = card.free_slice_percent
                sl_rem += pct
                sl_once = max(sl_once, pct)
        ex_once = max(ex_once, node_free)
        sh_once = max(sh_once, node_shareable)
    order = _profile_order(profile_memory)
    partitioned = PartitionView(
        once_max_request=1 if pt_rem > 0 else 0,
        remaining=pt_rem,
        capacity=pt_cap,
        remaining_profiles=tuple(ProfileCount(n, remaining_by_profile.get(n, 0)) for n in order),
        allocated_profiles=tuple(
            ProfileCount(n, allocated_by_profile[n]) for n in order if allocated_by_profile.get(n, 0) > 0
        ),
    )
    return View(ex_once, ex_rem, ex_cap), View(sh_once, sh_rem, sh_cap), View(sl_once, sl_rem, sl_cap), partitioned


def _add_profiles(
    card: Card,
    manufacturer: str,
    remaining: dict[str, int],
    allocated: dict[str, int],
    memory: dict[str, int],
) -> None:
    for p in card.profiles:
        remaining[p.published] = remaining.get(p.published, 0) + card.profile_remaining(p.published)
        memory.setdefault(p.published, p.memory_mib)
    for name, count in card.allocated_profiles.items():
        published = naming.publish_profile(manufacturer, name)
        allocated[published] = allocated.get(published, 0) + max(0, count)
        memory.setdefault(published, 1 << 62)


def cpu_view(node_cores: Sequence[int], reserved: int = 0) -> View:
    """The CPU view of a CPU pool: the largest node's cores, the pool's cores less what is reserved, the pool's cores."""
    capacity = sum(node_cores)
    return View(max(node_cores, default=0), max(0, capacity - reserved), capacity)


def instancetype_views(
    instancetype: InstanceType,
    devices: Iterable[NodeDevices],
    *,
    node_cores: Sequence[int] = (),
    cpu_reserved: int = 0,
) -> PoolViews:
    """All views of one InstanceType, computed as its status writer computes them.

    An accelerated type reads its accelerator model's cards in its pool and shows CPU 0/0; a CPU-only type shows
    zero accelerator views and the CPU view of its nodes.
    """
    if not instancetype.acceleratable:
        return PoolViews(ZERO, ZERO, ZERO, ZERO_PARTITIONS, cpu_view(node_cores, cpu_reserved))
    pool = pool_devices(devices, instancetype)
    ex, sh, sl, pt = accelerator_views(pool, instancetype.accelerator_group)
    return PoolViews(ex, sh, sl, pt, ZERO)


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
        detail["cores"] = first.cores
    if first.compute_capability:
        detail["computeCapability"] = first.compute_capability
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
