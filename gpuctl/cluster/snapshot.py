"""Read a snapshot: a file or a directory (read recursively) of Kubernetes objects as ``kubectl get -o yaml|json`` writes
them — single objects, multi-document YAML, or ``List``/``*List`` objects with ``items``.

A snapshot is untrusted input (a file attached to a ticket), so reading it is bounded: regular files only (a FIFO or
a device is refused, never opened), at most :data:`DEFAULT_MAX_BYTES` per file (``GPUCTL_SNAPSHOT_MAX_BYTES``),
nesting at most :data:`MAX_DEPTH` deep, YAML aliases expanding to at most :data:`MAX_ALIAS_EXPANSION` nodes, and one
object per kind, namespace and name. Each refusal is one line naming the file.
"""

from __future__ import annotations

import codecs
import json
import os
import re
import stat
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple, TypeVar

from gpuctl.cluster.errors import SourceError
from gpuctl.cluster.kinds import DEVICES, Kind
from gpuctl.cluster.selectors import selection
from gpuctl.core.errors import not_text
from gpuctl.core.ledger import Capability, LedgerError, NodeDevices, parse_devices

T = TypeVar("T")

SUFFIXES = (".json", ".yaml", ".yml")
DEFAULT_MAX_BYTES = 512 * 1024 * 1024
"""The largest snapshot file read (a 5,000-node cluster's Pods are about 60 MB); ``GPUCTL_SNAPSHOT_MAX_BYTES``."""
MAX_DEPTH = 64
"""Kubernetes objects nest about 15 levels deep; anything far deeper is not an object."""
MAX_ALIAS_EXPANSION = 1_000_000
"""YAML nodes a file's aliases may add by expansion (a file of aliases can otherwise grow without bound)."""


def max_bytes() -> int:
    raw = os.environ.get("GPUCTL_SNAPSHOT_MAX_BYTES", "")
    try:
        return int(raw) if raw else DEFAULT_MAX_BYTES
    except ValueError:
        raise SourceError(f"GPUCTL_SNAPSHOT_MAX_BYTES={raw!r}: give a number of bytes") from None


def _check_regular(path: Path, size_limit: int) -> None:
    try:
        st = path.stat()
    except OSError as exc:
        raise SourceError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        raise SourceError(f"{path}: not a regular file (a FIFO, socket or device); snapshots are files")
    if st.st_size > size_limit:
        raise SourceError(
            f"{path}: {st.st_size} bytes, over the {size_limit}-byte limit; raise GPUCTL_SNAPSHOT_MAX_BYTES to read it"
        )


def snapshot_files(path: Path) -> list[Path]:
    """The object files of a snapshot path, in a stable order (regular files within the size limit only)."""
    if not path.exists():
        raise SourceError(f"snapshot {path}: no such file or directory")
    limit = max_bytes()
    if not path.is_dir():
        _check_regular(path, limit)
        return [path]
    files: list[Path] = []
    for root, dirs, names in os.walk(path):
        dirs.sort()
        files.extend(Path(root) / n for n in sorted(names) if n.endswith(SUFFIXES) and not n.startswith("."))
    if not files:
        raise SourceError(f"snapshot {path}: no .json, .yaml or .yml files in it")
    for f in files:
        _check_regular(f, limit)
    return files


def _check_yaml_shape(path: Path | str, text: str) -> None:
    """Refuse YAML nested beyond :data:`MAX_DEPTH`, or whose aliases expand beyond :data:`MAX_ALIAS_EXPANSION` nodes,
    from the parser's events alone (nothing is built)."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    sizes: dict[str, int] = {}
    open_nodes: list[tuple[str | None, int]] = []  # (anchor, nodes so far) of each open collection
    expanded = 0
    for event in yaml.parse(text, Loader=loader):
        if isinstance(event, yaml.CollectionStartEvent):
            open_nodes.append((event.anchor, 1))
            if len(open_nodes) > MAX_DEPTH:
                raise SourceError(f"{path}: nested more than {MAX_DEPTH} levels deep; not a Kubernetes object")
            continue
        if isinstance(event, yaml.CollectionEndEvent):
            anchor, count = open_nodes.pop()
            if anchor:
                sizes[anchor] = count
            if open_nodes:
                parent_anchor, parent_count = open_nodes[-1]
                open_nodes[-1] = (parent_anchor, parent_count + count)
            continue
        if isinstance(event, yaml.AliasEvent):
            count = sizes.get(event.anchor or "", 1)
            expanded += count
            if expanded > MAX_ALIAS_EXPANSION:
                raise SourceError(
                    f"{path}: its YAML aliases expand to more than {MAX_ALIAS_EXPANSION} nodes; write the objects out"
                )
        elif isinstance(event, yaml.ScalarEvent):
            count = 1
            if event.anchor:
                sizes[event.anchor] = 1
        else:
            continue
        if open_nodes:
            anchor, total = open_nodes[-1]
            open_nodes[-1] = (anchor, total + count)


def _too_many_digits(path: Path | str) -> SourceError:
    return SourceError(
        f"{path}: holds an integer of more than {sys.get_int_max_str_digits() or 4300} digits; no Kubernetes field "
        "holds one"
    )


def _yaml_documents(path: Path | str, text: str) -> Iterator[Any]:
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        _check_yaml_shape(path, text)
        yield from yaml.load_all(text, Loader=loader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SourceError(f"{where}: not valid YAML: {problem}") from None
    except RecursionError:
        raise SourceError(f"{path}: nested too deep to be a Kubernetes object") from None
    except ValueError:  # a scalar the loader cannot build: an integer past Python's digit limit
        raise _too_many_digits(path) from None


def load_yaml_text(where: str, text: str) -> Any:
    """The first YAML document of an untrusted string (a ConfigMap's key), bounded in depth and alias expansion as
    snapshot files are; a SourceError naming ``where`` otherwise."""
    for document in _yaml_documents(where, text):
        return document
    return None


def read_objects(path: Path) -> Iterator[dict[str, Any]]:
    """Every object of one file (``List`` items one by one)."""
    for obj, _ in read_entries(path):
        yield obj


def read_entries(path: Path) -> Iterator[tuple[dict[str, Any], str | None]]:
    """Every object of one file, with its own JSON text where the file holds it as it is (a JSON ``List``'s item
    that names its kind), else None.

    A JSON file is decoded through a window that slides over it (:class:`_JsonWindow`): neither its whole text nor a
    tree of all its objects is ever held, so a large ``List`` costs about one item's memory beyond what is kept."""
    if path.suffix == ".json":
        try:
            with path.open("rb") as f:
                window = _JsonWindow(f, path)
                if window.first_char() in ("{", "["):
                    try:
                        yield from _json_entries(window, path)
                    except json.JSONDecodeError as exc:
                        raise SourceError(f"{path}:{exc.lineno}: not valid JSON: {exc.msg}") from None
                    except RecursionError:
                        raise SourceError(f"{path}: nested too deep to be a Kubernetes object") from None
                    except ValueError:  # an integer past Python's digit limit (json raises it bare)
                        raise _too_many_digits(path) from None
                    return
                text = window.rest()
        except OSError as exc:
            raise SourceError(f"{path}: cannot read: {exc}") from None
    else:
        text = _read_text(path)
    for doc in _yaml_documents(path, text):
        for obj in flatten(doc, path):
            yield obj, None


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise SourceError(f"{path}: cannot read: {not_text(exc)}") from None
    except OSError as exc:
        raise SourceError(f"{path}: cannot read: {exc}") from None


_SPACE = re.compile(r"[ \t\n\r]*")
CHUNK = 1 << 18
"""Bytes a JSON snapshot file is read by: the window over it holds about this much beyond the item being decoded."""
_NUMBER_TAIL = re.compile(r"[0-9.eE+-]*")


class _JsonWindow:
    """A JSON file's text, read a chunk at a time: values are decoded where they start (``pos``), the window is
    extended when one runs past its end, and what lies before ``pos`` is dropped as more is read. Errors carry the
    line numbers of the whole file."""

    def __init__(self, f: BinaryIO, path: Path) -> None:
        self._f = f
        self._path = path
        self._utf8 = codecs.getincrementaldecoder("utf-8")()
        self._json = json.JSONDecoder()
        self._read = 0
        self._dropped_lines = 0
        self.text = ""
        self.pos = 0
        self.eof = False

    def more(self) -> bool:
        """Read on (at least as much again as is pending, so a value spanning many chunks is decoded a bounded number
        of times); False at the end of the file."""
        if self.eof:
            return False
        raw = self._f.read(max(CHUNK, len(self.text) - self.pos))
        try:
            added = self._utf8.decode(raw, final=not raw)
        except UnicodeDecodeError as exc:
            raise SourceError(f"{self._path}: cannot read: {not_text(exc, self._read)}") from None
        self._read += len(raw)
        self.eof = not raw
        self._dropped_lines += self.text.count("\n", 0, self.pos)
        self.text = self.text[self.pos :] + added
        self.pos = 0
        return True

    def first_char(self) -> str:
        """The first character that is not white space (as ``str.strip`` reads it), or "" for an empty file."""
        while True:
            rest = self.text[self.pos :].lstrip()
            if rest:
                return rest[0]
            if not self.more():
                return ""

    def rest(self) -> str:
        while self.more():
            pass
        return self.text[self.pos :]

    def skip(self) -> None:
        """Past JSON white space."""
        while True:
            match = _SPACE.match(self.text, self.pos)
            self.pos = match.end() if match else self.pos
            if self.pos < len(self.text) or not self.more():
                return

    def at(self, char: str) -> bool:
        self.skip()
        return self.text.startswith(char, self.pos)

    def value(self) -> tuple[Any, int]:
        """The value at ``pos`` and where it starts (``pos`` moves past it)."""
        while True:
            try:
                value, end = self._json.raw_decode(self.text, self.pos)
            except json.JSONDecodeError as exc:
                if self.more():
                    continue
                raise self.error(exc.msg, exc.pos) from None
            # A number or literal the window ends in (or in its exponent) may go on in the next chunk.
            tail = None if isinstance(value, dict | list | str) else _NUMBER_TAIL.match(self.text, end)
            if tail is not None and tail.end() == len(self.text) and self.more():
                continue
            start, self.pos = self.pos, end
            return value, start

    def error(self, msg: str, pos: int | None = None) -> json.JSONDecodeError:
        err = json.JSONDecodeError(msg, self.text, self.pos if pos is None else pos)
        err.lineno += self._dropped_lines
        return err


def _json_entries(window: _JsonWindow, path: Path) -> Iterator[tuple[dict[str, Any], str | None]]:
    """The objects of one JSON document, a ``List``'s items decoded one at a time.

    A 5,000-node Devices list is then never held as one tree of dicts: each item can be turned into records and
    dropped before the next is decoded."""
    window.skip()
    if not window.at("{"):
        for obj in flatten(json.loads(window.rest()), path):
            yield obj, None
        return
    top: dict[str, Any] = {}
    waiting: list[dict[str, Any]] = []
    streamed = False
    window.pos += 1
    while not window.at("}"):
        key, _ = window.value()
        if not window.at(":"):
            raise window.error("Expecting ':' delimiter")
        window.pos += 1
        window.skip()
        if key == "items" and window.at("["):
            window.pos += 1
            top_kind = top.get("kind")
            listed = "kind" not in top or (type(top_kind) is str and top_kind.endswith("List"))
            while not window.at("]"):
                item, start = window.value()
                kind = item.get("kind") if type(item) is dict else None
                if listed and type(kind) is str and not kind.endswith("List") and type(item.get("apiVersion")) is str:
                    yield item, window.text[start : window.pos]  # an object, as flatten gives it
                elif isinstance(item, dict) and "kind" not in item and "kind" not in top:
                    waiting.append(item)  # a typed list naming its kind after its items
                else:
                    for obj in flatten({**top, "items": [item]} if "kind" in top else item, path):
                        yield obj, window.text[start : window.pos] if obj is item else None
                if window.at(","):
                    window.pos += 1
                elif not window.at("]"):
                    raise window.error("Expecting ',' delimiter")
            window.pos += 1
            streamed = True
        else:
            top[key], _ = window.value()
        if window.at(","):
            window.pos += 1
        elif not window.at("}"):
            raise window.error("Expecting ',' delimiter")
    window.pos += 1
    window.skip()
    if window.pos != len(window.text):
        raise window.error("Extra data")
    documents = ({**top, "items": waiting},) if waiting else () if streamed else (top,)
    for doc in documents:
        for obj in flatten(doc, path):
            yield obj, None


def flatten(doc: Any, path: Path) -> Iterator[dict[str, Any]]:
    """Objects of a document: a ``List``/``*List`` gives its items; ``null`` documents give nothing."""
    if doc is None:
        return
    if isinstance(doc, list):
        for item in doc:
            yield from flatten(item, path)
        return
    if not isinstance(doc, dict):
        raise SourceError(f"{path}: expected Kubernetes objects, found a {type(doc).__name__}")
    kind = doc.get("kind")
    if isinstance(kind, str) and kind.endswith("List") and isinstance(doc.get("items"), list):
        list_version = doc.get("apiVersion")
        item_kind = kind[: -len("List")] if kind != "List" else None
        for item in doc["items"]:
            if isinstance(item, dict):
                # `kubectl get x -o json` of a typed list omits each item's kind and apiVersion.
                if item_kind and "kind" not in item:
                    item = {**item, "kind": item_kind}
                if list_version and "apiVersion" not in item and kind != "List":
                    item = {**item, "apiVersion": list_version}
            yield from flatten(item, path)
        return
    if not isinstance(kind, str) or not isinstance(doc.get("apiVersion"), str):
        raise SourceError(f"{path}: an object without kind or apiVersion; snapshot files hold Kubernetes objects")
    yield doc


def check_metadata(obj: dict[str, Any], path: Path) -> None:
    """Refuse, naming the object and the field, metadata no API server writes: not an object; a name, namespace or
    resourceVersion that is not a string; labels or annotations that are not a map of strings. What every command
    reads of every object is then of its type."""
    meta = obj.get("metadata")
    if meta is None:
        return
    what = f"{path}: {obj.get('kind')}"
    if not isinstance(meta, dict):
        raise SourceError(f"{what}: metadata is a {_type(meta)}, not an object")
    name = meta.get("name")
    if name is not None and not isinstance(name, str):
        raise SourceError(f"{what}: metadata.name is a {_type(name)}, not a string")
    what = f"{what} {name or '<unnamed>'}"
    for field in ("namespace", "resourceVersion", "uid", "creationTimestamp", "deletionTimestamp"):
        value = meta.get(field)
        if value is not None and not isinstance(value, str):
            raise SourceError(f"{what}: metadata.{field} is a {_type(value)}, not a string")
    for field in ("labels", "annotations"):
        value = meta.get(field)
        if value is None:
            continue
        if not isinstance(value, dict):
            raise SourceError(f"{what}: metadata.{field} is a {_type(value)}, not a map of strings")
        for key, item in value.items():
            if not isinstance(item, str):
                raise SourceError(f"{what}: metadata.{field}[{key}] is a {_type(item)}, not a string")


def _type(value: Any) -> str:
    return {dict: "object", list: "list", str: "string", bool: "boolean", type(None): "null"}.get(type(value), "number")


def _identity(obj: dict[str, Any]) -> tuple[str, str, str, str]:
    """(API group, kind, namespace, name): one object whatever the version it is written in (its metadata
    checked)."""
    meta = obj.get("metadata") or {}
    group = str(obj.get("apiVersion", "")).rpartition("/")[0]
    return group, str(obj.get("kind", "")), str(meta.get("namespace") or ""), str(meta.get("name", ""))


class _Entry(NamedTuple):
    """One object of a snapshot as kept between commands' reads: what a list filters by, and the object itself as
    its JSON text (decoded again for each read: a fraction of the memory of its dicts) or, where the file does not
    hold it as one JSON text, as read."""

    api_version: str
    namespace: Any
    """``metadata.namespace`` as read, "default" when absent (what a read of one namespace compares)."""
    name: Any
    """``metadata.name`` as read."""
    stored: str | dict[str, Any] | None
    """None for an object parsed into a record as it was read (:meth:`SnapshotSource.read_as_records`)."""

    def object(self) -> dict[str, Any]:
        stored = self.stored
        if stored is None:
            raise ValueError("read from the files again")
        return json.loads(stored) if isinstance(stored, str) else stored


class SnapshotSource:
    """Objects read from snapshot files, grouped by kind."""

    is_snapshot = True
    """A snapshot may hold no Pods at all (a hand-written file); gate 3 then judges on the published ledgers."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._kinds: dict[tuple[str, str], list[_Entry]] | None = None
        self._devices: list[NodeDevices] = []
        self._parsers: dict[Kind, Callable[[dict[str, Any]], Any]] = {}
        self._records: dict[Kind, list[tuple[_Entry, Any]]] = {}
        self._devices_on_demand = False
        self._on_deployment: Callable[[dict[str, Any]], bool] | None = None

    def on_deployment(self, hook: Callable[[dict[str, Any]], bool]) -> None:
        """Call ``hook`` with each Deployment as the snapshot is read, before the objects after it are parsed; where
        it returns True (it changed how objects read: GPUStack's worker's manufacturer names) after records were
        already parsed, the snapshot is read again so every record reads the same way."""
        self._on_deployment = hook

    def read_as_records(self, parsers: Mapping[Kind, Callable[[dict[str, Any]], Any]]) -> None:
        """Say, before the snapshot is read, which kinds the command reads as records: their objects are then parsed
        as they are read (decoded once) and :meth:`records` answers from them."""
        if self._kinds is None:
            self._parsers.update(parsers)

    def read_on_demand(self, *wanted: Kind) -> None:
        """Say, before the snapshot is read, that the command parses only the objects of these kinds it reads: their
        text is kept (the Devices too, otherwise parsed as they are read) and :meth:`loaders` hands them out."""
        if self._kinds is None:
            self._devices_on_demand = self._devices_on_demand or DEVICES in wanted
            for kind in wanted:
                self._parsers.pop(kind, None)

    def _load(self) -> dict[tuple[str, str], list[_Entry]]:
        """Every object but the Devices, by (API group, kind); Devices are parsed into records as they are read and
        not kept as objects, unless the command reads them on demand (:meth:`read_on_demand`: kept as the rest).

        An object read twice (the same kind, namespace and name, in any API version) is refused: which copy a command
        would read is not for it to guess."""
        if self._kinds is None and self._read_all():
            self._records = {}
            self._read_all()  # a Deployment read late changed how the records read: once more, the same from the start
        assert self._kinds is not None
        return self._kinds

    def _read_all(self) -> bool:
        """Read every file; True when a Deployment changed how objects read after some were parsed."""
        parsed_before_change = False
        parsed = False
        by_kind: dict[tuple[str, str], list[_Entry]] = {}
        devices: list[NodeDevices] = []
        capabilities: dict[Any, Capability] = {}
        seen: dict[tuple[str, str, str, str], Path] = {}
        plans: dict[tuple[Any, str], tuple[list[_Entry], tuple[Callable[[dict[str, Any]], Any], list[Any]] | None]]
        plans = {}
        for f in snapshot_files(self.path):
            for obj, text in read_entries(f):
                check_metadata(obj, f)
                identity = _identity(obj)
                first = seen.get(identity)
                if first is not None:
                    _, kind, ns, name = identity
                    where = f"{ns}/{name}" if ns else name
                    also = f" (also in {first})" if first != f else ""
                    raise SourceError(f"{f}: {kind} {where} appears twice{also}; a snapshot holds each object once")
                seen[identity] = f
                api_version = obj.get("apiVersion", "")
                if self._on_deployment is not None and obj.get("kind") == "Deployment" and self._on_deployment(obj):
                    parsed_before_change = parsed_before_change or parsed
                if not self._devices_on_demand and DEVICES.matches(api_version, obj.get("kind", "")):
                    try:
                        devices.append(parse_devices(obj, capabilities))
                    except LedgerError as exc:
                        raise SourceError(f"{f}: {exc}") from None
                    continue
                meta = obj.get("metadata") or {}
                namespace = meta.get("namespace", "default")
                # What becomes of an object follows from its API version and kind: found once for each pair.
                typed = (api_version, identity[1])
                plan = plans.get(typed)
                if plan is None:
                    planned = next((k for k in self._parsers if k.matches(*typed)), None)
                    plan = plans[typed] = (
                        by_kind.setdefault(identity[:2], []),
                        None if planned is None else (self._parsers[planned], self._records.setdefault(planned, [])),
                    )
                entries, as_record = plan
                entry = _Entry(
                    sys.intern(api_version),  # a few API versions and namespaces, repeated by every object
                    sys.intern(namespace) if type(namespace) is str else namespace,
                    meta.get("name"),
                    None if as_record is not None else obj if text is None else text,
                )
                entries.append(entry)
                if as_record is not None:
                    parse, records = as_record
                    records.append((entry, parse(obj)))
                    parsed = True
        self._kinds, self._devices = by_kind, devices
        return parsed_before_change

    def device_records(self) -> list[NodeDevices]:
        """The Devices of the snapshot, as records."""
        self._load()
        if self._devices_on_demand and not self._devices:
            self._devices = [self._device_record(e.object()) for e in self._entries(DEVICES, None)]
        return self._devices

    def _device_record(self, obj: dict[str, Any]) -> NodeDevices:
        try:
            return parse_devices(obj)
        except LedgerError as exc:
            raise SourceError(f"{self.describe()}: {exc}") from None

    def loaders(self, kind: Kind) -> dict[str, Callable[[], dict[str, Any]]] | None:
        """Each object of a cluster-scoped kind, by name, as the function that decodes it from its kept text; None
        where the kind's objects are not kept so (parsed as they were read: :meth:`read_on_demand`)."""
        self._load()
        if kind is DEVICES and not self._devices_on_demand:
            return None
        entries = self._entries(kind, None)
        if any(e.stored is None for e in entries):
            return None
        return {str(e.name or ""): e.object for e in entries}

    def describe(self) -> str:
        return f"snapshot {self.path}"

    def _entries(self, kind: Kind, namespace: str | None) -> list[_Entry]:
        entries = self._load().get((kind.group, kind.kind), [])
        return [
            e
            for e in entries
            if kind.matches(e.api_version, kind.kind)
            and (namespace is None or not kind.namespaced or e.namespace == namespace)
        ]

    def records(self, kind: Kind, parse: Callable[[dict[str, Any]], T], namespace: str | None = None) -> list[T]:
        """A kind's objects (of one namespace, as :meth:`list` selects them) as records: those parsed while reading
        when the kind was asked for beforehand (:meth:`read_as_records`), else parsed now."""
        self._load()
        if self._parsers.get(kind) is not parse:
            return [parse(o) for o in self.list(kind, namespace=namespace)]
        return [
            r
            for e, r in self._records.get(kind, [])
            if namespace is None or not kind.namespaced or e.namespace == namespace
        ]

    def names(self, kind: Kind) -> list[str]:
        """The names of a kind's objects (nothing decoded)."""
        if kind is DEVICES and not self._devices_on_demand:
            return [d.node for d in self.device_records()]
        return [str(e.name or "") for e in self._entries(kind, None)]

    def _read_again(self, kind: Kind, namespace: str | None) -> list[dict[str, Any]]:
        """A kind's objects read from the files again: Devices, and the kinds parsed into records as they were read
        (:meth:`read_as_records`), are not kept as objects; the rare caller that wants them raw reads them so, once
        the whole snapshot was checked."""
        self._load()
        read = (o for f in snapshot_files(self.path) for o in read_objects(f))
        return [
            o
            for o in read
            if kind.matches(o.get("apiVersion", ""), o.get("kind", ""))
            and (
                namespace is None
                or not kind.namespaced
                or (o.get("metadata") or {}).get("namespace", "default") == namespace
            )
        ]

    def list(
        self,
        kind: Kind,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[dict[str, Any]]:
        """The objects of a kind, selected as the API server would select them."""
        chosen = selection(kind, label_selector, field_selector) if label_selector or field_selector else None
        entries = self._entries(kind, namespace)
        if kind is DEVICES or any(e.stored is None for e in entries):
            objects = self._read_again(kind, namespace)
        else:
            objects = [e.object() for e in entries]
        return objects if chosen is None else [o for o in objects if chosen.matches(o)]

    def get(self, kind: Kind, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        for e in self._entries(kind, namespace):
            if e.name == name and e.stored is not None:
                return e.object()
        found = [o for o in self.list(kind, namespace=namespace) if (o.get("metadata") or {}).get("name") == name]
        return found[0] if found else None
