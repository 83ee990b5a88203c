"""Names: manufacturers, resource keys per family, label keys, node keys and queue entrances."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Final

from gpuctl.core.compat import StrEnum
from gpuctl.core.errors import GpuctlError

# ----------------------------------------------------------------------------------------------- label keys

LABEL_QUEUE_NAME: Final = "kueue.x-k8s.io/queue-name"
LABEL_PRIORITY_CLASS: Final = "kueue.x-k8s.io/priority-class"
"""A Workload's WorkloadPriorityClass, on the Job or Pod Kueue builds it from."""
LABEL_PODSET: Final = "kueue.x-k8s.io/podset"
ANNOTATION_WORKLOAD: Final = "kueue.x-k8s.io/workload"
LABEL_QUEUE_ENTRANCE: Final = "schedule.gpustack.ai/queue-entrance"
ANNOTATION_QUEUE: Final = "schedule.gpustack.ai/queue"
LABEL_DERIVED_FROM_NODE: Final = "schedule.gpustack.ai/derived-from-node"
LABEL_MANAGED: Final = "gpustack.ai/managed"
LABEL_OS: Final = "kubernetes.io/os"
LABEL_ARCH: Final = "kubernetes.io/arch"
LABEL_HOSTNAME: Final = "kubernetes.io/hostname"
LABEL_ACCELERATABLE: Final = "feature.gpustack.ai/acceleratable"
LABEL_RESOURCE_TYPE: Final = "resource.gpustack.ai/type"
RESOURCE_TYPE_INSTANCETYPES: Final = "instancetypes"
RESOURCE_TYPE_NODES: Final = "nodes"
LABEL_TOPOLOGY_PROFILE: Final = "topology.gpustack.ai/profile"
NOTE_PREFIX: Final = "note.gpustack.ai/"
"""ResourceFlavor annotations describing the flavor's nodes: ``acceleratable``, ``generalGroup``,
``acceleratorGroup``, ``product``, ``memory``, ``cores``, ``cpuDetail``."""
ACCELERATABLE_PREFIX: Final = "acceleratable.feature.gpustack.ai/"
GENERAL_PREFIX: Final = "general.feature.gpustack.ai/"
SLICED_FIT_PREFIX: Final = "sliced-max-free-units.fit.gpustack.ai/"
SHARED_FIT_PREFIX: Final = "shared-free-cards.fit.gpustack.ai/"
ANNOTATION_ALLOCATED: Final = "device.gpustack.ai/accelerator.allocated"
ANNOTATION_SERVING_PORT: Final = "gpuctl.gpustack.ai/serving-port"
ANNOTATION_VERSION: Final = "gpuctl.gpustack.ai/version"
"""On the operator's leader Lease: the version of gpuctl its holder runs."""
OPERATOR_FIELD_MANAGER: Final = "gpuctl-operator"
"""The field manager of the operator's writes (the CLI's is ``gpuctl``)."""
"""On the operator's Lease: the HTTPS port its leader serves the webhooks on (what ``doctor`` holds URLs to)."""
CREDITS_PREFIX: Final = "credits.gpustack.ai/"
GENERIC: Final = "generic"
FINALIZER_CONTROLLED: Final = "gpustack.ai/controlled"
QUEUE_PREFIX: Final = "gpustack-"
ENTRANCE_PREFIX: Final = "gpustack-fnv64-"
NODE_DEVICES_CHECK: Final = "gpustack-node-devices"
NODE_DEVICES_CONTROLLER: Final = "worker.gpustack.ai/node-devices"

# The operator as deployed (deploy/companion, deploy/standalone): its namespace, the name of its Deployment, Service, Lease and serving
# Secret (``<name>-tls``), and its webhook configurations. The mutating one sorts before Kueue's by name, so units
# fold before Kueue hashes a Pod's resources.
OPERATOR_NAMESPACE: Final = "gpuctl-system"
OPERATOR_NAME: Final = "gpuctl-operator"
OPERATOR_TLS_SECRET: Final = f"{OPERATOR_NAME}-tls"
INSTANCE_STOP_MANAGER: Final = "gpuctl-instance-stop"
"""The field manager of the operator's running-instance stop, so a stop by a drain is told from a user's."""
MUTATING_CONFIGURATION: Final = "gpuctl-mutation"
VALIDATING_CONFIGURATION: Final = "gpuctl-validation"
"""The standalone operator's own webhook configurations (it takes none of GPUStack's names)."""
KUEUE_MUTATING_CONFIGURATION: Final = "kueue-mutating-webhook-configuration"

# Kueue as its manifests deploy it: the manager's Deployment and the ConfigMap holding its Configuration.
KUEUE_NAMESPACE: Final = "kueue-system"
KUEUE_DEPLOYMENT: Final = "kueue-controller-manager"
KUEUE_CONFIGMAP: Final = "kueue-manager-config"
KUEUE_CONFIGMAP_KEY: Final = "controller_manager_config.yaml"


def accelerator_label(accelerator_key: str) -> str:
    """``acceleratable.feature.gpustack.ai/<aKey>``: the node (and Devices) label of an accelerator model."""
    return ACCELERATABLE_PREFIX + accelerator_key


def accelerator_count_label(accelerator_key: str) -> str:
    """``acceleratable.feature.gpustack.ai/<aKey>.count``: cards of the model per node."""
    return ACCELERATABLE_PREFIX + accelerator_key + ".count"


def general_label(general_key: str) -> str:
    return GENERAL_PREFIX + general_key


def sliced_fit_label(accelerator_key: str) -> str:
    return SLICED_FIT_PREFIX + accelerator_key


def shared_fit_label(accelerator_key: str) -> str:
    return SHARED_FIT_PREFIX + accelerator_key


# ----------------------------------------------------------------------------------------------- manufacturers


@dataclass(frozen=True, slots=True)
class Manufacturer:
    """A manufacturer's defaults: its base resource, logical slice slots per card and partition kind."""

    name: str
    pci_vendor: str
    base: str
    slice_slots: int | None
    """Logical slices one card hosts (``logicalSliced.count``); None where the table gives no figure."""
    cores_overcommit: bool
    partition_kind: str | None

    @property
    def credits(self) -> str:
        return CREDITS_PREFIX + self.name

    @property
    def visibility(self) -> str:
        return f"device.gpustack.ai/{self.name}.visibility"

    @property
    def resources(self) -> ResourceNames:
        return ResourceNames(self.base, self.partition_kind)


DEFAULT_MANUFACTURERS: Final[tuple[Manufacturer, ...]] = (
    Manufacturer("amd", "1002", "amd.com/gpu", None, False, None),
    Manufacturer("ascend", "19e5", "huawei.com/npu", 63, True, None),
    Manufacturer("cambricon", "cabc", "cambricon.com/mlu", 16, False, None),
    Manufacturer("hygon", "1d94", "hygon.com/dcu", 4, False, "mig"),
    Manufacturer("iluvatar", "1e3e", "iluvatar.com/gpu", None, False, None),
    Manufacturer("metax", "9999", "metax-tech.com/gpu", 16, False, None),
    Manufacturer("mthreads", "1ed5", "mthreads.com/gpu", 16, False, None),
    Manufacturer("nvidia", "10de", "nvidia.com/gpu", 128, True, "mig"),
    Manufacturer("thead", "1ded", "alibabacloud.com/ppu", None, False, "mig"),
)
"""GPUStack's defaults, which its chart may override per manufacturer on the worker (``GPUSTACK_<MFR>_*``)."""

WORKER_ENV_PREFIX: Final = "GPUSTACK_"
_OVERRIDE_FIELDS: Final = {
    "_ACCELERATABLE_RESOURCE_NAME": "base",
    "_PCI_VENDOR_ID": "pci_vendor",
    "_PARTITION_KIND": "partition_kind",
}
_RESOURCE_NAME: Final = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


class ManufacturerTable(Mapping[str, Manufacturer]):
    """The manufacturers a cluster's worker knows, by name, with their base resources as that worker names them.

    One table is in force at a time (:func:`use_manufacturers`): GPUStack's defaults, or those with the overrides
    read from the worker's environment, since every resource key, credit and capacity key follows from them."""

    __slots__ = ("_by_base", "_by_name", "overrides")

    def __init__(self, manufacturers: Iterable[Manufacturer], overrides: Mapping[str, str] | None = None) -> None:
        self._by_name = {m.name: m for m in manufacturers}
        self._by_base = {m.base: m for m in self._by_name.values()}
        self.overrides: Mapping[str, str] = dict(overrides or {})
        """The worker's ``GPUSTACK_<MFR>_*`` settings this table applies (name → value)."""

    def __getitem__(self, name: str) -> Manufacturer:
        return self._by_name[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_name)

    def __len__(self) -> int:
        return len(self._by_name)

    def by_base(self, base: str) -> Manufacturer | None:
        return self._by_base.get(base)


class ManufacturerOverrideError(GpuctlError, ValueError):
    """A ``GPUSTACK_<MFR>_*`` setting that cannot be applied."""


def manufacturer_table(env: Mapping[str, str]) -> ManufacturerTable:
    """GPUStack's manufacturers with the overrides among ``env`` applied, as its worker reads them at start:
    ``GPUSTACK_<MFR>_ACCELERATABLE_RESOURCE_NAME`` (the base resource), ``GPUSTACK_<MFR>_PCI_VENDOR_ID`` and
    ``GPUSTACK_<MFR>_PARTITION_KIND`` (only for a manufacturer that partitions). Other variables are ignored; an
    empty value keeps the default. Raises ManufacturerOverrideError naming the variable and the fix."""
    table = {m.name: m for m in DEFAULT_MANUFACTURERS}
    applied: dict[str, str] = {}
    for name, value in sorted(env.items()):
        if not name.startswith(WORKER_ENV_PREFIX) or not value:
            continue
        rest = name[len(WORKER_ENV_PREFIX) :]
        for suffix, attribute in _OVERRIDE_FIELDS.items():
            if not rest.endswith(suffix):
                continue
            mfr = table.get(rest[: -len(suffix)].lower())
            if mfr is None:
                break
            if attribute == "base" and not _RESOURCE_NAME.match(value):
                raise ManufacturerOverrideError(
                    f"{name}={value!r}: not a resource name; give one as <domain>/<name>, e.g. nvidia.com/gpu"
                )
            if attribute == "partition_kind":
                if mfr.partition_kind is None:
                    break  # GPUStack reads a partition kind only for the manufacturers that partition
                if not re.fullmatch(r"[a-z0-9]+", value):
                    raise ManufacturerOverrideError(
                        f"{name}={value!r}: a partition kind is lower-case letters and digits, e.g. mig"
                    )
            if attribute == "base":
                mfr = dataclasses.replace(mfr, base=value)
            elif attribute == "pci_vendor":
                mfr = dataclasses.replace(mfr, pci_vendor=value)
            else:
                mfr = dataclasses.replace(mfr, partition_kind=value)
            table[mfr.name] = mfr
            applied[name] = value
            break
    bases: dict[str, str] = {}
    for m in table.values():
        if m.base in bases:
            raise ManufacturerOverrideError(
                f"{m.base} names both {bases[m.base]} and {m.name}: give each manufacturer its own resource name"
            )
        bases[m.base] = m.name
    return ManufacturerTable(table.values(), applied)


DEFAULT_TABLE: Final = ManufacturerTable(DEFAULT_MANUFACTURERS)


class _InForce(Mapping[str, Manufacturer]):
    """The table in force, read through as a mapping (``MANUFACTURERS["nvidia"]``)."""

    table: ManufacturerTable = DEFAULT_TABLE

    def __getitem__(self, name: str) -> Manufacturer:
        return self.table[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.table)

    def __len__(self) -> int:
        return len(self.table)

    def by_base(self, base: str) -> Manufacturer | None:
        return self.table.by_base(base)

    @property
    def overrides(self) -> Mapping[str, str]:
        return self.table.overrides


MANUFACTURERS: Final = _InForce()
"""The manufacturers in force: GPUStack's defaults unless a shell set the cluster's overrides."""


@contextlib.contextmanager
def use_manufacturers(table: ManufacturerTable) -> Iterator[ManufacturerTable]:
    """Put ``table`` in force for the block (the shells call it once, where they read the cluster's worker)."""
    previous = MANUFACTURERS.table
    MANUFACTURERS.table = table
    try:
        yield table
    finally:
        MANUFACTURERS.table = previous


def set_manufacturers(table: ManufacturerTable) -> None:
    """Put ``table`` in force for the rest of the process (a command or the operator, once it knows its cluster)."""
    MANUFACTURERS.table = table


RDMA_KEYS: Final = frozenset(
    {"device.gpustack.ai/rdma", "device.gpustack.ai/rdma.shared", "device.gpustack.ai/rdma.partitioned"}
)


def manufacturer(name: str) -> Manufacturer:
    """The manufacturer named ``name``; KeyError names the known ones."""
    try:
        return MANUFACTURERS[name]
    except KeyError:
        raise KeyError(f"unknown manufacturer {name!r}; known: {', '.join(sorted(MANUFACTURERS))}") from None


# ----------------------------------------------------------------------------------------------- resource keys


class Family(StrEnum):
    """The four accelerator request families."""

    EXCLUSIVE = "exclusive"
    SHARED = "shared"
    SLICED = "sliced"
    PARTITIONED = "partitioned"


class KeyKind(StrEnum):
    """What one accelerator resource key means."""

    EXCLUSIVE = "exclusive"
    SHARED = "shared"
    SLICED = "sliced"
    SLICED_UNITS = "sliced.units"
    SLICED_CORES = "sliced.cores-percentage"
    SLICED_MEMORY_PERCENT = "sliced.memory-percentage"
    SLICED_MEMORY_MIB = "sliced.memory-mib"
    PARTITIONED = "partitioned"
    PARTITIONED_UNITS = "partitioned.units"
    PARTITIONED_PROFILE = "partitioned.profile"
    VISIBILITY = "visibility"

    @property
    def family(self) -> Family | None:
        if self is KeyKind.EXCLUSIVE:
            return Family.EXCLUSIVE
        if self is KeyKind.SHARED:
            return Family.SHARED
        if self.value.startswith("sliced"):
            return Family.SLICED
        if self.value.startswith("partitioned"):
            return Family.PARTITIONED
        return None


@dataclass(frozen=True, slots=True)
class ResourceNames:
    """Every resource name of one manufacturer's base resource, e.g. ``nvidia.com/gpu``."""

    base: str
    partition_kind: str | None = None

    @property
    def shared(self) -> str:
        return self.base + ".shared"

    @property
    def sliced(self) -> str:
        return self.base + ".sliced"

    @property
    def sliced_units(self) -> str:
        return self.base + ".sliced.units"

    @property
    def sliced_cores_percentage(self) -> str:
        return self.base + ".sliced.cores-percentage"

    @property
    def sliced_memory_percentage(self) -> str:
        return self.base + ".sliced.memory-percentage"

    @property
    def sliced_memory_mib(self) -> str:
        return self.base + ".sliced.memory-mib"

    @property
    def partitioned(self) -> str:
        return self.base + ".partitioned"

    @property
    def partitioned_units(self) -> str:
        return self.base + ".partitioned.units"

    def partitioned_profile(self, profile: str) -> str:
        """``<base>.partitioned.<kind>-<profile>`` for a published profile name such as ``3g.40gb``."""
        if self.partition_kind is None:
            raise ValueError(f"{self.base} has no hardware partitioning")
        return f"{self.base}.partitioned.{self.partition_kind}-{profile}"

    def key(self, kind: KeyKind) -> str:
        """The resource name of a key kind (not for per-profile keys)."""
        if kind is KeyKind.EXCLUSIVE:
            return self.base
        if kind is KeyKind.PARTITIONED_PROFILE:
            raise ValueError("a per-profile key needs its profile: use partitioned_profile()")
        if kind is KeyKind.VISIBILITY:
            raise ValueError("the visibility key is named by manufacturer")
        return f"{self.base}.{kind.value}"


@dataclass(frozen=True, slots=True)
class ResourceKey:
    """A resource name read as an accelerator key of one manufacturer."""

    manufacturer: Manufacturer
    kind: KeyKind
    profile: str | None = None
    """Published profile name, for a per-profile key."""

    @property
    def family(self) -> Family | None:
        return self.kind.family


_SUFFIX_KINDS: Final = {
    "": KeyKind.EXCLUSIVE,
    ".shared": KeyKind.SHARED,
    ".sliced": KeyKind.SLICED,
    ".sliced.units": KeyKind.SLICED_UNITS,
    ".sliced.cores-percentage": KeyKind.SLICED_CORES,
    ".sliced.memory-percentage": KeyKind.SLICED_MEMORY_PERCENT,
    ".sliced.memory-mib": KeyKind.SLICED_MEMORY_MIB,
    ".partitioned": KeyKind.PARTITIONED,
    ".partitioned.units": KeyKind.PARTITIONED_UNITS,
}


def classify_resource(name: str) -> ResourceKey | None:
    """Read a resource name as an accelerator key, or None when it is no accelerator key (cpu, memory, RDMA…).

    Per-profile keys (``<base>.partitioned.<kind>-<profile>``) are recognised for manufacturers with a partition
    kind; the profile comes back in its published spelling.
    """
    if name.startswith("device.gpustack.ai/") and name.endswith(".visibility"):
        mfr = MANUFACTURERS.get(name[len("device.gpustack.ai/") : -len(".visibility")])
        return ResourceKey(mfr, KeyKind.VISIBILITY) if mfr else None
    slash = name.find("/")
    if slash < 0:
        return None
    dot = name.find(".", slash)
    base, suffix = (name, "") if dot < 0 else (name[:dot], name[dot:])
    mfr = MANUFACTURERS.by_base(base)
    if mfr is None:
        return None
    kind = _SUFFIX_KINDS.get(suffix)
    if kind is not None:
        return ResourceKey(mfr, kind)
    if suffix.startswith(".partitioned.") and mfr.partition_kind:
        rest = suffix[len(".partitioned.") :]
        prefix = mfr.partition_kind + "-"
        if rest.startswith(prefix) and len(rest) > len(prefix):
            return ResourceKey(mfr, KeyKind.PARTITIONED_PROFILE, rest[len(prefix) :])
    return None


# ----------------------------------------------------------------------------------------------- profiles

_UNSEPARATED_PROFILE: Final = re.compile(r"^([0-9]+)g([0-9]+)gb$")
_SEPARATED_PROFILE: Final = re.compile(r"^([0-9]+)g\.([0-9]+)gb$")
_UNSEPARATED_MANUFACTURERS: Final = frozenset({"thead"})
"""Manufacturers whose driver names a profile without GPUStack's separator (T-Head's ``4g48gb``)."""
EXCLUDED_PROFILE_MARKERS: Final = ("+me", "+gfx")


def publish_profile(manufacturer_name: str, vendor_name: str) -> str:
    """A profile's published spelling: T-Head ``4g48gb`` → ``4g.48gb``; a name of any other shape, or of another
    manufacturer, as it is."""
    if manufacturer_name in _UNSEPARATED_MANUFACTURERS:
        match = _UNSEPARATED_PROFILE.match(vendor_name)
        if match:
            return f"{match[1]}g.{match[2]}gb"
    return vendor_name


def vendor_profile(manufacturer_name: str, published: str) -> str:
    """The manufacturer's own spelling of a published profile name (the inverse of publish_profile): T-Head
    ``4g.48gb`` → ``4g48gb``; any other shape as it is."""
    if manufacturer_name in _UNSEPARATED_MANUFACTURERS:
        match = _SEPARATED_PROFILE.match(published)
        if match:
            return f"{match[1]}g{match[2]}gb"
    return published


def profile_is_published(vendor_name: str) -> bool:
    """``+me``, ``+me.all`` and ``+gfx`` variants stay out of the inventory."""
    return not any(marker in vendor_name for marker in EXCLUDED_PROFILE_MARKERS)


# ----------------------------------------------------------------------------------------------- node keys

_SEPARATORS: Final = frozenset("-_.")
_CPU_CRUFT: Final = re.compile(r"\((?:R|r|TM|tm)\)")
_CPU_TAIL: Final = re.compile(r"(?: CPU| Processor| [0-9]+-Cores?)$")


def normalize_name(name: str, prefix: str = "", max_length: int = 0, *, strip_cruft: bool = False) -> str:
    """A name as GPUStack's device layer writes it into a key: lower-case letters and digits kept, a space turned
    into ``-``, ``-``, ``_`` and ``.`` kept (a run of them folded to its first, none leading or trailing), anything
    else dropped; ``prefix`` dropped where it is the leading text (a manufacturer from its product: ``NVIDIA A10G``
    → ``a10g``); at most ``max_length`` characters (0: no bound). ``strip_cruft`` first takes the marks a CPU's
    model name carries off (``(R)``, ``(TM)``, ``Genuine``, ``Nth Gen``, the clock after ``@``, a trailing ``CPU``,
    ``Processor`` or ``N-Core``), as for CPU keys. Hygon ``K100_AI`` → ``k100_ai``."""
    if strip_cruft:
        name = name.split(" @ ", 1)[0]
        name = _CPU_CRUFT.sub("", name)
        name = re.sub(r"^(?:Genuine |[0-9]+(?:st|nd|rd|th) Gen )", "", name.strip())
        previous = None
        while previous != name:
            previous, name = name, _CPU_TAIL.sub("", name.strip())
    limit = max_length if max_length > 0 else len(name)
    out: list[str] = []
    for ch in name:
        if "A" <= ch <= "Z":
            ch = ch.lower()
        if ch == " ":
            ch = "-"
        if ch in _SEPARATORS:
            if not out or out[-1] in _SEPARATORS:
                continue
        elif not ("a" <= ch <= "z" or "0" <= ch <= "9"):
            continue
        out.append(ch)
        if prefix and len(out) == len(prefix) and "".join(out) == prefix.lower():
            out.clear()
        if len(out) >= limit:
            break
    if out and out[-1] in _SEPARATORS:
        out.pop()
    return "".join(out)


_NOT_KEY: Final = re.compile(r"[^a-z0-9]+")


def sanitize(text: str) -> str:
    """Lower-case, runs of anything but letters and digits folded to one ``-``, no leading or trailing ``-``."""
    return _NOT_KEY.sub("-", text.lower()).strip("-")


def group_id(manufacturer_name: str, product: str) -> str:
    """The id GPUStack's device layer gives a model's group: its product name normalized, the manufacturer's name
    dropped where it leads, within the 63 characters a label name allows beside ``<manufacturer>-``."""
    return normalize_name(product, manufacturer_name, 63 - len(manufacturer_name) - 1)


@functools.lru_cache(maxsize=4096)
def accelerator_key(manufacturer_name: str, group_id: str) -> str:
    """``<manufacturer>-<group id>``, e.g. ``nvidia-a10g``, ``nvidia-h100-80gb-hbm3``, ``hygon-k100_ai``: the group id
    as the device layer wrote it into the ledger, joined as GPUStack joins it (never folded again: ``_`` and ``.``
    stay)."""
    return f"{manufacturer_name}-{group_id}"


def general_key(cpu_vendor: str, cpu_name: str) -> str:
    """``<vendor>-<cpu name>``, e.g. ``amd-epyc-7r32``, ``intel-xeon-platinum-8259cl``; ``generic`` when nothing is
    known. The model name is normalized as GPUStack's device layer does (marks, the word CPU and the clock taken off,
    the vendor dropped where it leads)."""
    vendor = normalize_name(cpu_vendor, strip_cruft=True)
    if not vendor:
        return GENERIC
    name = normalize_name(cpu_name, vendor, 63 - len(vendor) - 1, strip_cruft=True)
    return f"{vendor}-{name}" if name else vendor


# ----------------------------------------------------------------------------------------------- entrances

_FNV64_OFFSET: Final = 0xCBF29CE484222325
_FNV64_PRIME: Final = 0x100000001B3
_MASK64: Final = (1 << 64) - 1


def fnv1a64(text: str) -> int:
    """FNV-1a, 64 bits, over the UTF-8 bytes of ``text``."""
    h = _FNV64_OFFSET
    for byte in text.encode():
        h = ((h ^ byte) * _FNV64_PRIME) & _MASK64
    return h


def queue_entrance(cluster_queue: str) -> str:
    """The LocalQueue name fronting a ClusterQueue: ``gpustack-fnv64-`` + 16 hex digits (always 31 characters)."""
    return f"{ENTRANCE_PREFIX}{fnv1a64(cluster_queue):016x}"


# ----------------------------------------------------------------------------------------------- pools


def pool_labels(
    *,
    acceleratable: bool,
    accelerator_group: str,
    general_group: str,
    os: str,
    arch: str,
    cpu_aware: bool = False,
) -> dict[str, str]:
    """The labels that select an InstanceType's pool (on Devices, Nodes and the type itself).

    The general key joins when CPU awareness is on, and on CPU pools whose general group is a real CPU key.
    """
    labels = {LABEL_OS: os, LABEL_ARCH: arch}
    if acceleratable:
        labels[accelerator_label(accelerator_group)] = "true"
    if general_group and general_group != GENERIC and (cpu_aware or not acceleratable):
        labels[general_label(general_group)] = "true"
    return labels
