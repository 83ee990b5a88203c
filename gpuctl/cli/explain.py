"""``gpuctl explain workload|pod|instance`` and ``gpuctl workloads``: which gate holds a workload, and why."""

from typing import TYPE_CHECKING, Annotated

import typer

from gpuctl.cli import render
from gpuctl.cli.errors import EXIT_NO, UsageError, user_errors
from gpuctl.cli.options import (
    AllNamespacesOption,
    ContextOption,
    KubeconfigOption,
    NamespaceOption,
    NoHeadersOption,
    OutputOption,
    SnapshotOption,
    TimeoutOption,
    open_source,
)
from gpuctl.cli.render import Column, Output

if TYPE_CHECKING:
    from gpuctl.cluster.read import Source
    from gpuctl.core.explain import Explanation
    from gpuctl.core.workloads import Workload

explain_app = typer.Typer(
    help="Explain which admission gate holds a workload, and why.", no_args_is_help=True, rich_markup_mode=None
)

MARKS = {"passed": "✓", "held": "⏸", "failed": "✗", "not-reached": "·", "unknown": "?"}
PLAIN_MARKS = {"passed": "ok", "held": "HELD", "failed": "FAILED", "not-reached": "--", "unknown": "??"}

ExitCodeOption = Annotated[
    bool, typer.Option("--exit-code", help="Exit 3 when a gate holds the workload (0 when it runs).")
]


def split_name(ref: str, namespace: str | None) -> tuple[str, str]:
    """``[NAMESPACE/]NAME`` → (namespace, name); -n fills a missing namespace, ``default`` otherwise."""
    if "/" in ref:
        ns, _, name = ref.partition("/")
        if not ns or not name or "/" in name:
            raise UsageError(f"{ref!r}: use NAME or NAMESPACE/NAME")
        if namespace and namespace != ns:
            raise UsageError(f"{ref!r} names namespace {ns} but -n says {namespace}: give one")
        return ns, name
    return namespace or "default", ref


def render_explanation(e: "Explanation", output: Output, *, title: str | None = None) -> None:
    if output is Output.JSON:
        render.print_json(e.to_dict())
        return
    if output is Output.YAML:
        render.print_yaml(e.to_dict())
        return
    if output is Output.NAME:
        render.print_names(e.kind.lower(), [f"{e.namespace}/{e.name}"])
        return
    import os
    import sys

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
        for ev in g.evidence if output is Output.WIDE or g.verdict != "passed" else ():
            lines.append(f"           - {ev}")
        if g.hint and g.verdict not in ("passed", "not-reached"):
            lines.append(f"           hint: {g.hint}")
    sys.stdout.write("\n".join(lines) + "\n")


def _explain_workload(source: "Source", namespace: str, name: str) -> "Explanation":
    from gpuctl.cluster import read
    from gpuctl.cluster.bulk import bulk_allocation
    from gpuctl.core.explain import explain_workload

    with bulk_allocation():
        w = read.workload(source, namespace, name)
        return explain_workload(w, read.admission_state(source).context_for(w))


def _finish(e: "Explanation", output: Output, exit_code: bool) -> None:
    render_explanation(e, output)
    if exit_code and e.held_by is not None:
        raise typer.Exit(EXIT_NO)


@explain_app.command("workload")
@user_errors
def explain_workload_command(
    ref: Annotated[str, typer.Argument(metavar="[NAMESPACE/]NAME", help="The Workload.")],
    namespace: NamespaceOption = None,
    output: OutputOption = Output.TABLE,
    exit_code: ExitCodeOption = False,
    snapshot: SnapshotOption = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    request_timeout: TimeoutOption = None,
) -> None:
    """The five gates for one Workload: passed, held, failed, not reached or unknown, with evidence and a hint."""
    ns, name = split_name(ref, namespace)
    _finish(_explain_workload(open_source(snapshot, kubeconfig, context, request_timeout), ns, name), output, exit_code)


def _as(e: "Explanation", kind: str, namespace: str, name: str) -> "Explanation":
    from gpuctl.core.explain import Explanation as E

    return E(namespace, name, e.gates, kind)


def _workload_of_pod(source: "Source", ns: str, name: str, missing: str, unowned: str) -> str:
    """The Workload a Pod belongs to (its ``kueue.x-k8s.io/workload`` annotation)."""
    from gpuctl.cluster import kinds
    from gpuctl.cluster.errors import SourceError
    from gpuctl.core.pods import parse_pod

    obj = source.get(kinds.POD, name, ns)
    if obj is None:
        raise SourceError(missing)
    pod = parse_pod(obj)
    if not pod.workload:
        raise SourceError(unowned)
    return pod.workload


@explain_app.command("pod")
@user_errors
def explain_pod_command(
    ref: Annotated[str, typer.Argument(metavar="[NAMESPACE/]NAME", help="The Pod.")],
    namespace: NamespaceOption = None,
    output: OutputOption = Output.TABLE,
    exit_code: ExitCodeOption = False,
    snapshot: SnapshotOption = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    request_timeout: TimeoutOption = None,
) -> None:
    """The gates for the Workload a Pod belongs to (its ``kueue.x-k8s.io/workload`` annotation)."""
    ns, name = split_name(ref, namespace)
    source = open_source(snapshot, kubeconfig, context, request_timeout)
    workload = _workload_of_pod(
        source,
        ns,
        name,
        f'pod "{ns}/{name}" not found in {source.describe()}',
        f"pod {ns}/{name} belongs to no Kueue Workload (no kueue.x-k8s.io/workload annotation): the gates do not apply to it",
    )
    _finish(_as(_explain_workload(source, ns, workload), "Pod", ns, name), output, exit_code)


@explain_app.command("instance")
@user_errors
def explain_instance_command(
    ref: Annotated[str, typer.Argument(metavar="[NAMESPACE/]NAME", help="The Instance.")],
    namespace: NamespaceOption = None,
    output: OutputOption = Output.TABLE,
    exit_code: ExitCodeOption = False,
    snapshot: SnapshotOption = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    request_timeout: TimeoutOption = None,
) -> None:
    """The gates for an Instance: its Pod (same name) and that Pod's Workload."""
    from gpuctl.cluster import kinds
    from gpuctl.cluster.errors import SourceError

    ns, name = split_name(ref, namespace)
    source = open_source(snapshot, kubeconfig, context, request_timeout)
    instance = source.get(kinds.INSTANCE, name, ns)
    if instance is None:
        raise SourceError(f'instance "{ns}/{name}" not found in {source.describe()}')
    spec = instance.get("spec") or {}
    phase = (instance.get("status") or {}).get("phase", "unknown")
    if spec.get("stop"):
        raise SourceError(
            f"instance {ns}/{name} is stopped (spec.stop=true, phase {phase}): `gpuctl instance start {name} -n {ns}` starts it"
        )
    workload = _workload_of_pod(
        source,
        ns,
        name,
        f"instance {ns}/{name} has no Pod yet (phase {phase}): its Pod is created once InstanceType {spec.get('type', '?')} publishes its detail and entrance",
        f"the Pod of instance {ns}/{name} carries no Kueue Workload annotation yet: Kueue has not picked it up",
    )
    _finish(_as(_explain_workload(source, ns, workload), "Instance", ns, name), output, exit_code)


WORKLOAD_COLUMNS = (
    Column("NAMESPACE"),
    Column("NAME"),
    Column("QUEUE"),
    Column("CLUSTERQUEUE"),
    Column("HELD-BY"),
    Column("SUMMARY"),
    Column("HINT", wide_only=True),
)


@user_errors
def workloads_command(
    namespace: NamespaceOption = None,
    all_namespaces: AllNamespacesOption = False,
    instancetype: Annotated[
        str | None,
        typer.Option(
            "--instancetype", "-t", help="Only the Workloads of this pool (its ClusterQueue).", show_default=False
        ),
    ] = None,
    held: Annotated[bool, typer.Option("--held", help="Only Workloads some gate holds.")] = False,
    output: OutputOption = Output.TABLE,
    no_headers: NoHeadersOption = False,
    snapshot: SnapshotOption = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    request_timeout: TimeoutOption = None,
) -> None:
    """List Workloads with the gate that holds each one."""
    from gpuctl.cluster import read
    from gpuctl.cluster.bulk import bulk_allocation
    from gpuctl.core.explain import explain_workload

    if namespace and all_namespaces:
        raise UsageError("-n and -A are exclusive: pick one")
    source = open_source(snapshot, kubeconfig, context, request_timeout)
    with bulk_allocation():
        state = read.admission_state(source)
        ns = None if all_namespaces or instancetype else (namespace or "default")
        results: list[tuple[Workload, Explanation]] = []
        for w in state.workloads:
            if (ns is not None and w.namespace != ns) or (instancetype and state.cluster_queue_of(w) != instancetype):
                continue
            e = explain_workload(w, state.context_for(w))
            if held and e.held_by is None:
                continue
            results.append((w, e))
    if output in (Output.JSON, Output.YAML):
        data = {"items": [e.to_dict() | {"queue": w.queue_name, "clusterQueue": w.cluster_queue} for w, e in results]}
        (render.print_json if output is Output.JSON else render.print_yaml)(data)
        return
    if output is Output.NAME:
        render.print_names("workload", [f"{w.namespace}/{w.name}" for w, _ in results])
        return
    rows = []
    for w, e in results:
        gate = e.gates[e.held_by - 1] if e.held_by else None
        rows.append(
            [
                w.namespace,
                w.name,
                w.queue_name,
                w.cluster_queue or "<none>",
                f"{e.held_by} {gate.name}" if gate else "-",
                gate.summary if gate else "running",
                gate.hint if gate and gate.hint else "-",
            ]
        )
    render.print_table(WORKLOAD_COLUMNS, rows, wide=output is Output.WIDE, no_headers=no_headers)
