"""What ``gpuctl hold``, ``gpuctl drain`` and ``gpuctl resume`` share: choosing the pools, changing each and
following its phase.

Each takes InstanceTypes by name (``NAME`` or kubectl's ``instancetype.worker.gpustack.ai/NAME``, so ``gpuctl views
-o name | xargs gpuctl hold`` works) or chosen by ``-l``/``--field-selector``; a selection is printed before anything
changes, and needs ``--yes`` when it matches several off a terminal."""

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpuctl.cli import refs
from gpuctl.cli.errors import RuntimeFailure, UsageError
from gpuctl.cli.names import complete_instancetypes
from gpuctl.cli.render import OutputSpec
from gpuctl.cli.source import SourceSpec
from gpuctl.cli.writes import announce_matched, confirm_bulk, report
from gpuctl.cluster import kinds

if TYPE_CHECKING:
    from gpuctl.cluster.live import LiveSource
    from gpuctl.cluster.writer import Outcome

NamesArgument = Annotated[
    list[str] | None,
    typer.Argument(
        metavar="[INSTANCETYPE]...",
        help="The pools' InstanceTypes (each ClusterQueue has the same name); or choose them with -l/--field-selector.",
        show_default=False,
        autocompletion=complete_instancetypes,
    ),
]


def instancetype_of(source: "LiveSource", name: str) -> dict[str, Any]:
    from gpuctl.cluster.read import not_found

    obj = source.get(kinds.INSTANCETYPE, name)
    if obj is None:
        known = [str((o.get("metadata") or {}).get("name")) for o in source.list(kinds.INSTANCETYPE)]
        raise not_found("instancetype", name, known, source.describe())
    return obj


def chosen_pools(live: "LiveSource", names: list[str] | None, source: SourceSpec, verb: str, yes: bool) -> list[str]:
    """The InstanceTypes a command acts on: those named (each must exist), or those the selectors choose (printed
    first, and confirmed when several)."""
    given = refs.object_names(names or [], kinds.INSTANCETYPE, what=verb)
    if given and source.selects:
        raise UsageError("give INSTANCETYPE names or -l/--field-selector, not both")
    if given:
        for name in dict.fromkeys(given):
            instancetype_of(live, name)
        return list(dict.fromkeys(given))
    if not source.selects:
        raise UsageError("name the pools: INSTANCETYPE..., or -l/--field-selector")
    chosen = live.list(kinds.INSTANCETYPE, label_selector=source.selector, field_selector=source.field_selector)
    matched = sorted((refs.of_object(kinds.INSTANCETYPE, o) for o in chosen), key=lambda r: r.name)
    how = " ".join(
        ([f"-l {source.selector}"] if source.selector else [])
        + ([f"--field-selector {source.field_selector}"] if source.field_selector else [])
    )
    if not matched:
        typer.echo(f"{how} matched no InstanceType; nothing to change", err=True)
        return []
    announce_matched(matched, how)
    confirm_bulk(len(matched), verb, yes)
    return [r.name for r in matched]


def pool_phase(source: "LiveSource", name: str) -> tuple[str, str, int, int]:
    """(phase, stopPolicy, Workloads holding a reservation, Instances of the type not stopped). The reservations are
    counted on the Workloads themselves: the ClusterQueue's own counter can read 0 for a moment while a drain starts."""
    from gpuctl.cluster import read
    from gpuctl.core.lifecycle import instancetype_phase

    cq = source.get(kinds.CLUSTERQUEUE, name) or {}
    reserving = sum(
        1 for w in read.workloads(source) if w.cluster_queue == name and w.quota_reserved and not w.finished
    )
    policy = str((cq.get("spec") or {}).get("stopPolicy") or "None")
    running = [
        i
        for i in source.list(kinds.INSTANCE)
        if (i.get("spec") or {}).get("type") == name and ((i.get("status") or {}).get("phase") != "Stopped")
    ]
    return instancetype_phase(policy, reserving > 0).value, policy, reserving, len(running)


def say_phase(source: "LiveSource", name: str, output: OutputSpec) -> None:
    if not output.tabular:
        return
    phase, policy, reserving, running = pool_phase(source, name)
    typer.echo(
        f"instancetype/{name} phase {phase} (ClusterQueue stopPolicy {policy}, {reserving} workload(s) holding a reservation, {running} instance(s) not stopped)"
    )


def change_each(
    names: list[str],
    change: Callable[[str], list["Outcome"]],
    after: Callable[[str], None],
    output: OutputSpec,
) -> None:
    """Change every pool, report the changes, then follow each pool whose change did not fail (exit 1 at the end if
    any failed)."""
    per = {name: change(name) for name in names}
    report_failure: RuntimeFailure | None = None
    try:
        report([o for outcomes in per.values() for o in outcomes], output)
    except RuntimeFailure as exc:
        report_failure = exc
    for name, outcomes in per.items():
        if not any(o.failed for o in outcomes):
            after(name)
    if report_failure is not None:
        raise report_failure


Left = tuple[int, str, str]
"""(steps still to go, the pool's phase, what is left in words)."""


def follow(
    source: "LiveSource",
    name: str,
    timeout: float,
    left: Callable[["LiveSource", str], Left],
    verb: str,
    goal: str,
    *,
    every: float = 1.0,
) -> None:
    """Follow a pool until nothing is ``left``: a bar on a terminal, one line per change otherwise (a log or a CI job
    reads those). ``verb`` is what is happening ("hold"), ``goal`` what it ends as ("held"). The reads run beside
    the display: while the API server does not answer, it says since when and that it retries, until the deadline."""
    import sys

    from gpuctl.cli.watching import Poller

    total = max(left(source, name)[0], 1)
    deadline = time.monotonic() + timeout
    started, began = time.monotonic(), time.time()
    last: tuple[object, ...] | None = None
    terminal = sys.stderr.isatty()
    poller = Poller(lambda: left(source, name), every).start()
    try:
        while True:
            poller.changed.wait(every)
            poller.changed.clear()
            with poller.lock:
                latest = poller.latest
            if latest is None:
                if time.monotonic() > deadline:
                    raise RuntimeFailure(
                        f"instancetype/{name} not {goal} after {timeout:g}s: {poller.status(time.time(), began)}"
                    )
                continue
            steps, phase, detail = latest
            stale = poller.stale_for(time.time(), began) is not None
            note = f"; {poller.status(time.time(), began)}" if stale else ""
            done = total - min(total, steps)
            if terminal:
                width = 30
                filled = width * done // total
                sys.stderr.write(
                    f"\r{verb}ing {name} [{'#' * filled}{'.' * (width - filled)}] {detail}{note}"
                    f" ({time.monotonic() - started:.0f}s)\x1b[K"
                )
                sys.stderr.flush()
            elif (steps, phase, detail, stale) != last:
                sys.stderr.write(f"{time.strftime('%H:%M:%S')} instancetype/{name} {phase}: {detail}{note}\n")
                sys.stderr.flush()
            last = (steps, phase, detail, stale)
            if steps == 0:
                if terminal:
                    sys.stderr.write("\n")
                return
            if time.monotonic() > deadline:
                if terminal:
                    sys.stderr.write("\n")
                raise RuntimeFailure(
                    f"instancetype/{name} not {goal} after {timeout:g}s: {detail} (phase {phase}){note}"
                )
    finally:
        poller.stop()
