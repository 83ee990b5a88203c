"""``gpuctl partitions``: per partition profile, what a pool offers, has carved, and can still carve."""

from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpuctl.cli import refs, render
from gpuctl.cli.errors import UsageError
from gpuctl.cli.names import complete_instancetypes
from gpuctl.cli.registry import OutputFlags, SourceFlags, command
from gpuctl.cli.render import Column, OutputSpec
from gpuctl.cli.source import SourceSpec
from gpuctl.cluster import kinds

if TYPE_CHECKING:
    from gpuctl.core.instancetypes import InstanceType
    from gpuctl.core.ledger import Card, NodeDevices
    from gpuctl.core.workloads import ClusterQueue

POOL_COLUMNS = (
    Column("NAME"),
    Column("PROFILE"),
    Column("MEMORY"),
    Column("OFFERED"),
    Column("ALLOCATED"),
    Column("REMAINING"),
    Column("STATE"),
)
PUBLISHED_COLUMN = Column("PUBLISHED")
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


@command(
    "partitions",
    summary="Show offered, carved and free partitions per profile.",
    examples="""
  # Per profile: offered, allocated, remaining
  gpuctl partitions
  # Per card, with each carved instance's placement
  gpuctl partitions gpustack--nvidia-h100-80gb-hbm3-linux-amd64 --by-card""",
    listed=20,
    source=SourceFlags(selectors=True, fleet=True),
    output=OutputFlags(),
)
def partitions_command(
    names: Annotated[
        list[str] | None,
        typer.Argument(
            help="InstanceType names (all partitioned pools when none given).",
            show_default=False,
            autocompletion=complete_instancetypes,
        ),
    ] = None,
    by_node: Annotated[bool, typer.Option("--by-node", help="Per node.")] = False,
    by_card: Annotated[bool, typer.Option("--by-card", help="Per card, with each card's carved instances.")] = False,
    published: Annotated[
        bool, typer.Option("--published", help="Compare each profile with what its InstanceType's status publishes.")
    ] = False,
    *,
    source: SourceSpec,
    output: OutputSpec,
) -> None:
    """Per partition profile: offered (capability), allocated and remaining — "offered but full" stays distinct from
    "not offered". Where what the cards can carve differs from what the pool's InstanceType publishes, both are shown
    and why (the PUBLISHED column, ``published`` and ``difference``), asked for or not."""
    if by_node and by_card:
        raise UsageError("--by-node and --by-card are exclusive: pick one")
    if published and (by_node or by_card):
        raise UsageError("--published compares a pool's profiles: drop --by-node and --by-card")
    if source.fleet:
        if by_node or by_card:
            raise UsageError("--by-node and --by-card read one cluster: give one --context")
        _fleet(source, refs.object_names(names or [], kinds.INSTANCETYPE, what="partitions"), output)
        return
    wanted = refs.object_names(names or [], kinds.INSTANCETYPE, what="partitions") if names else None
    items, labels = profile_items(source.open(), wanted, source, by_node, by_card)
    _emit(items, labels, by_node, by_card, published, output)


Labels = dict[str, dict[str, str]]
"""The labels of the objects the rows describe: InstanceTypes by name, Devices by node."""


def profile_items(
    opened: Any, names: list[str] | None, source: SourceSpec, by_node: bool, by_card: bool
) -> tuple[list[dict[str, Any]], Labels]:
    """The partition table of one cluster, per profile (or per node, or per card), and the labels of the objects the
    rows describe."""
    from gpuctl.cluster import read
    from gpuctl.cluster.bulk import bulk_allocation
    from gpuctl.core.views import pool_devices

    with bulk_allocation():
        types = [
            t
            for t in read.instancetypes(
                opened, names or [], label_selector=source.selector, field_selector=source.field_selector
            )
            if t.acceleratable
        ]
        devices = read.devices(opened) if types else []
        queues = read.cluster_queues(opened) if types and not (by_node or by_card) else {}
    items: list[dict[str, Any]] = []
    labels: Labels = {}
    for t in types:
        pool = pool_devices(devices, t)
        labels[t.name] = dict(t.labels)
        labels.update({f"node/{n.node}": dict(n.labels) for n in pool})
        mfr = t.manufacturer or t.accelerator_group.split("-", 1)[0]
        cards = _cards(pool, t.accelerator_group)
        if not cards and names is None:
            continue
        if by_card:
            placements = _placements(opened, pool)
            for node, c in cards:
                items.append(
                    {
                        "instanceType": t.name,
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
                )
        elif by_node:
            for n in pool:
                for r in profile_rows(_cards([n], t.accelerator_group), mfr):
                    items.append({"instanceType": t.name, "node": n.node, **r})
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
            _compare_published(t, profiles, devices, pool, queues.get(t.name))
            items += [{"instanceType": t.name, **r} for r in profiles]
    return items, labels


def _compare_published(
    t: "InstanceType",
    rows: list[dict[str, Any]],
    devices: list["NodeDevices"],
    pool: list["NodeDevices"],
    queue: "ClusterQueue | None",
) -> None:
    """Beside each profile's figures, what the InstanceType publishes of it (``published``) and, where they differ,
    why (``difference``): gpuctl never contradicts the cluster silently."""
    from gpuctl.core.shadow import ProfileFigures, profile_difference, published_profile
    from gpuctl.core.views import instancetype_views

    pt = instancetype_views(t, devices, queue).partitioned
    computed_remaining = {p.name: p.count for p in pt.remaining_profiles}
    computed_allocated = {p.name: p.count for p in pt.allocated_profiles}
    for r in rows:
        published = published_profile(t, r["profile"])
        if published is None:
            continue
        r["published"] = {"remaining": published.remaining, "allocated": published.allocated}
        computed = ProfileFigures(computed_remaining.get(r["profile"], 0), computed_allocated.get(r["profile"], 0))
        carvable = ProfileFigures(r["remaining"], r["allocated"])
        if why := profile_difference(t, r["profile"], carvable, published, computed, pool, queue):
            r["difference"] = why


def _fleet(source: SourceSpec, names: list[str], output: OutputSpec) -> None:
    """Per profile across clusters: summed over Active pools, or one row per cluster (--by-cluster)."""
    from gpuctl.cli.source import fleet_read
    from gpuctl.cluster import read
    from gpuctl.core.fleet import ACTIVE, sum_rows

    def one(src: Any) -> tuple[list[dict[str, Any]], set[str]]:
        rows = profile_items(src, names, source, False, False)[0]
        return rows, {t.name for t in read.instancetypes(src, names) if t.phase == ACTIVE}

    answers, failures = fleet_read(source, one)
    per = {ctx: rows for ctx, (rows, _) in answers.items()}
    if source.by_cluster:
        items = [{**i, "cluster": ctx} for ctx, rows in per.items() for i in rows]
    else:
        active = {ctx: names_active for ctx, (_, names_active) in answers.items()}
        items = sum_rows(per, ("instanceType", "profile"), ("offered", "allocated", "remaining"), active)
        for r in items:
            r["state"] = (
                "not offered" if r["offered"] == 0 else ("offered but full" if r["remaining"] == 0 else "available")
            )
    columns = (Column("CLUSTERS"), *POOL_COLUMNS)
    render.emit(
        render.Listing(
            "ProfileAvailability",
            items,
            columns,
            lambda i: [i.get("cluster") or ",".join(i.get("clusters", [])), *_profile_row(i)],
            ref=lambda i: refs.instancetype(i["instanceType"]),
            failures=failures,
        ),
        output,
    )


def _profile_row(i: dict[str, Any]) -> list[str]:
    return [
        i["instanceType"],
        i["profile"],
        f"{i['memoryMib']}Mi" if i["memoryMib"] else "-",
        str(i["offered"]),
        str(i["allocated"]),
        str(i["remaining"]),
        i["state"],
    ]


def _emit(
    items: list[dict[str, Any]], labels: Labels, by_node: bool, by_card: bool, published: bool, output: OutputSpec
) -> None:
    def devices(i: dict[str, Any]) -> refs.ObjectRef:
        return refs.devices(i["node"], labels.get(f"node/{i['node']}"))

    if by_card:
        listing = render.Listing("CardPartitions", items, CARD_COLUMNS, _card_row, ref=devices)
    elif by_node:
        listing = render.Listing(
            "NodePartitions",
            items,
            NODE_COLUMNS,
            lambda i: [
                i["instanceType"],
                i["node"],
                i["profile"],
                str(i["offered"]),
                str(i["allocated"]),
                str(i["remaining"]),
            ],
            ref=devices,
        )
    else:
        shown = published or any("difference" in i for i in items)
        listing = render.Listing(
            "ProfileAvailability",
            items,
            POOL_COLUMNS + ((PUBLISHED_COLUMN,) if shown else ()),
            lambda i: [*_profile_row(i), *([_published_cell(i)] if shown else [])],
            ref=lambda i: refs.instancetype(i["instanceType"], labels.get(i["instanceType"])),
        )
    render.emit(listing, output)


def _published_cell(i: dict[str, Any]) -> str:
    published = i.get("published")
    if published is None:
        return "not published"
    if "difference" not in i:
        return "matches"
    return f"DIFFERS: remaining {published['remaining']}, allocated {published['allocated']} ({i['difference']})"


def _card_row(i: dict[str, Any]) -> list[str]:
    carved = ",".join(f"{p['name']}:{p['count']}" for p in i["allocatedProfiles"]) or "-"
    remaining = ",".join(f"{p['name']}:{p['count']}" for p in i["remainingProfiles"] if p["count"]) or "full"
    return [
        i["instanceType"],
        i["node"],
        i["card"],
        str(i["index"]),
        i["mode"],
        carved,
        remaining,
        "; ".join(i["placements"]) or "-",
    ]
