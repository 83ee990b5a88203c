"""Reading snapshot files: JSON lists streamed item by item, YAML documents, typed lists, errors with file and line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuctl.cluster import kinds
from gpuctl.cluster.errors import SourceError
from gpuctl.cluster.snapshot import SnapshotSource, read_objects
from testbed.factories import devices, instancetype, node


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize("indent", [None, 4])
def test_a_json_list_reads_the_same_streamed_as_whole(tmp_path: Path, indent: int | None) -> None:
    items = [node("a"), instancetype(), devices("a")]
    path = write(
        tmp_path,
        "l.json",
        json.dumps({"apiVersion": "v1", "items": items, "kind": "List", "metadata": {}}, indent=indent),
    )
    assert list(read_objects(path)) == items


def test_a_typed_list_lends_its_kind_to_items_without_one_wherever_it_names_it(tmp_path: Path) -> None:
    bare = {"metadata": {"name": "n1"}, "status": {}}
    before = write(tmp_path, "a.json", json.dumps({"kind": "NodeList", "apiVersion": "v1", "items": [bare]}))
    after = write(tmp_path, "b.json", json.dumps({"apiVersion": "v1", "items": [bare], "kind": "NodeList"}))
    for path in (before, after):
        [obj] = read_objects(path)
        assert obj["kind"] == "Node" and obj["apiVersion"] == "v1"


def test_single_objects_arrays_and_yaml(tmp_path: Path) -> None:
    write(tmp_path, "one.json", json.dumps(node("x")))
    write(tmp_path, "many.json", json.dumps([node("y"), node("z")]))
    write(
        tmp_path,
        "multi.yaml",
        "apiVersion: v1\nkind: Node\nmetadata: {name: w}\n---\n---\napiVersion: v1\nkind: Node\nmetadata: {name: v}\n",
    )
    names = sorted(o["metadata"]["name"] for o in SnapshotSource(tmp_path).list(kinds.NODE))
    assert names == ["v", "w", "x", "y", "z"]


def test_devices_are_parsed_while_read_and_still_listable(tmp_path: Path) -> None:
    write(tmp_path, "d.json", json.dumps({"apiVersion": "v1", "kind": "List", "items": [devices("a"), devices("b")]}))
    source = SnapshotSource(tmp_path)
    assert [d.node for d in source.device_records()] == ["a", "b"]
    assert [o["metadata"]["name"] for o in source.list(kinds.DEVICES)] == ["a", "b"]


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ('{"kind": "List", "items": [\n{"kind": "Node", "apiVersion": "v1"},\n{"b": }\n]}', 3),
        ('{"kind": "List",\n"items": [{"kind": "Node", "apiVersion": "v1"} {"b": 2}]}', 2),
        ('{"kind": "List"}\n{"extra": 1}', 2),
        ('{"kind" "List"}', 1),
    ],
)
def test_malformed_json_names_file_and_line(tmp_path: Path, text: str, line: int) -> None:
    path = write(tmp_path, "bad.json", text)
    with pytest.raises(SourceError, match=rf"^{path}:{line}: not valid JSON"):
        list(read_objects(path))


def test_a_malformed_devices_object_names_the_file(tmp_path: Path) -> None:
    bad = devices("a")
    bad["spec"]["groups"] = 7
    path = write(tmp_path, "d.json", json.dumps({"kind": "List", "apiVersion": "v1", "items": [bad]}))
    with pytest.raises(SourceError, match=rf"^{path}: Devices a: spec.groups: expected a list"):
        SnapshotSource(tmp_path).device_records()
