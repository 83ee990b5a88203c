"""``gpuctl workloads``: the Workloads of a namespace (or all), with the gate that holds each."""

from typing import Annotated, Any

import typer

from gpuctl.cli import refs, render
from gpuctl.cli.names import complete_instancetypes
from gpuctl.cli.registry import OutputFlags, SourceFlags, command
from gpuctl.cli.render import Column, OutputSpec
from gpuctl.cli.source import SourceSpec
from gpuctl.cluster import kinds
from gpuctl.cluster.errors import NotFound

WORKLOAD_COLUMNS = (
    Column("NAMESPACE"),
    Column("NAME"),
    Column("QUEUE"),
    Column("CLUSTERQUEUE"),
    Column("HELD-BY"),
    Column("SUMMARY"),
    Column("HINT", wide_only=True),
)


def _workload_row(item: dict[str, Any]) -> list[str]:
    held = item["heldBy"]
    gate = item["gates"][held - 1] if held else None
    return [
        item["namespace"],
        item["name"],
        item["queue"],
        item["clusterQueue"] or "<none>",
        f"{held} {gate['name']}" if gate else "-",
        gate["summary"] if gate else "running",
        gate["hint"] if gate and gate["hint"] else "-",
    ]


@command(
    "workloads",
    summary="List Workloads with the gate that holds each.",
    examples="""
  # The Workloads of the context's namespace, and those some gate holds everywhere
  gpuctl workloads
  gpuctl workloads -A --held

  # One pool's Workloads in one namespace, with the hints
  gpuctl workloads -t gpustack--nvidia-a10g-linux-amd64 -n team-a -o wide

  # Just the names of held Workloads
  gpuctl workloads -A --held -o jsonpath='{range .items[*]}{.namespace}/{.name}{"\\n"}{end}'""",
    listed=30,
    source=SourceFlags(namespaced=True, selectors=True),
    output=OutputFlags(labels=True),
)
def workloads_command(
    instancetype: Annotated[
        str | None,
        typer.Option(
            "--instancetype",
            "-t",
            help="Only the Workloads of this pool (its ClusterQueue).",
            show_default=False,
            autocompletion=complete_instancetypes,
        ),
    ] = None,
    held: Annotated[bool, typer.Option("--held", help="Only Workloads some gate holds.")] = False,
    *,
    source: SourceSpec,
    output: OutputSpec,
) -> None:
    """List Workloads with the gate that holds each one (-n NS, or -A for every namespace; -t filters by pool too)."""
    from gpuctl.cluster import read
    from gpuctl.cluster.bulk import bulk_allocation
    from gpuctl.core.explain import explain_workload

    opened = source.open()
    ns = source.scope(opened)
    pool = refs.object_names([instancetype], kinds.INSTANCETYPE, what="workloads -t")[0] if instancetype else None
    with bulk_allocation():
        chosen = read.selected(
            opened, kinds.WORKLOAD, namespace=ns, label_selector=source.selector, field_selector=source.field_selector
        )
        state = read.admission_state(opened)
        if pool and pool not in state.instancetypes:
            raise NotFound(f'instancetype "{pool}" not found (`gpuctl views` lists the pools)')
        # Each explanation becomes its item at once: thousands of them are never held twice over.
        labels: dict[str, dict[str, str]] = {}
        items: list[dict[str, Any]] = []
        for w in state.workloads:
            if (ns is not None and w.namespace != ns) or (pool and state.cluster_queue_of(w) != pool):
                continue
            if chosen is not None and (w.namespace, w.name) not in chosen:
                continue
            e = explain_workload(w, state.context_for(w))
            if held and e.held_by is None:
                continue
            labels[w.key] = dict(w.labels)
            items.append(e.to_dict() | {"queue": w.queue_name, "clusterQueue": w.cluster_queue})
        del state  # the check's inputs: rebuilt ledgers of every node
    where = "in any namespace" if ns is None else f"in namespace {ns}"
    render.emit(
        render.Listing(
            "WorkloadExplanation",
            items,
            WORKLOAD_COLUMNS,
            _workload_row,
            ref=lambda i: refs.workload(i["namespace"], i["name"], labels.get(f"{i['namespace']}/{i['name']}")),
            empty=f"No workloads found {where}" + (f" for pool {instancetype}." if instancetype else "."),
        ),
        output,
    )
