"""Instances: the record, and the Instance webhooks (validating and mutating; CREATE and UPDATE;
``failurePolicy: Fail``).

The unit spec lives on the InstanceType; an Instance is sized from it by the defaulting webhook and bounded by it
on create and update. Instance keeps the deletion guard: its defaulting reads the InstanceType, so an InstanceType
deleted ahead of its Instances would otherwise leave each one undeletable.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Final

from gpuctl.core import naming
from gpuctl.core.admission import (
    JSON,
    Admission,
    aggregate,
    allow,
    deep_copy,
    deny,
    fail_closed,
    forbidden,
    invalid,
    not_supported,
    required,
)
from gpuctl.core.instancetypes import InstanceType
from gpuctl.core.lifecycle import (
    CAN_ONLY_START_STOPPED,
    CANNOT_STOP_STARTING,
    InstancePhase,
    Operation,
    deletion_guard,
    should_stop_instance,
)
from gpuctl.core.units import QuantityError, format_quantity, parse_quantity

KIND: Final = "Instance"
RECEIVES_DELETION_UPDATES: Final = False
"""Instance keeps the deletion guard."""

RESERVED_NAMESPACES: Final = frozenset({"kube-system", "kube-public", "kube-node-lease", "gpustack-system"})
RUNNING_IMMUTABLE_FIELDS: Final = (
    "type",
    "image",
    "imagePullPolicy",
    "command",
    "privileged",
    "ports",
    "env",
    "volumeMount",
    "imagePullSecret",
    "resources",
    "sshPublicKey",
    "nodeName",
    "additionalVolumes",
)
DEFAULT_LOCAL_STORAGE: Final = "15Gi"

RESOURCES: Final = "spec.resources"
CPU_PATH: Final = f"{RESOURCES}.cpu"
RAM_PATH: Final = f"{RESOURCES}.ram"
STORAGE_PATH: Final = f"{RESOURCES}.localStorage"
ACCELERATOR_PATH: Final = f"{RESOURCES}.accelerator"
MEMORY_PERCENT_PATH: Final = f"{RESOURCES}.acceleratorSlicedMemoryPercentage"
CORES_PERCENT_PATH: Final = f"{RESOURCES}.acceleratorSlicedCoresPercentage"
PROFILE_PATH: Final = f"{RESOURCES}.acceleratorPartitionedProfile"

MUTUALLY_EXCLUSIVE: Final = "a hardware partition and a logical slice percentage are mutually exclusive"
RESERVED_NAMESPACE: Final = "cannot create instance in reserved namespace"
BOTH_VOLUMES: Final = "cannot specify both ephemeral and persistent of volume"
NO_VOLUME: Final = "either ephemeral or persistent of volume should be specified"
PERCENT_RANGE: Final = "must be between 0 and 100"
NOT_ACCELERATABLE: Final = "accelerator request must not be specified for non-acceleratable instance type"
NEGATIVE_ACCELERATOR: Final = "accelerator request cannot be negative"
FRACTIONAL_ACCELERATOR: Final = "accelerator request must be a whole number of cards"
IMMUTABLE_WHILE_RUNNING: Final = "is immutable while the instance is running; stop it first"
PRIVILEGED_NOT_ALLOWED: Final = "privileged instances are not allowed (setting instance-privileged-allowed is false)"
HOST_PATH_NOT_ALLOWED: Final = "host path volumes are not allowed (setting instance-host-path-volume-allowed is false)"


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _text(value: Any) -> str:
    return "" if value is None else value if isinstance(value, str) else str(value)


def _percent(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


# ----------------------------------------------------------------------------------------------- the record


@dataclass(frozen=True, slots=True)
class InstanceResources:
    """``spec.resources`` as written (quantities as their strings, "" when absent)."""

    cpu: str
    ram: str
    local_storage: str
    accelerator: str
    sliced_memory_percentage: int
    sliced_cores_percentage: int
    partitioned_profile: str

    @property
    def family(self) -> str:
        """``partitioned``, ``sliced`` or ``whole`` (an accelerated type's whole cards; CPU on a CPU-only type)."""
        if self.partitioned_profile:
            return "partitioned"
        if self.sliced_memory_percentage or self.sliced_cores_percentage:
            return "sliced"
        return "whole"


@dataclass(frozen=True, slots=True)
class Instance:
    """The parts of an Instance the rules, the stop controller and the CLI read."""

    name: str
    namespace: str
    type: str
    stop: bool
    phase: str
    resources: InstanceResources
    volume: str
    """``ephemeral``, ``persistent``, ``both`` (invalid) or "" (none)."""
    node_name: str
    resource_version: str
    deleting: bool = False
    stopped_by: str = ""
    """The field manager that set ``spec.stop`` (from ``managedFields``), "" when unknown."""

    @property
    def running(self) -> bool:
        """Not asked to stop: its Pod exists or is being created."""
        return not self.stop


def volume_kind(volume: Any) -> str:
    v = _mapping(volume)
    ephemeral, persistent = v.get("ephemeral") is not None, v.get("persistent") is not None
    if ephemeral and persistent:
        return "both"
    return "ephemeral" if ephemeral else "persistent" if persistent else ""


def parse_resources(resources: Any) -> InstanceResources:
    r = _mapping(resources)
    return InstanceResources(
        cpu=_text(r.get("cpu")),
        ram=_text(r.get("ram")),
        local_storage=_text(r.get("localStorage")),
        accelerator=_text(r.get("accelerator")),
        sliced_memory_percentage=_percent(r.get("acceleratorSlicedMemoryPercentage")),
        sliced_cores_percentage=_percent(r.get("acceleratorSlicedCoresPercentage")),
        partitioned_profile=_text(r.get("acceleratorPartitionedProfile")),
    )


def _stop_manager(managed: object) -> str:
    """The last manager in ``managedFields`` that owns ``spec.stop``."""
    owner = ""
    for entry in managed if isinstance(managed, list) else []:
        fields = _mapping(_mapping(_mapping(entry).get("fieldsV1")).get("f:spec"))
        if "f:stop" in fields:
            owner = _text(_mapping(entry).get("manager"))
    return owner


def parse_instance(obj: Mapping[str, Any]) -> Instance:
    """Read a ``worker.gpustack.ai`` Instance (v1alpha1 or v1); never raises on an odd shape."""
    meta = _mapping(obj.get("metadata")) if isinstance(obj, Mapping) else {}
    spec = _mapping(obj.get("spec")) if isinstance(obj, Mapping) else {}
    status = _mapping(obj.get("status")) if isinstance(obj, Mapping) else {}
    return Instance(
        name=_text(meta.get("name")),
        namespace=_text(meta.get("namespace")),
        type=_text(spec.get("type")),
        stop=spec.get("stop") is True,
        phase=_text(status.get("phase")),
        resources=parse_resources(spec.get("resources")),
        volume=volume_kind(spec.get("volume")),
        node_name=_text(spec.get("nodeName")),
        resource_version=_text(meta.get("resourceVersion")),
        deleting=bool(meta.get("deletionTimestamp")),
        stopped_by=_stop_manager(meta.get("managedFields")),
    )


# ----------------------------------------------------------------------------------------------- reading a request


@dataclass(frozen=True, slots=True)
class Amount:
    """A quantity of ``spec.resources``: as written, and its value."""

    raw: Any
    value: Fraction


@dataclass(frozen=True, slots=True)
class ResourceRequest:
    """``spec.resources`` read as numbers; absent quantities are None, absent percentages 0."""

    cpu: Amount | None
    ram: Amount | None
    local_storage: Amount | None
    accelerator: Amount | None
    memory_percent: int
    cores_percent: int
    profile: str

    @property
    def sliced(self) -> bool:
        return self.memory_percent > 0 or self.cores_percent > 0

    @property
    def partitioned(self) -> bool:
        return bool(self.profile)

    @property
    def cards(self) -> Fraction:
        """The accelerator count; absent or 0 reads as 1."""
        if self.accelerator is None or self.accelerator.value == 0:
            return Fraction(1)
        return self.accelerator.value


def _amount(resources: Mapping[str, Any], field: str, errors: list[str], negative: str) -> Amount | None:
    raw = resources.get(field)
    if raw is None or raw == "":
        return None
    path = f"{RESOURCES}.{field}"
    if not isinstance(raw, (str, int, float)) or isinstance(raw, bool):
        errors.append(invalid(path, raw, "must be a quantity such as 2, 500m or 64Gi"))
        return None
    try:
        value = parse_quantity(raw)
    except (QuantityError, ValueError, ArithmeticError):
        errors.append(invalid(path, raw, "must be a quantity such as 2, 500m or 64Gi"))
        return None
    if value < 0:
        errors.append(invalid(path, raw, negative))
        return None
    return Amount(raw, value)


def _percentage(resources: Mapping[str, Any], field: str, errors: list[str]) -> int:
    raw = resources.get(field)
    if raw is None:
        return 0
    if isinstance(raw, bool) or not isinstance(raw, int) or not 0 <= raw <= 100:
        errors.append(invalid(f"{RESOURCES}.{field}", raw, PERCENT_RANGE))
        return 0
    return raw


def read_request(resources: Any) -> tuple[ResourceRequest, list[str]]:
    """``spec.resources`` as numbers, and the field errors of what cannot be read."""
    errors: list[str] = []
    if resources is not None and not isinstance(resources, Mapping):
        errors.append(invalid(RESOURCES, resources, "must be an object"))
    r = _mapping(resources)
    profile = r.get("acceleratorPartitionedProfile")
    if profile is not None and not isinstance(profile, str):
        errors.append(invalid(PROFILE_PATH, profile, "must be a partition profile name such as 3g.40gb"))
        profile = ""
    request = ResourceRequest(
        cpu=_amount(r, "cpu", errors, "must not be negative"),
        ram=_amount(r, "ram", errors, "must not be negative"),
        local_storage=_amount(r, "localStorage", errors, "must not be negative"),
        accelerator=_amount(r, "accelerator", errors, NEGATIVE_ACCELERATOR),
        memory_percent=_percentage(r, "acceleratorSlicedMemoryPercentage", errors),
        cores_percent=_percentage(r, "acceleratorSlicedCoresPercentage", errors),
        profile=profile or "",
    )
    return request, errors


def _unit(value: str) -> Fraction | None:
    """A unit quantity of the InstanceType, or None when the (legacy) type carries none that can be read."""
    if not value:
        return None
    try:
        q = parse_quantity(value)
    except QuantityError:
        return None
    return q if q > 0 else None


def _cpu_text(q: Fraction) -> str:
    return format_quantity(q)


def _ram_text(q: Fraction) -> str:
    return format_quantity(math.floor(q), binary=True)


# ----------------------------------------------------------------------------------------------- resource rules


def _not_ready(instancetype: InstanceType) -> bool:
    """The type's accelerator detail (``status.detail``) is not published yet."""
    return not instancetype.manufacturer


def _retry_detail(instancetype: InstanceType) -> str:
    return (
        f"instance type {instancetype.name} has not published its accelerator detail (status.detail) yet; "
        "retry once it is ready"
    )


def _offered_names(instancetype: InstanceType) -> list[str]:
    return [p.name for p in instancetype.offered_profiles]


def slice_errors(request: ResourceRequest, instancetype: InstanceType) -> list[str]:
    """A logical slice: sized by its memory percentage, on a pool with logically sliceable accelerators."""
    if request.memory_percent == 0:
        return [
            required(
                MEMORY_PERCENT_PATH,
                "a logical slice is sized by its memory percentage; set it with acceleratorSlicedCoresPercentage",
            )
        ]
    if _not_ready(instancetype):
        return [forbidden(MEMORY_PERCENT_PATH, _retry_detail(instancetype))]
    if instancetype.logical_slices > 0:
        return []
    if instancetype.offered_profiles:
        return [
            forbidden(
                MEMORY_PERCENT_PATH,
                f"instance type {instancetype.name} offers no logical slicing: its accelerators are partitioned; "
                f"request a partition with {PROFILE_PATH} (offered: {', '.join(_offered_names(instancetype))})",
            )
        ]
    return [forbidden(MEMORY_PERCENT_PATH, f"instance type {instancetype.name} offers no logical slicing")]


def partition_errors(request: ResourceRequest, instancetype: InstanceType) -> list[str]:
    """A hardware partition: a profile the pool offers, on a manufacturer with partitioning."""
    if _not_ready(instancetype):
        return [forbidden(PROFILE_PATH, _retry_detail(instancetype))]
    manufacturer = naming.MANUFACTURERS.get(instancetype.manufacturer)
    if manufacturer is not None and manufacturer.partition_kind is None:
        return [forbidden(PROFILE_PATH, f"{manufacturer.name} accelerators have no hardware partitioning")]
    if not instancetype.offered_profiles:
        return [forbidden(PROFILE_PATH, f"instance type {instancetype.name} offers no partition profiles")]
    if instancetype.offered(request.profile) is None:
        return [not_supported(PROFILE_PATH, request.profile, _offered_names(instancetype))]
    return []


def whole_card_errors(request: ResourceRequest, instancetype: InstanceType) -> list[str]:
    """Whole cards: a whole count within the pool's total (``status.accelerator.capacity``)."""
    cards = request.cards
    raw = request.accelerator.raw if request.accelerator is not None else 1
    if cards.denominator != 1:
        return [invalid(ACCELERATOR_PATH, raw, FRACTIONAL_ACCELERATOR)]
    view = instancetype.published_views.get("accelerator")
    if view is not None and cards > view.capacity:
        return [
            invalid(
                ACCELERATOR_PATH,
                raw,
                f"exceeds the maximum accelerator request of instance type {instancetype.name} "
                f"(the pool has {view.capacity})",
            )
        ]
    return []


def _single_card_errors(request: ResourceRequest, kind: str) -> list[str]:
    if request.cards == 1:
        return []
    raw = request.accelerator.raw if request.accelerator is not None else ""
    return [invalid(ACCELERATOR_PATH, raw, f"accelerator request must be exactly 1 for a {kind} request")]


def _bound_error(path: str, amount: Amount | None, bound: Fraction | None, detail: str) -> list[str]:
    if amount is None or bound is None or amount.value <= bound:
        return []
    return [invalid(path, amount.raw, detail)]


def unit_bound_errors(request: ResourceRequest, instancetype: InstanceType, count: Fraction) -> list[str]:
    """CPU and RAM within ``unit × count``, local storage within the type's ``localStorage``."""
    name = instancetype.name
    errors: list[str] = []
    unit_cpu, unit_ram = _unit(instancetype.unit_cpu), _unit(instancetype.unit_ram)
    storage = _unit(instancetype.local_storage)
    if instancetype.acceleratable and unit_cpu is not None:
        bound = unit_cpu * count
        errors += _bound_error(
            CPU_PATH, request.cpu, bound, f"exceeds the maximum CPU {_cpu_text(bound)} of instance type {name}"
        )
    if unit_ram is not None:
        bound = unit_ram * count
        errors += _bound_error(
            RAM_PATH, request.ram, bound, f"exceeds the maximum RAM {_ram_text(bound)} of instance type {name}"
        )
    if storage is not None:
        errors += _bound_error(
            STORAGE_PATH,
            request.local_storage,
            storage,
            f"exceeds the local storage {_ram_text(storage)} of instance type {name}",
        )
    return errors


def accelerated_errors(request: ResourceRequest, instancetype: InstanceType) -> list[str]:
    if request.partitioned and request.sliced:
        return [forbidden(RESOURCES, MUTUALLY_EXCLUSIVE)]
    if request.sliced:
        errors = _single_card_errors(request, "sliced") + slice_errors(request, instancetype)
        return errors + unit_bound_errors(request, instancetype, Fraction(1))
    if request.partitioned:
        errors = _single_card_errors(request, "partitioned") + partition_errors(request, instancetype)
        return errors + unit_bound_errors(request, instancetype, Fraction(1))
    errors = whole_card_errors(request, instancetype)
    return errors + (unit_bound_errors(request, instancetype, request.cards) if not errors else [])


def cpu_only_errors(request: ResourceRequest, instancetype: InstanceType) -> list[str]:
    """A CPU-only type: no accelerator; CPU within the pool's total cores (``status.cpu.capacity``), never what is
    free now; RAM within ``unitRAM × CPU``."""
    errors = [
        forbidden(path, NOT_ACCELERATABLE)
        for path, present in (
            (ACCELERATOR_PATH, request.accelerator is not None and request.accelerator.value != 0),
            (MEMORY_PERCENT_PATH, request.memory_percent > 0),
            (CORES_PERCENT_PATH, request.cores_percent > 0),
            (PROFILE_PATH, request.partitioned),
        )
        if present
    ]
    cores = request.cpu.value if request.cpu is not None and request.cpu.value > 0 else Fraction(1)
    view = instancetype.published_views.get("cpu")
    if view is not None:
        errors += _bound_error(
            CPU_PATH,
            request.cpu,
            Fraction(view.capacity),
            f"exceeds the maximum CPU {view.capacity} of instance type {instancetype.name}",
        )
    return errors + unit_bound_errors(request, instancetype, cores)


def resource_errors(resources: Any, instancetype: InstanceType) -> list[str]:
    """Every rule of ``spec.resources`` against the InstanceType (empty when the request fits)."""
    request, errors = read_request(resources)
    if errors:
        return errors
    if instancetype.acceleratable:
        return accelerated_errors(request, instancetype)
    return cpu_only_errors(request, instancetype)


# ----------------------------------------------------------------------------------------------- other rules


def volume_errors(spec: Mapping[str, Any]) -> list[str]:
    kind = volume_kind(spec.get("volume"))
    if kind == "both":
        return [forbidden("spec.volume", BOTH_VOLUMES)]
    if not kind:
        return [required("spec.volume", NO_VOLUME)]
    return []


def _host_path_volumes(spec: Mapping[str, Any]) -> list[tuple[int, Any]]:
    volumes = spec.get("additionalVolumes")
    if not isinstance(volumes, list):
        return []
    return [(i, v) for i, v in enumerate(volumes) if _mapping(v).get("hostPath") is not None]


def settings_errors(
    spec: Mapping[str, Any], old_spec: Mapping[str, Any] | None, *, privileged_allowed: bool, host_path_allowed: bool
) -> list[str]:
    """The settings gates, applied only when a privilege is taken or widened: what the stored object already holds
    is kept."""
    errors: list[str] = []
    was_privileged = old_spec is not None and old_spec.get("privileged") is True
    if not privileged_allowed and spec.get("privileged") is True and not was_privileged:
        errors.append(forbidden("spec.privileged", PRIVILEGED_NOT_ALLOWED))
    if not host_path_allowed:
        held = [v for _, v in _host_path_volumes(old_spec or {})]
        for i, volume in _host_path_volumes(spec):
            if volume not in held:
                errors.append(forbidden(f"spec.additionalVolumes[{i}].hostPath", HOST_PATH_NOT_ALLOWED))
    return errors


def _phase(obj: Mapping[str, Any]) -> str:
    return _text(_mapping(obj.get("status")).get("phase"))


def update_errors(spec: Mapping[str, Any], old: Mapping[str, Any], *, stop_while_starting: bool = False) -> list[str]:
    """Immutability and the stop/start transitions. A ``Starting`` Instance may be stopped only by the running-instance
    stop (``stop_while_starting``): its InstanceType is gone or being deleted, or its queue is ``HoldAndDrain``."""
    old_spec = _mapping(old.get("spec"))
    errors: list[str] = []
    if spec.get("volume") != old_spec.get("volume"):
        errors.append(forbidden("spec.volume", "is immutable"))
    was_stopped, stops = old_spec.get("stop") is True, spec.get("stop") is True
    if not was_stopped:
        errors += [
            forbidden(f"spec.{field}", IMMUTABLE_WHILE_RUNNING)
            for field in RUNNING_IMMUTABLE_FIELDS
            if spec.get(field) != old_spec.get(field)
        ]
    phase = _phase(old)
    if was_stopped and not stops and phase != InstancePhase.STOPPED:
        errors.append(forbidden("spec.stop", CAN_ONLY_START_STOPPED))
    if not was_stopped and stops and phase == InstancePhase.STARTING and not stop_while_starting:
        errors.append(forbidden("spec.stop", CANNOT_STOP_STARTING))
    return errors


def _resources_need_check(spec: Mapping[str, Any], old_spec: Mapping[str, Any] | None) -> bool:
    """Create, a start, and an update that changes the type or the resources re-check the resources; a stop or an
    edit of anything else does not, so a pool that shrank never blocks stopping an instance."""
    if old_spec is None:
        return True
    starts = old_spec.get("stop") is True and spec.get("stop") is not True
    return starts or spec.get("type") != old_spec.get("type") or spec.get("resources") != old_spec.get("resources")


def _type_errors(spec: Mapping[str, Any], instancetype: InstanceType | None, check: bool) -> list[str]:
    type_name = spec.get("type")
    if _is_blank(type_name):
        return [required("spec.type", "must be specified")]
    if not isinstance(type_name, str):
        return [invalid("spec.type", type_name, "must be the name of an InstanceType")]
    if instancetype is None:
        return [invalid("spec.type", type_name, "no InstanceType of that name exists")] if check else []
    return resource_errors(spec.get("resources"), instancetype) if check else []


def _is_blank(value: Any) -> bool:
    return value is None or value == ""


def instance_errors(
    obj: Mapping[str, Any],
    old: Mapping[str, Any] | None,
    instancetype: InstanceType | None,
    *,
    privileged_allowed: bool = False,
    host_path_allowed: bool = False,
    reserved_namespaces: frozenset[str] = RESERVED_NAMESPACES,
    stop_policy: str = "None",
) -> list[str]:
    """Every field error of an Instance on CREATE (``old`` None) or UPDATE. ``stop_policy`` is the stop policy of the
    ClusterQueue behind its InstanceType (the running-instance stop reads it)."""
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        return [required("spec", "must be specified")]
    old_spec = _mapping(old.get("spec")) if old is not None else None
    errors: list[str] = []
    if old is None and _text(_mapping(obj.get("metadata")).get("namespace")) in reserved_namespaces:
        errors.append(forbidden("metadata.namespace", RESERVED_NAMESPACE))
    if _is_blank(spec.get("image")):
        errors.append(required("spec.image", "must be specified"))
    errors += _type_errors(spec, instancetype, _resources_need_check(spec, old_spec))
    errors += volume_errors(spec)
    errors += settings_errors(
        spec, old_spec, privileged_allowed=privileged_allowed, host_path_allowed=host_path_allowed
    )
    if old is not None:
        stop = should_stop_instance(instancetype is not None, bool(instancetype and instancetype.deleting), stop_policy)
        errors += update_errors(spec, old, stop_while_starting=stop.stop)
    return errors


@fail_closed
def validate_instance(
    obj: Any,
    old: Any,
    instancetype: InstanceType | None,
    operation: Operation,
    *,
    privileged_allowed: bool = False,
    host_path_allowed: bool = False,
    reserved_namespaces: frozenset[str] = RESERVED_NAMESPACES,
    stop_policy: str = "None",
) -> Admission:
    """The validating webhook. ``instancetype`` is the record named by ``spec.type`` (None when there is none), and
    ``stop_policy`` its ClusterQueue's."""
    if operation not in ("CREATE", "UPDATE"):
        return allow()
    if not isinstance(obj, dict):
        return deny("the request object is not an Instance")
    if operation == "UPDATE" and not isinstance(old, dict):
        return deny("an UPDATE needs the stored Instance (oldObject)")
    errors = instance_errors(
        obj,
        old if operation == "UPDATE" else None,
        instancetype,
        privileged_allowed=privileged_allowed,
        host_path_allowed=host_path_allowed,
        reserved_namespaces=reserved_namespaces,
        stop_policy=stop_policy,
    )
    return deny(aggregate(errors)) if errors else allow()


# ----------------------------------------------------------------------------------------------- defaulting


def _absent(amount: Amount | None) -> bool:
    return amount is None or amount.value == 0


def _ceil_milli(q: Fraction) -> Fraction:
    return Fraction(math.ceil(q * 1000), 1000)


def _floor_mib(q: Fraction) -> Fraction:
    """Whole MiB rounded down (never above the unit's bound), or whole bytes below one MiB."""
    mib = math.floor(q / 2**20)
    return Fraction(mib * 2**20) if mib > 0 else Fraction(math.floor(q))


def accelerator_share(request: ResourceRequest, instancetype: InstanceType) -> Fraction | None:
    """How many cards' worth of unit the request takes: whole cards as counted, a slice by its memory percentage, a
    partition by its profile's share of the card's memory. None when it cannot be sized (left to validation)."""
    if request.sliced and request.partitioned:
        return None
    if request.sliced:
        return Fraction(request.memory_percent, 100) if request.memory_percent > 0 else None
    if request.partitioned:
        profile = instancetype.offered(request.profile)
        card = instancetype.card_mib
        if profile is None or card is None or profile.memory_mib <= 0:
            return None
        return min(Fraction(1), Fraction(profile.memory_mib, card))
    return request.cards if request.cards.denominator == 1 else None


def _default_accelerated(
    resources: JSON, request: ResourceRequest, instancetype: InstanceType, recompute: bool
) -> None:
    if _absent(request.accelerator):
        resources["accelerator"] = "1"
    share = accelerator_share(request, instancetype)
    if share is None:
        return
    unit_cpu, unit_ram = _unit(instancetype.unit_cpu), _unit(instancetype.unit_ram)
    if unit_cpu is not None and (recompute or _absent(request.cpu)):
        resources["cpu"] = _cpu_text(_ceil_milli(unit_cpu * share))
    if unit_ram is not None and (recompute or _absent(request.ram)):
        resources["ram"] = _ram_text(_floor_mib(unit_ram * share))


def _default_cpu_only(resources: JSON, request: ResourceRequest, instancetype: InstanceType, recompute: bool) -> None:
    cores = request.cpu.value if request.cpu is not None and request.cpu.value > 0 else Fraction(1)
    if _absent(request.cpu):
        resources["cpu"] = "1"
    unit_ram = _unit(instancetype.unit_ram)
    if unit_ram is not None and (recompute or _absent(request.ram)):
        resources["ram"] = _ram_text(_floor_mib(unit_ram * cores))


def _default_local_storage(resources: JSON, request: ResourceRequest, instancetype: InstanceType) -> None:
    if not _absent(request.local_storage):
        return
    default = parse_quantity(DEFAULT_LOCAL_STORAGE)
    cap = _unit(instancetype.local_storage)
    resources["localStorage"] = _ram_text(min(default, cap) if cap is not None else default)


@fail_closed
def default_instance(obj: Any, instancetype: InstanceType | None, *, overcommit: bool = True) -> Admission:
    """The mutating webhook: size ``spec.resources`` from the InstanceType's unit.

    Accelerated: ``accelerator`` defaults to 1 (0 reads as 1); CPU = unitCPU × share and RAM = unitRAM × share,
    where the share is the card count, a slice's memory percentage, or a partition's share of the card's memory.
    CPU-only: CPU defaults to 1, RAM = unitRAM × CPU. Local storage defaults to 15Gi, capped at the type's.
    With ``overcommit`` (setting ``instance-general-resources-overcommit``, default true) CPU and RAM are always
    recomputed; without it only filled when absent. A missing type or an unreadable request is left unchanged for
    the validating webhook to explain.
    """
    if not isinstance(obj, dict):
        return deny("the request object is not an Instance")
    if instancetype is None:
        return allow()
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return allow()
    request, errors = read_request(spec.get("resources"))
    if errors:
        return allow()
    mutated = deep_copy(obj)
    resources = mutated["spec"].get("resources")
    if not isinstance(resources, dict):
        resources = mutated["spec"]["resources"] = {}
    if instancetype.acceleratable:
        _default_accelerated(resources, request, instancetype, overcommit)
    else:
        _default_cpu_only(resources, request, instancetype, overcommit)
    _default_local_storage(resources, request, instancetype)
    return allow(mutated, changed=[("spec", "resources")])


# ----------------------------------------------------------------------------------------------- handlers


def _keeps_running_resources(obj: Any, old: Any) -> bool:
    """An UPDATE that leaves a running instance's resources as stored: nothing to default (a stop, a rename)."""
    old_spec, spec = _mapping(_mapping(old).get("spec")), _mapping(_mapping(obj).get("spec"))
    return old_spec.get("stop") is not True and spec.get("resources") == old_spec.get("resources")


def _mutating_handler(
    operation: Operation, obj: Any, old: Any, instancetype: InstanceType | None, *, overcommit: bool = True
) -> Admission:
    if operation == "CREATE" or (operation == "UPDATE" and not _keeps_running_resources(obj, old)):
        return default_instance(obj, instancetype, overcommit=overcommit)
    return allow()


def _validating_handler(
    operation: Operation,
    obj: Any,
    old: Any,
    instancetype: InstanceType | None,
    *,
    privileged_allowed: bool = False,
    host_path_allowed: bool = False,
    reserved_namespaces: frozenset[str] = RESERVED_NAMESPACES,
    stop_policy: str = "None",
) -> Admission:
    return validate_instance(
        obj,
        old,
        instancetype,
        operation,
        privileged_allowed=privileged_allowed,
        host_path_allowed=host_path_allowed,
        reserved_namespaces=reserved_namespaces,
        stop_policy=stop_policy,
    )


instance_validating_webhook = fail_closed(
    deletion_guard(_validating_handler, receives_deletion_updates=RECEIVES_DELETION_UPDATES)
)
"""``(operation, object, old_object, instancetype, **settings) -> Admission``: the registered validating handler."""

instance_mutating_webhook = fail_closed(
    deletion_guard(_mutating_handler, receives_deletion_updates=RECEIVES_DELETION_UPDATES)
)
"""``(operation, object, old_object, instancetype, *, overcommit) -> Admission``: the registered mutating handler."""


def why_no_pod(type_name: str, instancetype: InstanceType | None, phase: str, notes: Sequence[str] = ()) -> str:
    """Why an Instance has no Pod yet, from what its InstanceType publishes: the type missing, its accelerator detail
    or entrance not published yet, or (both published) the operator not having made the Pod — with what the
    Instance's status says (``notes``: its conditions' messages)."""
    said = f" ({'; '.join(notes)})" if notes else ""
    if instancetype is None:
        return (
            f"it has no Pod (phase {phase}): InstanceType {type_name} does not exist, and the operator makes no Pod "
            f"for a type it cannot read{said} (`gpuctl views` lists the pools)"
        )
    missing = []
    if instancetype.acceleratable and _not_ready(instancetype):
        missing.append("its accelerator detail (status.detail)")
    if not instancetype.entrance:
        missing.append("its entrance (status.entrance)")
    if missing:
        return (
            f"it has no Pod yet (phase {phase}): InstanceType {type_name} has not published {' or '.join(missing)}, "
            f"and the operator makes the Pod once it has{said}"
        )
    return (
        f"it has no Pod (phase {phase}) although InstanceType {type_name} publishes its detail and entrance: the "
        f"operator's Instance controller makes the Pod{said}; `gpuctl doctor` checks that the operator runs"
    )
