"""An in-memory cluster for unit tests: a ``Source`` for the CLI's read path, the paged list an informer reads, and
the write calls the operator's controllers make (merge patches, the check's server-side apply of its own
``status.admissionChecks`` entry).

It is a test double, not an API server: it keeps objects by kind, namespace and name, applies merge patches as RFC 7386
says, merges an applied ``admissionChecks`` entry by name, and tells its watchers of every change synchronously (so a
test can feed an operator cache without threads). The integration suites use the real API server.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from gpuctl.cluster import kinds
from gpuctl.cluster.kinds import Kind
from gpuctl.cluster.versions import CRD

JSON = dict[str, Any]


@dataclass(frozen=True)
class Write:
    kind: str
    namespace: str | None
    name: str
    body: JSON
    subresource: str | None
    patch_type: str


def _kind_of(obj: JSON) -> Kind:
    for k in (
        *kinds.ALL,
        kinds.KVCACHE_BINDING,
        kinds.KVCACHE_POOL,
        kinds.KVCACHE_BACKEND,
        kinds.WORKLOAD_PRIORITY_CLASS,
        kinds.PRIORITY_CLASS,
        kinds.EVENT,
        kinds.DEPLOYMENT,
        kinds.CONFIGMAP,
        kinds.LEASE,
        kinds.MUTATING_WEBHOOKS,
        kinds.VALIDATING_WEBHOOKS,
        CRD,
    ):
        if k.matches(str(obj.get("apiVersion", "")), str(obj.get("kind", ""))):
            return k
    raise ValueError(f"unknown kind {obj.get('apiVersion')}/{obj.get('kind')}")


def _field(obj: JSON, path: str) -> Any:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return "" if value is None else value


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


@dataclass(frozen=True)
class Page:
    items: list[JSON]
    resource_version: str


Watcher = Callable[[Kind, str, JSON], None]
"""``(kind, event type, object)`` after every change."""


class MemoryCluster:
    """Objects by (kind, namespace, name); every write is logged in order."""

    is_snapshot = False

    def __init__(self, objects: Iterable[JSON] = ()) -> None:
        self.objects: dict[tuple[str, str | None, str], JSON] = {}
        self.writes: list[Write] = []
        self.watchers: list[Watcher] = []
        self._version = 0
        for o in objects:
            self.put(o)

    def feed(self, cache: Any) -> None:
        """Fill an operator cache from this cluster (each kind's list, synchronously) and keep it fed with every
        later change, as its watches would."""
        for informer in cache.informers.values():
            informer.relist()

        def deliver(kind: Kind, event: str, obj: JSON) -> None:
            for k, informer in cache.informers.items():
                if k.kind == kind.kind:
                    informer.apply_event({"type": event, "object": copy.deepcopy(obj)})

        self.watchers.append(deliver)

    # ------------------------------------------------------------------------------------------- storage

    def put(self, obj: JSON) -> None:
        kind = _kind_of(obj)
        meta = obj.setdefault("metadata", {})
        ns = str(meta.get("namespace") or "default") if kind.namespaced else None
        if kind.namespaced:
            meta["namespace"] = ns
        self._version += 1
        meta["resourceVersion"] = str(self._version)
        key = (kind.kind, ns, str(meta["name"]))
        event = "MODIFIED" if key in self.objects else "ADDED"
        self.objects[key] = obj
        for watcher in self.watchers:
            watcher(kind, event, obj)

    def delete(self, obj: JSON) -> None:
        """Remove an object; every watcher sees it DELETED."""
        kind = _kind_of(obj)
        meta = obj.get("metadata") or {}
        ns = str(meta.get("namespace") or "default") if kind.namespaced else None
        gone = self.objects.pop((kind.kind, ns, str(meta["name"])))
        for watcher in self.watchers:
            watcher(kind, "DELETED", gone)

    def copy(self) -> MemoryCluster:
        clone = MemoryCluster()
        clone.objects = copy.deepcopy(self.objects)
        clone._version = self._version
        return clone

    # ------------------------------------------------------------------------------------------- the Source protocol

    def describe(self) -> str:
        return "the in-memory cluster"

    def list(
        self,
        kind: Kind,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        not_older_than: str | None = None,
    ) -> list[dict[str, Any]]:
        wanted = dict(p.split("=", 1) for p in label_selector.split(",")) if label_selector else {}
        fields = dict(p.split("=", 1) for p in field_selector.split(",")) if field_selector else {}
        out = []
        for (k, ns, _), obj in sorted(self.objects.items(), key=lambda x: (x[0][0], x[0][1] or "", x[0][2])):
            if k != kind.kind or (namespace is not None and ns != namespace):
                continue
            labels = (obj.get("metadata") or {}).get("labels") or {}
            if not all(labels.get(a) == b for a, b in wanted.items()):
                continue
            if not all(_field(obj, path) == value for path, value in fields.items()):
                continue
            out.append(copy.deepcopy(obj))
        return out

    def list_pages(self, kind: Kind, **_: Any) -> Iterator[Page]:
        yield Page(self.list(kind), str(self._version))

    def watch(self, kind: Kind, resource_version: str, **_: Any) -> Iterator[JSON]:
        return iter(())

    def get(self, kind: Kind, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        obj = self.objects.get((kind.kind, (namespace or "default") if kind.namespaced else None, name))
        return copy.deepcopy(obj) if obj is not None else None

    # ------------------------------------------------------------------------------------------- the writes

    def create(self, kind: Kind, body: JSON, *, namespace: str | None = None, dry_run: bool = False) -> JSON:
        obj = copy.deepcopy(body)
        if namespace:
            obj.setdefault("metadata", {})["namespace"] = namespace
        self.put(obj)
        self.writes.append(Write(kind.kind, namespace, str(obj["metadata"]["name"]), body, None, "create"))
        return obj

    def patch(
        self,
        kind: Kind,
        name: str,
        body: JSON,
        *,
        namespace: str | None = None,
        subresource: str | None = None,
        patch_type: str = "application/merge-patch+json",
        field_manager: str | None = None,
        force: bool = False,
        dry_run: bool = False,
    ) -> JSON:
        key = (kind.kind, (namespace or "default") if kind.namespaced else None, name)
        stored = self.objects[key]
        self.writes.append(Write(kind.kind, key[1], name, copy.deepcopy(body), subresource, patch_type))
        if patch_type == "application/apply-patch+yaml":
            updated = copy.deepcopy(stored)
            status = updated.setdefault("status", {})
            checks = status.setdefault("admissionChecks", [])
            for entry in (body.get("status") or {}).get("admissionChecks") or []:
                for i, c in enumerate(checks):
                    if c.get("name") == entry["name"]:
                        checks[i] = dict(entry)
                        break
                else:
                    checks.append(dict(entry))
        else:
            patch = copy.deepcopy(body)
            patch.get("metadata", {}).pop("resourceVersion", None)
            updated = merge_patch(stored, patch)
        self.put(updated)
        return copy.deepcopy(updated)
