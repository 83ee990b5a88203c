"""Read a snapshot: a file or a directory (read recursively) of Kubernetes objects as ``kubectl get -o yaml|json`` writes
them — single objects, multi-document YAML, or ``List``/``*List`` objects with ``items``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gpuctl.cluster.errors import SourceError
from gpuctl.cluster.kinds import Kind
from gpuctl.cluster.selectors import parse_selector

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

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._objects: list[dict[str, Any]] | None = None

    def _load(self) -> list[dict[str, Any]]:
        if self._objects is None:
            objects: list[dict[str, Any]] = []
            for f in snapshot_files(self.path):
                for doc in read_documents(f):
                    objects.extend(flatten(doc, f))
            self._objects = objects
        return self._objects

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
        for obj in self._load():
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
