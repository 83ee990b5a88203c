"""A Workload's story, oldest first, from what the cluster keeps: its creation and condition transitions, the Events
about it (Kueue's and the node-devices check's) and the Events about its Pods (the scheduler's and the kubelet's).

Each line names the gate it belongs to. The Workload's states follow from the lines — queued for quota, at the
check, at the scheduler and the device plugin, running, finished — and the time spent in each sums to a summary.
The record is incomplete by nature: a Workload keeps only the last transition of each condition, and the API server
deletes Events after its ``--event-ttl`` (an hour by default), so whatever happened before the oldest Event left
is told only by the conditions.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuctl.core.pending import CLASSIC, TOKENS
from gpuctl.core.pods import Pod
from gpuctl.core.preemption import eviction
from gpuctl.core.queueing import epoch_seconds
from gpuctl.core.workloads import Workload

EVENT_TTL = 3600.0
"""The API server's default ``--event-ttl``."""
CHECK_CONTROLLER = "gpuctl.gpustack.ai/operator"

CONDITION, EVENT = "condition", "event"

QUEUED, CHECK, PLACING, RUNNING, FINISHED = "quota", "check", "placing", "running", "finished"
UNRECORDED = "unrecorded"
"""Admitted, then evicted, with its Pods gone from the record: whether it ran, and for how long, is not known."""
STATE_PHRASES = {
    QUEUED: "for quota",
    CHECK: "at the check",
    PLACING: "at the scheduler and device plugin",
    RUNNING: "running",
    FINISHED: "finished",
    UNRECORDED: "admitted, then evicted: its Pods are gone, so whether and how long it ran is not in the record",
}

_POD_GATE = {
    "Scheduled": 4,
    "FailedScheduling": 4,
    "Preempted": 4,
    "UnexpectedAdmissionError": 5,
    "FailedCreatePodSandBox": 5,
}
_WORKLOAD_GATE = {
    # Kueue's scheduler and workload controller
    "Pending": 2,
    "SecondPassFailed": 2,
    "QuotaReserved": 2,
    "Preempted": 2,
    "AdmissionGated": 2,
    "AdmissionGateCleared": 2,
    "AdmissionCheckRejected": 3,
    "Admitted": 3,
    # the node-devices check
    "Ready": 3,
    "Retry": 3,
    "Rejected": 3,
}


def workload_event_gate(reason: str) -> int | None:
    """The gate a Workload Event belongs to; Kueue names an eviction ``EvictedDueTo<reason>``, and from 0.19 a hold
    by its pending-reason token (``WaitingForQuota``, ``TopologyPlacementFailed``, …)."""
    if reason in TOKENS or reason in CLASSIC:
        return 2
    if reason.startswith("EvictedDueTo"):
        cause = reason.removeprefix("EvictedDueTo")
        return 3 if cause.startswith("AdmissionCheck") else 4 if cause.startswith("PodsReadyTimeout") else 2
    return _WORKLOAD_GATE.get(reason)


def _m(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


@dataclass(frozen=True, slots=True)
class EventRecord:
    """One Kubernetes Event, from either API (``events.k8s.io/v1`` or core ``v1``)."""

    namespace: str
    name: str
    regarding_kind: str
    regarding_name: str
    regarding_namespace: str
    regarding_uid: str
    reason: str
    note: str
    type: str
    controller: str
    first: str
    """When it first happened (``eventTime``, else ``firstTimestamp``, else creation)."""
    last: str
    """When it last happened (``series.lastObservedTime``, else ``lastTimestamp``, else ``first``)."""
    count: int


def parse_event(obj: Mapping[str, Any]) -> EventRecord:
    meta = _m(obj.get("metadata"))
    regarding = _m(obj.get("regarding")) or _m(obj.get("involvedObject"))
    series = _m(obj.get("series"))
    source = _m(obj.get("source"))
    first = str(
        obj.get("eventTime")
        or obj.get("deprecatedFirstTimestamp")
        or obj.get("firstTimestamp")
        or meta.get("creationTimestamp")
        or ""
    )
    last = str(
        series.get("lastObservedTime") or obj.get("deprecatedLastTimestamp") or obj.get("lastTimestamp") or first
    )
    count = series.get("count") or obj.get("deprecatedCount") or obj.get("count") or 1
    return EventRecord(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        regarding_kind=str(regarding.get("kind") or ""),
        regarding_name=str(regarding.get("name") or ""),
        regarding_namespace=str(regarding.get("namespace") or ""),
        regarding_uid=str(regarding.get("uid") or ""),
        reason=str(obj.get("reason") or ""),
        note=str(obj.get("note") or obj.get("message") or ""),
        type=str(obj.get("type") or ""),
        controller=str(obj.get("reportingController") or source.get("component") or ""),
        first=first,
        last=last,
        count=count if isinstance(count, int) and not isinstance(count, bool) and count > 0 else 1,
    )


@dataclass(frozen=True, slots=True)
class Line:
    """One line of the story."""

    time: str
    gate: int | None
    source: str
    reason: str
    message: str
    about: str = ""
    """What the line is about when it is not the Workload itself (``pod/NAME``)."""
    count: int = 1
    last: str = ""
    """For an Event seen more than once: when it was last seen."""
    state: str | None = None
    """The state the Workload enters with this line, when it changes it."""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "time": self.time,
            "gate": self.gate,
            "source": self.source,
            "reason": self.reason,
            "message": self.message,
        }
        if self.about:
            out["about"] = self.about
        if self.count > 1:
            out["count"] = self.count
            out["lastSeen"] = self.last
        return out


@dataclass(frozen=True, slots=True)
class Span:
    state: str
    start: float
    end: float

    @property
    def seconds(self) -> float:
        return max(0.0, self.end - self.start)


@dataclass(frozen=True, slots=True)
class History:
    lines: tuple[Line, ...]
    spans: tuple[Span, ...]
    incomplete: str
    """Why the record may miss lines ("" when it holds everything the cluster ever kept)."""
    summary: str

    def totals(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for s in self.spans:
            out[s.state] = out.get(s.state, 0.0) + s.seconds
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "history": [line.to_dict() for line in self.lines],
            "states": [
                {"state": state, "seconds": round(seconds, 3)} for state, seconds in self.totals().items() if seconds
            ],
            "summary": self.summary,
            "incomplete": self.incomplete or None,
        }


def _named(message: str, by_uid: Mapping[str, str]) -> str:
    """An eviction message with its preemptor named (Kueue's classic form gives only the UID)."""
    found = eviction(message, by_uid) if "reempt" in message else None
    if found is None or found.preemptor in message:
        return message
    return f"{message} [{found.describe()}]"


def _condition_lines(w: Workload, has_check: bool, by_uid: Mapping[str, str]) -> list[Line]:
    out = []
    if w.created:
        out.append(Line(w.created, 1, CONDITION, "Created", "the Workload was created", state=QUEUED))
    for c in w.conditions.values():
        if not c.last_transition:
            continue
        state: str | None = None
        gate: int | None = None
        if c.type == "QuotaReserved":
            gate = 2
            state = (CHECK if has_check else PLACING) if c.true else QUEUED
        elif c.type == "Admitted":
            gate = 3
            state = PLACING if c.true else None
        elif c.type == "Evicted":
            gate = 3 if c.reason == "AdmissionCheck" else 4 if c.reason == "PodsReadyTimeout" else 2
            state = QUEUED if c.true else None
        elif c.type in ("Requeued", "BlockedOnPreemptionGates"):
            gate = 2
        elif c.type == "PodsReady":
            gate = 4
            state = RUNNING if c.true else None
        elif c.type == "Finished":
            state = FINISHED if c.true else None
        else:
            continue
        message = _named(c.message, by_uid) if c.message else f"{c.type} is {c.status}"
        reason = f"{c.type}={c.status}" + (f" ({c.reason})" if c.reason and c.reason != c.type else "")
        out.append(Line(c.last_transition, gate, CONDITION, reason, message, state=state))
    return out


def _event_line(e: EventRecord, about: str, has_check: bool, by_uid: Mapping[str, str]) -> Line:
    state: str | None = None
    if about:
        gate = _POD_GATE.get(e.reason)
    else:
        gate = workload_event_gate(e.reason)
        if e.reason == "QuotaReserved":
            state = CHECK if has_check else PLACING
        elif e.reason == "Admitted":
            state = PLACING
        elif e.reason.startswith("EvictedDueTo") or e.reason == "Preempted":
            state = QUEUED
    return Line(e.first, gate, EVENT, e.reason, _named(e.note, by_uid), about, e.count, e.last, state)


def _pod_lines(pods: Sequence[Pod], started: Mapping[str, str]) -> list[Line]:
    """Each Pod's scheduling condition; the Workload running from when every Pod started its containers (their
    status, else the kubelet's ``Started`` Event in ``started`` by Pod name) and finished when every Pod's
    containers have (a running, succeeded or failed Pod alike)."""
    out = []
    for p in pods:
        scheduled = p.conditions.get("PodScheduled")
        if scheduled is not None and scheduled.last_transition:
            message = scheduled.message or (f"bound to {p.node_name}" if scheduled.true else "not scheduled")
            reason = f"PodScheduled={scheduled.status}" + (f" ({scheduled.reason})" if scheduled.reason else "")
            out.append(Line(scheduled.last_transition, 4, CONDITION, reason, message, f"pod/{p.name}"))
    if not pods:
        return out
    one = f"pod/{pods[0].name}" if len(pods) == 1 else ""
    starts = [p.started_at or started.get(p.name, "") for p in pods]
    if all(starts):
        first = max(starts, key=lambda t: epoch_seconds(t) or 0.0)
        said = f"{one} started its containers" if one else f"every Pod started its containers ({len(pods)})"
        out.append(Line(first, 5, CONDITION, "Started", said, state=RUNNING))
    else:
        ready = [r.last_transition for p in pods if (r := p.conditions.get("Ready")) and r.true and r.last_transition]
        live = [p for p in pods if not p.finished]
        if live and len(ready) == len(live):
            last = max(ready, key=lambda t: epoch_seconds(t) or 0.0)
            out.append(Line(last, 5, CONDITION, "Ready=True", f"every Pod is ready ({len(live)})", state=RUNNING))
    if all(p.finished and p.finished_at for p in pods):
        last = max((p.finished_at for p in pods), key=lambda t: epoch_seconds(t) or 0.0)
        phases = ", ".join(sorted({p.phase for p in pods}))
        said = f"{one} finished ({phases})" if one else f"every Pod finished ({phases})"
        out.append(Line(last, 5, CONDITION, "Finished", said, state=FINISHED))
    return out


def _sort_key(line: Line) -> tuple[float, int]:
    t = epoch_seconds(line.time)
    return (t if t is not None else float("inf"), 0 if line.source == CONDITION else 1)


def _ours(e: EventRecord, w: Workload) -> bool:
    return (
        e.regarding_kind == "Workload"
        and e.regarding_name == w.name
        and (e.regarding_namespace or e.namespace) == w.namespace
        and (not e.regarding_uid or not w.uid or e.regarding_uid == w.uid)
    )


def _pod_of(e: EventRecord, pods: Mapping[tuple[str, str], Pod]) -> str:
    if e.regarding_kind != "Pod":
        return ""
    pod = pods.get((e.regarding_namespace or e.namespace, e.regarding_name))
    return f"pod/{pod.name}" if pod is not None else ""


def duration(seconds: float) -> str:
    """``2h10m``, ``20m``, ``45s``: whole units, the two largest."""
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m" + (f"{s % 60}s" if s % 60 and s < 600 else "")
    if s < 86400:
        return f"{s // 3600}h" + (f"{s % 3600 // 60}m" if s % 3600 // 60 else "")
    return f"{s // 86400}d" + (f"{s % 86400 // 3600}h" if s % 86400 // 3600 else "")


def workload_history(
    w: Workload,
    events: Iterable[EventRecord],
    pods: Sequence[Pod],
    now: float,
    *,
    has_check: bool = True,
    event_ttl: float = EVENT_TTL,
    by_uid: Mapping[str, str] | None = None,
) -> History:
    """The story of one Workload up to ``now`` (seconds since the epoch). ``by_uid`` (UID → ``namespace/name``)
    names the preemptor an eviction gives only by UID."""
    by_uid = by_uid or {}
    by_pod = {(p.namespace, p.name): p for p in pods}
    lines = _condition_lines(w, has_check, by_uid)
    kept: list[EventRecord] = []
    started: dict[str, str] = {}
    for e in events:
        about = _pod_of(e, by_pod)
        if about or _ours(e, w):
            kept.append(e)
            lines.append(_event_line(e, about, has_check, by_uid))
            if about and e.reason == "Started" and e.first:
                started.setdefault(about.removeprefix("pod/"), e.first)
    lines += _pod_lines(pods, started)
    lines.sort(key=_sort_key)
    spans = _spans(lines, now, ran_unrecorded=not pods)
    return History(tuple(lines), spans, _incomplete(w, kept, now, event_ttl), _summary(w, lines, spans))


def _spans(lines: Sequence[Line], now: float, *, ran_unrecorded: bool = False) -> tuple[Span, ...]:
    """The states one after another. With ``ran_unrecorded`` (no Pod in the record), the time from an admission to
    the eviction that ends it is not charged to the scheduler: the Pods may have run, and the record no longer says."""
    spans: list[Span] = []
    state: str | None = None
    since = 0.0
    for line in lines:
        t = epoch_seconds(line.time)
        if line.state is None or t is None or line.state == state:
            continue
        if state is not None:
            ended = UNRECORDED if ran_unrecorded and state == PLACING and line.state == QUEUED else state
            spans.append(Span(ended, since, t))
        state, since = line.state, t
    if state is not None and state != FINISHED:
        spans.append(Span(state, since, max(since, now)))
    return tuple(spans)


def _summary(w: Workload, lines: Sequence[Line], spans: Sequence[Span]) -> str:
    waiting = [s for s in spans if s.state in (QUEUED, CHECK, PLACING)]
    total = sum(s.seconds for s in waiting)
    if not spans:
        return "no recorded transitions"
    parts: dict[str, float] = {}
    for s in waiting:
        parts[s.state] = parts.get(s.state, 0.0) + s.seconds
    phrases = [f"{duration(sec)} {STATE_PHRASES[state]}" for state, sec in parts.items() if int(sec) > 0]
    verb = "waited" if spans[-1].state in (RUNNING, FINISHED) or w.finished else "waiting"
    text = f"{verb} {duration(total)}" + (": " + ", ".join(phrases) if phrases else "")
    retry = next(
        (line for line in reversed(lines) if line.source == EVENT and line.reason == "Retry" and not line.about), None
    )
    if retry is not None and CHECK in parts:
        text += f"; the check last said: {retry.message}"
    running = sum(s.seconds for s in spans if s.state == RUNNING)
    if int(running) > 0:
        text += f"; ran {duration(running)}"
    unknown = sum(s.seconds for s in spans if s.state == UNRECORDED)
    if int(unknown) > 0:
        text += f"; {duration(unknown)} {STATE_PHRASES[UNRECORDED]}"
    return text


def _incomplete(w: Workload, kept: Sequence[EventRecord], now: float, ttl: float) -> str:
    created = epoch_seconds(w.created) if w.created else None
    if created is None:
        return "the Workload's creation time is unknown"
    if now - created <= ttl:
        return ""
    oldest = min((t for e in kept if (t := epoch_seconds(e.first)) is not None), default=None)
    since = f"before {_rfc3339(oldest)} " if oldest is not None else ""
    return (
        f"the API server deletes Events after its --event-ttl (an hour by default) and this Workload is older: "
        f"what happened {since}is told only by each condition's last transition"
    )


def _rfc3339(seconds: float) -> str:
    import datetime

    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
