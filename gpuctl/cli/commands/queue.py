"""``gpuctl queue [CLUSTERQUEUE...]``: the pending Workloads in Kueue's order, what each asks, whether it would fit
now, the gate that holds it and, where it can be honest, an upper bound on its wait."""

from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpuctl.cli import clock, refs, render
from gpuctl.cli.names import complete_instancetypes
from gpuctl.cli.registry import OutputFlags, SourceFlags, command
from gpuctl.cli.render import Column, OutputSpec
from gpuctl.cli.source import SourceSpec, fleet_read
from gpuctl.cli.usecases import checks_cell
from gpuctl.cluster import kinds
from gpuctl.cluster.errors import NotFound

if TYPE_CHECKING:
    from gpuctl.cluster.read import Source
    from gpuctl.core.simulate import ClusterState
    from gpuctl.core.workloads import Workload

COLUMNS = (
    Column("CLUSTERQUEUE"),
    Column("POS"),
    Column("NAMESPACE"),
    Column("NAME"),
    Column("PRIORITY"),
    Column("ASKS"),
    Column("FITS-NOW"),
    Column("HELD-BY"),
    Column("WAITED"),
    Column("WAIT-BOUND"),
    Column("SUMMARY", wide_only=True),
    Column("CHECKS", wide_only=True),
)
RuntimeLabelOption = Annotated[
    str | None,
    typer.Option(
        "--runtime-label",
        help="A label whose value bounds a Workload's runtime in seconds, where it sets no maximumExecutionTimeSeconds.",
        show_default=False,
    ),
]


def _duration(seconds: int | None) -> str:
    if seconds is None:
        return "unknown"
    if seconds < 120:
        return f"<= {seconds}s"
    if seconds < 7200:
        return f"<= {seconds // 60}m"
    return f"<= {seconds // 3600}h{(seconds % 3600) // 60:02d}m"


def cluster_queue_map(state: "ClusterState") -> dict[str, str]:
    """Each Workload's ClusterQueue: its admission's, or its LocalQueue's."""
    from gpuctl.core.queueing import cluster_queues_of

    return cluster_queues_of(state.workloads, state.local_queues.values())


def ordered(
    source: "Source", workloads: list["Workload"], cq_of: dict[str, str], cluster_queue: str
) -> tuple[list["Workload"], str]:
    """The pending Workloads of a ClusterQueue in Kueue's order: its visibility API's answer where the cluster serves
    it, else computed the same way; and which it was."""
    from gpuctl.core.queueing import pending_order

    served = getattr(source, "pending_workloads", None)
    items = served(cluster_queue) if served is not None else None
    if items is None:
        return pending_order(workloads, cq_of, cluster_queue), "computed"
    by_key = {w.key: w for w in workloads}
    keyed = [f"{(i.get('metadata') or {}).get('namespace')}/{(i.get('metadata') or {}).get('name')}" for i in items]
    return [by_key[k] for k in keyed if k in by_key], "visibility"


def queue_items(
    source: "Source", names: list[str], runtime_label: str | None, now: float | None = None
) -> list[dict[str, Any]]:
    """The pending Workloads of each ClusterQueue. The queues and Workloads are read first; the whole state the
    simulator and the explanations need, only when something is pending.

    Each queue's line is simulated in its order on one working copy, as Kueue admits it: a Workload that would be
    admitted takes its quota and cards before the next is tried. Under ``StrictFIFO`` the first that would not be
    admitted stays at the head, and every Workload behind it is blocked by it."""
    from gpuctl.cluster import kinds, read
    from gpuctl.core.ages import hold_started
    from gpuctl.core.explain import ExplainContext, explain_workload
    from gpuctl.core.queueing import STRICT_FIFO, asks, cluster_queues_of, epoch_seconds, wait_bound
    from gpuctl.core.simulate import Simulator
    from gpuctl.core.submissions import resubmission
    from gpuctl.core.workloads import parse_local_queue

    # The Pods and Nodes too: the simulation of what is pending reads them, and it is what `queue` is for.
    read.read_as_records(source, kinds.WORKLOAD, kinds.POD, kinds.NODE)
    now = clock.of(source) if now is None else now  # once the kinds are records: a snapshot decodes nothing twice
    cluster_queues = read.cluster_queues(source)
    queues = sorted(names or cluster_queues)
    missing = [q for q in queues if q not in cluster_queues]
    if missing:
        raise NotFound(f'clusterqueue "{missing[0]}" not found (`gpuctl views` lists the pools; each has one)')
    workloads = read.workloads(source)
    cq_of = cluster_queues_of(workloads, map(parse_local_queue, source.list(kinds.LOCALQUEUE)))
    lines = {cq: ordered(source, workloads, cq_of, cq) for cq in queues}
    if not any(waiting for waiting, _ in lines.values()):
        return []
    state = read.simulation_state(source, read_workloads=workloads, read_cluster_queues=cluster_queues)
    simulator = Simulator(state)
    items = []
    for cq in queues:
        waiting, order_from = lines[cq]
        strict = cluster_queues[cq].queueing_strategy == STRICT_FIFO
        running = [w for w in workloads if cq_of.get(w.key) == cq and w.admitted and not w.finished]
        trial = simulator.copy()
        head: Workload | None = None
        for i, w in enumerate(waiting):
            outcome = None
            if head is None:
                trial.remove([w.key])  # its pending record leaves; it is placed anew, as Kueue would admit it
                outcome = trial.simulate(resubmission(w))
            if strict and head is None and outcome is not None and not outcome.admitted:
                head = w
            explanation = explain_workload(
                w,
                ExplainContext(
                    local_queue=state.local_queues.get((w.namespace, w.queue_name)),
                    cluster_queue=state.cluster_queues.get(cq),
                    instancetype=state.instancetypes.get(cq),
                    admission_check=state.admission_check,
                    check=state.check,
                    quota=simulator.book,
                ),
            )
            held = explanation.held_by
            waiting_since = hold_started(w, 2)  # in line since it was queued (again, after an eviction)
            gate = explanation.gates[held - 1] if held else None
            simulated = outcome.explanation if outcome is not None else None
            simulated_gate = simulated.gates[simulated.held_by - 1] if simulated and simulated.held_by else None
            items.append(
                {
                    "metadata": refs.workload(w.namespace, w.name, w.labels).metadata(),
                    "clusterQueue": cq,
                    "position": i + 1,
                    "total": len(waiting),
                    "namespace": w.namespace,
                    "name": w.name,
                    "priority": w.priority,
                    "created": w.created,
                    "asks": asks(w),
                    "fitsNow": outcome is not None and outcome.admitted,
                    "simulatedHeldBy": simulated.held_by if simulated else None,
                    "simulatedPart": (simulated_gate.part or None) if simulated_gate else None,
                    "blockedBy": f"{head.namespace}/{head.name}" if head is not None and head is not w else None,
                    "heldBy": held,
                    "heldByPart": (gate.part or None) if gate else None,
                    "summary": gate.summary if gate else "",
                    "checks": [{"name": n, "state": st, "message": m} for n, st, m in explanation.gates[2].checks],
                    "waitingSince": waiting_since or None,
                    "waitedSeconds": (
                        max(0, int(now - since_epoch)) if (since_epoch := epoch_seconds(waiting_since)) else None
                    ),
                    "waitBoundSeconds": wait_bound(waiting[:i], running, now, runtime_label),
                    "orderFrom": order_from,
                }
            )
    return items


PARTS = {"quota": "quota", "tas-placement": "TAS"}


def _gate_text(gate: int | None, part: str | None) -> str:
    return f"{gate} {PARTS[part]}" if gate and part in PARTS else str(gate) if gate else "-"


def _row(i: dict[str, Any]) -> list[str]:
    from gpuctl.core.ages import age_text

    if i["fitsNow"]:
        fits = "yes"
    elif i.get("blockedBy"):
        fits = f"no (behind {i['blockedBy']})"
    else:
        fits = f"no (gate {_gate_text(i['simulatedHeldBy'], i.get('simulatedPart'))})"
    return [
        f"{i['cluster']}/{i['clusterQueue']}" if "cluster" in i else i["clusterQueue"],
        f"{i['position']}/{i['total']}",
        i["namespace"],
        i["name"],
        str(i["priority"]),
        i["asks"],
        fits,
        _gate_text(i["heldBy"], i.get("heldByPart")),
        age_text(i["waitedSeconds"]),
        _duration(i["waitBoundSeconds"]),
        i["summary"] or "-",
        checks_cell(i.get("checks") or []),
    ]


@command(
    "queue",
    summary="List pending Workloads in Kueue's order, with what each asks and waits on.",
    examples="""
  # Every queue's pending Workloads in Kueue's order
  gpuctl queue

  # One pool's queue; runtimes bounded by a label where Workloads set no maximumExecutionTimeSeconds
  gpuctl queue gpustack--nvidia-a10g-linux-amd64 --runtime-label example.com/max-runtime-seconds -o wide""",
    listed=60,
    source=SourceFlags(selectors=True, fleet=True),
    output=OutputFlags(),
)
def queue_command(
    names: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="[CLUSTERQUEUE]...",
            help="ClusterQueues (an InstanceType's has its name; default: every one).",
            autocompletion=complete_instancetypes,
        ),
    ] = None,
    runtime_label: RuntimeLabelOption = None,
    *,
    source: SourceSpec,
    output: OutputSpec,
) -> None:
    """The pending Workloads in Kueue's order: position, what each asks in its view's unit, whether it would be
    admitted now (by `simulate`), the gate that holds it and an upper bound on its wait — given only where every
    admitted Workload and every one ahead has a runtime bound, and never a guess. With several clusters, each
    cluster's queues (a queue's order is its own cluster's)."""
    from gpuctl.cluster.bulk import bulk_allocation

    queues = [refs.split_name(n, (kinds.CLUSTERQUEUE, kinds.INSTANCETYPE), what="queue")[1] for n in names or []]
    failures: list[tuple[str, str]] = []
    with bulk_allocation():
        if source.fleet:
            per, failures = fleet_read(
                source,
                lambda src: refs.selected_items(queue_items(src, queues, runtime_label), src, kinds.WORKLOAD, source),
            )
            items = [{**i, "cluster": ctx} for ctx, rows in per.items() for i in rows]
        else:
            opened = source.open()
            items = refs.selected_items(queue_items(opened, queues, runtime_label), opened, kinds.WORKLOAD, source)
    render.emit(
        render.Listing(
            "PendingWorkload",
            items,
            COLUMNS,
            _row,
            ref=lambda i: refs.workload(i["namespace"], i["name"]),
            empty="No pending workloads.",
            failures=failures,
        ),
        output,
    )
