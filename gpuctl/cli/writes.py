"""What every write command shares: ``--dry-run``, ``--yes``, the live source, and the per-object report."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpuctl.cli import render
from gpuctl.cli.errors import EXIT_RUNTIME, UsageError
from gpuctl.cli.render import Column, Output

if TYPE_CHECKING:
    from gpuctl.cluster.live import LiveSource
    from gpuctl.cluster.writer import DryRun, Outcome
    from gpuctl.core.lifecycle import PatchPlan

DryRunOption = Annotated[
    str,
    typer.Option(
        "--dry-run",
        help="none: change the cluster; client: only say what would change; server: the API server validates, stores nothing.",
    ),
]
YesOption = Annotated[
    bool, typer.Option("--yes", "-y", help="Do not ask: needed for bulk changes when not on a terminal.")
]
OUTCOME_COLUMNS = (Column("OBJECT"), Column("RESULT"), Column("DETAIL"))


def dry_run_mode(text: str) -> DryRun:
    from gpuctl.cluster.writer import DryRun

    try:
        return DryRun(text)
    except ValueError:
        raise UsageError(f"--dry-run={text}: use none, client or server") from None


def live_source(kubeconfig: str | None, context: str | None, request_timeout: str | None) -> LiveSource:
    from gpuctl.cli.options import open_source
    from gpuctl.cluster.live import LiveSource

    source = open_source(None, kubeconfig, context, request_timeout)
    assert isinstance(source, LiveSource)
    return source


def apply_to_instancetype(
    name: str,
    plan_for: Callable[[dict[str, Any]], PatchPlan],
    dry_run: str,
    output: Output,
    kubeconfig: str | None,
    context: str | None,
    request_timeout: str | None,
) -> None:
    """Read the InstanceType, plan, patch with the version read (retrying conflicts), and say what happened."""
    from gpuctl.cluster import kinds
    from gpuctl.cluster.writer import apply_plan

    mode = dry_run_mode(dry_run)
    report(
        [apply_plan(live_source(kubeconfig, context, request_timeout), kinds.INSTANCETYPE, name, None, plan_for, mode)],
        output,
    )


def confirm_bulk(count: int, what: str, yes: bool) -> None:
    """A change to more than one object needs --yes off a terminal, and a confirmation on one."""
    if count <= 1 or yes:
        return
    if not sys.stdin.isatty():
        raise UsageError(f"this would {what} {count} objects: pass --yes to confirm when not on a terminal")
    if not typer.confirm(f"{what} {count} objects?", default=False, err=True):
        raise typer.Exit(EXIT_RUNTIME)


def report(outcomes: Sequence[Outcome], output: Output) -> None:
    """Say per object what happened; exit 1 if any failed."""
    if output in (Output.JSON, Output.YAML):
        data = {
            "items": [
                {"object": o.target, "result": o.result.value, "detail": o.message, "attempts": o.attempts}
                for o in outcomes
            ]
        }
        (render.print_json if output is Output.JSON else render.print_yaml)(data)
    elif output is Output.NAME:
        sys.stdout.write("".join(f"{o.target}\n" for o in outcomes if not o.failed))
    else:
        for o in outcomes:
            sys.stdout.write(f"{o.target} {o.result.value}: {o.message}\n")
    failed = [o for o in outcomes if o.failed]
    if failed:
        render.error(f"{len(failed)} of {len(outcomes)} failed")
        raise typer.Exit(EXIT_RUNTIME)
