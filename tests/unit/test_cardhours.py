"""Card-hours over a window: the window's rules, the PromQL asked, and the rows its answers make."""

from __future__ import annotations

import pytest

from gpuctl.core.cardhours import (
    JOIN,
    Sample,
    Series,
    Window,
    WindowError,
    align,
    card_hours,
    evaluate,
    idle,
    queries,
    selector,
)
from gpuctl.core.usage import By

DAY = 86400


def window(**kw: int | float) -> Window:
    args: dict[str, int | float] = {"until": 30 * DAY, "seconds": DAY, "step": 60, "idle_for": 1800, "idle_below": 0.05}
    args.update(kw)
    return Window(**args)  # type: ignore[arg-type]


def test_a_window_is_whole_steps_and_an_idle_rule_of_at_least_one_step() -> None:
    assert window().hours_per_step == pytest.approx(1 / 60)
    assert align(1000.5, 60) == 960
    for bad in ({"step": 0}, {"seconds": 90}, {"idle_for": 30}, {"idle_for": 90}, {"idle_below": 0}, {"until": 61}):
        with pytest.raises(WindowError):
            window(**bad)
    with pytest.raises(WindowError, match="at most 200000"):
        window(seconds=365 * DAY, step=60)


def test_idle_now_looks_back_a_week_in_at_most_200000_steps() -> None:
    from gpuctl.core.cardhours import idle_window

    assert idle_window(30 * DAY + 59, 60, 1800, 0.05) == window(seconds=7 * DAY)  # 10,080 steps of a minute
    assert idle_window(30 * DAY, 1, 1800, 0.05).seconds == 200_000  # a week of seconds is 604,800 steps
    for step in (0, 8 * DAY):
        with pytest.raises(WindowError, match=r"^--step must be a positive duration of at most 7d with --idle$"):
            idle_window(30 * DAY, step, 1800, 0.05)


def test_matchers_quote_what_they_are_given() -> None:
    assert selector() == ""
    assert selector("team-a") == '{namespace="team-a"}'
    assert selector('we"ird', ["a.b", "c"]) == '{namespace="we\\"ird", instancetype=~"a\\\\.b|c"}'


def test_the_idle_rule_looks_back_for_a_run_and_ahead_for_its_end() -> None:
    """30 minutes at a 1 minute step: a run ends where the 30 steps before are all low; a step is idle when such an
    end lies within the 30 steps from it (the ahead window is offset by 29 steps)."""
    text = idle(window())
    assert "< bool 0.05)[1800s:60s]) >= bool 30)" in text
    assert text.endswith("[1800s:60s] offset -1740s)")
    assert "offset" not in idle(window(idle_for=60))  # one step: the run is the step itself


def test_each_figure_sums_its_steps_by_group_and_mode_joined_on_card_and_profile() -> None:
    q = queries(window(), By.LOCALQUEUE, "team-a", ["p1"])
    assert set(q) == {"held", "idle", "noData", "reserved", "covered"}
    assert q["held"].startswith(
        "sum by (namespace, localqueue, mode) (sum_over_time((last_over_time(gpuctl_card_holder"
    )
    assert q["held"].endswith("[86400s:60s])) * 60 / 3600")
    on = f"on({', '.join(JOIN)})"
    assert f"* {on} group_left()" in q["idle"] and f"unless {on}" in q["noData"]
    assert "sum by (namespace, localqueue) (" in q["reserved"] and "mode" not in q["reserved"]
    assert '{namespace="team-a", instancetype=~"p1"}' in q["held"]


def test_answers_become_rows_per_group_and_mode_in_the_ledgers_order() -> None:
    answers = {
        "held": [
            Sample({"namespace": "b", "mode": "sliced"}, 3.0),
            Sample({"namespace": "b", "mode": "exclusive"}, 10.0),
            Sample({"namespace": "a", "mode": "partitioned"}, 11.77),
        ],
        "idle": [Sample({"namespace": "b", "mode": "exclusive"}, 10.0)],
        "noData": [Sample({"namespace": "b", "mode": "sliced"}, 1.5)],
        "reserved": [Sample({"namespace": "b"}, 2.0)],
        "covered": [Sample({}, 24.0)],
    }
    result = card_hours(window(), By.NAMESPACE, answers)
    assert [(r.group, r.mode, r.card_hours, r.idle_card_hours, r.no_data_card_hours) for r in result.rows] == [
        (("a",), "partitioned", 11.77, 0.0, 0.0),
        (("b",), "exclusive", 10.0, 10.0, 0.0),
        (("b",), "sliced", 3.0, 0.0, 1.5),
        (("b",), "reserved", 2.0, 0.0, 0.0),
    ]
    assert result.covered_hours == 24.0 and result.window_hours == 24.0


def documented_queries() -> dict[str, str]:
    """The PromQL docs/usage.md shows, by figure."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "usage.md").read_text()
    return dict(re.findall(r"<!-- cardhours:(\w+) -->\n```promql\n(.*?)\n```", text, re.S))


def test_the_documented_promql_is_what_usage_since_asks() -> None:
    """docs/usage.md's queries are those of a 30-day window, 5m step, idle below 5 % for 30m, by namespace."""
    w = Window(until=30 * DAY, seconds=30 * DAY, step=300, idle_for=1800, idle_below=0.05)
    asked = queries(w, By.NAMESPACE)
    documented = documented_queries()
    assert set(documented) == set(asked)
    for name, expr in asked.items():
        assert " ".join(documented[name].split()) == " ".join(expr.split()), name


def test_idle_now_lists_the_holders_of_idle_cards_most_held_first() -> None:
    from gpuctl.core.cardhours import idle_holders, idle_now_queries

    w = window(seconds=7 * DAY)
    q = idle_now_queries(w, "team-a")
    assert q["holders"].startswith(
        'last_over_time(gpuctl_card_holder{namespace="team-a"}[60s]) * on(UUID, GPU_I_PROFILE)'
    )
    assert "timestamp(" in q["lastBusy"] and "[604800s:60s]" in q["lastBusy"]
    card = {"UUID": "GPU-1", "GPU_I_PROFILE": ""}
    answers = {
        "holders": [
            Sample({**card, "pod": "small"}, 0.3),
            Sample({**card, "pod": "big"}, 0.7),
            Sample({"UUID": "GPU-2", "GPU_I_PROFILE": "", "pod": "busy"}, 0.0),  # its card worked lately
            Sample({"UUID": "GPU-3", "GPU_I_PROFILE": "3g.40gb", "pod": "mig"}, 0.49),
        ],
        "lastBusy": [Sample(card, w.until - 7200.0)],
    }
    got = [(h.labels["pod"], h.card_equivalents, h.idle_seconds) for h in idle_holders(w, answers)]
    assert got == [("big", 0.7, 7200), ("mig", 0.49, None), ("small", 0.3, 7200)]


# ----------------------------------------------------------------------------------------------- offline, by hand

H = 3600
STEP = 300  # 5 minutes: 12 steps an hour


def grid(start_h: float, end_h: float, value: float, until: int) -> dict[int, float]:
    """``value`` at each step in ``(until - 24h + start_h, until - 24h + end_h]``."""
    base = until - 24 * H
    return {t: value for t in range(base + int(start_h * H) + STEP, base + int(end_h * H) + 1, STEP)}


def test_hand_computed_cases_over_one_day() -> None:
    """One day at a 5 minute step, idle below 5 % for 30 minutes:

    - team-a holds GPU-A whole for 10 h at 0 %: 10 card-hours, all 10 idle (the whole run counts, its first 30
      minutes too);
    - team-b holds a 3g.40gb on an 80 GiB H100, GPU-H (the fold: 40192 MiB × 1,600,000 / 81920 MiB = 785,000 units,
      0.490625 of a card) for 24 h while it works: 24 × 0.490625 = 11.775 card-hours (11.77), none idle;
    - team-c and team-d each hold a 30 % slice of GPU-S for 24 h; team-d works (the card reads 40 %): 7.2 card-hours
      each, none idle for either (a slice is idle only when its whole card is);
    - team-e reserves 0.5 card for 2 h: 1 reserved card-hour;
    - team-f holds GPU-G whole for 24 h, its exporter silent for 3 h (a scrape gap) and 0 % otherwise: 24 held,
      3 without data, 21 idle.
    """
    until = 30 * DAY
    w = Window(until=until, seconds=DAY, step=STEP, idle_for=1800, idle_below=0.05)
    fold = 785_000 / 1_600_000

    def holder(ns: str, uuid: str, mode: str, values: dict[int, float], profile: str = "") -> Series:
        return Series({"namespace": ns, "UUID": uuid, "GPU_I_PROFILE": profile, "mode": mode}, values)

    def card(uuid: str, values: dict[int, float], profile: str = "") -> Series:
        return Series({"UUID": uuid, "GPU_I_PROFILE": profile}, values)

    gapped = {**grid(0, 10, 0.0, until), **grid(13, 24, 0.0, until)}
    sampled = {
        "held": [
            holder("team-a", "GPU-A", "exclusive", grid(2, 12, 1.0, until)),
            holder("team-b", "GPU-H", "partitioned", grid(0, 24, fold, until), "3g.40gb"),
            holder("team-c", "GPU-S", "sliced", grid(0, 24, 0.3, until)),
            holder("team-d", "GPU-S", "sliced", grid(0, 24, 0.3, until)),
            holder("team-f", "GPU-G", "exclusive", grid(0, 24, 1.0, until)),
        ],
        "busy": [
            card("GPU-A", grid(0, 24, 0.0, until)),
            card("GPU-H", grid(0, 24, 0.6, until), "3g.40gb"),
            card("GPU-S", grid(0, 24, 0.4, until)),
            card("GPU-G", gapped),
        ],
        "reserved": [Series({"namespace": "team-e"}, grid(5, 7, 0.5, until))],
        "covered": [Series({}, grid(0, 24, 1.0, until))],
    }
    result = card_hours(w, By.NAMESPACE, evaluate(w, By.NAMESPACE, sampled))
    rows = {(r.group[0], r.mode): (r.card_hours, r.idle_card_hours, r.no_data_card_hours) for r in result.rows}
    assert rows[("team-a", "exclusive")] == pytest.approx((10.0, 10.0, 0.0))
    assert rows[("team-b", "partitioned")] == pytest.approx((24 * fold, 0.0, 0.0))
    assert int(24 * fold * 100) / 100 == 11.77
    assert rows[("team-c", "sliced")] == pytest.approx((7.2, 0.0, 0.0))
    assert rows[("team-d", "sliced")] == pytest.approx((7.2, 0.0, 0.0))
    assert rows[("team-e", "reserved")] == pytest.approx((1.0, 0.0, 0.0))
    assert rows[("team-f", "exclusive")] == pytest.approx((24.0, 21.0, 3.0))
    assert result.covered_hours == pytest.approx(24.0)
    # The rows add up to what the holders held.
    assert sum(r.card_hours for r in result.rows if r.mode != "reserved") == pytest.approx(
        10 + 24 * fold + 7.2 + 7.2 + 24
    )


def test_a_run_shorter_than_idle_for_is_not_idle() -> None:
    until = 30 * DAY
    w = Window(until=until, seconds=DAY, step=STEP, idle_for=1800, idle_below=0.05)
    busy = {**grid(0, 24, 0.9, until), **grid(5, 5.25, 0.0, until)}  # 15 low minutes
    sampled = {
        "held": [
            Series({"namespace": "a", "UUID": "G", "GPU_I_PROFILE": "", "mode": "exclusive"}, grid(0, 24, 1.0, until))
        ],
        "busy": [Series({"UUID": "G", "GPU_I_PROFILE": ""}, busy)],
    }
    [row] = card_hours(w, By.NAMESPACE, evaluate(w, By.NAMESPACE, sampled)).rows
    assert (row.card_hours, row.idle_card_hours) == pytest.approx((24.0, 0.0))
