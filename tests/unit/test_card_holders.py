"""``gpuctl_card_holder`` and ``gpuctl_workload_reserved_card_equivalents``: the rows by the fold on hand-checked
states, and the operator's text, kept node by node from the cache's changes, byte for byte what a fresh operator
renders for the same cluster."""

from __future__ import annotations

import copy
import json
from fractions import Fraction
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpuctl.core import naming
from gpuctl.core.fragmentation import FragmentationBook, Shape, cards_of, pool_fragmentation, reference_shapes
from gpuctl.core.units import M
from gpuctl.core.usage import HOLDER_LABELS, RESERVED_LABELS, UsageBook, holder_rows, holdings, owners_of, reserved_rows
from gpuctl.operator.controllers.status import StatusController
from gpuctl.operator.metrics import gauge_family, sample_lines
from gpuctl.operator.scrape import PoolFragmentation
from testbed.factories import H100_MIB, H100_PROFILES, card_row, workload
from tests.memory_cluster import MemoryCluster
from tests.states import A10G, H100, NS, State, partition, shares, slice_of, whole
from tests.unit.test_differential import operator
from tests.unit.test_usage import raw_holdings

JSON = dict[str, Any]
HOLDER_FAMILIES = ("gpuctl_card_holder", "gpuctl_workload_reserved_card_equivalents")


def by_pod(objects: list[JSON]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for labels, value in holder_rows(raw_holdings(objects)):
        row = dict(zip(HOLDER_LABELS, labels, strict=True))
        row["value"] = value
        out.setdefault(row["pod"].rsplit("-", 1)[0], []).append(row)  # by the holder's name
    return out


def with_mig_ids(objects: list[JSON]) -> list[JSON]:
    """Each partition grant's MIG device UUID in its Pod's record, as ``Allocate`` writes it."""
    for o in objects:
        raw = ((o.get("metadata") or {}).get("annotations") or {}).get(naming.ANNOTATION_ALLOCATED)
        if o["kind"] != "Pod" or not raw:
            continue
        record = json.loads(raw)
        for container in record.values():
            for g in container["devices"]["groups"]:
                for a in g["accelerators"]:
                    if a.get("allocatedPhysicalProfile"):
                        a["allocatedPhysicalID"] = f"MIG-{o['metadata']['name']}-{a['id']}"
        o["metadata"]["annotations"][naming.ANNOTATION_ALLOCATED] = json.dumps(record)
    return objects


def test_an_exclusive_card_is_one_row_of_one() -> None:
    found = by_pod(State().node("n1", 2).hold("w1", "n1", whole(0)).objects())
    (row,) = found["w1"]
    assert row == {
        "node": "n1",
        "UUID": "GPU-0000",
        "GPU_I_PROFILE": "",
        "GPU_I_ID": "",
        "mig_uuid": "",
        "namespace": NS,
        "pod": "w1-0",
        "workload": "w1",
        "localqueue": A10G.entrance,
        "clusterqueue": A10G.pool,
        "instancetype": A10G.pool,
        "mode": "exclusive",
        "value": 1.0,
    }


def test_two_slices_of_one_card_are_a_row_each_with_their_share() -> None:
    found = by_pod(State().node("n1", 1).hold("w1", "n1", slice_of(0, 30)).hold("w2", "n1", slice_of(0, 25)).objects())
    (a,), (b,) = found["w1"], found["w2"]
    assert (a["UUID"], a["mode"], a["value"]) == ("GPU-0000", "sliced", 0.3)
    assert (b["UUID"], b["mode"], b["value"]) == ("GPU-0000", "sliced", 0.25)


def test_a_share_is_a_tenth() -> None:
    (row,) = by_pod(State().node("n1", 1).hold("w1", "n1", shares(0)).objects())["w1"]
    assert (row["mode"], row["value"]) == ("shared", 0.1)


def test_a_3g_40gb_on_an_h100_is_its_vram_fold_and_names_its_profile_and_mig_device() -> None:
    objects = with_mig_ids(State().node("h1", 1, H100).hold("w1", "h1", partition(0, "3g.40gb", 0)).objects())
    (row,) = by_pod(objects)["w1"]
    fold = Fraction(H100_PROFILES["3g.40gb"][3] * M // H100_MIB, M)
    assert row["value"] == round(float(fold), 4) == 0.4906
    assert (row["mode"], row["GPU_I_PROFILE"], row["GPU_I_ID"]) == ("partitioned", "3g.40gb", "")
    assert (row["UUID"], row["mig_uuid"]) == ("GPU-0000", "MIG-w1-0-GPU-0000")


def test_a_pod_outside_kueue_has_empty_workload_and_queues() -> None:
    found = by_pod(State().node("n1", 2).hold(None, "n1", whole(1)).objects())
    (row,) = found["outside"]
    assert (row["workload"], row["localqueue"], row["clusterqueue"]) == ("", "", "")
    assert (row["instancetype"], row["value"], row["namespace"]) == (A10G.pool, 1.0, NS)


def test_what_no_pod_names_is_not_a_holder_row() -> None:
    state = State().node("n1", 2).hold("w1", "n1", whole(0))
    objects = [o for o in state.objects() if o["kind"] != "Pod"]  # the ledger still charges card 0
    assert holder_rows(raw_holdings(objects)) == []


def test_an_admitted_workload_whose_pods_hold_nothing_reserves_per_workload() -> None:
    w = workload("w9", [("main", 2, {"nvidia.com/gpu": "1"})], admitted=True, check_state="Ready")
    w["status"]["admission"]["podSetAssignments"][0]["resourceUsage"] = {"credits.gpustack.ai/nvidia": str(2 * M)}
    objects = [*State().node("n1", 2).hold("w1", "n1", whole(0)).objects(), w]
    rows = reserved_rows(raw_holdings(objects))
    assert [dict(zip(RESERVED_LABELS, labels, strict=True)) | {"value": v} for labels, v in rows] == [
        {
            "namespace": "team-a",
            "workload": "w9",
            "localqueue": A10G.entrance,
            "clusterqueue": A10G.pool,
            "instancetype": A10G.pool,
            "value": 2.0,
        }
    ]
    assert all(r["workload"] != "w9" for rs in by_pod(objects).values() for r in rs)


def test_the_lines_are_what_prometheus_client_writes_for_the_same_rows() -> None:
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.registry import Collector

    rows = [(("n1", 'a"b', "x\\y", "", "line\nbreak", *("v",) * 7), 0.4906), (("n2", *("",) * 11), 1.0)]

    class One(Collector):
        def collect(self) -> Any:
            yield gauge_family("gpuctl_card_holder", "h", list(HOLDER_LABELS), ((list(ls), v) for ls, v in rows))

    registry = CollectorRegistry(auto_describe=False)
    registry.register(One())
    expected = generate_latest(registry).split(b"\n", 2)[2]
    assert sample_lines("gpuctl_card_holder", HOLDER_LABELS, rows) == expected


def test_a_book_kept_node_by_node_holds_what_holdings_find() -> None:
    state = State().node("n1", 2).node("n2", 2).node("h1", 2, H100)
    state.hold("w1", "n1", whole(0)).hold("w2", "n2", slice_of(1, 40)).hold("w3", "h1", partition(0, "3g.40gb", 0))
    objects = state.objects()
    from gpuctl.core.instancetypes import parse_instancetype
    from gpuctl.core.ledger import parse_devices
    from gpuctl.core.pods import parse_pod
    from gpuctl.core.usage import usage_gauges
    from gpuctl.core.workloads import parse_local_queue, parse_workload

    of = {k: [o for o in objects if o["kind"] == k] for k in ("InstanceType", "Devices", "Pod", "Workload")}
    types = [parse_instancetype(o) for o in of["InstanceType"]]
    ledgers = [parse_devices(o) for o in of["Devices"]]
    pods = [parse_pod(o) for o in of["Pod"]]
    workloads = [parse_workload(o) for o in of["Workload"]]
    queues = [parse_local_queue(o) for o in objects if o["kind"] == "LocalQueue"]
    book = UsageBook(types, queues)
    owners = owners_of(workloads)
    for d in ledgers:
        book.set_node(d.node, d, [p for p in pods if p.node_name == d.node], owners)
    for key, w in owners.items():
        book.set_workload(key, w, [p for p in pods if (p.namespace, p.workload) == key])
    book.set_node("n2", None, [], owners)  # n2's ledger went away ...
    book.set_node("n2", next(d for d in ledgers if d.node == "n2"), [p for p in pods if p.node_name == "n2"], owners)
    fresh = holdings(types, ledgers, pods, workloads, queues)
    assert holder_rows(book.holdings()) == holder_rows(fresh)
    assert book.gauges() == usage_gauges(fresh)


def test_a_fragmentation_book_kept_node_by_node_is_the_pool_measured_at_once() -> None:
    from gpuctl.core.ledger import parse_devices
    from testbed.synthetic import synthetic_devices

    ledgers = [parse_devices(o) for o in synthetic_devices(40, seed=3)]
    shapes = [Shape("accelerator", 1), Shape("accelerator", 2), Shape("acceleratorShared", 1)]
    book = FragmentationBook("nvidia-a10g", shapes, None)
    for node, cards in cards_of(ledgers[20:], "nvidia-a10g").items():
        book.set_node(node, cards)
    for node, cards in cards_of(ledgers, "nvidia-a10g").items():  # every node again, some for the first time
        book.set_node(node, cards)
    book.set_node(ledgers[0].node, None)
    assert book.views(shapes) == pool_fragmentation(ledgers[1:], "nvidia-a10g", shapes)


# ----------------------------------------------------------------------------------------------- the operator


def family_text(text: str, names: tuple[str, ...]) -> str:
    return "".join(
        line + "\n"
        for line in text.splitlines()
        if any(line.startswith((n + "{", n + " ", f"# HELP {n} ", f"# TYPE {n} ")) for n in names)
    )


def scrape(controllers: Any) -> str:
    status = controllers.get(StatusController)
    for cached in controllers.cache.instancetypes().values():
        status.desired_status(cached)  # the views a reconcile computes: the pool gauges read them
    return str(controllers.metrics.render().decode())


KEPT = (
    *HOLDER_FAMILIES,
    "gpuctl_usage_card_equivalents",
    "gpuctl_usage_reserved_card_equivalents",
    "gpuctl_pool_free",
    "gpuctl_pool_stranded",
    "gpuctl_pool_fragmentation_score",
    "gpuctl_queue_pending",
    "gpuctl_workloads_held",
)


def test_the_kept_text_is_byte_identical_to_a_fresh_operators_after_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuctl.operator.controllers import status as module

    state = State().node("n1", 4).node("n2", 4).node("n3", 4).node("h1", 2, H100)
    state.hold("w1", "n1", whole(0, 1)).hold("w2", "n2", slice_of(0, 30)).hold("w3", "n2", slice_of(0, 25))
    state.hold("w4", "n3", shares(2)).hold(None, "n3", whole(3)).hold("w5", "h1", partition(0, "3g.40gb", 0))
    cluster = MemoryCluster(with_mig_ids(state.objects()))
    clock = [1000.0]
    monkeypatch.setattr(module.time, "monotonic", lambda: clock[0])
    kept = operator(cluster)
    first = scrape(kept)
    assert family_text(first, KEPT) == family_text(
        scrape(operator(MemoryCluster(cluster.copy().objects.values()))), KEPT
    )

    def pod(holder: str) -> JSON:
        return next(o for (k, _, n), o in cluster.objects.items() if k == "Pod" and n.rsplit("-", 1)[0] == holder)

    def ledger(node: str) -> JSON:
        return next(o for (kind, _, n), o in cluster.objects.items() if kind == "Devices" and n == node)

    # A Pod ends and its card is free again; a Pod moves in on another card; a Workload is admitted whose Pods hold
    # nothing yet; a Workload moves to another LocalQueue's name; a waiting one comes; a Node goes.
    cluster.delete(pod("w1"))
    gone = copy.deepcopy(ledger("n1"))
    gone["status"]["groups"][0]["accelerators"][:2] = [card_row(0), card_row(1)]
    cluster.put(gone)
    moved = copy.deepcopy(pod("w4"))
    moved["metadata"]["name"] = "w4-new"
    moved["spec"]["nodeName"] = "n1"
    cluster.put(moved)
    reserved = workload("w9", [("main", 2, {"nvidia.com/gpu": "1"})], admitted=True, check_state="Ready", namespace=NS)
    reserved["status"]["admission"]["podSetAssignments"][0]["resourceUsage"] = {"credits.gpustack.ai/nvidia": str(M)}
    cluster.put(reserved)
    waiting = workload("w10", [("main", 1, {"nvidia.com/gpu": "2"})], reserved=False, namespace=NS)
    waiting["spec"]["queueName"] = A10G.entrance
    cluster.put(waiting)
    w2 = next(o for (kind, _, n), o in cluster.objects.items() if kind == "Workload" and n == "w2")
    w2 = copy.deepcopy(w2)
    w2["spec"]["queueName"] = "elsewhere"
    cluster.put(w2)
    cluster.delete(next(o for (kind, _, n), o in cluster.objects.items() if kind == "Node" and n == "n3"))
    clock[0] += module.FRAGMENTATION_TTL
    after = scrape(kept)
    status = kept.get(StatusController)
    nodes, workloads = status._usage_text.read
    assert 0 < nodes < 4 and workloads > 0  # only what changed was read again
    fresh = scrape(operator(MemoryCluster(cluster.copy().objects.values())))
    assert family_text(after, KEPT) == family_text(fresh, KEPT)
    assert family_text(after, HOLDER_FAMILIES) != family_text(first, HOLDER_FAMILIES)
    assert 'pod="w4-new"' in after and 'pod="w1-0"' not in after and 'workload="w9"' in after
    assert 'node="n3"' not in family_text(after, ("gpuctl_card_holder",))  # its Node is gone: its cards count nowhere


def test_a_scrape_parses_and_exports_both_families() -> None:
    state = State().node("n1", 2).hold("w1", "n1", whole(0)).hold(None, "n1", slice_of(1, 50))
    w = workload("w9", [("main", 1, {"nvidia.com/gpu": "1"})], admitted=True, check_state="Ready", namespace=NS)
    text = scrape(operator(MemoryCluster([*state.objects(), w])))
    families = {f.name: f for f in text_string_to_metric_families(text)}
    holders = families["gpuctl_card_holder"].samples
    assert sorted((s.labels["pod"].rsplit("-", 1)[0], s.labels["mode"], s.value) for s in holders) == [
        ("outside", "sliced", 0.5),
        ("w1", "exclusive", 1.0),
    ]
    assert set(holders[0].labels) == set(HOLDER_LABELS)
    (reserved,) = families["gpuctl_workload_reserved_card_equivalents"].samples
    assert (reserved.labels["workload"], reserved.value) == ("w9", 1.0)
    names = [f.name for f in text_string_to_metric_families(text)]
    assert len(names) == len(set(names))  # each family once


def test_the_cache_says_which_nodes_and_workloads_changed() -> None:
    cluster = MemoryCluster(State().node("n1", 2).node("n2", 2).hold("w1", "n1", whole(0)).objects())
    cache = operator(cluster).cache
    serial = cache.changes.serial
    assert cache.changes.since(serial) == (set(), set())
    cluster.put(copy.deepcopy(next(o for (k, _, n), o in cluster.objects.items() if k == "Pod" and n == "w1-0")))
    assert cache.changes.since(serial) == ({"n1"}, {f"{NS}/w1"})
    w1 = next(o for (k, _, n), o in cluster.objects.items() if k == "Workload" and n == "w1")
    serial = cache.changes.serial
    cluster.put(copy.deepcopy(w1))
    assert cache.changes.since(serial) == ({"n1"}, {f"{NS}/w1"})  # its Pods' node too: their labels read it


def test_a_change_log_that_forgot_says_so() -> None:
    from gpuctl.operator.cache import ChangeLog

    log = ChangeLog(kept=4)
    log.touch(["a", "b", "c"])
    start = log.serial
    log.touch(["d", "e"])
    assert log.since(start) == ({"d", "e"}, set())
    assert log.since(0) is None  # "a" and "b" were forgotten
    assert log.since(log.serial) == (set(), set())


def test_a_replica_that_does_not_lead_exports_no_cluster_wide_series() -> None:
    """Both replicas hold the same cache: were both to export, a Prometheus scraping the two would count every card
    twice in a sum. The standby exports none of the pool, usage, holder and queue families; on leading, it does."""
    state = State().node("n1", 2).hold("w1", "n1", whole(0))
    controllers = operator(MemoryCluster(state.objects()))
    status = controllers.get(StatusController)
    leads = [False]
    status.leading = lambda: leads[0]
    standby = scrape(controllers)
    assert family_text(standby, (*HOLDER_FAMILIES, "gpuctl_usage_card_equivalents", "gpuctl_queue_pending")) == ""
    assert "gpuctl_webhook_requests_total" in standby  # its own counters, as every replica's
    leads[0] = True
    status.pools.clear()  # a standby reconciles nothing: it knows no pool's views
    status.warm()  # what the first scrape reads, computed as the replica starts leading
    assert set(status.pools) == {A10G.pool}
    computed = status._usage
    assert computed is not None and status._usage_text.read[0] == 1
    leading = scrape(controllers)
    assert 'pod="w1-0"' in family_text(leading, ("gpuctl_card_holder",))
    assert status._usage is computed  # the scrape found it computed


def test_reading_everything_again_holds_the_cache_lock_briefly(monkeypatch: pytest.MonkeyPatch) -> None:
    """A full read of every node and Workload takes the cache's lock a few keys at a time (its watch events and the
    webhooks wait for no more than that), and computes the same as reading them at once."""
    from gpuctl.operator import scrape as scrape_module

    state = State()
    for n in range(6):
        state.node(f"n{n}", 2).hold(f"w{n}", f"n{n}", whole(0))
    at_once = family_text(scrape(operator(MemoryCluster(state.objects()))), HOLDER_FAMILIES)

    class CountingLock:
        def __init__(self, inner: Any) -> None:
            self.inner, self.holds, self.depth = inner, 0, 0

        def __enter__(self) -> None:
            self.inner.__enter__()
            self.depth += 1
            self.holds += self.depth == 1

        def __exit__(self, *exc: object) -> None:
            self.depth -= 1
            self.inner.__exit__(*exc)

    controllers = operator(MemoryCluster(state.objects()))
    counting = CountingLock(controllers.cache.lock)
    controllers.cache.lock = counting
    monkeypatch.setattr(scrape_module, "GATHERED_PER_HOLD", 2)
    text = controllers.get(StatusController)._usage_text.update()[2].decode()
    assert counting.holds >= 1 + 6 // 2 + 6 // 2  # what changed, then the nodes and the Workloads two per hold
    assert family_text(text, HOLDER_FAMILIES) == at_once


def test_an_update_that_failed_is_read_again_by_the_next(monkeypatch: pytest.MonkeyPatch) -> None:
    """A change read by an update that failed half-way is not lost: the next update reads it again, and the kept
    holder text and pool fits are what a fresh operator computes."""
    from gpuctl.core.fragmentation import FragmentationBook as Fits
    from gpuctl.core.usage import UsageBook as Book

    state = State().node("n1", 4).node("n2", 4).hold("w1", "n1", whole(0)).hold("w2", "n2", slice_of(0, 30))
    cluster = MemoryCluster(state.objects())
    status = operator(cluster).get(StatusController)
    it = status.cache.instancetypes()[A10G.pool].record
    shapes = reference_shapes([])
    before = status._usage_text.update()[2]
    pool = PoolFragmentation(status.cache)
    fits_before = pool.update(it, shapes)
    w1 = next(o for (k, _, n), o in cluster.objects.items() if k == "Pod" and n == "w1-0")
    cluster.delete(w1)
    freed = copy.deepcopy(next(o for (k, _, n), o in cluster.objects.items() if k == "Devices" and n == "n1"))
    freed["status"]["groups"][0]["accelerators"][0] = card_row(0)
    cluster.put(freed)

    def broken(*_: object, **__: object) -> None:
        raise RuntimeError("half-way")

    with monkeypatch.context() as m:
        m.setattr(Book, "set_node", broken)
        m.setattr(Fits, "set_node", broken)
        with pytest.raises(RuntimeError):
            status._usage_text.update()
        with pytest.raises(RuntimeError):
            pool.update(it, shapes)
    after = status._usage_text.update()[2]
    fresh = operator(MemoryCluster(cluster.copy().objects.values())).get(StatusController)
    assert after == fresh._usage_text.update()[2] and after != before
    assert b'pod="w1-0"' not in after
    fits = pool.update(it, shapes)
    assert fits == PoolFragmentation(fresh.cache).update(it, shapes) and fits != fits_before
