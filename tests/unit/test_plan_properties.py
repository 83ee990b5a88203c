"""Properties of ``plan partitions`` over generated pools and demands (states consistent by construction).

For every plan: each step, replayed through the simulator's own scenarios — its blockers finish, its cards switch
(``set_mode`` refuses a card still busy, so a step that skipped a holder fails here) — with the steps before it, and
the demand then simulated in order, admits exactly what the plan claims admitted by then (what it admitted before,
plus each step's ``admits``, less its ``displaces``), and no card, counting the Pods the pool had and those placed,
is over-committed or holds a mode its switched capability does not serve. The last step admits exactly what the
plan says it admits in the end, and never less than what was admitted before it.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuctl.cluster import read
from gpuctl.core import plan
from gpuctl.core.simulate import Simulator
from tests.memory_cluster import MemoryCluster
from tests.states import H100, MODE_EXCLUSIVE, MODE_SLICED, NS, Hold, State, overcommits, partition

GPU = "nvidia.com/gpu"
PROFILES = ["1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb"]


@st.composite
def pools(draw: st.DrawFn) -> State:
    """H100 nodes, each card whole or partitioned, held by Workloads or Pods outside Kueue or free; a queue of
    partition and whole-card requests."""
    state = State()
    serial = iter(range(10_000))
    for n in range(draw(st.integers(1, 3))):
        node = f"h{n}"
        cards = draw(st.integers(1, 4))
        carved = [c for c in range(cards) if draw(st.booleans())]
        state.node(node, cards, H100, partitioned=carved)
        for c in range(cards):
            owner = draw(st.sampled_from([f"held{next(serial)}", None, "free", "free"]))
            if owner == "free":
                continue
            if c in carved:
                profile, start = draw(st.sampled_from([("3g.40gb", 0), ("1g.10gb", 6), ("7g.80gb", 0)]))
                state.hold(owner, node, partition(c, profile, start), priority=draw(st.integers(0, 2)))
            elif draw(st.booleans()):
                state.hold(owner, node, [Hold(c, MODE_EXCLUSIVE)], priority=draw(st.integers(0, 2)))
            else:
                state.hold(owner, node, [Hold(c, MODE_SLICED, percent=draw(st.integers(10, 90)))])
    for i in range(draw(st.integers(1, 6))):
        if draw(st.integers(0, 3)):
            limits = {f"{GPU}.partitioned": "1", f"{GPU}.partitioned.mig-{draw(st.sampled_from(PROFILES))}": "1"}
        else:
            limits = {GPU: str(draw(st.integers(1, 2)))}
        state.wait(f"d{i}", limits, model=H100, created=f"2026-12-01T00:{i:02d}:00Z", priority=draw(st.integers(0, 1)))
    state.nominal[H100.pool] = 64
    return state


def _replayed(base: Simulator, steps: list[dict[str, Any]]) -> tuple[Simulator, set[str]]:
    sim = base.copy()
    demand = plan.demand_of(sim, H100.pool)
    for s in steps:
        gone = [f"{h['namespace']}/{h['name']}" for h in s["blockedBy"] if h["kind"] == "Workload"]
        if gone:
            sim.remove(gone)
        sim.set_mode(s["node"], s["cards"], s["to"])
    return sim, {o.submission.key for o in (sim.simulate(d) for d in demand) if o.admitted}


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(pools())
def test_every_step_replayed_admits_what_the_plan_claims_and_overcommits_no_card(state: State) -> None:
    base = Simulator(read.simulation_state(MemoryCluster(state.objects())))
    sim = base.copy()
    demand = plan.demand_of(sim, H100.pool)
    p = plan.plan_partitions(sim, sim.state.instancetypes[H100.pool], demand)
    steps = [s.to_dict() for s in p.steps]
    claimed = set(p.admitted_before)
    for i, step in enumerate(steps):
        assert step["proven"] is True
        claimed |= {f"{a['namespace']}/{a['name']}" for a in step["admits"]}
        claimed -= {f"{a['namespace']}/{a['name']}" for a in step["displaces"]}
        replayed, admitted = _replayed(base, steps[: i + 1])
        assert claimed == admitted, (i, claimed ^ admitted)
        assert overcommits(replayed) == [], (i, overcommits(replayed))
        for h in step["blockedBy"]:  # a holder is a Workload that finished first, never a Pod outside Kueue
            assert h["kind"] == "Workload" and f"{h['namespace']}/{h['name']}" not in {
                w.key for w in replayed.workloads
            }
    final = _replayed(base, steps)[1]
    assert final == set(p.admitted_after)
    assert set(p.admitted_before) <= final  # a plan never takes what is admitted already
    assert {k for k, _ in p.still_held} == {f"{NS}/d{i}" for i in range(len(demand))} - final


def test_a_plan_gives_back_what_an_earlier_step_set_aside() -> None:
    """Carving two whole cards of h0 admits three partitions but sets aside d0 (two whole cards), which switching
    h1's partitioned card to whole gives back: a step counts when it admits more, or gives back what is admitted as
    things are, so the plan ends admitting all that was admitted before it."""
    state = State()
    state.node("h0", 4, H100, partitioned=[])
    state.node("h1", 3, H100, partitioned=[0])
    for name, node, card in (("held0", "h0", 0), ("held2", "h0", 2), ("held5", "h1", 1)):
        state.hold(name, node, [Hold(card, MODE_SLICED, percent=10)])
    mig = f"{GPU}.partitioned"
    for i, limits in enumerate(
        (
            {GPU: "2"},
            {mig: "1", f"{mig}.mig-1g.10gb": "1"},
            {GPU: "2"},
            {mig: "1", f"{mig}.mig-1g.10gb": "1"},
            {mig: "1", f"{mig}.mig-3g.40gb": "1"},
            {mig: "1", f"{mig}.mig-7g.80gb": "1"},
        )
    ):
        state.wait(f"d{i}", limits, model=H100, created=f"2026-12-01T00:{i:02d}:00Z", priority=1 if i == 5 else 0)
    state.nominal[H100.pool] = 64
    base = Simulator(read.simulation_state(MemoryCluster(state.objects())))
    sim = base.copy()
    p = plan.plan_partitions(sim, sim.state.instancetypes[H100.pool], plan.demand_of(sim, H100.pool))
    assert set(p.admitted_before) == {f"{NS}/d0", f"{NS}/d5"}
    steps = [s.to_dict() for s in p.steps]
    assert [(s["node"], s["to"]) for s in steps] == [("h0", "partitioned"), ("h1", "whole")]
    final = _replayed(base, steps)[1]
    assert final == set(p.admitted_after) >= set(p.admitted_before)
    assert len(final) > len(p.admitted_before)
