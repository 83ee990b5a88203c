"""The per-node ``Devices`` ledger as records: node → group → card.

A card joins its capability (``spec.groups[].accelerators[]``, what the detector reported) with its ledger row
(``status.groups[].accelerators[]``, what ``Allocate`` recorded). The capability decides which family a card serves;
the ledger only says how much of it is taken. A detected card without a ledger row, or with an empty one, falls back to
its catalog ceilings: free, every profile at its per-card count.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from sys import intern
from types import MappingProxyType
from typing import Any, NamedTuple

from gpuctl.core import naming
from gpuctl.core.errors import GpuctlError
from gpuctl.core.units import PERCENT, SHARE, M


class Mode(IntEnum):
    """DeviceAllocationMode: how a card is held."""

    NONE = 0
    EXCLUSIVE = 1
    SHARED = 2
    SLICED = 3
    PARTITIONED = 4
    VISIBILITY = 5
    UNKNOWN = -1
    """A value gpuctl does not know (GPUStack's types define 0 to 5): the card is named, and read as GPUStack's check
    and status writer read it — whole while its ledger leaves every unit, never shared, sliced or partitioned."""


@dataclass(frozen=True, slots=True)
class Placement:
    start: int
    length: int

    @property
    def end(self) -> int:
        return self.start + self.length

    def overlaps(self, other: Placement) -> bool:
        return self.start < other.end and other.start < self.end


@dataclass(frozen=True, slots=True)
class Profile:
    """One hardware partition profile a card offers, in the manufacturer's spelling (``name``)."""

    name: str
    published: str
    memory_mib: int
    count: int
    """The most instances of this profile one empty card hosts."""
    compute_slices: int = 0
    memory_slices: int = 0
    placements: tuple[Placement, ...] = ()


@dataclass(frozen=True, slots=True)
class Capability:
    """What the detector reported a card can do; identical cards share one record."""

    logical_slots: int
    """Logical slices the card can host (``logicalSliced.count``); 0 for a partitioned card."""
    cores_overcommit: bool
    profiles: tuple[Profile, ...]
    """Partition profiles offered (empty for an unpartitioned card)."""
    partition_ceiling: int
    """``physicalSliced.count``: the largest per-profile count."""

    @property
    def partitioned(self) -> bool:
        """A card serves partitions when it reports a physical-slicing capability."""
        return self.partition_ceiling > 0


NO_COUNTS: Mapping[str, int] = MappingProxyType({})


class Card(NamedTuple):
    """One accelerator: its capability joined with its ledger row (a tuple: tens of thousands are built at once)."""

    id: str
    index: int  # type: ignore[assignment]  # the card's index, as the ledger names it (shadows tuple.index)
    capability: Capability
    unhealthy: bool = False
    mode: Mode = Mode.NONE
    allocated: int = 0
    remaining: int = M
    allocated_slices: int = 0
    allocated_profiles: Mapping[str, int] = NO_COUNTS
    remaining_profiles: Mapping[str, int] = NO_COUNTS
    """Per-profile free instances, in the manufacturer's spelling (the catalog counts when no ledger says)."""
    has_ledger: bool = False
    raw_mode: int = 0
    """The mode as the ledger wrote it (differs from ``mode`` only for an unknown one)."""

    @property
    def logical_slots(self) -> int:
        return self.capability.logical_slots

    @property
    def cores_overcommit(self) -> bool:
        return self.capability.cores_overcommit

    @property
    def profiles(self) -> tuple[Profile, ...]:
        return self.capability.profiles

    @property
    def partition_ceiling(self) -> int:
        return self.capability.partition_ceiling

    @property
    def partitioned(self) -> bool:
        return self.capability.partition_ceiling > 0

    @property
    def whole_card_capable(self) -> bool:
        """Exclusive and shared requests are served by unpartitioned cards."""
        return not self.partitioned

    @property
    def sliceable(self) -> bool:
        """Logically sliceable: unpartitioned with a logical slice capability."""
        return not self.partitioned and self.logical_slots > 0

    @property
    def free(self) -> bool:
        """Entirely free: held in no mode, all M units left."""
        return self.mode is Mode.NONE and self.remaining >= M and not self.unhealthy

    @property
    def free_slots(self) -> int:
        return max(0, self.logical_slots - self.allocated_slices)

    @property
    def free_shares(self) -> int:
        """Shares this card can still grant: a free or already-shared card's remaining over M/10."""
        if self.unhealthy or self.partitioned or self.mode not in (Mode.NONE, Mode.SHARED):
            return 0
        return max(0, self.remaining) // SHARE

    @property
    def free_slice_units(self) -> int:
        """Units a new slice can take: a free or already-sliced card with a free slot; 0 otherwise."""
        if self.unhealthy or not self.sliceable or self.mode not in (Mode.NONE, Mode.SLICED) or self.free_slots == 0:
            return 0
        return max(0, self.remaining)

    @property
    def free_slice_percent(self) -> int:
        return self.free_slice_units // PERCENT

    def profile(self, published: str) -> Profile | None:
        for p in self.profiles:
            if p.published == published:
                return p
        return None

    def profile_remaining(self, published: str) -> int:
        """Instances of a profile this card can still host (0 when not offered or held in another mode)."""
        p = self.profile(published)
        if p is None or self.unhealthy or self.mode not in (Mode.NONE, Mode.PARTITIONED):
            return 0
        return max(0, min(self.remaining_profiles.get(p.name, 0), p.count))

    @property
    def partition_free(self) -> int:
        """The card's largest free count over its profiles (they compete for the same physical slices)."""
        return max((self.profile_remaining(p.published) for p in self.profiles), default=0)


@dataclass(frozen=True, slots=True)
class Group:
    """One accelerator model on a node: ``spec.groups[]`` joined with ``status.groups[]``."""

    id: str
    manufacturer: str
    product: str
    memory_mib: int
    cards: tuple[Card, ...]
    family: str = ""
    cores: int = 0
    compute_capability: str = ""
    runtime_version: str = ""
    driver_version: str = ""

    accelerator_key: str = field(init=False, compare=False)
    """``<manufacturer>-<group id>``: the model's node key."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "accelerator_key", intern(naming.accelerator_key(self.manufacturer, self.id)))


@dataclass(frozen=True, slots=True)
class NodeDevices:
    """A node's ``Devices`` object."""

    node: str
    labels: Mapping[str, str]
    groups: tuple[Group, ...]
    resource_version: str = ""

    def unreadable(self, accelerator_key: str | None = None) -> tuple[str, ...]:
        """Why a card of this ledger (of one card model, or any) cannot be read as written (an allocation mode
        gpuctl does not know): one line each. The rest of the ledger stands."""
        return tuple(
            f"Devices {self.node}: card {c.id} ({g.accelerator_key} index {c.index}): allocation mode {c.raw_mode} is "
            "not one gpuctl knows (0 to 5); read as GPUStack's check reads it (whole while it leaves every unit; never shared, sliced or partitioned)"
            for g in self.groups
            if accelerator_key is None or g.accelerator_key == accelerator_key
            for c in g.cards
            if c.mode is Mode.UNKNOWN
        )

    @property
    def managed(self) -> bool:
        return self.labels.get(naming.LABEL_MANAGED) == "true"

    def group(self, accelerator_key: str) -> Group | None:
        for g in self.groups:
            if g.accelerator_key == accelerator_key:
                return g
        return None

    def cards(self, accelerator_key: str) -> tuple[Card, ...]:
        g = self.group(accelerator_key)
        return g.cards if g else ()


class Ledgers(NamedTuple):
    """The Devices read, split by whether their Node exists."""

    served: list[NodeDevices]
    """Ledgers of Nodes that exist: the only ones any view, partition count, fit or simulation counts."""
    orphaned: list[NodeDevices]
    """Devices objects whose Node is gone (the device manager that wrote them is gone with it)."""


def split_orphans(devices: Iterable[NodeDevices], nodes: Collection[str]) -> Ledgers:
    """The ledgers a Node serves, and the orphans whose Node does not exist.

    A gone Node serves nothing (gate 3 holds a Workload assigned to one), so an orphan's cards count nowhere. Only a
    read that holds Nodes can tell a Node is gone: with none at all (a snapshot of ledgers only) every ledger is
    served."""
    if not nodes:
        return Ledgers(list(devices), [])
    served: list[NodeDevices] = []
    orphaned: list[NodeDevices] = []
    for d in devices:
        (served if d.node in nodes else orphaned).append(d)
    return Ledgers(served, orphaned)


class LedgerError(GpuctlError, ValueError):
    """A Devices object whose shape cannot be read."""


# ----------------------------------------------------------------------------------------------- parsing
#
# Parsing runs once per Devices object, on tens of thousands of cards for a large pool: the happy path touches each
# field once, and an error's location is spelled out only when there is an error.

Where = tuple[object, ...]


def _where(where: Where) -> str:
    """``("Devices n:", "spec", "groups", 0, "(ledger)", "mode")`` → ``Devices n: spec.groups[0] (ledger).mode``."""
    out = str(where[0]) if where else ""
    for i, part in enumerate(where[1:], start=1):
        if isinstance(part, int):
            out += f"[{part}]"
        elif (i == 1 and out.endswith(":")) or str(part).startswith("("):
            out += f" {part}"
        else:
            out += f".{part}"
    return out


def _int(value: Any, where: Where) -> int:
    if type(value) is int:
        return value
    if value is None:
        return 0
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and not isinstance(value, bool):
        try:
            return int(value)
        except ValueError:
            pass
    raise LedgerError(f"{_where(where)}: expected an integer, got {value!r}")


def _mapping(value: Any, where: Where) -> Mapping[str, Any]:
    if type(value) is dict:
        return value
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise LedgerError(f"{_where(where)}: expected an object, got {type(value).__name__}")
    return value


def _list(value: Any, where: Where) -> list[Any]:
    if type(value) is list:
        return value
    if value is None:
        return []
    raise LedgerError(f"{_where(where)}: expected a list, got {type(value).__name__}")


def _profiles(raw: Any, manufacturer: str, where: Where) -> tuple[Profile, ...]:
    out: list[Profile] = []
    for i, p in enumerate(_list(raw, where)):
        p = _mapping(p, (*where, i))
        name = str(p.get("name", ""))
        if not name or not naming.profile_is_published(name):
            continue
        placements = []
        for j, pl in enumerate(_list(p.get("placements"), (*where, i, "placements"))):
            pl = _mapping(pl, (*where, i, "placements", j))
            placements.append(
                Placement(
                    _int(pl.get("start"), (*where, i, "placements", j, "start")),
                    _int(pl.get("length"), (*where, i, "placements", j, "length")),
                )
            )
        out.append(
            Profile(
                name=name,
                published=naming.publish_profile(manufacturer, name),
                memory_mib=_int(p.get("memoryMib"), (*where, i, "memoryMib")),
                count=_int(p.get("count"), (*where, i, "count")),
                compute_slices=_int(p.get("computeSlices"), (*where, i, "computeSlices")),
                memory_slices=_int(p.get("memorySlices"), (*where, i, "memorySlices")),
                placements=tuple(placements),
            )
        )
    return tuple(out)


def _named_counts(raw: Any, where: Where) -> dict[str, int]:
    out: dict[str, int] = {}
    for i, item in enumerate(_list(raw, where)):
        item = _mapping(item, (*where, i))
        name = item.get("name")
        if isinstance(name, str) and name:
            out[name] = out.get(name, 0) + _int(item.get("count"), (*where, i, "count"))
    return out


def _capability(
    status: Mapping[str, Any],
    group_detail: Mapping[str, Any],
    manufacturer: str,
    where: Where,
    cache: dict[Any, Capability],
) -> Capability:
    logical_raw = status.get("logicalSliced")
    physical_raw = status.get("physicalSliced")
    if not logical_raw and not physical_raw:
        # The card reports no slicing status of its own: the group's catalog stands in.
        logical_raw = group_detail.get("logical")
        physical_raw = group_detail.get("physical")
        where = (*where[:-1], "acceleratorSlicedDetail")
    logical = _mapping(logical_raw, (*where, "logicalSliced"))
    physical = _mapping(physical_raw, (*where, "physicalSliced"))
    raw_profiles = physical.get("profiles")
    key: Any = _capability_key(logical, physical, manufacturer)
    try:
        cached = cache.get(key)
    except TypeError:  # an unhashable count: read uncached (the readers below refuse it, naming the field)
        key, cached = None, None
    if cached is not None:
        return cached
    profiles = _profiles(raw_profiles, manufacturer, (*where, "physicalSliced", "profiles"))
    ceiling = _int(physical.get("count"), (*where, "physicalSliced", "count"))
    if ceiling == 0 and profiles:
        ceiling = max(p.count for p in profiles)
    partitioned = ceiling > 0
    capability = Capability(
        logical_slots=0 if partitioned else _int(logical.get("count"), (*where, "logicalSliced", "count")),
        cores_overcommit=bool(logical.get("coresPercentageOvercommit", False)),
        profiles=profiles,
        partition_ceiling=ceiling,
    )
    if key is not None:
        cache[key] = capability
    return capability


def _capability_key(logical: Mapping[str, Any], physical: Mapping[str, Any], manufacturer: str) -> Any:
    """What a card's capability is read from (a profile's published name depends on its manufacturer)."""
    raw_profiles = physical.get("profiles")
    return (
        logical.get("count"),
        logical.get("coresPercentageOvercommit"),
        physical.get("count"),
        (repr(raw_profiles), manufacturer) if raw_profiles else None,
    )


_MODES = (Mode.NONE, Mode.EXCLUSIVE, Mode.SHARED, Mode.SLICED, Mode.PARTITIONED, Mode.VISIBILITY)


def _card(
    spec_card: Mapping[str, Any],
    capability: Capability,
    row: Mapping[str, Any] | None,
    where: Where,
    catalog: Mapping[str, int],
) -> Card:
    status = _mapping(spec_card.get("status"), (*where, "status"))
    card_id = str(spec_card.get("id", ""))
    index = _int(spec_card.get("index"), (*where, "index"))
    unhealthy = bool(status.get("unhealthy", False))
    if row is None:
        return Card(card_id, index, capability, unhealthy, remaining_profiles=catalog)
    rwhere = (*where, "(ledger)")
    raw_mode = _int(row.get("mode"), (*rwhere, "mode"))
    mode = _MODES[raw_mode] if 0 <= raw_mode < len(_MODES) else Mode.UNKNOWN
    if mode is Mode.VISIBILITY:
        mode = Mode.NONE
    allocated = _int(row.get("allocated"), (*rwhere, "allocated"))
    remaining = _remaining(mode, allocated, row, lambda v: _int(v, (*rwhere, "remaining")))
    allocated_profiles: Mapping[str, int] = NO_COUNTS
    remaining_profiles: Mapping[str, int] = catalog
    if capability.profiles and ("allocatedProfiles" in row or "remainingProfiles" in row):
        allocated_profiles = _named_counts(row.get("allocatedProfiles"), (*rwhere, "allocatedProfiles"))
        counted = _named_counts(row.get("remainingProfiles"), (*rwhere, "remainingProfiles"))
        if allocated_profiles or counted:
            remaining_profiles = counted
    return Card(
        card_id,
        index,
        capability,
        unhealthy,
        mode,
        allocated,
        min(remaining, M),
        _int(row.get("allocatedSlices"), (*rwhere, "allocatedSlices")),
        allocated_profiles,
        remaining_profiles,
        True,
        raw_mode,
    )


def _remaining(mode: Mode, allocated: int, row: Mapping[str, Any], read: Any) -> int:
    """A ledger row's free units as written. A row that says nothing of them (GPUStack omits a zero) is free when
    it holds nothing in no mode — an empty row is never a full card — and full otherwise."""
    raw = row.get("remaining")
    if raw is None:
        return M if mode is Mode.NONE and allocated == 0 else 0
    return int(read(raw))


def parse_devices(obj: Mapping[str, Any], capabilities: dict[Any, Capability] | None = None) -> NodeDevices:
    """Read one ``Devices`` object (v1alpha1 or v1) into records.

    ``capabilities`` is a cache the caller keeps across the objects of one read, so that identical cards on every
    node share one :class:`Capability` record. Raises LedgerError with the offending field's path when the object's
    shape is wrong.
    """
    try:
        return _parse_well_formed(obj, {} if capabilities is None else capabilities)
    except Exception:  # noqa: BLE001 - anything unusual takes the checked path, which names the field
        return _parse_checked(obj)


_EMPTY: Mapping[str, Any] = MappingProxyType({})


class _Unusual(Exception):
    """The object is not in the common shape: read it with the checked parser."""


def _descriptor_int(value: Any) -> int:
    """A descriptor (cores) that no gate reads: anything but a whole number reads as 0 rather than refusing the
    ledger."""
    if type(value) is int:
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return 0


def _plain_int(value: Any) -> int:
    if type(value) is int:
        return value
    if value is None:
        return 0
    raise _Unusual


def _parse_well_formed(obj: Mapping[str, Any], cache: dict[Any, Capability]) -> NodeDevices:
    """The checked parser's result for a well-formed object, without its per-field bookkeeping.

    Raises on anything it does not expect; parse_devices then falls back to the checked parser. The strings many
    nodes repeat (label keys and values, the group's names) are interned, so a large pool holds each once.
    """
    meta = obj["metadata"]
    name = meta["name"]
    labels = meta.get("labels") or {}
    version = meta.get("resourceVersion", "")
    if type(name) is not str or type(version) is not str or not all(type(v) is str for v in labels.values()):
        raise _Unusual
    rows: dict[tuple[str, str], dict[str, Mapping[str, Any]]] = {}
    for g in (obj.get("status") or _EMPTY).get("groups") or ():
        rows[(g["manufacturer"], g["id"])] = {a["id"]: a for a in g.get("accelerators") or ()}
    groups: list[Group] = []
    none, visibility = Mode.NONE, Mode.VISIBILITY
    for gi, g in enumerate(obj["spec"]["groups"]):
        mfr = g["manufacturer"]
        gid = g["id"]
        product, family = g.get("name", ""), g.get("family", "")
        if type(mfr) is not str or type(gid) is not str or type(product) is not str or type(family) is not str:
            raise _Unusual
        detail = g.get("acceleratorSlicedDetail") or _EMPTY
        ledger_rows = rows.get((mfr, gid), _EMPTY)
        cards = []
        capability: Capability | None = None
        catalog: Mapping[str, int] = NO_COUNTS
        previous: Any = None
        for ai, a in enumerate(g["accelerators"]):
            status = a.get("status") or _EMPTY
            # The cards of a group mostly report the same status: the previous card's capability then stands.
            if capability is None or (status is not previous and status != previous):
                logical = status.get("logicalSliced")
                physical = status.get("physicalSliced")
                if not logical and not physical:
                    logical = detail.get("logical")
                    physical = detail.get("physical")
                # An unhashable count raises: the checked parser reads it.
                capability = cache.get(_capability_key(logical or _EMPTY, physical or _EMPTY, mfr))
                if capability is None:
                    where = ("Devices", "spec", "groups", gi, "accelerators", ai, "status")
                    capability = _capability(status, detail, mfr, where, cache)
                catalog = (
                    MappingProxyType({p.name: p.count for p in capability.profiles})
                    if capability.profiles
                    else NO_COUNTS
                )
                previous = status
            card_id = a["id"]
            if type(card_id) is not str:
                raise _Unusual
            index = _plain_int(a.get("index"))
            unhealthy = status.get("unhealthy", False) is True
            row = ledger_rows.get(card_id)
            if row is None:
                cards.append(Card(card_id, index, capability, unhealthy, remaining_profiles=catalog))
                continue
            raw_mode = _plain_int(row.get("mode"))
            if not 0 <= raw_mode < 6:
                raise _Unusual
            mode = _MODES[raw_mode]
            if mode is visibility:
                mode = none
            allocated = _plain_int(row.get("allocated"))
            raw_remaining = row.get("remaining")
            if raw_remaining is None:
                remaining = M if mode is none and allocated == 0 else 0
            else:
                remaining = _plain_int(raw_remaining)
            if capability.profiles and ("allocatedProfiles" in row or "remainingProfiles" in row):
                raise _Unusual
            cards.append(
                Card(
                    card_id,
                    index,
                    capability,
                    unhealthy,
                    mode,
                    allocated,
                    min(remaining, M),
                    _plain_int(row.get("allocatedSlices")),
                    NO_COUNTS,
                    catalog,
                    True,
                    raw_mode,
                )
            )
        groups.append(
            Group(
                intern(gid),
                intern(mfr),
                intern(product),
                _plain_int(g.get("memory")),
                tuple(cards),
                intern(family),
                _plain_int(g.get("cores")),
                intern(str(g.get("computeCapability") or "")),
                intern(str(g.get("runtimeVersion") or "")),
                intern(str(g.get("driverVersion") or "")),
            )
        )
    return NodeDevices(
        node=name,
        labels={intern(k): intern(v) for k, v in labels.items()},
        groups=tuple(groups),
        resource_version=version,
    )


def _parse_checked(obj: Mapping[str, Any]) -> NodeDevices:
    """Read a Devices object field by field, naming the offending field when its shape is wrong."""
    meta = _mapping(obj.get("metadata"), ("metadata",))
    name = str(meta.get("name", ""))
    top = f"Devices {name or '<unnamed>'}:"
    spec = _mapping(obj.get("spec"), (top, "spec"))
    status = _mapping(obj.get("status"), (top, "status"))
    rows: dict[tuple[str, str], dict[str, Mapping[str, Any]]] = {}
    for gi, g in enumerate(_list(status.get("groups"), (top, "status", "groups"))):
        g = _mapping(g, (top, "status", "groups", gi))
        by_id: dict[str, Mapping[str, Any]] = {}
        for ai, a in enumerate(_list(g.get("accelerators"), (top, "status", "groups", gi, "accelerators"))):
            a = _mapping(a, (top, "status", "groups", gi, "accelerators", ai))
            by_id[str(a.get("id", ""))] = a
        rows[(str(g.get("manufacturer", "")), str(g.get("id", "")))] = by_id
    groups: list[Group] = []
    cache: dict[Any, Capability] = {}
    for gi, g in enumerate(_list(spec.get("groups"), (top, "spec", "groups"))):
        gwhere = (top, "spec", "groups", gi)
        g = _mapping(g, gwhere)
        mfr = str(g.get("manufacturer", ""))
        gid = str(g.get("id", ""))
        detail = _mapping(g.get("acceleratorSlicedDetail"), (*gwhere, "acceleratorSlicedDetail"))
        ledger_rows = rows.get((mfr, gid), {})
        cards = []
        for ai, a in enumerate(_list(g.get("accelerators"), (*gwhere, "accelerators"))):
            where = (*gwhere, "accelerators", ai)
            a = _mapping(a, where)
            capability = _capability(
                _mapping(a.get("status"), (*where, "status")), detail, mfr, (*where, "status"), cache
            )
            catalog = (
                MappingProxyType({p.name: p.count for p in capability.profiles}) if capability.profiles else NO_COUNTS
            )
            cards.append(_card(a, capability, ledger_rows.get(str(a.get("id", ""))), where, catalog))
        groups.append(
            Group(
                id=gid,
                manufacturer=mfr,
                product=str(g.get("name", "")),
                memory_mib=_int(g.get("memory"), (*gwhere, "memory")),
                cards=tuple(cards),
                family=str(g.get("family", "")),
                cores=_descriptor_int(g.get("cores")),
                compute_capability=str(g.get("computeCapability") or ""),
                runtime_version=str(g.get("runtimeVersion") or ""),
                driver_version=str(g.get("driverVersion") or ""),
            )
        )
    labels = {str(k): str(v) for k, v in _mapping(meta.get("labels"), (top, "metadata", "labels")).items()}
    return NodeDevices(
        node=name, labels=labels, groups=tuple(groups), resource_version=str(meta.get("resourceVersion", ""))
    )
