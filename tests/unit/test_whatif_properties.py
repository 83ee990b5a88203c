"""Properties of ``simulate`` over generated states consistent by construction (``tests.states``).

Whatever sequence of Pods, Jobs and Workloads is simulated — whole cards, shares, slices (folded by the webhook, or
left unfolded in a Job's template), partitions — every card, counting the allocation records of the Pods the state
already had and of those the simulation placed, respects its capacity: one mode, no more than M units, no more slices
than its slots, shares on distinct cards, partitions that fit its geometry. And every admitted Workload's reported
placement is exactly its Pods' cards.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuctl.cluster import read
from gpuctl.core import naming
from gpuctl.core.pods import Pod
from gpuctl.core.simulate import Simulator
from gpuctl.core.submissions import Submission, submissions_from_manifest
from gpuctl.core.units import M
from testbed.factories import A10G_MIB, container
from tests.memory_cluster import MemoryCluster
from tests.states import (
    A10G,
    H100,
    MODE_EXCLUSIVE,
    MODE_PARTITIONED,
    MODE_SHARED,
    MODE_SLICED,
    NS,
    Hold,
    State,
    overcommits,
)

SLOTS = naming.MANUFACTURERS["nvidia"].slice_slots
GPU = "nvidia.com/gpu"


@st.composite
def states(draw: st.DrawFn) -> State:
    """Nodes of A10G cards (and maybe one of H100s), each card held in one mode by Workloads or by Pods outside
    Kueue, within its capacity."""
    state = State()
    serial = iter(range(10_000))
    for n in range(draw(st.integers(1, 3))):
        node = f"a{n}"
        cards = draw(st.integers(1, 4))
        state.node(node, cards)
        for c in range(cards):
            mode = draw(st.sampled_from([0, MODE_EXCLUSIVE, MODE_SHARED, MODE_SLICED]))
            owner = lambda: draw(st.sampled_from([f"w{next(serial)}", None]))  # noqa: E731
            if mode == MODE_EXCLUSIVE:
                state.hold(owner(), node, [Hold(c, mode)])
            elif mode == MODE_SHARED:
                for _ in range(draw(st.integers(1, 10))):
                    state.hold(owner(), node, [Hold(c, mode)])
            elif mode == MODE_SLICED:
                left = 100
                for _ in range(draw(st.integers(1, 3))):
                    pct = draw(st.integers(1, max(1, left)))
                    if pct > left:
                        break
                    left -= pct
                    state.hold(owner(), node, [Hold(c, mode, percent=pct)])
    if draw(st.booleans()):
        cards = draw(st.integers(1, 2))
        state.node("h0", cards, H100)
        for c in range(cards):
            for profile, start in draw(
                st.sampled_from([(), (("3g.40gb", 0),), (("3g.40gb", 0), ("1g.10gb", 4)), (("7g.80gb", 0),)])
            ):
                state.hold(
                    draw(st.sampled_from([f"w{next(serial)}", None])),
                    "h0",
                    [Hold(c, MODE_PARTITIONED, profile=profile, start=start)],
                )
    for pool in (A10G.pool, H100.pool):
        state.nominal[pool] = 64  # quota to spare: the cards are what is judged
    return state


def _limits(draw: st.DrawFn, h100: bool) -> tuple[dict[str, str], bool]:
    """A request and whether it is a partition."""
    kind = draw(st.sampled_from(["whole", "shared", "slice", "slice-mib"] + (["partition"] if h100 else [])))
    if kind == "whole":
        return {GPU: str(draw(st.integers(1, 2)))}, False
    if kind == "shared":
        return {f"{GPU}.shared": str(draw(st.integers(1, 2)))}, False
    if kind == "slice":
        return {f"{GPU}.sliced": "1", f"{GPU}.sliced.memory-percentage": str(draw(st.integers(5, 95)))}, False
    if kind == "slice-mib":
        return {f"{GPU}.sliced": "1", f"{GPU}.sliced.memory-mib": str(draw(st.integers(1000, 24000)))}, False
    profile = draw(st.sampled_from(["1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb"]))
    return {f"{GPU}.partitioned": "1", f"{GPU}.partitioned.mig-{profile}": "1"}, True


@st.composite
def manifests(draw: st.DrawFn, h100: bool, index: int) -> Submission:
    limits, partition = _limits(draw, h100)
    entrance = (H100 if partition else A10G).entrance
    labels = {naming.LABEL_QUEUE_NAME: entrance}
    name = f"sim-{index}"
    kind = draw(st.sampled_from(["Pod", "Job", "Deployment"]))
    spec = {"restartPolicy": "Never", "containers": [container("main", limits)]}
    if kind == "Pod":
        obj: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": labels},
            "spec": spec,
        }
    else:
        template_labels = labels if draw(st.booleans()) else {}
        obj = {
            "apiVersion": "batch/v1" if kind == "Job" else "apps/v1",
            "kind": kind,
            "metadata": {"name": name, "labels": labels},
            "spec": {
                ("parallelism" if kind == "Job" else "replicas"): draw(st.integers(1, 2)),
                "template": {"metadata": {"labels": template_labels}, "spec": spec},
            },
        }
    subs = submissions_from_manifest(obj, f"{name}.yaml", NS)
    return subs[0]


def _asked_units(p: Pod) -> int:
    """The units a slice Pod asks of an A10G card: its folded units, else its memory percentage or MiB."""
    r = p.requests
    if r.get(f"{GPU}.sliced.units"):
        return int(r[f"{GPU}.sliced.units"])
    if r.get(f"{GPU}.sliced.memory-percentage"):
        return int(r[f"{GPU}.sliced.memory-percentage"]) * (M // 100)
    return int(r[f"{GPU}.sliced.memory-mib"]) * M // A10G_MIB


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(states(), st.data())
def test_no_placement_simulate_reports_overcommits_a_card(state: State, data: st.DataObject) -> None:
    sim = Simulator(read.simulation_state(MemoryCluster(state.objects())))
    h100 = "h0" in state.nodes
    for i in range(data.draw(st.integers(1, 6))):
        sub = data.draw(manifests(h100, i))
        outcome = sim.simulate(sub)
        own = [p for p in sim.pods if p.namespace == sub.namespace and p.workload == sub.name]
        if outcome.admitted:
            assert sorted((n.name, c) for n in outcome.placement for c in n.cards) == sorted(
                {(p.node_name, a.card_id) for p in own for a in p.allocations}
            )
        else:
            assert own == [], "a held Workload placed Pods"
    assert overcommits(sim) == []
    for p in sim.pods:  # each slice sized as the Pod webhook leaves it
        for a in p.allocations if p.node_name and not p.finished else ():
            if a.mode == MODE_SLICED:
                assert a.allocated == _asked_units(p), (p.name, a.allocated, dict(p.requests))
