"""``gpuctl instance list|stop|start``."""

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpuctl.cli import refs, render
from gpuctl.cli.errors import UsageError
from gpuctl.cli.names import complete_instances, complete_instancetypes
from gpuctl.cli.registry import OutputFlags, SourceFlags, command, group
from gpuctl.cli.render import Column, OutputSpec
from gpuctl.cli.source import SourceSpec
from gpuctl.cli.writes import DryRunOption, YesOption, announce_matched, confirm_bulk, dry_run_mode, report

if TYPE_CHECKING:
    from gpuctl.cluster.live import LiveSource
    from gpuctl.cluster.read import Source
    from gpuctl.core.lifecycle import PatchPlan

group(
    "instance",
    summary="List, stop and start Instances.",
    help="List, stop and start Instances.",
    examples="""
  gpuctl instance list -A
  gpuctl instance stop notebook -n team-a""",
    listed=180,
)


COLUMNS = (
    Column("NAMESPACE"),
    Column("NAME"),
    Column("TYPE"),
    Column("PHASE"),
    Column("NODE"),
    Column("STOP"),
    Column("MESSAGE", wide_only=True),
)
TypeOption = Annotated[
    str | None,
    typer.Option(
        "--instancetype",
        "-t",
        help="Only the Instances of this InstanceType.",
        show_default=False,
        autocompletion=complete_instancetypes,
    ),
]


def _select(
    opened: "Source",
    source: SourceSpec,
    names: list[str],
    instancetype: str | None,
    everything: bool,
) -> list[dict[str, Any]]:
    from gpuctl.cluster import kinds
    from gpuctl.cluster.read import not_found

    ns = source.scope(opened)
    if instancetype:  # NAME or kubectl's instancetype.worker.gpustack.ai/NAME
        instancetype = refs.object_names([instancetype], kinds.INSTANCETYPE, what="--instancetype")[0]
    objs = opened.list(
        kinds.INSTANCE, namespace=ns, label_selector=source.selector, field_selector=source.field_selector
    )
    if names:
        by_name = {(o.get("metadata") or {}).get("name"): o for o in objs}
        missing = [n for n in names if n not in by_name]
        if missing:
            raise not_found("instance", missing[0], sorted(str(k) for k in by_name), opened.describe())
        return [by_name[n] for n in dict.fromkeys(names)]
    if instancetype:
        return [o for o in objs if (o.get("spec") or {}).get("type") == instancetype]
    if source.selects or everything:
        return objs
    return []


def _row(o: dict[str, Any]) -> list[str]:
    meta, spec, status = o.get("metadata") or {}, o.get("spec") or {}, o.get("status") or {}
    return [
        str(meta.get("namespace", "")),
        str(meta.get("name", "")),
        str(spec.get("type", "")),
        str(status.get("phase") or "<unknown>"),
        str(status.get("nodeName") or "<none>"),
        "true" if spec.get("stop") else "false",
        str(status.get("phaseMessage") or ""),
    ]


@command(
    "instance list",
    summary="List Instances with their type, phase and node.",
    examples="""
  gpuctl instance list -A
  gpuctl instance list -t gpustack--nvidia-a10g-linux-amd64 -n team-a --show-labels""",
    source=SourceFlags(namespaced=True, selectors=True),
    output=OutputFlags(labels=True),
)
def list_command(instancetype: TypeOption = None, *, source: SourceSpec, output: OutputSpec) -> None:
    """Instances with their type, phase and node."""
    from gpuctl.cluster import kinds

    opened = source.open()
    objs = _select(opened, source, [], instancetype, everything=True)
    objs.sort(key=lambda x: ((x.get("metadata") or {}).get("namespace", ""), (x.get("metadata") or {}).get("name", "")))
    ns = source.scope(opened)
    render.emit(
        render.Listing(
            "Instance",
            objs,
            COLUMNS,
            _row,
            ref=lambda o: refs.of_object(kinds.INSTANCE, o),
            api_version="v1",
            empty=f"No instances found {'in any namespace' if ns is None else f'in namespace {ns}'}.",
        ),
        output,
    )


def _running_instance_stop(source: "LiveSource", instances: list[dict[str, Any]]) -> dict[str, bool]:
    """Per InstanceType of these Instances: whether the running-instance stop applies (the type is gone or being
    deleted, or its queue drains), which may stop an Instance that is still ``Starting``."""
    from gpuctl.cluster import kinds
    from gpuctl.core.instancetypes import parse_instancetype
    from gpuctl.core.lifecycle import should_stop_instance

    out = {}
    for name in sorted({str((o.get("spec") or {}).get("type") or "") for o in instances} - {""}):
        raw = source.get(kinds.INSTANCETYPE, name)
        queue = source.get(kinds.CLUSTERQUEUE, name) if raw is not None else None
        it = parse_instancetype(raw) if raw is not None else None
        policy = str(((queue or {}).get("spec") or {}).get("stopPolicy") or "None")
        out[name] = should_stop_instance(it is not None, bool(it and it.deleting), policy).stop
    return out


def _change(
    stop: bool,
    names: list[str],
    instancetype: str | None,
    everything: bool,
    dry_run: str,
    yes: bool,
    source: SourceSpec,
    output: OutputSpec,
) -> None:
    from gpuctl.cluster import kinds
    from gpuctl.cluster.writer import apply_plan
    from gpuctl.core.lifecycle import PatchPlan, plan_stop

    if not (names or instancetype or source.selects or everything):
        raise UsageError("name the instances: NAME..., --instancetype T, -l/--field-selector SELECTOR or --all")
    if names and (instancetype or source.selects or everything):
        raise UsageError("give names, or one of --instancetype, -l/--field-selector, --all; not both")
    mode = dry_run_mode(dry_run)
    live = source.live()
    chosen = _select(live, source, _names(names, source, live), instancetype, everything)
    if not chosen:
        typer.echo("no instance matched; nothing to change")
        return
    if not names:  # chosen by a selection, not one by one: say which, and confirm several
        announce_matched([refs.of_object(kinds.INSTANCE, o) for o in chosen], _how(source, instancetype, everything))
        confirm_bulk(len(chosen), "stop" if stop else "start", yes or mode.value != "none")
    plan: Callable[[dict[str, Any]], PatchPlan] = _start
    if stop:
        stoppable = _running_instance_stop(live, chosen)

        def plan(obj: dict[str, Any]) -> PatchPlan:
            return plan_stop(obj, running_instance_stop=stoppable.get(str((obj.get("spec") or {}).get("type")), False))

    outcomes = [
        apply_plan(
            live,
            kinds.INSTANCE,
            str(o["metadata"]["name"]),
            str(o["metadata"].get("namespace") or "default"),
            plan,
            mode,
        )
        for o in chosen
    ]
    report(outcomes, output)


def _names(names: list[str], source: SourceSpec, opened: "Source") -> list[str]:
    """Instance names given as NAME, NAMESPACE/NAME or kubectl's ``instance.worker.gpustack.ai/NAME``, all in the
    namespace the command works in."""
    from gpuctl.cluster import kinds

    out = []
    for text in names:
        ns, name = refs.split_name(text, (kinds.INSTANCE,), what="instance")
        if ns is not None and ns != source.scope(opened):
            raise UsageError(f"{text!r} names namespace {ns}, but this works in {source.scope(opened)}: give -n {ns}")
        out.append(name)
    return out


def _how(source: SourceSpec, instancetype: str | None, everything: bool) -> str:
    parts = [f"-l {source.selector}"] if source.selector else []
    parts += [f"--field-selector {source.field_selector}"] if source.field_selector else []
    parts += [f"--instancetype {instancetype}"] if instancetype else []
    return " ".join(parts) or ("--all" if everything else "")


def _start(instance: dict[str, Any]) -> "PatchPlan":
    """Start from Stopped; an Instance still on its way there is refused with its phase and what to wait for."""
    from gpuctl.core.lifecycle import PlanRefused, plan_start

    try:
        return plan_start(instance)
    except PlanRefused as exc:
        meta = instance.get("metadata") or {}
        ns, name = meta.get("namespace") or "default", meta.get("name")
        phase = (instance.get("status") or {}).get("phase") or "without a phase yet"
        raise PlanRefused(
            f"{exc}: instance {ns}/{name} is {phase}; spec.stop=true is set and the worker is stopping it (its Pod is"
            f" deleted first) — start it once its phase is Stopped (`gpuctl instance list -n {ns}` shows it)"
        ) from None


def _change_command(stop: bool) -> Callable[..., None]:
    verb = "stop" if stop else "start"

    def change(
        names: Annotated[
            list[str] | None,
            typer.Argument(
                metavar="[NAME]...",
                help="The Instances, by name.",
                show_default=False,
                autocompletion=complete_instances,
            ),
        ] = None,
        instancetype: TypeOption = None,
        everything: Annotated[
            bool, typer.Option("--all", help="Every Instance of the namespace (or of all with -A).")
        ] = False,
        dry_run: DryRunOption = "none",
        yes: YesOption = False,
        *,
        source: SourceSpec,
        output: OutputSpec,
    ) -> None:
        _change(stop, names or [], instancetype, everything, dry_run, yes, source, output)

    change.__doc__ = (
        "Stop Instances (spec.stop=true): their Pods are deleted, phase Stopping → Stopped. Refused while Starting,"
        " unless the instance's pool is draining or its type is being deleted or gone."
        if stop
        else "Start stopped Instances (spec.stop=false); only an Instance in phase Stopped can start."
    )
    change.__name__ = f"{verb}_command"
    return change


command(
    "instance stop",
    summary="Stop Instances.",
    examples="""
  gpuctl instance stop notebook -n team-a
  gpuctl instance stop --instancetype gpustack--nvidia-a10g-linux-amd64 -n team-a --yes --dry-run=client""",
    source=SourceFlags(namespaced=True, selectors=True),
    output=OutputFlags(sort=False),
)(_change_command(True))
command(
    "instance start",
    summary="Start stopped Instances.",
    examples="""
  gpuctl instance start notebook -n team-a""",
    source=SourceFlags(namespaced=True, selectors=True),
    output=OutputFlags(sort=False),
)(_change_command(False))
