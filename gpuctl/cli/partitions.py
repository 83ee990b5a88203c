"""``gpuctl partitions``: per partition profile, what a pool offers, has carved, and can still carve."""

from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpuctl.cli import render
from gpuctl.cli.errors import UsageError, user_errors
from gpuctl.cli.options import (
    ContextOption,
    KubeconfigOption,
    NoHeadersOption,
    OutputOption,
    SelectorOption,
    SnapshotOption,
    TimeoutOption,
    open_source,
)
from gpuctl.cli.render import Column, Output

if TYPE_CHECKING:
    from gpuctl.core.ledger import Card, NodeDevices

POOL_COLUMNS = (
    Column("NAME"),
    Column("PROFILE"),
    Column("MEMORY"),
    Column("OFFERED"),
    Column("ALLOCATED"),
    Column("REMAINING"),
    Column("STATE"),
)
NODE_COLUMNS = (
    Column("NAME"),
    Column("NODE"),
    Column("PROFILE"),
    Column("OFFERED"),
    Column("ALLOCATED"),
    Column("REMAINING"),
)
CARD_COLUMNS = (
    Column("NAME"),
    Column("NODE"),
    Column("CARD"),
    Column("INDEX"),
    Column("MODE"),
    Column("CARVED"),
    Column("REMAINING"),
    Column("PLACEMENTS", wide_only=True),
)


def profile_rows(cards: list[tuple[str, "Card"]], manufacturer: str) -> list[dict[str, Any]]:
    """Per profile across cards: offered (capability ceilings), allocated (ledger) and remaining (ledger)."""
    from gpuctl.core import naming

    table: dict[str, dict[str, Any]] = {}
    for _node, c in cards:
        for p in c.profiles:
            row = table.setdefault(
                p.published,
                {"profile": p.published, "memoryMib": p.memory_mib, "offered": 0, "allocated": 0, "remaining": 0},
            )
            row["offered"] += p.count
            row["remaining"] += c.profile_remaining(p.published)
        for name, n in c.allocated_profiles.items():
            published = naming.publish_profile(manufacturer, name)
            row = table.setdefault(
                published, {"profile": published, "memoryMib": 0, "offered": 0, "allocated": 0, "remaining": 0}
            )
            row["allocated"] += n
    rows = sorted(table.values(), key=lambda r: (r["memoryMib"], r["profile"]))
    for r in rows:
        r["state"] = (
            "not offered" if r["offered"] == 0 else ("offered but full" if r["remaining"] == 0 else "available")
        )
    return rows


def _cards(pool: list["NodeDevices"], key: str) -> list[tuple[str, "Card"]]:
    return [(n.node, c) for n in pool for c in n.cards(key) if c.partitioned]


def _placements(source: Any, pool: list["NodeDevices"]) -> dict[tuple[str, str], list[str]]:
    """Carved placements per (node, card), from the allocation records of the Pods bound to the pool's nodes."""
    from gpuctl.cluster import read

    names = {n.node for n in pool}
    out: dict[tuple[str, str], list[str]] = {}
    for p in read.pods(source):
        if p.node_name not in names or p.finished:
            continue
        for a in p.allocations:
            if a.profile:
                where = ",".join(f"{s}+{length}" for s, length in a.placements) or "?"
                out.setdefault((p.node_name, a.card_id), []).append(f"{a.profile}@{where} ({p.namespace}/{p.name})")
    return out


@user_errors
def partitions_command(
    names: Annotated[
        list[str] | None,
        typer.Argument(help="InstanceType names (all partitioned pools when none given).", show_default=False),
    ] = None,
    output: OutputOption = Output.TABLE,
    no_headers: NoHeadersOption = False,
    selector: SelectorOption = None,
    by_node: Annotated[bool, typer.Option("--by-node", help="Per node.")] = False,
    by_card: Annotated[bool, typer.Option("--by-card", help="Per card, with each card's carved instances.")] = False,
    snapshot: SnapshotOption = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    request_timeout: TimeoutOption = None,
) -> None:
    """Per partition profile: offered (capability), allocated and remaining — "offered but full" stays distinct from
    "not offered"."""
    from gpuctl.cluster import read
    from gpuctl.cluster.bulk import bulk_allocation
    from gpuctl.core.views import pool_devices

    if by_node and by_card:
        raise UsageError("--by-node and --by-card are exclusive: pick one")
    source = open_source(snapshot, kubeconfig, context, request_timeout)
    with bulk_allocation():
        types = [t for t in read.instancetypes(source, names or [], label_selector=selector) if t.acceleratable]
        devices = read.devices(source) if types else []
    data: list[dict[str, Any]] = []
    rows: list[list[str]] = []
    for t in types:
        pool = pool_devices(devices, t)
        mfr = t.manufacturer or t.accelerator_group.split("-", 1)[0]
        cards = _cards(pool, t.accelerator_group)
        if not cards and names is None:
            continue
        if by_card:
            placements = _placements(source, pool)
            entries = []
            for node, c in cards:
                entry: dict[str, Any] = {
                    "node": node,
                    "card": c.id,
                    "index": c.index,
                    "mode": c.mode.name.lower(),
                    "allocatedProfiles": [{"name": n, "count": k} for n, k in c.allocated_profiles.items() if k],
                    "remainingProfiles": [
                        {"name": p.published, "count": c.profile_remaining(p.published)} for p in c.profiles
                    ],
                    "placements": placements.get((node, c.id), []),
                }
                entries.append(entry)
                carved = ",".join(f"{p['name']}:{p['count']}" for p in entry["allocatedProfiles"]) or "-"
                remaining = (
                    ",".join(f"{p['name']}:{p['count']}" for p in entry["remainingProfiles"] if p["count"]) or "full"
                )
                rows.append(
                    [
                        t.name,
                        node,
                        c.id,
                        str(c.index),
                        entry["mode"],
                        carved,
                        remaining,
                        "; ".join(entry["placements"]) or "-",
                    ]
                )
            data.append({"name": t.name, "cards": entries})
        elif by_node:
            per_node: list[dict[str, Any]] = []
            for n in pool:
                for r in profile_rows(_cards([n], t.accelerator_group), mfr):
                    per_node.append({"node": n.node, **r})
                    rows.append(
                        [t.name, n.node, r["profile"], str(r["offered"]), str(r["allocated"]), str(r["remaining"])]
                    )
            data.append({"name": t.name, "nodes": per_node})
        else:
            profiles = profile_rows(cards, mfr)
            offered_names = {p.name for p in t.offered_profiles}
            for p in t.offered_profiles:  # offered by the pool's catalog but on no detected card right now
                if p.name not in {r["profile"] for r in profiles}:
                    profiles.append(
                        {
                            "profile": p.name,
                            "memoryMib": p.memory_mib,
                            "offered": 0,
                            "allocated": 0,
                            "remaining": 0,
                            "state": "offered but full",
                        }
                    )
            for r in profiles:
                if r["offered"] == 0 and r["profile"] in offered_names:
                    r["state"] = "offered but full"
                rows.append(
                    [
                        t.name,
                        r["profile"],
                        f"{r['memoryMib']}Mi" if r["memoryMib"] else "-",
                        str(r["offered"]),
                        str(r["allocated"]),
                        str(r["remaining"]),
                        r["state"],
                    ]
                )
            data.append({"name": t.name, "profiles": profiles})
    if output is Output.JSON:
        render.print_json({"items": data})
    elif output is Output.YAML:
        render.print_yaml({"items": data})
    elif output is Output.NAME:
        render.print_names("instancetype", [d["name"] for d in data])
    else:
        columns = CARD_COLUMNS if by_card else NODE_COLUMNS if by_node else POOL_COLUMNS
        render.print_table(columns, rows, wide=output is Output.WIDE, no_headers=no_headers)
