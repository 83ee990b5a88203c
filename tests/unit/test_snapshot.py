"""Reading snapshot files: JSON lists streamed item by item, YAML documents, typed lists, errors with file and line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuctl.cluster import kinds, snapshot
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


# A JSON file is read through a window of CHUNK bytes: every answer must be the one a whole-file decode gives,
# wherever the chunk boundaries fall (inside a number, a literal, a multi-byte character, white space).


@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 64, 1 << 18])
@pytest.mark.parametrize("indent", [None, 2])
def test_a_json_file_reads_the_same_through_any_window(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int, indent: int | None
) -> None:
    monkeypatch.setattr(snapshot, "CHUNK", chunk)
    first = node("a", labels={"zone": "süd-1 \u2603"})
    first["status"] = {"capacity": {"pods": 110}, "ready": True, "taints": None, "ratio": 1.5e3}
    doc = {"apiVersion": "v1", "kind": "List", "items": [first, instancetype(), devices("a")], "metadata": {}}
    path = write(tmp_path, "l.json", json.dumps(doc, indent=indent, ensure_ascii=False))
    entries = list(snapshot.read_entries(path))
    assert [obj for obj, _ in entries] == doc["items"]
    # Each item comes with its own text, which decodes to the same object.
    assert [json.loads(text) for _, text in entries if text is not None] == doc["items"]


@pytest.mark.parametrize("chunk", [1, 5, 1 << 18])
def test_a_typed_list_read_through_a_window_lends_its_kind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    monkeypatch.setattr(snapshot, "CHUNK", chunk)
    bare = {"metadata": {"name": "n1"}, "status": {}}
    path = write(tmp_path, "a.json", json.dumps({"apiVersion": "v1", "items": [bare], "kind": "NodeList"}))
    [(obj, text)] = snapshot.read_entries(path)
    # Completed with the list's kind, the object is no longer the file's text: it is kept as read.
    assert obj == {**bare, "kind": "Node", "apiVersion": "v1"} and text is None
    assert SnapshotSource(path).list(kinds.NODE) == [obj]


@pytest.mark.parametrize("chunk", [1, 3, 16, 1 << 18])
@pytest.mark.parametrize(
    ("text", "line"),
    [
        ('{"kind": "List", "items": [\n{"kind": "Node", "apiVersion": "v1"},\n{"b": }\n]}', 3),
        ('{"kind": "List",\n"items": [{"kind": "Node", "apiVersion": "v1"} {"b": 2}]}', 2),
        ('{"kind": "List"}\n{"extra": 1}', 2),
        ('{"kind" "List"}', 1),
        ('\n\n\n{"kind": "List", "items": [\n\n{"kind": "Node", "apiVersion": "v1", "metadata": {"name": "x"}},\n', 7),
        ('{"kind": "List", "items": [{"kind": "Node", "apiVersion": "v1", "n": 12', 1),
        ('{"kind": "List",\n"items": [\n{"kind": "Node", "apiVersion": "v1", "ok": tru}]}', 3),
    ],
)
def test_malformed_json_names_the_line_through_any_window(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int, text: str, line: int
) -> None:
    monkeypatch.setattr(snapshot, "CHUNK", chunk)
    path = write(tmp_path, "bad.json", text)
    with pytest.raises(SourceError, match=rf"^{path}:{line}: not valid JSON"):
        list(read_objects(path))


def test_a_file_that_is_not_utf8_names_the_byte_in_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(snapshot, "CHUNK", 4)
    path = tmp_path / "bad.json"
    path.write_bytes(b'{"kind": "List", "items": [\xff]}')
    with pytest.raises(SourceError) as raised:
        list(read_objects(path))
    # The byte and its offset in the whole file (read 4 bytes at a time), and no codec's name.
    assert str(raised.value) == f"{path}: cannot read: not UTF-8 text (byte 0xff at offset 27); save it as UTF-8"


def test_yaml_in_a_json_file_is_read_as_yaml(tmp_path: Path) -> None:
    path = write(tmp_path, "y.json", "\n\napiVersion: v1\nkind: Node\nmetadata: {name: y}\n")
    assert [o["metadata"]["name"] for o in read_objects(path)] == ["y"]


def test_objects_are_kept_as_text_and_read_back_by_kind_namespace_and_name(tmp_path: Path) -> None:
    pods = [
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": n, "namespace": ns}}
        for ns, n in (("a", "p1"), ("b", "p1"), ("a", "p2"))
    ]
    pods.append({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p3"}})  # no namespace: "default"
    write(tmp_path, "pods.json", json.dumps({"apiVersion": "v1", "kind": "List", "items": pods}))
    write(tmp_path, "nodes.yaml", "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\n")
    source = SnapshotSource(tmp_path)
    assert source.list(kinds.POD) == pods
    assert source.list(kinds.POD, namespace="a") == [pods[0], pods[2]]
    assert source.list(kinds.POD, namespace="default") == [pods[3]]
    assert source.get(kinds.POD, "p1", "b") == pods[1]
    assert source.get(kinds.POD, "p1") == pods[0]
    assert source.get(kinds.POD, "p9", "a") is None
    assert source.names(kinds.NODE) == ["n1"] and source.names(kinds.POD) == ["p1", "p1", "p2", "p3"]
    # Each read is a fresh copy: a caller that changes what it read changes nothing for the next read.
    source.list(kinds.POD)[0]["metadata"]["name"] = "changed"
    assert source.list(kinds.POD) == pods


@pytest.mark.parametrize("chunk", [1, 2, 3, 5, 1 << 18])
def test_numbers_and_literals_that_a_window_cuts_read_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    monkeypatch.setattr(snapshot, "CHUNK", chunk)
    obj = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}, "generation": 1234567, "x": -2.5e-3}
    obj |= {"t": True, "f": False, "z": None, "last": 987654321}
    path = write(tmp_path, "n.json", json.dumps(obj))
    assert list(read_objects(path)) == [obj]


def test_kinds_asked_for_beforehand_are_parsed_as_they_are_read(tmp_path: Path) -> None:
    from gpuctl.core.pods import parse_pod

    pods = [
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": n, "namespace": ns}, "spec": {"nodeName": "x"}}
        for ns, n in (("a", "p1"), ("b", "p2"))
    ]
    write(tmp_path, "pods.json", json.dumps({"apiVersion": "v1", "kind": "List", "items": pods}))
    planned = SnapshotSource(tmp_path)
    parsed: list[str] = []

    def counting(obj: dict[str, object]) -> object:
        parsed.append(str(obj["metadata"]["name"]))  # type: ignore[index]
        return parse_pod(obj)

    planned.read_as_records({kinds.POD: counting})
    assert planned.records(kinds.POD, counting) == [parse_pod(p) for p in pods] and parsed == ["p1", "p2"]
    assert planned.records(kinds.POD, counting, "b") == [parse_pod(pods[1])] and parsed == ["p1", "p2"]
    # Another parser (or a source asked nothing) parses what it is asked for, then.
    assert planned.records(kinds.POD, parse_pod, "a") == [parse_pod(pods[0])]
    assert SnapshotSource(tmp_path).records(kinds.POD, parse_pod) == [parse_pod(p) for p in pods]
    # What was parsed as it was read is not kept as objects: a raw read reads the files again.
    assert planned.list(kinds.POD) == pods and planned.list(kinds.POD, namespace="b") == [pods[1]]
    assert planned.get(kinds.POD, "p2", "b") == pods[1] and planned.get(kinds.POD, "p2", "a") is None
    assert planned.names(kinds.POD) == ["p1", "p2"]
    # Once read, a plan comes too late and changes nothing.
    planned.read_as_records({kinds.NODE: counting})
    assert planned.records(kinds.NODE, counting) == [] and parsed == ["p1", "p2"]


def test_nodes_and_ledgers_read_on_demand_are_parsed_when_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuctl.cluster import read
    from gpuctl.core import ledger

    bad = devices("b")
    bad["spec"]["groups"] = 7
    items = [node("a"), node("b"), devices("a"), bad, devices("gone")]
    write(tmp_path, "c.json", json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    parsed: list[str] = []
    real = ledger.parse_devices

    def counting(obj: dict[str, object], capabilities: object = None) -> ledger.NodeDevices:
        parsed.append(str(obj["metadata"]["name"]))  # type: ignore[index]
        return real(obj)

    monkeypatch.setattr(read, "parse_devices", counting)
    source = SnapshotSource(tmp_path)
    read.read_on_demand(source, kinds.NODE, kinds.DEVICES)
    nodes = read.node_map(source)
    ledgers = read.ledger_map(source, nodes)
    # Names and membership cost no parse; an orphan (its Node gone) is not served.
    assert list(nodes) == ["a", "b"] and list(ledgers) == ["a", "b"] and "gone" not in ledgers and parsed == []
    assert ledgers["a"] == real(devices("a")) and ledgers["a"] is ledgers["a"] and parsed == ["a"]
    assert nodes["b"].name == "b"
    # A malformed ledger is refused, in one line naming it, when a command reads it.
    with pytest.raises(SourceError, match=rf"^snapshot {tmp_path}: Devices b: spec\.groups: expected a list"):
        ledgers["b"]
    # Read as records, the names and every ledger are still there (the malformed one refused).
    assert source.names(kinds.DEVICES) == ["a", "b", "gone"]
    with pytest.raises(SourceError, match=r"Devices b: spec\.groups"):
        source.device_records()

    # A source that only lists (a live cluster) parses each listed ledger when it is read.
    class Listed:
        def describe(self) -> str:
            return "cluster x"

        def list(self, kind: kinds.Kind, **_: object) -> list[dict[str, object]]:
            return [o for o in items if o["kind"] == kind.kind]

    parsed.clear()
    live = read.ledger_map(Listed(), {"a", "b"})  # type: ignore[arg-type]
    assert list(live) == ["a", "b"] and parsed == [] and live["a"].node == "a" and parsed == ["a"]
    with pytest.raises(SourceError, match=r"^cluster x: Devices b: spec\.groups"):
        live["b"]
    assert [n.name for n in read.node_map(Listed()).values()] == ["a", "b"]  # type: ignore[arg-type]
