"""``gpuctl workloads``: the Workloads of a namespace (or all), with the gate that holds each."""

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpuctl.cli import refs, render
from gpuctl.cli.errors import UsageError
from gpuctl.cli.names import complete_instancetypes
from gpuctl.cli.registry import OutputFlags, SourceFlags, command
from gpuctl.cli.render import Column, OutputSpec
from gpuctl.cli.source import SourceSpec
from gpuctl.cli.usecases import checks_cell
from gpuctl.cluster import kinds
from gpuctl.cluster.errors import NotFound

if TYPE_CHECKING:
    from gpuctl.cluster.read import Source

WORKLOAD_COLUMNS = (
    Column("NAMESPACE"),
    Column("NAME"),
    Column("QUEUE"),
    Column("CLUSTERQUEUE"),
    Column("HELD-BY"),
    Column("HELD-FOR"),
    Column("AGE"),
    Column("SUMMARY"),
    Column("HINT", wide_only=True),
    Column("CHECKS", wide_only=True),
)


def workload_row(now: float) -> Callable[[dict[str, Any]], list[str]]:
    """A Workload's row, its ages measured at ``now``: HELD-FOR since the gate that holds it began holding it."""
    from gpuctl.core.ages import since

    def row(item: dict[str, Any]) -> list[str]:
        held = item["heldBy"]
        gate = item["gates"][held - 1] if held else None
        return [
            item["namespace"],
            item["name"],
            item["queue"],
            item["clusterQueue"] or "<none>",
            f"{held} {gate['name']}" if gate else "-",
            since(item["heldSince"] or "", now) if gate else "-",
            since(item["creationTimestamp"] or "", now),
            gate["summary"] if gate else "running",
            gate["hint"] if gate and gate["hint"] else "-",
            checks_cell(item["gates"][2].get("checks") or []),
        ]

    return row


@command(
    "workloads",
    summary="List Workloads with the gate that holds each.",
    examples="""
  # The Workloads of the context's namespace, and those some gate holds everywhere
  gpuctl workloads
  gpuctl workloads -A --held

  # One pool's Workloads in one namespace, with the hints
  gpuctl workloads -t gpustack--nvidia-a10g-linux-amd64 -n team-a -o wide

  # What has been held longest, then every change as it happens
  gpuctl workloads -A --held --sort-by=.heldSince
  gpuctl workloads -A -w

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
    watch: Annotated[
        bool, typer.Option("--watch", "-w", help="After the list, print each Workload that appears or changes.")
    ] = False,
    interval: Annotated[float, typer.Option("--interval", help="Seconds between reads with --watch.", min=0.2)] = 2.0,
    *,
    source: SourceSpec,
    output: OutputSpec,
) -> None:
    """List Workloads with the gate that holds each one (-n NS, or -A for every namespace; -t filters by pool too),
    how long that gate has held it and its age; with -w, then each change as it happens."""
    from gpuctl.cli import clock

    if watch and source.snapshot:
        raise UsageError("--watch needs a live cluster: a snapshot does not change")
    opened = source.open()
    ns = source.scope(opened)
    pool = refs.object_names([instancetype], kinds.INSTANCETYPE, what="workloads -t")[0] if instancetype else None
    where = "in any namespace" if ns is None else f"in namespace {ns}"

    def listing(items: list[dict[str, Any]], labels: dict[str, dict[str, str]], now: float) -> render.Listing:
        return render.Listing(
            "WorkloadExplanation",
            items,
            WORKLOAD_COLUMNS,
            workload_row(now),
            ref=lambda i: refs.workload(
                i["namespace"], i["name"], labels.get(f"{i['namespace']}/{i['name']}"), i["creationTimestamp"] or ""
            ),
            empty=f"No workloads found {where}" + (f" for pool {instancetype}." if instancetype else "."),
        )

    items, labels = workload_items(opened, source, ns, pool, held)
    if not watch:
        render.emit(listing(items, labels, clock.of(opened)), output)
        return
    if not output.tabular:
        raise UsageError("--watch prints table rows: drop -o, or use `kubectl get workloads -w -o json`")
    watch_rows(
        lambda: workload_items(opened, source, ns, pool, held),
        lambda rows, labels, no_headers: render.emit(
            listing(rows, labels, clock.now()), replace(output, no_headers=no_headers)
        ),
        interval,
        listing(items, labels, clock.now()),
        output,
    )


def workload_items(
    opened: "Source", source: SourceSpec, ns: str | None, pool: str | None, held: bool
) -> tuple[list[dict[str, Any]], dict[str, dict[str, str]]]:
    """Each chosen Workload's explanation, with its queues, creation time and the start of its hold; and labels."""
    from gpuctl.cluster import read
    from gpuctl.cluster.bulk import bulk_allocation
    from gpuctl.core.ages import hold_started
    from gpuctl.core.explain import explain_workload

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
            items.append(
                e.to_dict()
                | {
                    "queue": w.queue_name,
                    "clusterQueue": w.cluster_queue,
                    "creationTimestamp": w.created or None,
                    "heldSince": hold_started(w, e.held_by) or None,
                }
            )
        del state  # the check's inputs: rebuilt ledgers of every node
    return items, labels


def watch_rows(
    read_items: Callable[[], tuple[list[dict[str, Any]], dict[str, dict[str, str]]]],
    print_rows: Callable[[list[dict[str, Any]], dict[str, dict[str, str]], bool], None],
    interval: float,
    first: render.Listing,
    output: OutputSpec,
) -> None:
    """``kubectl get -w``: the table once, then a row for each Workload that appears or changes (its gate, summary or
    hint; not its ages alone), read every ``interval``. When the API server stops answering, a line on stderr says so
    within an interval, and another when it answers again."""
    import sys
    import time

    from gpuctl.cli.watching import Poller

    render.emit(first, output)
    sys.stdout.flush()

    def key(item: dict[str, Any]) -> str:
        return f"{item['namespace']}/{item['name']}"

    def identity(item: dict[str, Any]) -> tuple[Any, ...]:
        return (item["heldBy"], item["queue"], item["clusterQueue"], tuple(tuple(g.items()) for g in item["gates"]))

    seen = {key(i): repr(identity(i)) for i in first.items}
    poller = Poller(read_items, interval).start()
    started = time.time()
    answers = 0
    was_stale = False
    try:
        while True:
            poller.changed.wait(1.0)
            poller.changed.clear()
            now = time.time()
            stale = poller.stale_for(now, started) is not None
            if stale != was_stale:
                status = poller.status(now, started)
                sys.stderr.write(status + ("\n" if stale else " (recovered)\n"))
                sys.stderr.flush()
                was_stale = stale
            with poller.lock:
                latest, fresh = poller.latest, poller.answers != answers
                answers = poller.answers
            if latest is None or not fresh:
                continue
            items, labels = latest
            changed = [i for i in items if seen.get(key(i)) != repr(identity(i))]
            seen = {key(i): repr(identity(i)) for i in items}
            if changed:
                print_rows(changed, labels, True)
                sys.stdout.flush()
    except KeyboardInterrupt:
        return
    finally:
        poller.stop()
