"""What changed between two reads of a cluster: each pool's views, each Workload's state and gate, each card's mode,
the figures published otherwise than the core computes them (disagreements appearing, changing, resolved), and the
Events recorded in between."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuctl.core.history import EventRecord
from gpuctl.core.queueing import epoch_seconds
from gpuctl.core.shadow import Disagreement

VIEWS = ("accelerator", "acceleratorShared", "acceleratorSliced", "acceleratorPartitioned", "cpu")
FIELDS = ("onceMaxRequest", "remaining", "capacity")


@dataclass(frozen=True, slots=True)
class Change:
    """One difference: what kind of object, which one, and what became of it."""

    kind: str
    """``PoolView``, ``Workload``, ``Card``, ``Disagreement`` or ``Event``."""
    name: str
    change: str
    before: Any
    after: Any
    time: str = ""
    """When it happened, where the reads record it (an Event's last occurrence, RFC 3339 in UTC); "" otherwise."""

    def to_dict(self) -> dict[str, Any]:
        out = {"kind": self.kind, "name": self.name, "change": self.change, "before": self.before, "after": self.after}
        if self.time:
            out["time"] = self.time
        return out


def view_changes(before: Mapping[str, Mapping[str, Any]], after: Mapping[str, Mapping[str, Any]]) -> list[Change]:
    """Pools (name → the views of ``views -o json``) whose views moved, appeared or went away."""
    out = []
    for name in sorted(set(before) | set(after)):
        a, b = before.get(name), after.get(name)
        if a is None or b is None:
            out.append(Change("PoolView", name, "added" if a is None else "removed", a is not None, b is not None))
            continue
        for view in VIEWS:
            va, vb = a.get(view) or {}, b.get(view) or {}
            old = {f: va.get(f) for f in FIELDS}
            new = {f: vb.get(f) for f in FIELDS}
            if old != new:
                delta = ", ".join(f"{f} {old[f]}→{new[f]}" for f in FIELDS if old[f] != new[f])
                out.append(Change("PoolView", f"{name}/{view}", delta, old, new))
    return out


@dataclass(frozen=True, slots=True)
class WorkloadState:
    """A Workload as one read saw it: its phase and, while held, the gate that holds it."""

    phase: str
    """``pending``, ``reserved``, ``admitted``, ``evicted`` or ``finished``."""
    held_by: int | None
    summary: str = ""


def workload_changes(before: Mapping[str, WorkloadState], after: Mapping[str, WorkloadState]) -> list[Change]:
    """Workloads admitted, evicted, finished, newly held (with the gate), released, created or gone."""
    out = []
    for key in sorted(set(before) | set(after)):
        a, b = before.get(key), after.get(key)
        if a == b:
            continue
        if a is None:
            assert b is not None
            what = "created" + (f", held at gate {b.held_by}" if b.held_by else f", {b.phase}")
        elif b is None:
            what = "gone"
        elif a.phase != b.phase and b.phase in ("admitted", "evicted", "finished"):
            what = b.phase + (f", held at gate {b.held_by}" if b.held_by and b.phase != "finished" else "")
        elif b.held_by is not None and b.held_by != a.held_by:
            what = f"newly held at gate {b.held_by}" + (f" (was gate {a.held_by})" if a.held_by else "")
        elif b.held_by is None and a.held_by is not None:
            what = f"released from gate {a.held_by}"
        else:
            what = f"{a.phase} → {b.phase}"
        out.append(Change("Workload", key, what, _state(a), _state(b)))
    return out


def _state(s: WorkloadState | None) -> dict[str, Any] | None:
    return None if s is None else {"phase": s.phase, "heldBy": s.held_by, "summary": s.summary}


def card_changes(before: Mapping[tuple[str, str], str], after: Mapping[tuple[str, str], str]) -> list[Change]:
    """Cards ((node, card id) → mode name) whose mode changed, appeared or went away."""
    out = []
    for node, card in sorted(set(before) | set(after)):
        a, b = before.get((node, card)), after.get((node, card))
        if a != b:
            out.append(Change("Card", f"{node}/{card}", f"{a or 'absent'} → {b or 'absent'}", a, b))
    return out


def disagreement_changes(before: Sequence[Disagreement], after: Sequence[Disagreement]) -> list[Change]:
    """Published figures the core computes otherwise (:mod:`gpuctl.core.shadow`) that appeared, changed or were
    resolved between the two reads, by object and field."""

    def by_field(found: Sequence[Disagreement]) -> dict[tuple[str, str], Disagreement]:
        return {(d.object, d.field): d for d in found}

    a_all, b_all = by_field(before), by_field(after)
    out = []
    for key in sorted(set(a_all) | set(b_all)):
        a, b = a_all.get(key), b_all.get(key)
        if a is not None and b is not None and (a.published, a.computed) == (b.published, b.computed):
            continue
        if b is None:
            assert a is not None
            what = f"{a.field}: resolved (was published {a.published}, gpuctl computes {a.computed})"
        elif a is None:
            what = f"{b.field}: appeared: published {b.published}, gpuctl computes {b.computed} ({b.reason})"
        else:
            what = (
                f"{b.field}: published {a.published} → {b.published}, gpuctl computes {a.computed} → {b.computed} "
                f"({b.reason})"
            )
        out.append(Change("Disagreement", key[0], what, _figures(a), _figures(b)))
    return out


def _figures(d: Disagreement | None) -> dict[str, Any] | None:
    return None if d is None else d.to_dict()


def event_changes(
    before: Mapping[tuple[str, str], EventRecord], after: Mapping[tuple[str, str], EventRecord]
) -> list[Change]:
    """Events the second read holds that the first did not, or whose series grew: what was recorded between the two
    reads, oldest first. (An Event only the first read holds expired in between; that is no change of the cluster.)"""
    out = []

    def when(kv: tuple[tuple[str, str], EventRecord]) -> tuple[float, tuple[str, str]]:
        at = epoch_seconds(kv[1].last) if kv[1].last else None  # compared as instants: the two Event APIs write
        return (at if at is not None else float("-inf"), kv[0])  # times with and without fractions of a second

    for key, b in sorted(after.items(), key=when):
        a = before.get(key)
        if a is not None and b.count <= a.count:
            continue
        what = f"{b.reason} on {b.regarding_kind.lower()} {_where(b)}: {b.note}"
        if a is not None:
            what += f" (again, x{b.count - a.count})"
        elif b.count > 1:
            what += f" (x{b.count})"
        out.append(Change("Event", f"{key[0]}/{key[1]}", what, a.count if a else 0, b.count, _utc(b.last)))
    return out


def _where(e: EventRecord) -> str:
    return f"{e.regarding_namespace}/{e.regarding_name}" if e.regarding_namespace else e.regarding_name


def _utc(rfc3339: str) -> str:
    """An RFC 3339 time in UTC to the second (``2026-11-30T09:41:00Z``), "" when it is not one."""
    import time

    at = epoch_seconds(rfc3339) if rfc3339 else None
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at)) if at is not None else ""
