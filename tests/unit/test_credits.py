"""Gate 2: Kueue's transformation into credits, PodSet credits, nominal quota and the quota check."""

from __future__ import annotations

from fractions import Fraction

from gpuctl.core.credits import (
    check_quota,
    nominal_quota,
    pod_credits,
    pod_requests,
    podset_credits,
    quota_from_cluster_queue,
    usage_from_cluster_queue,
    workload_credits,
)
from gpuctl.core.units import M
from testbed.factories import container


def spec(*containers: dict[str, object], init: list[dict[str, object]] | None = None) -> dict[str, object]:
    s: dict[str, object] = {"containers": list(containers)}
    if init:
        s["initContainers"] = init
    return s


def test_a_whole_card_is_m_credits() -> None:
    assert pod_credits(spec(container("a", {"nvidia.com/gpu": "2"}))) == {"credits.gpustack.ai/nvidia": 2 * M}


def test_a_share_token_is_a_tenth() -> None:
    assert pod_credits(spec(container("a", {"nvidia.com/gpu.shared": "3"}))) == {"credits.gpustack.ai/nvidia": 480_000}


def test_sliced_units_multiply_by_the_slice_token() -> None:
    c = container(
        "a",
        {
            "nvidia.com/gpu.sliced": "1",
            "nvidia.com/gpu.sliced.units": "800000",
            "nvidia.com/gpu.sliced.memory-percentage": "50",
        },
    )
    assert pod_credits(spec(c)) == {"credits.gpustack.ai/nvidia": 800_000}


def test_partitioned_units_count_only_where_partitioning_exists() -> None:
    c = container(
        "a",
        {
            "nvidia.com/gpu.partitioned": "1",
            "nvidia.com/gpu.partitioned.units": "785000",
            "nvidia.com/gpu.partitioned.mig-3g.40gb": "1",
        },
    )
    assert pod_credits(spec(c)) == {"credits.gpustack.ai/nvidia": 785_000}
    amd = container("a", {"amd.com/gpu.partitioned": "1", "amd.com/gpu.partitioned.units": "5"})
    assert pod_credits(spec(amd)) == {}


def test_cpu_and_memory_are_not_transformed() -> None:
    assert pod_credits(spec(container("a", {"cpu": "4", "memory": "8Gi"}))) == {}


def test_pod_requests_take_the_larger_of_running_and_init() -> None:
    s = spec(
        container("main", {"cpu": "1"}),
        container("side", {"cpu": "1"}),
        init=[container("warm", {"cpu": "3"}), container("log", {"cpu": "500m"}, restartPolicy="Always")],
    )
    # running: 1 + 1 + 0.5 (sidecar) = 2.5; init peak: 3 (the sidecar starts after it)
    assert pod_requests(s)["cpu"] == Fraction(3)
    s2 = spec(
        container("main", {"cpu": "1"}),
        init=[container("log", {"cpu": "500m"}, restartPolicy="Always"), container("warm", {"cpu": "3"})],
    )
    # the sidecar runs beside the init container that follows it: 3.5
    assert pod_requests(s2)["cpu"] == Fraction(7, 2)


def test_requests_win_over_limits() -> None:
    c = container("a", {"nvidia.com/gpu": "2"})
    c["resources"]["requests"] = {"nvidia.com/gpu": "1"}
    assert pod_credits(spec(c)) == {"credits.gpustack.ai/nvidia": M}


def test_podset_credits_scale_by_count() -> None:
    ps = {"name": "main", "count": 3, "template": {"spec": spec(container("a", {"nvidia.com/gpu": "1"}))}}
    assert podset_credits(ps) == {"credits.gpustack.ai/nvidia": 3 * M}
    assert workload_credits([ps, ps]) == {"credits.gpustack.ai/nvidia": 6 * M}


def test_nominal_quota_from_flavor_capacity() -> None:
    assert nominal_quota(1, 1) == 1_600_000
    assert nominal_quota(1, 8) == 12_800_000


def test_quota_check_reports_shortfall_in_credits_and_cards() -> None:
    cq_spec = [
        {
            "coveredResources": ["credits.gpustack.ai/nvidia"],
            "flavors": [{"name": "f", "resources": [{"name": "credits.gpustack.ai/nvidia", "nominalQuota": "12800k"}]}],
        }
    ]
    cq_status = {
        "flavorsReservation": [{"name": "f", "resources": [{"name": "credits.gpustack.ai/nvidia", "total": "9600k"}]}]
    }
    nominal = quota_from_cluster_queue(cq_spec)
    used = usage_from_cluster_queue(cq_status)
    [check] = check_quota({"credits.gpustack.ai/nvidia": 5 * M}, nominal, used)
    assert not check.fits
    assert check.available == 2 * M and check.shortfall == 3 * M and check.shortfall_cards == 3
    assert "short by 4800000 credits (3 cards)" in check.summary()
    [ok] = check_quota({"credits.gpustack.ai/nvidia": M}, nominal, used)
    assert ok.fits and ok.shortfall == 0


def test_a_pod_shapes_requests_are_computed_once_and_handed_out_as_copies() -> None:
    from gpuctl.core import credits
    from gpuctl.core.credits import _pod_requests, pod_requests, resources_key

    spec = {
        "initContainers": [
            {"name": "side", "restartPolicy": "Always", "resources": {"requests": {"cpu": "1"}}},
            {"name": "init", "resources": {"limits": {"cpu": "4", "memory": "1Gi"}}},
        ],
        "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": 2, "cpu": "2"}}}],
    }
    first = pod_requests(spec)
    assert first == _pod_requests(spec) and resources_key(spec) in credits._POD_REQUESTS
    first["cpu"] = Fraction(99)  # a caller's copy
    assert pod_requests(spec) == _pod_requests(spec)
    # What the requests do not depend on (names, images) shares a shape; what they do depend on does not.
    renamed = {**spec, "containers": [{**spec["containers"][0], "name": "other", "image": "x"}]}
    assert resources_key(renamed) == resources_key(spec)
    not_a_sidecar = {
        **spec,
        "initContainers": [{**spec["initContainers"][0], "restartPolicy": "Never"}, spec["initContainers"][1]],
    }
    assert resources_key(not_a_sidecar) != resources_key(spec)
    assert pod_requests(not_a_sidecar) == _pod_requests(not_a_sidecar) != pod_requests(spec)
    as_text = {**spec, "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "2", "cpu": "2"}}}]}
    assert resources_key(as_text) != resources_key(spec) and pod_requests(as_text) == pod_requests(spec)


def test_anything_but_plain_data_is_read_uncached() -> None:
    from gpuctl.core import credits
    from gpuctl.core.credits import _pod_requests, pod_requests, resources_key

    for odd in (
        {"containers": [{"resources": {"limits": {"cpu": 1.5}}}]},
        {"containers": [{"resources": {"limits": {"cpu": True}}}]},
        {"containers": [{"resources": {"limits": ["cpu"]}}]},
        {"containers": [("not", "a", "map")]},
        # Outsized shapes are not kept: a memo's key lives as long as the process.
        {"containers": [{"resources": {"limits": {"cpu": "1"}}}] * (credits.MEMO_CONTAINERS + 1)},
        {
            "containers": [
                {"resources": {"limits": {f"example.com/r{i}": "1" for i in range(credits.MEMO_CONTAINERS + 1)}}}
            ]
        },
    ):
        assert resources_key(odd) is None
        assert pod_requests(odd) == _pod_requests(odd)
