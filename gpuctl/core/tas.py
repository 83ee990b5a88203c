"""Kueue's Topology-Aware Scheduling, as the simulator needs it: which nodes a PodSet may use, how much room each
has, and the domains Kueue assigns at quota reservation.

Every queue the operator derives is TAS-only with ``kubernetes.io/hostname`` as its lowest level, so a placement is
a list of ``(node, pods)``. A node qualifies when it matches the flavor's node labels and the PodSet's node selector
and required node affinity (the fit-label pin is such an expression), is Ready and schedulable; its room is its
allocatable minus what the Pods bound to it and the Workloads Kueue placed there request.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from gpuctl.core import naming

REQUIRED = "required"
PREFERRED = "preferred"
UNCONSTRAINED = "unconstrained"

ANNOTATION_REQUIRED = "kueue.x-k8s.io/podset-required-topology"
ANNOTATION_PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
ANNOTATION_UNCONSTRAINED = "kueue.x-k8s.io/podset-unconstrained-topology"


@dataclass(frozen=True, slots=True)
class TopologyRequest:
    mode: str
    """``required``, ``preferred`` or ``unconstrained``."""
    level: str = naming.LABEL_HOSTNAME


def request_from_podset(raw: Mapping[str, Any] | None, annotations: Mapping[str, Any] | None) -> TopologyRequest | None:
    """A PodSet's topology request: the Workload's ``topologyRequest``, or the template's Kueue annotations."""
    if isinstance(raw, Mapping):
        if isinstance(raw.get("required"), str):
            return TopologyRequest(REQUIRED, raw["required"])
        if isinstance(raw.get("preferred"), str):
            return TopologyRequest(PREFERRED, raw["preferred"])
        if raw.get("unconstrained") is True:
            return TopologyRequest(UNCONSTRAINED)
    if isinstance(annotations, Mapping):
        if isinstance(annotations.get(ANNOTATION_REQUIRED), str):
            return TopologyRequest(REQUIRED, annotations[ANNOTATION_REQUIRED])
        if isinstance(annotations.get(ANNOTATION_PREFERRED), str):
            return TopologyRequest(PREFERRED, annotations[ANNOTATION_PREFERRED])
        if str(annotations.get(ANNOTATION_UNCONSTRAINED, "")).lower() == "true":
            return TopologyRequest(UNCONSTRAINED)
    return None


# ----------------------------------------------------------------------------------------------- node selection


def _number(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def _requirement(expression: Mapping[str, Any]) -> Callable[[Mapping[str, str]], bool]:
    """One node-selector requirement (``In``, ``NotIn``, ``Exists``, ``DoesNotExist``, ``Gt``, ``Lt``), read once."""
    key = str(expression.get("key", ""))
    op = expression.get("operator")
    raw = expression.get("values")
    values = [str(v) for v in raw] if isinstance(raw, list) else []
    if op == "In":
        return lambda labels: labels.get(key) in values
    if op == "NotIn":
        return lambda labels: labels.get(key) not in values
    if op == "Exists":
        return lambda labels: key in labels
    if op == "DoesNotExist":
        return lambda labels: key not in labels
    bound = _number(values[0]) if op in ("Gt", "Lt") and len(values) == 1 else None
    if bound is None:
        return lambda labels: False

    def compare(labels: Mapping[str, str]) -> bool:
        text = labels.get(key)
        have = _number(text) if text is not None else None
        if have is None:
            return False
        return have > bound if op == "Gt" else have < bound

    return compare


def node_selector(spec: Mapping[str, Any]) -> Callable[[Mapping[str, str]], bool]:
    """Whether a Pod spec's ``nodeSelector`` and required node affinity admit a node with given labels, as a
    function read once from the spec (a pool of thousands of nodes is tested against it)."""
    raw_selector = spec.get("nodeSelector")
    selector = [(str(k), str(v)) for k, v in raw_selector.items()] if isinstance(raw_selector, Mapping) else []
    affinity = spec.get("affinity")
    node_affinity = affinity.get("nodeAffinity") if isinstance(affinity, Mapping) else None
    required = (
        node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
        if isinstance(node_affinity, Mapping)
        else None
    )
    raw_terms = required.get("nodeSelectorTerms") if isinstance(required, Mapping) else None
    terms: list[list[Callable[[Mapping[str, str]], bool]]] = []
    for term in raw_terms if isinstance(raw_terms, list) else []:  # terms are ORed, expressions ANDed
        if not isinstance(term, Mapping):
            continue
        expressions = term.get("matchExpressions") or []
        if not expressions and not term.get("matchFields"):
            continue
        terms.append([_requirement(e if isinstance(e, Mapping) else {}) for e in expressions])

    def selects(labels: Mapping[str, str]) -> bool:
        if any(labels.get(k) != v for k, v in selector):
            return False
        return not terms or any(all(r(labels) for r in term) for term in terms)

    return selects


# ----------------------------------------------------------------------------------------------- room and placement


class Room:
    """What is left of each resource on a node: its allocatable minus what is used (read, never copied)."""

    __slots__ = ("allocatable", "used")

    def __init__(self, allocatable: Mapping[str, Amount], used: Mapping[str, Amount]) -> None:
        self.allocatable = allocatable
        self.used = used

    def get(self, key: str, default: Amount = 0) -> Amount:
        return self.allocatable.get(key, default) - self.used.get(key, 0)


@dataclass(frozen=True, slots=True)
class NodeRoom:
    """A node as TAS sees it: its labels and what is left of each resource."""

    name: str
    labels: Mapping[str, str]
    free: Room | Mapping[str, Amount]

    def pods_that_fit(self, requests: Mapping[str, Amount]) -> int:
        """How many Pods with these requests the node still holds."""
        fit: int | None = None
        free = self.free
        if isinstance(free, Room):
            allocatable, used = free.allocatable, free.used
            for key, want in requests.items():
                if want > 0:
                    n = int((allocatable.get(key, 0) - used.get(key, 0)) // want)
                    fit = n if fit is None else min(fit, n)
                    if fit == 0:
                        return 0
            return fit if fit is not None else 1 << 30
        for key, want in requests.items():
            if want <= 0:
                continue
            n = int(free.get(key, 0) // want)
            fit = n if fit is None else min(fit, n)
            if fit == 0:
                return 0
        return fit if fit is not None else 1 << 30


@dataclass(frozen=True, slots=True)
class TasPlacement:
    hosts: tuple[tuple[str, int], ...]
    """``(node, pods)`` per node, by node name."""


@dataclass(frozen=True, slots=True)
class TasFailure:
    message: str
    """Kueue's own wording: ``topology "T" doesn't allow to fit any of N pod(s). Total nodes: …; excluded: …``."""


Amount = int | Fraction
"""A resource amount: an int when whole (most are; int arithmetic is many times cheaper than Fraction's)."""


def plain(values: Mapping[str, Fraction | int]) -> dict[str, Amount]:
    """Amounts with whole values as ints."""
    return {k: (v.numerator if v.denominator == 1 else v) for k, v in values.items()}


def with_pod_slot(requests: Mapping[str, Fraction | int]) -> dict[str, Amount]:
    """A Pod's requests as TAS counts them: its raw requests plus one ``pods`` slot."""
    out = plain(requests)
    out["pods"] = out.get("pods", 0) + 1
    return out


def place(
    count: int,
    requests: Mapping[str, Amount],
    nodes: Sequence[NodeRoom],
    request: TopologyRequest | None,
    *,
    topology: str,
    total_nodes: int,
    excluded: Mapping[str, int],
) -> TasPlacement | TasFailure:
    """Kueue's hostname-level assignment of ``count`` Pods over the candidate nodes.

    ``requests`` are one Pod's raw requests with its ``pods`` slot. A PodSet with no topology request on a TAS-only
    queue is implied unconstrained, and Kueue places such PodSets least-free-capacity first: the node with the least
    room that still holds every Pod, else the smallest nodes first until the Pods are placed. A required or
    preferred hostname request is placed best-fit: the smallest node that holds them all, else the largest first.
    Ties go to the lowest node name. ``total_nodes`` and ``excluded`` (reason → nodes) complete Kueue's message.
    """
    counts = [(n.pods_that_fit(requests), n.name) for n in nodes]
    usable = sorted((c, name) for c, name in counts if c > 0)
    if len(usable) < len(nodes):
        excluded = dict(excluded)
        for n, (c, _) in zip(nodes, counts, strict=True):
            if c == 0:
                short = next((k for k, v in sorted(requests.items()) if n.free.get(k, 0) < v), "")
                reason = f'resource "{short}"'
                excluded[reason] = excluded.get(reason, 0) + 1
    fitting = [(c, name) for c, name in usable if c >= count]
    if fitting:
        return TasPlacement(((fitting[0][1], count),))
    unconstrained = request is None or request.mode == UNCONSTRAINED
    if request is not None and request.mode == REQUIRED and request.level == naming.LABEL_HOSTNAME:
        return TasFailure(_no_fit(topology, count, max((c for c, _ in usable), default=0), total_nodes, excluded))
    available = sum(c for c, _ in usable)
    if available < count:
        return TasFailure(_no_fit(topology, count, available, total_nodes, excluded))
    order = usable if unconstrained else sorted(usable, key=lambda x: (-x[0], x[1]))
    hosts: list[tuple[str, int]] = []
    left = count
    for c, name in order:
        take = min(c, left)
        hosts.append((name, take))
        left -= take
        if left == 0:
            break
    return TasPlacement(tuple(sorted(hosts)))


def _no_fit(topology: str, count: int, fit: int, total_nodes: int, excluded: Mapping[str, int]) -> str:
    text = (
        f'topology "{topology}" doesn\'t allow to fit any of {count} pod(s)'
        if fit == 0
        else f'topology "{topology}" allows to fit only {fit} out of {count} pod(s)'
    )
    shown = {k: v for k, v in excluded.items() if v}
    if shown:
        text += f". Total nodes: {total_nodes}; excluded: " + ", ".join(f"{k}: {v}" for k, v in sorted(shown.items()))
    return text


def parse_topology(obj: Mapping[str, Any]) -> tuple[str, tuple[str, ...]]:
    """A Kueue ``Topology``: its name and its levels' node labels, top to bottom."""
    meta = obj.get("metadata")
    spec = obj.get("spec")
    name = str(meta.get("name", "")) if isinstance(meta, Mapping) else ""
    levels = spec.get("levels") if isinstance(spec, Mapping) else None
    return name, tuple(
        str(level.get("nodeLabel", ""))
        for level in (levels if isinstance(levels, list) else [])
        if isinstance(level, Mapping)
    )
