"""What-if answers on states consistent by construction (``tests.states``): a working copy's keys follow its ledger,
each Pod is sized as the Pod webhook leaves it, gate lines say when a gate does not apply and which half of gate 2
held, explain and simulate start from the same usage, Kueue's order, and only proven proposals."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gpuctl.cluster import read
from gpuctl.core import naming
from gpuctl.core.explain import NOT_APPLICABLE, explain_workload
from gpuctl.core.pending import QUOTA, TAS_PLACEMENT
from gpuctl.core.preemption import may_preempt
from gpuctl.core.queueing import CREATION, order_key, pending_order, queue_timestamp
from gpuctl.core.simulate import Simulator
from gpuctl.core.submissions import Submission, SubmittedPodSet, submissions_from_manifest
from gpuctl.core.suggest import defrag_hints, fewest_to_free, unblockers
from gpuctl.core.units import M
from gpuctl.core.workloads import Condition, parse_workload
from testbed.factories import container
from tests.memory_cluster import MemoryCluster
from tests.states import A10G, NS, State, shares, slice_of, whole

GPU = "nvidia.com/gpu"


def simulator(state: State) -> Simulator:
    return Simulator(read.simulation_state(MemoryCluster(state.objects())))


def submit(name: str, limits: dict[str, str], count: int = 1, priority: int = 0) -> Submission:
    return Submission(
        "Workload",
        NS,
        name,
        A10G.entrance,
        (SubmittedPodSet("main", count, {"containers": [container("main", limits)]}),),
        priority,
    )


def job(name: str, limits: dict[str, str], parallelism: int = 1, *, queue_label_on_template: bool = True) -> Submission:
    labels = {naming.LABEL_QUEUE_NAME: A10G.entrance}
    manifest = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NS, "labels": labels},
        "spec": {
            "parallelism": parallelism,
            "template": {
                "metadata": {"labels": dict(labels) if queue_label_on_template else {}},
                "spec": {"restartPolicy": "Never", "containers": [container("main", limits)]},
            },
        },
    }
    [s] = submissions_from_manifest(manifest, f"{name}.yaml", NS)
    return s


def gate(outcome: Any, n: int) -> dict[str, Any]:
    return dict(outcome.to_dict()["gates"][n - 1])


def slice_limits(percent: int) -> dict[str, str]:
    return {f"{GPU}.sliced": "1", f"{GPU}.sliced.memory-percentage": str(percent)}


# ----------------------------------------------------------------------------------------------- 1. keys follow


def card_sliced_by_one_workload() -> State:
    """n1: card 0 holds one 30 % slice (Workload "slicer"), card 1 is held whole by a Pod outside Kueue; the queue
    has quota for more cards than n1 has, so quota is not what holds a whole card."""
    state = State().node("n1", 2).hold("slicer", "n1", slice_of(0, 30)).hold(None, "n1", whole(1))
    state.nominal[A10G.pool] = 8
    return state


def test_a_card_held_in_another_mode_advertises_no_whole_card_token() -> None:
    outcome = simulator(card_sliced_by_one_workload()).simulate(submit("one", {GPU: "1"}))
    assert outcome.explanation.held_by == 2
    assert gate(outcome, 2)["part"] == TAS_PLACEMENT
    assert 'excluded: resource "nvidia.com/gpu": 1' in gate(outcome, 2)["summary"]


def test_without_the_only_slice_holder_its_card_advertises_its_whole_card_token_again() -> None:
    sim = simulator(card_sliced_by_one_workload())
    sim.finish([f"{NS}/slicer"])
    outcome = sim.simulate(submit("one", {GPU: "1"}))
    assert outcome.admitted, outcome.to_dict()
    assert [n.cards for n in outcome.placement] == [("GPU-0000",)]


def test_suggest_proposes_letting_the_only_slice_holder_finish() -> None:
    sim = simulator(card_sliced_by_one_workload())
    want = submit("one", {GPU: "1"})
    held = sim.copy().simulate(want)
    found = unblockers(sim, want, held)
    finish = [u for u in found.found if u.kind == "finish"]
    assert [u.workloads for u in finish] == [(f"{NS}/slicer",)]
    drained = [u for u in found.found if u.kind == "drain-slices"]
    assert [u.nodes for u in drained] == [("n1",)]


def test_a_node_drained_of_its_slices_by_hold_and_drain_frees_its_tokens() -> None:
    sim = simulator(card_sliced_by_one_workload())
    sim.stop(A10G.pool, "HoldAndDrain")
    # The slicer is evicted: card 0's whole-card token is healthy again; card 1's is taken by the Pod outside Kueue.
    assert sim.free["n1"].allocatable[GPU] == 2 and sim.free["n1"].get(GPU, 0) == 1
    assert sim.labels_of("n1")[naming.sliced_fit_label(A10G.key)] == str(M)


def test_every_scenario_recomputes_the_keys_the_same_way_as_a_fresh_read_of_that_state() -> None:
    """The working copy after --without equals a cluster read with that Workload already gone."""
    after = simulator(card_sliced_by_one_workload())
    after.finish([f"{NS}/slicer"])
    fresh = simulator(State().node("n1", 2).hold(None, "n1", whole(1)))
    assert dict(after.free["n1"].allocatable) == dict(fresh.free["n1"].allocatable)
    assert after.labels_of("n1") == fresh.labels_of("n1")


# ----------------------------------------------------------------------------------------------- 2. Pods as the webhook leaves them


def two_cards_with_30_percent_free_each() -> State:
    return State().node("n1", 2).hold("a", "n1", slice_of(0, 70)).hold("b", "n1", slice_of(1, 70))


def test_a_job_slice_too_big_for_any_card_is_refused_by_the_allocator_naming_the_card() -> None:
    """The template carries no folded units: Kueue charges it 0 credits (still assigning the flavor, so TAS places
    it and the check judges it), the check fits a slice of no units on any card with a free slot, and the node's
    keys sum 60 % free over its cards. The Pod asks 40 % of one card (folded by the webhook, or sized by its memory
    where no webhook reviews it): Allocate refuses it."""
    for labelled in (True, False):
        outcome = simulator(two_cards_with_30_percent_free_each()).simulate(
            job("j", slice_limits(40), queue_label_on_template=labelled)
        )
        assert outcome.explanation.held_by == 5, outcome.to_dict()
        g5 = gate(outcome, 5)
        assert g5["verdict"] == "failed" and "UnexpectedAdmissionError" in g5["summary"]
        assert (
            "Allocate refuses card GPU-0000: the slice needs 640000 units and the card has 480000 left"
            in g5["evidence"]
        )
        assert gate(outcome, 3)["verdict"] == "passed" and gate(outcome, 4)["verdict"] == "passed"
        assert any("pod set main" in line for line in gate(outcome, 1)["evidence"])


def test_the_same_slice_as_a_pod_is_folded_before_kueue_and_held_by_the_check() -> None:
    [pod] = submissions_from_manifest(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p", "namespace": NS, "labels": {naming.LABEL_QUEUE_NAME: A10G.entrance}},
            "spec": {"containers": [container("main", slice_limits(40))]},
        },
        "p.yaml",
    )
    outcome = simulator(two_cards_with_30_percent_free_each()).simulate(pod)
    # The Workload pin keeps it off a node whose fit label says no card has 40 % free: TAS finds no node.
    assert outcome.explanation.held_by == 2 and gate(outcome, 2)["part"] == TAS_PLACEMENT


def test_a_job_slice_that_fits_a_card_is_placed_with_its_folded_units() -> None:
    sim = simulator(two_cards_with_30_percent_free_each())
    outcome = sim.simulate(job("j", slice_limits(25)))
    assert outcome.admitted
    [placed] = [p for p in sim.pods if p.workload == "j"]
    assert [(a.card_id, a.allocated) for a in placed.allocations] == [("GPU-0000", 25 * 16000)]


# ----------------------------------------------------------------------------------------------- 3. honest gate lines


def test_a_queue_without_the_check_and_a_cpu_only_pod_read_not_applicable() -> None:
    state = State(check=False).node("n1", 2)
    outcome = simulator(state).simulate(submit("w", {GPU: "1"}))
    assert outcome.admitted
    assert gate(outcome, 3)["verdict"] == NOT_APPLICABLE
    assert gate(outcome, 3)["summary"].endswith("does not reference the gpustack-node-devices check")
    cpu = simulator(State().node("n1", 2)).simulate(submit("cpu", {"cpu": "1"}))
    assert cpu.admitted
    assert gate(cpu, 3)["verdict"] == NOT_APPLICABLE and gate(cpu, 5)["verdict"] == NOT_APPLICABLE


def test_gate_2_names_the_quota_when_quota_holds() -> None:
    state = State().node("n1", 4).hold("big", "n1", whole(0, 1, 2))
    state.nominal[A10G.pool] = 3
    outcome = simulator(state).simulate(submit("w", {GPU: "1"}))
    g2 = gate(outcome, 2)
    assert outcome.explanation.held_by == 2 and g2["part"] == QUOTA and g2["name"] == "Kueue quota"
    assert g2["summary"].startswith("couldn't assign flavors to pod set main: insufficient unused quota")


def test_explain_names_tas_placement_from_kueues_message() -> None:
    message = (
        "couldn't assign flavors to pod set main: topology \"hostname\" doesn't allow to fit any of 1 pod(s). "
        'Total nodes: 1; excluded: resource "nvidia.com/gpu": 1'
    )
    state = card_sliced_by_one_workload().wait(
        "w",
        {GPU: "1"},
        conditions=[{"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": message}],
    )
    admission = read.admission_state(MemoryCluster(state.objects()))
    w = next(x for x in admission.workloads if x.name == "w")
    g2 = explain_workload(w, admission.context_for(w)).gates[1]
    assert (g2.verdict, g2.part, g2.name, g2.summary) == ("held", TAS_PLACEMENT, "Kueue TAS placement", message)


def test_a_finished_workload_is_held_by_no_gate() -> None:
    state = (
        State()
        .node("n1", 2)
        .wait(
            "done",
            {GPU: "1"},
            conditions=[
                {"type": "QuotaReserved", "status": "False", "reason": "Pending"},
                {"type": "Finished", "status": "True", "reason": "Succeeded", "message": "the job finished"},
            ],
        )
    )
    admission = read.admission_state(MemoryCluster(state.objects()))
    [w] = [x for x in admission.workloads if x.name == "done"]
    e = explain_workload(w, admission.context_for(w))
    assert e.held_by is None
    assert [g.verdict for g in e.gates[1:]] == [NOT_APPLICABLE] * 4
    assert "finished (Succeeded: the job finished)" in e.gates[1].summary


# ----------------------------------------------------------------------------------------------- 4. the same usage


def test_explain_and_simulate_print_the_same_quota_lines_from_the_queues_own_usage() -> None:
    state = State().node("n1", 4).hold("big", "n1", whole(0, 1)).wait("w", {GPU: "3"})
    objects = state.objects()
    cq = next(o for o in objects if o["kind"] == "ClusterQueue")
    cq["status"]["flavorsReservation"][0]["resources"][0]["total"] = str(3 * M)  # Kueue counts 3 cards, not 2
    admission = read.admission_state(MemoryCluster(objects))
    w = next(x for x in admission.workloads if x.name == "w")
    explained = explain_workload(w, admission.context_for(w)).gates[1]
    sim = Simulator(read.simulation_state(MemoryCluster(objects)))
    sim.remove([w.key])
    simulated = sim.simulate(submit("w", {GPU: "3"})).explanation.gates[1]
    lines = [x for x in simulated.evidence if "in flavor" in x or "reports" in x]
    assert lines == [x for x in explained.evidence if "in flavor" in x or "reports" in x]
    assert lines[0].endswith("used 4800000 credits (3 cards))")
    assert "the reserved Workloads read add up to 3200000 credits (2 cards)" in lines[1]
    assert explained.part == simulated.part == QUOTA


# ----------------------------------------------------------------------------------------------- 5. Kueue's order


def evicted(reason: str, status: str = "True") -> Any:
    w = parse_workload(
        {
            "metadata": {"name": "w", "namespace": NS, "uid": "u", "creationTimestamp": "2026-12-01T00:00:00Z"},
            "spec": {"queueName": "q", "podSets": []},
        }
    )
    return replace(w, conditions={"Evicted": Condition("Evicted", status, reason, "", "2026-12-01T01:00:00Z")})


def test_the_queue_order_timestamp_follows_kueue() -> None:
    """Kueue's own cases: evicted by preemption keeps its creation time; by the PodsReady timeout it takes the
    eviction's time only when requeuing by eviction time; by the AdmissionCheck always; an eviction no longer in
    force (status False) counts for nothing."""
    created, evicted_at = "2026-12-01T00:00:00Z", "2026-12-01T01:00:00Z"
    assert queue_timestamp(evicted("Preempted")) == created
    assert queue_timestamp(evicted("PodsReadyTimeout")) == evicted_at
    assert queue_timestamp(evicted("PodsReadyTimeout"), CREATION) == created
    assert queue_timestamp(evicted("AdmissionCheck"), CREATION) == evicted_at
    assert queue_timestamp(evicted("PodsReadyTimeout", "False")) == created


def test_a_preempted_workload_keeps_its_place_ahead_of_later_ones() -> None:
    state = State().node("n1", 1)
    for name, created in (("first", "2026-12-01T00:00:00Z"), ("second", "2026-12-01T00:30:00Z")):
        state.wait(name, {GPU: "1"}, created=created)
    objects = state.objects()
    first = next(o for o in objects if o["metadata"]["name"] == "first")
    first["status"]["conditions"] = [
        {"type": "Evicted", "status": "True", "reason": "Preempted", "lastTransitionTime": "2026-12-01T01:00:00Z"}
    ]
    workloads = [parse_workload(o) for o in objects if o["kind"] == "Workload"]
    line = pending_order(workloads, {w.key: A10G.pool for w in workloads}, A10G.pool)
    assert [w.name for w in line] == ["first", "second"]
    assert order_key(line[0]) < order_key(line[1])


def strict_line(strategy: str) -> State:
    """One free card; the head asks for two, the next one for one."""
    state = State(strategy=strategy).node("n1", 2).hold("busy", "n1", whole(0))
    state.wait("head", {GPU: "2"}, created="2026-12-01T00:00:00Z")
    state.wait("next", {GPU: "1"}, created="2026-12-01T00:10:00Z")
    return state


def test_strict_fifo_blocks_the_workloads_behind_a_head_that_cannot_be_admitted() -> None:
    from gpuctl.cli.commands.queue import queue_items

    items = {i["name"]: i for i in queue_items(MemoryCluster(strict_line("StrictFIFO").objects()), [], None, 0.0)}
    assert items["head"]["fitsNow"] is False and items["head"]["blockedBy"] is None
    assert items["next"]["fitsNow"] is False and items["next"]["blockedBy"] == f"{NS}/head"
    items = {i["name"]: i for i in queue_items(MemoryCluster(strict_line("BestEffortFIFO").objects()), [], None, 0.0)}
    assert items["next"]["fitsNow"] is True and items["next"]["blockedBy"] is None


def test_the_queue_is_simulated_in_order_so_two_cannot_take_one_card() -> None:
    from gpuctl.cli.commands.queue import queue_items

    state = State().node("n1", 2).hold("busy", "n1", whole(0))
    state.wait("a", {GPU: "1"}, created="2026-12-01T00:00:00Z").wait("b", {GPU: "1"}, created="2026-12-01T00:01:00Z")
    items = {i["name"]: i for i in queue_items(MemoryCluster(state.objects()), [], None, 0.0)}
    assert items["a"]["fitsNow"] is True
    assert items["b"]["fitsNow"] is False and items["b"]["simulatedHeldBy"] == 2


def test_workloads_and_queue_never_report_a_finished_workload_as_held() -> None:
    from gpuctl.cli.commands.queue import queue_items

    state = (
        State()
        .node("n1", 2)
        .wait(
            "done",
            {GPU: "1"},
            conditions=[{"type": "Finished", "status": "True", "reason": "Succeeded"}],
        )
    )
    assert queue_items(MemoryCluster(state.objects()), [], None, 0.0) == []


# ----------------------------------------------------------------------------------------------- 6. only proven


def test_the_fewest_workloads_are_found_even_where_the_greedy_set_is_larger() -> None:
    """Card 0 held by "low", card 1 by "mid", cards 2 and 3 by "high": taking the lowest priorities first reaches two
    free cards with two Workloads; one, "high", does it alone."""
    held_by = {"low": {"GPU-0000"}, "mid": {"GPU-0001"}, "high": {"GPU-0002", "GPU-0003"}}
    assert fewest_to_free(0, 2, held_by, ["low", "mid", "high"], set()) == ("high",)
    state = (
        State()
        .node("n1", 4)
        .hold("low", "n1", whole(0), priority=1)
        .hold("mid", "n1", whole(1), priority=2)
        .hold("high", "n1", whole(2, 3), priority=3)
    )
    hints, tried = defrag_hints(simulator(state), A10G.pool, ["n1"], A10G.key, 2)
    assert [h.workloads for h in hints] == [(f"{NS}/high",)] and tried == []


def test_a_defragmentation_candidate_the_simulation_does_not_admit_is_listed_apart() -> None:
    """Freeing cards 2 and 3 leaves two free cards by the records, but the queue's quota, lowered below what it has
    admitted, still lacks room for two: the probe is held at gate 2, so the candidate is tried, not proposed."""
    state = State().node("n1", 4).node("n2", 2).hold("high", "n1", whole(2, 3)).hold("mid", "n1", whole(0, 1))
    state.hold("other", "n2", whole(0, 1))
    state.nominal[A10G.pool] = 5  # lowered after the three were admitted: Kueue evicts nothing for it
    hints, tried = defrag_hints(simulator(state), A10G.pool, ["n1"], A10G.key, 2)
    assert hints == []
    assert [t.workloads for t in tried] == [(f"{NS}/high",)] and not tried[0].admitted
    assert tried[0].why.startswith("held at gate 2")


def test_every_suggestion_is_admitted_and_what_failed_is_tried() -> None:
    sim = simulator(State().node("n1", 2).hold("w1", "n1", shares(0, 1)).hold("w2", "n1", whole(0)))
    want = submit("big", {GPU: "8"})
    held = sim.copy().simulate(want)
    assert held.explanation.held_by == 2
    found = unblockers(sim, want, held)
    for u in found.found:
        trial = sim.copy()
        if u.kind == "finish":
            trial.remove(u.workloads)
        elif u.kind == "add-nodes":
            trial.add_nodes(int(u.extra["count"]), str(u.extra["like"]))
        assert trial.simulate(want, commit=False).admitted, u
    assert {t.kind for t in found.tried} >= {"finish"}


# ----------------------------------------------------------------------------------------------- preemption


def full_queue(policy: str) -> State:
    state = State(preemption=policy).node("n1", 2).hold("low", "n1", whole(0), priority=1)
    state.hold("mid", "n1", whole(1), priority=3)
    return state


def test_a_higher_priority_workload_preempts_the_lowest_priority_one_that_makes_room() -> None:
    sim = simulator(full_queue("LowerPriority"))
    outcome = sim.simulate(submit("urgent", {GPU: "1"}, priority=5))
    assert outcome.admitted and outcome.preempted == (f"{NS}/low",)
    assert outcome.to_dict()["preempts"] == [f"{NS}/low"]
    assert [n.cards for n in outcome.placement] == [("GPU-0000",)]
    assert f"{NS}/low" not in {w.key for w in sim.workloads}  # evicted in the working copy
    assert any(line.startswith(f"Kueue preempts {NS}/low (priority 1") for line in gate(outcome, 2)["evidence"])


def test_preemption_takes_the_fewest_and_never_a_higher_or_equal_priority() -> None:
    sim = simulator(full_queue("LowerPriority"))
    both = sim.copy().simulate(submit("both", {GPU: "2"}, priority=5))
    assert both.admitted and set(both.preempted) == {f"{NS}/low", f"{NS}/mid"}
    equal = sim.copy().simulate(submit("equal", {GPU: "1"}, priority=1))
    assert equal.explanation.held_by == 2 and not equal.preempted
    newer = simulator(full_queue("LowerOrNewerEqualPriority")).simulate(submit("equal", {GPU: "1"}, priority=1))
    assert newer.explanation.held_by == 2  # the candidate joined the queue before it, not after
    low = parse_workload(next(o for o in full_queue("Never").objects() if o["metadata"]["name"] == "low"))
    earlier = replace(low, name="earlier", created="2026-11-30T00:00:00Z", conditions={})
    assert may_preempt(earlier, low, "LowerOrNewerEqualPriority") and not may_preempt(earlier, low, "LowerPriority")


def test_a_queue_that_never_preempts_holds_the_workload_at_quota() -> None:
    outcome = simulator(full_queue("Never")).simulate(submit("urgent", {GPU: "1"}, priority=5))
    assert outcome.explanation.held_by == 2 and gate(outcome, 2)["part"] == QUOTA and not outcome.preempted


# ----------------------------------------------------------------------------------------------- priority classes


def test_a_manifest_gets_the_priority_kueue_gives_its_workload_or_is_refused() -> None:
    from gpuctl.core.submissions import ManifestError, parse_priority_classes, with_priority

    classes = parse_priority_classes(
        [{"metadata": {"name": "urgent"}, "value": 100}],
        [
            {"metadata": {"name": "high"}, "value": 50},
            {"metadata": {"name": "base"}, "value": 7, "globalDefault": True},
        ],
    )

    def pod(labels: dict[str, str], spec: dict[str, Any]) -> Submission:
        [s] = submissions_from_manifest(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "p", "labels": {naming.LABEL_QUEUE_NAME: A10G.entrance, **labels}},
                "spec": {"containers": [container("main", {GPU: "1"})], **spec},
            },
            "p.yaml",
            NS,
        )
        return with_priority(s, classes, "p.yaml")

    # The WorkloadPriorityClass first, then the Pod's PriorityClass, then the cluster's default one.
    assert pod({naming.LABEL_PRIORITY_CLASS: "urgent"}, {"priorityClassName": "high"}).priority == 100
    assert pod({}, {"priorityClassName": "high"}).priority == 50
    assert pod({}, {}).priority == 7
    for labels, spec, what in (
        ({naming.LABEL_PRIORITY_CLASS: "nope"}, {}, "WorkloadPriorityClass"),
        ({}, {"priorityClassName": "nope"}, "PriorityClass"),
    ):
        try:
            pod(labels, spec)
        except ManifestError as exc:
            assert f"names no {what} of the cluster" in str(exc)
        else:
            raise AssertionError(f"an unknown {what} was accepted")


def test_simulate_reads_the_priority_classes_from_the_cluster() -> None:
    from gpuctl.cli.commands.simulate import _prioritised

    objects = [
        *State().node("n1", 1).objects(),
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "WorkloadPriorityClass",
            "metadata": {"name": "urgent"},
            "value": 1000,
        },
    ]
    [s] = submissions_from_manifest(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": "j",
                "labels": {naming.LABEL_QUEUE_NAME: A10G.entrance, naming.LABEL_PRIORITY_CLASS: "urgent"},
            },
            "spec": {"template": {"spec": {"containers": [container("main", {GPU: "1"})]}}},
        },
        "j.yaml",
        NS,
    )
    assert [x.priority for x in _prioritised(MemoryCluster(objects), [s])] == [1000]


def test_simulate_holds_a_new_workload_behind_a_strict_fifo_head_that_cannot_be_admitted() -> None:
    blocked = simulator(strict_line("StrictFIFO")).simulate(submit("new", {GPU: "1"}))
    g2 = gate(blocked, 2)
    assert blocked.explanation.held_by == 2 and g2["part"] == "strict-fifo" and g2["name"] == "Kueue StrictFIFO order"
    assert f"its head {NS}/head (priority 0) cannot be admitted" in g2["summary"]
    assert any(line.startswith("the head is held at gate 2") for line in g2["evidence"])
    # A higher priority sorts ahead of the head; under BestEffortFIFO nothing waits behind it.
    assert simulator(strict_line("StrictFIFO")).simulate(submit("urgent", {GPU: "1"}, priority=9)).admitted
    assert simulator(strict_line("BestEffortFIFO")).simulate(submit("new", {GPU: "1"})).admitted


# ----------------------------------------------------------------------------------------------- the design's examples


def test_eight_cards_sliced_to_half_serve_no_five_whole_cards() -> None:
    """The design's example on a consistent node: every card holds a 50 % slice, so none advertises a healthy
    whole-card token; TAS itself finds no room for five whole cards (and the check, judging the ledger, would hold
    it had TAS placed it: none of the eight is free)."""
    state = State().node("n1", 8)
    for card in range(8):
        state.hold(None, "n1", slice_of(card, 50))
    state.nominal[A10G.pool] = 16
    outcome = simulator(state).simulate(submit("five", {GPU: "5"}))
    assert outcome.explanation.held_by == 2 and gate(outcome, 2)["part"] == TAS_PLACEMENT
    assert 'excluded: resource "nvidia.com/gpu": 1' in gate(outcome, 2)["summary"]
    # The same five whole cards on a node of free cards: admitted, five cards taken.
    free = simulator(State().node("n2", 8)).simulate(submit("five", {GPU: "5"}))
    assert free.admitted and len(free.placement[0].cards) == 5


def test_two_30_percent_slices_share_a_free_card_and_two_60_percent_slices_do_not() -> None:
    def two(percent: int) -> list[Any]:
        state = State().node("n1", 1)
        state.nominal[A10G.pool] = 4  # quota to spare: the card is what is judged
        sim = simulator(state)
        return [sim.simulate(pod_submission(f"s{i}", slice_limits(percent))) for i in range(2)]

    small = two(30)
    assert all(o.admitted for o in small) and {c for o in small for n in o.placement for c in n.cards} == {"GPU-0000"}
    large = two(60)
    assert large[0].admitted and not large[1].admitted
    # The fit label the operator publishes after the first says the card's freest slice is 40 %: the Workload pin
    # keeps the second off the node, so TAS finds none.
    assert gate(large[1], 2)["part"] == TAS_PLACEMENT and "excluded: affinity: 1" in gate(large[1], 2)["summary"]


def pod_submission(name: str, limits: dict[str, str]) -> Submission:
    [s] = submissions_from_manifest(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "labels": {naming.LABEL_QUEUE_NAME: A10G.entrance}},
            "spec": {"containers": [container("main", limits)]},
        },
        f"{name}.yaml",
    )
    return s
