"""The simulator's input: every object the gates read, as records, and the scenarios that change it before a run."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction

from gpuctl.core import naming
from gpuctl.core.capacity import advertised
from gpuctl.core.errors import InputError
from gpuctl.core.fit import (
    FitContext,
)
from gpuctl.core.instancetypes import InstanceType
from gpuctl.core.ledger import NodeDevices
from gpuctl.core.nodes import Node
from gpuctl.core.rebuilt import rebuild_ledger
from gpuctl.core.serving import OperatorServing
from gpuctl.core.units import M
from gpuctl.core.versions import UNKNOWN_KUEUE, KueueVersion
from gpuctl.core.workloads import (
    AdmissionCheck,
    ClusterQueue,
    LocalQueue,
    ResourceFlavor,
    Workload,
)


class ScenarioError(InputError, ValueError):
    """A scenario that names something the cluster does not have; the message says what and how to list them."""


@dataclass(frozen=True)
class ClusterState:
    """Every object the gates read, as records (the simulator never touches the cluster)."""

    local_queues: Mapping[tuple[str, str], LocalQueue]
    cluster_queues: Mapping[str, ClusterQueue]
    instancetypes: Mapping[str, InstanceType]
    flavors: Mapping[str, ResourceFlavor]
    topologies: Mapping[str, tuple[str, ...]]
    """Topology name → its levels' node labels."""
    nodes: Mapping[str, Node]
    """Empty when the read holds no Node objects (a snapshot of ledgers only): room then comes from the ledgers."""
    devices: Mapping[str, NodeDevices]
    """The Devices as read (capabilities; the published ledgers)."""
    admission_check: AdmissionCheck | None
    check: FitContext
    """Gate 3's inputs, built by :func:`gpuctl.core.fit.check_inputs` as the operator builds them: every Workload,
    the Pods read, and each node's ledger rebuilt from the Pods bound to it."""
    kueue: KueueVersion = UNKNOWN_KUEUE
    """The Kueue whose decisions are reproduced (its version decides how TAS counts a node's room)."""
    serving: OperatorServing | None = None
    """Whether the operator serves its webhooks and check now (None: not known, and nothing is claimed)."""
    balanced_placement: bool = False
    """Whether Kueue runs with ``TASBalancedPlacement`` (off by default; GPUStack's chart turns it on)."""

    @property
    def workloads(self) -> Sequence[Workload]:
        return self.check.workloads


def with_added_nodes(state: ClusterState, count: int, like: str) -> ClusterState:
    """``count`` more nodes shaped like ``like`` (its labels, allocatable and cards, every card free); every queue
    whose flavor selects them grows by their cards x M credits, as a derived pool's quota follows its nodes."""
    template = state.devices.get(like)
    if template is None:
        raise ScenarioError(
            f"--like {like}: no node of that name has a Devices ledger (`gpuctl views --by-node` lists them)"
        )
    devices = dict(state.devices)
    nodes = dict(state.nodes)
    base = state.nodes.get(like)
    fresh = rebuild_ledger(template, ())  # every card free
    for i in range(1, count + 1):
        name = f"{like}-sim-{i}"
        devices[name] = NodeDevices(name, {**template.labels, naming.LABEL_HOSTNAME: name}, fresh.groups, "")
        if base is not None:
            nodes[name] = replace(
                base,
                name=name,
                labels={**base.labels, naming.LABEL_HOSTNAME: name},
                unschedulable=False,  # a new node, even one shaped like a cordoned one
                allocatable=advertised(base.allocatable, fresh),
                capacity=advertised(base.capacity, fresh),
            )
    node_labels = base.labels if base is not None else template.labels
    queues = dict(state.cluster_queues)
    for name, cq in state.cluster_queues.items():
        grown = []
        for q in cq.quotas:
            f = state.flavors.get(q.flavor)
            extra = Fraction(0)
            if f is not None and all(node_labels.get(k) == v for k, v in f.device_selector.items()):
                if q.resource.startswith(naming.CREDITS_PREFIX):
                    mfr = q.resource[len(naming.CREDITS_PREFIX) :]
                    cards = sum(
                        len(g.cards)
                        for g in template.groups
                        if g.manufacturer == mfr and (not f.accelerator_keys or g.accelerator_key in f.accelerator_keys)
                    )
                    extra = Fraction(count * cards * M)
                elif base is not None and q.resource in base.allocatable:
                    extra = Fraction(count * base.allocatable[q.resource])
            grown.append(replace(q, nominal=q.nominal + extra) if extra else q)
        queues[name] = replace(cq, quotas=tuple(grown))
    return replace(state, devices=devices, nodes=nodes, cluster_queues=queues)
