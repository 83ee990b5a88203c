"""Read objects from a source and parse them into core records: the one place raw objects become records."""

from __future__ import annotations

import difflib
import functools
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from gpuctl.cluster import kinds
from gpuctl.cluster.errors import NotFound, SourceError
from gpuctl.cluster.kinds import Kind
from gpuctl.core import naming
from gpuctl.core.explain import ExplainContext
from gpuctl.core.fit import FitContext, check_inputs
from gpuctl.core.gpustack import WorkerPresence
from gpuctl.core.instancetypes import InstanceType, parse_instancetype
from gpuctl.core.lazy import MadeOnRead
from gpuctl.core.ledger import Capability, LedgerError, Ledgers, NodeDevices, parse_devices, split_orphans
from gpuctl.core.nodes import Node, parse_node
from gpuctl.core.pods import Pod, parse_pod
from gpuctl.core.quota import QuotaBook, quota_book
from gpuctl.core.serving import OperatorServing
from gpuctl.core.submissions import PriorityClasses, parse_priority_classes
from gpuctl.core.variants import folded
from gpuctl.core.workloads import (
    AdmissionCheck,
    ClusterQueue,
    LocalQueue,
    ResourceFlavor,
    Workload,
    parse_admission_check,
    parse_cluster_queue,
    parse_local_queue,
    parse_resource_flavor,
    parse_workload,
)

if TYPE_CHECKING:
    from gpuctl.core.simulate import ClusterState
    from gpuctl.core.versions import KueueVersion

T = TypeVar("T")
S = TypeVar("S")


class Source(Protocol):
    """Where objects come from: a live API server or snapshot files."""

    def describe(self) -> str: ...

    def list(
        self,
        kind: Kind,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[dict[str, Any]]: ...

    def get(self, kind: Kind, name: str, namespace: str | None = None) -> dict[str, Any] | None: ...


def name_of(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def not_found(kind: str, name: str, known: Sequence[str], where: str) -> NotFound:
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.85)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    return NotFound(f'{kind} "{name}" not found in {where}{hint}')


def selected(
    source: Source,
    kind: Kind,
    *,
    namespace: str | None = None,
    label_selector: str | None = None,
    field_selector: str | None = None,
) -> set[tuple[str, str]] | None:
    """(namespace, name) of the objects of ``kind`` the selectors choose — sent to the server live, evaluated on a
    snapshot — or None when no selector is given (every object)."""
    if not label_selector and not field_selector:
        return None
    objs = source.list(kind, namespace=namespace, label_selector=label_selector, field_selector=field_selector)
    return {(str((o.get("metadata") or {}).get("namespace") or ""), name_of(o)) for o in objs}


def instancetypes(
    source: Source,
    names: Sequence[str] = (),
    *,
    label_selector: str | None = None,
    field_selector: str | None = None,
) -> list[InstanceType]:
    """InstanceTypes by name (all when none given) among those the selectors choose, sorted by name; an unknown name
    is an error naming close ones."""
    objs = source.list(kinds.INSTANCETYPE, label_selector=label_selector, field_selector=field_selector)
    by_name = {name_of(o): o for o in objs}
    if names:
        missing = [n for n in names if n not in by_name]
        if missing:
            if label_selector or field_selector:
                raise NotFound(f'instancetype "{missing[0]}" is not among those the selectors choose')
            raise not_found("instancetype", missing[0], sorted(by_name), source.describe())
        chosen = [by_name[n] for n in dict.fromkeys(names)]
    else:
        chosen = [by_name[n] for n in sorted(by_name)]
    return [parse_instancetype(o) for o in chosen]


def node_names(source: Source) -> frozenset[str]:
    """The names of the Nodes (live, listed as metadata only)."""
    names = getattr(source, "names", None)
    if names is not None:
        return frozenset(names(kinds.NODE))
    return frozenset(name_of(o) for o in source.list(kinds.NODE))


def ledgers(source: Source, nodes: Collection[str] | None = None) -> Ledgers:
    """Every Devices object, split into the ledgers a Node serves and the orphans whose Node is gone
    (:func:`gpuctl.core.ledger.split_orphans`). ``nodes`` are the Node names when the caller has read them."""
    records = getattr(source, "device_records", None)
    if records is not None:
        # A snapshot parses its Devices while it reads them (a large list is never held as dicts).
        read: list[NodeDevices] = records()
    else:
        read = []
        capabilities: dict[Any, Capability] = {}
        for obj in source.list(kinds.DEVICES):
            try:
                read.append(parse_devices(obj, capabilities))
            except LedgerError as exc:
                raise SourceError(f"{source.describe()}: {exc}") from None
    return split_orphans(read, node_names(source) if nodes is None else nodes)


def devices(source: Source, nodes: Collection[str] | None = None) -> list[NodeDevices]:
    """The ledgers the existing Nodes serve: what every view, partition count, fit and simulation reads."""
    return ledgers(source, nodes).served


def read_on_demand(source: Source, *wanted: Kind) -> None:
    """Tell a source, before anything is read, that the command parses only the objects of these kinds it reads
    (:func:`node_map`, :func:`ledger_map`): a snapshot then keeps their text instead of parsing them all."""
    plan = getattr(source, "read_on_demand", None)
    if plan is not None:
        plan(*wanted)


def _kept(source: Source, kind: Kind) -> dict[str, Callable[[], dict[str, Any]]] | None:
    """A cluster-scoped kind's objects by name, each as the function that decodes it, where the source keeps them
    undecoded (:func:`read_on_demand`)."""
    loaders = getattr(source, "loaders", None)
    found: dict[str, Callable[[], dict[str, Any]]] | None = loaders(kind) if loaders is not None else None
    return found


def _of_nodes(objects: Mapping[str, S], nodes: Collection[str]) -> Mapping[str, S]:
    """The objects named after an existing Node; all of them when no Node was read (see ``split_orphans``)."""
    return objects if not nodes else {n: o for n, o in objects.items() if n in nodes}


def node_map(source: Source) -> Mapping[str, Node]:
    """The Nodes by name, each parsed when first read."""
    kept = _kept(source, kinds.NODE)
    if kept is None:
        listed = {name_of(o): o for o in source.list(kinds.NODE)}
        return MadeOnRead(listed, lambda name: parse_node(listed[name]))
    return MadeOnRead(kept, lambda name: parse_node(kept[name]()))


def ledger_map(source: Source, nodes: Collection[str]) -> Mapping[str, NodeDevices]:
    """The ledgers the existing Nodes serve (as :func:`devices` selects them), by node, each parsed when first read
    (a malformed one is refused then)."""
    kept = _kept(source, kinds.DEVICES)
    if kept is None and getattr(source, "device_records", None) is not None:
        return {d.node: d for d in devices(source, nodes)}  # parsed as they were read

    def parse(obj: dict[str, Any]) -> NodeDevices:
        try:
            return parse_devices(obj)
        except LedgerError as exc:
            raise SourceError(f"{source.describe()}: {exc}") from None

    if kept is None:
        listed = _of_nodes({name_of(o): o for o in source.list(kinds.DEVICES)}, nodes)
        return MadeOnRead(listed, lambda name: parse(listed[name]))
    served = _of_nodes(kept, nodes)
    return MadeOnRead(served, lambda name: parse(served[name]()))


def read_as_records(source: Source, *wanted: Kind) -> None:
    """Tell a source, before anything is read, which kinds the command reads as records (Nodes, Pods, Workloads): a
    snapshot then parses each object as it reads it, and decodes it once."""
    plan = getattr(source, "read_as_records", None)
    if plan is not None:
        plan({kind: PARSERS[kind] for kind in wanted})


def _records(source: Source, kind: Kind, parse: Callable[[dict[str, Any]], T], namespace: str | None) -> list[T]:
    """A kind's objects as records, from the source's own records where it keeps them."""
    records = getattr(source, "records", None)
    if records is not None:
        found: list[T] = records(kind, parse, namespace)
        return found
    return [parse(o) for o in source.list(kind, namespace=namespace)]


def nodes(source: Source, label_selector: str | None = None) -> list[Node]:
    if label_selector:
        return [parse_node(o) for o in source.list(kinds.NODE, label_selector=label_selector)]
    return _records(source, kinds.NODE, parse_node, None)


def cluster_queues(source: Source) -> dict[str, ClusterQueue]:
    """Every ClusterQueue, with the quota Kueue admits against: an orchestrator's ``status.effectiveQuotas`` where
    Kueue runs Dynamic Quota Orchestration (or where its Configuration cannot be read: only that controller writes
    them), the spec's otherwise."""
    queues = {q.name: q for q in (parse_cluster_queue(o) for o in source.list(kinds.CLUSTERQUEUE))}
    if any(q.effective_quotas is not None for q in queues.values()):
        from gpuctl.cluster.versions import kueue_gate

        if kueue_gate(source, DYNAMIC_QUOTA) is not False:
            queues = {name: q.with_effective_quotas() for name, q in queues.items()}
    return queues


DYNAMIC_QUOTA = "DynamicQuotaOrchestration"


def flavors(source: Source) -> dict[str, ResourceFlavor]:
    return {f.name: f for f in (parse_resource_flavor(o) for o in source.list(kinds.RESOURCEFLAVOR))}


def workloads(source: Source, namespace: str | None = None) -> list[Workload]:
    """Every Workload, one per Concurrent Admission family (:func:`gpuctl.core.variants.folded`)."""
    return folded(sorted(_records(source, kinds.WORKLOAD, parse_workload, namespace), key=lambda w: w.key))


def workload_uids(source: Source) -> dict[str, str]:
    """Every Workload's UID → ``namespace/name`` (a Concurrent Admission Variant by its parent's name)."""
    from gpuctl.core.preemption import uid_names

    return uid_names(_records(source, kinds.WORKLOAD, parse_workload, None))


def workload(source: Source, namespace: str, name: str) -> Workload:
    obj = source.get(kinds.WORKLOAD, name, namespace)
    if obj is None:
        known = [name_of(o) for o in source.list(kinds.WORKLOAD, namespace=namespace)]
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.85)
        hint = f"; did you mean {', '.join(f'{namespace}/{c}' for c in close)}?" if close else ""
        raise NotFound(f'workload "{namespace}/{name}" not found in {source.describe()}{hint}')
    return parse_workload(obj)


def pods(source: Source, namespace: str | None = None, label_selector: str | None = None) -> list[Pod]:
    if label_selector:
        return [parse_pod(o) for o in source.list(kinds.POD, namespace=namespace, label_selector=label_selector)]
    return _records(source, kinds.POD, parse_pod, namespace)


PARSERS: Mapping[Kind, Callable[[dict[str, Any]], Any]] = {
    kinds.NODE: parse_node,
    kinds.POD: parse_pod,
    kinds.WORKLOAD: parse_workload,
}
"""The kinds a command may ask a source to keep as records (:func:`read_as_records`)."""


def local_queue(source: Source, namespace: str, name: str) -> LocalQueue | None:
    obj = source.get(kinds.LOCALQUEUE, name, namespace)
    return parse_local_queue(obj) if obj else None


def admission_check(source: Source, name: str) -> AdmissionCheck | None:
    try:
        obj = source.get(kinds.ADMISSIONCHECK, name)
    except SourceError:
        return None
    return parse_admission_check(obj) if obj else None


def admission_checks(source: Source) -> dict[str, AdmissionCheck]:
    """Every AdmissionCheck by name (none where they cannot be read)."""
    try:
        return {c.name: c for c in (parse_admission_check(o) for o in _served(source, kinds.ADMISSIONCHECK))}
    except SourceError:
        return {}


def taken_at(source: Source) -> float | None:
    """When a snapshot was taken (the time ``gpuctl dump`` recorded), in seconds since the epoch; None for a live
    cluster or a snapshot that does not say."""
    from gpuctl.core.queueing import epoch_seconds

    if not getattr(source, "is_snapshot", False):
        return None
    for obj in source.list(kinds.DUMP):
        stamp = (obj.get("metadata") or {}).get("creationTimestamp")
        if isinstance(stamp, str):
            return epoch_seconds(stamp)
    return None


@dataclass(frozen=True)
class AdmissionState:
    """Every object the explanation of Workloads reads, read once and parsed into records."""

    local_queues: Mapping[tuple[str, str], LocalQueue]
    cluster_queues: Mapping[str, ClusterQueue]
    instancetypes: Mapping[str, InstanceType]
    check: AdmissionCheck | None
    inputs: FitContext
    """Gate 3's inputs, built as the operator's check builds them (every Workload, ledgers rebuilt from Pods)."""
    quota: QuotaBook
    """Every queue's quota and usage, as ``simulate`` starts from."""
    raw_tas: Callable[[], bool] | None = None
    """Whether Kueue's TAS counts admitted Workloads in raw device keys, read when first asked."""
    serving: OperatorServing | None = None
    """Whether the operator serves its webhooks and check (None: not known)."""
    _contexts: dict[tuple[str, str, str], ExplainContext] = field(default_factory=dict, init=False, repr=False)

    @property
    def workloads(self) -> Sequence[Workload]:
        return self.inputs.workloads

    def cluster_queue_of(self, w: Workload) -> str:
        lq = self.local_queues.get((w.namespace, w.queue_name))
        return w.cluster_queue or (lq.cluster_queue if lq else "")

    def context_for(self, w: Workload) -> ExplainContext:
        """What explains ``w``: one context for all the Workloads of a LocalQueue (and admitting ClusterQueue)."""
        key = (w.namespace, w.queue_name, w.cluster_queue)
        found = self._contexts.get(key)
        if found is None:
            cq = self.cluster_queue_of(w)
            found = self._contexts[key] = ExplainContext(
                local_queue=self.local_queues.get((w.namespace, w.queue_name)),
                cluster_queue=self.cluster_queues.get(cq),
                instancetype=self.instancetypes.get(cq),
                admission_check=self.check,
                check=self.inputs,
                quota=self.quota,
                raw_tas=self.raw_tas,
                serving=self.serving,
            )
        return found


def admission_state(source: Source, probe_operator: bool = False) -> AdmissionState:
    """Read what explanations need: queues, pools, ledgers, Nodes, Workloads, and the Pods that are bound or owned.

    Gate 3's inputs come from :func:`gpuctl.core.fit.check_inputs`, the function the operator's check calls. Only a
    snapshot that holds no Pods at all keeps the published ledgers (and the explanation says so)."""
    read_as_records(source, kinds.POD, kinds.WORKLOAD)
    read_on_demand(source, kinds.NODE, kinds.DEVICES)
    all_pods = pods(source)
    pods_read = [p for p in all_pods if p.node_name or p.workload]
    queues = cluster_queues(source)
    read_workloads = workloads(source)
    read_nodes = node_map(source)
    return AdmissionState(
        local_queues={(q.namespace, q.name): q for q in (parse_local_queue(o) for o in source.list(kinds.LOCALQUEUE))},
        cluster_queues=queues,
        instancetypes={t.name: t for t in instancetypes(source)},
        check=admission_check(source, naming.NODE_DEVICES_CHECK),
        # Bound Pods feed the ledgers, node usage and held counts; owned ones gates 4 and 5.
        inputs=check_inputs(
            flavors(source),
            ledger_map(source, read_nodes),
            read_nodes or None,
            read_workloads,
            pods_read,
            pods_read=bool(all_pods) or not getattr(source, "is_snapshot", False),
        ),
        quota=quota_book(queues, read_workloads),
        raw_tas=functools.cache(lambda: _kueue_of(source).tas_charges_raw_requests),
        serving=operator_serving(source, probe=probe_operator),
    )


def _kueue_of(source: Source) -> KueueVersion:
    from gpuctl.cluster.versions import kueue_version

    return kueue_version(source)


def priority_classes(source: Source) -> PriorityClasses:
    """Kueue's WorkloadPriorityClasses and the PriorityClasses (none where the cluster does not serve the kind)."""
    return parse_priority_classes(_served(source, kinds.WORKLOAD_PRIORITY_CLASS), _served(source, kinds.PRIORITY_CLASS))


ENDPOINT_PROBE_SECONDS = 2.0
"""How long the operator's webhook endpoint may take to answer ``/readyz`` before it counts as not serving."""


def operator_serving(source: Source, probe: bool = False) -> OperatorServing | None:
    """Who serves the webhooks and the check, read as doctor reads it, at the source's time (a dump's own): GPUStack's
    worker where its Lease or its webhook configurations are there (its Lease decides whether it runs), else the
    gpuctl operator — its webhook configurations and leader Lease, and with ``probe`` (live) whether its webhook
    endpoint answers. None where they cannot be read (nothing is claimed then)."""
    import time

    from gpuctl.core import gpustack
    from gpuctl.core.doctor.records import parse_lease, parse_webhook_configuration

    try:
        configs = [*_served(source, kinds.MUTATING_WEBHOOKS), *_served(source, kinds.VALIDATING_WEBHOOKS)]
        worker_lease = source.get(kinds.LEASE, gpustack.WORKER_LEASE, gpustack.WORKER_NAMESPACE)
    except SourceError:  # not allowed to read them, or not kept in a snapshot: say nothing of who serves
        return None
    entries = tuple(e for c in configs for e in parse_webhook_configuration(c))
    live = not getattr(source, "is_snapshot", False)
    now = taken_at(source) or time.time()
    presence = gpustack.worker_presence(worker_lease, [str((c.get("metadata") or {}).get("name")) for c in configs])
    if worker_lease is not None or presence.configurations:
        # GPUStack's worker serves the webhooks and the check here (a gpuctl operator beside it serves neither).
        # Its webhook port answers no readiness probe of gpuctl's: its Lease says whether it runs.
        return OperatorServing(
            entries,
            parse_lease(worker_lease) if worker_lease else None,
            now,
            worker_deployment(source, gpustack.WORKER_NAMESPACE) is not None,
            None,
            registered=live,
            namespaces=_namespace_labels(source)
            if any(e.configuration in gpustack.CONFIGURATIONS and e.namespace_selector for e in entries)
            else None,
            worker=True,
        )
    try:
        lease = source.get(kinds.LEASE, naming.OPERATOR_NAME, naming.OPERATOR_NAMESPACE)
        deployment = source.get(kinds.DEPLOYMENT, naming.OPERATOR_NAME, naming.OPERATOR_NAMESPACE)
    except SourceError:
        return None
    endpoint = _endpoint_answers(source, entries) if probe and live else None
    return OperatorServing(
        entries,
        parse_lease(lease) if lease else None,
        now,
        deployment is not None,
        endpoint,
        # Read live, the configurations are all the cluster holds: a webhook missing from them is not registered.
        registered=live,
        namespaces=_namespace_labels(source) if any(e.ours and e.namespace_selector for e in entries) else None,
    )


def _namespace_labels(source: Source) -> dict[str, dict[str, str]] | None:
    """Each Namespace's labels, for a webhook that selects by namespace; None where they cannot be read (the shipped
    view role does not read Namespaces) or a snapshot holds none."""
    try:
        found = source.list(kinds.NAMESPACE)
    except SourceError:
        return None
    out: dict[str, dict[str, str]] = {}
    for obj in found:
        meta = obj.get("metadata") or {}
        labels = meta.get("labels") if isinstance(meta, dict) else None
        if isinstance(meta, dict) and meta.get("name"):
            out[str(meta["name"])] = {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {}
    return out or None


def _endpoint_answers(source: Source, entries: Sequence[Any]) -> str | None:
    """ "" when one of the operator's webhook endpoints answers ``/readyz``, else why none does; None when there is
    none to probe."""
    from gpuctl.cluster.live import LiveSource
    from gpuctl.cluster.probe import probe_endpoints

    if not isinstance(source, LiveSource):
        return None
    # A probe the user may not make (services/proxy forbidden) tells nothing of the operator: the Lease decides.
    probes = [p for p in probe_endpoints(source, [e for e in entries if e.ours], ENDPOINT_PROBE_SECONDS) if p.allowed]
    if not probes:
        return None
    if any(not p.error for p in probes):
        return ""
    return "; ".join(f"{p.target}: {p.error}" for p in probes)


def optional(source: Source, kind: Kind) -> list[dict[str, Any]]:
    """A kind's objects, or none where the cluster does not serve it (its CRD not installed)."""
    return _served(source, kind)


def _served(source: Source, kind: Kind) -> list[dict[str, Any]]:
    """A kind's objects, or none where the cluster does not serve it (or the snapshot has none)."""
    try:
        return source.list(kind)
    except SourceError as exc:
        if "is not served" in str(exc):
            return []
        raise


def simulation_state(
    source: Source,
    *,
    read_workloads: Sequence[Workload] | None = None,
    read_cluster_queues: Mapping[str, ClusterQueue] | None = None,
    kueue: KueueVersion | None = None,
) -> ClusterState:
    """Everything the simulator reads, parsed once: queues, pools, flavors, topologies, Nodes, ledgers, Workloads
    and the Pods bound to nodes or owned by a Workload; gate 3's inputs built as :func:`admission_state` builds them;
    the Kueue version whose decisions are reproduced (read from the source unless given).
    Workloads and ClusterQueues a command has already read are passed in rather than parsed again."""
    from gpuctl.cluster.versions import kueue_gate, kueue_version
    from gpuctl.core.simulate import ClusterState
    from gpuctl.core.tas import parse_topology

    read_as_records(source, kinds.POD, kinds.WORKLOAD, kinds.NODE)
    all_pods = pods(source)
    kept = [p for p in all_pods if p.node_name or p.workload]
    read_nodes = {n.name: n for n in nodes(source)}
    read_devices = {d.node: d for d in devices(source, read_nodes)}
    read_flavors = flavors(source)
    return ClusterState(
        local_queues={(q.namespace, q.name): q for q in (parse_local_queue(o) for o in source.list(kinds.LOCALQUEUE))},
        cluster_queues=read_cluster_queues if read_cluster_queues is not None else cluster_queues(source),
        instancetypes={t.name: t for t in instancetypes(source)},
        flavors=read_flavors,
        topologies=dict(parse_topology(o) for o in _served(source, kinds.TOPOLOGY)),
        nodes=read_nodes,
        devices=read_devices,
        admission_check=admission_check(source, naming.NODE_DEVICES_CHECK),
        check=check_inputs(
            read_flavors,
            read_devices.values(),
            read_nodes or None,
            read_workloads if read_workloads is not None else workloads(source),
            kept,
            pods_read=bool(all_pods) or not getattr(source, "is_snapshot", False),
        ),
        kueue=kueue if kueue is not None else kueue_version(source),
        serving=operator_serving(source, probe=True),
        balanced_placement=bool(kueue_gate(source, "TASBalancedPlacement")),
    )


# ----------------------------------------------------------------------------------------------- GPUStack's worker


def worker_presence(source: Source, namespace: str) -> WorkerPresence | None:
    """What the read shows of GPUStack's worker (its Lease, its webhook configurations); None where it cannot be
    told (not allowed to read them)."""
    from gpuctl.core.gpustack import CONFIGURATIONS, WORKER_LEASE, worker_presence

    try:
        configs = [*_served(source, kinds.MUTATING_WEBHOOKS), *_served(source, kinds.VALIDATING_WEBHOOKS)]
        lease = source.get(kinds.LEASE, WORKER_LEASE, namespace)
    except SourceError:
        return None
    names = [str((c.get("metadata") or {}).get("name") or "") for c in configs]
    return worker_presence(lease, [n for n in names if n in CONFIGURATIONS], namespace)


def worker_deployment(source: Source, namespace: str) -> dict[str, Any] | None:
    """GPUStack's worker Deployment (by the chart's labels), or None where there is none or it cannot be read."""
    from gpuctl.core.gpustack import WORKER_SELECTOR, is_worker_deployment

    try:
        found = (
            _served(source, kinds.DEPLOYMENT)
            if getattr(source, "is_snapshot", False)
            else source.list(kinds.DEPLOYMENT, namespace=namespace, label_selector=WORKER_SELECTOR)
        )
    except SourceError:
        return None
    return next(
        (
            d
            for d in found
            if is_worker_deployment(d) and (d.get("metadata") or {}).get("namespace", namespace) == namespace
        ),
        None,
    )
