"""``gpuctl resume``: return pools to service."""

from typing import TYPE_CHECKING

from gpuctl.cli.pools import NamesArgument, change_each, chosen_pools, instancetype_of, say_phase
from gpuctl.cli.registry import OutputFlags, SourceFlags, command
from gpuctl.cli.render import OutputSpec
from gpuctl.cli.source import SourceSpec
from gpuctl.cli.writes import DryRunOption, YesOption, dry_run_mode
from gpuctl.cluster import kinds

if TYPE_CHECKING:
    from gpuctl.cluster.writer import Outcome


@command(
    "resume",
    summary="Return a pool to service.",
    examples="""
  gpuctl resume gpustack--nvidia-a10g-linux-amd64""",
    listed=140,
    source=SourceFlags(selectors=True),
    output=OutputFlags(sort=False),
)
def resume_command(
    names: NamesArgument = None,
    dry_run: DryRunOption = "none",
    yes: YesOption = False,
    *,
    source: SourceSpec,
    output: OutputSpec,
) -> None:
    """Return pools to service: each ClusterQueue back to stopPolicy None, then InstanceType inactive=false.

    Stopped Instances stay stopped: start them with `gpuctl instance start`.
    """
    from gpuctl.cluster.writer import DryRun, apply_plan
    from gpuctl.core.lifecycle import plan_activate, plan_resume

    mode = dry_run_mode(dry_run)
    live = source.live()
    pools = chosen_pools(live, names, source, "resume", yes or mode is not DryRun.NONE)

    def change(name: str) -> list["Outcome"]:
        it = instancetype_of(live, name)
        queue = apply_plan(live, kinds.CLUSTERQUEUE, name, None, lambda cq: plan_resume(it, cq)[0], mode)
        if queue.failed:
            return [queue]
        return [queue, apply_plan(live, kinds.INSTANCETYPE, name, None, plan_activate, mode)]

    change_each(pools, change, lambda name: say_phase(live, name, output), output)
