"""``gpuctl hold``: block admission to pools; running work keeps running."""

from typing import TYPE_CHECKING, Annotated

import typer

from gpuctl.cli.options import WaitTimeoutOption, wait_seconds
from gpuctl.cli.pools import Left, NamesArgument, change_each, chosen_pools, follow, pool_phase, say_phase
from gpuctl.cli.registry import OutputFlags, SourceFlags, command
from gpuctl.cli.render import OutputSpec
from gpuctl.cli.source import SourceSpec
from gpuctl.cli.writes import DryRunOption, YesOption, dry_run_mode
from gpuctl.cluster import kinds

if TYPE_CHECKING:
    from gpuctl.cluster.live import LiveSource


@command(
    "hold",
    summary="Block admission to a pool; running work keeps running.",
    examples="""
  gpuctl hold gpustack--nvidia-a10g-linux-amd64
  gpuctl hold gpustack--nvidia-a10g-linux-amd64 --dry-run=server""",
    listed=120,
    source=SourceFlags(selectors=True),
    output=OutputFlags(sort=False),
)
def hold_command(
    names: NamesArgument = None,
    wait: Annotated[
        bool,
        typer.Option("--wait", help="Wait until the worker has put each ClusterQueue on Hold (stopPolicy Hold)."),
    ] = False,
    timeout: WaitTimeoutOption = "2m",
    dry_run: DryRunOption = "none",
    yes: YesOption = False,
    *,
    source: SourceSpec,
    output: OutputSpec,
) -> None:
    """Block admission to pools; running workloads keep running. This sets InstanceType spec.inactive=true; the
    worker's InstanceType reconciler then sets the ClusterQueue's stopPolicy to Hold (--wait follows it)."""
    from gpuctl.cluster.writer import DryRun, apply_plan
    from gpuctl.core.lifecycle import plan_hold

    mode = dry_run_mode(dry_run)
    seconds = wait_seconds(timeout)
    live = source.live()
    pools = chosen_pools(live, names, source, "hold", yes or mode is not DryRun.NONE)

    def after(name: str) -> None:
        if wait and mode is DryRun.NONE:
            follow(live, name, seconds, _held, "hold", "held")
        say_phase(live, name, output)

    change_each(pools, lambda name: [apply_plan(live, kinds.INSTANCETYPE, name, None, plan_hold, mode)], after, output)


def _held(source: "LiveSource", name: str) -> Left:
    phase, policy, reserving, _ = pool_phase(source, name)
    if policy == "None":
        return 1, phase, "ClusterQueue stopPolicy None: waiting for the worker's InstanceType reconciler to set Hold"
    return 0, phase, f"ClusterQueue stopPolicy {policy}: admission blocked, {reserving} workload(s) keep running"
