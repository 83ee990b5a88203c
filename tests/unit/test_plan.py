"""``simulate --set-mode`` and ``plan partitions|drain`` on states consistent by construction (``tests.states``).

The expectations come from the design's geometry written out here (an H100 80GB hosts two 3g.40gb instances, seven
1g.10gb, ...; a Hygon BW four 2g.15gb) and from fresh reads of the state a switch should produce — never from the
planner itself."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuctl.cluster import read
from gpuctl.core import modes, plan
from gpuctl.core.capacity import node_allocatable
from gpuctl.core.instances import parse_instance
from gpuctl.core.pins import node_fit_labels
from gpuctl.core.simulate import ScenarioError, Simulator
from gpuctl.core.submissions import resubmission
from gpuctl.core.units import M
from gpuctl.core.views import instancetype_views, views_to_status
from tests.memory_cluster import MemoryCluster
from tests.states import A10G, H100, HYGON, NS, State, overcommits, partition, slice_of, whole

GPU = "nvidia.com/gpu"
DCU = "hygon.com/dcu"
THREE_G = {f"{GPU}.partitioned": "1", f"{GPU}.partitioned.mig-3g.40gb": "1"}
# The H100 80GB HBM3 profile table: instances of each profile one card hosts.
H100_PER_CARD = {"1g.10gb": 7, "1g.20gb": 4, "2g.20gb": 3, "3g.40gb": 2, "4g.40gb": 1, "7g.80gb": 1}


def simulator(state: State) -> Simulator:
    return Simulator(read.simulation_state(MemoryCluster(state.objects())))


def queued(state: State, n: int, limits: dict[str, str] = THREE_G, model: Any = H100) -> State:
    for i in range(n):
        state.wait(f"w{i}", limits, model=model, created=f"2026-12-01T00:{i:02d}:00Z")
    return state


def planned(state: State, model: Any = H100) -> tuple[Simulator, plan.PartitionPlan]:
    sim = simulator(state)
    base = sim.copy()
    demand = plan.demand_of(sim, model.pool)
    return base, plan.plan_partitions(sim, sim.state.instancetypes[model.pool], demand)


def replay(base: Simulator, steps: Any, demand_of: str) -> tuple[Simulator, set[str]]:
    """The steps applied through the simulator's own scenarios (holders finish, cards switch), then the pool's
    pending Workloads simulated in order: what is admitted."""
    sim = base.copy()
    demand = plan.demand_of(sim, demand_of)
    for s in steps:
        gone = [f"{h['namespace']}/{h['name']}" for h in s["blockedBy"] if h["kind"] == "Workload"]
        if gone:
            sim.remove(gone)
        sim.set_mode(s["node"], s["cards"], s["to"])
    return sim, {o.submission.key for o in (sim.simulate(d) for d in demand) if o.admitted}


# ----------------------------------------------------------------------------------------------- set-mode


def test_a_switched_card_reads_as_a_fresh_read_of_that_layout() -> None:
    """Card 3 of a whole H100 node switched: its keys, fit labels, the pool's catalog and views equal a cluster read
    with card 3 partitioned from the start; the node's credits (a card is M either way) and the quota stand."""
    sim = simulator(State().node("h1", 8, H100, partitioned=()))
    fresh = simulator(State().node("h1", 8, H100, partitioned=(3,)))
    [done] = sim.set_mode("h1", ["GPU-0003"], modes.PARTITIONED)
    assert done.cards == ("GPU-0003",)
    assert dict(sim.free["h1"].allocatable) == dict(fresh.free["h1"].allocatable)
    assert sim.free["h1"].allocatable["credits.gpustack.ai/nvidia"] == 8 * M
    assert sim.labels_of("h1") == fresh.labels_of("h1")
    it, fresh_it = sim.state.instancetypes[H100.pool], fresh.state.instancetypes[H100.pool]
    assert it.offered_profiles == fresh_it.offered_profiles and it.logical_slices == fresh_it.logical_slices
    views = views_to_status(instancetype_views(it, sim.ledgers.values()))
    assert views == views_to_status(instancetype_views(fresh_it, fresh.ledgers.values()))
    pt = views["acceleratorPartitioned"]
    # PT remaining is the card's largest per-profile count (seven 1g.10gb), never the sum over its profiles.
    assert (pt["remaining"], pt["capacity"]) == (7, 7)
    assert {p["name"]: p["count"] for p in pt["remainingProfiles"]} == H100_PER_CARD
    assert views["accelerator"] == {"onceMaxRequest": 7, "remaining": 7, "capacity": 7}
    assert sim.state.cluster_queues[H100.pool].quotas == fresh.state.cluster_queues[H100.pool].quotas


def test_a_partitioned_card_switched_back_serves_a_whole_card_again() -> None:
    sim = simulator(State().node("h1", 1, H100).wait("one", {GPU: "1"}, model=H100))
    [w] = plan.demand_of(sim.copy(), H100.pool)
    assert not sim.copy().simulate(w).admitted
    sim.set_mode("h1", None, modes.WHOLE)
    assert dict(sim.free["h1"].allocatable) == dict(
        simulator(State().node("h1", 1, H100, partitioned=())).free["h1"].allocatable
    )
    sim.remove([w.key])
    outcome = sim.simulate(w)
    assert outcome.admitted and [n.cards for n in outcome.placement] == [("GPU-0000",)]


def test_a_busy_card_refuses_to_switch_and_names_its_holders() -> None:
    state = (
        State().node("h1", 2, H100, partitioned=()).hold("trainer", "h1", whole(0)).hold(None, "h1", slice_of(1, 30))
    )
    sim = simulator(state)
    with pytest.raises(ScenarioError, match=r"h1/GPU-0000: GPU-0000 holds allocations .*Workload team-a/trainer"):
        sim.set_mode("h1", ["GPU-0000"], modes.PARTITIONED)
    with pytest.raises(ScenarioError, match=r"Pod team-a/outside-1"):
        sim.set_mode("h1", ["1"], modes.PARTITIONED)  # a card by index
    sim.finish([f"{NS}/trainer"])
    assert sim.set_mode("h1", ["GPU-0000"], modes.PARTITIONED)[0].cards == ("GPU-0000",)


def test_a_hygon_node_switches_as_a_whole() -> None:
    state = State().node("d1", 8, HYGON).node("d2", 8, HYGON, partitioned=())
    sim = simulator(state)
    with pytest.raises(ScenarioError, match="hygon switches the partition mode of a whole node, not of one card"):
        sim.set_mode("d2", ["GPU-0000"], modes.PARTITIONED)
    done = sim.set_mode("d2", None, modes.PARTITIONED)  # its geometry is d1's, a card of the same model
    assert [len(s.cards) for s in done] == [8]
    keys = sim.free["d2"].allocatable
    # A partitioned Hygon node serves only partitions: its whole-card and slice tokens go to 0.
    assert (keys[DCU], keys[f"{DCU}.sliced"], keys[f"{DCU}.partitioned"]) == (0, 0, 32)
    assert dict(keys) == dict(simulator(State().node("d2", 8, HYGON)).free["d2"].allocatable)


def test_a_model_without_geometry_or_a_manufacturer_without_partitions_is_refused() -> None:
    sim = simulator(State().node("a1", 2))
    with pytest.raises(ScenarioError, match="no card of model nvidia-a10g reports partition profiles"):
        sim.set_mode("a1", ["GPU-0000"], modes.PARTITIONED)
    with pytest.raises(ScenarioError, match="the card is already whole"):
        sim.set_mode("a1", ["GPU-0000"], modes.WHOLE)
    with pytest.raises(ScenarioError, match="no such card on a1"):
        sim.set_mode("a1", ["GPU-0009"], modes.PARTITIONED)
    with pytest.raises(ScenarioError, match="no node of that name has a Devices ledger"):
        sim.set_mode("nope", None, modes.PARTITIONED)


# ----------------------------------------------------------------------------------------------- plan partitions


def test_a_whole_h100_pool_with_a_queue_of_3g40gb_switches_the_fewest_cards() -> None:
    """Five 3g.40gb requests on an 8-card whole H100 pool: two per card, so three cards, and the plan's layout read
    from the profile table; two switched cards admit only four of them."""
    base, p = planned(queued(State().node("h1", 8, H100, partitioned=()), 5))
    assert p.admitted_before == () and len(p.admitted_after) == 5 and p.still_held == ()
    assert p.switches == 3 and [len(s.cards) for s in p.steps] == [3]
    [step] = [s.to_dict() for s in p.steps]
    assert step["to"] == "partitioned" and step["blockedBy"] == [] and step["proven"] is True
    assert sorted(a["name"] for a in step["admits"]) == [f"w{i}" for i in range(5)]
    after = step["viewsAfter"][0]
    assert {q["name"]: q["count"] for q in after["acceleratorPartitioned"]["remainingProfiles"]} == {
        k: 3 * v for k, v in H100_PER_CARD.items()
    }
    assert (after["acceleratorPartitioned"]["remaining"], after["acceleratorPartitioned"]["capacity"]) == (21, 21)
    assert after["accelerator"]["capacity"] == 5 and step["viewsBefore"][0]["accelerator"]["capacity"] == 8
    assert p.summary()["cost"]["accelerator"] == {"remaining": -3, "capacity": -3}
    # Fewest: with one card fewer switched, the simulation admits four.
    _, two = replay(base, [{**step, "cards": step["cards"][:2]}], H100.pool)
    assert len(two) == 4
    sim, three = replay(base, [step], H100.pool)
    assert three == set(p.admitted_after) and overcommits(sim) == []
    per_card: dict[str, int] = {}
    for where in p.placed.values():
        for n in where:
            for c in n["cards"]:
                per_card[c] = per_card.get(c, 0) + 1
    assert sorted(per_card.values()) == [1, 2, 2]


def test_idle_cards_go_first_on_the_node_with_the_fewest_free_whole_cards() -> None:
    """h1 has five free whole cards, h2 eight: the switch takes h1's, so a request for eight whole cards still finds
    h2 whole; busy cards are never chosen while idle ones do."""
    state = State().node("h1", 8, H100, partitioned=()).node("h2", 8, H100, partitioned=())
    state.hold("busy", "h1", whole(0, 1, 2))
    _, p = planned(queued(state, 2))
    [step] = p.steps
    assert (step.node, step.cards, step.blocked_by) == ("h1", ("GPU-0003",), ())
    assert step.views_after[0]["accelerator"]["onceMaxRequest"] == 8


def test_a_busy_card_is_switched_only_after_its_holders_finish() -> None:
    state = State().node("h1", 1, H100, partitioned=()).hold("trainer", "h1", whole(0), priority=1)
    base, p = planned(queued(state, 1))
    [step] = [s.to_dict() for s in p.steps]
    assert [(h["kind"], h["name"], h["cards"]) for h in step["blockedBy"]] == [("Workload", "trainer", ["GPU-0000"])]
    assert step["cardDetail"][0]["heldBy"] == [f"{NS}/trainer"] and step["cardDetail"][0]["fromHeldIn"] == "exclusive"
    # Replayed: switching without the holder gone is refused; with it gone, the demand is admitted.
    with pytest.raises(ScenarioError):
        base.copy().set_mode("h1", ["GPU-0000"], modes.PARTITIONED)
    _, admitted = replay(base, [step], H100.pool)
    assert admitted == {f"{NS}/w0"}


def test_where_nothing_helps_the_plan_says_why() -> None:
    # A card a Pod outside Kueue holds: no queue says when it finishes, so it is never planned.
    state = State().node("h1", 1, H100, partitioned=()).hold(None, "h1", whole(0))
    _, p = planned(queued(state, 1))
    assert p.steps == () and p.admitted_after == ()
    assert any(
        "every card that could switch to partitioned is busy" in t.why and "outside Kueue" in t.why for t in p.tried
    )
    # A model without partitions.
    _, p = planned(
        queued(State().node("a1", 2), 1, {f"{GPU}.partitioned": "1", f"{GPU}.partitioned.mig-1g.10gb": "1"}, A10G), A10G
    )
    assert p.steps == () and any("no card of model nvidia-a10g reports partition profiles" in t.why for t in p.tried)
    # A profile the model does not have.
    bad = {f"{GPU}.partitioned": "1", f"{GPU}.partitioned.mig-5g.50gb": "1"}
    _, p = planned(queued(State().node("h1", 2, H100, partitioned=()), 1, bad))
    assert any("has no 5g.50gb profile" in t.why for t in p.tried)
    # Quota, not cards, holds the last one: the plan admits what the quota lets through and says so.
    state = queued(
        State().node("h1", 4, H100, partitioned=()),
        3,
        {f"{GPU}.partitioned": "1", f"{GPU}.partitioned.units": str(M), f"{GPU}.partitioned.mig-7g.80gb": "1"},
    )
    state.nominal[H100.pool] = 2
    _, p = planned(state)
    assert len(p.admitted_after) == 2 and p.switches == 2
    [(key, why)] = p.still_held
    assert key == f"{NS}/w2" and "held at gate 2 (Kueue quota)" in why


def test_whole_card_demand_switches_partitioned_cards_back() -> None:
    state = State().node("h1", 2, H100).hold("part", "h1", partition(0, "3g.40gb", 0))
    base, p = planned(queued(state, 1, {GPU: "1"}))
    [step] = [s.to_dict() for s in p.steps]
    assert (step["cards"], step["to"], step["blockedBy"]) == (["GPU-0001"], "whole", [])
    assert replay(base, [step], H100.pool)[1] == {f"{NS}/w0"}


def test_for_asks_a_demand_of_its_own() -> None:
    sim = simulator(State().node("h1", 4, H100, partitioned=()))
    it = sim.state.instancetypes[H100.pool]
    demand = plan.for_demand([plan.parse_for("1g.10gb=8"), plan.parse_for("ex=1")], it, NS, H100.entrance)
    assert [d.kind for d in demand] == ["Pod"] * 9
    p = plan.plan_partitions(sim, it, demand)
    # Eight 1g.10gb instances: seven per card, so two cards; the whole card stays on the two left.
    assert p.switches == 2 and len(p.admitted_after) == 9
    for text, message in (("3g.40gb", "give PROFILE=N"), ("ex=0", "give PROFILE=N"), ("sh=99999", "at most 4096")):
        with pytest.raises(plan.PlanError, match=message):
            plan.parse_for(text)
    sizes = [
        d.podsets[0].spec["containers"][0]["resources"]["limits"]
        for d in plan.for_demand([plan.parse_for("sl=250")], it, NS, H100.entrance)
    ]
    assert [s[f"{GPU}.sliced.memory-percentage"] for s in sizes] == ["100", "100", "50"]


def test_the_pool_tally_equals_the_views_after_updates() -> None:
    state = (
        State().node("h1", 2, H100, partitioned=(1,)).node("h2", 2, H100).hold("p", "h2", partition(0, "3g.40gb", 4))
    )
    state.hold("s", "h1", slice_of(0, 30))
    sim = simulator(state)
    it = sim.state.instancetypes[H100.pool]
    tally = plan.PoolTally(it, sim.ledgers)
    want = {"name": it.name, **views_to_status(instancetype_views(it, sim.ledgers.values()))}
    want.pop("cpu")
    assert tally.status() == want
    sim.finish([f"{NS}/p"])
    sim.set_mode("h2", ["GPU-0001"], modes.WHOLE)
    tally.update(sim.ledgers, ["h2"])
    want = {
        "name": it.name,
        **views_to_status(instancetype_views(sim.state.instancetypes[it.name], sim.ledgers.values())),
    }
    want.pop("cpu")
    assert tally.status() == want


def test_overcommits_catches_a_record_its_card_cannot_serve() -> None:
    """The checker the property tests rely on flags a partition recorded on a whole card and two whole grants."""
    sim = simulator(State().node("h1", 2, H100, partitioned=()).hold("a", "h1", whole(0)))
    assert overcommits(sim) == []
    from dataclasses import replace

    [pod] = [p for p in sim.pods if p.workload == "a"]
    record = pod.allocations[0]
    sim.pods.append(replace(pod, name="b", allocations=(record._replace(mode=4, profile="3g.40gb"),)))
    sim.pods.append(replace(pod, name="c"))
    found = overcommits(sim)
    assert any("held in modes [1, 4]" in f for f in found)
    sim.pods.pop(-2)
    assert any("a whole card given 2 times" in f for f in overcommits(sim))


# ----------------------------------------------------------------------------------------------- plan drain


def drained_state() -> State:
    """n1 runs "big" (2 cards), "one" (1 card) and a Pod outside Kueue; n2 has 3 free cards of 4."""
    state = State().node("n1", 4).node("n2", 4)
    state.hold("big", "n1", whole(0, 1), priority=2).hold("one", "n1", whole(2), priority=1)
    state.hold(None, "n1", whole(3)).hold("other", "n2", whole(0))
    state.nominal[A10G.pool] = 8
    return state


def test_a_drain_evicts_and_readmits_each_workload_where_the_simulation_puts_it() -> None:
    sim = simulator(drained_state())
    p = plan.plan_drain(sim, ["n1"])
    [step] = p.steps
    evicted = {e.holder.key: e for e in p.evicted[0]}
    assert set(evicted) == {f"{NS}/big", f"{NS}/one", f"{NS}/outside-2"}
    assert evicted[f"{NS}/outside-2"].what == "outside-kueue"
    big, one = evicted[f"{NS}/big"], evicted[f"{NS}/one"]
    assert big.holder.cards == ("GPU-0000", "GPU-0001") and one.holder.cards == ("GPU-0002",)
    # Kueue's order: "big" (priority 2) takes two of n2's three free cards, "one" the third.
    assert big.outcome is not None and [(n.name, n.cards) for n in big.outcome.placement] == [
        ("n2", ("GPU-0001", "GPU-0002"))
    ]
    assert one.outcome is not None and [(n.name, n.cards) for n in one.outcome.placement] == [("n2", ("GPU-0003",))]
    assert p.nowhere == [] and set(step.admits) == {f"{NS}/big", f"{NS}/one"}
    before, after = step.views_before[0], step.views_after[0]
    assert (before["accelerator"]["capacity"], after["accelerator"]["capacity"]) == (8, 4)
    assert after["accelerator"]["remaining"] == 0


def test_a_drain_says_which_workload_has_nowhere_to_go_and_what_would_make_room() -> None:
    state = drained_state()
    state.hold("third", "n2", whole(1))  # n2 keeps two free cards: "big" fits, "one" does not
    sim = simulator(state)
    p = plan.plan_drain(sim, ["n1"], suggest=True)
    [nowhere] = p.nowhere
    assert nowhere.holder.key == f"{NS}/one" and nowhere.what == "held"
    assert "held at gate 2 (Kueue TAS placement)" in nowhere.why
    assert nowhere.suggestions is not None
    kinds = {u.kind for u in nowhere.suggestions.found}
    assert "finish" in kinds and "add-nodes" in kinds
    for u in nowhere.suggestions.found:  # each suggestion replayed: it admits "one" on the drained copy
        trial = sim.copy()
        trial.cordon(["n1"])
        trial.remove([f"{NS}/big", f"{NS}/one"])
        assert trial.simulate(resubmission(next(w for w in sim.workloads if w.name == "big"))).admitted
        if u.kind == "finish":
            trial.remove(u.workloads)
        elif u.kind == "add-nodes":
            trial.add_nodes(int(u.extra["count"]), str(u.extra["like"]))
        assert trial.simulate(resubmission(next(w for w in sim.workloads if w.name == "one"))).admitted


def test_a_drain_names_the_instances_it_stops_or_queues_again() -> None:
    state = drained_state()
    objects = state.objects()
    for o in objects:  # "one"'s Pod backs an Instance; the pool's queue is draining, so the operator stops it
        if o["kind"] == "Pod" and o["metadata"]["name"] == "one-1":
            o["metadata"]["name"] = "notebook"
        if o["kind"] == "ClusterQueue":
            o["spec"]["stopPolicy"] = "HoldAndDrain"
    instance = parse_instance(
        {
            "metadata": {"name": "notebook", "namespace": NS},
            "spec": {"type": A10G.pool, "resources": {"accelerator": "1"}},
        }
    )
    sim = Simulator(read.simulation_state(MemoryCluster(objects)))
    p = plan.plan_drain(sim, ["n1"], instances=[instance])
    by = {e.holder.key: e for e in p.evicted[0]}
    stopped = by[f"{NS}/one"]
    assert (stopped.what, stopped.instance) == ("stopped", "notebook") and "HoldAndDrain" in stopped.why
    assert by[f"{NS}/big"].what == "held"  # a HoldAndDrain queue admits nothing


def test_an_unknown_node_is_refused() -> None:
    with pytest.raises(plan.PlanError, match='node "nope" not found: no Node or Devices object'):
        plan.plan_drain(simulator(drained_state()), ["nope"])


# ----------------------------------------------------------------------------------------------- explain


def test_explain_of_a_workload_held_for_lack_of_a_profile_names_the_plan_that_admits_it() -> None:
    from gpuctl.cli.usecases import explained

    cluster = MemoryCluster(queued(State().node("h1", 2, H100, partitioned=()), 1).objects())
    e = explained(cluster, NS, "w0")
    assert e.held_by == 2
    assert f"`gpuctl plan partitions {H100.pool}` admits it once 1 card(s) switch to partitioned (h1: GPU-0000)" in (
        e.gates[1].hint
    )
    # A whole-card request held the same way gets no such hint, nor one no plan admits.
    full = State().node("h1", 1, H100, partitioned=()).hold(None, "h1", whole(0))
    for state in (
        queued(State().node("h1", 1, H100, partitioned=()).hold(None, "h1", whole(0)), 1, {GPU: "1"}),
        queued(full, 1),
    ):
        e = explained(MemoryCluster(state.objects()), NS, "w0")
        assert e.held_by == 2 and "plan partitions" not in (e.gates[1].hint or "")


def test_node_keys_come_from_the_ledger_after_a_switch() -> None:
    """The node's allocatable after a switch is the device plugin's report of its new ledger (capacity's own
    arithmetic), with cpu, memory, pods and credits as the Node had them."""
    sim = simulator(State().node("h1", 2, H100, partitioned=()))
    sim.set_mode("h1", ["GPU-0001"], modes.PARTITIONED)
    keys = dict(sim.free["h1"].allocatable)
    ledger_keys = node_allocatable(sim.ledgers["h1"])
    assert {k: v for k, v in keys.items() if k.startswith(GPU)} == ledger_keys
    assert (keys["cpu"], keys["pods"], keys["credits.gpustack.ai/nvidia"]) == (64, 110, 2 * M)
    fit = node_fit_labels(sim.ledgers["h1"])
    assert fit and {k: v for k, v in sim.labels_of("h1").items() if k in fit} == fit


def test_the_profile_table_is_found_by_the_model_key_or_its_product_name() -> None:
    assert modes.profile_table("nvidia-h100-80gb-hbm3") is not None
    by_name = modes.profile_table("nvidia-h100-sxm-lab", "NVIDIA H100 80GB HBM3")
    assert by_name is not None and {p.published: p.count for p in by_name.profiles} == H100_PER_CARD
    assert modes.profile_table("nvidia-a10g", "NVIDIA A10G") is None


PROFILE_ASKS = {
    name: {f"{GPU}.partitioned": "1", f"{GPU}.partitioned.mig-{name}": "1"}
    for name in ("1g.10gb", "3g.40gb", "4g.40gb", "7g.80gb")
}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.tuples(st.integers(1, 3), st.integers(0, 3)), min_size=1, max_size=3),
    st.lists(st.sampled_from(sorted(PROFILE_ASKS)), min_size=1, max_size=8),
)
def test_every_printed_step_is_what_its_replay_admits(nodes: list[tuple[int, int]], asks: list[str]) -> None:
    """Over generated pools and demands: replaying any prefix of the plan admits exactly what its steps claim, each
    step admits more than the one before, and no replay exceeds the stated ceiling."""
    state = State()
    for i, (cards, partitioned) in enumerate(nodes):
        state.node(f"h{i}", cards, H100, partitioned=tuple(range(min(partitioned, cards))))
    for i, profile in enumerate(asks):
        state.wait(f"w{i}", PROFILE_ASKS[profile], model=H100, created=f"2026-12-01T00:{i:02d}:00Z")
    base, p = planned(state)
    steps = [s.to_dict() for s in p.steps]
    claimed = set(p.admitted_before)
    count = len(claimed)
    assert count <= p.ceiling <= len(p.demand)
    for i, step in enumerate(steps, start=1):
        claimed = (claimed | {f"{a['namespace']}/{a['name']}" for a in step["admits"]}) - {
            f"{a['namespace']}/{a['name']}" for a in step["displaces"]
        }
        _, got = replay(base, steps[:i], H100.pool)
        assert got == claimed, (i, steps)
        assert len(got) > count and len(got) <= p.ceiling
        count = len(got)
    assert set(p.admitted_after) == claimed


def test_a_4g_in_flight_and_a_3g_share_one_card_and_a_plan_counts_on_it() -> None:
    """One 4g.40gb admitted and not yet allocated holds slices 0-3 of its card, not the whole card: a 3g.40gb is
    admitted on the same card; and a plan for five 3g.40gb beside it switches the cards the placements need."""
    four = {f"{GPU}.partitioned": "1", f"{GPU}.partitioned.mig-4g.40gb": "1"}
    state = State().node("h1", 1, H100).node("h2", 4, H100, partitioned=())
    sim = simulator(state)
    first = sim.simulate(resubmission_of("four", four))
    second = sim.simulate(resubmission_of("three", THREE_G))
    assert first.admitted and second.admitted
    cards = [n["cards"] for o in (first, second) for n in o.to_dict()["placement"]["nodes"]]
    assert cards == [["GPU-0000"], ["GPU-0000"]] and [n.name for n in second.placement] == ["h1"]
    # The same 4g.40gb in flight, five 3g.40gb waiting: h1's card takes one of them, so two of h2's cards switch
    # (two instances each) — not three, as a whole card held by the 4g.40gb would need.
    state = State().node("h1", 1, H100).node("h2", 4, H100, partitioned=())
    for i in range(5):
        state.wait(f"w{i}", THREE_G, model=H100, created=f"2026-12-01T00:{i:02d}:00Z")
    sim = simulator(state)
    sim.simulate(resubmission_of("four", four))
    p = plan.plan_partitions(sim, sim.state.instancetypes[H100.pool], plan.demand_of(sim, H100.pool))
    assert len(p.admitted_after) == 5 and p.switches == 2, (p.switches, p.still_held, p.tried)


def resubmission_of(name: str, limits: dict[str, str]) -> Any:
    from gpuctl.core.submissions import Submission, SubmittedPodSet
    from testbed.factories import container

    return Submission(
        "Workload", NS, name, H100.entrance, (SubmittedPodSet("main", 1, {"containers": [container("main", limits)]}),)
    )


def test_cards_promised_to_a_workload_still_starting_are_held_in_fragmentation() -> None:
    """A Workload admitted on h1's only card, its Pod not created yet: the ledger shows the card free, the check
    counts it promised — and so does fragmentation, which no longer offers that card to a whole-card request."""
    from gpuctl.cli.commands.fragmentation import pool_items

    def state(promised: bool) -> list[Any]:
        s = State().node("h1", 1, A10G).node("h2", 2, A10G)
        s.hold("busy", "h1", whole(0))
        s.hold(None, "h2", whole(1))  # Pods in the read: the ledgers are rebuilt from them
        objects = s.objects()
        if not promised:
            return objects
        out = [o for o in objects if not (o["kind"] == "Pod" and o["metadata"]["name"].startswith("busy"))]
        for o in out:
            if o["kind"] == "Devices" and o["metadata"]["name"] == "h1":
                o["status"] = {"groups": []}  # nothing allocated yet: the card reads free
        return out

    def ex_free(objects: list[Any]) -> Any:
        [item] = pool_items(MemoryCluster(objects), [], [], None, False)
        return item["views"]

    running, starting = ex_free(state(False)), ex_free(state(True))
    assert starting == running, (starting, running)
