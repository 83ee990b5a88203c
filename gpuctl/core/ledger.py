"""The per-node ``Devices`` ledger as records: node → group → card.

A card joins its capability (``spec.groups[].accelerators[]``, what the detector reported) with its ledger row
(``status.groups[].accelerators[]``, what ``Allocate`` recorded). The capability decides which family a card serves;
the ledger only says how much of it is taken. A detected card without a ledger row, or with an empty one, falls back to
its catalog ceilings: free, every profile at its per-card count.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from gpuctl.core import naming
from gpuctl.core.units import PERCENT, SHARE, M


class Mode(IntEnum):
    """DeviceAllocationMode: how a card is held."""

    NONE = 0
    EXCLUSIVE = 1
    SHARED = 2
    SLICED = 3
    PARTITIONED = 4
    VISIBILITY = 5


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
class Card:
    """One accelerator: capability joined with its ledger row."""

    id: str
    index: int
    logical_slots: int
    """Logical slices the card can host (``logicalSliced.count``); 0 for a partitioned card."""
    cores_overcommit: bool
    profiles: tuple[Profile, ...]
    """Partition profiles offered (empty for an unpartitioned card)."""
    partition_ceiling: int
    """``physicalSliced.count``: the largest per-profile count."""
    unhealthy: bool = False
    mode: Mode = Mode.NONE
    allocated: int = 0
    remaining: int = M
    allocated_slices: int = 0
    allocated_profiles: Mapping[str, int] = field(default_factory=dict)
    remaining_profiles: Mapping[str, int] = field(default_factory=dict)
    has_ledger: bool = False

    @property
    def partitioned(self) -> bool:
        """A card serves partitions when it reports a physical-slicing capability."""
        return self.partition_ceiling > 0 or bool(self.profiles)

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

    @property
    def accelerator_key(self) -> str:
        return naming.accelerator_key(self.manufacturer, self.id)


@dataclass(frozen=True, slots=True)
class NodeDevices:
    """A node's ``Devices`` object."""

    node: str
    labels: Mapping[str, str]
    groups: tuple[Group, ...]
    resource_version: str = ""

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


class LedgerError(ValueError):
    """A Devices object whose shape cannot be read."""


# ----------------------------------------------------------------------------------------------- parsing


def _int(value: Any, where: str, default: int = 0) -> int:
    if value is None:
        return default
    if isinstance(value, bool):
        raise LedgerError(f"{where}: expected an integer, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            pass
    raise LedgerError(f"{where}: expected an integer, got {value!r}")


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise LedgerError(f"{where}: expected an object, got {type(value).__name__}")
    return value


def _list(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise LedgerError(f"{where}: expected a list, got {type(value).__name__}")
    return value


def _profiles(raw: Any, manufacturer: str, where: str) -> tuple[Profile, ...]:
    out: list[Profile] = []
    for i, p in enumerate(_list(raw, where)):
        p = _mapping(p, f"{where}[{i}]")
        name = str(p.get("name", ""))
        if not name or not naming.profile_is_published(name):
            continue
        placements = tuple(
            Placement(
                _int(pl.get("start"), f"{where}[{i}].placements"), _int(pl.get("length"), f"{where}[{i}].placements")
            )
            for pl in (
                _mapping(x, f"{where}[{i}].placements") for x in _list(p.get("placements"), f"{where}[{i}].placements")
            )
        )
        out.append(
            Profile(
                name=name,
                published=naming.publish_profile(manufacturer, name),
                memory_mib=_int(p.get("memoryMib"), f"{where}[{i}].memoryMib"),
                count=_int(p.get("count"), f"{where}[{i}].count"),
                compute_slices=_int(p.get("computeSlices"), f"{where}[{i}].computeSlices"),
                memory_slices=_int(p.get("memorySlices"), f"{where}[{i}].memorySlices"),
                placements=placements,
            )
        )
    return tuple(out)


def _named_counts(raw: Any, where: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for i, item in enumerate(_list(raw, where)):
        item = _mapping(item, f"{where}[{i}]")
        name = item.get("name")
        if isinstance(name, str) and name:
            out[name] = out.get(name, 0) + _int(item.get("count"), f"{where}[{i}].count")
    return out


def _card(
    spec_card: Mapping[str, Any],
    group_detail: Mapping[str, Any],
    manufacturer: str,
    row: Mapping[str, Any] | None,
    where: str,
) -> Card:
    status = _mapping(spec_card.get("status"), f"{where}.status")
    logical = _mapping(status.get("logicalSliced"), f"{where}.status.logicalSliced")
    physical = _mapping(status.get("physicalSliced"), f"{where}.status.physicalSliced")
    if not status.get("logicalSliced") and not status.get("physicalSliced"):
        # The card reports no slicing status of its own: the group's catalog stands in.
        logical = _mapping(group_detail.get("logical"), f"{where}.acceleratorSlicedDetail.logical")
        physical = _mapping(group_detail.get("physical"), f"{where}.acceleratorSlicedDetail.physical")
    profiles = _profiles(physical.get("profiles"), manufacturer, f"{where}.status.physicalSliced.profiles")
    ceiling = _int(physical.get("count"), f"{where}.status.physicalSliced.count")
    if ceiling == 0 and profiles:
        ceiling = max(p.count for p in profiles)
    partitioned = ceiling > 0
    logical_slots = 0 if partitioned else _int(logical.get("count"), f"{where}.status.logicalSliced.count")
    catalog_remaining = {p.name: p.count for p in profiles}
    base = Card(
        id=str(spec_card.get("id", "")),
        index=_int(spec_card.get("index"), f"{where}.index"),
        logical_slots=logical_slots,
        cores_overcommit=bool(logical.get("coresPercentageOvercommit", False)),
        profiles=profiles,
        partition_ceiling=ceiling,
        unhealthy=bool(status.get("unhealthy", False)),
        remaining_profiles=catalog_remaining,
    )
    if row is None:
        return base
    rwhere = f"{where} (ledger)"
    raw_mode = _int(row.get("mode"), f"{rwhere}.mode")
    try:
        mode = Mode(raw_mode)
    except ValueError:
        raise LedgerError(f"{rwhere}.mode: unknown allocation mode {raw_mode} (expected 0 to 5)") from None
    if mode is Mode.VISIBILITY:
        mode = Mode.NONE
    allocated = _int(row.get("allocated"), f"{rwhere}.allocated")
    allocated_profiles = _named_counts(row.get("allocatedProfiles"), f"{rwhere}.allocatedProfiles")
    remaining_profiles = _named_counts(row.get("remainingProfiles"), f"{rwhere}.remainingProfiles")
    if mode is Mode.NONE and allocated == 0:
        # An empty ledger row is a free card, never a full one.
        remaining = M
    else:
        remaining = _int(row.get("remaining"), f"{rwhere}.remaining")
    if not allocated_profiles and not remaining_profiles:
        remaining_profiles = catalog_remaining
    return Card(
        id=base.id,
        index=base.index,
        logical_slots=base.logical_slots,
        cores_overcommit=base.cores_overcommit,
        profiles=profiles,
        partition_ceiling=ceiling,
        unhealthy=base.unhealthy,
        mode=mode,
        allocated=allocated,
        remaining=min(remaining, M),
        allocated_slices=_int(row.get("allocatedSlices"), f"{rwhere}.allocatedSlices"),
        allocated_profiles=allocated_profiles,
        remaining_profiles=remaining_profiles,
        has_ledger=True,
    )


def parse_devices(obj: Mapping[str, Any]) -> NodeDevices:
    """Read one ``Devices`` object (v1alpha1 or v1) into records.

    Raises LedgerError with the offending field's path when the object's shape is wrong.
    """
    meta = _mapping(obj.get("metadata"), "metadata")
    name = str(meta.get("name", ""))
    where = f"Devices {name or '<unnamed>'}"
    spec = _mapping(obj.get("spec"), f"{where}: spec")
    status = _mapping(obj.get("status"), f"{where}: status")
    rows: dict[tuple[str, str], dict[str, Mapping[str, Any]]] = {}
    for gi, g in enumerate(_list(status.get("groups"), f"{where}: status.groups")):
        g = _mapping(g, f"{where}: status.groups[{gi}]")
        by_id: dict[str, Mapping[str, Any]] = {}
        for ai, a in enumerate(_list(g.get("accelerators"), f"{where}: status.groups[{gi}].accelerators")):
            a = _mapping(a, f"{where}: status.groups[{gi}].accelerators[{ai}]")
            by_id[str(a.get("id", ""))] = a
        rows[(str(g.get("manufacturer", "")), str(g.get("id", "")))] = by_id
    groups: list[Group] = []
    for gi, g in enumerate(_list(spec.get("groups"), f"{where}: spec.groups")):
        gwhere = f"{where}: spec.groups[{gi}]"
        g = _mapping(g, gwhere)
        mfr = str(g.get("manufacturer", ""))
        gid = str(g.get("id", ""))
        detail = _mapping(g.get("acceleratorSlicedDetail"), f"{gwhere}.acceleratorSlicedDetail")
        ledger_rows = rows.get((mfr, gid), {})
        cards = tuple(
            _card(
                _mapping(a, f"{gwhere}.accelerators[{ai}]"),
                detail,
                mfr,
                ledger_rows.get(str(_mapping(a, f"{gwhere}.accelerators[{ai}]").get("id", ""))),
                f"{gwhere}.accelerators[{ai}]",
            )
            for ai, a in enumerate(_list(g.get("accelerators"), f"{gwhere}.accelerators"))
        )
        groups.append(
            Group(
                id=gid,
                manufacturer=mfr,
                product=str(g.get("name", "")),
                memory_mib=_int(g.get("memory"), f"{gwhere}.memory"),
                cards=cards,
                family=str(g.get("family", "")),
            )
        )
    labels = {str(k): str(v) for k, v in _mapping(meta.get("labels"), f"{where}: metadata.labels").items()}
    return NodeDevices(
        node=name, labels=labels, groups=tuple(groups), resource_version=str(meta.get("resourceVersion", ""))
    )


def parse_devices_list(objs: Iterable[Mapping[str, Any]]) -> list[NodeDevices]:
    return [parse_devices(o) for o in objs]
