"""The ``worker.gpustack.ai`` CRDs (InstanceType, Devices, Instance) with GPUStack's own schemas: every field its API
types have, typed as its generator types them (quantities as integers or strings, descriptors as strings, placements
as objects, lists keyed as its list-map markers key them), so that an object GPUStack's worker writes is stored
whole on a cluster where the standalone operator installed them, and one gpuctl writes is refused where GPUStack's
worker would refuse it.

They are installed only where none exist (:func:`missing`): on a cluster that runs GPUStack's worker, its own CRDs
stand. ``make docs`` writes them to ``deploy/crds``, which the test suite installs.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

GROUP = "worker.gpustack.ai"
VERSION = "v1alpha1"

Schema = dict[str, Any]

QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)


def string(**extra: Any) -> Schema:
    return {"type": "string", **extra}


def boolean(**extra: Any) -> Schema:
    return {"type": "boolean", **extra}


def int32() -> Schema:
    return {"type": "integer", "format": "int32"}


def int64() -> Schema:
    return {"type": "integer", "format": "int64"}


def quantity(*, nullable: bool = False) -> Schema:
    """A ``resource.Quantity``: an integer or a string of Kubernetes' quantity grammar."""
    out: Schema = {
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "x-kubernetes-int-or-string": True,
        "pattern": QUANTITY_PATTERN,
    }
    if nullable:
        out["nullable"] = True
    return out


def obj(properties: dict[str, Schema], *required: str, nullable: bool = False) -> Schema:
    out: Schema = {"type": "object", "properties": dict(sorted(properties.items()))}
    if required:
        out["required"] = list(required)
    if nullable:
        out["nullable"] = True
    return out


def array(items: Schema, *, keys: Iterable[str] = (), atomic: bool = False) -> Schema:
    """A list as GPUStack's generator emits a Go slice: nullable; a list-map where it is keyed, else atomic where it
    is marked so."""
    out: Schema = {"type": "array", "nullable": True, "items": items}
    keys = list(keys)
    if keys:
        out["x-kubernetes-list-type"] = "map"
        out["x-kubernetes-list-map-keys"] = keys
    elif atomic:
        out["x-kubernetes-list-type"] = "atomic"
    return out


def object_reference(*, nullable: bool = True) -> Schema:
    return obj({"name": string(default="")}, nullable=nullable)


# ----------------------------------------------------------------------------------------------- shared parts

PLACEMENT = obj({"start": int32(), "length": int32()}, "start", "length")
PROFILE_COUNT = obj({"name": string(), "count": int32()}, "name")
LOGICAL_SLICED = obj({"coresPercentageOvercommit": boolean(), "count": int32()})
SLICED_DETAIL = obj(
    {
        "logical": LOGICAL_SLICED,
        "physical": obj(
            {
                "count": int32(),
                "profiles": array(
                    obj({"name": string(), "count": int32(), "memoryMib": int64()}, "name"), keys=["name"]
                ),
            }
        ),
    }
)
ALLOCATION = obj(
    {
        "id": string(),
        "index": int64(),
        "mode": int64(),
        "allocated": int32(),
        "remaining": int32(),
        "allocatedSlices": int32(),
        "allocatedProfiles": array(PROFILE_COUNT, keys=["name"]),
        "remainingProfiles": array(PROFILE_COUNT, keys=["name"]),
        "allocatedPhysicalProfile": string(),
        "allocatedPhysicalPlacements": array(PLACEMENT, atomic=True),
        "allocatedPhysicalID": string(),
        "allocatedLogicalPlacements": array(PLACEMENT, atomic=True),
    },
    "id",
    "index",
    "mode",
)
ALLOCATION_GROUP = obj(
    {"id": string(), "manufacturer": string(), "accelerators": array(ALLOCATION, keys=["id"])}, "id", "manufacturer"
)
CPU_FIELDS: dict[str, Schema] = {
    "physicalCores": string(),
    "threadsPerPhysicalCore": string(),
    "logicalCores": string(),
    "stepping": string(),
    "clockSpeed": string(),
    "maxClockSpeed": string(),
    "cacheLine": string(),
    "cache": obj({"l1i": string(), "l1d": string(), "l2": string(), "l3": string()}),
}


# ----------------------------------------------------------------------------------------------- InstanceType

VIEW = obj({"onceMaxRequest": quantity(), "remaining": quantity(), "capacity": quantity()})
PARTITIONED_VIEW = obj(
    {
        "onceMaxRequest": quantity(),
        "remaining": quantity(),
        "capacity": quantity(),
        "allocatedProfiles": array(PROFILE_COUNT, keys=["name"]),
        "remainingProfiles": array(PROFILE_COUNT, keys=["name"]),
    }
)
INSTANCETYPE_SPEC = obj(
    {
        "displayName": string(maxLength=64),
        "description": string(maxLength=1024),
        "inactive": boolean(),
        "acceleratorGroup": string(),
        "generalGroup": string(),
        "acceleratable": boolean(),
        "os": string(),
        "arch": string(),
        "unitResources": obj({"cpu": string(), "ram": string()}),
        "localStorage": string(),
    },
    "acceleratable",
    "os",
    "arch",
    "unitResources",
    "localStorage",
)
INSTANCETYPE_DETAIL = obj(
    {
        "manufacturer": string(),
        "product": string(),
        "family": string(),
        **CPU_FIELDS,
        "memory": string(),
        "cores": string(),
        "computeCapability": string(),
        "runtimeVersion": string(),
        "runtimeVersions": array(string(), atomic=True),
        "slicedDetail": SLICED_DETAIL,
        "cpu": obj({"manufacturer": string(), "product": string(), "family": string(), **CPU_FIELDS}),
    }
)
INSTANCETYPE_STATUS = obj(
    {
        "detail": INSTANCETYPE_DETAIL,
        "entrance": string(),
        "phase": string(),
        "phaseMessage": string(),
        "accelerator": VIEW,
        "acceleratorShared": VIEW,
        "acceleratorSliced": VIEW,
        "acceleratorPartitioned": PARTITIONED_VIEW,
        "cpu": VIEW,
    },
    "phase",
    "accelerator",
    "acceleratorShared",
    "acceleratorSliced",
    "acceleratorPartitioned",
    "cpu",
)


# ----------------------------------------------------------------------------------------------- Devices

TOPOLOGY = obj(
    {
        "pciBusId": string(),
        "pciRootId": string(),
        "pciClass": string(),
        "numaAffinity": string(),
        "cpuAffinity": string(),
        "roce": obj(
            {"ip": string(), "subnetMask": string(), "gateway": string()}, "ip", "subnetMask", "gateway", nullable=True
        ),
        "pciSwitches": array(string(), atomic=True),
        "fabric": obj(
            {
                "kind": string(),
                "id": string(),
                "type": string(),
                "cliqueId": string(),
                "memberCount": int64(),
                "nodeIndex": string(),
                "rackId": string(),
                "endpoints": array(string(), atomic=True),
            },
            "kind",
            "id",
            nullable=True,
        ),
    },
    "pciBusId",
    "pciRootId",
    "pciClass",
    "numaAffinity",
    "cpuAffinity",
)
PHYSICAL_PROFILE = obj(
    {
        "name": string(),
        "memoryMib": int64(),
        "computeSlices": int32(),
        "memorySlices": int32(),
        "count": int32(),
        "placements": array(PLACEMENT, atomic=True),
    },
    "name",
    "memoryMib",
    "computeSlices",
    "memorySlices",
    "count",
)
ACCELERATOR = obj(
    {
        "id": string(),
        "index": int64(),
        "physicalIndexes": array(int64()),
        "topology": TOPOLOGY,
        "status": obj(
            {
                "unhealthy": boolean(),
                "logicalSliced": LOGICAL_SLICED,
                "physicalSliced": obj({"count": int32(), "profiles": array(PHYSICAL_PROFILE, keys=["name"])}),
            },
            "unhealthy",
        ),
    },
    "id",
    "index",
    "physicalIndexes",
    "topology",
    "status",
)
LINK = obj(
    {"state": string(), "reason": string(), "firstSeenTime": string(format="date-time", nullable=True)},
    "state",
    nullable=True,
)
INTERFACE_FIELDS: dict[str, Schema] = {
    "name": string(),
    "pciBusId": string(),
    "numaAffinity": string(),
    "cpuAffinity": string(),
    "mtu": int32(),
    "up": boolean(),
    "rdma": boolean(),
    "rdmaDevice": string(),
    "link": LINK,
}
INTERFACE = obj(
    {
        **INTERFACE_FIELDS,
        "bus": string(),
        "pciRootId": string(),
        "pciSwitches": array(string(), atomic=True),
        "pciVendor": string(),
        "pciDevice": string(),
        "virtual": boolean(),
        "sriov": boolean(),
        "virtualFunctions": array(obj(INTERFACE_FIELDS, "name"), atomic=True),
    },
    "name",
)
DEVICES_GROUP = obj(
    {
        "id": string(),
        "manufacturer": string(),
        "name": string(),
        "memory": {"type": "integer"},
        "cores": int64(),
        "driverVersion": string(),
        "runtimeVersion": string(),
        "computeCapability": string(),
        "family": string(),
        "accelerators": array(ACCELERATOR, keys=["id"]),
        "acceleratorSlicedDetail": SLICED_DETAIL,
    },
    "id",
    "manufacturer",
    "name",
    "memory",
)
DEVICES_SPEC = obj(
    {
        "groups": array(DEVICES_GROUP, keys=["id", "manufacturer"]),
        "interfaces": array(INTERFACE, keys=["name"]),
    },
    "groups",
)
DEVICES_STATUS = obj({"groups": array(ALLOCATION_GROUP, keys=["id", "manufacturer"])})


# ----------------------------------------------------------------------------------------------- Instance

PROTOCOL = string(default="TCP", enum=["TCP", "UDP", "SCTP"])
MOUNT_PATH = string(maxLength=1024, pattern=r"^(/[^/]+)+$")
INSTANCE_SPEC = obj(
    {
        "type": string(),
        "displayName": string(maxLength=64),
        "description": string(maxLength=1024),
        "image": string(),
        "imagePullPolicy": string(default="IfNotPresent", enum=["Always", "IfNotPresent", "Never"]),
        "command": array(string(), atomic=True),
        "privileged": boolean(default=False),
        "ports": array(
            obj({"port": int32(), "protocol": PROTOCOL, "name": string(maxLength=16)}, "port"),
            keys=["port", "protocol"],
        ),
        "env": array(obj({"name": string(), "value": string()}, "name", "value"), keys=["name"]),
        "resources": obj(
            {
                "cpu": quantity(),
                "ram": quantity(),
                "localStorage": quantity(),
                "accelerator": quantity(nullable=True),
                "acceleratorSlicedMemoryPercentage": int32(),
                "acceleratorSlicedCoresPercentage": int32(),
                "acceleratorPartitionedProfile": string(),
            },
            "cpu",
            "ram",
            "localStorage",
            nullable=True,
        ),
        "volumeMount": string(default="/workspace", maxLength=1024, pattern=r"^(/[^/]+)+$"),
        "imagePullSecret": object_reference(),
        "additionalVolumes": array(
            obj(
                {
                    "mountPath": MOUNT_PATH,
                    "readOnly": boolean(),
                    "subPath": string(maxLength=1024),
                    "persistent": object_reference(),
                    "configMap": object_reference(),
                    "secret": object_reference(),
                    "hostPath": obj({"path": string(), "type": string(nullable=True)}, "path", nullable=True),
                    "model": obj({"artifactRef": object_reference(nullable=False)}, "artifactRef", nullable=True),
                },
                "mountPath",
            ),
            atomic=True,
        ),
        "volume": obj(
            {
                "ephemeral": obj({"capacity": quantity()}, "capacity", nullable=True),
                "persistent": object_reference(),
            }
        ),
        "sshPublicKey": object_reference(),
        "stop": boolean(),
        "nodeName": string(maxLength=253),
    },
    "type",
)
INSTANCE_STATUS = obj(
    {
        "phase": string(),
        "phaseMessage": string(),
        "nodeName": string(),
        "accessAddresses": array(string()),
        "hostIPs": array(obj({"ip": string()}, "ip")),
        "podIPs": array(obj({"ip": string()}, "ip")),
        "ports": array(obj({"name": string(maxLength=16), "nodePort": int32(), "port": int32(), "protocol": PROTOCOL})),
        "allocations": array(ALLOCATION_GROUP),
    }
)


# ----------------------------------------------------------------------------------------------- the CRDs


def crd(
    kind: str, plural: str, *, namespaced: bool, spec: Schema, status: Schema, spec_required: bool = True, **names: Any
) -> dict[str, Any]:
    root = obj(
        {"apiVersion": string(), "kind": string(), "metadata": {"type": "object"}, "spec": spec, "status": status},
        *(["spec"] if spec_required else []),
    )
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "names": {"kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": kind.lower(), **names},
            "scope": "Namespaced" if namespaced else "Cluster",
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {"openAPIV3Schema": root},
                }
            ],
        },
    }


def definitions() -> list[dict[str, Any]]:
    """Devices, Instance and InstanceType, in file-name order (``deploy/crds/<plural>.<group>.yaml``); each a tree
    of its own (no part shared with another, so it serializes without YAML anchors)."""
    copied: list[dict[str, Any]] = json.loads(
        json.dumps(
            [
                crd(
                    "Devices", "devices", namespaced=False, spec=DEVICES_SPEC, status=DEVICES_STATUS, singular="devices"
                ),
                crd("Instance", "instances", namespaced=True, spec=INSTANCE_SPEC, status=INSTANCE_STATUS),
                crd(
                    "InstanceType",
                    "instancetypes",
                    namespaced=False,
                    spec=INSTANCETYPE_SPEC,
                    status=INSTANCETYPE_STATUS,
                    spec_required=False,
                    shortNames=["instype"],
                    categories=["gpustack"],
                ),
            ]
        )
    )
    return copied


def file_name(definition: dict[str, Any]) -> str:
    return f"{GROUP}_{definition['spec']['names']['plural']}.yaml"


def missing(existing: Iterable[str]) -> list[dict[str, Any]]:
    """The definitions whose CRD a cluster does not have (``existing``: the names of the CRDs it has)."""
    have = set(existing)
    return [d for d in definitions() if d["metadata"]["name"] not in have]
