"""Units, quantities, resource keys, node keys and queue entrances."""

from __future__ import annotations

from fractions import Fraction

import pytest

from gpuctl.core import naming
from gpuctl.core.naming import KeyKind
from gpuctl.core.units import (
    PERCENT,
    SHARE,
    M,
    QuantityError,
    format_quantity,
    mib_to_units,
    parse_count,
    parse_quantity,
    percent_to_units,
    quantity_to_mib,
)


def test_units_of_account() -> None:
    assert M == 1_600_000 == 2**9 * 5**5
    assert SHARE == 160_000
    assert PERCENT == 16_000
    assert percent_to_units(20) == 320_000
    assert mib_to_units(16380, 65520) == 400_000


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("64Gi", 64 * 2**30),
        ("24576Mi", 24 * 2**30),
        ("1k", 1000),
        ("1600k", M),
        ("2M", 2_000_000),
        ("100m", Fraction(1, 10)),
        ("1.5", Fraction(3, 2)),
        ("1e3", 1000),
        ("0", 0),
        (" 8 ", 8),
        (7, 7),
    ],
)
def test_parse_quantity(text: str | int, value: Fraction | int) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "Gi", "1GB", "abc", "1.2.3", "--1", "1 Gi"])
def test_parse_quantity_rejects_garbage_with_a_clear_error(text: str) -> None:
    with pytest.raises(QuantityError, match="is not a quantity"):
        parse_quantity(text)


def test_parse_count_needs_a_whole_number() -> None:
    assert parse_count("2") == 2
    with pytest.raises(QuantityError, match="whole number"):
        parse_count("500m")


@pytest.mark.parametrize(
    ("value", "binary", "text"),
    [
        (M, False, "1600k"),
        (8 * M, False, "12800k"),
        (Fraction(1, 2), False, "500m"),
        (64 * 2**30, True, "64Gi"),
        (0, False, "0"),
        (3, False, "3"),
    ],
)
def test_format_quantity(value: int | Fraction, binary: bool, text: str) -> None:
    assert format_quantity(value, binary=binary) == text
    assert parse_quantity(text) == value


def test_quantity_to_mib() -> None:
    assert quantity_to_mib("24Gi") == 24576
    assert quantity_to_mib("65535Mi") == 65535


@pytest.mark.parametrize(
    ("name", "entrance"),
    [
        ("gpustack--generic-linux-amd64", "3b93966fd73eb9ec"),
        ("gpustack--nvidia-a10g-linux-amd64", "c4680bb149644f1c"),
        ("gpustack--nvidia-tesla-t4-linux-amd64", "6b371caa2da0b799"),
        ("gpustack--nvidia-h100-80gb-hbm3-linux-amd64", "e4768a65ca0ce96b"),
        ("gpustack--amd-epyc-7r13-linux-amd64", "8dde992f64a17a2f"),
        ("gpustack--amd-epyc-7r32-linux-amd64", "d3390f10cd57a632"),
        ("gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64", "029fd9550e0c70bd"),
        ("gpustack--intel-xeon-platinum-8259cl-linux-amd64", "c6aee2b7b5c4dc6b"),
        ("gpustack--intel-xeon-platinum-8259cl--nvidia-tesla-t4-linux-amd64", "5b59e508edc027b7"),
        ("gpustack--nvidia-l40s-linux-amd64", "a730f1dca9e26fca"),
        ("a10g-12c128g", "d4c0e6cd72686015"),
    ],
)
def test_queue_entrance_is_fnv1a64(name: str, entrance: str) -> None:
    assert naming.queue_entrance(name) == "gpustack-fnv64-" + entrance
    assert len(naming.queue_entrance(name)) == 31


def test_manufacturer_table() -> None:
    slots = {m.name: m.slice_slots for m in naming.MANUFACTURERS.values()}
    assert slots["nvidia"] == 128 and slots["ascend"] == 63 and slots["hygon"] == 4
    assert slots["cambricon"] == slots["mthreads"] == slots["metax"] == 16
    assert naming.manufacturer("thead").base == "alibabacloud.com/ppu"
    assert naming.manufacturer("nvidia").credits == "credits.gpustack.ai/nvidia"
    with pytest.raises(KeyError, match="known: amd"):
        naming.manufacturer("acme")


def test_every_resource_name_of_a_family() -> None:
    names = naming.manufacturer("hygon").resources
    assert [names.base, names.shared, names.sliced, names.sliced_units] == [
        "hygon.com/dcu",
        "hygon.com/dcu.shared",
        "hygon.com/dcu.sliced",
        "hygon.com/dcu.sliced.units",
    ]
    assert names.sliced_cores_percentage == "hygon.com/dcu.sliced.cores-percentage"
    assert names.sliced_memory_percentage == "hygon.com/dcu.sliced.memory-percentage"
    assert names.sliced_memory_mib == "hygon.com/dcu.sliced.memory-mib"
    assert names.partitioned == "hygon.com/dcu.partitioned"
    assert names.partitioned_units == "hygon.com/dcu.partitioned.units"
    assert names.partitioned_profile("2g.15gb") == "hygon.com/dcu.partitioned.mig-2g.15gb"
    with pytest.raises(ValueError, match="no hardware partitioning"):
        naming.manufacturer("amd").resources.partitioned_profile("x")


@pytest.mark.parametrize(
    ("name", "kind", "profile"),
    [
        ("nvidia.com/gpu", KeyKind.EXCLUSIVE, None),
        ("nvidia.com/gpu.shared", KeyKind.SHARED, None),
        ("nvidia.com/gpu.sliced.memory-mib", KeyKind.SLICED_MEMORY_MIB, None),
        ("nvidia.com/gpu.partitioned.mig-3g.40gb", KeyKind.PARTITIONED_PROFILE, "3g.40gb"),
        ("alibabacloud.com/ppu.partitioned.mig-4g.48gb", KeyKind.PARTITIONED_PROFILE, "4g.48gb"),
        ("device.gpustack.ai/nvidia.visibility", KeyKind.VISIBILITY, None),
    ],
)
def test_classify_resource(name: str, kind: KeyKind, profile: str | None) -> None:
    key = naming.classify_resource(name)
    assert key is not None and key.kind is kind and key.profile == profile


@pytest.mark.parametrize(
    "name",
    [
        "cpu",
        "memory",
        "device.gpustack.ai/rdma",
        "example.com/gpu",
        "nvidia.com/gpu.sliced.mig-1g.10gb",
        "amd.com/gpu.partitioned.mig-1g",
    ],
)
def test_non_accelerator_keys(name: str) -> None:
    assert naming.classify_resource(name) is None


def test_profile_spelling() -> None:
    assert naming.publish_profile("thead", "4g48gb") == "4g.48gb"
    assert naming.publish_profile("thead", "8g96gb") == "8g.96gb"
    assert naming.vendor_profile("thead", "4g.48gb") == "4g48gb"
    assert naming.publish_profile("nvidia", "3g.40gb") == "3g.40gb"
    assert not naming.profile_is_published("1g.10gb+me")
    assert not naming.profile_is_published("1g.10gb+me.all")
    assert not naming.profile_is_published("1g.10gb+gfx")


def test_node_keys() -> None:
    """A group id is written by GPUStack's device layer (``_`` and ``.`` kept, the manufacturer dropped where it
    leads) and joined to its manufacturer as it stands."""
    assert naming.accelerator_key("nvidia", "a10g") == "nvidia-a10g"
    assert naming.group_id("nvidia", "NVIDIA H100 80GB HBM3") == "h100-80gb-hbm3"
    assert naming.group_id("hygon", "K100_AI") == "k100_ai"
    assert naming.accelerator_key("hygon", naming.group_id("hygon", "K100_AI")) == "hygon-k100_ai"
    assert naming.group_id("nvidia", "Tesla  T4 / PCIe") == "tesla-t4-pcie"
    assert naming.normalize_name("A..B__c--", "") == "a.b_c"
    assert naming.normalize_name("x" * 80, "", 10) == "x" * 10
    assert naming.general_key("AMD", "AMD EPYC 7R32") == "amd-epyc-7r32"
    assert naming.general_key("Intel", "Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz") == "intel-xeon-platinum-8259cl"
    assert naming.general_key("AMD", "AMD EPYC 7R13 48-Core Processor") == "amd-epyc-7r13"
    assert naming.general_key("", "") == "generic"


def test_pool_labels() -> None:
    assert naming.pool_labels(
        acceleratable=True, accelerator_group="nvidia-a10g", general_group="generic", os="linux", arch="amd64"
    ) == {
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "acceleratable.feature.gpustack.ai/nvidia-a10g": "true",
    }
    cpu = naming.pool_labels(
        acceleratable=False, accelerator_group="", general_group="amd-epyc-7r32", os="linux", arch="amd64"
    )
    assert cpu["general.feature.gpustack.ai/amd-epyc-7r32"] == "true"


@pytest.mark.parametrize("text", ["1e10000000", "1e-65", "9" * 65])
def test_quantities_out_of_range_are_refused_quickly(text: str) -> None:
    with pytest.raises(QuantityError, match=r"out of range|at most 64 characters"):
        parse_quantity(text)
