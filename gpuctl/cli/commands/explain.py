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
    render.emit_object(
        e.to_dict(),
        output,
        lambda: explanation_text(e, wide=output.wide),
        ref=refs.ObjectRef(kind, e.name, e.namespace),
    )
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
    *,
    source: SourceSpec,
    output: OutputSpec,
) -> None:
    """The five gates for one Workload: passed, held, failed, not reached or unknown, with evidence and a hint."""
    opened = source.open()
    ns, name = _name_and_namespace(ref, kinds.WORKLOAD, source, opened)
    _finish(explained(opened, ns, name), output, exit_code, kinds.WORKLOAD)


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
    workload = _workload_of_pod(
        opened,
        ns,
        name,
        f"instance {ns}/{name} has no Pod yet (phase {phase}): its Pod is created once InstanceType {spec.get('type', '?')} publishes its detail and entrance",
        f"the Pod of instance {ns}/{name} carries no Kueue Workload annotation yet: Kueue has not picked it up",
    )
    _finish(_as(explained(opened, ns, workload), "Instance", ns, name), output, exit_code, kinds.INSTANCE)
