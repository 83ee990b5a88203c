"""Gate 1: every accepted and rejected example of the seven request rules, with GPUStack's messages, and the
folds."""

from __future__ import annotations

from typing import Any

import pytest

from gpuctl.core import naming
from gpuctl.core.admission import apply_patch, json_patch
from gpuctl.core.instancetypes import parse_instancetype
from gpuctl.core.requests import admit_pod
from testbed.factories import H100_PROFILES, HYGON_BW_PROFILES, container, instancetype, physical_profiles, pod

A10G = parse_instancetype(instancetype())
A10G_QUEUE = naming.queue_entrance("gpustack--nvidia-a10g-linux-amd64")
TYPES = [A10G]


def admit(p: dict[str, Any], types: list[Any] | None = None) -> Any:
    return admit_pod(p, TYPES if types is None else types)


def limits_of(result: Any, index: int = 0, field: str = "containers") -> dict[str, str]:
    limits: dict[str, str] = result.mutated["spec"][field][index]["resources"]["limits"]
    return limits


def sidecar(name: str, limits: dict[str, str]) -> dict[str, Any]:
    return container(name, limits, restartPolicy="Always")


# ----------------------------------------------------------------------------------------------- rule 1


def test_rule1_accepts_two_app_containers_of_one_family() -> None:
    p = pod([container("a", {"nvidia.com/gpu": "1"}), container("b", {"nvidia.com/gpu": "1"})])
    r = admit(p)
    assert r.allowed, r.message
    assert json_patch(p, r.mutated) == []  # whole cards fold nothing


def test_rule1_rejects_two_families() -> None:
    r = admit(
        pod(
            [
                container("a", {"nvidia.com/gpu": "1"}),
                container("b", {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-percentage": "50"}),
            ]
        )
    )
    assert not r.allowed
    assert r.message == "spec: Forbidden: a Pod may request only one accelerator family, found [exclusive sliced]"


def test_rule1_rejects_two_container_groups() -> None:
    r = admit(
        pod(
            [container("main", {"nvidia.com/gpu": "1"})], init_containers=[container("warmup", {"nvidia.com/gpu": "1"})]
        )
    )
    assert not r.allowed
    assert r.message == (
        "spec.initContainers: Forbidden: a Pod's accelerator requests must all sit in one container group; "
        "spec.initContainers must give up its request, because its devices are held for the Pod's whole life while "
        "the scheduler charges the Pod only once"
    )


# ----------------------------------------------------------------------------------------------- rule 2


def test_rule2_accepts_one_slice() -> None:
    r = admit(pod([container("main", {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-percentage": "50"})]))
    assert r.allowed, r.message


def test_rule2_rejects_two_slices() -> None:
    r = admit(pod([container("main", {"nvidia.com/gpu.sliced": "2", "nvidia.com/gpu.sliced.memory-percentage": "50"})]))
    assert not r.allowed
    assert r.message == (
        'spec.containers[0].resources.limits[nvidia.com/gpu.sliced]: Invalid value: "2": a logical slice request is '
        "always a single accelerator; multi-accelerator logical slicing is not supported yet"
    )


def test_rule2_rejects_a_slice_without_memory_budget() -> None:
    r = admit(pod([container("main", {"nvidia.com/gpu.sliced": "1"})]))
    assert not r.allowed
    assert r.message is not None
    assert r.message.endswith(
        "Required value: a nvidia.com/gpu.sliced request must set nvidia.com/gpu.sliced.memory-percentage or "
        "nvidia.com/gpu.sliced.memory-mib"
    )


def test_rule2_rejects_both_memory_budgets() -> None:
    r = admit(
        pod(
            [
                container(
                    "main",
                    {
                        "nvidia.com/gpu.sliced": "1",
                        "nvidia.com/gpu.sliced.memory-percentage": "50",
                        "nvidia.com/gpu.sliced.memory-mib": "1024",
                    },
                )
            ]
        )
    )
    assert not r.allowed
    assert r.message is not None
    assert r.message.endswith(
        "Forbidden: cannot set both nvidia.com/gpu.sliced.memory-percentage and nvidia.com/gpu.sliced.memory-mib"
    )


@pytest.mark.parametrize("percent", ["0", "101", "-5", "12.5"])
def test_rule2_rejects_a_percentage_outside_0_100(percent: str) -> None:
    r = admit(
        pod([container("main", {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-percentage": percent})])
    )
    assert not r.allowed
    assert "nvidia.com/gpu.sliced.memory-percentage]: Invalid value" in (r.message or "")


@pytest.mark.parametrize("mib", ["0", "-1", "24577"])
def test_rule2_rejects_mib_not_positive_or_above_the_card(mib: str) -> None:
    r = admit(pod([container("main", {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-mib": mib})]))
    assert not r.allowed
    assert "nvidia.com/gpu.sliced.memory-mib]: Invalid value" in (r.message or "")


def test_rule2_accepts_mib_equal_to_the_card() -> None:
    r = admit(pod([container("main", {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-mib": "24576"})]))
    assert r.allowed, r.message
    assert limits_of(r)["nvidia.com/gpu.sliced.units"] == "1600000"


def test_rule2_rejects_cores_percentage_outside_0_100() -> None:
    r = admit(
        pod(
            [
                container(
                    "main",
                    {
                        "nvidia.com/gpu.sliced": "1",
                        "nvidia.com/gpu.sliced.memory-percentage": "50",
                        "nvidia.com/gpu.sliced.cores-percentage": "120",
                    },
                )
            ]
        )
    )
    assert not r.allowed
    assert (r.message or "").endswith('Invalid value: "120": must be within (0, 100]')


def test_rule2_rejects_a_sub_key_without_the_token() -> None:
    r = admit(pod([container("main", {"nvidia.com/gpu.sliced.memory-percentage": "50"})]))
    assert not r.allowed
    assert (r.message or "").endswith("a sliced request must set nvidia.com/gpu.sliced")


# ----------------------------------------------------------------------------------------------- rules 3, 4, 5

H100 = parse_instancetype(
    instancetype(group_id="h100-80gb-hbm3", memory="80Gi", logical_count=0, profiles=physical_profiles(H100_PROFILES))
)
H100_QUEUE = naming.queue_entrance("gpustack--nvidia-h100-80gb-hbm3-linux-amd64")


def h100_pod(limits: dict[str, str]) -> dict[str, Any]:
    return pod([container("main", limits)], queue=H100_QUEUE)


def test_rule3_accepts_one_partition() -> None:
    r = admit(h100_pod({"nvidia.com/gpu.partitioned": "1", "nvidia.com/gpu.partitioned.mig-3g.40gb": "1"}), [H100])
    assert r.allowed, r.message


def test_rule3_rejects_two_partitions() -> None:
    r = admit(h100_pod({"nvidia.com/gpu.partitioned": "2", "nvidia.com/gpu.partitioned.mig-1g.10gb": "1"}), [H100])
    assert not r.allowed
    assert r.message == (
        'spec.containers[0].resources.limits[nvidia.com/gpu.partitioned]: Invalid value: "2": a partition request is '
        "always a single accelerator; request one Pod per instance"
    )


def test_rule3_rejects_a_bare_partition_token() -> None:
    r = admit(h100_pod({"nvidia.com/gpu.partitioned": "1"}), [H100])
    assert not r.allowed
    assert (r.message or "").endswith(
        "Required value: a nvidia.com/gpu.partitioned request must name a profile, e.g. "
        "nvidia.com/gpu.partitioned.<kind>-<profile>"
    )


def test_rule4_rejects_two_profiles() -> None:
    r = admit(
        h100_pod(
            {
                "nvidia.com/gpu.partitioned": "1",
                "nvidia.com/gpu.partitioned.mig-1g.10gb": "1",
                "nvidia.com/gpu.partitioned.mig-3g.40gb": "1",
            }
        ),
        [H100],
    )
    assert not r.allowed
    assert r.message == "spec: Forbidden: a Pod may request only one partition profile, found [1g.10gb 3g.40gb]"


def test_rule5_accepts_one_instance_of_a_profile() -> None:
    r = admit(h100_pod({"nvidia.com/gpu.partitioned": "1", "nvidia.com/gpu.partitioned.mig-3g.40gb": "1"}), [H100])
    assert r.allowed


def test_rule5_rejects_two_instances_of_a_profile() -> None:
    r = admit(h100_pod({"nvidia.com/gpu.partitioned": "1", "nvidia.com/gpu.partitioned.mig-3g.40gb": "2"}), [H100])
    assert not r.allowed
    assert r.message == (
        'spec.containers[0].resources.limits[nvidia.com/gpu.partitioned.mig-3g.40gb]: Invalid value: "2": a partition '
        "profile request must be exactly 1 instance"
    )


# ----------------------------------------------------------------------------------------------- rules 6 and 7


def test_rule6_accepts_a_slice_beside_a_visibility_sidecar_container() -> None:
    r = admit(
        pod(
            [
                container("main", {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-percentage": "50"}),
                container("sshd", {"device.gpustack.ai/nvidia.visibility": "1"}),
            ]
        )
    )
    assert r.allowed, r.message


def test_rule6_rejects_two_slicing_containers() -> None:
    slice_limits = {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-percentage": "50"}
    r = admit(pod([container("a", slice_limits), container("b", slice_limits)]))
    assert not r.allowed
    assert r.message == "spec: Forbidden: at most one container may request a slicing family, found 2"


def test_rule7_accepts_a_sidecar_without_accelerator() -> None:
    r = admit(
        pod([container("main", {"nvidia.com/gpu": "1"})], init_containers=[sidecar("log-shipper", {"cpu": "100m"})])
    )
    assert r.allowed, r.message


def test_rule7_rejects_a_sidecar_with_an_accelerator() -> None:
    r = admit(pod([container("main", {"cpu": "1"})], init_containers=[sidecar("log-shipper", {"nvidia.com/gpu": "1"})]))
    assert not r.allowed
    assert r.message == (
        "spec.initContainers[0].resources.limits: Forbidden: a restartable init container (a native sidecar) may not "
        "request an accelerator; move the request to an app container"
    )


def test_several_errors_are_aggregated() -> None:
    slice2 = {"nvidia.com/gpu.sliced": "2", "nvidia.com/gpu.sliced.memory-percentage": "50"}
    r = admit(pod([container("a", slice2), container("b", slice2)]))
    assert not r.allowed
    assert r.message is not None and r.message.startswith("[spec: Forbidden: at most one container")
    assert r.message.count("Invalid value") == 2


# ----------------------------------------------------------------------------------------------- scope and folds


def test_pod_without_queue_label_is_untouched() -> None:
    p = pod([container("main", {"nvidia.com/gpu.sliced": "3"})], queue=None)
    r = admit(p)
    assert r.allowed and json_patch(p, r.mutated) == []


@pytest.mark.parametrize(("percent", "units"), [("20", "320000"), ("50", "800000"), ("100", "1600000"), ("1", "16000")])
def test_memory_percentage_folds_to_units(percent: str, units: str) -> None:
    r = admit(
        pod([container("main", {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-percentage": percent})])
    )
    assert r.allowed
    assert limits_of(r)["nvidia.com/gpu.sliced.units"] == units
    assert limits_of(r)["nvidia.com/gpu.sliced.cores-percentage"] == "100"


def test_memory_mib_folds_over_the_instancetype_card_memory() -> None:
    r = admit(pod([container("main", {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-mib": "6144"})]))
    assert limits_of(r)["nvidia.com/gpu.sliced.units"] == str(6144 * 1_600_000 // 24576)


def test_units_are_always_recomputed_and_cores_kept() -> None:
    r = admit(
        pod(
            [
                container(
                    "main",
                    {
                        "nvidia.com/gpu.sliced": "1",
                        "nvidia.com/gpu.sliced.memory-percentage": "50",
                        "nvidia.com/gpu.sliced.cores-percentage": "40",
                        "nvidia.com/gpu.sliced.units": "1",
                    },
                )
            ]
        )
    )
    assert limits_of(r)["nvidia.com/gpu.sliced.units"] == "800000"
    assert limits_of(r)["nvidia.com/gpu.sliced.cores-percentage"] == "40"


def test_fold_writes_requests_too_when_the_container_declares_them() -> None:
    c = container("main", {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-percentage": "25"})
    c["resources"]["requests"] = dict(c["resources"]["limits"])
    r = admit(pod([c]))
    res = r.mutated["spec"]["containers"][0]["resources"]
    assert res["requests"]["nvidia.com/gpu.sliced.units"] == res["limits"]["nvidia.com/gpu.sliced.units"] == "400000"


CLIENT_UNITS = "77"


def sliced_container(where: str) -> dict[str, Any]:
    """A 50 % slice whose client set ``.sliced.units`` in ``requests``, ``limits`` or both."""
    c = container("main", {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-percentage": "50"})
    if where in ("limits", "both"):
        c["resources"]["limits"]["nvidia.com/gpu.sliced.units"] = CLIENT_UNITS
    if where in ("requests", "both"):
        c["resources"]["requests"] = {"nvidia.com/gpu.sliced.units": CLIENT_UNITS}
    return c


@pytest.mark.parametrize("where", ["requests", "limits", "both"])
def test_a_client_set_sliced_fold_is_replaced_in_every_map_that_requests_the_family(where: str) -> None:
    r = admit(pod([sliced_container(where)]))
    resources = r.mutated["spec"]["containers"][0]["resources"]
    for section in ("limits", "requests"):
        if section in resources:
            assert resources[section]["nvidia.com/gpu.sliced.units"] == "800000", section
    assert all(v != CLIENT_UNITS for m in resources.values() for v in m.values())


@pytest.mark.parametrize("where", ["requests", "limits", "both"])
def test_a_client_set_partition_fold_is_replaced_in_every_map_that_requests_the_family(where: str) -> None:
    c = container("main", {"nvidia.com/gpu.partitioned": "1", "nvidia.com/gpu.partitioned.mig-3g.40gb": "1"})
    if where in ("limits", "both"):
        c["resources"]["limits"]["nvidia.com/gpu.partitioned.units"] = CLIENT_UNITS
    if where in ("requests", "both"):
        c["resources"]["requests"] = {"nvidia.com/gpu.partitioned.units": CLIENT_UNITS}
    r = admit(pod([c], queue=H100_QUEUE), [H100])
    resources = r.mutated["spec"]["containers"][0]["resources"]
    expected = str(40192 * 1_600_000 // 81920)
    assert resources["limits"]["nvidia.com/gpu.partitioned.units"] == expected
    if where != "limits":
        assert resources["requests"]["nvidia.com/gpu.partitioned.units"] == expected


def test_the_divisor_is_spec_memory_before_status_detail() -> None:
    """The documented contract (docs/design.md): the divisor is the InstanceType's ``spec.memory``; ``status.detail.memory`` only without it."""
    raw = instancetype(memory="48Gi")
    raw["spec"]["memory"] = "24Gi"
    r = admit(
        pod([container("main", {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-mib": "12288"})]),
        [parse_instancetype(raw)],
    )
    assert limits_of(r)["nvidia.com/gpu.sliced.units"] == "800000"
    detail_only = admit(
        pod([container("main", {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-mib": "12288"})]),
        [parse_instancetype(instancetype(memory="48Gi"))],
    )
    assert limits_of(detail_only)["nvidia.com/gpu.sliced.units"] == "400000"


def test_card_memory_comes_from_the_spec_when_detail_is_absent() -> None:
    raw = instancetype(memory=None)
    raw["spec"]["memory"] = "24Gi"
    r = admit(
        pod([container("main", {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-mib": "12288"})]),
        [parse_instancetype(raw)],
    )
    assert limits_of(r)["nvidia.com/gpu.sliced.units"] == "800000"


def test_mib_fold_without_instancetype_is_denied_with_the_label() -> None:
    r = admit(
        pod(
            [container("main", {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-mib": "1024"})],
            queue="gpustack-fnv64-0000000000000000",
        )
    )
    assert not r.allowed
    assert "no InstanceType carries schedule.gpustack.ai/queue-entrance=gpustack-fnv64-0000000000000000" in (
        r.message or ""
    )


def test_two_instancetypes_behind_one_queue_are_denied() -> None:
    twin = instancetype(name="twin")
    twin["metadata"]["labels"][naming.LABEL_QUEUE_ENTRANCE] = A10G_QUEUE
    r = admit(
        pod([container("main", {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-mib": "1024"})]),
        [A10G, parse_instancetype(twin)],
    )
    assert not r.allowed and "2 InstanceTypes carry" in (r.message or "")


def test_the_divisor_never_comes_from_the_local_queue_name() -> None:
    # The entrance label decides; an InstanceType named like the queue but without the label is not used.
    raw = instancetype(name=A10G_QUEUE)
    raw["metadata"]["labels"].pop(naming.LABEL_QUEUE_ENTRANCE)
    r = admit(
        pod([container("main", {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-mib": "1024"})]),
        [parse_instancetype(raw)],
    )
    assert not r.allowed


def test_partition_folds_like_a_same_vram_slice() -> None:
    r = admit(h100_pod({"nvidia.com/gpu.partitioned": "1", "nvidia.com/gpu.partitioned.mig-3g.40gb": "1"}), [H100])
    units = int(limits_of(r)["nvidia.com/gpu.partitioned.units"])
    same_vram_slice = admit(
        pod(
            [container("main", {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-mib": "40192"})],
            queue=H100_QUEUE,
        ),
        [H100],
    )
    assert units == int(limits_of(same_vram_slice)["nvidia.com/gpu.sliced.units"]) == 40192 * 1_600_000 // 81920


@pytest.mark.parametrize(("profile", "units"), [("2g.15gb", 400_000), ("4g.31gb", 800_000), ("8g.63gb", 1_600_000)])
def test_hygon_partition_folds(profile: str, units: int) -> None:
    hygon = parse_instancetype(
        instancetype(
            manufacturer="hygon",
            group_id="bw",
            memory="65520Mi",
            logical_count=0,
            profiles=physical_profiles(HYGON_BW_PROFILES),
        )
    )
    p = pod(
        [container("main", {"hygon.com/dcu.partitioned": "1", f"hygon.com/dcu.partitioned.mig-{profile}": "1"})],
        queue=naming.queue_entrance(hygon.name),
    )
    r = admit(p, [hygon])
    assert r.allowed, r.message
    assert limits_of(r)["hygon.com/dcu.partitioned.units"] == str(units)


def test_unoffered_profile_names_the_offered_set() -> None:
    r = admit(h100_pod({"nvidia.com/gpu.partitioned": "1", "nvidia.com/gpu.partitioned.mig-9g.90gb": "1"}), [H100])
    assert not r.allowed
    assert "offered: 1g.10gb, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb" in (r.message or "")


def test_partitioning_on_a_manufacturer_without_it_is_forbidden() -> None:
    r = admit(pod([container("main", {"amd.com/gpu.partitioned": "1"})]))
    assert not r.allowed and "amd.com/gpu has no hardware partitioning" in (r.message or "")


def test_shared_request_of_two_is_pinned_to_nodes_with_two_cards() -> None:
    r = admit(pod([container("main", {"nvidia.com/gpu.shared": "2"})]))
    assert r.allowed
    terms = r.mutated["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert terms == [
        {
            "matchExpressions": [
                {"key": "acceleratable.feature.gpustack.ai/nvidia-a10g.count", "operator": "Gt", "values": ["1"]}
            ]
        }
    ]


def test_shared_pin_is_anded_into_every_term_and_not_duplicated() -> None:
    p = pod([container("main", {"nvidia.com/gpu.shared": "3"})])
    p["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]},
                ]
            }
        }
    }
    once = admit(p)
    twice = admit(once.mutated)
    assert json_patch(once.mutated, twice.mutated) == []
    for term in once.mutated["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]:
        assert term["matchExpressions"][-1] == {
            "key": "acceleratable.feature.gpustack.ai/nvidia-a10g.count",
            "operator": "Gt",
            "values": ["2"],
        }


def test_shared_request_of_one_is_not_pinned() -> None:
    p = pod([container("main", {"nvidia.com/gpu.shared": "1"})])
    r = admit(p)
    assert json_patch(p, r.mutated) == []


def test_patch_applied_to_the_original_gives_the_mutated_pod() -> None:
    p = pod([container("main", {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-percentage": "30"})])
    r = admit(p)
    ops = json_patch(p, r.mutated)
    assert {op["path"] for op in ops} == {
        "/spec/containers/0/resources/limits/nvidia.com~1gpu.sliced.units",
        "/spec/containers/0/resources/limits/nvidia.com~1gpu.sliced.cores-percentage",
    }
    assert apply_patch(p, ops) == r.mutated


@pytest.mark.parametrize(
    "garbage", [None, 5, "pod", [], {"spec": 3, "metadata": {"labels": {naming.LABEL_QUEUE_NAME: "q"}}}]
)
def test_malformed_objects_are_answered_not_raised(garbage: Any) -> None:
    r = admit(garbage)
    assert r.allowed in (True, False)
    if not r.allowed:
        assert r.message


def test_a_partition_on_a_pool_without_profiles_says_whether_retrying_helps() -> None:
    """Three pools publish no partition profiles, for three reasons: the A10G's detail is published and its model has
    no profile table (retrying changes nothing), the H100's cards are all whole (switched, they would offer them), and
    a pool whose detail is not published yet (retry)."""
    partition = {"nvidia.com/gpu.partitioned": "1", "nvidia.com/gpu.partitioned.mig-3g.40gb": "1"}
    a10g = admit(pod([container("main", partition)], queue=A10G_QUEUE))
    assert not a10g.allowed
    assert "although its detail is published: its cards" in a10g.message and "retry" not in a10g.message
    whole = parse_instancetype(instancetype(group_id="h100-80gb-hbm3", memory="80Gi", logical_count=0))
    h100 = admit(h100_pod(partition), [whole])
    assert not h100.allowed and "none of its cards is in partition mode" in h100.message
    assert "gpuctl plan partitions gpustack--nvidia-h100-80gb-hbm3-linux-amd64" in h100.message
    raw = instancetype(group_id="h100-80gb-hbm3", memory="80Gi", logical_count=0)
    raw["status"].pop("detail", None)
    early = admit(h100_pod(partition), [parse_instancetype(raw)])
    assert not early.allowed and early.message.endswith("retry once its detail is ready")
