"""The operator's pool and queue gauges: equal to the views the status writer publishes, stranded capacity on a
worked example, and the queue's depth and Workloads held per gate."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpuctl.cluster import kinds
from gpuctl.core.units import M
from gpuctl.operator.controllers.check import CheckController
from gpuctl.operator.controllers.status import StatusController
from testbed.factories import card_row, workload
from tests.memory_cluster import MemoryCluster
from tests.unit.test_differential import operator
from tests.unit.test_simulate import CQ, ENTRANCE, allocated, pool


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_pool_gauges_equal_the_published_views_and_show_what_is_stranded() -> None:
    halves = [allocated(f"s{i}", "n1", {}, [(f"GPU-{i:04d}", 3, M // 2)]) for i in range(8)]
    waiting = workload("five", [("main", 1, {"nvidia.com/gpu": "5"})], reserved=False, queue=ENTRANCE)
    waiting["metadata"]["creationTimestamp"] = "2026-12-01T00:00:00Z"
    objects = pool({"n1": 8}, nominal_cards=16, extra=[*halves, waiting])
    for o in objects:  # the ledger the device manager publishes for those Pods: every card half sliced
        if o["kind"] == "Devices":
            rows = [card_row(i, mode=3, allocated=M // 2, slices=1) for i in range(8)]
            o["status"]["groups"] = [{"id": "a10g", "manufacturer": "nvidia", "accelerators": rows}]
    cluster = MemoryCluster(objects)
    controllers = operator(cluster)
    controllers.get(StatusController).reconcile(CQ)
    controllers.get(CheckController).reconcile("team-a/five")
    status = (cluster.get(kinds.INSTANCETYPE, CQ) or {})["status"]
    got = samples(controllers.metrics.render().decode())

    def value(name: str, **labels: str) -> float:
        return got[(name, tuple(sorted(labels.items())))]

    for view in ("accelerator", "acceleratorShared", "acceleratorSliced", "acceleratorPartitioned"):
        for field, metric in (
            ("onceMaxRequest", "once_max_request"),
            ("remaining", "remaining"),
            ("capacity", "capacity"),
        ):
            assert value(f"gpuctl_pool_{metric}", instancetype=CQ, view=view) == status[view][field], (view, field)
    # Eight cards sliced to 50 %: 400 % free, a five-card request can use none of it.
    assert value("gpuctl_pool_free", instancetype=CQ, view="accelerator") == 400
    assert value("gpuctl_pool_stranded", instancetype=CQ, view="accelerator", shape="ex=5") == 400
    assert value("gpuctl_pool_fragmentation_score", instancetype=CQ, view="accelerator") == 1.0
    assert value("gpuctl_queue_pending", cluster_queue=CQ) == 1
    assert value("gpuctl_queue_head_age_seconds", cluster_queue=CQ) > 0
    assert value("gpuctl_queue_head_blocked_by_fragmentation", cluster_queue=CQ) == 0  # 400 % < the 500 % it asks
    assert value("gpuctl_workloads_held", cluster_queue=CQ, gate="2") == 1


def test_the_dashboard_and_the_alerts_read_only_metrics_the_operator_exports() -> None:
    import re

    from gpuctl.operator.monitoring import alert_rules, dashboard, recording_rules

    held = allocated("s0", "n1", {}, [("GPU-0000", 1, M)])
    idle = workload("idle", [("main", 1, {"nvidia.com/gpu": "1"})], admitted=True, check_state="Ready")
    cluster = MemoryCluster(
        pool(
            {"n1": 2},
            extra=[
                workload("w", [("main", 1, {"nvidia.com/gpu": "1"})], reserved=False, queue=ENTRANCE),
                held,
                idle,
            ],
        )
    )
    for o in cluster.objects.values():  # the ledger the device manager publishes for s0
        if o["kind"] == "Devices":
            o["status"]["groups"] = [
                {
                    "id": "a10g",
                    "manufacturer": "nvidia",
                    "accelerators": [card_row(0, mode=1, allocated=M), card_row(1)],
                }
            ]
    controllers = operator(cluster)
    controllers.get(StatusController).reconcile(CQ)
    controllers.metrics.observe("pod-accelerators", 0.01, True, False)
    controllers.metrics.verdicts.labels("Ready").inc()
    exported = {s[0] for s in samples(controllers.metrics.render().decode())}
    exprs = [t["expr"] for p in dashboard()["panels"] for t in p["targets"]]
    exprs += [r["expr"] for g in alert_rules()["spec"]["groups"] for r in g["rules"]]
    # Recorded series (level:metric:operation) are the rules' own; the metrics they are recorded from are checked.
    exprs += [r["expr"] for r in recording_rules()]
    used = {m for e in exprs for m in re.findall(r"gpuctl_[a-z0-9_]+", re.sub(r"\w+:\w+:\w+", "", e))}
    assert used and used <= exported, sorted(used - exported)


def test_fragmentation_is_computed_once_per_pool_within_its_ttl_however_often_it_is_scraped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gpuctl.operator.controllers import status as module

    cluster = MemoryCluster(pool({"n1": 8}))
    controllers = operator(cluster)
    controllers.get(StatusController).reconcile(CQ)
    calls: list[str] = []
    compute = controllers.get(StatusController)._compute_fragmentation

    def counted(name: str) -> Any:
        calls.append(name)
        return compute(name)

    monkeypatch.setattr(controllers.get(StatusController), "_compute_fragmentation", counted)
    clock = [1000.0]
    monkeypatch.setattr(module.time, "monotonic", lambda: clock[0])
    first = samples(controllers.metrics.render().decode())
    for _ in range(5):
        assert samples(controllers.metrics.render().decode()) == first
    assert calls == [CQ]
    clock[0] += module.FRAGMENTATION_TTL
    controllers.metrics.render()
    assert calls == [CQ]  # past its TTL, but nothing it reads changed: not computed again
    cluster.put(workload("late", [("main", 1, {"nvidia.com/gpu": "1"})], reserved=False, queue=ENTRANCE))
    controllers.metrics.render()
    assert calls == [CQ, CQ]
    cluster.put(workload("later", [("main", 1, {"nvidia.com/gpu": "1"})], reserved=False, queue=ENTRANCE))
    controllers.metrics.render()
    assert calls == [CQ, CQ]  # changed again, but within the TTL of the last computation


def test_the_usage_and_queue_gauges_are_computed_again_only_when_what_they_read_changed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gpuctl.operator.controllers import status as module

    cluster = MemoryCluster(pool({"n1": 8}))
    controllers = operator(cluster)
    status = controllers.get(StatusController)
    status.reconcile(CQ)
    calls: list[str] = []

    def counting(name: str) -> Any:
        compute = getattr(status, name)

        def counted() -> Any:
            calls.append(name)
            return compute()

        return counted

    for name in ("_compute_usage", "_compute_queues"):
        monkeypatch.setattr(status, name, counting(name))
    clock = [1000.0]
    monkeypatch.setattr(module.time, "monotonic", lambda: clock[0])
    controllers.metrics.render()
    assert sorted(calls) == ["_compute_queues", "_compute_usage"]
    clock[0] += module.FRAGMENTATION_TTL
    controllers.metrics.render()
    assert len(calls) == 2
    cluster.put(workload("late", [("main", 1, {"nvidia.com/gpu": "1"})], reserved=False, queue=ENTRANCE))
    before = samples(controllers.metrics.render().decode())
    assert len(calls) == 4
    assert before[("gpuctl_queue_pending", (("cluster_queue", CQ),))] == 1


def test_workloads_held_counts_each_workloads_own_pods() -> None:
    from gpuctl.core.pods import parse_pod
    from gpuctl.core.queueing import held_gate, pods_by_workload
    from gpuctl.core.workloads import parse_workload

    admitted = parse_workload(workload("w", [("main", 1, {"nvidia.com/gpu": "1"})], admitted=True))
    unbound = {
        "metadata": {"name": "w-0", "namespace": admitted.namespace, "annotations": {"kueue.x-k8s.io/workload": "w"}},
        "spec": {"containers": [{"name": "main"}]},
    }
    other = {
        **unbound,
        "metadata": {**unbound["metadata"], "name": "x-0", "annotations": {"kueue.x-k8s.io/workload": "x"}},
    }
    grouped = pods_by_workload([parse_pod(unbound), parse_pod(other)])
    assert set(grouped) == {f"{admitted.namespace}/w", f"{admitted.namespace}/x"}
    assert held_gate(admitted, grouped[admitted.key]) == 4  # its Pod is not bound
    assert held_gate(admitted, ()) == 4  # no Pod yet: held at 4, as its explanation says


def test_usage_gauges_are_what_each_namespace_holds_and_reserves_in_card_equivalents() -> None:
    exclusive = allocated("whole", "n1", {}, [("GPU-0000", 1, M)])
    slice_of = allocated("slice", "n1", {}, [("GPU-0001", 3, 3 * M // 10)])
    slice_of["metadata"]["namespace"] = "team-b"
    idle = workload("idle", [("main", 1, {"nvidia.com/gpu": "1"})], admitted=True, check_state="Ready")
    objects = pool({"n1": 2}, extra=[exclusive, slice_of, idle])
    for o in objects:
        if o["kind"] == "Devices":
            rows = [card_row(0, mode=1, allocated=M), card_row(1, mode=3, allocated=3 * M // 10, slices=1)]
            o["status"]["groups"] = [{"id": "a10g", "manufacturer": "nvidia", "accelerators": rows}]
    cluster = MemoryCluster(objects)
    controllers = operator(cluster)
    got = samples(controllers.metrics.render().decode())
    usage = {k: v for k, v in got.items() if k[0].startswith("gpuctl_usage_")}
    assert usage == {
        ("gpuctl_usage_card_equivalents", (("instancetype", CQ), ("mode", "exclusive"), ("namespace", "team-a"))): 1.0,
        ("gpuctl_usage_card_equivalents", (("instancetype", CQ), ("mode", "sliced"), ("namespace", "team-b"))): 0.3,
        ("gpuctl_usage_reserved_card_equivalents", (("instancetype", CQ), ("namespace", "team-a"))): 1.0,
    }
