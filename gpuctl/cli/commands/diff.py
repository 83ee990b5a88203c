"""``gpuctl diff A B``: what changed between two snapshots (either may be ``live``, the current cluster)."""

from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpuctl.cli import render
from gpuctl.cli.errors import AnswerNo
from gpuctl.cli.registry import OutputFlags, SourceFlags, command
from gpuctl.cli.render import Column, OutputSpec
from gpuctl.cli.source import SourceSpec

if TYPE_CHECKING:
    from gpuctl.cli.refs import ObjectRef
    from gpuctl.cluster.read import Source
    from gpuctl.core.diff import WorkloadState
    from gpuctl.core.history import EventRecord
    from gpuctl.core.shadow import Disagreement

LIVE = "live"
COLUMNS = (Column("KIND"), Column("NAME"), Column("TIME"), Column("CHANGE"))


def _open(side: str, source: SourceSpec) -> "Source":
    """A snapshot path, or ``live`` for the cluster the connection flags name."""
    from gpuctl.cluster.snapshot import SnapshotSource

    if side == LIVE:
        return source.live()
    return SnapshotSource(side)


def _workload_states(opened: "Source") -> dict[str, "WorkloadState"]:
    from gpuctl.cluster import read
    from gpuctl.core.diff import WorkloadState
    from gpuctl.core.explain import explain_workload

    state = read.admission_state(opened)
    out = {}
    for w in state.workloads:
        phase = (
            "finished"
            if w.finished
            else "evicted"
            if w.evicted
            else "admitted"
            if w.admitted
            else "reserved"
            if w.quota_reserved
            else "pending"
        )
        e = explain_workload(w, state.context_for(w))
        held = e.held_by if phase != "finished" else None
        out[w.key] = WorkloadState(phase, held, e.gates[held - 1].summary if held else "")
    return out


def _cards(opened: "Source") -> dict[tuple[str, str], str]:
    from gpuctl.cluster import read

    return {
        (d.node, c.id): ("unhealthy" if c.unhealthy else c.mode.name.lower())
        for d in read.devices(opened)
        for g in d.groups
        for c in g.cards
    }


def _views(opened: "Source") -> dict[str, dict[str, Any]]:
    from gpuctl.cli.usecases import compute_items, public

    return {i["name"]: public(i) for i in compute_items(opened, [], None)}


def _disagreements(opened: "Source") -> list["Disagreement"]:
    from gpuctl.cli.usecases import disagreements

    return disagreements(opened)


def _events(opened: "Source") -> dict[tuple[str, str], "EventRecord"]:
    from gpuctl.cluster.events import read_events
    from gpuctl.core.history import parse_event

    return {(e.namespace, e.name): e for e in map(parse_event, read_events(opened)[0])}


def _ref(change: dict[str, Any]) -> "ObjectRef":
    """The object a change is about: a pool's InstanceType, a Workload, a card's Devices, the object a disagreement
    is about."""
    from gpuctl.cli import refs
    from gpuctl.cluster import kinds

    if change["kind"] == "Disagreement":
        return _disagreement_ref(str(change["name"]))
    head, _, tail = str(change["name"]).partition("/")
    if change["kind"] == "Workload":
        return refs.workload(head, tail)
    if change["kind"] == "Card":
        return refs.devices(head)
    if change["kind"] == "Event":
        return refs.ObjectRef(kinds.EVENT, tail, head)
    return refs.instancetype(head)


def _disagreement_ref(name: str) -> "ObjectRef":
    """``Kind/[namespace/]name``, as a disagreement names its object."""
    from gpuctl.cli import refs
    from gpuctl.cluster import kinds

    kind_name, _, rest = name.partition("/")
    namespace, _, obj = rest.rpartition("/")
    kind = {"InstanceType": kinds.INSTANCETYPE, "Workload": kinds.WORKLOAD, "Node": kinds.NODE}.get(
        kind_name, kinds.INSTANCE
    )
    return refs.ObjectRef(kind, obj, namespace or None)


@command(
    "diff",
    summary="Show what changed between two snapshots, or a snapshot and the cluster.",
    examples="""
  # What happened between 02:00 and 02:30
  gpuctl dump ./at-0200 && sleep 1800 && gpuctl dump ./at-0230
  gpuctl diff ./at-0200 ./at-0230

  # A ticket's snapshot against the cluster now, as JSON
  gpuctl diff ./ticket-4711 live -o json""",
    listed=70,
    source=SourceFlags(),
    output=OutputFlags(),
)
def diff_command(
    before: Annotated[str, typer.Argument(metavar="A", help="A snapshot (file or directory), or 'live'.")],
    after: Annotated[str, typer.Argument(metavar="B", help="A snapshot (file or directory), or 'live'.")],
    exit_code: Annotated[bool, typer.Option("--exit-code", help="Exit 3 when anything changed.")] = False,
    *,
    source: SourceSpec,
    output: OutputSpec,
) -> None:
    """What changed between two reads of a cluster: each pool's views (EX/SH/SL/PT/CPU, before → after), Workloads
    admitted, evicted, finished or newly held (with the gate), cards whose mode changed, figures the cluster
    publishes otherwise than gpuctl computes them (appeared, changed, resolved: both values and why), and the Events
    recorded in between (new, or a series that grew)."""
    from gpuctl.cluster.bulk import bulk_allocation
    from gpuctl.core.diff import card_changes, disagreement_changes, event_changes, view_changes, workload_changes

    with bulk_allocation():
        a, b = _open(before, source), _open(after, source)
        changes = [
            *view_changes(_views(a), _views(b)),
            *workload_changes(_workload_states(a), _workload_states(b)),
            *card_changes(_cards(a), _cards(b)),
            *disagreement_changes(_disagreements(a), _disagreements(b)),
            *event_changes(_events(a), _events(b)),
        ]
    render.emit(
        render.Listing(
            "Change",
            [c.to_dict() for c in changes],
            COLUMNS,
            lambda i: [i["kind"], i["name"], i.get("time") or "-", i["change"]],
            ref=_ref,
            empty="No differences.",
            extra={"metadata": {"before": before, "after": after}},
        ),
        output,
    )
    if exit_code and changes:
        raise AnswerNo("")
