"""Judging in the shadow: what GPUStack's worker publishes — each pool's views, each check verdict, each node's fit
labels, each running Instance's stop — against what the core computes from the same objects, and where they differ,
both values and the reason. Agreement says nothing.

The companion operator reports these as a metric, one Event per object and change, and ``doctor``, ``diff`` and
``views`` show them; every figure is the core's own (:mod:`gpuctl.core.views`, :mod:`gpuctl.core.fit`,
:mod:`gpuctl.core.pins`, :mod:`gpuctl.core.lifecycle`), never a second rendering of a rule.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from gpuctl.core import naming
from gpuctl.core.compat import StrEnum
from gpuctl.core.instancetypes import InstanceType
from gpuctl.core.ledger import Mode, NodeDevices
from gpuctl.core.lifecycle import StopDecision
from gpuctl.core.pins import FIT_PREFIXES, label_shares, label_slice_units
from gpuctl.core.views import DRAINING_REASON, PoolViews, accelerator_views, views_to_status
from gpuctl.core.workloads import ClusterQueue


class Kind(StrEnum):
    """What a disagreement is about (the ``kind`` label of the companion's metric)."""

    VIEW = "view"
    VERDICT = "verdict"
    FIT_LABEL = "fit-label"
    STOP = "stop"


@dataclass(frozen=True, slots=True)
class Disagreement:
    """One figure the cluster publishes that the core computes otherwise."""

    kind: Kind
    object_kind: str
    """``InstanceType``, ``Workload``, ``Node`` or ``Instance``."""
    name: str
    namespace: str
    field: str
    """What differs: a view's field (``accelerator.remaining``), a check's name, a label's key, ``spec.stop``."""
    published: str
    computed: str
    reason: str
    """Why the core's figure is what it is, read off the objects it was computed from."""

    @property
    def object(self) -> str:
        return f"{self.object_kind}/{self.namespace + '/' if self.namespace else ''}{self.name}"

    def sentence(self) -> str:
        return f"{self.field}: published {self.published}, gpuctl computes {self.computed} ({self.reason})"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "object": self.object,
            "field": self.field,
            "published": self.published,
            "computed": self.computed,
            "reason": self.reason,
        }


# ----------------------------------------------------------------------------------------------- views

VIEW_FIELDS: Final = ("accelerator", "acceleratorShared", "acceleratorSliced", "acceleratorPartitioned", "cpu")
VIEW_UNITS: Final = {
    "accelerator": "free whole cards",
    "acceleratorShared": "free shares",
    "acceleratorSliced": "free percent units of slice memory",
    "acceleratorPartitioned": "partition instances",
    "cpu": "cores",
}
_NUMBERS: Final = ("onceMaxRequest", "remaining", "capacity")
_SHORT: Final = {
    "accelerator": "EX",
    "acceleratorShared": "SH",
    "acceleratorSliced": "SL",
    "acceleratorPartitioned": "PT",
    "cpu": "CPU",
}


def view_disagreements(
    instancetype: InstanceType,
    computed: PoolViews,
    pool: Sequence[NodeDevices] = (),
    queue: ClusterQueue | None = None,
) -> list[Disagreement]:
    """Where an InstanceType's published views differ from those the core computes from its pool's ledgers (and its
    queue). A status that publishes no view at all is not compared (nothing is contradicted)."""
    published = instancetype.published_views
    if not published:
        return []
    status = views_to_status(computed)
    out: list[Disagreement] = []
    for key in VIEW_FIELDS:
        ours = status[key]
        assert isinstance(ours, dict)
        theirs = published.get(key)
        for number in _NUMBERS:
            value = ours[number]
            pub = getattr(theirs, _ATTRIBUTE[number]) if theirs is not None else None
            if pub != value:
                out.append(
                    _view(
                        instancetype,
                        f"{key}.{number}",
                        "not published" if pub is None else str(pub),
                        str(value),
                        _view_reason(instancetype, key, number, pool, queue),
                    )
                )
    pt = status["acceleratorPartitioned"]
    assert isinstance(pt, dict)
    for key in ("remainingProfiles", "allocatedProfiles"):
        ours_profiles = {p["name"]: p["count"] for p in pt[key]}
        theirs_profiles = dict(instancetype.published_profiles.get(key, {}))
        if ours_profiles != theirs_profiles:
            out.append(
                _view(
                    instancetype,
                    f"acceleratorPartitioned.{key}",
                    profiles_text(theirs_profiles),
                    profiles_text(ours_profiles),
                    _profiles_reason(instancetype, pool, queue),
                )
            )
    return out


_ATTRIBUTE: Final = {"onceMaxRequest": "once_max_request", "remaining": "remaining", "capacity": "capacity"}
NODES_NAMED: Final = 5
"""Nodes a view's reason names by figure; a larger pool is summed beyond its first (a reason is one line)."""


def profiles_text(profiles: Mapping[str, int]) -> str:
    return ",".join(f"{n}:{c}" for n, c in profiles.items()) or "none"


def _view(it: InstanceType, field: str, published: str, computed: str, reason: str) -> Disagreement:
    return Disagreement(Kind.VIEW, "InstanceType", it.name, "", field, published, computed, reason)


def _view_reason(
    it: InstanceType, key: str, number: str, pool: Sequence[NodeDevices], queue: ClusterQueue | None
) -> str:
    if queue is not None and queue.stop_policy == "HoldAndDrain":
        return DRAINING_REASON
    if key == "cpu":
        if it.acceleratable:
            return "an accelerated pool publishes no CPU view"
        if queue is None:
            return f"no ClusterQueue {it.name}: a CPU pool's view is its queue's"
        return (
            f"from ClusterQueue {queue.name}: nominal {queue.nominal.get('cpu', 0)} cores, "
            f"{queue.reservation_milli('cpu')}m reserved (at 800m a core with general overcommit on)"
        )
    if not it.acceleratable:
        return "a CPU pool publishes no accelerator view"
    if not pool:
        return f"no managed Devices ledger carries the pool's labels for {it.accelerator_group}"
    unit = VIEW_UNITS[key]
    index = VIEW_FIELDS.index(key)
    figures = [(getattr(accelerator_views([d], it.accelerator_group)[index], _ATTRIBUTE[number]), d.node) for d in pool]
    if len(figures) <= NODES_NAMED:
        return f"the pool's ledgers give, per node, in {unit}: {', '.join(f'{n} {v}' for v, n in figures)}"
    top = sorted(figures, key=lambda f: (-f[0], f[1]))[:NODES_NAMED]
    return (
        f"the pool's {len(figures):,} ledgers give, in {unit}, the most on {', '.join(f'{n} {v}' for v, n in top)}, "
        f"and {sum(v for v, _ in figures) - sum(v for v, _ in top):,} on the other {len(figures) - len(top):,} nodes"
    )


def _profiles_reason(it: InstanceType, pool: Sequence[NodeDevices], queue: ClusterQueue | None) -> str:
    if queue is not None and queue.stop_policy == "HoldAndDrain":
        return DRAINING_REASON
    nodes = [d.node for d in pool if d.group(it.accelerator_group) is not None]
    named = ", ".join(nodes[:NODES_NAMED]) + (
        f" and {len(nodes) - NODES_NAMED:,} more" if len(nodes) > NODES_NAMED else ""
    )
    return f"summed over the partitioned cards of {named or 'no node'}, by profile name"


@dataclass(frozen=True, slots=True)
class ProfileFigures:
    """One partition profile of a pool: instances still free and carved."""

    remaining: int
    allocated: int


def published_profile(it: InstanceType, profile: str) -> ProfileFigures | None:
    """What an InstanceType's status publishes of one profile (absent from its lists: 0); None where it publishes no
    PT view at all (nothing to contradict)."""
    if "acceleratorPartitioned" not in it.published_views:
        return None
    lists = it.published_profiles
    return ProfileFigures(
        lists.get("remainingProfiles", {}).get(profile, 0), lists.get("allocatedProfiles", {}).get(profile, 0)
    )


def profile_difference(
    it: InstanceType,
    profile: str,
    carvable: ProfileFigures,
    published: ProfileFigures,
    computed: ProfileFigures,
    pool: Sequence[NodeDevices],
    queue: ClusterQueue | None,
) -> str:
    """Why the instances of a profile the pool's cards can carve now (``carvable``: healthy cards, free or
    partitioned) differ from what the InstanceType publishes ("" where they agree). ``computed`` is the status
    writer's figure from the same ledgers (:func:`gpuctl.core.views.instancetype_views`)."""
    if carvable == published:
        return ""
    if queue is not None and queue.stop_policy == "HoldAndDrain":
        return DRAINING_REASON
    if computed != published:
        return (
            f"the published figure is not what the ledgers give now (remaining {computed.remaining}, allocated "
            f"{computed.allocated}): {_profiles_reason(it, pool, queue)}"
        )
    idle = sorted(
        c.id
        for d in pool
        for c in d.cards(it.accelerator_group)
        if c.partitioned and (c.unhealthy or c.mode not in (Mode.NONE, Mode.PARTITIONED))
    )
    return (
        "the status writer counts every card's ledger row; "
        + (f"{', '.join(idle)} can carve nothing now (unhealthy, or held in another mode)" if idle else "")
    ).rstrip("; ")


# ----------------------------------------------------------------------------------------------- check verdicts


def verdict_disagreement(
    namespace: str, name: str, check: str, published: str, computed: str, reason: str
) -> Disagreement | None:
    """A check state GPUStack wrote (``Ready`` or ``Retry``) against the state the core computes on the same
    Workload, as it stood at reservation. Only a judged state is compared: ``Pending`` is a verdict not written
    yet."""
    if published not in ("Ready", "Retry") or published == computed:
        return None
    return Disagreement(Kind.VERDICT, "Workload", name, namespace, check, published, computed, reason)


# ----------------------------------------------------------------------------------------------- fit labels


def fit_label_disagreements(
    node: str, labels: Mapping[str, str], computed: Mapping[str, str], devices: NodeDevices | None
) -> list[Disagreement]:
    """Where a Node's fit labels differ from those its ledger gives: a value, a label missing, or one left over."""
    out = []
    keys = sorted({k for k in labels if k.startswith(FIT_PREFIXES)} | set(computed))
    for key in keys:
        theirs, ours = labels.get(key), computed.get(key)
        if theirs != ours:
            out.append(
                Disagreement(
                    Kind.FIT_LABEL,
                    "Node",
                    node,
                    "",
                    key,
                    "absent" if theirs is None else theirs,
                    "absent" if ours is None else ours,
                    _fit_reason(key, devices),
                )
            )
    return out


def _fit_reason(key: str, devices: NodeDevices | None) -> str:
    if devices is None:
        return "the node has no Devices ledger: no fit label"
    if not devices.managed:
        return f"the node is not managed ({naming.LABEL_MANAGED} is not true): no fit label"
    prefix, _, model = key.partition("/")
    group = devices.group(model)
    if group is None:
        return f"its ledger has no card of {model}"
    if prefix + "/" == naming.SLICED_FIT_PREFIX:
        best = max(group.cards, key=label_slice_units, default=None)
        if best is None or not best.sliceable:
            return f"no card of {model} serves logical slices"
        units = label_slice_units(best)
        if units == 0:
            return f"no card of {model} is free or sliced with a free slot"
        return f"the freest card of {model} with a free slice slot is {best.id}, with {units} units"
    shareable = [c.id for c in group.cards if label_shares(c) > 0]
    return f"{len(shareable)} card(s) of {model} can still grant a share: {', '.join(shareable) or 'none'}"


# ----------------------------------------------------------------------------------------------- instance stops


def stop_disagreement(namespace: str, name: str, stopped: bool, decision: StopDecision) -> Disagreement | None:
    """An Instance the stop rule stops whose ``spec.stop`` is not set: the worker should have stopped it. (A stop the
    rule does not call for is a user's, and no disagreement.)"""
    if not decision.stop or stopped:
        return None
    return Disagreement(Kind.STOP, "Instance", name, namespace, "spec.stop", "false", "true", decision.reason)


# ----------------------------------------------------------------------------------------------- a whole read


def survey(
    instancetypes: Iterable[InstanceType],
    queues: Mapping[str, ClusterQueue],
    devices: Sequence[NodeDevices],
    node_labels: Mapping[str, Mapping[str, str]],
    verdicts: Iterable[tuple[str, str, str, str, str]] = (),
    stops: Iterable[tuple[str, str, bool, StopDecision]] = (),
) -> list[Disagreement]:
    """Every disagreement of one read of a cluster (``doctor``, ``diff``): each InstanceType's views against its
    pool's ledgers (``devices``: those whose Node exists), each Node's fit labels (``node_labels``: name → labels)
    against its ledger, each judged verdict (``(namespace, name, published, computed, reason)``) and each Instance's
    stop (``(namespace, name, stopped, decision)``)."""
    from gpuctl.core.pins import node_fit_labels
    from gpuctl.core.views import instancetype_views, pool_devices

    out: list[Disagreement] = []
    for it in instancetypes:
        queue = queues.get(it.name)
        pool = pool_devices(devices, it) if it.acceleratable else []
        out += view_disagreements(it, instancetype_views(it, pool, queue), pool, queue)
    by_node = {d.node: d for d in devices}
    for node, labels in sorted(node_labels.items()):
        led = by_node.get(node)
        out += fit_label_disagreements(node, labels, node_fit_labels(led), led)
    for namespace, name, published, computed, reason in verdicts:
        found = verdict_disagreement(namespace, name, naming.NODE_DEVICES_CHECK, published, computed, reason)
        if found is not None:
            out.append(found)
    for namespace, name, stopped, decision in stops:
        stop = stop_disagreement(namespace, name, stopped, decision)
        if stop is not None:
            out.append(stop)
    return out
