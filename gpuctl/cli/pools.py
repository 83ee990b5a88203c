"""``gpuctl hold``, ``gpuctl drain`` and ``gpuctl resume``: take a pool out of service and back."""

import time
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpuctl.cli.completion import complete_instancetypes
from gpuctl.cli.errors import RuntimeFailure
from gpuctl.cli.options import SourceSpec, WaitTimeoutOption, output_options, source_options, wait_seconds
from gpuctl.cli.render import OutputSpec
from gpuctl.cli.writes import DryRunOption, dry_run_mode, report

if TYPE_CHECKING:
    from gpuctl.cluster.live import LiveSource

NameArgument = Annotated[
    str,
    typer.Argument(
        metavar="INSTANCETYPE",
        help="The pool's InstanceType (its ClusterQueue has the same name).",
        autocompletion=complete_instancetypes,
    ),
]


def _instancetype(source: "LiveSource", name: str) -> dict[str, Any]:
    from gpuctl.cluster import kinds
    from gpuctl.cluster.read import not_found

    obj = source.get(kinds.INSTANCETYPE, name)
    if obj is None:
        known = [str((o.get("metadata") or {}).get("name")) for o in source.list(kinds.INSTANCETYPE)]
        raise not_found("instancetype", name, known, source.describe())
    return obj


def pool_phase(source: "LiveSource", name: str) -> tuple[str, str, int, int]:
    """(phase, stopPolicy, Workloads holding a reservation, Instances of the type not stopped)."""
    from gpuctl.cluster import kinds
    from gpuctl.core.lifecycle import instancetype_phase

    cq = source.get(kinds.CLUSTERQUEUE, name) or {}
    status = cq.get("status") or {}
    reserving = int(status.get("reservingWorkloads") or 0)  # Kueue counts admitted Workloads among them
    policy = str((cq.get("spec") or {}).get("stopPolicy") or "None")
    running = [
        i
        for i in source.list(kinds.INSTANCE)
        if (i.get("spec") or {}).get("type") == name and ((i.get("status") or {}).get("phase") != "Stopped")
    ]
    return instancetype_phase(policy, reserving > 0).value, policy, reserving, len(running)


def _say_phase(source: "LiveSource", name: str, output: OutputSpec) -> None:
    if not output.tabular:
        return
    phase, policy, reserving, running = pool_phase(source, name)
    typer.echo(
        f"instancetype/{name} phase {phase} (ClusterQueue stopPolicy {policy}, {reserving} workload(s) holding a reservation, {running} instance(s) not stopped)"
    )


@source_options()
@output_options(sort=False)
def hold_command(
    name: NameArgument,
    dry_run: DryRunOption = "none",
    *,
    source: SourceSpec,
    output: OutputSpec,
) -> None:
    """Block admission to a pool; running workloads keep running (InstanceType spec.inactive=true → queue Hold)."""
    from gpuctl.cluster import kinds
    from gpuctl.cluster.writer import apply_plan
    from gpuctl.core.lifecycle import plan_hold

    mode = dry_run_mode(dry_run)
    live = source.live()
    _instancetype(live, name)
    report([apply_plan(live, kinds.INSTANCETYPE, name, None, plan_hold, mode)], output)
    _say_phase(live, name, output)


@source_options()
@output_options(sort=False)
def resume_command(
    name: NameArgument,
    dry_run: DryRunOption = "none",
    *,
    source: SourceSpec,
    output: OutputSpec,
) -> None:
    """Return a pool to service: its ClusterQueue back to stopPolicy None, then InstanceType inactive=false.

    Stopped Instances stay stopped: start them with `gpuctl instance start`.
    """
    from gpuctl.cluster import kinds
    from gpuctl.cluster.writer import apply_plan
    from gpuctl.core.lifecycle import plan_activate, plan_resume

    mode = dry_run_mode(dry_run)
    live = source.live()
    it = _instancetype(live, name)
    queue = apply_plan(live, kinds.CLUSTERQUEUE, name, None, lambda cq: plan_resume(it, cq)[0], mode)
    outcomes = [queue]
    if not queue.failed:
        outcomes.append(apply_plan(live, kinds.INSTANCETYPE, name, None, plan_activate, mode))
    report(outcomes, output)
    _say_phase(live, name, output)


@source_options()
@output_options(sort=False)
def drain_command(
    name: NameArgument,
    wait: Annotated[
        bool, typer.Option("--wait", help="Wait until no workload holds a reservation and every instance is stopped.")
    ] = False,
    timeout: WaitTimeoutOption = "10m",
    dry_run: DryRunOption = "none",
    *,
    source: SourceSpec,
    output: OutputSpec,
) -> None:
    """Drain a pool: its ClusterQueue to stopPolicy HoldAndDrain. Kueue evicts admitted workloads and admits none;
    the operator stops the type's instances. The pool reads Draining, then Inactive."""
    from gpuctl.cluster import kinds
    from gpuctl.cluster.writer import DryRun, apply_plan
    from gpuctl.core.lifecycle import plan_drain

    mode = dry_run_mode(dry_run)
    seconds = wait_seconds(timeout)
    live = source.live()
    it = _instancetype(live, name)
    report([apply_plan(live, kinds.CLUSTERQUEUE, name, None, lambda cq: plan_drain(it, cq), mode)], output)
    if wait and mode is DryRun.NONE:
        _wait_drained(live, name, seconds)
    _say_phase(live, name, output)


def _wait_drained(source: "LiveSource", name: str, timeout: float) -> None:
    """Follow a drain until nothing of the pool is reserved or running: a bar on a terminal, one line per change
    otherwise (a log or a CI job reads those)."""
    import sys

    _, _, reserving0, running0 = pool_phase(source, name)
    total = max(reserving0 + running0, 1)
    deadline = time.monotonic() + timeout
    started = time.monotonic()
    last = None
    terminal = sys.stderr.isatty()
    while True:
        phase, _, reserving, running = pool_phase(source, name)
        detail = f"{reserving} workload(s) still reserved, {running} instance(s) not stopped"
        done = total - min(total, reserving + running)
        if terminal:
            width = 30
            filled = width * done // total
            sys.stderr.write(
                f"\rdraining {name} [{'#' * filled}{'.' * (width - filled)}] {detail} ({time.monotonic() - started:.0f}s)\x1b[K"
            )
            sys.stderr.flush()
        elif (reserving, running, phase) != last:
            sys.stderr.write(f"{time.strftime('%H:%M:%S')} instancetype/{name} {phase}: {detail}\n")
            sys.stderr.flush()
        last = (reserving, running, phase)
        if reserving == 0 and running == 0:
            if terminal:
                sys.stderr.write("\n")
            return
        if time.monotonic() > deadline:
            if terminal:
                sys.stderr.write("\n")
            raise RuntimeFailure(f"instancetype/{name} not drained after {timeout:g}s: {detail} (phase {phase})")
        time.sleep(1)
