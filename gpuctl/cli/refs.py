"""Object names as kubectl writes and reads them: ``-o name`` prints ``<resource>.<group>/<name>`` (``node/<name>`` for
the core group), and every name argument of gpuctl takes that form back, so ``gpuctl views -o name | xargs gpuctl
hold`` and ``kubectl get $(gpuctl views -o name)`` both work."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuctl.cluster import kinds
from gpuctl.cluster.kinds import Kind

RESOURCE_NAMES: dict[str, tuple[str, ...]] = {
    "InstanceType": ("instancetype", "instancetypes", "instype"),
    "Instance": ("instance", "instances"),
    "Devices": ("devices",),
    "Workload": ("workload", "workloads", "wl"),
    "ClusterQueue": ("clusterqueue", "clusterqueues", "cq"),
    "LocalQueue": ("localqueue", "localqueues", "lq"),
    "Pod": ("pod", "pods", "po"),
    "Node": ("node", "nodes", "no"),
}
"""What kubectl accepts for each kind: its singular and plural resource names and short names."""


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """The Kubernetes object a listed item describes."""

    kind: Kind
    name: str
    namespace: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    created: str = ""
    """``metadata.creationTimestamp`` where the item knows it ("" where not)."""

    @property
    def qualified(self) -> str:
        """``-o name``: ``instancetype.worker.gpustack.ai/x``, ``node/x``."""
        resource = self.kind.kind.lower()
        return f"{resource}.{self.kind.group}/{self.name}" if self.kind.group else f"{resource}/{self.name}"

    def metadata(self) -> dict[str, Any]:
        """``metadata.{name,namespace,labels}`` as kubectl's objects carry them."""
        meta: dict[str, Any] = {"name": self.name}
        if self.kind.namespaced and self.namespace:
            meta["namespace"] = self.namespace
        meta["labels"] = dict(self.labels)
        if self.created:
            meta["creationTimestamp"] = self.created
        return meta


def of_object(kind: Kind, obj: Mapping[str, Any]) -> ObjectRef:
    """The reference of a raw object of ``kind``."""
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    labels = meta.get("labels")
    labels = {str(k): str(v) for k, v in labels.items()} if isinstance(labels, Mapping) else {}
    namespace = meta.get("namespace")
    return ObjectRef(kind, str(meta.get("name") or ""), str(namespace) if namespace else None, labels)


def _kind_named(resource: str) -> Kind | None:
    """The kind a ``<resource>[.<group>]`` prefix names, or None when it names none gpuctl knows."""
    name, _, group = resource.partition(".")
    for kind in (*kinds.ALL, kinds.NAMESPACE):
        if name in RESOURCE_NAMES.get(kind.kind, (kind.kind.lower(), kind.plural)) and group in ("", kind.group):
            return kind
    return None


def split_name(text: str, accepted: Sequence[Kind], *, what: str) -> tuple[str | None, str]:
    """(namespace or None, name) of a name argument: ``NAME``, kubectl's ``<resource>.<group>/NAME`` (or
    ``<resource>/NAME`` of a cluster-scoped kind) for one of the ``accepted`` kinds, or ``NAMESPACE/NAME`` for a
    namespaced one. ``what`` names the command in errors ("hold takes InstanceTypes"); a name that fits none of these
    is a usage error."""
    from gpuctl.cli.errors import UsageError

    if "/" not in text:
        return None, text
    prefix, _, rest = text.partition("/")
    if not prefix or not rest:
        raise UsageError(f"{text!r}: use NAME or {accepted[0].kind.lower()}.{accepted[0].group}/NAME")
    named = _kind_named(prefix)
    namespaced = any(k.namespaced for k in accepted)
    qualified = "." in prefix
    if named is not None and (qualified or not named.namespaced or not namespaced):
        if named not in accepted:
            kinds_taken = " or ".join(k.kind if k.kind.endswith("s") else f"{k.kind}s" for k in accepted)
            raise UsageError(f"{what} takes {kinds_taken}: {text} names a {named.kind}")
        if "/" in rest:
            raise UsageError(f"{text!r}: kubectl's form is {prefix}/NAME (give the namespace with -n)")
        return None, rest
    if qualified and named is None:
        raise UsageError(f"{text!r}: {prefix} is not a kind gpuctl reads here; use NAME")
    if not namespaced:
        kind = accepted[0].kind
        raise UsageError(f"{text!r}: {'an' if kind[0] in 'AEIOU' else 'a'} {kind} has no namespace; use NAME")
    if "/" in rest:
        raise UsageError(f"{text!r}: use NAME or NAMESPACE/NAME")
    return prefix, rest


def object_names(texts: Sequence[str], kind: Kind, *, what: str) -> list[str]:
    """The names of cluster-scoped objects given as NAME or kubectl's ``<resource>.<group>/NAME``."""
    return [split_name(t, (kind,), what=what)[1] for t in texts]


def instancetype(name: str, labels: Mapping[str, str] | None = None) -> ObjectRef:
    return ObjectRef(kinds.INSTANCETYPE, name, None, dict(labels or {}))


def devices(node: str, labels: Mapping[str, str] | None = None) -> ObjectRef:
    return ObjectRef(kinds.DEVICES, node, None, dict(labels or {}))


def workload(namespace: str, name: str, labels: Mapping[str, str] | None = None, created: str = "") -> ObjectRef:
    return ObjectRef(kinds.WORKLOAD, name, namespace, dict(labels or {}), created)


def selected_items(items: list[dict[str, Any]], opened: Any, kind: Kind, spec: Any) -> list[dict[str, Any]]:
    """The items (each with the ``namespace`` and ``name`` of an object of ``kind``) whose object the command's
    ``-l``/``--field-selector`` choose: the selectors go to the server live, and are evaluated on a snapshot."""
    from gpuctl.cluster import read

    chosen = read.selected(opened, kind, label_selector=spec.selector, field_selector=spec.field_selector)
    if chosen is None:
        return items
    return [i for i in items if (str(i.get("namespace") or ""), str(i.get("name") or "")) in chosen]
