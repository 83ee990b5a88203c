"""The InstanceType webhooks (create/update validation, defaulting), the deletion guard of their handlers, the unit
presets of derived types and the derived names."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuctl.core import naming
from gpuctl.core.admission import Admission, apply_patch, json_patch
from gpuctl.core.instancetype_rules import (
    CPU_ONLY_PRESET,
    FALLBACK_PRESET,
    NODE_KEY_MAX,
    DerivedNameError,
    UnitPreset,
    accelerated_flavor_name,
    cpu_flavor_name,
    default_instancetype,
    instancetype_flavor_name,
    instancetype_mutating_webhook,
    instancetype_validating_webhook,
    pool_name,
    unit_preset,
    validate_instancetype_create,
    validate_instancetype_update,
)
from gpuctl.core.instancetypes import parse_instancetype

A10G_NAME = "gpustack--nvidia-a10g-linux-amd64"
IMMUTABLE = "spec: Forbidden: is immutable except displayName and inactive"
GI = 'must be a positive integer with a case-sensitive "Gi" suffix'


def accelerated(**spec: Any) -> dict[str, Any]:
    """An accelerated InstanceType as an admin submits it (no labels yet)."""
    base: dict[str, Any] = {
        "acceleratable": True,
        "acceleratorGroup": "nvidia-a10g",
        "os": "linux",
        "arch": "amd64",
        "unitResources": {"cpu": "8", "ram": "64Gi"},
        "localStorage": "100Gi",
    }
    base.update(spec)
    return {
        "apiVersion": "worker.gpustack.ai/v1alpha1",
        "kind": "InstanceType",
        "metadata": {"name": A10G_NAME},
        "spec": {k: v for k, v in base.items() if v is not None},
    }


def cpu_only(**spec: Any) -> dict[str, Any]:
    obj = accelerated(acceleratable=False, acceleratorGroup=None, unitResources={"cpu": "1", "ram": "4Gi"})
    obj["metadata"]["name"] = "gpustack--generic-linux-amd64"
    obj["spec"].update({k: v for k, v in spec.items() if v is not None})
    for k in [k for k, v in spec.items() if v is None]:
        obj["spec"].pop(k, None)
    return obj


def deleting(obj: dict[str, Any]) -> dict[str, Any]:
    out = {**obj, "metadata": {**obj["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"}}
    return out


def refused(result: Admission) -> str:
    assert not result.allowed
    assert result.message
    return result.message


# ----------------------------------------------------------------------------------------------- create


def test_create_accepts_a_complete_accelerated_type() -> None:
    result = validate_instancetype_create(accelerated())
    assert result.allowed, result.message


def test_create_accepts_a_complete_cpu_only_type() -> None:
    result = validate_instancetype_create(cpu_only())
    assert result.allowed, result.message


def test_create_requires_the_accelerator_group_when_acceleratable() -> None:
    message = refused(validate_instancetype_create(accelerated(acceleratorGroup=None)))
    assert message == "spec.acceleratorGroup: Required value: must be specified when acceleratable is true"


def test_create_forbids_an_accelerator_group_when_not_acceleratable() -> None:
    message = refused(validate_instancetype_create(cpu_only(acceleratorGroup="nvidia-a10g")))
    assert message == "spec.acceleratorGroup: Forbidden: must not be specified when acceleratable is false"


def test_create_requires_os_and_arch_and_aggregates_the_errors() -> None:
    message = refused(validate_instancetype_create(accelerated(os=None, arch="")))
    assert message == "[spec.os: Required value: must be specified, spec.arch: Required value: must be specified]"


@pytest.mark.parametrize("cpu", ["8", "12", "1"])
def test_create_accepts_a_unitless_positive_cpu_on_an_accelerated_type(cpu: str) -> None:
    assert validate_instancetype_create(accelerated(unitResources={"cpu": cpu, "ram": "64Gi"})).allowed


@pytest.mark.parametrize("cpu", ["8c", "0", "1.5", "500m", "-1", "08"])
def test_create_rejects_a_cpu_that_is_no_unitless_positive_integer(cpu: str) -> None:
    message = refused(validate_instancetype_create(accelerated(unitResources={"cpu": cpu, "ram": "64Gi"})))
    assert message == f'spec.unitResources.cpu: Invalid value: "{cpu}": must be a positive integer with no unit suffix'


def test_create_requires_a_cpu() -> None:
    message = refused(validate_instancetype_create(accelerated(unitResources={"ram": "64Gi"})))
    assert message == "spec.unitResources.cpu: Required value: must be a positive integer with no unit suffix"


def test_create_rejects_a_cpu_only_unit_other_than_one_core() -> None:
    message = refused(validate_instancetype_create(cpu_only(unitResources={"cpu": "2", "ram": "4Gi"})))
    assert message == 'spec.unitResources.cpu: Invalid value: "2": must be 1 when acceleratable is false'


@pytest.mark.parametrize("ram", ["64G", "64gi", "64GI", "64", "0Gi", "1.5Gi", "65536Mi"])
def test_create_rejects_a_ram_without_a_case_sensitive_gi_suffix(ram: str) -> None:
    message = refused(validate_instancetype_create(accelerated(unitResources={"cpu": "8", "ram": ram})))
    assert message == f'spec.unitResources.ram: Invalid value: "{ram}": {GI}'


def test_create_rejects_and_requires_local_storage_in_gi() -> None:
    assert refused(validate_instancetype_create(accelerated(localStorage="100G"))) == (
        f'spec.localStorage: Invalid value: "100G": {GI}'
    )
    assert refused(validate_instancetype_create(accelerated(localStorage=None))) == (
        f"spec.localStorage: Required value: {GI}"
    )


def test_create_rejects_an_empty_spec_with_every_missing_field() -> None:
    message = refused(validate_instancetype_create({"metadata": {"name": "x"}, "spec": {}}))
    assert message.startswith("[")
    for path in ("spec.os", "spec.arch", "spec.unitResources.cpu", "spec.unitResources.ram", "spec.localStorage"):
        assert f"{path}: Required value" in message


def test_create_rejects_an_accelerator_group_that_cannot_name_a_label() -> None:
    key = "nvidia-" + "x" * 60
    message = refused(validate_instancetype_create(accelerated(acceleratorGroup=key)))
    assert message.startswith(f'spec.acceleratorGroup: Invalid value: "{key}": must be no more than 63 characters')


def test_create_rejects_a_non_boolean_acceleratable() -> None:
    message = refused(validate_instancetype_create(accelerated(acceleratable="yes")))
    assert 'spec.acceleratable: Invalid value: "yes": must be true or false' in message


# ----------------------------------------------------------------------------------------------- update


def test_update_accepts_a_rename_and_deactivation() -> None:
    old = accelerated()
    new = accelerated(displayName="A10G pool", inactive=True)
    assert validate_instancetype_update(old, new).allowed


def test_update_freezes_the_description_as_the_documented_contract_says() -> None:
    """Some code versions let ``description`` change; the documented contract (docs/design.md) freezes every field but
    displayName and inactive."""
    assert refused(validate_instancetype_update(accelerated(), accelerated(description="for the demo"))) == IMMUTABLE


def test_update_rejects_a_resize() -> None:
    new = accelerated(unitResources={"cpu": "12", "ram": "64Gi"})
    assert refused(validate_instancetype_update(accelerated(), new)) == IMMUTABLE


def test_update_rejects_repointing_the_pool() -> None:
    assert refused(validate_instancetype_update(accelerated(), accelerated(acceleratorGroup="nvidia-l4"))) == IMMUTABLE


def test_a_legacy_type_can_still_be_renamed_and_deactivated_after_defaulting() -> None:
    legacy = cpu_only(unitResources={"cpu": "2", "ram": "64G"}, acceleratable=None)
    assert not validate_instancetype_create(legacy).allowed  # it would fail create validation today
    edited = {**legacy, "spec": {**legacy["spec"], "displayName": "old pool", "inactive": True}}
    defaulted = default_instancetype(edited)
    assert defaulted.allowed and defaulted.mutated is not None
    assert defaulted.mutated["spec"]["generalGroup"] == "generic"  # written now, absent in the stored object
    assert validate_instancetype_update(legacy, defaulted.mutated).allowed


def test_update_validation_still_runs_while_the_type_is_deleted() -> None:
    old = deleting(accelerated())
    new = deleting(accelerated(unitResources={"cpu": "12", "ram": "64Gi"}))
    assert refused(instancetype_validating_webhook("UPDATE", new, old)) == IMMUTABLE


def test_update_removing_the_finalizer_of_a_deleted_type_is_allowed() -> None:
    old = deleting(accelerated())
    old["metadata"]["finalizers"] = [naming.FINALIZER_CONTROLLED]
    new = deleting(accelerated())
    assert instancetype_validating_webhook("UPDATE", new, old).allowed


def test_the_mutating_handler_still_defaults_a_deleted_type() -> None:
    obj = deleting(accelerated())
    result = instancetype_mutating_webhook("UPDATE", obj)
    assert result.mutated is not None
    assert result.mutated["metadata"]["labels"][naming.LABEL_QUEUE_ENTRANCE] == naming.queue_entrance(A10G_NAME)


# ----------------------------------------------------------------------------------------------- defaulting


def labels_of(result: Admission) -> dict[str, str]:
    assert result.allowed and result.mutated is not None, result.message
    labels: dict[str, str] = result.mutated["metadata"]["labels"]
    return labels


def test_defaulting_fills_the_general_group_and_stamps_the_pool_labels() -> None:
    obj = accelerated()
    result = default_instancetype(obj)
    assert result.mutated is not None
    assert result.mutated["spec"]["generalGroup"] == "generic"
    assert labels_of(result) == {
        naming.LABEL_OS: "linux",
        naming.LABEL_ARCH: "amd64",
        naming.LABEL_ACCELERATABLE: "true",
        "acceleratable.feature.gpustack.ai/nvidia-a10g": "true",
        naming.LABEL_QUEUE_ENTRANCE: "gpustack-fnv64-c4680bb149644f1c",
    }
    assert apply_patch(obj, json_patch(obj, result.mutated)) == result.mutated


def test_defaulting_a_cpu_only_type_marks_it_not_acceleratable() -> None:
    labels = labels_of(default_instancetype(cpu_only()))
    assert labels[naming.LABEL_ACCELERATABLE] == "false"
    assert labels[naming.LABEL_QUEUE_ENTRANCE] == "gpustack-fnv64-3b93966fd73eb9ec"
    assert not any(k.startswith(naming.ACCELERATABLE_PREFIX) for k in labels)


def test_defaulting_prunes_stale_feature_keys_and_keeps_other_labels() -> None:
    obj = accelerated()
    obj["metadata"]["labels"] = {
        "acceleratable.feature.gpustack.ai/nvidia-tesla-t4": "true",
        "general.feature.gpustack.ai/amd-epyc-7r32": "true",
        naming.LABEL_DERIVED_FROM_NODE: "true",
        "team": "ml",
        naming.LABEL_QUEUE_ENTRANCE: "gpustack-fnv64-0000000000000000",
    }
    labels = labels_of(default_instancetype(obj))
    assert "acceleratable.feature.gpustack.ai/nvidia-tesla-t4" not in labels
    assert "general.feature.gpustack.ai/amd-epyc-7r32" not in labels
    assert labels[naming.LABEL_DERIVED_FROM_NODE] == "true" and labels["team"] == "ml"
    assert labels[naming.LABEL_QUEUE_ENTRANCE] == "gpustack-fnv64-c4680bb149644f1c"


def test_defaulting_stamps_the_general_key_of_a_cpu_aware_pool() -> None:
    name = "gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64"
    obj = accelerated(generalGroup="amd-epyc-7r32")
    obj["metadata"]["name"] = name
    labels = labels_of(default_instancetype(obj, cpu_aware=True))
    assert labels["general.feature.gpustack.ai/amd-epyc-7r32"] == "true"
    assert labels[naming.LABEL_QUEUE_ENTRANCE] == "gpustack-fnv64-029fd9550e0c70bd"


def test_defaulting_writes_an_absent_acceleratable_as_inferred() -> None:
    result = default_instancetype(accelerated(acceleratable=None))
    assert result.mutated is not None and result.mutated["spec"]["acceleratable"] is True


def test_defaulting_is_idempotent_and_its_output_passes_create_validation() -> None:
    once = default_instancetype(accelerated())
    assert once.mutated is not None
    twice = default_instancetype(once.mutated)
    assert twice.mutated == once.mutated
    assert validate_instancetype_create(once.mutated).allowed


def test_defaulting_leaves_out_a_label_it_could_not_store_and_validation_explains() -> None:
    obj = accelerated(acceleratorGroup=None)
    labels = labels_of(default_instancetype(obj))
    assert not any(k.startswith(naming.ACCELERATABLE_PREFIX) for k in labels)
    assert "spec.acceleratorGroup: Required value" in refused(validate_instancetype_create(obj))


def test_defaulting_refuses_a_type_without_spec() -> None:
    assert refused(default_instancetype({"metadata": {"name": "x"}})) == "spec: Required value: must be specified"


# ----------------------------------------------------------------------------------------------- unit presets


@pytest.mark.parametrize(
    ("key", "memory", "expected"),
    [
        ("nvidia-a10g", 24, ("8", "64Gi", "nvidia-a10g")),
        ("nvidia-tesla-t4", 16, ("8", "32Gi", "nvidia-t4")),
        ("nvidia-h100-80gb-hbm3", 80, ("12", "192Gi", "nvidia-h100")),
        ("nvidia-l40s", 48, ("12", "128Gi", "nvidia-l40s")),
        ("nvidia-a100-sxm4-80gb", 80, ("12", "128Gi", "nvidia-a100-80gb")),
        ("nvidia-a100-sxm4-40gb", 40, ("8", "64Gi", "nvidia-a100-40gb")),
        ("nvidia-tesla-v100-sxm2-32gb", 32, ("8", "64Gi", "nvidia-v100-32gb")),
        ("nvidia-tesla-v100-sxm2-16gb", 16, ("8", "32Gi", "nvidia-v100")),
        ("nvidia-geforce-rtx-4090", 24, ("8", "64Gi", "nvidia-rtx-4090")),
        ("ascend-310p3", 24, ("8", "64Gi", "ascend-310p*")),
        ("ascend-910b4", 32, ("8", "64Gi", "ascend-910b*")),
        ("amd-instinct-mi300x", 192, ("12", "192Gi", "amd-mi300x")),
        ("amd-instinct-mi210", 64, ("12", "128Gi", "amd-mi210")),
        ("hygon-bw1000", 64, ("12", "192Gi", "hygon-bw1000")),
        ("mthreads-mtt-s4000", 48, ("8", "64Gi", "mthreads-mtt-s4000")),
    ],
)
def test_a_product_row_sets_the_preset(key: str, memory: float, expected: tuple[str, str, str]) -> None:
    cpu, ram, source = expected
    assert unit_preset(key, memory) == UnitPreset(cpu, ram, "100Gi", source)


def test_a_product_row_takes_precedence_over_the_memory_tier() -> None:
    assert unit_preset("nvidia-tesla-t4", 200).ram == "32Gi"  # the tier would say xlarge


def test_a_row_does_not_match_across_a_model_word() -> None:
    # RTX PRO 6000 is no RTX 6000: "pro" is a model word, not a form factor, so its memory tier decides.
    assert unit_preset("nvidia-rtx-pro-6000-blackwell", 96).source == "large"


@pytest.mark.parametrize(
    ("memory", "tier", "cpu", "ram"),
    [
        (8, "small", "8", "32Gi"),
        (16, "small", "8", "32Gi"),
        (16.5, "medium", "8", "64Gi"),
        (48, "medium", "8", "64Gi"),
        (64, "large", "12", "128Gi"),
        (96, "large", "12", "128Gi"),
        (141, "xlarge", "12", "192Gi"),
    ],
)
def test_an_unlisted_product_takes_its_memory_tier(memory: float, tier: str, cpu: str, ram: str) -> None:
    assert unit_preset("nvidia-some-future-card", memory) == UnitPreset(cpu, ram, "100Gi", tier)


@pytest.mark.parametrize("memory", [None, 0, -1, float("nan")])
def test_an_unknown_accelerator_without_memory_takes_the_fallback(memory: float | None) -> None:
    assert unit_preset("biren-br100", memory) == FALLBACK_PRESET == UnitPreset("4", "16Gi", "100Gi", "fallback")


@pytest.mark.parametrize("key", [None, ""])
def test_a_cpu_only_type_takes_one_core_and_2gi(key: str | None) -> None:
    assert unit_preset(key, 80) == CPU_ONLY_PRESET == UnitPreset("1", "2Gi", "100Gi", "cpu")


def test_every_preset_passes_create_validation() -> None:
    for key in ("nvidia-a10g", "nvidia-some-future-card", "biren-br100"):
        preset = unit_preset(key, 24)
        obj = accelerated(
            acceleratorGroup=key,
            unitResources={"cpu": preset.cpu, "ram": preset.ram},
            localStorage=preset.local_storage,
        )
        assert validate_instancetype_create(obj).allowed
    preset = unit_preset(None, None)
    obj = cpu_only(unitResources={"cpu": preset.cpu, "ram": preset.ram}, localStorage=preset.local_storage)
    assert validate_instancetype_create(obj).allowed


# ----------------------------------------------------------------------------------------------- derived names


def test_flavor_names() -> None:
    assert cpu_flavor_name("amd-epyc-7r32", "linux", "amd64", 16) == "gpustack--amd-epyc-7r32-linux-amd64-16c"
    assert (
        accelerated_flavor_name("amd-epyc-7r32", "nvidia-a10g", "linux", "amd64", 4)
        == "gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64-4d"
    )


@pytest.mark.parametrize(
    ("general", "accelerator", "aware", "name", "entrance"),
    [
        ("amd-epyc-7r32", None, False, "gpustack--generic-linux-amd64", "3b93966fd73eb9ec"),
        ("amd-epyc-7r32", "nvidia-a10g", False, "gpustack--nvidia-a10g-linux-amd64", "c4680bb149644f1c"),
        ("amd-epyc-7r32", None, True, "gpustack--amd-epyc-7r32-linux-amd64", "d3390f10cd57a632"),
        (
            "amd-epyc-7r32",
            "nvidia-a10g",
            True,
            "gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64",
            "029fd9550e0c70bd",
        ),
        (
            "intel-xeon-platinum-8259cl",
            "nvidia-tesla-t4",
            True,
            "gpustack--intel-xeon-platinum-8259cl--nvidia-tesla-t4-linux-amd64",
            "5b59e508edc027b7",
        ),
    ],
)
def test_pool_names_match_the_verified_entrances(
    general: str, accelerator: str | None, aware: bool, name: str, entrance: str
) -> None:
    assert pool_name(general, accelerator, "linux", "amd64", cpu_aware=aware) == name
    assert naming.queue_entrance(name) == f"gpustack-fnv64-{entrance}"


def test_a_pool_name_may_be_longer_than_a_label_value() -> None:
    name = pool_name("intel-xeon-platinum-8259cl", "nvidia-tesla-t4", "linux", "amd64", cpu_aware=True)
    assert len(name) > 63  # an object name, never a label value: the label carries the 31-character entrance
    assert len(naming.queue_entrance(name)) == 31


def test_instancetype_flavor_names() -> None:
    assert instancetype_flavor_name("amd-epyc-7r32", None) == "gpustack--generic"
    assert instancetype_flavor_name("amd-epyc-7r32", "nvidia-a10g") == "gpustack--nvidia-a10g"
    assert instancetype_flavor_name("amd-epyc-7r32", None, cpu_aware=True) == "gpustack--amd-epyc-7r32"
    assert instancetype_flavor_name("amd-epyc-7r32", "nvidia-a10g", cpu_aware=True) == (
        "gpustack--amd-epyc-7r32--nvidia-a10g"
    )


def test_a_node_key_too_long_for_its_capacity_label_is_refused() -> None:
    assert accelerated_flavor_name("generic", "n" * NODE_KEY_MAX, "linux", "amd64", 1)
    with pytest.raises(DerivedNameError, match=r"at most 54, so that its flavor label .*\.capacity stays within 63"):
        accelerated_flavor_name("generic", "n" * (NODE_KEY_MAX + 1), "linux", "amd64", 1)


@pytest.mark.parametrize(
    "call",
    [
        lambda: cpu_flavor_name("AMD EPYC", "linux", "amd64", 4),
        lambda: cpu_flavor_name("amd-epyc-7r32", "Linux", "amd64", 4),
        lambda: cpu_flavor_name("amd-epyc-7r32", "linux", "", 4),
        lambda: cpu_flavor_name("amd-epyc-7r32", "linux", "amd64", 0),
        lambda: pool_name("generic", "nvidia_a10g", "linux", "amd64"),
    ],
)
def test_a_component_that_cannot_be_a_label_is_refused(call: Any) -> None:
    with pytest.raises(DerivedNameError):
        call()


# ----------------------------------------------------------------------------------------------- any input

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=6),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=3),
    max_leaves=15,
)
SPEC_KEYS = st.sampled_from(
    ["acceleratable", "acceleratorGroup", "generalGroup", "os", "arch", "unitResources", "localStorage", "inactive"]
)
SPEC_VALUES = JSON_VALUES | st.sampled_from(["8", "1", "64Gi", "linux", "nvidia-a10g", "generic", True, False])
SHAPED = st.builds(
    lambda spec, labels, name: {"metadata": {"name": name, "labels": labels}, "spec": spec},
    st.dictionaries(SPEC_KEYS, SPEC_VALUES, max_size=8),
    st.dictionaries(st.text(max_size=10), st.text(max_size=5), max_size=3) | JSON_VALUES,
    st.text(max_size=10) | JSON_VALUES,
)
ANY_OBJECT = JSON_VALUES | SHAPED
OPERATIONS = st.sampled_from(["CREATE", "UPDATE", "DELETE", "CONNECT", ""])


def answered(result: Any) -> None:
    assert isinstance(result, Admission)
    assert result.allowed or result.message
    assert not (result.message or "").startswith("internal error")


@settings(max_examples=300, deadline=None)
@given(ANY_OBJECT, ANY_OBJECT, OPERATIONS, st.booleans())
def test_every_instancetype_webhook_answers_any_json(obj: Any, old: Any, operation: str, aware: bool) -> None:
    answered(validate_instancetype_create(obj))
    answered(validate_instancetype_update(old, obj))
    answered(default_instancetype(obj, cpu_aware=aware))
    answered(instancetype_validating_webhook(operation, obj, old))
    answered(instancetype_mutating_webhook(operation, obj, cpu_aware=aware))


@settings(max_examples=200, deadline=None)
@given(SHAPED, st.booleans())
def test_the_defaulting_patch_replays_to_the_mutated_object(obj: Any, aware: bool) -> None:
    result = default_instancetype(obj, cpu_aware=aware)
    if result.mutated is None:
        return
    assert apply_patch(obj, json_patch(obj, result.mutated)) == result.mutated
    assert default_instancetype(result.mutated, cpu_aware=aware).mutated == result.mutated


@settings(max_examples=100, deadline=None)
@given(
    st.sampled_from(["nvidia-a10g", "nvidia-tesla-t4", "amd-instinct-mi300x", "nvidia-x"]),
    st.floats(1, 200),
)
def test_a_derived_type_stamped_from_any_preset_defaults_into_its_pool(key: str, memory: float) -> None:
    preset = unit_preset(key, memory)
    obj = accelerated(
        acceleratorGroup=key, unitResources={"cpu": preset.cpu, "ram": preset.ram}, localStorage=preset.local_storage
    )
    obj["metadata"]["name"] = pool_name("generic", key, "linux", "amd64")
    result = default_instancetype(obj)
    assert result.mutated is not None
    assert validate_instancetype_create(result.mutated).allowed
    record = parse_instancetype(result.mutated)
    assert record.queue_entrance_label == naming.queue_entrance(record.name)
