"""``gpuctl views``: the EX/SH/SL/PT views of InstanceTypes, computed from the Devices ledger."""

import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpuctl.cli import refs, render
from gpuctl.cli.errors import UsageError
from gpuctl.cli.names import complete_instancetypes
from gpuctl.cli.registry import OutputFlags, SourceFlags, command
from gpuctl.cli.render import Column, OutputSpec
from gpuctl.cli.source import SourceSpec
from gpuctl.cli.usecases import compute_items, public
from gpuctl.cluster import kinds

if TYPE_CHECKING:
    from gpuctl.core.instancetypes import InstanceType
    from gpuctl.core.ledger import NodeDevices
    from gpuctl.core.shadow import Disagreement

COLUMNS = (
    Column("NAME"),
    Column("ENTRANCE"),
    Column("UNIT(CPU/RAM)/STORAGE"),
    Column("ACCELERATOR(EX/SH/SL/PT)"),
    Column("CPU"),
    Column("PHASE"),
    Column("PARTITIONS", wide_only=True),
)
PUBLISHED_COLUMN = Column("PUBLISHED")
NODE_COLUMNS = (
    Column("NAME"),
    Column("NODE"),
    Column("CARDS"),
    Column("EX"),
    Column("SH"),
    Column("SL"),
    Column("PT"),
    Column("PARTITIONS", wide_only=True),
    Column("FIT-LABELS", wide_only=True),
)
CARD_COLUMNS = (
    Column("NAME"),
    Column("NODE"),
    Column("CARD"),
    Column("INDEX"),
    Column("FAMILY"),
    Column("MODE"),
    Column("FREE"),
    Column("SLOTS"),
    Column("PROFILES", wide_only=True),
)
VIEW_KEYS = ("accelerator", "acceleratorShared", "acceleratorSliced", "acceleratorPartitioned", "cpu")
VIEW_SHORT = {
    "accelerator": "EX",
    "acceleratorShared": "SH",
    "acceleratorSliced": "SL",
    "acceleratorPartitioned": "PT",
    "cpu": "CPU",
}


def _cell(view: dict[str, Any]) -> str:
    return f"{view['onceMaxRequest']}/{view['remaining']}"


def _profiles_cell(profiles: list[dict[str, Any]]) -> str:
    return ",".join(f"{p['name']}:{p['count']}" for p in profiles) or "<none>"


def differences(item: dict[str, Any]) -> list["Disagreement"]:
    """Where the computed views differ from what the InstanceType's status publishes, with both values and why."""
    from gpuctl.core.shadow import view_disagreements

    return view_disagreements(item["_type"], item["_views"], item["_pool"], item["_queue"])


def published_cell(item: dict[str, Any]) -> str:
    from gpuctl.core.views import DRAINING_REASON, draining

    t: InstanceType = item["_type"]
    if not t.published_views:
        return "not published"
    found = differences(item)
    drains = f" ({DRAINING_REASON})" if draining(item["_queue"]) else ""
    if not found:
        return "matches" + drains
    return "DIFFERS: " + "; ".join(d.sentence() for d in found) + drains


def unreadable_cards(item: dict[str, Any]) -> list[str]:
    """The pool's cards in an allocation mode gpuctl does not know, one line each."""
    t: InstanceType = item["_type"]
    return [line for d in item["_pool"] for line in d.unreadable(t.accelerator_group)]


def warn_unreadable(items: list[dict[str, Any]]) -> None:
    """Say on stderr, in every output format, which cards are in a mode gpuctl does not know."""
    for it in items:
        for line in unreadable_cards(it):
            sys.stderr.write(f"warning: {line}\n")


def orphan_note(name: str) -> str:
    """A Devices object of the pool whose Node is gone: left out of every view, and how to remove it."""
    return f"orphaned Devices {name} (no Node {name}; left out): kubectl delete devices {name}"


def table_rows(items: list[dict[str, Any]], published: bool) -> list[list[str]]:
    rows = []
    for it in items:
        t: InstanceType = it["_type"]
        accel = " ".join(_cell(it[k]) for k in VIEW_KEYS[:4])
        row = [
            it["name"],
            it["entrance"] or "<none>",
            f"{t.unit_cpu}/{t.unit_ram}/{t.local_storage}",
            accel,
            _cell(it["cpu"]),
            it["phase"] or "<unknown>",
            _profiles_cell(it["acceleratorPartitioned"]["remainingProfiles"]),
        ]
        if published:
            row.append("; ".join([published_cell(it), *(orphan_note(n) for n in it["_orphans"])]))
        rows.append(row)
    return rows


# ----------------------------------------------------------------------------------------------- breakdowns


def node_breakdown(item: dict[str, Any]) -> list[dict[str, Any]]:
    """Per node of the pool: its views, and the per-card fit labels the operator publishes for the pool's model."""
    from gpuctl.core import views
    from gpuctl.core.pins import node_fit_labels

    t: InstanceType = item["_type"]
    out = []
    pool: list[NodeDevices] = item["_pool"]
    for node in pool:
        ex, sh, sl, pt = views.accelerator_views([node], t.accelerator_group)
        status = views.views_to_status(views.PoolViews(ex, sh, sl, pt, views.ZERO))
        fit = {k: v for k, v in node_fit_labels(node).items() if k.endswith("/" + t.accelerator_group)}
        out.append(
            {
                "_labels": dict(node.labels),
                "node": node.node,
                "cards": len(node.cards(t.accelerator_group)),
                **{k: status[k] for k in VIEW_KEYS[:4]},
                "fitLabels": fit,
            }
        )
    return out


def card_breakdown(item: dict[str, Any]) -> list[dict[str, Any]]:
    t: InstanceType = item["_type"]
    out = []
    pool: list[NodeDevices] = item["_pool"]
    for node in pool:
        for c in node.cards(t.accelerator_group):
            family = "partitioned" if c.partitioned else ("sliceable" if c.sliceable else "whole")
            out.append(
                {
                    "_labels": dict(node.labels),
                    "node": node.node,
                    "card": c.id,
                    "index": c.index,
                    "family": family,
                    "mode": "unhealthy" if c.unhealthy else c.mode.name.lower(),
                    "remainingUnits": c.remaining,
                    "freeShares": c.free_shares,
                    "freeSlicePercent": c.free_slice_percent,
                    "slots": {"used": c.allocated_slices, "total": c.logical_slots},
                    "remainingProfiles": [
                        {"name": p.published, "count": c.profile_remaining(p.published)} for p in c.profiles
                    ],
                    "allocatedProfiles": [{"name": n, "count": k} for n, k in c.allocated_profiles.items() if k],
                }
            )
    return out


def _fit_cell(labels: dict[str, str]) -> str:
    """The fit labels as ``sliced-max-free-units=U,shared-free-cards=N`` (the label names without their model)."""
    return ",".join(f"{k.partition('.')[0]}={v}" for k, v in sorted(labels.items())) or "<none>"


def _free_cell(card: dict[str, Any]) -> str:
    if card["family"] == "partitioned":
        free = max((p["count"] for p in card["remainingProfiles"]), default=0)
        return f"{free} instance{'s' if free != 1 else ''}"
    pct = card["remainingUnits"] * 100 // 1_600_000
    return f"{pct}%"


def _breakdown(items: list[dict[str, Any]], by: str) -> render.Listing:
    if by == "node":
        node_items = [{"instanceType": it["name"], **n} for it in items for n in node_breakdown(it)]
        node_labels = {n["node"]: n.pop("_labels") for n in node_items}
        return render.Listing(
            "NodeView",
            node_items,
            NODE_COLUMNS,
            lambda n: [
                n["instanceType"],
                n["node"],
                str(n["cards"]),
                *(_cell(n[k]) for k in VIEW_KEYS[:4]),
                _profiles_cell(n["acceleratorPartitioned"]["remainingProfiles"]),
                _fit_cell(n["fitLabels"]),
            ],
            ref=lambda n: refs.devices(n["node"], node_labels.get(n["node"])),
        )
    card_items = [{"instanceType": it["name"], **c} for it in items for c in card_breakdown(it)]
    card_labels = {c["node"]: c.pop("_labels") for c in card_items}
    return render.Listing(
        "CardView",
        card_items,
        CARD_COLUMNS,
        lambda c: [
            c["instanceType"],
            c["node"],
            c["card"],
            str(c["index"]),
            c["family"],
            c["mode"],
            _free_cell(c),
            f"{c['slots']['used']}/{c['slots']['total']}" if c["slots"]["total"] else "-",
            _profiles_cell(c["remainingProfiles"]),
        ],
        ref=lambda c: refs.devices(c["node"], card_labels.get(c["node"])),
    )


def listing(items: list[dict[str, Any]], published: bool) -> render.Listing:
    """The views as every output format shows them. Where a computed figure differs from the one its InstanceType
    publishes, both are shown and why (the PUBLISHED column, ``differences``), asked for or not: gpuctl never
    contradicts the cluster silently."""
    from gpuctl.core.views import DRAINING_REASON, draining

    labels = {it["name"]: it["_labels"] for it in items}
    published = published or any(differences(it) for it in items)
    public_items = []
    for it in items:
        d = public(it)
        found = differences(it)
        if found or published:
            d["differences"] = [x.to_dict() for x in found]
        if draining(it["_queue"]):
            d["note"] = DRAINING_REASON
        if published:
            d["orphanedDevices"] = [{"name": n, "fix": f"kubectl delete devices {n}"} for n in it["_orphans"]]
        if unreadable := unreadable_cards(it):
            d["unreadableCards"] = list(unreadable)
        public_items.append(d)
    rows = {r[0]: r for r in table_rows(items, published)}
    return render.Listing(
        "InstanceTypeView",
        public_items,
        COLUMNS + ((PUBLISHED_COLUMN,) if published else ()),
        lambda d: rows[d["name"]],
        ref=lambda d: refs.instancetype(d["name"], labels.get(d["name"])),
    )


# ----------------------------------------------------------------------------------------------- the command


@command(
    "views",
    summary="Show what each pool can still give (EX/SH/SL/PT).",
    examples="""
  # What every pool can still give, live or from a snapshot
  gpuctl views
  gpuctl views --snapshot ./dump -o wide

  # One pool, per node with its fit labels, or per card
  gpuctl views gpustack--nvidia-a10g-linux-amd64 --by-node -o wide
  gpuctl views --by-card -o json

  # Compare with what the InstanceTypes publish; follow the ledger
  gpuctl views --published
  gpuctl views -w

  # Names and free whole cards, sorted
  gpuctl views --sort-by .accelerator.remaining -o custom-columns=NAME:.name,FREE:.accelerator.remaining""",
    listed=10,
    source=SourceFlags(selectors=True, fleet=True),
    output=OutputFlags(labels=True),
)
def views_command(
    names: Annotated[
        list[str] | None,
        typer.Argument(
            help="InstanceType names (all when none given).", show_default=False, autocompletion=complete_instancetypes
        ),
    ] = None,
    published: Annotated[
        bool, typer.Option("--published", help="Compare with what each InstanceType's status publishes.")
    ] = False,
    by_node: Annotated[bool, typer.Option("--by-node", help="Break each pool down by node.")] = False,
    by_card: Annotated[
        bool, typer.Option("--by-card", help="Break each pool down by card: mode and what is free.")
    ] = False,
    watch_flag: Annotated[bool, typer.Option("--watch", "-w", help="Redraw on change (live cluster only).")] = False,
    interval: Annotated[float, typer.Option("--interval", help="Seconds between reads with --watch.", min=0.2)] = 2.0,
    *,
    source: SourceSpec,
    output: OutputSpec,
) -> None:
    """Show what each pool can still give: EX/SH/SL/PT as onceMaxRequest/remaining, from the Devices ledger.

    EX counts whole free cards, SH free shares, SL free percent of card memory for slices, PT partition instances.
    onceMaxRequest is the most one request can get: per node for EX and SH, per card for SL, 1 or 0 for PT.
    """
    wanted = refs.object_names(names or [], kinds.INSTANCETYPE, what="views")
    if by_node and by_card:
        raise UsageError("--by-node and --by-card are exclusive: pick one")
    if watch_flag and source.snapshot:
        raise UsageError("--watch needs a live cluster: a snapshot does not change")
    if source.fleet:
        if by_node or by_card or watch_flag or published:
            raise UsageError("--by-node, --by-card, --watch and --published read one cluster: give one --context")
        render.emit(fleet_listing(source, wanted), output)
        return
    opened = source.open()

    def once() -> list[dict[str, Any]]:
        from gpuctl.cluster.bulk import bulk_allocation

        with bulk_allocation():
            return compute_items(opened, wanted, source.selector, source.field_selector)

    def show(items: list[dict[str, Any]]) -> None:
        if not watch_flag:
            warn_unreadable(items)
        if by_node or by_card:
            render.emit(_breakdown(items, "node" if by_node else "card"), output)
        else:
            render.emit(listing(items, published), output)

    if watch_flag:
        import contextlib
        import io

        def text() -> str:
            buffer = io.StringIO()
            with contextlib.redirect_stdout(buffer):
                show(once())
            return buffer.getvalue()

        from gpuctl.cli.watching import watch_screen

        watch_screen(text, interval, "gpuctl views")
        return
    show(once())


FLEET_COLUMNS = (
    Column("NAME"),
    Column("CLUSTERS"),
    Column("ACCELERATOR(EX/SH/SL/PT)"),
    Column("CPU"),
    Column("PHASE"),
    Column("PARTITIONS", wide_only=True),
)


def fleet_listing(source: SourceSpec, names: list[str]) -> render.Listing:
    """The views of several clusters: summed per pool over Active members, or one row per cluster (--by-cluster);
    a cluster that cannot be read is an error row."""
    from gpuctl.cli.source import fleet_read
    from gpuctl.cluster.bulk import bulk_allocation
    from gpuctl.core.fleet import sum_views

    with bulk_allocation():
        per, failures = fleet_read(
            source, lambda src: [public(i) for i in compute_items(src, names, source.selector, source.field_selector)]
        )
    if source.by_cluster:
        items = [{**i, "cluster": ctx} for ctx, rows in per.items() for i in rows]
    else:
        items = sum_views(per)

    def row(i: dict[str, Any]) -> list[str]:
        return [
            i["name"],
            i.get("cluster") or ",".join(i.get("clusters", [])),
            " ".join(_cell(i[k]) if k in i else "-" for k in VIEW_KEYS[:4]),
            _cell(i["cpu"]) if "cpu" in i else "-",
            i.get("phase") or "<unknown>",
            _profiles_cell((i.get("acceleratorPartitioned") or {}).get("remainingProfiles", [])),
        ]

    return render.Listing(
        "InstanceTypeView",
        items,
        FLEET_COLUMNS,
        row,
        ref=lambda i: refs.instancetype(i["name"], i.get("_labels")),
        failures=failures,
    )
