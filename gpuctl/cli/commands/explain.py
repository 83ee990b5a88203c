"""``gpuctl explain workload|pod|instance`` and ``gpuctl workloads``: which gate holds a workload, and why."""

from typing import TYPE_CHECKING, Annotated

import typer

from gpuctl.cli import refs, render
from gpuctl.cli.errors import AnswerNo, RuntimeFailure, UsageError
from gpuctl.cli.names import complete_instances, complete_pods, complete_workloads
from gpuctl.cli.registry import OutputFlags, SourceFlags, command, group
from gpuctl.cli.render import OutputSpec
from gpuctl.cli.source import SourceSpec
from gpuctl.cli.usecases import explained, explanation_text
from gpuctl.cluster import kinds

if TYPE_CHECKING:
    from gpuctl.cluster.kinds import Kind
    from gpuctl.cluster.read import Source
    from gpuctl.core.explain import Explanation
    from gpuctl.core.history import History

group(
    "explain",
    summary="Explain which admission gate holds a workload.",
    help="Explain which admission gate holds a workload, and why.",
    examples="""
  gpuctl explain workload team-a/train
  gpuctl explain pod train-0 -n team-a
  gpuctl explain instance notebook -n team-a --exit-code""",
    listed=150,
)


ExitCodeOption = Annotated[
    bool, typer.Option("--exit-code", help="Exit 3 when a gate holds the workload (0 when it runs).")
]


def _name_and_namespace(ref: str, kind: "Kind", source: SourceSpec, opened: "Source") -> tuple[str, str]:
    given, name = refs.split_name(ref, (kind,), what=f"explain {kind.kind.lower()}")
    if given and source.namespace and source.namespace != given:
        raise UsageError(f"{ref!r} names namespace {given} but -n says {source.namespace}: give one")
    return given or source.resolved_namespace(opened), name


def _finish(e: "Explanation", output: OutputSpec, exit_code: bool, kind: "Kind") -> None:
    ref = refs.ObjectRef(kind, e.name, e.namespace)
    # The object explained is named as kubectl names objects (apiVersion, kind, metadata) besides the fields of the
    # explanation's contract.
    body = e.to_dict()
    obj = {"apiVersion": kind.api_version, "kind": body.pop("kind"), "metadata": ref.metadata(), **body}
    render.emit_object(obj, output, lambda: explanation_text(e, wide=output.wide), ref=ref)
    if exit_code and e.held_by is not None:
        raise AnswerNo("")


@command(
    "explain workload",
    summary="Explain the five gates for a Workload.",
    examples="""
  # Which gate holds it, with evidence and a hint
  gpuctl explain workload team-a/train
  # In a script: exit 3 while held
  gpuctl explain workload train -n team-a --exit-code -o json""",
    source=SourceFlags(namespace=True),
    output=OutputFlags(sort=False),
)
def explain_workload_command(
    ref: Annotated[
        str, typer.Argument(metavar="[NAMESPACE/]NAME", help="The Workload.", autocompletion=complete_workloads)
    ],
    exit_code: ExitCodeOption = False,
    history: Annotated[
        bool,
        typer.Option(
            "--history",
            help="Also tell what happened since it was submitted: its transitions, Kueue's, the check's and its "
            "Pods' Events, oldest first, with the time spent in each state.",
        ),
    ] = False,
    *,
    source: SourceSpec,
    output: OutputSpec,
) -> None:
    """The five gates for one Workload: passed, held, failed, not reached or unknown, with evidence and a hint.
    With --history, its story from what the cluster keeps (Events expire after the API server's --event-ttl)."""
    opened = source.open()
    ns, name = _name_and_namespace(ref, kinds.WORKLOAD, source, opened)
    e = explained(opened, ns, name)
    if not history:
        _finish(e, output, exit_code, kinds.WORKLOAD)
        return
    story = workload_story(opened, ns, name)
    render.emit_object(
        e.to_dict() | story.to_dict(),
        output,
        lambda: explanation_text(e, wide=output.wide) + history_text(story),
        ref=refs.ObjectRef(kinds.WORKLOAD, e.name, e.namespace),
    )
    if exit_code and e.held_by is not None:
        raise AnswerNo("")


def workload_story(source: "Source", namespace: str, name: str) -> "History":
    """One Workload's history: its conditions, its Pods, and the Events of its namespace about either."""
    import time

    from gpuctl.cluster import read
    from gpuctl.cluster.events import read_events
    from gpuctl.core import naming
    from gpuctl.core.history import parse_event, workload_history
    from gpuctl.core.preemption import PREEMPTOR_UID
    from gpuctl.core.queueing import epoch_seconds

    w = read.workload(source, namespace, name)
    pods = [p for p in read.pods(source, namespace) if p.workload == name]
    events = [parse_event(o) for o in read_events(source, namespace)[0]]
    now = read.taken_at(source)
    if now is None and getattr(source, "is_snapshot", False):
        # A snapshot that does not say when it was taken ends at the newest time it holds.
        seen = [w.created, *(c.last_transition for c in w.conditions.values()), *(ev.last for ev in events)]
        now = max((t for s in seen if s and (t := epoch_seconds(s)) is not None), default=None)
    said = [c.message for c in w.conditions.values()] + [e.note for e in events]
    by_uid = read.workload_uids(source) if any(PREEMPTOR_UID in m for m in said) else {}
    return workload_history(
        w,
        events,
        pods,
        time.time() if now is None else now,
        has_check=w.check(naming.NODE_DEVICES_CHECK) is not None,
        by_uid=by_uid,
    )


def history_text(story: "History") -> str:
    """The story as a person reads it: one line per happening, the summary, and what the record may miss."""
    out = ["", "History (oldest first):"]
    rows = [["TIME", "GATE", "REASON", "MESSAGE"]]
    for line in story.lines:
        message = f"{line.about}: {line.message}" if line.about else line.message
        if line.count > 1:
            message += f" (x{line.count}, last {line.last})"
        rows.append([line.time, str(line.gate) if line.gate else "-", line.reason, message])
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    out += ["  " + "   ".join(r[i].ljust(widths[i]) for i in range(3)) + "   " + r[3] for r in rows]
    out.append(f"Summary: {story.summary}")
    if story.incomplete:
        out.append(f"Incomplete: {story.incomplete}")
    return "\n".join(out) + "\n"


def _as(e: "Explanation", kind: str, namespace: str, name: str) -> "Explanation":
    from gpuctl.core.explain import Explanation as E

    return E(namespace, name, e.gates, kind)


def _workload_of_pod(source: "Source", ns: str, name: str, missing: str, unowned: str) -> str:
    """The Workload a Pod belongs to (its ``kueue.x-k8s.io/workload`` annotation)."""
    from gpuctl.core.pods import parse_pod

    obj = source.get(kinds.POD, name, ns)
    if obj is None:
        raise RuntimeFailure(missing)
    pod = parse_pod(obj)
    if not pod.workload:
        raise RuntimeFailure(unowned)
    return pod.workload


@command(
    "explain pod",
    summary="Explain the gates for a Pod's Workload.",
    examples="""
  gpuctl explain pod train-0 -n team-a""",
    source=SourceFlags(namespace=True),
    output=OutputFlags(sort=False),
)
def explain_pod_command(
    ref: Annotated[str, typer.Argument(metavar="[NAMESPACE/]NAME", help="The Pod.", autocompletion=complete_pods)],
    exit_code: ExitCodeOption = False,
    *,
    source: SourceSpec,
    output: OutputSpec,
) -> None:
    """The gates for the Workload a Pod belongs to (its ``kueue.x-k8s.io/workload`` annotation)."""
    opened = source.open()
    ns, name = _name_and_namespace(ref, kinds.POD, source, opened)
    workload = _workload_of_pod(
        opened,
        ns,
        name,
        f'pod "{ns}/{name}" not found in {opened.describe()}',
        f"pod {ns}/{name} belongs to no Kueue Workload (no kueue.x-k8s.io/workload annotation): the gates do not apply to it",
    )
    _finish(_as(explained(opened, ns, workload), "Pod", ns, name), output, exit_code, kinds.POD)


@command(
    "explain instance",
    summary="Explain the gates for an Instance's Workload.",
    examples="""
  gpuctl explain instance notebook -n team-a""",
    source=SourceFlags(namespace=True),
    output=OutputFlags(sort=False),
)
def explain_instance_command(
    ref: Annotated[
        str, typer.Argument(metavar="[NAMESPACE/]NAME", help="The Instance.", autocompletion=complete_instances)
    ],
    exit_code: ExitCodeOption = False,
    *,
    source: SourceSpec,
    output: OutputSpec,
) -> None:
    """The gates for an Instance: its Pod (same name) and that Pod's Workload."""
    opened = source.open()
    ns, name = _name_and_namespace(ref, kinds.INSTANCE, source, opened)
    instance = opened.get(kinds.INSTANCE, name, ns)
    if instance is None:
        raise RuntimeFailure(f'instance "{ns}/{name}" not found in {opened.describe()}')
    spec = instance.get("spec") or {}
    phase = (instance.get("status") or {}).get("phase", "unknown")
    if spec.get("stop"):
        raise RuntimeFailure(
            f"instance {ns}/{name} is stopped (spec.stop=true, phase {phase}): `gpuctl instance start {name} -n {ns}` starts it"
        )
    from gpuctl.core.instances import why_no_pod
    from gpuctl.core.instancetypes import parse_instancetype
    from gpuctl.core.workloads import parse_conditions

    type_name = str(spec.get("type") or "?")
    raw_type = opened.get(kinds.INSTANCETYPE, type_name) if spec.get("type") else None
    notes = [
        f"{c.type}={c.status}: {c.message}"
        for c in parse_conditions((instance.get("status") or {}).get("conditions")).values()
        if c.message
    ]
    workload = _workload_of_pod(
        opened,
        ns,
        name,
        f"instance {ns}/{name}: "
        + why_no_pod(type_name, parse_instancetype(raw_type) if raw_type else None, phase, notes),
        f"the Pod of instance {ns}/{name} carries no Kueue Workload annotation yet: Kueue has not picked it up",
    )
    _finish(_as(explained(opened, ns, workload), "Instance", ns, name), output, exit_code, kinds.INSTANCE)
