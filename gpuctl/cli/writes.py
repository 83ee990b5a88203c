"""What every write command shares: ``--dry-run``, ``--yes``, the per-object report."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpuctl.cli import render
from gpuctl.cli.errors import RuntimeFailure, UsageError
from gpuctl.cli.render import Column, OutputSpec

if TYPE_CHECKING:
    from gpuctl.cli.refs import ObjectRef
    from gpuctl.cli.source import SourceSpec
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


def apply_to_instancetype(
    name: str, plan_for: Callable[[dict[str, Any]], PatchPlan], dry_run: str, output: OutputSpec, source: SourceSpec
) -> None:
    """Read the InstanceType, plan, patch with the version read (retrying conflicts), and say what happened."""
    from gpuctl.cluster import kinds
    from gpuctl.cluster.read import not_found
    from gpuctl.cluster.writer import apply_plan

    mode = dry_run_mode(dry_run)
    live = source.live()
    if live.get(kinds.INSTANCETYPE, name) is None:
        known = [str((o.get("metadata") or {}).get("name")) for o in live.list(kinds.INSTANCETYPE)]
        raise not_found("instancetype", name, known, live.describe())
    report([apply_plan(live, kinds.INSTANCETYPE, name, None, plan_for, mode)], output)


def announce_matched(matched: Sequence[ObjectRef], how: str) -> None:
    """Before a change to objects a selection chose: which they are (on stderr, so stdout stays the report)."""
    names = ", ".join(f"{r.namespace}/{r.name}" if r.namespace else r.name for r in matched)
    kind = matched[0].kind.kind if matched else "object"
    sys.stderr.write(f"{how} matched {len(matched)} {kind}(s): {names}\n")


def confirm_bulk(count: int, what: str, yes: bool) -> None:
    """A change to more than one object needs --yes off a terminal, and a confirmation on one."""
    if count <= 1 or yes:
        return
    if not sys.stdin.isatty():
        raise UsageError(f"this would {what} {count} objects: pass --yes to confirm when not on a terminal")
    if not typer.confirm(f"{what} {count} objects?", default=False, err=True):
        raise RuntimeFailure("not confirmed: nothing changed")


def _ref(outcome: Outcome) -> ObjectRef:
    from gpuctl.cli.refs import ObjectRef, of_object

    assert outcome.kind is not None
    if outcome.object is not None:
        return of_object(outcome.kind, outcome.object)
    return ObjectRef(outcome.kind, outcome.name, outcome.namespace)


def report(outcomes: Sequence[Outcome], output: OutputSpec) -> None:
    """Say per object what happened; fail (exit 1) if any failed."""
    items = [
        {"object": o.target, "result": o.result.value, "detail": o.message, "attempts": o.attempts} for o in outcomes
    ]
    by_target = {o.target: _ref(o) for o in outcomes}
    if output.tabular:
        for o in outcomes:
            sys.stdout.write(f"{o.target} {o.result.value}: {o.message}\n")
    else:
        render.emit(
            render.Listing(
                "ChangeResult",
                items,
                OUTCOME_COLUMNS,
                lambda i: [i["object"], i["result"], i["detail"]],
                ref=lambda i: by_target[i["object"]],
            ),
            output,
        )
    failed = [o for o in outcomes if o.failed]
    if failed:
        raise RuntimeFailure(f"{len(failed)} of {len(outcomes)} failed")
