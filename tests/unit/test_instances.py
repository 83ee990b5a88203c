"""The Instance webhooks: every rule accepted and rejected with GPUStack's messages, the sizing defaults, the
deletion guard, and any-input robustness."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuctl.core.admission import Admission, apply_patch, json_patch
from gpuctl.core.instances import (
    default_instance,
    instance_mutating_webhook,
    instance_validating_webhook,
    parse_instance,
    validate_instance,
)
from gpuctl.core.instancetypes import InstanceType, parse_instancetype
from testbed.factories import H100_PROFILES, instancetype, physical_profiles

A10G_NAME = "gpustack--nvidia-a10g-linux-amd64"
H100_NAME = "gpustack--nvidia-h100-80gb-hbm3-linux-amd64"
CPU_NAME = "gpustack--generic-linux-amd64"


def with_views(raw: dict[str, Any], *, accelerator: int | None = None, cpu: int | None = None) -> dict[str, Any]:
    """An InstanceType with its published capacity views (remaining 0: the pool is fully requested)."""
    if accelerator is not None:
        raw["status"]["accelerator"] = {"onceMaxRequest": 0, "remaining": 0, "capacity": accelerator}
    if cpu is not None:
        raw["status"]["cpu"] = {"onceMaxRequest": 0, "remaining": 0, "capacity": cpu}
    return raw


A10G = parse_instancetype(with_views(instancetype(), accelerator=8))
H100 = parse_instancetype(
    with_views(
        instancetype(
            group_id="h100-80gb-hbm3",
            memory="80Gi",
            logical_count=0,
            profiles=physical_profiles(H100_PROFILES),
            unit_cpu="12",
            unit_ram="192Gi",
        ),
        accelerator=0,
    )
)
MIXED = parse_instancetype(
    instancetype("mixed", group_id="h100-80gb-hbm3", memory="80Gi", profiles=physical_profiles(H100_PROFILES))
)
AMD = parse_instancetype(instancetype(manufacturer="amd", group_id="mi300x", memory="192Gi", logical_count=0))
NOT_READY = parse_instancetype(instancetype("fresh", memory=None))
NOT_READY = InstanceType(**{**{f: getattr(NOT_READY, f) for f in NOT_READY.__slots__}, "manufacturer": ""})
CPU = parse_instancetype(with_views(instancetype(acceleratable=False, unit_ram="4Gi", local_storage="128Gi"), cpu=72))


def instance(
    resources: dict[str, Any] | None = None,
    *,
    type_name: str = A10G_NAME,
    stop: bool = False,
    phase: str | None = None,
    namespace: str = "team-a",
    volume: dict[str, Any] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "worker.gpustack.ai/v1",
        "kind": "Instance",
        "metadata": {"name": "box", "namespace": namespace, "resourceVersion": "7"},
        "spec": {
            "type": type_name,
            "image": "registry.invalid/dev:1",
            "volume": {"ephemeral": {"capacity": "10Gi"}} if volume is None else volume,
            "resources": dict(resources or {}),
            "stop": stop,
            **spec,
        },
    }
    if phase is not None:
        obj["status"] = {"phase": phase}
    return obj


def create(obj: dict[str, Any], it: InstanceType | None = A10G, **kwargs: Any) -> Admission:
    return validate_instance(obj, None, it, "CREATE", **kwargs)


def update(old: dict[str, Any], new: dict[str, Any], it: InstanceType | None = A10G) -> Admission:
    return validate_instance(new, old, it, "UPDATE")


def refused(result: Admission) -> str:
    assert not result.allowed
    assert result.message
    return result.message


def edited(obj: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {**obj, "spec": {**obj["spec"], **spec}}


# ----------------------------------------------------------------------------------------------- unit bounds


def test_ram_within_unit_times_count_is_accepted() -> None:
    assert create(instance({"accelerator": "2", "cpu": "16", "ram": "128Gi"})).allowed


def test_ram_above_unit_times_count_is_rejected() -> None:
    message = refused(create(instance({"accelerator": "2", "ram": "129Gi"})))
    assert (
        message
        == f'spec.resources.ram: Invalid value: "129Gi": exceeds the maximum RAM 128Gi of instance type {A10G_NAME}'
    )


def test_cpu_above_unit_times_count_is_rejected() -> None:
    message = refused(create(instance({"accelerator": "1", "cpu": "9"})))
    assert message == f'spec.resources.cpu: Invalid value: "9": exceeds the maximum CPU 8 of instance type {A10G_NAME}'


def test_local_storage_within_the_type_is_accepted_and_above_it_rejected() -> None:
    assert create(instance({"localStorage": "100Gi"})).allowed
    message = refused(create(instance({"localStorage": "200Gi"})))
    assert message == (
        f'spec.resources.localStorage: Invalid value: "200Gi": exceeds the local storage 100Gi of instance type '
        f"{A10G_NAME}"
    )


# ----------------------------------------------------------------------------------------------- CPU-only


def test_cpu_only_cpu_is_bounded_by_the_pool_capacity_not_what_is_free() -> None:
    # Every core is requested (remaining 0): the Instance is admitted and waits in its queue.
    assert create(instance({"cpu": "72", "ram": "288Gi"}, type_name=CPU_NAME), CPU).allowed


def test_cpu_only_cpu_above_the_pool_capacity_is_rejected() -> None:
    message = refused(create(instance({"cpu": "73"}, type_name=CPU_NAME), CPU))
    assert message == f'spec.resources.cpu: Invalid value: "73": exceeds the maximum CPU 72 of instance type {CPU_NAME}'


def test_cpu_only_ram_is_bounded_by_unit_ram_times_cpu() -> None:
    assert create(instance({"cpu": "4", "ram": "16Gi"}, type_name=CPU_NAME), CPU).allowed
    message = refused(create(instance({"cpu": "4", "ram": "17Gi"}, type_name=CPU_NAME), CPU))
    assert (
        message
        == f'spec.resources.ram: Invalid value: "17Gi": exceeds the maximum RAM 16Gi of instance type {CPU_NAME}'
    )


def test_cpu_only_refuses_an_accelerator_request() -> None:
    message = refused(create(instance({"accelerator": "1"}, type_name=CPU_NAME), CPU))
    assert message == (
        "spec.resources.accelerator: Forbidden: accelerator request must not be specified for non-acceleratable "
        "instance type"
    )


# ----------------------------------------------------------------------------------------------- whole cards


def test_whole_cards_up_to_the_pool_capacity_are_accepted() -> None:
    assert create(instance({"accelerator": "8", "cpu": "64", "ram": "512Gi"})).allowed


def test_whole_cards_above_the_pool_capacity_are_rejected() -> None:
    message = refused(create(instance({"accelerator": "9"})))
    assert message == (
        f'spec.resources.accelerator: Invalid value: "9": exceeds the maximum accelerator request of instance type '
        f"{A10G_NAME} (the pool has 8)"
    )


def test_whole_cards_on_a_partition_only_pool_are_rejected() -> None:
    assert "exceeds the maximum accelerator request" in refused(
        create(instance({"accelerator": "1"}, type_name=H100_NAME), H100)
    )


@pytest.mark.parametrize(
    ("value", "detail"),
    [
        ("1.5", "accelerator request must be a whole number of cards"),
        ("-1", "accelerator request cannot be negative"),
        ("one", "must be a quantity such as 2, 500m or 64Gi"),
    ],
)
def test_an_unreadable_accelerator_count_is_rejected(value: str, detail: str) -> None:
    assert (
        refused(create(instance({"accelerator": value})))
        == f'spec.resources.accelerator: Invalid value: "{value}": {detail}'
    )


# ----------------------------------------------------------------------------------------------- partitions


def test_an_offered_partition_profile_is_accepted() -> None:
    assert create(instance({"acceleratorPartitionedProfile": "3g.40gb"}, type_name=H100_NAME), H100).allowed


def test_an_unoffered_partition_profile_is_rejected_naming_the_offered_set() -> None:
    message = refused(create(instance({"acceleratorPartitionedProfile": "3g.20gb"}, type_name=H100_NAME), H100))
    assert message == (
        'spec.resources.acceleratorPartitionedProfile: Unsupported value: "3g.20gb": supported values: '
        '"1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"'
    )


def test_a_partition_on_a_manufacturer_without_partitioning_is_rejected() -> None:
    message = refused(create(instance({"acceleratorPartitionedProfile": "3g.40gb"}), AMD))
    assert (
        message
        == "spec.resources.acceleratorPartitionedProfile: Forbidden: amd accelerators have no hardware partitioning"
    )


def test_a_partition_on_a_pool_with_no_partitioned_cards_is_rejected() -> None:
    message = refused(create(instance({"acceleratorPartitionedProfile": "3g.40gb"}), A10G))
    assert message == (
        f"spec.resources.acceleratorPartitionedProfile: Forbidden: instance type {A10G_NAME} offers no partition profiles"
    )


def test_a_partition_and_a_slice_together_are_rejected() -> None:
    resources = {"acceleratorPartitionedProfile": "3g.40gb", "acceleratorSlicedMemoryPercentage": 50}
    message = refused(create(instance(resources), MIXED))
    assert message == (
        "spec.resources: Forbidden: a hardware partition and a logical slice percentage are mutually exclusive"
    )


def test_a_partition_of_more_than_one_card_is_rejected() -> None:
    message = refused(create(instance({"accelerator": "2", "acceleratorPartitionedProfile": "3g.40gb"}), H100))
    assert message == (
        'spec.resources.accelerator: Invalid value: "2": accelerator request must be exactly 1 for a partitioned request'
    )


def test_a_partition_before_the_detail_is_published_asks_to_retry() -> None:
    message = refused(create(instance({"acceleratorPartitionedProfile": "3g.40gb"}), NOT_READY))
    assert "has not published its accelerator detail (status.detail) yet; retry once it is ready" in message


# ----------------------------------------------------------------------------------------------- slices


def test_a_slice_on_a_logically_sliceable_pool_is_accepted() -> None:
    resources = {"accelerator": "1", "acceleratorSlicedMemoryPercentage": 50, "acceleratorSlicedCoresPercentage": 30}
    assert create(instance(resources)).allowed
    assert create(instance({"acceleratorSlicedMemoryPercentage": 50}), MIXED).allowed


def test_a_slice_of_more_than_one_card_is_rejected() -> None:
    message = refused(create(instance({"accelerator": "2", "acceleratorSlicedMemoryPercentage": 50})))
    assert message == (
        'spec.resources.accelerator: Invalid value: "2": accelerator request must be exactly 1 for a sliced request'
    )


def test_a_slice_on_an_all_partitioned_pool_points_to_the_partition_profile() -> None:
    message = refused(create(instance({"acceleratorSlicedMemoryPercentage": 50}, type_name=H100_NAME), H100))
    assert message.startswith(
        f"spec.resources.acceleratorSlicedMemoryPercentage: Forbidden: instance type {H100_NAME} offers no logical "
        "slicing: its accelerators are partitioned; request a partition with spec.resources.acceleratorPartitionedProfile"
    )


def test_a_slice_on_a_pool_without_logical_slicing_is_rejected() -> None:
    message = refused(create(instance({"acceleratorSlicedMemoryPercentage": 50}), AMD))
    assert message == (
        "spec.resources.acceleratorSlicedMemoryPercentage: Forbidden: instance type "
        "gpustack--amd-mi300x-linux-amd64 offers no logical slicing"
    )


@pytest.mark.parametrize("field", ["acceleratorSlicedMemoryPercentage", "acceleratorSlicedCoresPercentage"])
@pytest.mark.parametrize("value", [101, -1, "50", True])
def test_a_percentage_outside_0_to_100_is_rejected(field: str, value: Any) -> None:
    message = refused(create(instance({"acceleratorSlicedMemoryPercentage": 50, field: value})))
    assert f"spec.resources.{field}: Invalid value: " in message and "must be between 0 and 100" in message


@pytest.mark.parametrize("value", [0, 100])
def test_percentages_at_the_bounds_are_accepted(value: int) -> None:
    assert create(
        instance({"acceleratorSlicedMemoryPercentage": 100, "acceleratorSlicedCoresPercentage": value})
    ).allowed


def test_a_lone_cores_percentage_is_rejected() -> None:
    message = refused(create(instance({"acceleratorSlicedCoresPercentage": 50})))
    assert message.startswith("spec.resources.acceleratorSlicedMemoryPercentage: Required value:")


# ----------------------------------------------------------------------------------------------- volume, namespace, type


def test_exactly_one_volume_is_accepted() -> None:
    assert create(instance(volume={"persistent": {"name": "data"}})).allowed


def test_both_volumes_are_rejected() -> None:
    message = refused(create(instance(volume={"ephemeral": {"capacity": "1Gi"}, "persistent": {"name": "d"}})))
    assert message == "spec.volume: Forbidden: cannot specify both ephemeral and persistent of volume"


def test_no_volume_is_rejected() -> None:
    message = refused(create(instance(volume={})))
    assert message == "spec.volume: Required value: either ephemeral or persistent of volume should be specified"


@pytest.mark.parametrize("namespace", ["kube-system", "gpustack-system"])
def test_a_reserved_namespace_is_rejected(namespace: str) -> None:
    message = refused(create(instance(namespace=namespace)))
    assert message == "metadata.namespace: Forbidden: cannot create instance in reserved namespace"


def test_a_missing_instance_type_is_rejected_on_create() -> None:
    message = refused(create(instance(type_name="nope"), None))
    assert message == 'spec.type: Invalid value: "nope": no InstanceType of that name exists'
    assert refused(create(instance(type_name=""), None)) == "spec.type: Required value: must be specified"


def test_privileged_and_host_path_follow_their_settings() -> None:
    obj = instance(privileged=True, additionalVolumes=[{"name": "h", "hostPath": {"path": "/data"}}])
    message = refused(create(obj))
    assert "spec.privileged: Forbidden: privileged instances are not allowed" in message
    assert "spec.additionalVolumes[0].hostPath: Forbidden: host path volumes are not allowed" in message
    assert create(obj, privileged_allowed=True, host_path_allowed=True).allowed


def test_a_host_path_already_held_is_kept_on_update() -> None:
    old = instance(stop=True, phase="Stopped", additionalVolumes=[{"name": "h", "hostPath": {"path": "/data"}}])
    assert update(old, edited(old, image="registry.invalid/dev:2")).allowed
    widened = edited(old, additionalVolumes=[{"name": "h", "hostPath": {"path": "/"}}])
    assert "host path volumes are not allowed" in refused(update(old, widened))


# ----------------------------------------------------------------------------------------------- update


def test_a_stopped_instance_may_be_edited() -> None:
    old = instance({"accelerator": "1"}, stop=True, phase="Stopped")
    assert update(old, edited(old, image="registry.invalid/dev:2", resources={"accelerator": "2"})).allowed


def test_a_running_instance_spec_is_immutable() -> None:
    old = instance(phase="Ready")
    message = refused(update(old, edited(old, image="registry.invalid/dev:2", env=[{"name": "A", "value": "1"}])))
    assert message == (
        "[spec.image: Forbidden: is immutable while the instance is running; stop it first, "
        "spec.env: Forbidden: is immutable while the instance is running; stop it first]"
    )


def test_the_volume_is_immutable_even_when_stopped() -> None:
    old = instance(stop=True, phase="Stopped")
    message = refused(update(old, edited(old, volume={"persistent": {"name": "other"}})))
    assert message == "spec.volume: Forbidden: is immutable"


def test_start_from_stopped_is_accepted_and_repoints_the_type() -> None:
    old = instance(stop=True, phase="Stopped")
    assert update(old, edited(old, stop=False)).allowed
    assert update(
        old, edited(old, stop=False, type=H100_NAME, resources={"acceleratorPartitionedProfile": "1g.10gb"}), H100
    ).allowed


@pytest.mark.parametrize("phase", ["Stopping", "Starting", ""])
def test_start_from_any_other_phase_is_rejected(phase: str) -> None:
    old = instance(stop=True, phase=phase)
    assert refused(update(old, edited(old, stop=False))) == "spec.stop: Forbidden: can only start stopped instance"


def test_start_re_validates_the_resources() -> None:
    old = instance({"accelerator": "9"}, stop=True, phase="Stopped")
    assert "exceeds the maximum accelerator request" in refused(update(old, edited(old, stop=False)))


def test_stop_while_ready_is_accepted() -> None:
    old = instance(phase="Ready")
    assert update(old, edited(old, stop=True)).allowed


def test_stop_while_starting_is_rejected() -> None:
    old = instance(phase="Starting")
    assert refused(update(old, edited(old, stop=True))) == "spec.stop: Forbidden: cannot stop starting instance"


@pytest.mark.parametrize(
    ("policy", "deleting", "gone"), [("HoldAndDrain", False, False), ("None", True, False), ("None", False, True)]
)
def test_the_running_instance_stop_may_stop_a_starting_instance(policy: str, deleting: bool, gone: bool) -> None:
    """A Starting Instance whose Pod its queue can never admit (draining, or its type deleted or gone) is stopped
    too; a user's stop of a Starting Instance in a queue that admits (or merely holds) is still refused."""
    old = instance(phase="Starting")
    it = None if gone else dataclasses.replace(A10G, deleting=deleting)
    result = validate_instance(edited(old, stop=True), old, it, "UPDATE", stop_policy=policy)
    assert result.allowed
    for admitting in ("None", "Hold"):
        held = validate_instance(edited(old, stop=True), old, A10G, "UPDATE", stop_policy=admitting)
        assert refused(held) == "spec.stop: Forbidden: cannot stop starting instance"


def test_stop_is_accepted_when_the_instance_type_is_gone_or_the_pool_shrank() -> None:
    old = instance({"accelerator": "9"}, phase="Ready")
    assert update(old, edited(old, stop=True), None).allowed
    assert update(old, edited(old, stop=True), A10G).allowed


# ----------------------------------------------------------------------------------------------- deletion guard


def deleting(obj: dict[str, Any]) -> dict[str, Any]:
    return {**obj, "metadata": {**obj["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"}}


def test_an_update_of_a_deleted_instance_is_neither_validated_nor_defaulted() -> None:
    old = deleting(instance(phase="Ready"))
    new = deleting(edited(old, image="registry.invalid/other:1"))  # would be refused: running spec is immutable
    new["metadata"]["finalizers"] = []
    result = instance_validating_webhook("UPDATE", new, old, None)
    assert result.allowed and result.mutated is None
    result = instance_mutating_webhook("UPDATE", new, old, None)  # the InstanceType is already gone
    assert result.allowed and result.mutated is None


def test_the_same_update_without_a_deletion_timestamp_is_validated() -> None:
    old = instance(phase="Ready")
    assert not instance_validating_webhook("UPDATE", edited(old, image="registry.invalid/other:1"), old, A10G).allowed


def test_create_is_not_guarded() -> None:
    obj = deleting(instance({"accelerator": "9"}))
    assert not instance_validating_webhook("CREATE", obj, None, A10G).allowed


# ----------------------------------------------------------------------------------------------- defaulting


def defaulted(obj: dict[str, Any], it: InstanceType = A10G, **kwargs: Any) -> dict[str, Any]:
    result = default_instance(obj, it, **kwargs)
    assert result.allowed and result.mutated is not None, result.message
    assert apply_patch(obj, json_patch(obj, result.mutated)) == result.mutated
    resources: dict[str, Any] = result.mutated["spec"]["resources"]
    return resources


def test_whole_cards_default_to_one_card_sized_by_the_unit() -> None:
    assert defaulted(instance()) == {"accelerator": "1", "cpu": "8", "ram": "64Gi", "localStorage": "15Gi"}


def test_zero_cards_read_as_one() -> None:
    assert defaulted(instance({"accelerator": "0"}))["accelerator"] == "1"


def test_whole_cards_scale_the_unit() -> None:
    resources = defaulted(instance({"accelerator": "2", "cpu": "1", "ram": "1Gi"}))
    assert (resources["cpu"], resources["ram"]) == ("16", "128Gi")  # overcommit: always recomputed


def test_without_overcommit_given_cpu_and_ram_are_kept() -> None:
    resources = defaulted(instance({"accelerator": "2", "cpu": "1", "ram": "1Gi"}), overcommit=False)
    assert (resources["cpu"], resources["ram"]) == ("1", "1Gi")


@pytest.mark.parametrize(("percent", "cpu", "ram"), [(50, "4", "32Gi"), (33, "2640m", "21626Mi"), (100, "8", "64Gi")])
def test_a_slice_is_sized_by_its_memory_percentage(percent: int, cpu: str, ram: str) -> None:
    resources = defaulted(instance({"acceleratorSlicedMemoryPercentage": percent}))
    assert (resources["accelerator"], resources["cpu"], resources["ram"]) == ("1", cpu, ram)


def test_a_partition_is_sized_by_its_profile_share_of_the_card() -> None:
    # 3g.40gb: 40192 MiB of an 81920 MiB card = 0.490625 of the unit 12 cores / 192Gi.
    resources = defaulted(instance({"acceleratorPartitionedProfile": "3g.40gb"}, type_name=H100_NAME), H100)
    assert (resources["accelerator"], resources["cpu"], resources["ram"]) == ("1", "5888m", "96460Mi")


def test_cpu_only_defaults_to_one_core_and_unit_ram_per_core() -> None:
    assert defaulted(instance(type_name=CPU_NAME), CPU) == {"cpu": "1", "ram": "4Gi", "localStorage": "15Gi"}
    assert defaulted(instance({"cpu": "4"}, type_name=CPU_NAME), CPU)["ram"] == "16Gi"
    assert defaulted(instance({"cpu": "500m"}, type_name=CPU_NAME), CPU)["ram"] == "2Gi"


def test_local_storage_defaults_to_15gi_capped_at_the_type() -> None:
    small = parse_instancetype(instancetype(local_storage="10Gi"))
    assert defaulted(instance(), small)["localStorage"] == "10Gi"
    assert defaulted(instance({"localStorage": "50Gi"}))["localStorage"] == "50Gi"


def test_defaulting_leaves_a_missing_type_and_an_unreadable_request_to_validation() -> None:
    assert default_instance(instance(), None).mutated is None
    assert default_instance(instance({"cpu": "lots"}), A10G).mutated is None


def test_the_mutating_handler_leaves_a_running_instance_alone_on_stop() -> None:
    old = instance({"accelerator": "1", "cpu": "1"}, phase="Ready")  # stored before today's unit
    result = instance_mutating_webhook("UPDATE", edited(old, stop=True), old, A10G)
    assert result.allowed and result.mutated is None
    assert instance_validating_webhook("UPDATE", edited(old, stop=True), old, A10G).allowed


def test_defaulted_instances_pass_validation() -> None:
    for obj, it in (
        (instance(), A10G),
        (instance({"accelerator": "8"}), A10G),
        (instance({"acceleratorSlicedMemoryPercentage": 25}), A10G),
        (instance({"acceleratorPartitionedProfile": "7g.80gb"}, type_name=H100_NAME), H100),
        (instance({"cpu": "72"}, type_name=CPU_NAME), CPU),
    ):
        result = instance_mutating_webhook("CREATE", obj, None, it)
        assert result.mutated is not None
        assert instance_validating_webhook("CREATE", result.mutated, None, it).allowed


# ----------------------------------------------------------------------------------------------- the record


def test_parse_instance_reads_the_rule_inputs() -> None:
    record = parse_instance(
        instance({"accelerator": 2, "acceleratorSlicedMemoryPercentage": 50}, stop=True, phase="Stopped")
    )
    assert (record.name, record.namespace, record.type, record.stop, record.phase) == (
        "box",
        "team-a",
        A10G_NAME,
        True,
        "Stopped",
    )
    assert record.resources.accelerator == "2" and record.resources.family == "sliced"
    assert record.volume == "ephemeral" and record.resource_version == "7" and not record.running


def test_parse_instance_never_raises_on_an_odd_shape() -> None:
    record = parse_instance({"spec": {"resources": "x", "volume": 3}, "metadata": []})
    assert record.resources.family == "whole" and record.volume == "" and record.name == ""


# ----------------------------------------------------------------------------------------------- any input

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=6),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=3),
    max_leaves=15,
)
RESOURCE_KEYS = st.sampled_from(
    [
        "cpu",
        "ram",
        "localStorage",
        "accelerator",
        "acceleratorSlicedMemoryPercentage",
        "acceleratorSlicedCoresPercentage",
        "acceleratorPartitionedProfile",
    ]
)
RESOURCE_VALUES = JSON_VALUES | st.sampled_from(["1", "0", "2", "64Gi", "500m", "1e3", "3g.40gb", 0, 50, 100, 101])
SPEC: st.SearchStrategy[dict[str, Any]] = st.fixed_dictionaries(
    {},
    optional={
        "type": st.sampled_from([A10G_NAME, H100_NAME, CPU_NAME, ""]) | JSON_VALUES,
        "image": st.just("img") | JSON_VALUES,
        "resources": st.dictionaries(RESOURCE_KEYS, RESOURCE_VALUES, max_size=7) | JSON_VALUES,
        "volume": st.sampled_from([{"ephemeral": {}}, {"persistent": {}}]) | JSON_VALUES,
        "stop": st.booleans() | JSON_VALUES,
        "privileged": st.booleans(),
        "additionalVolumes": JSON_VALUES,
    },
)
SHAPED = st.builds(
    lambda spec, phase, namespace, deleting: {
        "metadata": {"name": "i", "namespace": namespace, **({"deletionTimestamp": "t"} if deleting else {})},
        "spec": spec,
        "status": {"phase": phase},
    },
    SPEC,
    st.sampled_from(["Starting", "Stopping", "Stopped", "Ready", ""]) | JSON_VALUES,
    st.sampled_from(["team-a", "kube-system"]) | JSON_VALUES,
    st.booleans(),
)
ANY_OBJECT = JSON_VALUES | SHAPED
TYPES = st.sampled_from([A10G, H100, MIXED, AMD, NOT_READY, CPU, None])
OPERATIONS = st.sampled_from(["CREATE", "UPDATE", "DELETE", "CONNECT"])


def answered(result: Any) -> None:
    assert isinstance(result, Admission)
    assert result.allowed or result.message
    assert not (result.message or "").startswith("internal error")


@settings(max_examples=400, deadline=None)
@given(ANY_OBJECT, ANY_OBJECT, TYPES, OPERATIONS, st.booleans())
def test_every_instance_webhook_answers_any_json(
    obj: Any, old: Any, it: InstanceType | None, operation: str, overcommit: bool
) -> None:
    answered(validate_instance(obj, old, it, operation))
    answered(default_instance(obj, it, overcommit=overcommit))
    answered(instance_validating_webhook(operation, obj, old, it))
    answered(instance_mutating_webhook(operation, obj, old, it, overcommit=overcommit))
    if isinstance(obj, dict):
        parse_instance(obj)


@settings(max_examples=300, deadline=None)
@given(SHAPED, TYPES, st.booleans())
def test_the_defaulting_patch_replays_and_is_idempotent(obj: Any, it: InstanceType | None, overcommit: bool) -> None:
    result = default_instance(obj, it, overcommit=overcommit)
    if result.mutated is None:
        return
    assert apply_patch(obj, json_patch(obj, result.mutated)) == result.mutated
    again = default_instance(result.mutated, it, overcommit=overcommit)
    assert again.mutated in (None, result.mutated)


@st.composite
def valid_request(draw: st.DrawFn) -> tuple[dict[str, Any], InstanceType]:
    family = draw(st.sampled_from(["whole", "sliced", "partitioned", "cpu"]))
    if family == "whole":
        return instance({"accelerator": str(draw(st.integers(0, 8)))}), A10G
    if family == "sliced":
        resources = {"acceleratorSlicedMemoryPercentage": draw(st.integers(1, 100))}
        if draw(st.booleans()):
            resources["acceleratorSlicedCoresPercentage"] = draw(st.integers(0, 100))
        return instance(resources), A10G
    if family == "partitioned":
        profile = draw(st.sampled_from(list(H100_PROFILES)))
        return instance({"acceleratorPartitionedProfile": profile}, type_name=H100_NAME), H100
    millis = draw(st.integers(1, 72_000))
    return instance({"cpu": f"{millis}m"}, type_name=CPU_NAME), CPU


@settings(max_examples=200, deadline=None)
@given(valid_request())
def test_any_valid_request_defaults_into_one_that_validates(case: tuple[dict[str, Any], InstanceType]) -> None:
    obj, it = case
    result = instance_mutating_webhook("CREATE", obj, None, it)
    assert result.mutated is not None
    verdict = instance_validating_webhook("CREATE", result.mutated, None, it)
    assert verdict.allowed, verdict.message
