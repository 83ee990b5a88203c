"""Apply patch plans with optimistic concurrency: read, plan, patch with the ``resourceVersion`` read, and on a
conflict read and plan again. A plan already satisfied sends nothing, so every write is safe to re-run."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpuctl.cluster.errors import SourceError
from gpuctl.cluster.kinds import Kind
from gpuctl.cluster.live import ConflictError, LiveSource
from gpuctl.core.compat import StrEnum
from gpuctl.core.lifecycle import PatchPlan, PlanRefused

ATTEMPTS = 5


class DryRun(StrEnum):
    NONE = "none"
    CLIENT = "client"
    SERVER = "server"


class Result(StrEnum):
    CHANGED = "changed"
    UNCHANGED = "unchanged"
    WOULD_CHANGE = "would change"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class Outcome:
    target: str
    result: Result
    message: str
    object: dict[str, Any] | None = None
    attempts: int = 1
    kind: Kind | None = None
    name: str = ""
    namespace: str | None = None

    @property
    def failed(self) -> bool:
        return self.result is Result.FAILED


def apply_plan(
    source: LiveSource,
    kind: Kind,
    name: str,
    namespace: str | None,
    plan_for: Callable[[dict[str, Any]], PatchPlan],
    dry_run: DryRun = DryRun.NONE,
    *,
    on_conflict: Callable[[int], None] | None = None,
) -> Outcome:
    """Read the object, plan the change, and patch it with the read ``resourceVersion`` as a precondition.

    A conflict (the object moved between read and patch) is retried with a fresh read, up to ATTEMPTS times.
    """
    target = f"{kind.kind.lower()}/{name}" if not namespace else f"{kind.kind.lower()}/{namespace}/{name}"
    outcome = functools.partial(Outcome, kind=kind, name=name, namespace=namespace)
    for attempt in range(1, ATTEMPTS + 1):
        try:
            obj = source.get(kind, name, namespace)
        except SourceError as exc:
            return outcome(target, Result.FAILED, str(exc), attempts=attempt)
        if obj is None:
            return outcome(target, Result.FAILED, f"{target} not found", attempts=attempt)
        try:
            plan = plan_for(obj)
        except (PlanRefused, ValueError) as exc:
            return outcome(target, Result.FAILED, str(exc), obj, attempt)
        if plan.no_op:
            return outcome(target, Result.UNCHANGED, plan.description, obj, attempt)
        if dry_run is DryRun.CLIENT:
            return outcome(
                target, Result.WOULD_CHANGE, plan.description + " (client dry run: nothing sent)", obj, attempt
            )
        try:
            patched = source.patch(
                kind,
                name,
                plan.body(),
                namespace=namespace,
                patch_type=plan.patch_type.value,
                dry_run=dry_run is DryRun.SERVER,
            )
        except ConflictError:
            if on_conflict is not None:
                on_conflict(attempt)
            continue
        except SourceError as exc:
            return outcome(target, Result.FAILED, str(exc), obj, attempt)
        if dry_run is DryRun.SERVER:
            return outcome(
                target, Result.WOULD_CHANGE, plan.description + " (server dry run: nothing stored)", patched, attempt
            )
        return outcome(target, Result.CHANGED, plan.description, patched, attempt)
    return outcome(
        target,
        Result.FAILED,
        f"{target} kept changing: the conflict was not resolved after {ATTEMPTS} attempts; re-run",
        attempts=ATTEMPTS,
    )
