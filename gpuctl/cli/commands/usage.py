"""``gpuctl usage [INSTANCETYPE...]``: who holds what in each pool, each mode in its own unit and in card-equivalents."""

from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpuctl.cli import refs, render
from gpuctl.cli.names import complete_instancetypes
from gpuctl.cli.registry import OutputFlags, SourceFlags, command
from gpuctl.cli.render import Column, OutputSpec
from gpuctl.cli.source import SourceSpec
from gpuctl.cluster import kinds
from gpuctl.cluster.errors import NotFound
from gpuctl.core.usage import UNATTRIBUTED, By

if TYPE_CHECKING:
    from gpuctl.cluster.read import Source
    from gpuctl.core.usage import Row

OWNER_HEADER = {
    By.NAMESPACE: "NAMESPACE",
    By.LOCALQUEUE: "LOCALQUEUE",
    By.CLUSTERQUEUE: "CLUSTERQUEUE",
    By.WORKLOAD: "WORKLOAD",
}
FIGURES = ("EXCLUSIVE", "SHARED", "SLICED", "PARTITIONED", "CPU", "CARD-EQ", "RESERVED")


def columns(by: By) -> tuple[Column, ...]:
    namespaced = by in (By.LOCALQUEUE, By.WORKLOAD)
    owner = (Column("NAMESPACE"), Column(OWNER_HEADER[by])) if namespaced else (Column(OWNER_HEADER[by]),)
    return (*owner, Column("INSTANCETYPE"), *(Column(f) for f in FIGURES), Column("PODS", wide_only=True))


def _number(value: float) -> str:
    """A figure as a person reads it: no trailing zeros, ``-`` for nothing."""
    if not value:
        return "-"
    return f"{value:.4f}".rstrip("0").rstrip(".")


def row_item(r: "Row", by: By) -> dict[str, Any]:
    """One row as structured output gives it: every figure, each mode in its unit and in card-equivalents."""
    from gpuctl.core.usage import equivalents, percent

    h = r.holding
    namespace = r.namespace
    if by is By.NAMESPACE and r.name != UNATTRIBUTED:
        namespace = r.name
    return {
        "by": by.value,
        "namespace": namespace,
        "name": r.name,
        "instancetype": r.pool,
        "exclusive": {"cards": h.cards},
        "shared": {"shares": h.shares},
        "sliced": {"slices": h.slices, "percent": percent(h.slice_units)},
        "partitioned": dict(sorted(h.partitions.items())),
        "cpu": equivalents(h.cpu),
        "cardEquivalents": {
            "total": equivalents(h.card_equivalents),
            **{mode: equivalents(eq) for mode, eq in sorted(h.equivalents.items())},
        },
        "reserved": {
            "cardEquivalents": equivalents(h.reserved),
            "cpu": equivalents(h.reserved_cpu),
            "workloads": h.reserved_workloads,
            "pods": h.reserved_pods,
        },
        "pods": h.pods,
    }


def _row(item: dict[str, Any]) -> list[str]:
    by = By(item["by"])
    owner = [item["namespace"] or UNATTRIBUTED, item["name"]] if by in (By.LOCALQUEUE, By.WORKLOAD) else [item["name"]]
    sliced = item["sliced"]
    reserved = item["reserved"]
    reserved_text = _number(reserved["cardEquivalents"])
    if reserved["cpu"]:
        reserved_text = f"{_number(reserved['cpu'])} cpu" if reserved_text == "-" else reserved_text
    return [
        *owner,
        item["instancetype"],
        _number(item["exclusive"]["cards"]),
        _number(item["shared"]["shares"]),
        f"{sliced['slices']} ({_number(sliced['percent'])}%)" if sliced["slices"] else "-",
        ",".join(f"{name}x{n}" for name, n in item["partitioned"].items()) or "-",
        _number(item["cpu"]),
        _number(item["cardEquivalents"]["total"]),
        reserved_text,
        str(item["pods"]),
    ]


def usage_items(source: "Source", pools: list[str], by: By, namespace: str | None) -> list[dict[str, Any]]:
    """The rows of ``usage``: every pool's holdings (Pods' grants, what the ledger charges no Pod, reservations)
    summed per owner. Every Pod is read, whatever the namespace asked: the unattributed rest is the ledger less all
    of them."""
    from gpuctl.cluster import read
    from gpuctl.core.usage import holdings, summarise
    from gpuctl.core.workloads import parse_local_queue

    read.read_as_records(source, kinds.POD, kinds.WORKLOAD)
    types = read.instancetypes(source)
    missing = sorted(set(pools) - {t.name for t in types})
    if missing:
        raise NotFound(f'instancetype "{missing[0]}" not found (`gpuctl views` lists the pools)')
    chosen = [t for t in types if not pools or t.name in pools]
    held = holdings(
        chosen,
        read.devices(source) if any(t.acceleratable for t in chosen) else [],
        read.pods(source),
        read.workloads(source),
        [parse_local_queue(o) for o in source.list(kinds.LOCALQUEUE)],
    )
    return [row_item(r, by) for r in summarise(held, by, namespace)]


@command(
    "usage",
    summary="Show who holds what in each pool, in each mode's unit and in card-equivalents.",
    examples="""
  # Every namespace's holdings in every pool
  gpuctl usage -A

  # One pool, per LocalQueue of one namespace, as JSON for a chargeback script
  gpuctl usage gpustack--nvidia-h100-linux-amd64 -n team-a --by localqueue -o json""",
    listed=65,
    source=SourceFlags(namespaced=True),
    output=OutputFlags(),
)
def usage_command(
    names: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="[INSTANCETYPE]...",
            help="Pools (default: every one).",
            autocompletion=complete_instancetypes,
        ),
    ] = None,
    by: Annotated[
        By,
        typer.Option("--by", help="One row per namespace, localqueue, clusterqueue or workload, and pool."),
    ] = By.NAMESPACE,
    *,
    source: SourceSpec,
    output: OutputSpec,
) -> None:
    """What each owner holds in each pool, from the Pods' allocation records priced against the ledgers: exclusive
    cards, shares, slices (and their percent of a card), partitions by profile and CPU cores, then all of it in
    card-equivalents by the credits fold. RESERVED is what admitted Workloads hold in quota with no card allocated
    yet (held but not running). What the ledger charges that no Pod's record names is the <none> owner (-A)."""
    from gpuctl.cluster.bulk import bulk_allocation

    pools = refs.object_names(names or [], kinds.INSTANCETYPE, what="usage")
    opened = source.open()
    ns = source.scope(opened)
    with bulk_allocation():
        items = usage_items(opened, pools, by, ns)
    where = "in any namespace" if ns is None else f"in namespace {ns}"
    render.emit(
        render.Listing("Usage", items, columns(by), _row, empty=f"Nothing held or reserved {where}."),
        output,
    )
