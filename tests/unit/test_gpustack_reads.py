"""GPUStack's objects read as its worker's code writes them, where the design is silent: one accepted and one
rejected (or differing) example per read."""

from __future__ import annotations

import pytest

from gpuctl.core import naming
from gpuctl.core.fit import RETRY, judge_workload
from gpuctl.core.ledger import parse_devices
from gpuctl.core.views import accelerator_views, runtime_versions
from gpuctl.core.workloads import parse_workload
from testbed.factories import card_row, devices, workload
from tests.unit.test_fit import ctx, one_card


def test_a_group_id_keeps_underscore_and_dot_so_the_k100_ai_pool_is_found() -> None:
    led = parse_devices(devices("k1", manufacturer="hygon", group_id="k100_ai", cards=2, logical_slots=4))
    assert led.groups[0].accelerator_key == "hygon-k100_ai"
    ex = accelerator_views([led], "hygon-k100_ai")[0]
    assert (ex.once_max_request, ex.remaining, ex.capacity) == (2, 2, 2)
    # The key folded to '-' (what gpuctl read before) names no card.
    assert accelerator_views([led], "hygon-k100-ai")[0].capacity == 0


def test_partition_profiles_are_listed_in_name_order() -> None:
    profiles = [
        {"name": n, "memoryMib": mib, "computeSlices": 1, "memorySlices": 1, "count": c}
        for n, mib, c in (("7g.80gb", 80896, 1), ("1g.10gb", 9856, 7), ("10g.1gb", 1, 1))
    ]
    led = parse_devices(devices("h", group_id="h100", cards=1, profiles=profiles))
    pt = accelerator_views([led], "nvidia-h100")[3]
    assert [p.name for p in pt.remaining_profiles] == ["10g.1gb", "1g.10gb", "7g.80gb"]


def test_thead_profiles_of_another_shape_keep_their_spelling() -> None:
    assert naming.publish_profile("thead", "4g48gb") == "4g.48gb"
    assert naming.vendor_profile("thead", "4g.48gb") == "4g48gb"
    # Not of GPUStack's Ng.NNgb shape: as it is, both ways (no dot taken out of another shape).
    assert naming.publish_profile("thead", "1c.12g") == "1c.12g"
    assert naming.vendor_profile("thead", "1c.12g") == "1c.12g"
    assert naming.vendor_profile("nvidia", "4g.48gb") == "4g.48gb"


def test_a_worker_environment_renames_a_manufacturers_resources() -> None:
    table = naming.manufacturer_table(
        {
            "GPUSTACK_ILUVATAR_ACCELERATABLE_RESOURCE_NAME": "iluvatar.ai/gpu",
            "GPUSTACK_NVIDIA_PARTITION_KIND": "mig2",
            "GPUSTACK_AMD_PARTITION_KIND": "xcp",  # amd does not partition: GPUStack ignores it
            "PATH": "/bin",
        }
    )
    assert table["iluvatar"].base == "iluvatar.ai/gpu"
    assert table["amd"].partition_kind is None
    assert dict(table.overrides) == {
        "GPUSTACK_ILUVATAR_ACCELERATABLE_RESOURCE_NAME": "iluvatar.ai/gpu",
        "GPUSTACK_NVIDIA_PARTITION_KIND": "mig2",
    }
    with naming.use_manufacturers(table):
        key = naming.classify_resource("iluvatar.ai/gpu.sliced")
        assert key is not None and key.manufacturer.name == "iluvatar" and key.kind is naming.KeyKind.SLICED
        assert naming.classify_resource("iluvatar.com/gpu") is None
        profile = naming.classify_resource("nvidia.com/gpu.partitioned.mig2-3g.40gb")
        assert profile is not None and profile.profile == "3g.40gb"
    # Out of the block the defaults stand again.
    assert naming.classify_resource("iluvatar.com/gpu") is not None


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"GPUSTACK_NVIDIA_ACCELERATABLE_RESOURCE_NAME": "gpu"}, "not a resource name"),
        ({"GPUSTACK_AMD_ACCELERATABLE_RESOURCE_NAME": "nvidia.com/gpu"}, "names both amd and nvidia"),
    ],
)
def test_an_override_that_cannot_apply_is_refused_naming_it(env: dict[str, str], message: str) -> None:
    with pytest.raises(naming.ManufacturerOverrideError, match=message):
        naming.manufacturer_table(env)


def test_credits_of_two_manufacturers_leave_a_podset_unassigned() -> None:
    """GPUStack's check counts the credits entries of a PodSet's assignment: exactly one resolves a flavor, two do
    not — even when both name the same flavor."""
    w = workload("w", [("main", 1, {"nvidia.com/gpu": "1"})], hosts={"main": [("node-x", 1)]})
    w["status"]["admission"]["podSetAssignments"][0]["flavors"]["credits.gpustack.ai/amd"] = "f-a10g"
    v = judge_workload(parse_workload(w), ctx(one_card()))
    assert v.state == RETRY and "does not resolve to a single accelerator flavor" in v.message
    one = workload("w", [("main", 1, {"nvidia.com/gpu": "1"})], hosts={"main": [("node-x", 1)]})
    assert judge_workload(parse_workload(one), ctx(one_card())).state == "Ready"


def test_runtime_versions_are_listed_as_the_status_writer_lists_them() -> None:
    assert runtime_versions(["12.4", "", "9", "9.0", "12.10", "beta", "1.2.3"]) == ("9", "12.4", "12.10")


def test_a_mode_0_row_with_a_partial_remaining_grants_shares_at_gate_3_as_gpustacks_check_reads_it() -> None:
    row = card_row(0)
    row["remaining"] = 800_000
    node = devices("node-x", cards=1, rows=[row])
    shared = workload("w", [("main", 1, {"nvidia.com/gpu.shared": "1"})], hosts={"main": [("node-x", 1)]})
    assert judge_workload(parse_workload(shared), ctx(node)).state == "Ready"
    whole = workload("w", [("main", 1, {"nvidia.com/gpu": "1"})], hosts={"main": [("node-x", 1)]})
    assert judge_workload(parse_workload(whole), ctx(node)).state == RETRY
