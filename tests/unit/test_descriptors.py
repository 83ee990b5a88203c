"""Descriptors: the InstanceType defaulting webhook enriches a new type from its ResourceFlavor's notes, and the
status writer publishes ``status.detail`` for every accelerated type, so a custom type's Pods fold ``memory-mib``
and partitions instead of being refused for want of card memory."""

from __future__ import annotations

import json
from typing import Any

from gpuctl.cluster import kinds
from gpuctl.core.instancetype_rules import default_instancetype, instancetype_mutating_webhook, matching_flavor
from gpuctl.core.instancetypes import parse_instancetype
from gpuctl.core.ledger import parse_devices
from gpuctl.core.requests import admit_pod
from gpuctl.core.views import instancetype_detail
from gpuctl.core.workloads import parse_resource_flavor
from gpuctl.operator.cache import OperatorCache
from gpuctl.operator.controllers import Controllers
from gpuctl.operator.controllers.status import StatusController
from gpuctl.operator.metrics import Metrics
from testbed.factories import H100_PROFILES, container, devices, flavor, h100_devices, node, physical_profiles, pod
from tests.memory_cluster import MemoryCluster

CPU_DETAIL = {"manufacturer": "amd", "product": "EPYC 7R32", "physicalCores": 48}


def noted_flavor(name: str = "gpustack--generic--nvidia-a10g-linux-amd64-4d", **notes: str) -> Any:
    f = flavor(name, "nvidia-a10g", count=4)
    f["metadata"]["annotations"] = {f"note.gpustack.ai/{k}": v for k, v in notes.items()}
    return parse_resource_flavor(f)


A10G_FLAVOR = noted_flavor(product="NVIDIA A10G", memory="24Gi", cores="80", cpuDetail=json.dumps(CPU_DETAIL))


def custom_type(**spec: Any) -> dict[str, Any]:
    """A custom (admin-written) accelerated type: no descriptors of its own."""
    return {
        "apiVersion": "worker.gpustack.ai/v1alpha1",
        "kind": "InstanceType",
        "metadata": {"name": "a10g-12c128g"},
        "spec": {
            "acceleratable": True,
            "acceleratorGroup": "nvidia-a10g",
            "os": "linux",
            "arch": "amd64",
            "unitResources": {"cpu": "12", "ram": "128Gi"},
            "localStorage": "100Gi",
            **spec,
        },
    }


def test_a_new_type_takes_its_descriptors_from_the_matching_flavor() -> None:
    result = default_instancetype(custom_type(), flavors=[A10G_FLAVOR], enrich=True)
    spec = result.mutated["spec"]
    assert (spec["product"], spec["memory"], spec["cores"]) == ("NVIDIA A10G", "24Gi", 80)
    assert "accelerator" not in spec  # cpuDetail only with CPU awareness on
    aware = default_instancetype(custom_type(), flavors=[A10G_FLAVOR], enrich=True, cpu_aware=True)
    assert aware.mutated["spec"]["accelerator"]["cpu"] == CPU_DETAIL


def test_a_value_the_admin_wrote_is_kept() -> None:
    result = default_instancetype(custom_type(memory="23Gi"), flavors=[A10G_FLAVOR], enrich=True)
    assert result.mutated["spec"]["memory"] == "23Gi"


def test_only_a_create_enriches_since_the_spec_is_frozen_after_it() -> None:
    obj = custom_type()
    update = instancetype_mutating_webhook("UPDATE", obj, flavors=[A10G_FLAVOR])
    assert "memory" not in update.mutated["spec"]
    create = instancetype_mutating_webhook("CREATE", obj, flavors=[A10G_FLAVOR])
    assert create.mutated["spec"]["memory"] == "24Gi"


def test_the_flavor_must_describe_the_same_model_and_platform() -> None:
    arm = parse_resource_flavor(flavor("f-arm", "nvidia-a10g", arch="arm64"))
    l4 = parse_resource_flavor(flavor("f-l4", "nvidia-l4"))
    assert matching_flavor(custom_type()["spec"], [arm, l4]) is None
    result = default_instancetype(custom_type(), flavors=[arm, l4], enrich=True)
    assert "memory" not in result.mutated["spec"]
    assert any("no ResourceFlavor describes nvidia-a10g nodes" in w for w in result.warnings)


def test_an_unreadable_note_is_skipped_with_a_warning() -> None:
    bad = noted_flavor(memory="lots", cores="eighty", cpuDetail="[1, 2]")
    result = default_instancetype(custom_type(), flavors=[bad], enrich=True, cpu_aware=True)
    assert "memory" not in result.mutated["spec"] and "cores" not in result.mutated["spec"]
    assert len(result.warnings) == 3


def test_a_cpu_aware_generic_type_folds_cpu_detail_into_spec_cpu() -> None:
    f = flavor("gpustack--amd-epyc-7r32-linux-amd64-48c", "nvidia-a10g")
    f["spec"]["nodeLabels"] = {
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "general.feature.gpustack.ai/amd-epyc-7r32": "true",
    }
    f["metadata"]["annotations"] = {"note.gpustack.ai/cpuDetail": json.dumps(CPU_DETAIL)}
    cpu = custom_type(acceleratable=False, generalGroup="amd-epyc-7r32", unitResources={"cpu": "1", "ram": "2Gi"})
    del cpu["spec"]["acceleratorGroup"]
    result = default_instancetype(cpu, flavors=[parse_resource_flavor(f)], enrich=True, cpu_aware=True)
    assert result.mutated["spec"]["cpu"] == CPU_DETAIL


# ----------------------------------------------------------------------------------------------- status.detail


def test_the_detail_sums_the_pools_capability_catalog() -> None:
    it = parse_instancetype(custom_type(acceleratorGroup="nvidia-h100-80gb-hbm3"))
    pool = [parse_devices(h100_devices("h-0", cards=8)), parse_devices(h100_devices("h-1", cards=8))]
    detail = instancetype_detail(it, pool)
    assert detail is not None
    assert (detail["manufacturer"], detail["product"], detail["memory"]) == (
        "nvidia",
        "NVIDIA H100 80GB HBM3",
        "81920Mi",
    )
    physical = detail["slicedDetail"]["physical"]  # type: ignore[index]
    assert physical["count"] == 16 * 7
    assert {p["name"]: p["count"] for p in physical["profiles"]}["4g.40gb"] == 16
    assert detail["slicedDetail"]["logical"]["count"] == 0  # type: ignore[index]


def test_no_detail_for_a_pool_without_nodes_or_a_cpu_type() -> None:
    it = parse_instancetype(custom_type())
    assert instancetype_detail(it, []) is None
    cpu = custom_type(acceleratable=False)
    assert instancetype_detail(parse_instancetype(cpu), [parse_devices(devices("n"))]) is None


def test_a_custom_types_pods_fold_once_the_detail_is_published() -> None:
    """The custom type has no spec.memory and no detail: its Pods' memory-mib and partitions were refused. Once the
    status writer publishes the pool's detail, they fold."""
    h100 = custom_type(acceleratorGroup="nvidia-h100-80gb-hbm3")
    h100["metadata"]["name"] = "h100-custom"
    h100["metadata"]["labels"] = {"schedule.gpustack.ai/queue-entrance": "gpustack-fnv64-h100custom"}
    objects = [
        h100,
        h100_devices("h-0", cards=2),
        node("h-0", labels={"gpustack.ai/managed": "true", "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}),
    ]
    partition = pod(
        [container("main", {"nvidia.com/gpu.partitioned": "1", "nvidia.com/gpu.partitioned.mig-3g.40gb": "1"})],
        queue="gpustack-fnv64-h100custom",
    )
    before = admit_pod(partition, [parse_instancetype(h100)])
    assert not before.allowed and "publishes no partition profiles" in (before.message or "")
    cluster = MemoryCluster(objects)
    cache = OperatorCache(cluster)
    cluster.feed(cache)
    Controllers(cache, cluster, Metrics()).get(StatusController).reconcile("h100-custom")
    published = parse_instancetype(cluster.list(kinds.INSTANCETYPE)[0])
    assert published.card_mib == 81920
    after = admit_pod(partition, [published])
    assert after.allowed
    units = after.mutated["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu.partitioned.units"]
    assert int(units) == H100_PROFILES["3g.40gb"][3] * 1_600_000 // 81920
    mib = pod(
        [container("main", {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-mib": "40960"})],
        queue="gpustack-fnv64-h100custom",
    )
    assert admit_pod(mib, [published]).allowed


def test_profiles_in_the_detail_match_the_catalog_shape() -> None:
    it = parse_instancetype(custom_type(acceleratorGroup="nvidia-h100-80gb-hbm3"))
    detail = instancetype_detail(it, [parse_devices(h100_devices("h-0", cards=1))])
    assert detail is not None
    names = [p["name"] for p in detail["slicedDetail"]["physical"]["profiles"]]  # type: ignore[index]
    assert sorted(names) == sorted(p["name"] for p in physical_profiles(H100_PROFILES))
