"""``gpuctl drain``: evict a pool's workloads, stop its instances, and follow it until nothing is left."""

from typing import TYPE_CHECKING, Annotated

import typer

from gpuctl.cli.options import WaitTimeoutOption, wait_seconds
from gpuctl.cli.pools import (
    Left,
    NamesArgument,
    change_each,
    chosen_pools,
    follow,
    instancetype_of,
    pool_phase,
    say_phase,
)
from gpuctl.cli.registry import OutputFlags, SourceFlags, command
from gpuctl.cli.render import OutputSpec
from gpuctl.cli.source import SourceSpec
from gpuctl.cli.writes import DryRunOption, YesOption, dry_run_mode
from gpuctl.cluster import kinds

if TYPE_CHECKING:
    from gpuctl.cluster.live import LiveSource
    from gpuctl.cluster.writer import Outcome


@command(
    "drain",
    summary="Drain a pool: evict its workloads, stop its instances.",
    examples="""
  # Evict and stop, and follow it until nothing is left
  gpuctl drain gpustack--nvidia-a10g-linux-amd64 --wait""",
    listed=130,
    source=SourceFlags(selectors=True),
    output=OutputFlags(sort=False),
)
def drain_command(
    names: NamesArgument = None,
    wait: Annotated[
        bool, typer.Option("--wait", help="Wait until no workload holds a reservation and every instance is stopped.")
    ] = False,
    timeout: WaitTimeoutOption = "10m",
    dry_run: DryRunOption = "none",
    yes: YesOption = False,
    *,
    source: SourceSpec,
    output: OutputSpec,
) -> None:
    """Drain pools: each ClusterQueue to stopPolicy HoldAndDrain. Kueue evicts admitted workloads and admits none;
    the operator stops the type's instances. The pool reads Draining, then Inactive."""
    from gpuctl.cluster.writer import DryRun, apply_plan
    from gpuctl.core.lifecycle import plan_drain

    mode = dry_run_mode(dry_run)
    seconds = wait_seconds(timeout)
    live = source.live()
    pools = chosen_pools(live, names, source, "drain", yes or mode is not DryRun.NONE)

    def change(name: str) -> list["Outcome"]:
        it = instancetype_of(live, name)
        return [apply_plan(live, kinds.CLUSTERQUEUE, name, None, lambda cq: plan_drain(it, cq), mode)]

    def after(name: str) -> None:
        if wait and mode is DryRun.NONE:
            follow(live, name, seconds, _drained, "drain", "drained")
        say_phase(live, name, output)

    change_each(pools, change, after, output)


def _drained(source: "LiveSource", name: str) -> Left:
    phase, _, reserving, running = pool_phase(source, name)
    return reserving + running, phase, f"{reserving} workload(s) still reserved, {running} instance(s) not stopped"
