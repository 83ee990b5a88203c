"""Gate 4, the scheduler and kubelet: the capacity keys a node advertises per family, and a Pod checked against them.

The scheduler counts keys, not cards: it cannot tell which card a partition lands on, and on a TAS queue it does not
choose the node — Kueue assigned one and the Pod is pinned there, so a node without room leaves the Pod ``Pending``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction

from gpuctl.core import naming
from gpuctl.core.ledger import Mode, NodeDevices
from gpuctl.core.units import SHARES_PER_CARD, M


def node_capacity(devices: NodeDevices) -> dict[str, int]:
    """Every accelerator key the node advertises, with its capacity, from its Devices.

    The device plugin's pool keys (``<base>``, ``.shared``, ``.sliced``, ``.partitioned``) are always present (0 when
    empty); the counting keys of a family appear only while its bare token's capacity is above 0.
    """
    keys: dict[str, int] = {}
    for g in devices.groups:
        mfr = naming.MANUFACTURERS.get(g.manufacturer)
        if mfr is None:
            continue
        names = mfr.resources
        whole = [c for c in g.cards if not c.partitioned and not c.unhealthy]
        sliceable = [c for c in whole if c.sliceable]
        partitioned = [c for c in g.cards if c.partitioned and not c.unhealthy]
        add = _adder(keys)
        add(names.base, len(whole))
        add(names.shared, SHARES_PER_CARD * len(whole))
        slices = sum(c.logical_slots for c in sliceable)
        add(names.sliced, slices)
        if slices > 0:
            add(names.sliced_units, M * len(sliceable))
            overcommit = sum(c.logical_slots * 100 if c.cores_overcommit else 100 for c in sliceable)
            add(names.sliced_cores_percentage, overcommit)
            add(names.sliced_memory_percentage, 100 * len(sliceable))
            add(names.sliced_memory_mib, g.memory_mib * len(sliceable))
        if mfr.partition_kind is None:
            continue
        instances = sum(sum(c.allocated_profiles.values()) + c.partition_free for c in partitioned)
        add(names.partitioned, instances)
        if instances > 0:
            add(names.partitioned_units, M * len(partitioned))
            for c in partitioned:
                for p in c.profiles:
                    add(
                        names.partitioned_profile(p.published),
                        c.allocated_profiles.get(p.name, 0) + c.profile_remaining(p.published),
                    )
    return keys


def _adder(keys: dict[str, int]) -> Callable[[str, int], None]:
    def add(name: str, value: int) -> None:
        keys[name] = keys.get(name, 0) + value

    return add


def node_allocatable(devices: NodeDevices) -> dict[str, int]:
    """What the device plugin reports healthy: cards held in another mode keep their tokens advertised but unhealthy."""
    keys = node_capacity(devices)
    for g in devices.groups:
        mfr = naming.MANUFACTURERS.get(g.manufacturer)
        if mfr is None:
            continue
        names = mfr.resources
        for c in g.cards:
            if c.partitioned or c.unhealthy:
                continue
            if c.mode in (Mode.SHARED, Mode.SLICED):
                keys[names.base] -= 1
            if c.mode in (Mode.EXCLUSIVE, Mode.SLICED):
                keys[names.shared] -= SHARES_PER_CARD
            if c.sliceable and c.mode in (Mode.EXCLUSIVE, Mode.SHARED):
                keys[names.sliced] -= c.logical_slots
    return keys


def advertised(allocatable: Mapping[str, Fraction | int], devices: NodeDevices) -> dict[str, Fraction | int]:
    """A Node's allocatable with its accelerator keys recomputed from a ledger (what the device plugin reports once
    the ledger reads so): the keys of a card another mode holds are unhealthy, and healthy again once it frees.

    Every other key is kept as read: cpu, memory, pods, the visibility keys, and the keys of a manufacturer the
    ledger has no card of."""
    ledgered = {g.manufacturer for g in devices.groups}
    kept: dict[str, Fraction | int] = {}
    for k, v in allocatable.items():
        key = naming.classify_resource(k)
        if key is None or key.kind is naming.KeyKind.VISIBILITY or key.manufacturer.name not in ledgered:
            kept[k] = v
    kept.update(node_allocatable(devices))
    return kept


@dataclass(frozen=True, slots=True)
class KeyShortfall:
    key: str
    requested: Fraction
    free: Fraction

    def describe(self) -> str:
        return f"{self.key}: requests {_num(self.requested)}, {_num(self.free)} free"


def _num(q: Fraction) -> str:
    return str(q.numerator) if q.denominator == 1 else f"{float(q):g}"


def pod_shortfalls(
    requests: Mapping[str, Fraction],
    allocatable: Mapping[str, int | Fraction],
    requested_by_others: Iterable[Mapping[str, Fraction]] = (),
) -> list[KeyShortfall]:
    """The accelerator keys a Pod asks for beyond what the node has left (empty when it fits)."""
    used: dict[str, Fraction] = {}
    for other in requested_by_others:
        for k, v in other.items():
            used[k] = used.get(k, Fraction(0)) + v
    out = []
    for key, value in sorted(requests.items()):
        if naming.classify_resource(key) is None or value <= 0:
            continue
        free = Fraction(allocatable.get(key, 0)) - used.get(key, Fraction(0))
        if value > free:
            out.append(KeyShortfall(key, value, max(free, Fraction(0))))
    return out
