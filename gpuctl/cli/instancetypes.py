"""``gpuctl instancetype create|apply|rename|describe|list|deactivate|activate|delete``."""

import sys
import time
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpuctl.cli import render
from gpuctl.cli.errors import EXIT_RUNTIME, EXIT_USAGE, UsageError, user_errors
from gpuctl.cli.options import (
    ContextOption,
    KubeconfigOption,
    NoHeadersOption,
    OutputOption,
    SelectorOption,
    SnapshotOption,
    TimeoutOption,
    open_source,
)
from gpuctl.cli.render import Column, Output
from gpuctl.cli.writes import DryRunOption, apply_to_instancetype, dry_run_mode, live_source, report

if TYPE_CHECKING:
    pass

instancetype_app = typer.Typer(
    help="Create, freeze, rename, deactivate and delete InstanceTypes.", no_args_is_help=True, rich_markup_mode=None
)
NameArgument = Annotated[str, typer.Argument(metavar="NAME", help="The InstanceType.")]
LIST_COLUMNS = (
    Column("NAME"),
    Column("DISPLAY"),
    Column("ACCELERATOR-GROUP"),
    Column("OS/ARCH"),
    Column("UNIT(CPU/RAM)/STORAGE"),
    Column("INACTIVE"),
    Column("PHASE"),
    Column("ENTRANCE", wide_only=True),
)
FREEZE_WAY_OUT = "the spec is frozen after create except displayName and inactive: create a new InstanceType and move the instances to it (spec.type)"


def _refuse(message: str) -> None:
    render.error(message)
    raise typer.Exit(EXIT_USAGE)


def manifest_from_flags(
    name: str,
    accelerator_group: str | None,
    cpu_only: bool,
    os: str,
    arch: str,
    unit_cpu: str | None,
    unit_ram: str | None,
    local_storage: str,
    display_name: str | None,
    description: str | None,
) -> dict[str, Any]:
    if cpu_only and accelerator_group:
        raise UsageError("--cpu-only and --accelerator-group are exclusive: a CPU-only type names no accelerator group")
    if not cpu_only and not accelerator_group:
        raise UsageError("give --accelerator-group GROUP (e.g. nvidia-a10g) or --cpu-only")
    spec: dict[str, Any] = {
        "acceleratable": not cpu_only,
        "os": os,
        "arch": arch,
        "unitResources": {"cpu": unit_cpu or ("1" if cpu_only else ""), "ram": unit_ram or ""},
        "localStorage": local_storage,
    }
    if accelerator_group:
        spec["acceleratorGroup"] = accelerator_group
    if display_name:
        spec["displayName"] = display_name
    if description:
        spec["description"] = description
    return {
        "apiVersion": "worker.gpustack.ai/v1alpha1",
        "kind": "InstanceType",
        "metadata": {"name": name},
        "spec": spec,
    }


def _reviewed(obj: dict[str, Any], operation: str, old: dict[str, Any] | None) -> dict[str, Any]:
    """The object as the webhooks would store it; refuse here what they would refuse there."""
    from gpuctl.core.webhooks import Kind, WebhookContext, review

    result = review(Kind.INSTANCETYPE, operation, obj, old, WebhookContext())
    if not result.allowed or result.mutated is None:
        _refuse(
            f"instancetype/{(obj.get('metadata') or {}).get('name')}: {result.message}"
            + (f"; {FREEZE_WAY_OUT}" if "immutable" in (result.message or "") else "")
        )
    assert result.mutated is not None
    return result.mutated


@instancetype_app.command("create")
@user_errors
def create_command(
    name: Annotated[
        str | None,
        typer.Argument(metavar="[NAME]", help="The InstanceType (from -f when omitted).", show_default=False),
    ] = None,
    filename: Annotated[
        str | None, typer.Option("--filename", "-f", help="Create from a manifest (YAML/JSON).", show_default=False)
    ] = None,
    accelerator_group: Annotated[
        str | None,
        typer.Option("--accelerator-group", help="The accelerator node key, e.g. nvidia-a10g.", show_default=False),
    ] = None,
    cpu_only: Annotated[bool, typer.Option("--cpu-only", help="A CPU-only type (unit CPU is 1).")] = False,
    os: Annotated[str, typer.Option("--os", help="kubernetes.io/os of the pool.")] = "linux",
    arch: Annotated[str, typer.Option("--arch", help="kubernetes.io/arch of the pool.")] = "amd64",
    unit_cpu: Annotated[
        str | None, typer.Option("--unit-cpu", help="Cores per unit (a whole number).", show_default=False)
    ] = None,
    unit_ram: Annotated[
        str | None, typer.Option("--unit-ram", help="RAM per unit, e.g. 64Gi.", show_default=False)
    ] = None,
    local_storage: Annotated[str, typer.Option("--local-storage", help="Local storage, e.g. 100Gi.")] = "100Gi",
    display_name: Annotated[
        str | None, typer.Option("--display-name", help="A display name.", show_default=False)
    ] = None,
    description: Annotated[str | None, typer.Option("--description", help="A description.", show_default=False)] = None,
    dry_run: DryRunOption = "none",
    output: OutputOption = Output.TABLE,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    request_timeout: TimeoutOption = None,
) -> None:
    """Create an InstanceType, validated here as the webhook validates it before anything is sent."""
    from gpuctl.cli.webhook import WebhookKind, read_manifest
    from gpuctl.cluster import kinds

    if filename:
        obj = read_manifest(filename, WebhookKind.INSTANCETYPE)
        if name and name != (obj.get("metadata") or {}).get("name"):
            raise UsageError(f"NAME {name} differs from the manifest's metadata.name: give one")
    else:
        if not name:
            raise UsageError("give NAME and flags, or -f FILE")
        obj = manifest_from_flags(
            name, accelerator_group, cpu_only, os, arch, unit_cpu, unit_ram, local_storage, display_name, description
        )
    stored = _reviewed(obj, "CREATE", None)
    mode = dry_run_mode(dry_run)
    target = f"instancetype/{stored['metadata']['name']}"
    if mode.value == "client":
        _show(stored, output, f"{target} would be created (client dry run: nothing sent)")
        return
    source = live_source(kubeconfig, context, request_timeout)
    if source.get(kinds.INSTANCETYPE, stored["metadata"]["name"]) is not None:
        _refuse(f"{target} already exists; `gpuctl instancetype apply -f FILE` changes its mutable fields")
    created = source.create(kinds.INSTANCETYPE, obj, dry_run=mode.value == "server")
    _show(
        created, output, f"{target} created" + (" (server dry run: nothing stored)" if mode.value == "server" else "")
    )


def _show(obj: dict[str, Any], output: Output, sentence: str) -> None:
    if output is Output.JSON:
        render.print_json(obj)
    elif output is Output.YAML:
        render.print_yaml(obj)
    elif output is Output.NAME:
        render.print_names("instancetype", [obj["metadata"]["name"]])
    else:
        typer.echo(sentence)


@instancetype_app.command("apply")
@user_errors
def apply_command(
    filename: Annotated[str, typer.Option("--filename", "-f", help="The manifest (YAML/JSON).")],
    dry_run: DryRunOption = "none",
    output: OutputOption = Output.TABLE,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    request_timeout: TimeoutOption = None,
) -> None:
    """Create the InstanceType, or change its mutable fields (displayName, inactive).

    A change to a frozen field is refused here, before it reaches the server.
    """
    from gpuctl.cli.webhook import WebhookKind, read_manifest
    from gpuctl.cluster import kinds
    from gpuctl.cluster.writer import apply_plan
    from gpuctl.core.instancetype_rules import MUTABLE_SPEC_FIELDS
    from gpuctl.core.lifecycle import PatchPlan, plan_instancetype_spec

    mode = dry_run_mode(dry_run)
    obj = read_manifest(filename, WebhookKind.INSTANCETYPE)
    name = str((obj.get("metadata") or {}).get("name") or "")
    if not name:
        raise UsageError(f"{filename}: metadata.name is required")
    source = live_source(kubeconfig, context, request_timeout)
    current = source.get(kinds.INSTANCETYPE, name)
    if current is None:
        _reviewed(obj, "CREATE", None)
        if mode.value == "client":
            _show(obj, output, f"instancetype/{name} would be created (client dry run: nothing sent)")
            return
        created = source.create(kinds.INSTANCETYPE, obj, dry_run=mode.value == "server")
        _show(created, output, f"instancetype/{name} created")
        return
    wanted = obj.get("spec") or {}

    def plan(stored: dict[str, Any]) -> PatchPlan:
        _reviewed({**stored, "spec": {**(stored.get("spec") or {}), **wanted}}, "UPDATE", stored)
        return plan_instancetype_spec(stored, {k: wanted[k] for k in MUTABLE_SPEC_FIELDS if k in wanted})

    report([apply_plan(source, kinds.INSTANCETYPE, name, None, plan, mode)], output)


@instancetype_app.command("rename")
@user_errors
def rename_command(
    name: NameArgument,
    display_name: Annotated[
        str, typer.Argument(metavar="DISPLAY-NAME", help="The new display name (spec.displayName).")
    ],
    dry_run: DryRunOption = "none",
    output: OutputOption = Output.TABLE,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    request_timeout: TimeoutOption = None,
) -> None:
    """Change an InstanceType's display name (its name, the ClusterQueue's, never changes)."""
    from gpuctl.core.lifecycle import plan_instancetype_spec

    if len(display_name) > 64:
        raise UsageError("DISPLAY-NAME: at most 64 characters")
    apply_to_instancetype(
        name,
        lambda stored: plan_instancetype_spec(stored, {"displayName": display_name}),
        dry_run,
        output,
        kubeconfig,
        context,
        request_timeout,
    )


@instancetype_app.command("deactivate")
@user_errors
def deactivate_command(
    name: NameArgument,
    dry_run: DryRunOption = "none",
    output: OutputOption = Output.TABLE,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    request_timeout: TimeoutOption = None,
) -> None:
    """Take a type out of service (spec.inactive=true: its queue holds; running Pods keep running)."""
    from gpuctl.core.lifecycle import plan_hold

    apply_to_instancetype(name, plan_hold, dry_run, output, kubeconfig, context, request_timeout)


@instancetype_app.command("activate")
@user_errors
def activate_command(
    name: NameArgument,
    dry_run: DryRunOption = "none",
    output: OutputOption = Output.TABLE,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    request_timeout: TimeoutOption = None,
) -> None:
    """Put a type back in service (spec.inactive=false). A drained queue stays drained: see `gpuctl resume`."""
    from gpuctl.core.lifecycle import plan_activate

    apply_to_instancetype(name, plan_activate, dry_run, output, kubeconfig, context, request_timeout)


@instancetype_app.command("delete")
@user_errors
def delete_command(
    name: NameArgument,
    wait: Annotated[
        bool, typer.Option("--wait", help="Wait until the InstanceType is gone (its queue drains first).")
    ] = False,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait with --wait.", min=1)] = 600,
    dry_run: DryRunOption = "none",
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    request_timeout: TimeoutOption = None,
) -> None:
    """Delete an InstanceType: the operator drains its queue and stops its instances before it goes."""
    from gpuctl.cluster import kinds

    mode = dry_run_mode(dry_run)
    source = live_source(kubeconfig, context, request_timeout)
    if source.get(kinds.INSTANCETYPE, name) is None:
        typer.echo(f"instancetype/{name} does not exist; nothing to delete")
        return
    if mode.value == "client":
        typer.echo(f"instancetype/{name} would be deleted (client dry run: nothing sent)")
        return
    source.delete(kinds.INSTANCETYPE, name, dry_run=mode.value == "server")
    if mode.value == "server":
        typer.echo(f"instancetype/{name} deleted (server dry run: nothing removed)")
        return
    typer.echo(f"instancetype/{name} deletion requested")
    if wait:
        deadline = time.monotonic() + timeout
        while source.get(kinds.INSTANCETYPE, name) is not None:
            if time.monotonic() > deadline:
                render.error(f"instancetype/{name} still exists after {timeout:g}s (its queue may still be draining)")
                raise typer.Exit(EXIT_RUNTIME)
            time.sleep(1)
        typer.echo(f"instancetype/{name} deleted")


@instancetype_app.command("list")
@user_errors
def list_command(
    selector: SelectorOption = None,
    output: OutputOption = Output.TABLE,
    no_headers: NoHeadersOption = False,
    snapshot: SnapshotOption = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    request_timeout: TimeoutOption = None,
) -> None:
    """InstanceTypes with their pool, unit and phase."""
    from gpuctl.cluster import kinds

    source = open_source(snapshot, kubeconfig, context, request_timeout)
    objs = sorted(
        source.list(kinds.INSTANCETYPE, label_selector=selector),
        key=lambda o: str((o.get("metadata") or {}).get("name")),
    )
    if output in (Output.JSON, Output.YAML):
        (render.print_json if output is Output.JSON else render.print_yaml)(
            {"apiVersion": "v1", "kind": "List", "items": objs}
        )
        return
    if output is Output.NAME:
        render.print_names("instancetype", [str(o["metadata"]["name"]) for o in objs])
        return
    rows = []
    for o in objs:
        spec, status = o.get("spec") or {}, o.get("status") or {}
        unit = spec.get("unitResources") or {}
        rows.append(
            [
                str(o["metadata"]["name"]),
                str(spec.get("displayName") or "-"),
                str(spec.get("acceleratorGroup") or "<cpu>"),
                f"{spec.get('os', '?')}/{spec.get('arch', '?')}",
                f"{unit.get('cpu', '?')}/{unit.get('ram', '?')}/{spec.get('localStorage', '?')}",
                "true" if spec.get("inactive") else "false",
                str(status.get("phase") or "<unknown>"),
                str(status.get("entrance") or "<none>"),
            ]
        )
    render.print_table(LIST_COLUMNS, rows, wide=output is Output.WIDE, no_headers=no_headers)


@instancetype_app.command("describe")
@user_errors
def describe_command(
    name: NameArgument,
    snapshot: SnapshotOption = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    request_timeout: TimeoutOption = None,
) -> None:
    """Spec, status, phase, entrance, the computed views and the backing ClusterQueue."""
    from gpuctl.cli.views import compute_items
    from gpuctl.cluster import kinds, read

    source = open_source(snapshot, kubeconfig, context, request_timeout)
    [item] = compute_items(source, [name], None)
    raw = source.get(kinds.INSTANCETYPE, name) or {}
    cq = read.cluster_queues(source).get(name)
    spec = raw.get("spec") or {}
    out = sys.stdout
    out.write(f"Name:            {name}\n")
    for key in (
        "displayName",
        "description",
        "acceleratable",
        "acceleratorGroup",
        "generalGroup",
        "os",
        "arch",
        "localStorage",
        "inactive",
    ):
        if key in spec:
            out.write(f"  {key + ':':<19}{spec[key]}\n")
    unit = spec.get("unitResources") or {}
    out.write(f"  {'unit:':<17}cpu {unit.get('cpu', '?')}, ram {unit.get('ram', '?')}\n")
    out.write(f"Entrance:        {item['entrance']}\n")
    out.write(f"Phase:           {item['phase'] or '<unknown>'}\n")
    if cq is not None:
        out.write(
            f"ClusterQueue:    {cq.name} (stopPolicy {cq.stop_policy}, {cq.reserving} reserving, {cq.admitted} admitted, {cq.pending} pending)\n"
        )
    else:
        out.write("ClusterQueue:    <none>\n")
    out.write("Views (onceMaxRequest/remaining of capacity), from the Devices ledger:\n")
    for key, label in (
        ("accelerator", "EX"),
        ("acceleratorShared", "SH"),
        ("acceleratorSliced", "SL"),
        ("acceleratorPartitioned", "PT"),
        ("cpu", "CPU"),
    ):
        v = item[key]
        out.write(f"  {label:<4}{v['onceMaxRequest']}/{v['remaining']} of {v['capacity']}\n")
    profiles = item["acceleratorPartitioned"]["remainingProfiles"]
    if profiles:
        out.write("  Partitions: " + ", ".join(f"{p['name']}:{p['count']}" for p in profiles) + "\n")
