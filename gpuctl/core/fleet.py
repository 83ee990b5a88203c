"""Pools summed across clusters, as the worker gateway sums them: Active pools only, every availability dimension.

A request lands in one cluster, so a view's ``onceMaxRequest`` is the largest of any cluster's; ``remaining`` and
``capacity`` add up, and so do the partition profiles' counts, by profile name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

VIEWS = ("accelerator", "acceleratorShared", "acceleratorSliced", "acceleratorPartitioned", "cpu")
ACTIVE = "Active"


def _profiles(lists: Sequence[Sequence[Mapping[str, Any]]], keep_zeros: bool) -> list[dict[str, Any]]:
    total: dict[str, int] = {}
    for profiles in lists:
        for p in profiles:
            total[p["name"]] = total.get(p["name"], 0) + int(p["count"])
    return [{"name": n, "count": c} for n, c in total.items() if keep_zeros or c > 0]


def sum_views(per_cluster: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[dict[str, Any]]:
    """One item per pool name from ``views -o json`` items per cluster, over its Active members only; each item
    names the clusters it sums."""
    by_name: dict[str, list[tuple[str, Mapping[str, Any]]]] = {}
    for cluster, items in sorted(per_cluster.items()):
        for item in items:
            if item.get("phase") == ACTIVE:
                by_name.setdefault(item["name"], []).append((cluster, item))
    out = []
    for name, members in sorted(by_name.items()):
        first = members[0][1]
        merged: dict[str, Any] = {"name": name, "entrance": first.get("entrance"), "phase": ACTIVE}
        for view in VIEWS:
            parts = [m[view] for _, m in members if isinstance(m.get(view), Mapping)]
            if not parts:
                continue
            merged[view] = {
                "onceMaxRequest": max(p["onceMaxRequest"] for p in parts),
                "remaining": sum(p["remaining"] for p in parts),
                "capacity": sum(p["capacity"] for p in parts),
            }
            if view == "acceleratorPartitioned":
                merged[view]["remainingProfiles"] = _profiles([p.get("remainingProfiles", []) for p in parts], True)
                merged[view]["allocatedProfiles"] = _profiles([p.get("allocatedProfiles", []) for p in parts], False)
        merged["clusters"] = [c for c, _ in members]
        out.append(merged)
    return out


def sum_rows(
    per_cluster: Mapping[str, Sequence[Mapping[str, Any]]],
    key: Sequence[str],
    counts: Sequence[str],
    active: Mapping[str, set[str]] | None = None,
) -> list[dict[str, Any]]:
    """Rows (partitions per profile, fragmentation per shape) summed across clusters by ``key`` fields, adding the
    ``counts`` fields; with ``active`` (cluster → its Active pool names) only rows of Active pools count."""
    merged: dict[tuple[Any, ...], dict[str, Any]] = {}
    for cluster, rows in sorted(per_cluster.items()):
        for row in rows:
            pool = row.get(key[0])
            if active is not None and pool not in active.get(cluster, set()):
                continue
            k = tuple(row.get(f) for f in key)
            if k not in merged:
                merged[k] = {**dict(row), "clusters": []}
                for f in counts:
                    merged[k][f] = 0
            for f in counts:
                merged[k][f] += row.get(f) or 0
            merged[k]["clusters"].append(cluster)
    return [merged[k] for k in sorted(merged, key=lambda k: tuple(str(x) for x in k))]
