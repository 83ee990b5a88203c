"""The companion's book of disagreements: what GPUStack's worker publishes that the core computes otherwise, per
object, reported once it has held for a settling time (a ledger that moved between the worker's read and this one
differs for a moment, and the worker's next pass mends it).

A reported disagreement is a series of ``gpuctl_shadow_disagreement`` (both values in its labels), counts in
``gpuctl_shadow_disagreements`` by kind, and one Warning Event on its object for each new pair of values. One that
is no longer seen leaves the metric; agreement records nothing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from gpuctl.cluster import kinds
from gpuctl.cluster.kinds import Kind
from gpuctl.core.shadow import Disagreement
from gpuctl.core.shadow import Kind as ShadowKind
from gpuctl.operator.events import WARNING, EventSink, Regarding
from gpuctl.operator.metrics import gauge_family

OBJECT_KINDS: dict[str, Kind] = {
    "InstanceType": kinds.INSTANCETYPE,
    "Workload": kinds.WORKLOAD,
    "Node": kinds.NODE,
    "Instance": kinds.INSTANCE,
}
REASON = "ShadowDisagreement"


@dataclass(slots=True)
class _Seen:
    disagreement: Disagreement
    since: float
    reported: bool = False


class ShadowBook:
    """The disagreements seen per (kind, object), when each was first seen, and which are reported."""

    def __init__(self, settle: float, events: EventSink | None = None, clock: Callable[[], float] = time.monotonic):
        self.settle = settle
        self.events = events
        self.clock = clock
        self._lock = threading.Lock()
        self._seen: dict[tuple[ShadowKind, str], dict[str, _Seen]] = {}

    def observe(self, kind: ShadowKind, key: str, found: Sequence[Disagreement], uid: str = "") -> float | None:
        """Replace what is seen of one object (``key``) for one kind with ``found``. Returns the seconds until the
        first one not yet reported has held for the settling time (the caller looks again then), or None."""
        now = self.clock()
        to_record: list[Disagreement] = []
        wait: float | None = None
        with self._lock:
            before = self._seen.get((kind, key), {})
            after: dict[str, _Seen] = {}
            for d in found:
                seen = before.get(d.field)
                if seen is None or (seen.disagreement.published, seen.disagreement.computed) != (
                    d.published,
                    d.computed,
                ):
                    seen = _Seen(d, now)
                else:
                    seen.disagreement = d  # the reason may read newer figures
                if not seen.reported:
                    if now - seen.since >= self.settle:
                        seen.reported = True
                        to_record.append(d)
                    else:
                        left = self.settle - (now - seen.since)
                        wait = left if wait is None else min(wait, left)
                after[d.field] = seen
            if after:
                self._seen[(kind, key)] = after
            else:
                self._seen.pop((kind, key), None)
        for d in to_record:
            self._record(d, uid)
        return wait

    def forget(self, kind: ShadowKind, key: str) -> None:
        """The object is gone (or no longer judged)."""
        with self._lock:
            self._seen.pop((kind, key), None)

    def reported(self) -> list[Disagreement]:
        with self._lock:
            return [s.disagreement for seen in self._seen.values() for s in seen.values() if s.reported]

    def _record(self, d: Disagreement, uid: str) -> None:
        if self.events is None:
            return
        kind = OBJECT_KINDS[d.object_kind]
        note = f"{d.field}: GPUStack publishes {d.published}, gpuctl computes {d.computed}: {d.reason}"
        self.events.record(Regarding(kind, d.name, d.namespace, uid), WARNING, REASON, "Shadow", note)

    def gauges(self) -> Iterable[Any]:
        reported = self.reported()
        counts = {k.value: 0 for k in ShadowKind}
        for d in reported:
            counts[d.kind.value] += 1
        yield gauge_family(
            "gpuctl_shadow_disagreements",
            "Figures GPUStack's worker publishes that gpuctl computes otherwise, by kind (held past the settling time).",
            ["kind"],
            (([k], float(n)) for k, n in sorted(counts.items())),
        )
        yield gauge_family(
            "gpuctl_shadow_disagreement",
            "One figure GPUStack's worker publishes that gpuctl computes otherwise: both values, and the object.",
            ["kind", "object", "field", "published", "computed"],
            (([d.kind.value, d.object, d.field, d.published, d.computed], 1.0) for d in reported),
        )
