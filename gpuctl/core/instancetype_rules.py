"""The InstanceType webhooks (validating and mutating; CREATE and UPDATE; ``failurePolicy: Fail``), the unit presets
of derived types, and the names derived from node keys.

The InstanceType handlers opt out of the deletion guard: their rules read no other object, so they still run while
the type is being deleted.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
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
    required,
)
from gpuctl.core.errors import InputError
from gpuctl.core.instancetypes import parse_instancetype
from gpuctl.core.lifecycle import Operation, deletion_guard
from gpuctl.core.units import QuantityError, parse_quantity
from gpuctl.core.workloads import ResourceFlavor

RECEIVES_DELETION_UPDATES: Final = True
"""InstanceType opts out of the deletion guard."""

MUTABLE_SPEC_FIELDS: Final = ("displayName", "inactive")
"""The documented contract (docs/design.md): every spec field is frozen after create except ``displayName`` (a rename) and ``inactive`` (in or
out of service); ``description`` is frozen too."""
IMMUTABLE_MESSAGE: Final = "is immutable except displayName and inactive"
GI_SUFFIX_DETAIL: Final = 'must be a positive integer with a case-sensitive "Gi" suffix'
UNITLESS_CPU_DETAIL: Final = "must be a positive integer with no unit suffix"
CPU_ONLY_CPU_DETAIL: Final = "must be 1 when acceleratable is false"

LABEL_NAME_MAX: Final = 63
LABEL_VALUE_MAX: Final = 63
OBJECT_NAME_MAX: Final = 253
CAPACITY_SUFFIX: Final = ".capacity"
NODE_KEY_MAX: Final = LABEL_NAME_MAX - len(CAPACITY_SUFFIX)
"""54: the longest node key whose flavor label ``<prefix>/<key>.capacity`` still fits a label name."""

_POSITIVE_INTEGER: Final = re.compile(r"[1-9][0-9]*")
_GI_QUANTITY: Final = re.compile(r"[1-9][0-9]*Gi")
_LABEL_NAME: Final = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_NODE_KEY: Final = re.compile(r"[a-z0-9]+(-[a-z0-9]+)*")
_NAME_PART: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


_DNS_SUBDOMAIN: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
INT64_MAX: Final = 2**63 - 1


def api_server_errors(obj: Any) -> list[str]:
    """What the API server itself refuses before any webhook sees the object, in its words: a name that is not a
    lowercase RFC 1123 subdomain, and quantities too large to hold (an integer beyond int64, a size whose bytes do not
    fit one)."""
    meta = _mapping(_mapping(obj).get("metadata"))
    name = meta.get("name")
    errors = []
    if not isinstance(name, str) or not name:
        errors.append(required("metadata.name", "name or generateName is required"))
    elif len(name) > OBJECT_NAME_MAX:
        errors.append(invalid("metadata.name", name, f"must be no more than {OBJECT_NAME_MAX} characters"))
    elif not _DNS_SUBDOMAIN.fullmatch(name):
        errors.append(
            invalid(
                "metadata.name",
                name,
                "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and "
                "must start and end with an alphanumeric character (e.g. 'example.com')",
            )
        )
    spec = _mapping(_mapping(obj).get("spec"))
    cpu = _mapping(spec.get("unitResources")).get("cpu")
    if isinstance(cpu, bool) or (isinstance(cpu, int) and not 0 < cpu <= INT64_MAX):
        errors.append(invalid("spec.unitResources.cpu", cpu, f"must be a whole number from 1 to {INT64_MAX}"))
    elif isinstance(cpu, str) and _POSITIVE_INTEGER.fullmatch(cpu) and int(cpu) > INT64_MAX:
        errors.append(invalid("spec.unitResources.cpu", cpu, f"must be at most {INT64_MAX} cores"))
    most = INT64_MAX // 2**30
    for path, value in (
        ("spec.unitResources.ram", _mapping(spec.get("unitResources")).get("ram")),
        ("spec.localStorage", spec.get("localStorage")),
    ):
        if isinstance(value, str) and _GI_QUANTITY.fullmatch(value) and int(value[:-2]) > most:
            errors.append(invalid(path, value, f"must fit a Kubernetes quantity of bytes: at most {most}Gi"))
    return errors


# ----------------------------------------------------------------------------------------------- label syntax


def label_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be the name part of a label key (None when it can)."""
    if not name:
        return "must not be empty"
    if len(name) > LABEL_NAME_MAX:
        return f"must be no more than {LABEL_NAME_MAX} characters"
    if not _LABEL_NAME.fullmatch(name):
        return "must consist of letters, digits, '-', '_' or '.', and start and end with a letter or digit"
    return None


def label_value_problem(value: str) -> str | None:
    """Why ``value`` cannot be a label value (None when it can)."""
    if len(value) > LABEL_VALUE_MAX:
        return f"must be no more than {LABEL_VALUE_MAX} characters"
    if value and not _LABEL_NAME.fullmatch(value):
        return "must consist of letters, digits, '-', '_' or '.', and start and end with a letter or digit"
    return None


def _label_key_is_valid(key: str) -> bool:
    prefix, _, name = key.rpartition("/")
    return label_name_problem(name) is None and len(prefix) <= OBJECT_NAME_MAX


# ----------------------------------------------------------------------------------------------- validation, create


def _acceleratable(spec: Mapping[str, Any]) -> bool:
    """``spec.acceleratable`` as the rules read it; an absent field reads as "has an acceleratorGroup"."""
    value = spec.get("acceleratable")
    if value is None:
        return bool(spec.get("acceleratorGroup"))
    return value is True


def _is_empty(value: Any) -> bool:
    return value is None or value == ""


def _accelerator_group_errors(spec: Mapping[str, Any], acceleratable: bool) -> list[str]:
    group = spec.get("acceleratorGroup")
    path = "spec.acceleratorGroup"
    if not acceleratable:
        return [] if _is_empty(group) else [forbidden(path, "must not be specified when acceleratable is false")]
    if _is_empty(group):
        return [required(path, "must be specified when acceleratable is true")]
    if not isinstance(group, str):
        return [invalid(path, group, "must be a string")]
    problem = label_name_problem(group)
    if problem:
        return [invalid(path, group, f"{problem}: it names the pool label {naming.accelerator_label('<key>')}")]
    return []


def _general_group_errors(spec: Mapping[str, Any]) -> list[str]:
    group = spec.get("generalGroup")
    path = "spec.generalGroup"
    if _is_empty(group) or group == naming.GENERIC:
        return []
    if not isinstance(group, str):
        return [invalid(path, group, "must be a string")]
    problem = label_name_problem(group)
    if problem:
        return [invalid(path, group, f"{problem}: it names the pool label {naming.general_label('<key>')}")]
    return []


def _platform_errors(spec: Mapping[str, Any]) -> list[str]:
    errors: list[str] = []
    for field, label in (("os", naming.LABEL_OS), ("arch", naming.LABEL_ARCH)):
        value = spec.get(field)
        path = f"spec.{field}"
        if _is_empty(value):
            errors.append(required(path, "must be specified"))
        elif not isinstance(value, str):
            errors.append(invalid(path, value, "must be a string"))
        elif problem := label_value_problem(value):
            errors.append(invalid(path, value, f"{problem}: it is the value of the pool label {label}"))
    return errors


def _shaped_errors(path: str, value: Any, pattern: re.Pattern[str], detail: str) -> list[str]:
    if _is_empty(value):
        return [required(path, detail)]
    if not isinstance(value, str) or not pattern.fullmatch(value):
        return [invalid(path, value, detail)]
    return []


def _unit_errors(spec: Mapping[str, Any], acceleratable: bool) -> list[str]:
    unit = spec.get("unitResources")
    if unit is not None and not isinstance(unit, Mapping):
        return [invalid("spec.unitResources", unit, "must be an object with cpu and ram")]
    unit = _mapping(unit)
    cpu = unit.get("cpu")
    if acceleratable:
        errors = _shaped_errors("spec.unitResources.cpu", cpu, _POSITIVE_INTEGER, UNITLESS_CPU_DETAIL)
    elif _is_empty(cpu):
        errors = [required("spec.unitResources.cpu", CPU_ONLY_CPU_DETAIL)]
    else:
        errors = [] if cpu == "1" else [invalid("spec.unitResources.cpu", cpu, CPU_ONLY_CPU_DETAIL)]
    errors += _shaped_errors("spec.unitResources.ram", unit.get("ram"), _GI_QUANTITY, GI_SUFFIX_DETAIL)
    errors += _shaped_errors("spec.localStorage", spec.get("localStorage"), _GI_QUANTITY, GI_SUFFIX_DETAIL)
    return errors


def instancetype_create_errors(obj: Any) -> list[str]:
    """Every field error of an InstanceType on CREATE (empty when it passes). Read independently of any setting."""
    spec = _mapping(obj).get("spec")
    if not isinstance(spec, Mapping):
        return [required("spec", "must be specified")]
    errors: list[str] = []
    raw = spec.get("acceleratable")
    if raw is not None and not isinstance(raw, bool):
        errors.append(invalid("spec.acceleratable", raw, "must be true or false"))
    acceleratable = _acceleratable(spec)
    errors += _accelerator_group_errors(spec, acceleratable)
    errors += _general_group_errors(spec)
    errors += _platform_errors(spec)
    errors += _unit_errors(spec, acceleratable)
    return errors


@fail_closed
def validate_instancetype_create(obj: Any) -> Admission:
    """The validating webhook on CREATE: the complete input is required; several errors are aggregated."""
    if not isinstance(obj, dict):
        return deny("the request object is not an InstanceType")
    errors = instancetype_create_errors(obj)
    return deny(aggregate(errors)) if errors else allow()


# ----------------------------------------------------------------------------------------------- validation, update


def frozen_spec(spec: Mapping[str, Any]) -> JSON:
    """The part of a spec that may never change, with the defaulting webhook's own fills read as written.

    ``generalGroup`` empty reads as ``generic`` and an absent ``acceleratable`` as inferred, so that a legacy type
    stored before the defaulting wrote them is not read as changed when the defaulting writes them on update.
    """
    frozen = {k: v for k, v in spec.items() if k not in MUTABLE_SPEC_FIELDS}
    if _is_empty(frozen.get("generalGroup")):
        frozen["generalGroup"] = naming.GENERIC
    if frozen.get("acceleratable") is None:
        frozen["acceleratable"] = _acceleratable(spec)
    return frozen


@fail_closed
def validate_instancetype_update(old: Any, new: Any) -> Admission:
    """The validating webhook on UPDATE: only immutability is re-checked, never the create-time shape, so a legacy
    type can still be renamed or taken in and out of service."""
    if not isinstance(new, dict) or not isinstance(old, dict):
        return deny("the request object is not an InstanceType")
    if frozen_spec(_mapping(old.get("spec"))) != frozen_spec(_mapping(new.get("spec"))):
        return deny(forbidden("spec", IMMUTABLE_MESSAGE))
    return allow()


# ----------------------------------------------------------------------------------------------- defaulting


def desired_labels(obj: Mapping[str, Any], *, cpu_aware: bool = False) -> dict[str, str]:
    """The labels the defaulting webhook stamps: the pool labels, ``feature.gpustack.ai/acceleratable`` and the queue
    entrance. A label that could not be stored (a missing or malformed input) is left out, so the validating
    webhook, not the API server, explains the input."""
    record = parse_instancetype(obj)
    labels = {
        key: value
        for key, value in record.pool_labels(cpu_aware=cpu_aware).items()
        if value and _label_key_is_valid(key) and label_value_problem(value) is None
    }
    labels[naming.LABEL_ACCELERATABLE] = "true" if record.acceleratable else "false"
    if record.name:
        labels[naming.LABEL_QUEUE_ENTRANCE] = naming.queue_entrance(record.name)
    return labels


def _is_feature_key(key: str) -> bool:
    return key.startswith((naming.GENERAL_PREFIX, naming.ACCELERATABLE_PREFIX))


def restamp_labels(labels: Mapping[str, str], desired: Mapping[str, str]) -> dict[str, str]:
    """``labels`` with ``desired`` stamped and stale ``general.``/``acceleratable.`` feature keys pruned."""
    kept = {k: v for k, v in labels.items() if not _is_feature_key(k) or k in desired}
    return {**kept, **desired}


def matching_flavor(spec: Mapping[str, Any], flavors: Sequence[ResourceFlavor]) -> ResourceFlavor | None:
    """The ResourceFlavor describing this type's nodes: the same os and arch, the type's accelerator group (an
    accelerated type) and its general group (unless ``generic``); the first by name when several match (flavors of
    one model differ only in cards per node)."""
    os, arch = spec.get("os"), spec.get("arch")
    group, general = spec.get("acceleratorGroup"), spec.get("generalGroup") or naming.GENERIC
    accelerated = _acceleratable(spec)
    if accelerated and not group:
        return None
    for f in sorted(flavors, key=lambda f: f.name):
        labels = f.node_labels
        if labels.get(naming.LABEL_OS) != os or labels.get(naming.LABEL_ARCH) != arch:
            continue
        if accelerated != bool(f.accelerator_keys) or (accelerated and f.accelerator_keys != (group,)):
            continue
        if general != naming.GENERIC and labels.get(naming.general_label(str(general))) != "true":
            continue
        if not accelerated and general == naming.GENERIC:
            return None  # a generic CPU pool spans every CPU model: no one flavor describes it
        return f
    return None


def _cpu_detail(note: str) -> JSON | None:
    try:
        value = json.loads(note)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def enrich_descriptors(spec: JSON, flavor: ResourceFlavor, *, cpu_aware: bool) -> list[str]:
    """Fill the type's empty descriptors from its flavor's ``note.gpustack.ai/*`` annotations: ``product``,
    ``memory`` and ``cores`` of an accelerated type, and with CPU awareness on the ``cpuDetail`` note folded into
    ``spec.accelerator.cpu`` (accelerated) or ``spec.cpu`` (generic). A value the user set is never replaced; an
    unreadable note is skipped with a warning."""
    warnings: list[str] = []
    notes = flavor.notes
    if _acceleratable(spec):
        if notes.get("product") and _is_empty(spec.get("product")):
            spec["product"] = notes["product"]
        memory = notes.get("memory")
        if memory and _is_empty(spec.get("memory")):
            try:
                parse_quantity(memory)
                spec["memory"] = memory
            except QuantityError:
                warnings.append(f"ResourceFlavor {flavor.name}: note.gpustack.ai/memory {memory!r} is no quantity")
        cores = notes.get("cores")
        if cores and _is_empty(spec.get("cores")):
            if cores.isdigit():
                spec["cores"] = int(cores)
            else:
                warnings.append(f"ResourceFlavor {flavor.name}: note.gpustack.ai/cores {cores!r} is no whole number")
    if cpu_aware and notes.get("cpuDetail"):
        detail = _cpu_detail(notes["cpuDetail"])
        if detail is None:
            warnings.append(f"ResourceFlavor {flavor.name}: note.gpustack.ai/cpuDetail is not a JSON object")
        elif _acceleratable(spec):
            accelerator = spec.setdefault("accelerator", {})
            if isinstance(accelerator, dict) and _is_empty(accelerator.get("cpu")):
                accelerator["cpu"] = detail
        elif _is_empty(spec.get("cpu")):
            spec["cpu"] = detail
    return warnings


@fail_closed
def default_instancetype(
    obj: Any, *, cpu_aware: bool = False, flavors: Sequence[ResourceFlavor] = (), enrich: bool = False
) -> Admission:
    """The mutating webhook: ``generalGroup`` defaults to ``generic``, an absent ``acceleratable`` is written as
    inferred, and the pool labels and queue entrance are stamped (stale feature keys pruned). With ``enrich`` (a
    CREATE: the spec is frozen after it), empty descriptors are filled from the matching ResourceFlavor's notes."""
    if not isinstance(obj, dict):
        return deny("the request object is not an InstanceType")
    mutated = deep_copy(obj)
    spec = mutated.get("spec")
    if not isinstance(spec, dict):
        return deny(required("spec", "must be specified"))
    metadata = mutated.setdefault("metadata", {})
    if not isinstance(metadata, dict):
        return deny(invalid("metadata", metadata, "must be an object"))
    labels = metadata.get("labels")
    if labels is not None and not isinstance(labels, dict):
        return deny(invalid("metadata.labels", labels, "must be a map of strings"))
    if _is_empty(spec.get("generalGroup")):
        spec["generalGroup"] = naming.GENERIC
    if spec.get("acceleratable") is None:
        spec["acceleratable"] = _acceleratable(spec)
    metadata["labels"] = restamp_labels(labels or {}, desired_labels(mutated, cpu_aware=cpu_aware))
    warnings = [] if metadata.get("name") else ["metadata.name is empty: no queue entrance label was stamped"]
    if enrich:
        flavor = matching_flavor(spec, flavors)
        if flavor is not None:
            warnings += enrich_descriptors(spec, flavor, cpu_aware=cpu_aware)
        elif _acceleratable(spec) and spec.get("acceleratorGroup"):
            warnings.append(
                f"no ResourceFlavor describes {spec.get('acceleratorGroup')} nodes yet: the card memory comes from "
                "status.detail once the operator publishes the pool's detail"
            )
    return allow(mutated, warnings=warnings, changed=[("metadata",), ("spec",)])


# ----------------------------------------------------------------------------------------------- handlers


def _validating_handler(operation: Operation, obj: Any, old: Any = None) -> Admission:
    if operation == "CREATE":
        return validate_instancetype_create(obj)
    if operation == "UPDATE":
        return validate_instancetype_update(old, obj)
    return allow()


def _mutating_handler(
    operation: Operation, obj: Any, *, cpu_aware: bool = False, flavors: Sequence[ResourceFlavor] = ()
) -> Admission:
    if operation in ("CREATE", "UPDATE"):
        return default_instancetype(obj, cpu_aware=cpu_aware, flavors=flavors, enrich=operation == "CREATE")
    return allow()


instancetype_validating_webhook = fail_closed(
    deletion_guard(_validating_handler, receives_deletion_updates=RECEIVES_DELETION_UPDATES)
)
"""``(operation, object, old_object) -> Admission``: the registered validating handler."""

instancetype_mutating_webhook = fail_closed(
    deletion_guard(_mutating_handler, receives_deletion_updates=RECEIVES_DELETION_UPDATES)
)
"""``(operation, object, *, cpu_aware, flavors) -> Admission``: the registered mutating handler."""


# ----------------------------------------------------------------------------------------------- unit presets


@dataclass(frozen=True, slots=True)
class UnitPreset:
    """The unit spec stamped once on a derived type: ``unitResources.cpu``/``.ram`` and ``localStorage``."""

    cpu: str
    ram: str
    local_storage: str
    source: str
    """What chose it: a product row (``nvidia-h100``), a memory tier (``small``…``xlarge``), ``cpu`` or ``fallback``."""


LOCAL_STORAGE_PRESET: Final = "100Gi"
CPU_ONLY_PRESET: Final = UnitPreset("1", "2Gi", LOCAL_STORAGE_PRESET, "cpu")
FALLBACK_PRESET: Final = UnitPreset("4", "16Gi", LOCAL_STORAGE_PRESET, "fallback")

_SIZES: Final = {"8/32": ("8", "32Gi"), "8/64": ("8", "64Gi"), "12/128": ("12", "128Gi"), "12/192": ("12", "192Gi")}

_PRODUCT_ROWS: Final[tuple[tuple[str, str, str], ...]] = (
    # (manufacturer, model tokens (fnmatch per token), size)
    *(("nvidia", m, "12/192") for m in ("h100", "h200", "h800", "b200", "b300", "gb200", "gb300", "gh200")),
    *(("nvidia", m, "12/128") for m in ("a100-80gb", "a800-80gb", "l40s")),
    *(
        ("nvidia", m, "8/64")
        for m in ("a100", "a100-40gb", "a800", "a800-40gb", "a10", "a10g", "l40", "rtx-4090", "rtx-5090", "v100-32gb")
    ),
    *(
        ("nvidia", m, "8/32")
        for m in (
            "t4",
            "l4",
            "a30",
            "v100",
            "v100s",
            "gb10",
            "rtx-pro-4500",
            "rtx-6000",
            "rtx-4000",
            "rtx-a6000",
            "rtx-a5000",
            "rtx-a4000",
            "rtx-3090",
        )
    ),
    *(("ascend", m, "8/64") for m in ("310p*", "910b*")),
    *(("ascend", m, "12/192") for m in ("910-93??", "950*")),
    *(("amd", m, "12/192") for m in ("mi300x", "mi308x", "mi325x", "mi350x", "mi355x")),
    *(("amd", m, "8/64") for m in ("mi250", "mi250x")),
    ("amd", "mi210", "12/128"),
    *(("cambricon", m, "8/64") for m in ("mlu370", "mlu590")),
    *(("hygon", m, "8/32") for m in ("z100", "z100l")),
    *(("hygon", m, "12/128") for m in ("k100", "bw100")),
    ("hygon", "bw1000", "12/192"),
    ("metax", "mxc500", "8/64"),
    *(("metax", m, "12/128") for m in ("mxc550", "mxc588", "mxc600")),
    *(("mthreads", m, "8/64") for m in ("mtt-s4000", "mtt-s5000")),
    *(("iluvatar", m, "8/64") for m in ("bi-v100", "bi-v150", "mr-v50", "mr-v100")),
    *(("thead", m, "8/64") for m in ("ppu-zw810e", "ppu-zwm890")),
)

_QUALIFIER: Final = re.compile(r"(sxm[0-9]*|pcie|nvl[0-9]*|hbm[0-9]*e?|[0-9]+gb?|oam|smx)")
"""Form-factor and memory tokens a product row may skip over (``a100-sxm4-80gb`` is an ``a100-80gb``)."""


def _row_matches(row: list[str], model: list[str]) -> bool:
    """Whether the row's tokens appear in order in the model's tokens, anything allowed before the first and after
    the last, and only form-factor or memory tokens in between."""
    for start, token in enumerate(model):
        if not fnmatchcase(token, row[0]):
            continue
        i = start + 1
        matched = 1
        while matched < len(row) and i < len(model):
            if fnmatchcase(model[i], row[matched]):
                matched += 1
            elif not _QUALIFIER.fullmatch(model[i]):
                break
            i += 1
        if matched == len(row):
            return True
    return False


def product_preset(accelerator_key: str) -> UnitPreset | None:
    """The product row of an accelerator key (``<manufacturer>-<group id>``), or None. The row with the most model
    tokens wins (``a100-80gb`` over ``a100``)."""
    manufacturer, _, model = accelerator_key.partition("-")
    tokens = [t for t in model.split("-") if t]
    best: tuple[int, str, str] | None = None
    for row_manufacturer, row_model, size in _PRODUCT_ROWS:
        if row_manufacturer != manufacturer:
            continue
        row = row_model.split("-")
        if _row_matches(row, tokens) and (best is None or len(row) > best[0]):
            best = (len(row), f"{row_manufacturer}-{row_model}", size)
    if best is None:
        return None
    cpu, ram = _SIZES[best[2]]
    return UnitPreset(cpu, ram, LOCAL_STORAGE_PRESET, best[1])


def tier_preset(memory_gib: float) -> UnitPreset:
    """The memory tier of a card: ``small`` ≤16 GiB, ``medium`` ≤48, ``large`` ≤96, ``xlarge`` above."""
    if memory_gib <= 16:
        return UnitPreset("8", "32Gi", LOCAL_STORAGE_PRESET, "small")
    if memory_gib <= 48:
        return UnitPreset("8", "64Gi", LOCAL_STORAGE_PRESET, "medium")
    if memory_gib <= 96:
        return UnitPreset("12", "128Gi", LOCAL_STORAGE_PRESET, "large")
    return UnitPreset("12", "192Gi", LOCAL_STORAGE_PRESET, "xlarge")


def unit_preset(accelerator_key: str | None, memory_gib: float | None) -> UnitPreset:
    """The unit spec of a derived type.

    CPU-only (no accelerator key) → ``1``/``2Gi``. Otherwise a product row of the key wins, since it names the host
    the product is published in; without one, the card memory's tier; without a usable memory, ``fallback``
    ``4``/``16Gi``. Local storage is always ``100Gi``.
    """
    if not accelerator_key:
        return CPU_ONLY_PRESET
    row = product_preset(accelerator_key)
    if row is not None:
        return row
    if memory_gib is not None and memory_gib == memory_gib and memory_gib > 0:  # NaN reads as unknown
        return tier_preset(memory_gib)
    return FALLBACK_PRESET


# ----------------------------------------------------------------------------------------------- derived names


class DerivedNameError(InputError, ValueError):
    """A derived name that cannot be built: a component could not be a label, or the name would be too long."""


def _check_node_key(what: str, key: str) -> None:
    if not _NODE_KEY.fullmatch(key):
        raise DerivedNameError(f"{what} {key!r} is not a node key: use lower-case letters and digits joined by '-'")
    if len(key) > NODE_KEY_MAX:
        raise DerivedNameError(
            f"{what} {key!r} is {len(key)} characters: a node key may have at most {NODE_KEY_MAX}, so that its "
            f"flavor label <prefix>/<key>{CAPACITY_SUFFIX} stays within {LABEL_NAME_MAX} characters"
        )


def _check_platform(os: str, arch: str) -> None:
    for what, value in (("os", os), ("arch", arch)):
        if not _NAME_PART.fullmatch(value) or len(value) > LABEL_VALUE_MAX:
            raise DerivedNameError(
                f"{what} {value!r} cannot be a label value and part of a name: use at most {LABEL_VALUE_MAX} "
                "lower-case letters, digits and '-'"
            )


def _check_count(what: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise DerivedNameError(f"{what} must be a positive whole number, got {value!r}")


def _checked_name(name: str) -> str:
    if len(name) > OBJECT_NAME_MAX:
        raise DerivedNameError(f"derived name {name!r} is {len(name)} characters; at most {OBJECT_NAME_MAX} allowed")
    return name


def cpu_flavor_name(general_key: str, os: str, arch: str, cores: int) -> str:
    """A CPU ResourceFlavor: ``gpustack--<gKey>-<os>-<arch>-<cores>c``."""
    _check_node_key("general key", general_key)
    _check_platform(os, arch)
    _check_count("cores", cores)
    return _checked_name(f"{naming.QUEUE_PREFIX}-{general_key}-{os}-{arch}-{cores}c")


def accelerated_flavor_name(general_key: str, accelerator_key: str, os: str, arch: str, cards: int) -> str:
    """An accelerated ResourceFlavor: ``gpustack--<gKey>--<aKey>-<os>-<arch>-<n>d`` (n = cards per node)."""
    _check_node_key("general key", general_key)
    _check_node_key("accelerator key", accelerator_key)
    _check_platform(os, arch)
    _check_count("cards", cards)
    return _checked_name(f"{naming.QUEUE_PREFIX}-{general_key}--{accelerator_key}-{os}-{arch}-{cards}d")


def _pool_key(general_key: str, accelerator_key: str | None, cpu_aware: bool) -> str:
    if accelerator_key is not None:
        _check_node_key("accelerator key", accelerator_key)
    if cpu_aware:
        _check_node_key("general key", general_key)
        return f"{general_key}--{accelerator_key}" if accelerator_key else general_key
    return accelerator_key or naming.GENERIC


def pool_name(general_key: str, accelerator_key: str | None, os: str, arch: str, *, cpu_aware: bool = False) -> str:
    """The ClusterQueue (and InstanceType) name of a pool, grouped by ``instance-type-aware-cpu-manufacturer``.

    aware=false: ``gpustack--generic-<os>-<arch>`` (CPU) and ``gpustack--<aKey>-<os>-<arch>``;
    aware=true: ``gpustack--<gKey>-<os>-<arch>`` and ``gpustack--<gKey>--<aKey>-<os>-<arch>``.
    The name may exceed 63 characters: it is an object name, never a label value (the LocalQueue and the label carry
    its 31-character entrance; the full name goes in the ``schedule.gpustack.ai/queue`` annotation).
    """
    key = _pool_key(general_key, accelerator_key, cpu_aware)
    _check_platform(os, arch)
    return _checked_name(f"{naming.QUEUE_PREFIX}-{key}-{os}-{arch}")


def instancetype_flavor_name(general_key: str, accelerator_key: str | None, *, cpu_aware: bool = False) -> str:
    """The InstanceTypeFlavor name: ``gpustack--generic`` / ``gpustack--<aKey>`` (aware=false),
    ``gpustack--<gKey>`` / ``gpustack--<gKey>--<aKey>`` (aware=true)."""
    return _checked_name(f"{naming.QUEUE_PREFIX}-{_pool_key(general_key, accelerator_key, cpu_aware)}")
