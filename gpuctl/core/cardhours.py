"""Card-hours held, and idle, over a window: the PromQL that answers them from the operator's per-holder series and
the DCGM exporter's utilization, and the rows their answers make.

The operator exports ``gpuctl_card_holder{UUID, GPU_I_PROFILE, namespace, ...} = card-equivalents`` for every Pod
holding part of a card, and ``gpuctl_workload_reserved_card_equivalents`` for admitted Workloads whose Pods hold no
card yet. The DCGM exporter reports each card's (``DCGM_FI_DEV_GPU_UTIL``, percent) or each MIG instance's
(``DCGM_FI_PROF_GR_ENGINE_ACTIVE``, a ratio) activity. The two are joined by card UUID and partition profile — never
by the exporter's own ``pod``/``namespace`` labels, which know nothing of slices and shares.

Everything is sampled on one grid of ``step`` seconds, aligned to the epoch: a series counts at a step when it has a
sample in the step before it (so a scrape gap longer than the step is a gap, not a held or idle step), and each
step counts ``step`` seconds. A holder is idle at a step when that step lies in a run of at least ``idle_for`` of
steps at which its card (or MIG instance) reported activity below ``idle_below``. A slice or share is idle only when
its whole card is, and its idle time is its card-equivalents' part of it. Where a holder's card reports no activity
at a step, that step is counted apart, as neither idle nor busy."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gpuctl.core.errors import InputError
from gpuctl.core.usage import MODES, By

HOLDER = "gpuctl_card_holder"
RESERVED = "gpuctl_workload_reserved_card_equivalents"
CAPACITY = "gpuctl_pool_capacity"
CARD_UTIL = "DCGM_FI_DEV_GPU_UTIL"
"""Percent, per whole card."""
INSTANCE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
"""A ratio, per MIG instance (``GPU_I_ID``, ``GPU_I_PROFILE``)."""
JOIN = ("UUID", "GPU_I_PROFILE")
"""What a holder and its card's activity share: the card, and the partition's profile ("" for a whole card)."""

GROUPS: Mapping[By, tuple[str, ...]] = {
    By.NAMESPACE: ("namespace",),
    By.LOCALQUEUE: ("namespace", "localqueue"),
    By.CLUSTERQUEUE: ("clusterqueue",),
    By.INSTANCETYPE: ("instancetype",),
    By.WORKLOAD: ("namespace", "workload"),
}
RESERVED_MODE = "reserved"


MAX_STEPS = 200_000
"""The most steps a window may have (Prometheus' own limit on a subquery's points is higher)."""


class WindowError(InputError, ValueError):
    """A window, step or idle rule that cannot be asked."""


@dataclass(frozen=True, slots=True)
class Window:
    """``(until - seconds, until]`` on a grid of ``step`` seconds, with the idle rule."""

    until: int
    """Epoch seconds, a multiple of ``step``."""
    seconds: int
    step: int
    idle_for: int
    idle_below: float
    """A ratio (0.05 is 5 %)."""

    def __post_init__(self) -> None:
        if self.step <= 0 or self.seconds <= 0:
            raise WindowError("--since and --step must be positive durations")
        if self.seconds % self.step or self.idle_for % self.step or self.until % self.step:
            raise WindowError(
                f"--since, --idle-for and the window's end must be whole multiples of --step ({self.step}s)"
            )
        if self.idle_for < self.step:
            raise WindowError(f"--idle-for must be at least one --step ({self.step}s)")
        if not 0 < self.idle_below <= 1:
            raise WindowError("--idle-below must be a percentage above 0 and at most 100")
        if self.seconds // self.step > MAX_STEPS:
            raise WindowError(
                f"--since over --step is {self.seconds // self.step} steps; at most {MAX_STEPS} (a larger --step)"
            )

    @property
    def hours_per_step(self) -> float:
        return self.step / 3600


def align(until: float, step: int) -> int:
    """The window's end: the last step boundary at or before ``until``."""
    return int(until) // step * step


def _duration(seconds: int) -> str:
    return f"{seconds}s"


def _quoted(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def selector(namespace: str | None = None, pools: Sequence[str] = ()) -> str:
    """The label matchers of a namespace and some pools ("" for every one)."""
    matchers = []
    if namespace is not None:
        matchers.append(f"namespace={_quoted(namespace)}")
    if pools:
        matchers.append(f"instancetype=~{_quoted('|'.join(re.escape(p) for p in pools))}")
    return "{" + ", ".join(matchers) + "}" if matchers else ""


def busy(w: Window) -> str:
    """Each card's (and MIG instance's) activity at a step, as a ratio, keyed by :data:`JOIN`."""
    s = _duration(w.step)
    on = ", ".join(JOIN)
    return (
        f"(max by ({on}) (last_over_time({INSTANCE_ACTIVE}[{s}])) "
        f"or max by ({on}) (last_over_time({CARD_UTIL}[{s}])) / 100)"
    )


def idle(w: Window) -> str:
    """1 at a step inside a run of at least ``idle_for`` of low-activity steps, else 0 (absent where no activity was
    reported): a run ends at a step whose ``idle_for`` before it were all low; a step is idle when such an end lies
    within ``idle_for`` after it."""
    s, y = _duration(w.step), _duration(w.idle_for)
    n = w.idle_for // w.step
    ends = f"(sum_over_time(({busy(w)} < bool {w.idle_below:g})[{y}:{s}]) >= bool {n})"
    ahead = w.idle_for - w.step
    offset = f" offset -{_duration(ahead)}" if ahead else ""
    return f"max_over_time({ends}[{y}:{s}]{offset})"


def held(w: Window, matchers: str) -> str:
    return f"last_over_time({HOLDER}{matchers}[{_duration(w.step)}])"


def _hours(expr: str, labels: Sequence[str], w: Window) -> str:
    return (
        f"sum by ({', '.join(labels)}) (sum_over_time(({expr})[{_duration(w.seconds)}:{_duration(w.step)}]))"
        f" * {w.step} / 3600"
    )


def queries(w: Window, by: By, namespace: str | None = None, pools: Sequence[str] = ()) -> dict[str, str]:
    """The PromQL for each figure, evaluated as instant queries at ``w.until``: card-hours held per group and mode,
    idle, without activity data, and reserved per group; and the hours the operator's series cover."""
    group = GROUPS[by]
    per_mode = (*group, "mode")
    on = ", ".join(JOIN)
    matchers = selector(namespace, pools)
    h = held(w, matchers)
    return {
        "held": _hours(h, per_mode, w),
        "idle": _hours(f"{h} * on({on}) group_left() {idle(w)}", per_mode, w),
        "noData": _hours(f"{h} unless on({on}) {busy(w)}", per_mode, w),
        "reserved": _hours(f"last_over_time({RESERVED}{matchers}[{_duration(w.step)}])", group, w),
        "covered": (
            f"count_over_time((count(last_over_time({CAPACITY}[{_duration(w.step)}])))"
            f"[{_duration(w.seconds)}:{_duration(w.step)}]) * {w.step} / 3600"
        ),
    }


@dataclass(slots=True)
class HoursRow:
    """One group's card-hours in one mode (``reserved`` for reservations without a card)."""

    group: tuple[str, ...]
    mode: str
    card_hours: float = 0.0
    idle_card_hours: float = 0.0
    no_data_card_hours: float = 0.0


@dataclass(frozen=True, slots=True)
class Sample:
    """One element of an instant query's answer."""

    labels: Mapping[str, str]
    value: float


@dataclass(slots=True)
class CardHours:
    by: By
    window: Window
    rows: list[HoursRow] = field(default_factory=list)
    covered_hours: float = 0.0

    @property
    def window_hours(self) -> float:
        return self.window.seconds / 3600


def card_hours(w: Window, by: By, answers: Mapping[str, Sequence[Sample]]) -> CardHours:
    """The rows of the answers to :func:`queries`: one per group and mode (modes in the ledger's order, then
    ``reserved``), groups sorted."""
    group = GROUPS[by]
    rows: dict[tuple[tuple[str, ...], str], HoursRow] = {}

    def row(labels: Mapping[str, str], mode: str) -> HoursRow:
        key = (tuple(labels.get(g, "") for g in group), mode)
        if key not in rows:
            rows[key] = HoursRow(*key)
        return rows[key]

    for sample in answers.get("held", ()):
        row(sample.labels, sample.labels.get("mode", "")).card_hours += sample.value
    for sample in answers.get("idle", ()):
        row(sample.labels, sample.labels.get("mode", "")).idle_card_hours += sample.value
    for sample in answers.get("noData", ()):
        row(sample.labels, sample.labels.get("mode", "")).no_data_card_hours += sample.value
    for sample in answers.get("reserved", ()):
        row(sample.labels, RESERVED_MODE).card_hours += sample.value
    for r in rows.values():  # to a millionth of a card-hour: sums of steps carry float noise below it
        r.card_hours, r.idle_card_hours = round(r.card_hours, 6), round(r.idle_card_hours, 6)
        r.no_data_card_hours = round(r.no_data_card_hours, 6)
    order = {m: i for i, m in enumerate((*MODES, RESERVED_MODE))}
    out = CardHours(by, w, sorted(rows.values(), key=lambda r: (r.group, order.get(r.mode, len(order)), r.mode)))
    out.covered_hours = round(sum(s.value for s in answers.get("covered", ())), 6)
    return out


# ----------------------------------------------------------------------------------------------- idle now

LOOKBACK = 7 * 86400
"""How far back ``usage --idle`` looks for a card's last busy step (at most :data:`MAX_STEPS` steps)."""


def lookback(step: int) -> int:
    """How far back ``usage --idle`` looks at ``step``: :data:`LOOKBACK`, in whole steps, within :data:`MAX_STEPS`."""
    return min(LOOKBACK // step, MAX_STEPS) * step


def idle_window(now: float, step: int, idle_for: int, idle_below: float) -> Window:
    """The window ``usage --idle`` reads at ``now``: its :func:`lookback` up to the last step boundary."""
    if not 0 < step <= LOOKBACK:
        raise WindowError(f"--step must be a positive duration of at most {LOOKBACK // 86400}d with --idle")
    return Window(align(now, step), lookback(step), step, idle_for, idle_below)


def idle_now_queries(w: Window, namespace: str | None = None, pools: Sequence[str] = ()) -> dict[str, str]:
    """Instant queries at ``w.until``: every holder with its card's idle verdict now (1 when the last ``idle_for``
    were all low, else 0; absent without activity data), and each card's last busy step within ``w.seconds``."""
    s = _duration(w.step)
    n = w.idle_for // w.step
    on = ", ".join(JOIN)
    ends = f"(sum_over_time(({busy(w)} < bool {w.idle_below:g})[{_duration(w.idle_for)}:{s}]) >= bool {n})"
    return {
        "holders": f"{held(w, selector(namespace, pools))} * on({on}) group_left() {ends}",
        "lastBusy": (
            f"max by ({on}) (max_over_time(timestamp({busy(w)} >= {w.idle_below:g})[{_duration(w.seconds)}:{s}]))"
        ),
    }


@dataclass(frozen=True, slots=True)
class IdleHolder:
    """A Pod holding part of a card idle now."""

    labels: Mapping[str, str]
    card_equivalents: float
    idle_seconds: int | None
    """Since the card's last busy step; None when it was busy at none within the look-back (idle longer)."""


def idle_holders(w: Window, answers: Mapping[str, Sequence[Sample]]) -> list[IdleHolder]:
    """The holders whose card is idle now, most card-equivalents first, then longest idle (``None``, idle beyond the
    look-back, counts longest)."""
    last = {tuple(s.labels.get(k, "") for k in JOIN): s.value for s in answers.get("lastBusy", ())}
    out = []
    for sample in answers.get("holders", ()):
        if sample.value <= 0:
            continue  # held, but its card was busy within idle_for
        at = last.get(tuple(sample.labels.get(k, "") for k in JOIN))
        out.append(IdleHolder(sample.labels, sample.value, None if at is None else max(0, int(w.until - at))))
    out.sort(key=lambda h: (-h.card_equivalents, -(h.idle_seconds if h.idle_seconds is not None else 1 << 62)))
    return out


# ----------------------------------------------------------------------------------------------- offline

SAMPLED = ("held", "reserved", "busy", "covered")
"""The step-sampled series a dump keeps so that :func:`evaluate` answers :func:`queries` without Prometheus."""


@dataclass(frozen=True, slots=True)
class Series:
    """One series sampled on the step grid: epoch second → value."""

    labels: Mapping[str, str]
    values: Mapping[int, float]


def sampled_queries(w: Window) -> dict[str, str]:
    """What a dump asks Prometheus for as range queries (``step`` = the window's step), over the window and the
    ``idle_for`` before it: the held and reserved card-equivalents, each card's activity, and whether the operator
    reported at all."""
    s = _duration(w.step)
    return {
        "held": held(w, ""),
        "reserved": f"last_over_time({RESERVED}[{s}])",
        "busy": busy(w),
        "covered": f"count(last_over_time({CAPACITY}[{s}]))",
    }


def _matches(labels: Mapping[str, str], namespace: str | None, pools: Sequence[str]) -> bool:
    return (namespace is None or labels.get("namespace", "") == namespace) and (
        not pools or labels.get("instancetype", "") in pools
    )


def evaluate(
    w: Window, by: By, sampled: Mapping[str, Sequence[Series]], namespace: str | None = None, pools: Sequence[str] = ()
) -> dict[str, list[Sample]]:
    """The answers :func:`queries` would get, computed from step-sampled series by the same rules (a dump's
    ``usage --since``): each step of ``(until - seconds, until]`` counts ``step`` seconds."""
    step = w.step
    n = w.idle_for // step
    group = GROUPS[by]
    per_mode = (*group, "mode")
    busy_by_card: dict[tuple[str, ...], Mapping[int, float]] = {}
    for s in sampled.get("busy", ()):
        key = tuple(s.labels.get(k, "") for k in JOIN)
        merged = dict(busy_by_card.get(key, {}))
        for t, v in s.values.items():
            merged[t] = max(v, merged.get(t, v))
        busy_by_card[key] = merged

    first, last = w.until - w.seconds + step, w.until
    steps = range(first, last + 1, step)

    def verdicts(card: Mapping[int, float]) -> dict[int, bool | None]:
        """Per step of the window: idle (in a run of n low steps), not idle, or None (no activity data near)."""
        lo = first - (n - 1) * step
        hi = last + (n - 1) * step
        ends: dict[int, bool | None] = {}
        present = low = 0
        window: list[tuple[bool, bool]] = []
        for t in range(lo, hi + 1, step):
            v = card.get(t)
            window.append((v is not None, v is not None and v < w.idle_below))
            present += window[-1][0]
            low += window[-1][1]
            if len(window) > n:
                gone = window.pop(0)
                present -= gone[0]
                low -= gone[1]
            ends[t] = (low == n) if present else None
        out: dict[int, bool | None] = {}
        for t in range(first, last + 1, step):
            ahead = [ends.get(m) for m in range(t, t + n * step, step)]
            known = [e for e in ahead if e is not None]
            out[t] = any(known) if known else None
        return out

    idle_by_card: dict[tuple[str, ...], dict[int, bool | None]] = {}

    def idle_at(key: tuple[str, ...], t: int) -> bool | None:
        if key not in idle_by_card:
            card = busy_by_card.get(key)
            idle_by_card[key] = verdicts(card) if card else {}
        return idle_by_card[key].get(t)

    def add(into: dict[tuple[str, ...], float], labels: Mapping[str, str], keys: Sequence[str], value: float) -> None:
        k = tuple(labels.get(g, "") for g in keys)
        into[k] = into.get(k, 0.0) + value

    hours = step / 3600
    held_h: dict[tuple[str, ...], float] = {}
    idle_h: dict[tuple[str, ...], float] = {}
    nodata_h: dict[tuple[str, ...], float] = {}
    for s in sampled.get("held", ()):
        if not _matches(s.labels, namespace, pools):
            continue
        key = tuple(s.labels.get(k, "") for k in JOIN)
        card = busy_by_card.get(key, {})
        for t in steps:
            share = s.values.get(t)
            if share is None:
                continue
            add(held_h, s.labels, per_mode, share * hours)
            if t not in card:
                add(nodata_h, s.labels, per_mode, share * hours)
            verdict = idle_at(key, t)
            if verdict is not None:
                add(idle_h, s.labels, per_mode, (share if verdict else 0.0) * hours)
    reserved_h: dict[tuple[str, ...], float] = {}
    for s in sampled.get("reserved", ()):
        if _matches(s.labels, namespace, pools):
            for t in steps:
                if t in s.values:
                    add(reserved_h, s.labels, group, s.values[t] * hours)
    covered = sum(hours for s in sampled.get("covered", ()) for t in steps if t in s.values)

    def samples(sums: Mapping[tuple[str, ...], float], keys: Sequence[str]) -> list[Sample]:
        return [Sample(dict(zip(keys, k, strict=True)), v) for k, v in sorted(sums.items())]

    return {
        "held": samples(held_h, per_mode),
        "idle": samples(idle_h, per_mode),
        "noData": samples(nodata_h, per_mode),
        "reserved": samples(reserved_h, group),
        "covered": [Sample({}, covered)] if covered else [],
    }
