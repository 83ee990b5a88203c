"""Read a snapshot: a file or a directory (read recursively) of Kubernetes objects as ``kubectl get -o yaml|json`` writes
them — single objects, multi-document YAML, or ``List``/``*List`` objects with ``items``.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from gpuctl.cluster.errors import SourceError
from gpuctl.cluster.kinds import DEVICES, Kind
from gpuctl.cluster.selectors import parse_selector
from gpuctl.core.ledger import LedgerError, NodeDevices, parse_devices

SUFFIXES = (".json", ".yaml", ".yml")


def snapshot_files(path: Path) -> list[Path]:
    """The object files of a snapshot path, in a stable order."""
    if not path.exists():
        raise SourceError(f"snapshot {path}: no such file or directory")
    if path.is_file():
        return [path]
    files: list[Path] = []
    for root, dirs, names in os.walk(path):
        dirs.sort()
        files.extend(Path(root) / n for n in sorted(names) if n.endswith(SUFFIXES) and not n.startswith("."))
    if not files:
        raise SourceError(f"snapshot {path}: no .json, .yaml or .yml files in it")
    return files


def _yaml_documents(path: Path, text: str) -> Iterator[Any]:
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        yield from yaml.load_all(text, Loader=loader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SourceError(f"{where}: not valid YAML: {problem}") from None


def read_objects(path: Path) -> Iterator[dict[str, Any]]:
    """Every object of one file (``List`` items one by one)."""
    if path.suffix == ".json":
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise SourceError(f"{path}: cannot read: {exc}") from None
        if text.lstrip().startswith(("{", "[")):
            try:
                yield from iter_json_objects(text, path)
            except json.JSONDecodeError as exc:
                raise SourceError(f"{path}:{exc.lineno}: not valid JSON: {exc.msg}") from None
            return
    for doc in read_documents(path):
        yield from flatten(doc, path)


def read_documents(path: Path) -> Iterator[Any]:
    """Every top-level document of one file."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SourceError(f"{path}: cannot read: {exc}") from None
    if path.suffix == ".json":
        stripped = text.lstrip()
        if stripped.startswith(("{", "[")):
            try:
                yield json.loads(text)
            except json.JSONDecodeError as exc:
                raise SourceError(f"{path}:{exc.lineno}: not valid JSON: {exc.msg}") from None
            return
    yield from _yaml_documents(path, text)


_SPACE = re.compile(r"[ \t\n\r]*")


def iter_json_objects(text: str, path: Path) -> Iterator[dict[str, Any]]:
    """The objects of one JSON document, a ``List``'s items decoded one at a time.

    A 5,000-node Devices list is then never held as one tree of dicts: each item can be turned into records and
    dropped before the next is decoded.
    """
    decoder = json.JSONDecoder()

    def skip(i: int) -> int:
        match = _SPACE.match(text, i)
        return match.end() if match else i

    i = skip(0)
    if not text.startswith("{", i):
        yield from flatten(json.loads(text), path)
        return
    top: dict[str, Any] = {}
    waiting: list[dict[str, Any]] = []
    i = skip(i + 1)
    while not text.startswith("}", i):
        key, i = decoder.raw_decode(text, i)
        i = skip(i)
        if not text.startswith(":", i):
            raise json.JSONDecodeError("Expecting ':' delimiter", text, i)
        i = skip(i + 1)
        if key == "items" and text.startswith("[", i):
            i = skip(i + 1)
            while not text.startswith("]", i):
                item, i = decoder.raw_decode(text, i)
                if isinstance(item, dict) and "kind" not in item and "kind" not in top:
                    waiting.append(item)  # a typed list naming its kind after its items
                else:
                    yield from flatten({**top, "items": [item]} if "kind" in top else item, path)
                i = skip(i)
                if text.startswith(",", i):
                    i = skip(i + 1)
                elif not text.startswith("]", i):
                    raise json.JSONDecodeError("Expecting ',' delimiter", text, i)
            i = skip(i + 1)
            top["_streamed"] = True
        else:
            top[key], i = decoder.raw_decode(text, i)
            i = skip(i)
        if text.startswith(",", i):
            i = skip(i + 1)
        elif not text.startswith("}", i):
            raise json.JSONDecodeError("Expecting ',' delimiter", text, i)
    if skip(i + 1) != len(text):
        raise json.JSONDecodeError("Extra data", text, skip(i + 1))
    if top.pop("_streamed", False):
        if waiting:
            yield from flatten({**top, "items": waiting}, path)
        return
    yield from flatten(top, path)


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


class SnapshotSource:
    """Objects read from snapshot files, grouped by kind."""

    is_snapshot = True
    """A snapshot may hold no Pods at all (a hand-written file); gate 3 then judges on the published ledgers."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._objects: list[dict[str, Any]] | None = None
        self._devices: list[NodeDevices] = []

    def _load(self) -> list[dict[str, Any]]:
        """Every object but the Devices, which are parsed into records as they are read and not kept as dicts."""
        if self._objects is None:
            objects: list[dict[str, Any]] = []
            devices: list[NodeDevices] = []
            for f in snapshot_files(self.path):
                for obj in read_objects(f):
                    if DEVICES.matches(obj.get("apiVersion", ""), obj.get("kind", "")):
                        try:
                            devices.append(parse_devices(obj))
                        except LedgerError as exc:
                            raise SourceError(f"{f}: {exc}") from None
                    else:
                        objects.append(obj)
            self._objects, self._devices = objects, devices
        return self._objects

    def device_records(self) -> list[NodeDevices]:
        """The Devices of the snapshot, as records."""
        self._load()
        return self._devices

    def describe(self) -> str:
        return f"snapshot {self.path}"

    def list(
        self,
        kind: Kind,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
    ) -> list[dict[str, Any]]:
        out = []
        requirements = parse_selector(label_selector) if label_selector else []
        if kind is DEVICES:
            # Devices are kept as records; read their objects again for the rare caller that wants them raw.
            objects: Iterable[dict[str, Any]] = (o for f in snapshot_files(self.path) for o in read_objects(f))
        else:
            objects = self._load()
        for obj in objects:
            if not kind.matches(obj.get("apiVersion", ""), obj.get("kind", "")):
                continue
            meta = obj.get("metadata") or {}
            if namespace is not None and kind.namespaced and meta.get("namespace", "default") != namespace:
                continue
            if requirements:
                labels = meta.get("labels") or {}
                if not all(r.matches(labels) for r in requirements):
                    continue
            out.append(obj)
        return out

    def get(self, kind: Kind, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        for obj in self.list(kind, namespace=namespace):
            if (obj.get("metadata") or {}).get("name") == name:
                return obj
        return None
