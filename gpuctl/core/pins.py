"""Per-card fit labels on Nodes, and the Workload fit pin that reads them.

TAS sums a node's capacity keys, so it cannot see how free capacity is spread over cards. Two labels per accelerator
model say it: the largest free slice on any one card, and how many cards can still grant a share. The Workload webhook
pins each PodSet to nodes whose label says one card fits (``Gt U-1`` for a slice of U units, ``Gt N-1`` for a shared
request of N >= 2), so TAS skips a fragmented node instead of re-placing the Workload there every 30 s.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuctl.core import naming
from gpuctl.core.admission import JSON, Admission, allow, deep_copy, fail_open
from gpuctl.core.instancetypes import InstanceType
from gpuctl.core.ledger import Card, Mode, NodeDevices
from gpuctl.core.naming import Family
from gpuctl.core.requests import add_required_node_expression
from gpuctl.core.units import SHARE
from gpuctl.core.workloads import PodSet

FIT_PREFIXES = (naming.SLICED_FIT_PREFIX, naming.SHARED_FIT_PREFIX)


def node_fit_labels(devices: NodeDevices | None) -> dict[str, str]:
    """The fit labels a node should carry: per accelerator model present, its largest free slice and its shareable
    cards. None for an unmanaged node or one without Devices; a label is absent when the model has no card of that
    population, and ``0`` when every such card is full (a slot-full card counts as 0). Counted from the ledger as
    written, as GPUStack's fit-label writer counts it (a card's health is not its to read)."""
    if devices is None or not devices.managed:
        return {}
    labels: dict[str, str] = {}
    for g in devices.groups:
        key = g.accelerator_key
        sliceable = [c for c in g.cards if c.sliceable]
        if sliceable:
            labels[naming.sliced_fit_label(key)] = str(max(label_slice_units(c) for c in sliceable))
        whole = [c for c in g.cards if c.whole_card_capable]
        if whole:
            labels[naming.shared_fit_label(key)] = str(sum(1 for c in whole if label_shares(c) > 0))
    return {k: v for k, v in labels.items() if _valid_label_key(k)}


def label_slice_units(card: Card) -> int:
    """What a card gives the sliced fit label: its free units when it is free or sliced with a free slot, else 0."""
    if not card.sliceable or card.mode not in (Mode.NONE, Mode.SLICED) or card.free_slots == 0:
        return 0
    return max(0, card.remaining)


def label_shares(card: Card) -> int:
    """The shares a card can still grant, for the shared fit label: a free or shared card's remaining over M/10."""
    if card.partitioned or card.mode not in (Mode.NONE, Mode.SHARED):
        return 0
    return max(0, card.remaining) // SHARE


def _valid_label_key(key: str) -> bool:
    prefix, _, name = key.partition("/")
    return 0 < len(name) <= 63 and len(prefix) <= 253 and name[0].isalnum() and name[-1].isalnum()


def fit_label_changes(current: Mapping[str, str], desired: Mapping[str, str]) -> dict[str, str | None]:
    """The label changes (None removes) that make a node's fit labels the desired ones; other labels are left alone."""
    changes: dict[str, str | None] = {}
    for k, v in desired.items():
        if current.get(k) != v:
            changes[k] = v
    for k in current:
        if k.startswith(FIT_PREFIXES) and k not in desired:
            changes[k] = None
    return changes


def _takes_pins(value: str | None) -> bool:
    """Whether a fit label's value lets a pinned Workload land (the pin asks more than zero)."""
    return value is not None and value.isdigit() and int(value) > 0


def pin_transitions(current: Mapping[str, str], changes: Mapping[str, str | None]) -> tuple[list[str], list[str]]:
    """The fit labels a change turns on (the node starts taking the Workloads pinned by it: from absent or ``0`` to
    more) and off (from more to ``0`` or absent); a change of a count that stays above zero is neither."""
    pinned, unpinned = [], []
    for key, value in sorted(changes.items()):
        before, after = _takes_pins(current.get(key)), _takes_pins(value)
        if after and not before:
            pinned.append(key)
        elif before and not after:
            unpinned.append(key)
    return pinned, unpinned


# ----------------------------------------------------------------------------------------------- the Workload pin


@dataclass(frozen=True, slots=True)
class PinContext:
    """What the Workload webhook follows: LocalQueue → ClusterQueue (with the InstanceType mark) → InstanceType."""

    local_queues: Mapping[tuple[str, str], str]
    """(namespace, LocalQueue name) → ClusterQueue name."""
    cluster_queue_labels: Mapping[str, Mapping[str, str]]
    instancetypes: Mapping[str, InstanceType]
    enabled: bool = True
    """The ``workload-fit-affinity`` setting."""


def accelerator_group_for(namespace: str, queue_name: str, ctx: PinContext) -> str | None:
    """The pool's accelerator group behind a Workload's queue, or None when any link is missing."""
    cq = ctx.local_queues.get((namespace, queue_name))
    if cq is None:
        return None
    if ctx.cluster_queue_labels.get(cq, {}).get(naming.LABEL_RESOURCE_TYPE) != naming.RESOURCE_TYPE_INSTANCETYPES:
        return None
    it = ctx.instancetypes.get(cq)
    if it is None or not it.accelerator_group:
        return None
    return it.accelerator_group


def podset_pins(podset: PodSet, accelerator_group: str) -> list[JSON]:
    """The required node-affinity expressions one PodSet gets."""
    from gpuctl.core.fit import podset_demands

    pins: list[JSON] = []
    for d in podset_demands(PodSet(podset.name, 1, podset.spec)):
        if d.family is Family.SLICED and d.units > 0:
            pins.append(
                {"key": naming.sliced_fit_label(accelerator_group), "operator": "Gt", "values": [str(d.units - 1)]}
            )
        elif d.family is Family.SHARED:
            n = _largest_shared(podset.spec)
            if n >= 2:
                pins.append(
                    {"key": naming.shared_fit_label(accelerator_group), "operator": "Gt", "values": [str(n - 1)]}
                )
    return pins


def _largest_shared(spec: Mapping[str, Any]) -> int:
    from gpuctl.core.requests import pod_containers, shared_pin_count

    return shared_pin_count(pod_containers(spec))


def _reserved(obj: Mapping[str, Any] | None) -> bool:
    status = obj.get("status") if isinstance(obj, Mapping) else None
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    return any(
        isinstance(c, Mapping) and c.get("type") == "QuotaReserved" and c.get("status") == "True"
        for c in (conditions if isinstance(conditions, list) else [])
    )


@fail_open
def pin_workload(workload: JSON, old: JSON | None, ctx: PinContext) -> Admission:
    """The Workload fit-pin webhook (CREATE and UPDATE, ``failurePolicy: Ignore``): never denies."""
    if not ctx.enabled:
        return allow(workload)
    spec = workload.get("spec")
    if not isinstance(spec, dict):
        return allow(workload)
    queue = spec.get("queueName")
    if not isinstance(queue, str) or not queue.startswith(naming.ENTRANCE_PREFIX):
        return allow(workload)
    if old is not None and _reserved(old):
        return allow(workload)  # Kueue lets PodSets change only before a reservation
    namespace = str((workload.get("metadata") or {}).get("namespace") or "default")
    group = accelerator_group_for(namespace, queue, ctx)
    if group is None:
        return allow(workload)
    mutated = deep_copy(workload)
    for ps in mutated["spec"].get("podSets") or []:
        if not isinstance(ps, dict):
            continue
        template = ps.setdefault("template", {})
        pod_spec = template.setdefault("spec", {}) if isinstance(template, dict) else None
        if not isinstance(pod_spec, dict):
            continue
        for expression in podset_pins(PodSet(str(ps.get("name", "main")), 1, pod_spec), group):
            add_required_node_expression(pod_spec, expression)
    if mutated == workload:
        return allow(workload)
    return allow(mutated, changed=[("spec", "podSets")])


def has_fit_pin(podset: PodSet) -> bool:
    """Whether a PodSet's template carries a fit-label pin (a Workload created with the webhook on)."""
    affinity = podset.spec.get("affinity")
    text = repr(affinity) if affinity else ""
    return naming.SLICED_FIT_PREFIX in text or naming.SHARED_FIT_PREFIX in text
