"""``gpuctl explain workload|pod|instance`` and ``gpuctl workloads``: which gate holds a workload, and why."""

import os
import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpuctl.cli import refs, render
from gpuctl.cli.completion import complete_instances, complete_instancetypes, complete_pods, complete_workloads
from gpuctl.cli.errors import AnswerNo, RuntimeFailure, UsageError
from gpuctl.cli.options import SourceSpec, output_options, source_options
from gpuctl.cli.render import Column, OutputSpec
from gpuctl.cluster import kinds

if TYPE_CHECKING:
    from gpuctl.cluster.kinds import Kind
    from gpuctl.cluster.read import Source
    from gpuctl.core.explain import Explanation

explain_app = typer.Typer(
    help="Explain which admission gate holds a workload, and why.", no_args_is_help=True, rich_markup_mode=None
)

MARKS = {"passed": "✓", "held": "⏸", "failed": "✗", "not-reached": "·", "not-applicable": "n/a", "unknown": "?"}
PLAIN_MARKS = {
    "passed": "ok",
    "held": "HELD",
    "failed": "FAILED",
    "not-reached": "--",
    "not-applicable": "n/a",
    "unknown": "??",
}
QUIET = ("passed", "not-reached", "not-applicable")
"""Verdicts whose evidence and hint only ``-o wide`` shows."""

ExitCodeOption = Annotated[
    bool, typer.Option("--exit-code", help="Exit 3 when a gate holds the workload (0 when it runs).")
]


def split_name(ref: str, namespace: str, kind: "Kind" = kinds.WORKLOAD) -> tuple[str, str]:
    """``[NAMESPACE/]NAME`` or kubectl's ``<resource>.<group>/NAME`` → (namespace, name); ``namespace`` fills a
    missing one."""
    ns, name = refs.split_name(ref, (kind,), what=f"explain {kind.kind.lower()}")
    return ns or namespace, name


def _name_and_namespace(ref: str, kind: "Kind", source: SourceSpec, opened: "Source") -> tuple[str, str]:
    given, name = refs.split_name(ref, (kind,), what=f"explain {kind.kind.lower()}")
    if given and source.namespace and source.namespace != given:
        raise UsageError(f"{ref!r} names namespace {given} but -n says {source.namespace}: give one")
    return given or source.resolved_namespace(opened), name


def explanation_text(e: "Explanation", *, wide: bool = False, title: str | None = None) -> str:
    fancy = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
    marks = MARKS if fancy else PLAIN_MARKS
    held = e.held_by
    lines = [
        title
        or f"{e.kind} {e.namespace}/{e.name}: "
        + (f"held at gate {held} ({e.gates[held - 1].name})" if held else "runs: every gate passed")
    ]
    for g in e.gates:
        lines.append(f"  {marks[g.verdict]:<6} {g.gate}. {g.name}: {g.summary}")
        for ev in g.evidence if wide or g.verdict not in QUIET else ():
            lines.append(f"           - {ev}")
        if g.hint and g.verdict not in QUIET:
            lines.append(f"           hint: {g.hint}")
    return "\n".join(lines) + "\n"


def _explain_workload(source: "Source", namespace: str, name: str) -> "Explanation":
    from gpuctl.cluster import read
    from gpuctl.cluster.bulk import bulk_allocation
    from gpuctl.core.explain import explain_workload, with_position
    from gpuctl.core.queueing import pending, pending_order, position_of

    with bulk_allocation():
        w = read.workload(source, namespace, name)
        state = read.admission_state(source)
        e = explain_workload(w, state.context_for(w))
        cq = state.cluster_queue_of(w)
        if pending(w) and cq:
            line = pending_order(state.workloads, {x.key: state.cluster_queue_of(x) for x in state.workloads}, cq)
            where = position_of(w, line)
            if where is not None:
                e = with_position(e, cq, where.position, where.total, where.ahead)
        return e


def _finish(e: "Explanation", output: OutputSpec, exit_code: bool, kind: "Kind") -> None:
    render.emit_object(
        e.to_dict(),
        output,
        lambda: explanation_text(e, wide=output.wide),
        ref=refs.ObjectRef(kind, e.name, e.namespace),
    )
    if exit_code and e.held_by is not None:
        raise AnswerNo("")


def explain_workload_command(
    ref: Annotated[
        str, typer.Argument(metavar="[NAMESPACE/]NAME", help="The Workload.", autocompletion=complete_workloads)
    ],
    exit_code: ExitCodeOption = False,
    *,
    source: SourceSpec,
    output: OutputSpec,
) -> None:
    """The five gates for one Workload: passed, held, failed, not reached or unknown, with evidence and a hint."""
    opened = source.open()
    ns, name = _name_and_namespace(ref, kinds.WORKLOAD, source, opened)
    _finish(_explain_workload(opened, ns, name), output, exit_code, kinds.WORKLOAD)


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
    _finish(_as(_explain_workload(opened, ns, workload), "Pod", ns, name), output, exit_code, kinds.POD)


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
    workload = _workload_of_pod(
        opened,
        ns,
        name,
        f"instance {ns}/{name} has no Pod yet (phase {phase}): its Pod is created once InstanceType {spec.get('type', '?')} publishes its detail and entrance",
        f"the Pod of instance {ns}/{name} carries no Kueue Workload annotation yet: Kueue has not picked it up",
    )
    _finish(_as(_explain_workload(opened, ns, workload), "Instance", ns, name), output, exit_code, kinds.INSTANCE)


for _command, _verb in (
    (explain_workload_command, "workload"),
    (explain_pod_command, "pod"),
    (explain_instance_command, "instance"),
):
    explain_app.command(_verb)(source_options(namespace=True)(output_options(sort=False)(_command)))


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
    from gpuctl.core.workloads import Workload

    opened = source.open()
    ns = source.scope(opened)
    pool = refs.object_names([instancetype], kinds.INSTANCETYPE, what="workloads -t")[0] if instancetype else None
    with bulk_allocation():
        chosen = read.selected(
            opened, kinds.WORKLOAD, namespace=ns, label_selector=source.selector, field_selector=source.field_selector
        )
        state = read.admission_state(opened)
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


workloads_command = source_options(namespaced=True, selectors=True)(output_options(labels=True)(workloads_command))
