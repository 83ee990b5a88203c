"""Pools summed across clusters as the gateway sums them: Active members only; a request lands in one cluster."""

from __future__ import annotations

from typing import Any

from gpuctl.core.fleet import sum_rows, sum_views


def item(phase: str, ex: tuple[int, int, int], profiles: dict[str, int]) -> dict[str, Any]:
    view = lambda o, r, c: {"onceMaxRequest": o, "remaining": r, "capacity": c}  # noqa: E731
    return {
        "name": "pool",
        "entrance": "gpustack-fnv64-0",
        "phase": phase,
        "accelerator": view(*ex),
        "acceleratorShared": view(0, 0, 0),
        "acceleratorSliced": view(0, 0, 0),
        "acceleratorPartitioned": {
            **view(1, sum(profiles.values()), 14),
            "remainingProfiles": [{"name": n, "count": c} for n, c in profiles.items()],
            "allocatedProfiles": [],
        },
        "cpu": view(8, 16, 32),
    }


def test_views_add_up_over_active_members_and_the_largest_single_request_wins() -> None:
    merged = sum_views(
        {
            "east": [item("Active", (4, 6, 8), {"1g.10gb": 3, "7g.80gb": 0})],
            "west": [item("Active", (2, 5, 16), {"1g.10gb": 4, "7g.80gb": 1})],
            "north": [item("Inactive", (8, 8, 8), {"1g.10gb": 7, "7g.80gb": 1})],
        }
    )
    [pool] = merged
    assert pool["clusters"] == ["east", "west"]  # north's pool is not Active: it counts nowhere
    assert pool["accelerator"] == {"onceMaxRequest": 4, "remaining": 11, "capacity": 24}
    assert pool["acceleratorPartitioned"]["remainingProfiles"] == [
        {"name": "1g.10gb", "count": 7},
        {"name": "7g.80gb", "count": 1},
    ]
    assert pool["cpu"]["remaining"] == 32


def test_rows_sum_by_key_over_active_pools() -> None:
    rows = sum_rows(
        {
            "a": [{"instanceType": "p", "profile": "3g", "offered": 2, "allocated": 1, "remaining": 1}],
            "b": [
                {"instanceType": "p", "profile": "3g", "offered": 2, "allocated": 0, "remaining": 2},
                {"instanceType": "q", "profile": "3g", "offered": 9, "allocated": 0, "remaining": 9},
            ],
        },
        ("instanceType", "profile"),
        ("offered", "allocated", "remaining"),
        {"a": {"p"}, "b": {"p"}},
    )
    assert rows == [
        {"instanceType": "p", "profile": "3g", "offered": 4, "allocated": 1, "remaining": 3, "clusters": ["a", "b"]}
    ]
