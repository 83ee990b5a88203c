"""Records parsed once and shared where a cluster repeats itself: what is shared must never mix two objects up."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction
from typing import Any

from gpuctl.core.nodes import parse_node
from gpuctl.core.pods import parse_allocation_annotation, parse_pod
from gpuctl.core.workloads import Condition, parse_workload


def _pod(containers: list[dict[str, Any]], **annotations: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "team-a", "annotations": annotations},
        "spec": {"nodeName": "n1", "containers": containers},
    }


def _container(name: str, limits: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "resources": {"limits": limits}}


def test_pods_with_the_same_requests_keep_their_own_accelerator_containers() -> None:
    gpu = {"nvidia.com/gpu": "1"}
    a = parse_pod(_pod([_container("main", gpu), _container("side", {"cpu": "1"})]))
    b = parse_pod(_pod([_container("trainer", gpu), _container("side", {"cpu": "1"})]))
    assert a.accelerator_containers == ("main",)
    assert b.accelerator_containers == ("trainer",)
    assert a.requests == b.requests == {"nvidia.com/gpu": Fraction(1), "cpu": Fraction(1)}


def test_a_pod_spec_that_is_not_plain_data_is_read_uncached() -> None:
    odd = parse_pod(_pod([{"name": "main", "resources": {"limits": {"nvidia.com/gpu": 1.5}}}]))
    assert odd.accelerator_containers == ("main",)
    assert parse_pod(_pod([_container("main", {"cpu": "2"})])).accelerator_containers == ()


def test_nodes_share_an_allocatable_map_only_when_its_text_is_the_same() -> None:
    def node(name: str, allocatable: dict[str, Any]) -> dict[str, Any]:
        return {"metadata": {"name": name}, "status": {"allocatable": allocatable}}

    a = parse_node(node("a", {"cpu": "8", "pods": "110"}))
    b = parse_node(node("b", {"cpu": "8", "pods": "110"}))
    c = parse_node(node("c", {"cpu": "16", "pods": "110"}))
    assert a.allocatable is b.allocatable and a.allocatable == {"cpu": 8, "pods": 110}
    assert c.allocatable == {"cpu": 16, "pods": 110}
    # 1 and True are equal as keys: a map that is not all text is read on its own.
    assert parse_node(node("d", {"cpu": True})).allocatable == parse_node(node("e", {"cpu": True})).allocatable
    assert parse_node(node("f", {"cpu": 1})).allocatable == {"cpu": 1}


def test_allocation_records_are_read_whatever_their_shape() -> None:
    raw = (
        '{"main": {"devices": {"groups": [{"id": "g", "manufacturer": "nvidia", "accelerators": ['
        '{"id": "GPU-1", "mode": 3, "allocated": 5, "allocatedPhysicalPlacements": [{"start": 1, "length": 2}, 7]},'
        ' 5, {"id": "GPU-2", "mode": true}]}, 3]}}, "x": 1, "y": {"devices": {"groups": {}}}}'
    )
    cards = parse_allocation_annotation(raw)
    assert [(c.container, c.card_id, c.mode, c.allocated, c.placements) for c in cards] == [
        ("main", "GPU-1", 3, 5, ((1, 2), (0, 0))),
        ("main", "", 0, 0, ()),
        ("main", "GPU-2", 0, 0, ()),
    ]
    assert parse_allocation_annotation("not json") == () == parse_allocation_annotation("[1]")


def test_a_workloads_condition_flags_follow_its_conditions() -> None:
    obj = {
        "metadata": {"name": "w", "namespace": "team-a"},
        "spec": {"queueName": "q", "podSets": [{"name": "main", "count": 1, "template": {"spec": {}}}]},
        "status": {
            "conditions": [
                {"type": "QuotaReserved", "status": "True"},
                {"type": "Admitted", "status": "False"},
                {"type": "Evicted", "status": "True"},
            ]
        },
    }
    w = parse_workload(obj)
    assert (w.quota_reserved, w.admitted, w.evicted, w.finished) == (True, False, True, False)
    assert w.key == "team-a/w"
    done = replace(w, conditions={"Finished": Condition("Finished", "True")})
    assert (done.quota_reserved, done.evicted, done.finished) == (False, False, True)


def test_a_missing_container_name_and_a_null_one_are_two_shapes() -> None:
    gpu = {"nvidia.com/gpu": "1"}
    unnamed = parse_pod(_pod([{"resources": {"limits": gpu}}]))
    null = parse_pod(_pod([{"name": None, "resources": {"limits": gpu}}]))
    assert unnamed.accelerator_containers == ("",) and null.accelerator_containers == ("None",)


def test_podsets_of_one_shape_share_their_key_and_differ_from_any_other() -> None:
    def workload(*containers: dict[str, Any]) -> Any:
        template = {"spec": {"containers": list(containers)}}
        return parse_workload(
            {"metadata": {"name": "w"}, "spec": {"podSets": [{"name": "main", "count": 2, "template": template}]}}
        )

    gpu = {"nvidia.com/gpu": "1"}
    [a] = workload(_container("main", gpu)).podsets
    [b] = workload(_container("main", gpu)).podsets
    assert a.shape is not None and a.shape == b.shape and a == b
    others = [
        workload(_container("other", gpu)),
        workload(_container("main", {"nvidia.com/gpu": 1})),
        workload(_container("main", {"nvidia.com/gpu": "2"})),
        workload({"resources": {"limits": gpu}}),
        workload({"name": None, "resources": {"limits": gpu}}),
        workload(_container("main", gpu), _container("side", {"cpu": "1"})),
    ]
    shapes = [w.podsets[0].shape for w in others]
    assert a.shape not in shapes and len(set(shapes)) == len(shapes)
    # What is not plain data has no shape: it is read uncached.
    assert workload(_container("main", {"nvidia.com/gpu": 1.5})).podsets[0].shape is None
