"""``gpuctl views``: the EX/SH/SL/PT views of InstanceTypes, computed from the Devices ledger."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from gpuctl.cli import render
from gpuctl.cli.errors import user_errors
from gpuctl.cli.options import NoHeadersOption, OutputOption, SelectorOption, SnapshotOption, open_source
from gpuctl.cli.render import Column, Output

COLUMNS = (
    Column("NAME"),
    Column("ENTRANCE"),
    Column("UNIT(CPU/RAM)/STORAGE"),
    Column("ACCELERATOR(EX/SH/SL/PT)"),
    Column("CPU"),
    Column("PHASE"),
    Column("PARTITIONS", wide_only=True),
)


def compute_items(source: Any, names: list[str], selector: str | None) -> list[dict[str, Any]]:
    """The views of each InstanceType as DESIGN.md's JSON contract states them."""
    from gpuctl.cluster import read
    from gpuctl.core import credits, views

    types = read.instancetypes(source, names, label_selector=selector)
    devices = read.devices(source) if any(t.acceleratable for t in types) else []
    nodes = read.nodes(source) if any(not t.acceleratable for t in types) else []
    queues = read.cluster_queues(source) if nodes else {}
    items = []
    for t in types:
        cores: list[int] = []
        reserved = 0
        if not t.acceleratable:
            pool = t.pool_labels()
            cores = [n.cpu_cores for n in nodes if views.in_pool(n.labels, pool)]
            queue = queues.get(t.name)
            if queue:
                reserved = credits.usage_from_cluster_queue(queue.get("status") or {}).get("cpu", 0)
        v = views.instancetype_views(t, devices, node_cores=cores, cpu_reserved=reserved)
        status = views.views_to_status(v)
        items.append(
            {
                "name": t.name,
                "entrance": t.entrance or t.queue_entrance_label,
                "phase": t.phase,
                "unit": f"{t.unit_cpu}/{t.unit_ram}/{t.local_storage}",
                **status,
            }
        )
    return items


def _cell(view: dict[str, Any]) -> str:
    return f"{view['onceMaxRequest']}/{view['remaining']}"


def _partitions(pt: dict[str, Any]) -> str:
    profiles = pt.get("remainingProfiles") or []
    return ",".join(f"{p['name']}:{p['count']}" for p in profiles) or "<none>"


def table_rows(items: list[dict[str, Any]]) -> list[list[str]]:
    rows = []
    for it in items:
        accel = " ".join(
            _cell(it[k]) for k in ("accelerator", "acceleratorShared", "acceleratorSliced", "acceleratorPartitioned")
        )
        rows.append(
            [
                it["name"],
                it["entrance"],
                it["unit"],
                accel,
                _cell(it["cpu"]),
                it["phase"] or "<unknown>",
                _partitions(it["acceleratorPartitioned"]),
            ]
        )
    return rows


@user_errors
def views_command(
    names: Annotated[
        list[str] | None, typer.Argument(help="InstanceType names (all when none given).", show_default=False)
    ] = None,
    output: OutputOption = Output.TABLE,
    no_headers: NoHeadersOption = False,
    selector: SelectorOption = None,
    snapshot: SnapshotOption = None,
) -> None:
    """Show what each pool can still give: EX/SH/SL/PT as onceMaxRequest/remaining, from the Devices ledger."""
    from gpuctl.cluster.bulk import bulk_allocation

    with bulk_allocation():
        items = compute_items(open_source(snapshot), names or [], selector)
    if output is Output.JSON:
        render.print_json({"items": [{k: v for k, v in it.items() if k != "unit"} for it in items]})
    elif output is Output.YAML:
        render.print_yaml({"items": [{k: v for k, v in it.items() if k != "unit"} for it in items]})
    elif output is Output.NAME:
        render.print_names("instancetype", [it["name"] for it in items])
    else:
        render.print_table(COLUMNS, table_rows(items), wide=output is Output.WIDE, no_headers=no_headers)
