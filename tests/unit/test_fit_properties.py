"""Invariants of the gate-3 fit over generated ledgers and Workloads (hypothesis)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuctl.core.fit import READY, FitContext, judge_workload
from gpuctl.core.ledger import Mode, parse_devices
from gpuctl.core.naming import Family
from gpuctl.core.units import SHARE, M
from gpuctl.core.workloads import parse_resource_flavor, parse_workload
from testbed.factories import card_row, devices, flavor, workload

FLAVORS = {"f-a10g": parse_resource_flavor(flavor("f-a10g"))}


@st.composite
def ledger_row(draw: st.DrawFn, index: int) -> dict[str, Any]:
    mode = draw(st.sampled_from([0, 0, 1, 2, 3]))
    if mode == 0:
        return card_row(index)
    if mode == 1:
        return card_row(index, mode=1, allocated=M)
    if mode == 2:
        return card_row(index, mode=2, allocated=draw(st.integers(1, 10)) * SHARE)
    return card_row(index, mode=3, allocated=draw(st.integers(1, 100)) * 16000, slices=draw(st.integers(1, 4)))


@st.composite
def node_ledger(draw: st.DrawFn, name: str) -> dict[str, Any]:
    cards = draw(st.integers(1, 6))
    return devices(name, cards=cards, rows=[draw(ledger_row(i)) for i in range(cards)], logical_slots=4)


@st.composite
def request(draw: st.DrawFn) -> dict[str, str]:
    family = draw(st.sampled_from(["exclusive", "shared", "sliced"]))
    if family == "exclusive":
        return {"nvidia.com/gpu": str(draw(st.integers(1, 4)))}
    if family == "shared":
        return {"nvidia.com/gpu.shared": str(draw(st.integers(1, 4)))}
    pct = draw(st.integers(1, 100))
    return {
        "nvidia.com/gpu.sliced": "1",
        "nvidia.com/gpu.sliced.memory-percentage": str(pct),
        "nvidia.com/gpu.sliced.units": str(pct * 16000),
    }


@st.composite
def scenario(draw: st.DrawFn) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    names = [f"node-{i}" for i in range(draw(st.integers(1, 3)))]
    nodes = [draw(node_ledger(n)) for n in names]
    podsets = [(f"role{i}", draw(st.integers(1, 3)), draw(request())) for i in range(draw(st.integers(1, 2)))]
    hosts = None
    if draw(st.booleans()):
        hosts = {ps: [(draw(st.sampled_from(names)), count)] for ps, count, _ in podsets}
    return nodes, workload("w", podsets, hosts=hosts)


def _ctx(nodes: list[dict[str, Any]]) -> FitContext:
    return FitContext(FLAVORS, {d.node: d for d in (parse_devices(n) for n in nodes)})


@settings(max_examples=300, deadline=None)
@given(scenario())
def test_a_ready_assignment_replayed_on_the_ledger_over_commits_nothing(
    s: tuple[list[dict[str, Any]], dict[str, Any]],
) -> None:
    nodes, raw = s
    ctx = _ctx(nodes)
    v = judge_workload(parse_workload(raw), ctx)
    if v.state != READY:
        return
    cards = {(d.node, c.id): c for d in ctx.devices.values() for c in d.cards("nvidia-a10g")}
    units: dict[tuple[str, str], int] = {}
    slices: dict[tuple[str, str], int] = {}
    families: dict[tuple[str, str], set[Family]] = {}
    for ch in v.charges:
        key = (ch.node, ch.card_id)
        units[key] = units.get(key, 0) + ch.units
        families.setdefault(key, set()).add(ch.family)
        if ch.family is Family.SLICED:
            slices[key] = slices.get(key, 0) + 1
    for key, used in units.items():
        card = cards[key]
        assert len(families[key]) == 1, "a card serves one mode"
        family = next(iter(families[key]))
        held = {
            Family.EXCLUSIVE: (Mode.NONE,),
            Family.SHARED: (Mode.NONE, Mode.SHARED),
            Family.SLICED: (Mode.NONE, Mode.SLICED),
        }[family]
        assert card.mode in held
        assert used <= card.remaining
        assert card.allocated_slices + slices.get(key, 0) <= card.logical_slots
    # Exclusive charges take whole, otherwise untouched cards.
    for ch in v.charges:
        if ch.family is Family.EXCLUSIVE:
            assert cards[(ch.node, ch.card_id)].free and units[(ch.node, ch.card_id)] == M


@settings(max_examples=200, deadline=None)
@given(scenario())
def test_the_verdict_is_deterministic(s: tuple[list[dict[str, Any]], dict[str, Any]]) -> None:
    nodes, raw = s
    first = judge_workload(parse_workload(raw), _ctx(nodes))
    assert judge_workload(parse_workload(raw), _ctx(list(reversed(nodes)))) == first


@settings(max_examples=300, deadline=None)
@given(scenario(), st.data())
def test_adding_a_free_card_never_turns_ready_into_retry(
    s: tuple[list[dict[str, Any]], dict[str, Any]], data: st.DataObject
) -> None:
    nodes, raw = s
    w = parse_workload(raw)
    if judge_workload(w, _ctx(nodes)).state != READY:
        return
    target = data.draw(st.integers(0, len(nodes) - 1))
    grown = [dict(n) for n in nodes]
    spec_cards = grown[target]["spec"]["groups"][0]["accelerators"]
    bigger = devices(
        grown[target]["metadata"]["name"],
        cards=len(spec_cards) + 1,
        rows=grown[target]["status"]["groups"][0]["accelerators"],
        logical_slots=4,
    )
    grown[target] = bigger
    assert judge_workload(w, _ctx(grown)).state == READY
