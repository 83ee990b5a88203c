"""InstanceType records: the operator-owned pool type, its pool labels, card memory and offered profiles."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuctl.core import naming
from gpuctl.core.errors import GpuctlError
from gpuctl.core.units import QuantityError, quantity_to_mib

API_GROUP = "worker.gpustack.ai"
KIND = "InstanceType"


@dataclass(frozen=True, slots=True)
class OfferedProfile:
    """A partition profile the pool offers (capability catalog), in its published spelling."""

    name: str
    memory_mib: int
    count: int


@dataclass(frozen=True, slots=True)
class PublishedView:
    once_max_request: int
    remaining: int
    capacity: int


@dataclass(frozen=True, slots=True)
class InstanceType:
    """The parts of an InstanceType the gates read."""

    name: str
    labels: Mapping[str, str]
    acceleratable: bool
    accelerator_group: str
    general_group: str
    os: str
    arch: str
    unit_cpu: str
    unit_ram: str
    local_storage: str
    inactive: bool
    display_name: str
    memory: str
    """Per-card memory as written: ``spec.memory`` (the fold's divisor, docs/design.md), falling back to
    ``status.detail.memory`` when the spec has none."""
    manufacturer: str
    product: str
    logical_slices: int
    """``slicedDetail.logical.count``: the pool is logically sliceable when above 0."""
    offered_profiles: tuple[OfferedProfile, ...]
    entrance: str
    phase: str
    published_views: Mapping[str, PublishedView]
    published_profiles: Mapping[str, Mapping[str, int]]
    deleting: bool = False
    inactive_since: str = ""
    """When ``spec.inactive`` was last written, at the latest: the time of the ``managedFields`` entry that owns it
    (else the creation time); "" when unknown."""

    @property
    def card_mib(self) -> int | None:
        """Per-card memory in MiB, or None when the detail is not published yet or unreadable."""
        if not self.memory:
            return None
        try:
            mib = quantity_to_mib(self.memory)
        except QuantityError:
            return None
        return mib if mib > 0 else None

    @property
    def expected_entrance(self) -> str:
        return naming.queue_entrance(self.name)

    @property
    def queue_entrance_label(self) -> str:
        """The ``schedule.gpustack.ai/queue-entrance`` label, or the entrance the defaulting webhook would stamp."""
        return self.labels.get(naming.LABEL_QUEUE_ENTRANCE) or self.expected_entrance

    def pool_labels(self, *, cpu_aware: bool = False) -> dict[str, str]:
        return naming.pool_labels(
            acceleratable=self.acceleratable,
            accelerator_group=self.accelerator_group,
            general_group=self.general_group,
            os=self.os,
            arch=self.arch,
            cpu_aware=cpu_aware or self.general_group not in ("", naming.GENERIC),
        )

    def offered(self, published: str) -> OfferedProfile | None:
        for p in self.offered_profiles:
            if p.name == published:
                return p
        return None


class InstanceTypeError(GpuctlError, ValueError):
    """An InstanceType whose shape cannot be read."""


def _m(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _l(value: Any) -> list[Any]:
    return value if type(value) is list else []


def _i(value: Any) -> int:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value)
    if isinstance(value, str):
        from gpuctl.core.units import parse_quantity

        try:
            return int(parse_quantity(value))
        except QuantityError:
            return 0
    return 0


def parse_instancetype(obj: Mapping[str, Any]) -> InstanceType:
    """Read a ``worker.gpustack.ai`` InstanceType (v1alpha1 or v1; newest shape, falling back to the older spec)."""
    meta = _m(obj.get("metadata"))
    spec = _m(obj.get("spec"))
    status = _m(obj.get("status"))
    detail = _m(status.get("detail"))
    unit = _m(spec.get("unitResources"))
    sliced = _m(detail.get("slicedDetail"))
    manufacturer = str(detail.get("manufacturer") or spec.get("manufacturer") or "")
    if not sliced:
        feature = _m(spec.get("feature"))
        sliced = {
            "logical": {"count": _m(feature.get("logicalSliced")).get("maxSize", 0)},
            "physical": _m(feature.get("physicalSliced")),
        }
    profiles = tuple(
        OfferedProfile(
            name=naming.publish_profile(manufacturer, str(p.get("name", ""))),
            memory_mib=_i(p.get("memoryMib")),
            count=_i(p.get("count")),
        )
        for p in (_m(x) for x in _l(_m(sliced.get("physical")).get("profiles")))
        if p.get("name") and naming.profile_is_published(str(p.get("name")))
    )
    views: dict[str, PublishedView] = {}
    published_profiles: dict[str, dict[str, int]] = {}
    for key in ("accelerator", "acceleratorShared", "acceleratorSliced", "acceleratorPartitioned", "cpu"):
        v = _m(status.get(key))
        if v:
            views[key] = PublishedView(_i(v.get("onceMaxRequest")), _i(v.get("remaining")), _i(v.get("capacity")))
    pt = _m(status.get("acceleratorPartitioned"))
    for key in ("remainingProfiles", "allocatedProfiles"):
        published_profiles[key] = {str(_m(p).get("name")): _i(_m(p).get("count")) for p in _l(pt.get(key))}
    labels = {str(k): str(v) for k, v in _m(meta.get("labels")).items()}
    acceleratable = spec.get("acceleratable")
    if acceleratable is None:
        acceleratable = bool(spec.get("acceleratorGroup"))
    return InstanceType(
        name=str(meta.get("name", "")),
        labels=labels,
        acceleratable=bool(acceleratable),
        accelerator_group=str(spec.get("acceleratorGroup") or ""),
        general_group=str(spec.get("generalGroup") or naming.GENERIC),
        os=str(spec.get("os") or ""),
        arch=str(spec.get("arch") or ""),
        unit_cpu=str(unit.get("cpu") or ""),
        unit_ram=str(unit.get("ram") or ""),
        local_storage=str(spec.get("localStorage") or ""),
        inactive=bool(spec.get("inactive", False)),
        display_name=str(spec.get("displayName") or ""),
        memory=str(spec.get("memory") or detail.get("memory") or ""),
        manufacturer=manufacturer,
        product=str(detail.get("product") or spec.get("product") or ""),
        logical_slices=_i(_m(sliced.get("logical")).get("count")),
        offered_profiles=profiles,
        entrance=str(status.get("entrance") or ""),
        phase=str(status.get("phase") or ""),
        published_views=views,
        published_profiles=published_profiles,
        deleting=bool(meta.get("deletionTimestamp")),
        inactive_since=_inactive_since(meta),
    )


def _inactive_since(meta: Mapping[str, Any]) -> str:
    """The time of the last ``managedFields`` entry owning ``spec.inactive``, else the creation time."""
    since = ""
    entries = meta.get("managedFields")
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, Mapping) and "f:inactive" in _m(_m(entry.get("fieldsV1")).get("f:spec")):
            since = max(since, str(entry.get("time") or ""))
    return since or str(meta.get("creationTimestamp") or "")


def find_by_entrance(types: list[InstanceType] | tuple[InstanceType, ...], queue_name: str) -> list[InstanceType]:
    """The InstanceTypes whose ``schedule.gpustack.ai/queue-entrance`` label equals a Pod's queue name."""
    return [t for t in types if t.labels.get(naming.LABEL_QUEUE_ENTRANCE) == queue_name]
