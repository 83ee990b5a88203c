"""The Devices ledger as records, and the four views computed from it."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from gpuctl.core.instancetypes import parse_instancetype
from gpuctl.core.ledger import Capability, LedgerError, Mode, parse_devices
from gpuctl.core.units import SHARE, M
from gpuctl.core.views import View, accelerator_views, instancetype_views, pool_devices, views_to_status
from gpuctl.core.workloads import ClusterQueue, parse_cluster_queue
from testbed.factories import H100_PROFILES, card_row, devices, h100_devices, instancetype, physical_profiles

A10G = "nvidia-a10g"
H100 = "nvidia-h100-80gb-hbm3"


def a10g_mixed() -> dict[str, object]:
    """card 0 free, card 1 one 50 % slice, card 2 two shares taken, card 3 exclusive."""
    return devices(
        "node-a",
        rows=[
            card_row(0),
            card_row(1, mode=3, allocated=M // 2, slices=1),
            card_row(2, mode=2, allocated=2 * SHARE),
            card_row(3, mode=1, allocated=M),
        ],
    )


# ----------------------------------------------------------------------------------------------- ledger


def test_cards_join_capability_and_ledger() -> None:
    node = parse_devices(a10g_mixed())
    cards = node.cards(A10G)
    assert [c.mode for c in cards] == [Mode.NONE, Mode.SLICED, Mode.SHARED, Mode.EXCLUSIVE]
    assert cards[0].free and not cards[1].free
    assert cards[1].free_slots == 127 and cards[1].free_slice_percent == 50
    assert cards[2].free_shares == 8
    assert cards[3].free_shares == 0 and cards[3].free_slice_units == 0
    assert node.group(A10G) is not None and node.group(A10G).memory_mib == 24576  # type: ignore[union-attr]


def test_a_card_without_ledger_row_is_free_not_dropped() -> None:
    node = parse_devices(devices("n", cards=2, rows=[card_row(0, mode=1, allocated=M)]))
    cards = node.cards(A10G)
    assert len(cards) == 2
    assert not cards[0].free and cards[1].free and not cards[1].has_ledger


def test_an_empty_ledger_row_is_free_not_full() -> None:
    node = parse_devices(devices("n", cards=1, rows=[{"id": "GPU-0000", "index": 0}]))
    card = node.cards(A10G)[0]
    assert card.has_ledger and card.free and card.remaining == M


def test_a_partitioned_card_with_empty_ledger_falls_back_to_catalog_ceilings() -> None:
    node = parse_devices(h100_devices("h", cards=1, rows=[]))
    card = node.cards(H100)[0]
    assert card.partitioned and not card.sliceable
    assert card.profile_remaining("1g.10gb") == 7 and card.profile_remaining("3g.40gb") == 2
    assert card.partition_free == 7


def test_family_comes_from_capability_never_the_scalar_ledger() -> None:
    # A partitioned card whose ledger says mode 0 with every unit free is still no whole card.
    node = parse_devices(h100_devices("h", cards=2, rows=[card_row(0), card_row(1)]))
    ex, sh, sl, pt = accelerator_views([node], H100)
    assert (ex, sh, sl) == (View(0, 0, 0), View(0, 0, 0), View(0, 0, 0))
    assert pt.capacity == 14 and pt.remaining == 14


def test_a_card_in_an_unknown_mode_is_named_and_the_rest_of_the_ledger_stands() -> None:
    odd = devices("n", cards=2, rows=[card_row(0), card_row(1)])
    odd["status"]["groups"][0]["accelerators"][0]["mode"] = 9  # type: ignore[index]
    odd["status"]["groups"][0]["accelerators"][0]["remaining"] = 0  # type: ignore[index]
    node = parse_devices(odd)
    first, second = node.cards(A10G)
    assert first.mode is Mode.UNKNOWN and first.raw_mode == 9
    assert second.mode is Mode.NONE and second.free
    assert node.unreadable() == (
        "Devices n: card GPU-0000 (nvidia-a10g index 0): allocation mode 9 is not one gpuctl knows (0 to 5); "
        "read as GPUStack's check reads it (whole while it leaves every unit; never shared, sliced or partitioned)",
    )
    assert node.unreadable(A10G) == node.unreadable() and node.unreadable("nvidia-h100") == ()
    ex = accelerator_views([node], A10G)[0]
    assert (ex.remaining, ex.capacity) == (1, 2)  # held, as GPUStack's status writer counts a card it cannot read


def test_a_mode_0_row_that_leaves_less_than_a_card_is_read_as_written() -> None:
    row = card_row(0)
    row["remaining"] = M // 2
    node = parse_devices(devices("n", cards=1, rows=[row]))
    [card] = node.cards(A10G)
    assert (card.mode, card.remaining) == (Mode.NONE, M // 2)
    ex, sh, sl, _ = accelerator_views([node], A10G)
    # The status writer counts such a card in no view but capacity (it is neither free, nor shared, nor sliced).
    assert (ex, sh, sl) == (View(0, 0, 1), View(0, 0, 10), View(0, 0, 100))
    empty = parse_devices(devices("n", cards=1, rows=[{"id": "GPU-0000", "index": 0, "mode": 0}]))
    assert empty.cards(A10G)[0].free  # an empty row is a free card, never a full one


def test_malformed_ledger_names_the_field() -> None:
    bad2 = devices("n")
    bad2["spec"]["groups"] = "oops"  # type: ignore[index]
    with pytest.raises(LedgerError, match=r"spec\.groups: expected a list"):
        parse_devices(bad2)


# ----------------------------------------------------------------------------------------------- views


def test_views_of_a_mixed_node() -> None:
    ex, sh, sl, pt = accelerator_views([parse_devices(a10g_mixed())], A10G)
    assert ex == View(1, 1, 4)
    assert sh == View(2, 18, 40)  # card 0: 10 shares, card 2: 8; two cards with a free share on one node
    assert sl == View(100, 150, 400)  # card 0: 100 %, card 1: 50 %
    assert (pt.once_max_request, pt.remaining, pt.capacity) == (0, 0, 0)


def test_ex_and_sh_once_max_are_per_node_sl_per_card() -> None:
    n1 = parse_devices(devices("n1", cards=2, rows=[card_row(0), card_row(1)]))
    n2 = parse_devices(
        devices(
            "n2",
            cards=4,
            rows=[
                card_row(0),
                card_row(1),
                card_row(2, mode=3, allocated=M // 4, slices=1),
                card_row(3, mode=1, allocated=M),
            ],
        )
    )
    ex, sh, sl, _ = accelerator_views([n1, n2], A10G)
    assert ex == View(2, 4, 6)
    assert sh == View(2, 40, 60)  # a sliced card grants no share
    assert sl == View(100, 475, 600)


def test_partition_only_pool_reads_zero_for_ex_sh_sl() -> None:
    it = parse_instancetype(
        instancetype(
            group_id="h100-80gb-hbm3", memory="80Gi", logical_count=0, profiles=physical_profiles(H100_PROFILES)
        )
    )
    v = instancetype_views(it, [parse_devices(h100_devices("h1"))])
    assert " ".join(x.cell() for x in (v.accelerator, v.shared, v.sliced)) == "0/0 0/0 0/0"
    assert v.partitioned.cell() == "1/56" and v.partitioned.capacity == 56


def test_logical_only_pool_reads_zero_for_pt() -> None:
    it = parse_instancetype(instancetype())
    v = instancetype_views(it, [parse_devices(a10g_mixed())])
    assert v.partitioned.cell() == "0/0"
    assert v.partitioned.remaining_profiles == () and v.partitioned.allocated_profiles == ()


def test_remaining_profiles_keep_a_filled_profile_at_zero() -> None:
    # Card 0 carved two 3g.40gb instances: nothing else fits it. Card 1 is free.
    full = {"1g.10gb": 0, "1g.20gb": 0, "2g.20gb": 0, "3g.40gb": 0, "4g.40gb": 0, "7g.80gb": 0}
    node = parse_devices(
        h100_devices(
            "h1",
            cards=1,
            rows=[
                card_row(
                    0,
                    mode=4,
                    allocated=2 * (40192 * M // 81920),
                    allocated_profiles={"3g.40gb": 2},
                    remaining_profiles=full,
                )
            ],
        )
    )
    _, _, _, pt = accelerator_views([node], H100)
    assert pt.cell() == "0/0"
    assert [(p.name, p.count) for p in pt.remaining_profiles] == [
        ("1g.10gb", 0),
        ("1g.20gb", 0),
        ("2g.20gb", 0),
        ("3g.40gb", 0),
        ("4g.40gb", 0),
        ("7g.80gb", 0),
    ]
    assert [(p.name, p.count) for p in pt.allocated_profiles] == [("3g.40gb", 2)]


def test_pt_remaining_sums_each_cards_largest_free_count() -> None:
    one_3g = {"1g.10gb": 3, "1g.20gb": 2, "2g.20gb": 1, "3g.40gb": 1, "4g.40gb": 0, "7g.80gb": 0}
    node = parse_devices(
        h100_devices(
            "h1",
            cards=2,
            rows=[
                card_row(0, mode=4, allocated=M // 2, allocated_profiles={"3g.40gb": 1}, remaining_profiles=one_3g),
                card_row(1),
            ],
        )
    )
    _, _, _, pt = accelerator_views([node], H100)
    assert pt.remaining == 3 + 7
    assert pt.once_max_request == 1
    counts = {p.name: p.count for p in pt.remaining_profiles}
    assert counts["3g.40gb"] == 1 + 2 and counts["7g.80gb"] == 0 + 1
    assert {p.name: p.count for p in pt.allocated_profiles} == {"3g.40gb": 1}


def test_hygon_slot_full_card_offers_no_slice() -> None:
    rows = [card_row(0, mode=3, allocated=M * 4 // 5, slices=4)]
    node = parse_devices(devices("hy", manufacturer="hygon", group_id="z100", cards=1, memory_mib=32768, rows=rows))
    _, _, sl, _ = accelerator_views([node], "hygon-z100")
    assert sl == View(0, 0, 100)


def test_pool_membership_needs_managed_and_every_pool_label() -> None:
    it = parse_instancetype(instancetype())
    member = parse_devices(devices("a"))
    unmanaged = parse_devices(devices("b", managed=False))
    other_arch = parse_devices(devices("c", arch="arm64"))
    other_model = parse_devices(devices("d", group_id="tesla-t4"))
    assert [d.node for d in pool_devices([other_model, unmanaged, other_arch, member], it)] == ["a"]


def test_pool_counts_only_its_own_model_on_a_mixed_node() -> None:
    it = parse_instancetype(instancetype())
    raw = devices("mixed", cards=2)
    t4 = devices("mixed", group_id="tesla-t4", cards=4)
    raw["spec"]["groups"].append(t4["spec"]["groups"][0])  # type: ignore[index]
    v = instancetype_views(it, [parse_devices(raw)])
    assert v.accelerator.capacity == 2


def test_status_shape() -> None:
    it = parse_instancetype(instancetype())
    status = views_to_status(instancetype_views(it, [parse_devices(a10g_mixed())]))
    assert status["accelerator"] == {"onceMaxRequest": 1, "remaining": 1, "capacity": 4}
    assert status["acceleratorPartitioned"] == {
        "onceMaxRequest": 0,
        "remaining": 0,
        "capacity": 0,
        "remainingProfiles": [],
        "allocatedProfiles": [],
    }
    assert status["cpu"] == {"onceMaxRequest": 0, "remaining": 0, "capacity": 0}


def _cpu_queue(reserved: str, *, flavors: dict[str, int], policy: str = "None") -> ClusterQueue:
    return parse_cluster_queue(
        {
            "metadata": {"name": "gpustack--generic-linux-amd64"},
            "spec": {
                "stopPolicy": policy,
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu"],
                        "flavors": [
                            {"name": f, "resources": [{"name": "cpu", "nominalQuota": str(n)}]}
                            for f, n in flavors.items()
                        ],
                    }
                ],
            },
            "status": {
                "flavorsReservation": [{"name": f, "resources": [{"name": "cpu", "total": reserved}]} for f in flavors][
                    :1
                ]
            },
        }
    )


def test_cpu_pool_view_is_read_from_its_queue_as_gpustack_writes_it() -> None:
    """Capacity the flavors' nominal cores; remaining that less the reservation, scaled back from the scheduler's
    800m per core while general overcommit is on; once-max the largest node's cores (from the flavor names) within
    what remains."""
    it = parse_instancetype(instancetype(acceleratable=False))
    flavors = {"gpustack--amd-epyc-7r32-linux-amd64-16c": 48, "gpustack--amd-epyc-7r32-linux-amd64-32c": 32}
    v = instancetype_views(it, [], _cpu_queue("3200m", flavors=flavors))
    assert v.cpu == View(32, 76, 80)  # 3200m is 4 cores of limits
    assert instancetype_views(it, [], _cpu_queue("3200m", flavors=flavors), overcommit=False).cpu == View(32, 76, 80)
    assert instancetype_views(it, [], _cpu_queue("78", flavors=flavors), overcommit=False).cpu == View(2, 2, 80)
    assert v.accelerator == View(0, 0, 0)
    assert instancetype_views(it, [], None).cpu == View(0, 0, 0)


def test_a_draining_pool_publishes_zero_views() -> None:
    it = parse_instancetype(instancetype(acceleratable=False))
    queue = _cpu_queue("0", flavors={"gpustack--generic-linux-amd64-16c": 16}, policy="HoldAndDrain")
    assert instancetype_views(it, [], queue).cpu == View(0, 0, 0)
    a10g = parse_instancetype(instancetype())
    held = dataclasses.replace(queue, name=a10g.name)
    assert views_to_status(instancetype_views(a10g, [parse_devices(devices("n", cards=4))], held))["accelerator"] == {
        "onceMaxRequest": 0,
        "remaining": 0,
        "capacity": 0,
    }


def test_identical_cards_of_a_whole_read_share_one_capability() -> None:
    shared: dict[Any, Capability] = {}
    a, b = (parse_devices(devices(n, cards=4), shared) for n in ("a", "b"))
    capabilities = {id(c.capability) for d in (a, b) for c in d.groups[0].cards}
    assert len(capabilities) == 1
    # Shared or not, the records are the same.
    assert (a, b) == (parse_devices(devices("a", cards=4)), parse_devices(devices("b", cards=4)))


def test_a_shared_capability_is_never_lent_to_another_manufacturer() -> None:
    """The same raw profiles publish under each manufacturer's own spelling (T-Head's ``4g48gb`` is ``4g.48gb``)."""
    profiles = [{"name": "4g48gb", "memoryMib": 49152, "computeSlices": 4, "memorySlices": 4, "count": 2}]
    shared: dict[Any, Capability] = {}
    thead = parse_devices(devices("t", manufacturer="thead", group_id="ppu", profiles=profiles), shared)
    nvidia = parse_devices(devices("n", manufacturer="nvidia", group_id="h100", profiles=profiles), shared)
    assert [p.published for p in thead.groups[0].cards[0].profiles] == ["4g.48gb"]
    assert [p.published for p in nvidia.groups[0].cards[0].profiles] == ["4g48gb"]
