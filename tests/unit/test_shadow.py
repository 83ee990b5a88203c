"""Judging in the shadow: each published figure against the core's, with both values and the reason; agreement says
nothing. And the companion's book: a disagreement reported once it has held for the settling time, one Event per
object and pair of values, gone from the metric once no longer seen."""

from __future__ import annotations

import copy
from typing import Any

from gpuctl.core import naming
from gpuctl.core.instancetypes import parse_instancetype
from gpuctl.core.ledger import parse_devices
from gpuctl.core.lifecycle import StopDecision
from gpuctl.core.pins import node_fit_labels
from gpuctl.core.shadow import (
    Kind,
    ProfileFigures,
    fit_label_disagreements,
    profile_difference,
    published_profile,
    stop_disagreement,
    survey,
    verdict_disagreement,
    view_disagreements,
)
from gpuctl.core.units import M
from gpuctl.core.views import DRAINING_REASON, instancetype_views, pool_devices
from gpuctl.core.workloads import parse_cluster_queue
from gpuctl.operator.events import Regarding
from gpuctl.operator.shadow import REASON, ShadowBook
from testbed.factories import card_row, devices, h100_devices, instancetype
from testbed.standin import instancetype_status

A10G = naming.accelerator_key("nvidia", "a10g")
LEDGER = parse_devices(devices("n1", cards=4, rows=[card_row(0, mode=1, allocated=M), *map(card_row, (1, 2, 3))]))


def published(raw: dict[str, Any], queue: Any = None, pool: Any = (LEDGER,)) -> dict[str, Any]:
    """The InstanceType with its status written as GPUStack's status writer writes it from ``pool``."""
    out = copy.deepcopy(raw)
    out["status"].update(instancetype_status(parse_instancetype(raw), list(pool), queue))
    return out


def drained_queue(name: str) -> Any:
    return parse_cluster_queue(
        {"metadata": {"name": name}, "spec": {"stopPolicy": "HoldAndDrain", "resourceGroups": []}, "status": {}}
    )


# ----------------------------------------------------------------------------------------------- views


def test_views_in_agreement_report_nothing() -> None:
    it = parse_instancetype(published(instancetype()))
    assert view_disagreements(it, instancetype_views(it, [LEDGER]), [LEDGER]) == []


def test_a_published_ex_one_card_too_high_is_reported_with_both_values_and_each_nodes_figure() -> None:
    raw = published(instancetype())
    raw["status"]["accelerator"]["remaining"] = "4"
    it = parse_instancetype(raw)
    [d] = view_disagreements(it, instancetype_views(it, [LEDGER]), [LEDGER])
    assert (d.kind, d.object, d.field, d.published, d.computed) == (
        Kind.VIEW,
        f"InstanceType/{it.name}",
        "accelerator.remaining",
        "4",
        "3",
    )
    assert d.reason == "the pool's ledgers give, per node, in free whole cards: n1 3"


def test_a_status_that_publishes_no_view_is_not_contradicted() -> None:
    it = parse_instancetype(instancetype())
    assert not it.published_views
    assert view_disagreements(it, instancetype_views(it, [LEDGER]), [LEDGER]) == []


def test_a_draining_pool_publishes_zero_and_a_stale_figure_there_says_why() -> None:
    raw = instancetype()
    queue = drained_queue(raw["metadata"]["name"])
    agreeing = parse_instancetype(published(raw, queue))
    assert view_disagreements(agreeing, instancetype_views(agreeing, [LEDGER], queue), [LEDGER], queue) == []
    stale = parse_instancetype(published(raw))  # written before the queue drained
    found = view_disagreements(stale, instancetype_views(stale, [LEDGER], queue), [LEDGER], queue)
    assert found and {d.reason for d in found} == {DRAINING_REASON}
    assert {d.computed for d in found} == {"0"}


# ----------------------------------------------------------------------------------------------- partition profiles


H100 = naming.accelerator_key("nvidia", "h100-80gb-hbm3")


def h100_pool(unhealthy: bool = False) -> tuple[Any, list[Any]]:
    raw = instancetype(group_id="h100-80gb-hbm3")
    ledger = h100_devices("h1", cards=2)
    if unhealthy:
        ledger["spec"]["groups"][0]["accelerators"][1]["status"]["unhealthy"] = True
    pool = [parse_devices(ledger)]
    return published(raw, pool=pool), pool


def test_a_profile_in_agreement_says_nothing_and_one_published_stale_says_what_the_ledgers_give() -> None:
    raw, pool = h100_pool()
    it = parse_instancetype(raw)
    pt = instancetype_views(it, pool).partitioned
    name, count = pt.remaining_profiles[0].name, pt.remaining_profiles[0].count
    computed = ProfileFigures(count, 0)
    figures = published_profile(it, name)
    assert figures == computed
    assert profile_difference(it, name, computed, computed, computed, pool, None) == ""
    stale = ProfileFigures(count + 1, 0)
    why = profile_difference(it, name, computed, stale, computed, pool, None)
    assert why.startswith(f"the published figure is not what the ledgers give now (remaining {count}, allocated 0)")
    assert published_profile(parse_instancetype(instancetype(group_id="h100-80gb-hbm3")), name) is None


def test_a_profile_on_an_unhealthy_card_is_published_but_cannot_be_carved() -> None:
    raw, pool = h100_pool(unhealthy=True)
    it = parse_instancetype(raw)
    pt = instancetype_views(it, pool).partitioned
    name, count = pt.remaining_profiles[0].name, pt.remaining_profiles[0].count
    same = ProfileFigures(count, 0)
    carvable = ProfileFigures(count // 2, 0)
    why = profile_difference(it, name, carvable, same, same, pool, None)
    assert (
        why
        == "the status writer counts every card's ledger row; GPU-0001 can carve nothing now (unhealthy, or held in another mode)"
    )
    queue = drained_queue(it.name)
    assert profile_difference(it, name, carvable, ProfileFigures(0, 0), same, pool, queue) == DRAINING_REASON


# ----------------------------------------------------------------------------------------------- verdicts, labels, stops


def test_a_verdict_is_compared_only_once_written() -> None:
    assert verdict_disagreement("ns", "w", naming.NODE_DEVICES_CHECK, "Pending", "Retry", "") is None
    assert verdict_disagreement("ns", "w", naming.NODE_DEVICES_CHECK, "Ready", "Ready", "") is None
    d = verdict_disagreement("ns", "w", naming.NODE_DEVICES_CHECK, "Ready", "Retry", "needs 1 whole card, n1 has 0")
    assert d is not None and (d.object, d.published, d.computed) == ("Workload/ns/w", "Ready", "Retry")
    assert d.sentence() == (
        "gpustack-node-devices: published Ready, gpuctl computes Retry (needs 1 whole card, n1 has 0)"
    )


def test_fit_labels_stale_missing_and_left_over() -> None:
    desired = node_fit_labels(LEDGER)
    assert fit_label_disagreements("n1", desired, desired, LEDGER) == []
    key = naming.shared_fit_label(A10G)
    stale = {**desired, key: "0"}
    [d] = fit_label_disagreements("n1", stale, desired, LEDGER)
    assert (d.field, d.published, d.computed) == (key, "0", desired[key])
    assert d.reason.startswith("3 card(s) of nvidia-a10g can still grant a share")
    missing = {k: v for k, v in desired.items() if k != key}
    assert [(d.published, d.computed) for d in fit_label_disagreements("n1", missing, desired, LEDGER)] == [
        ("absent", desired[key])
    ]
    [left] = fit_label_disagreements("gone", {key: "2"}, {}, None)
    assert (left.published, left.computed, left.reason) == (
        "2",
        "absent",
        "the node has no Devices ledger: no fit label",
    )


def test_a_stop_the_rule_calls_for_and_not_set_is_reported_and_a_users_own_stop_is_not() -> None:
    drain = StopDecision(True, "its pool drains")
    d = stop_disagreement("ns", "i", False, drain)
    assert d is not None and (d.field, d.published, d.computed, d.reason) == (
        "spec.stop",
        "false",
        "true",
        "its pool drains",
    )
    assert stop_disagreement("ns", "i", True, drain) is None
    assert stop_disagreement("ns", "i", True, StopDecision(False, "")) is None


def test_a_survey_of_a_cluster_in_agreement_is_empty() -> None:
    raw = published(instancetype())
    it = parse_instancetype(raw)
    assert pool_devices([LEDGER], it) == [LEDGER]
    labels = {"n1": node_fit_labels(LEDGER)}
    assert survey([it], {}, [LEDGER], labels, [("ns", "w", "Ready", "Ready", "")], []) == []
    labels["n1"] = {**labels["n1"], naming.shared_fit_label(A10G): "9"}
    kinds = [d.kind for d in survey([it], {}, [LEDGER], labels, [("ns", "w", "Ready", "Retry", "full")], [])]
    assert sorted(kinds) == [Kind.FIT_LABEL, Kind.VERDICT]


# ----------------------------------------------------------------------------------------------- the companion's book


class Events:
    def __init__(self) -> None:
        self.recorded: list[tuple[str, str, str]] = []

    def record(self, regarding: Regarding, event_type: str, reason: str, action: str, note: str) -> None:
        self.recorded.append((regarding.name, reason, note))


def test_the_book_reports_once_settled_one_event_per_pair_and_forgets_what_agrees() -> None:
    now = [100.0]
    events = Events()
    book = ShadowBook(45.0, events, clock=lambda: now[0])  # type: ignore[arg-type]
    d = verdict_disagreement("ns", "w", naming.NODE_DEVICES_CHECK, "Ready", "Retry", "full")
    assert d is not None
    assert book.observe(Kind.VERDICT, "ns/w", [d]) == 45.0  # not yet: a ledger may have moved in between
    assert book.reported() == [] and events.recorded == []
    now[0] += 45.0
    assert book.observe(Kind.VERDICT, "ns/w", [d]) is None
    assert book.reported() == [d]
    assert events.recorded == [
        ("w", REASON, "gpustack-node-devices: GPUStack publishes Ready, gpuctl computes Retry: full")
    ]
    book.observe(Kind.VERDICT, "ns/w", [d])
    assert len(events.recorded) == 1  # the same pair: no second Event
    [counts, series] = list(book.gauges())
    assert [(s.labels, s.value) for s in counts.samples if s.value] == [({"kind": "verdict"}, 1.0)]
    [sample] = series.samples
    assert sample.labels == {
        "kind": "verdict",
        "object": "Workload/ns/w",
        "field": naming.NODE_DEVICES_CHECK,
        "published": "Ready",
        "computed": "Retry",
    }
    book.observe(Kind.VERDICT, "ns/w", [])  # it agrees now
    assert book.reported() == []
    again = verdict_disagreement("ns", "w", naming.NODE_DEVICES_CHECK, "Retry", "Ready", "fits")
    assert again is not None
    book.observe(Kind.VERDICT, "ns/w", [again])
    now[0] += 45.0
    book.observe(Kind.VERDICT, "ns/w", [again])
    assert len(events.recorded) == 2 and "publishes Retry, gpuctl computes Ready" in events.recorded[1][2]
    book.forget(Kind.VERDICT, "ns/w")
    assert book.reported() == []


def test_a_large_pools_reason_names_its_freest_nodes_and_sums_the_rest() -> None:
    pool = [
        parse_devices(
            devices(
                f"n{i:02d}",
                cards=4,
                rows=[card_row(c) if c < i % 5 else card_row(c, mode=1, allocated=M) for c in range(4)],
            )
        )
        for i in range(12)
    ]
    raw = published(instancetype(), pool=pool)
    raw["status"]["accelerator"]["remaining"] = "999"
    it = parse_instancetype(raw)
    [d] = view_disagreements(it, instancetype_views(it, pool), pool)
    assert d.reason == (
        "the pool's 12 ledgers give, in free whole cards, the most on n04 4, n09 4, n03 3, n08 3, n02 2, "
        "and 5 on the other 7 nodes"
    )
