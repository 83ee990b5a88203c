"""Names: manufacturers, resource keys per family, label keys, node keys and queue entrances."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Final

from gpuctl.core.compat import StrEnum

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

# The operator as deployed (deploy/base): its namespace, the name of its Deployment, Service, Lease and serving
# Secret (``<name>-tls``), and its webhook configurations. The mutating one sorts before Kueue's by name, so units
# fold before Kueue hashes a Pod's resources.
OPERATOR_NAMESPACE: Final = "gpuctl-system"
OPERATOR_NAME: Final = "gpuctl-operator"
OPERATOR_TLS_SECRET: Final = f"{OPERATOR_NAME}-tls"
INSTANCE_STOP_MANAGER: Final = "gpuctl-instance-stop"
"""The field manager of the operator's running-instance stop, so a stop by a drain is told from a user's."""
MUTATING_CONFIGURATION: Final = "gpustack-worker-mutation"
VALIDATING_CONFIGURATION: Final = "gpustack-worker-validation"
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


MANUFACTURERS: Final[dict[str, Manufacturer]] = {
    m.name: m
    for m in (
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
}
_BY_BASE: Final = {m.base: m for m in MANUFACTURERS.values()}

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
    mfr = _BY_BASE.get(base)
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

_UNSEPARATED_PROFILE: Final = re.compile(r"^(\d+g)(\d+gb)$")
EXCLUDED_PROFILE_MARKERS: Final = ("+me", "+gfx")


def publish_profile(manufacturer_name: str, vendor_name: str) -> str:
    """A profile's published spelling: T-Head ``4g48gb`` → ``4g.48gb``; others as they are."""
    if manufacturer_name == "thead":
        match = _UNSEPARATED_PROFILE.match(vendor_name)
        if match:
            return f"{match[1]}.{match[2]}"
    return vendor_name


def vendor_profile(manufacturer_name: str, published: str) -> str:
    """The manufacturer's own spelling of a published profile name (the inverse of publish_profile)."""
    if manufacturer_name == "thead":
        return published.replace(".", "", 1)
    return published


def profile_is_published(vendor_name: str) -> bool:
    """``+me``, ``+me.all`` and ``+gfx`` variants stay out of the inventory."""
    return not any(marker in vendor_name for marker in EXCLUDED_PROFILE_MARKERS)


# ----------------------------------------------------------------------------------------------- node keys

_NOT_KEY: Final = re.compile(r"[^a-z0-9]+")


def sanitize(text: str) -> str:
    """Lower-case, runs of anything but letters and digits folded to one ``-``, no leading or trailing ``-``."""
    return _NOT_KEY.sub("-", text.lower()).strip("-")


@functools.lru_cache(maxsize=4096)
def accelerator_key(manufacturer_name: str, group_id: str) -> str:
    """``<manufacturer>-<group id>``, e.g. ``nvidia-a10g``, ``nvidia-h100-80gb-hbm3``."""
    return f"{manufacturer_name}-{sanitize(group_id)}"


_CPU_NOISE: Final = re.compile(r"\((?:r|tm|c)\)|\bcpu\b|@.*$|\b\d+-core processor\b|\bprocessor\b", re.IGNORECASE)


def general_key(cpu_vendor: str, cpu_name: str) -> str:
    """``<vendor>-<sanitized cpu name>``, e.g. ``amd-epyc-7r32``, ``intel-xeon-platinum-8259cl``; ``generic`` when
    nothing is known. Trademark marks, the word CPU and the clock suffix are dropped from the model name."""
    vendor = sanitize(_CPU_NOISE.sub(" ", cpu_vendor))
    name = sanitize(_CPU_NOISE.sub(" ", cpu_name))
    if not vendor:
        return GENERIC
    if name.startswith(vendor + "-"):
        name = name[len(vendor) + 1 :]
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
