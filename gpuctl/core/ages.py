"""How long things have been: ages printed as kubectl prints AGE, and when the gate that holds a Workload began
holding it (read from its conditions' and check's transition times).

Every function here takes "now" as an argument: the commands pass the clock (a snapshot's, where it records when it
was taken), and tests fix it."""

from __future__ import annotations

from gpuctl.core.queueing import epoch_seconds
from gpuctl.core.workloads import Workload

UNKNOWN_AGE = "<unknown>"
"""What kubectl prints for an object with no creation time."""


def age_text(seconds: float | None) -> str:
    """A duration as kubectl's AGE column prints it: seconds up to 2 minutes, minutes (with seconds under 10) up to
    3 hours, hours (with minutes under 8) up to 2 days, days (with hours under 8) up to 2 years, then years."""
    if seconds is None:
        return UNKNOWN_AGE
    s = int(seconds)
    if s < -1:
        return "<invalid>"  # a clock skewed against the server's by more than the second kubectl tolerates
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return _two(minutes, "m", s % 60, "s")
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 8:
        return _two(hours, "h", minutes % 60, "m")
    if hours < 48:
        return f"{hours}h"
    days = hours // 24
    if hours < 24 * 8:
        return _two(days, "d", hours % 24, "h")
    if days < 365 * 2:
        return f"{days}d"
    if days < 365 * 8:
        return _two(days // 365, "y", days % 365, "d")
    return f"{days // 365}y"


def _two(major: int, major_unit: str, minor: int, minor_unit: str) -> str:
    return f"{major}{major_unit}" if minor == 0 else f"{major}{major_unit}{minor}{minor_unit}"


def since(rfc3339: str, now: float) -> str:
    """The age of an RFC 3339 time at ``now`` (``<unknown>`` for none)."""
    at = epoch_seconds(rfc3339) if rfc3339 else None
    return age_text(None if at is None else now - at)


def _latest(*stamps: str) -> str:
    """The latest of some RFC 3339 times (compared as instants), "" for none."""
    best, best_at = "", float("-inf")
    for stamp in stamps:
        at = epoch_seconds(stamp) if stamp else None
        if at is not None and at > best_at:
            best, best_at = stamp, at
    return best


def hold_started(w: Workload, held_by: int | None) -> str:
    """When the gate that holds ``w`` began holding it, as an RFC 3339 time ("" when it does not hold it, or the
    Workload records no time for it).

    Gate 1 holds from creation. Gate 2 from the last of its creation, the ``QuotaReserved=False`` transition and an
    eviction or re-queueing (a Workload evicted waits anew). Gate 3 from the quota reservation or the check's last
    change of state, whichever came last. Gates 4 and 5 from admission: the Pods are created, scheduled and
    allocated after it."""
    if held_by is None:
        return ""
    conditions = w.conditions
    if held_by == 1:
        return w.created
    if held_by == 2:
        stamps = [w.created]
        for kind, status in (("QuotaReserved", "False"), ("Evicted", "True"), ("Requeued", "True")):
            c = conditions.get(kind)
            if c is not None and c.status == status:
                stamps.append(c.last_transition)
        return _latest(*stamps)
    if held_by == 3:
        reserved = conditions.get("QuotaReserved")
        stamps = [reserved.last_transition if reserved is not None and reserved.true else ""]
        stamps.extend(c.last_transition for c in w.checks if c.state != "Ready")
        return _latest(*stamps) or w.created
    admitted = conditions.get("Admitted")
    return (admitted.last_transition if admitted is not None and admitted.true else "") or w.created
