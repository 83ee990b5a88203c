"""``gpuctl instancetype create|apply|rename|describe|list|deactivate|activate|delete``."""

import sys
import time
from typing import Annotated, Any

import typer

from gpuctl.cli import refs, render
from gpuctl.cli.errors import RuntimeFailure, UsageError
from gpuctl.cli.names import complete_instancetypes
from gpuctl.cli.options import WaitTimeoutOption, wait_seconds
from gpuctl.cli.registry import OutputFlags, SourceFlags, command, group
from gpuctl.cli.render import Column, OutputSpec
from gpuctl.cli.source import SourceSpec
from gpuctl.cli.writes import DryRunOption, apply_to_instancetype, dry_run_mode, report

group(
    "instancetype",
    summary="Create, freeze, rename and delete InstanceTypes.",
    help="Create, freeze, rename, deactivate and delete InstanceTypes.",
    examples="""
  gpuctl instancetype list
  gpuctl instancetype create a10g-12c128g --accelerator-group nvidia-a10g --unit-cpu 12 --unit-ram 128Gi""",
    listed=170,
)


NameArgument = Annotated[
    str, typer.Argument(metavar="NAME", help="The InstanceType.", autocompletion=complete_instancetypes)
]
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


def _name(text: str) -> str:
    """NAME, or kubectl's ``instancetype.worker.gpustack.ai/NAME``."""
    from gpuctl.cluster import kinds

    return refs.object_names([text], kinds.INSTANCETYPE, what="instancetype")[0]


FREEZE_WAY_OUT = "to change it, create a new InstanceType and move the instances to it (spec.type)"


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


def _reviewed(obj: dict[str, Any], operation: str, old: dict[str, Any] | None, opened: Any = None) -> dict[str, Any]:
    """The object as the API server and the webhooks would store it; refuse here what they would refuse there. With
    the cluster (or snapshot) ``opened``, the webhooks see its ResourceFlavors, so a group no flavor describes gets
    the server's own warning (on stderr)."""
    from gpuctl.core.admission import aggregate
    from gpuctl.core.instancetype_rules import api_server_errors
    from gpuctl.core.webhooks import Kind, WebhookContext, review

    name = (obj.get("metadata") or {}).get("name")
    if operation == "CREATE" and (errors := api_server_errors(obj)):
        raise UsageError(f"instancetype/{name}: {aggregate(errors)}")
    context = WebhookContext()
    if opened is not None:
        from gpuctl.cli.usecases import WebhookKind, webhook_context

        context = webhook_context(opened, WebhookKind.INSTANCETYPE, obj)
    result = review(Kind.INSTANCETYPE, operation, obj, old, context)
    if not result.allowed or result.mutated is None:
        raise UsageError(
            f"instancetype/{name}: {result.message}"
            + (f"; {FREEZE_WAY_OUT}" if "immutable" in (result.message or "") else "")
        )
    if opened is not None:
        for warning in result.warnings:
            sys.stderr.write(f"Warning: {warning}\n")
    return result.mutated


@command(
    "instancetype create",
    summary="Create an InstanceType, validated first.",
    examples="""
  gpuctl instancetype create a10g-12c128g --accelerator-group nvidia-a10g --unit-cpu 12 --unit-ram 128Gi
  gpuctl instancetype create -f type.yaml --dry-run=server""",
    source=SourceFlags(),
    output=OutputFlags(sort=False),
)
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
    *,
    source: SourceSpec,
    output: OutputSpec,
) -> None:
    """Create an InstanceType, validated here as the webhook validates it before anything is sent."""
    from gpuctl.cli.usecases import WebhookKind, read_manifest
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
    mode = dry_run_mode(dry_run)
    if mode.value == "client":  # nothing is sent, but the name and the flavors are read as the server would
        from gpuctl.cluster.errors import NoKubeconfig

        try:
            opened = source.open()
            stored = _reviewed(obj, "CREATE", None, opened)
            exists = opened.get(kinds.INSTANCETYPE, stored["metadata"]["name"]) is not None
        except NoKubeconfig:  # as kubectl's client dry-run: judged on the object alone
            stored = _reviewed(obj, "CREATE", None)
            sys.stderr.write(
                "Warning: no cluster (no kubeconfig, no --snapshot): not checked whether the InstanceType exists "
                "or which ResourceFlavors describe its accelerator group\n"
            )
            exists = False
        target = f"instancetype/{stored['metadata']['name']}"
        if exists:
            raise UsageError(f"{target} already exists; `gpuctl instancetype apply -f FILE` changes its mutable fields")
        _show(stored, output, f"{target} would be created (client dry run: nothing sent)")
        return
    live = source.live()
    stored = _reviewed(obj, "CREATE", None, live)
    target = f"instancetype/{stored['metadata']['name']}"
    if live.get(kinds.INSTANCETYPE, stored["metadata"]["name"]) is not None:
        raise UsageError(f"{target} already exists; `gpuctl instancetype apply -f FILE` changes its mutable fields")
    created = live.create(kinds.INSTANCETYPE, obj, dry_run=mode.value == "server")
    _show(
        created, output, f"{target} created" + (" (server dry run: nothing stored)" if mode.value == "server" else "")
    )


def _show(obj: dict[str, Any], output: OutputSpec, sentence: str) -> None:
    from gpuctl.cluster import kinds

    render.emit_object(obj, output, lambda: sentence + "\n", ref=refs.of_object(kinds.INSTANCETYPE, obj))


@command(
    "instancetype apply",
    summary="Create an InstanceType or change its mutable fields.",
    examples="""
  gpuctl instancetype apply -f type.yaml""",
    source=SourceFlags(),
    output=OutputFlags(sort=False),
)
def apply_command(
    filename: Annotated[str, typer.Option("--filename", "-f", help="The manifest (YAML/JSON).")],
    dry_run: DryRunOption = "none",
    *,
    source: SourceSpec,
    output: OutputSpec,
) -> None:
    """Create the InstanceType, or change its mutable fields (displayName, inactive).

    A change to a frozen field is refused here, before it reaches the server.
    """
    from gpuctl.cli.usecases import WebhookKind, read_manifest
    from gpuctl.cluster import kinds
    from gpuctl.cluster.writer import apply_plan
    from gpuctl.core.instancetype_rules import MUTABLE_SPEC_FIELDS
    from gpuctl.core.lifecycle import PatchPlan, plan_instancetype_spec

    mode = dry_run_mode(dry_run)
    obj = read_manifest(filename, WebhookKind.INSTANCETYPE)
    name = str((obj.get("metadata") or {}).get("name") or "")
    if not name:
        raise UsageError(f"{filename}: metadata.name is required")
    live = source.live()
    current = live.get(kinds.INSTANCETYPE, name)
    if current is None:
        _reviewed(obj, "CREATE", None, live)
        if mode.value == "client":
            _show(obj, output, f"instancetype/{name} would be created (client dry run: nothing sent)")
            return
        created = live.create(kinds.INSTANCETYPE, obj, dry_run=mode.value == "server")
        _show(created, output, f"instancetype/{name} created")
        return
    wanted = obj.get("spec") or {}

    def plan(stored: dict[str, Any]) -> PatchPlan:
        _reviewed({**stored, "spec": {**(stored.get("spec") or {}), **wanted}}, "UPDATE", stored)
        return plan_instancetype_spec(stored, {k: wanted[k] for k in MUTABLE_SPEC_FIELDS if k in wanted})

    report([apply_plan(live, kinds.INSTANCETYPE, name, None, plan, mode)], output)


@command(
    "instancetype rename",
    summary="Change an InstanceType's display name.",
    examples="""
  gpuctl instancetype rename a10g-12c128g "A10G, 12 cores" """,
    source=SourceFlags(),
    output=OutputFlags(sort=False),
)
def rename_command(
    name: NameArgument,
    display_name: Annotated[
        str, typer.Argument(metavar="DISPLAY-NAME", help="The new display name (spec.displayName).")
    ],
    dry_run: DryRunOption = "none",
    *,
    source: SourceSpec,
    output: OutputSpec,
) -> None:
    """Change an InstanceType's display name (its name, the ClusterQueue's, never changes)."""
    name = _name(name)
    from gpuctl.core.lifecycle import plan_instancetype_spec

    if len(display_name) > 64:
        raise UsageError("DISPLAY-NAME: at most 64 characters")
    apply_to_instancetype(
        name,
        lambda stored: plan_instancetype_spec(stored, {"displayName": display_name}),
        dry_run,
        output,
        source,
    )


@command(
    "instancetype deactivate",
    summary="Take an InstanceType out of service.",
    examples="""
  gpuctl instancetype deactivate a10g-12c128g""",
    source=SourceFlags(),
    output=OutputFlags(sort=False),
)
def deactivate_command(
    name: NameArgument,
    dry_run: DryRunOption = "none",
    *,
    source: SourceSpec,
    output: OutputSpec,
) -> None:
    """Take a type out of service (spec.inactive=true: its queue holds; running Pods keep running)."""
    name = _name(name)
    from gpuctl.core.lifecycle import plan_hold

    apply_to_instancetype(name, plan_hold, dry_run, output, source)


@command(
    "instancetype activate",
    summary="Put an InstanceType back in service.",
    examples="""
  gpuctl instancetype activate a10g-12c128g""",
    source=SourceFlags(),
    output=OutputFlags(sort=False),
)
def activate_command(
    name: NameArgument,
    dry_run: DryRunOption = "none",
    *,
    source: SourceSpec,
    output: OutputSpec,
) -> None:
    """Put a type back in service (spec.inactive=false). A drained queue stays drained: see `gpuctl resume`."""
    name = _name(name)
    from gpuctl.core.lifecycle import plan_activate

    apply_to_instancetype(name, plan_activate, dry_run, output, source)


@command(
    "instancetype delete",
    summary="Delete an InstanceType (its queue drains first).",
    examples="""
  gpuctl instancetype delete a10g-12c128g --wait""",
    source=SourceFlags(),
)
def delete_command(
    name: NameArgument,
    wait: Annotated[
        bool, typer.Option("--wait", help="Wait until the InstanceType is gone (its queue drains first).")
    ] = False,
    timeout: WaitTimeoutOption = "10m",
    dry_run: DryRunOption = "none",
    ignore_not_found: Annotated[
        bool, typer.Option("--ignore-not-found", help="An InstanceType that does not exist is not an error.")
    ] = False,
    *,
    source: SourceSpec,
) -> None:
    """Delete an InstanceType: the operator drains its queue and stops its instances before it goes."""
    name = _name(name)
    from gpuctl.cluster import kinds
    from gpuctl.cluster.errors import NotFound

    mode = dry_run_mode(dry_run)
    seconds = wait_seconds(timeout)
    live = source.live()
    if live.get(kinds.INSTANCETYPE, name) is None:
        if ignore_not_found:
            typer.echo(f"instancetype/{name} does not exist; nothing to delete")
            return
        raise NotFound(f'instancetype "{name}" not found in {live.describe()} (--ignore-not-found accepts that)')
    if mode.value == "client":
        typer.echo(f"instancetype/{name} would be deleted (client dry run: nothing sent)")
        return
    live.delete(kinds.INSTANCETYPE, name, dry_run=mode.value == "server")
    if mode.value == "server":
        typer.echo(f"instancetype/{name} deleted (server dry run: nothing removed)")
        return
    typer.echo(f"instancetype/{name} deletion requested")
    if wait:
        deadline = time.monotonic() + seconds
        while live.get(kinds.INSTANCETYPE, name) is not None:
            if time.monotonic() > deadline:
                raise RuntimeFailure(
                    f"instancetype/{name} still exists after {timeout} (its queue may still be draining)"
                )
            time.sleep(1)
        typer.echo(f"instancetype/{name} deleted")


@command(
    "instancetype list",
    summary="List InstanceTypes.",
    examples="""
  gpuctl instancetype list -o wide
  gpuctl instancetype list -l feature.gpustack.ai/acceleratable=true -o name""",
    source=SourceFlags(selectors=True),
    output=OutputFlags(labels=True),
)
def list_command(
    *,
    source: SourceSpec,
    output: OutputSpec,
) -> None:
    """InstanceTypes with their pool, unit and phase."""
    from gpuctl.cluster import kinds

    opened = source.open()
    objs = sorted(
        opened.list(kinds.INSTANCETYPE, label_selector=source.selector, field_selector=source.field_selector),
        key=lambda o: str((o.get("metadata") or {}).get("name")),
    )
    render.emit(
        render.Listing(
            "InstanceType",
            objs,
            LIST_COLUMNS,
            _list_row,
            ref=lambda o: refs.of_object(kinds.INSTANCETYPE, o),
            api_version="worker.gpustack.ai/v1alpha1",
        ),
        output,
    )


def _list_row(o: dict[str, Any]) -> list[str]:
    spec, status = o.get("spec") or {}, o.get("status") or {}
    unit = spec.get("unitResources") or {}
    return [
        str(o["metadata"]["name"]),
        str(spec.get("displayName") or "-"),
        str(spec.get("acceleratorGroup") or "<cpu>"),
        f"{spec.get('os', '?')}/{spec.get('arch', '?')}",
        f"{unit.get('cpu', '?')}/{unit.get('ram', '?')}/{spec.get('localStorage', '?')}",
        "true" if spec.get("inactive") else "false",
        str(status.get("phase") or "<unknown>"),
        str(status.get("entrance") or "<none>"),
    ]


@command(
    "instancetype describe",
    summary="Show an InstanceType with its views and queue.",
    examples="""
  gpuctl instancetype describe gpustack--nvidia-a10g-linux-amd64""",
    source=SourceFlags(),
)
def describe_command(
    name: NameArgument,
    *,
    source: SourceSpec,
) -> None:
    """Spec, status, phase, entrance, the computed views and the backing ClusterQueue."""
    name = _name(name)
    from gpuctl.cli.usecases import compute_items
    from gpuctl.cluster import kinds, read

    opened = source.open()
    [item] = compute_items(opened, [name], None)
    raw = opened.get(kinds.INSTANCETYPE, name) or {}
    cq = read.cluster_queues(opened).get(name)
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
