"""Kueue records the gates read: Workloads (with their TAS topology assignments), ResourceFlavors, queues and checks."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from fractions import Fraction
from sys import intern
from typing import Any, NamedTuple

from gpuctl.core import naming
from gpuctl.core.credits import template_key
from gpuctl.core.units import QuantityError, parse_quantity


def _m(value: Any) -> Mapping[str, Any]:
    return value if type(value) is dict or isinstance(value, Mapping) else {}  # dicts first: the ABC check is slow


def _l(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _int(value: Any, default: int = 0) -> int:
    if type(value) is int:
        return value
    if isinstance(value, bool):
        return default
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(parse_quantity(value))
        except QuantityError:
            return default
    return default


class Condition(NamedTuple):
    """One entry of an object's ``status.conditions``.

    The small records parsed many times per object (conditions, check states, topology domains, a Pod's cards) are
    named tuples: as immutable as a frozen dataclass, and built several times faster (a frozen dataclass sets each
    field through ``object.__setattr__``)."""

    type: str
    status: str
    reason: str = ""
    message: str = ""
    last_transition: str = ""

    @property
    def true(self) -> bool:
        return self.status == "True"


def parse_conditions(raw: Any) -> dict[str, Condition]:
    out: dict[str, Condition] = {}
    if not raw or not isinstance(raw, list):
        return out
    for c in raw:
        c = c if type(c) is dict else _m(c)
        t = intern(str(c.get("type", "")))
        if t:
            out[t] = Condition(
                t,
                intern(str(c.get("status", ""))),
                intern(str(c.get("reason", ""))),
                str(c.get("message", "")),
                str(c.get("lastTransitionTime") or ""),
            )
    return out


class TopologyDomain(NamedTuple):
    """Pods of a PodSet placed in one topology domain (its values, one per level)."""

    values: tuple[str, ...]
    pods: int


@dataclass(frozen=True, slots=True)
class PodSetAssignment:
    name: str
    flavors: Mapping[str, str]
    count: int
    levels: tuple[str, ...] = ()
    domains: tuple[TopologyDomain, ...] = ()
    usage: Mapping[str, Fraction] = field(default_factory=dict)
    """``resourceUsage``: what Kueue reserved for the whole PodSet, per resource."""

    @property
    def credit_flavors(self) -> list[str]:
        """The flavor of each ``credits.gpustack.ai/*`` resource assigned (exactly one for a resolvable accelerated
        PodSet: as GPUStack's check counts them, credits of two manufacturers leave it unresolved even on one
        flavor)."""
        return sorted(f for r, f in self.flavors.items() if r.startswith(naming.CREDITS_PREFIX))

    @property
    def hostnames(self) -> list[tuple[str, int]] | None:
        """``(node, pods)`` per node when the assignment ends at ``kubernetes.io/hostname``; None otherwise."""
        if not self.levels or self.levels[-1] != naming.LABEL_HOSTNAME:
            return None
        out: dict[str, int] = {}
        for d in self.domains:
            if d.values:
                out[d.values[-1]] = out.get(d.values[-1], 0) + d.pods
        return sorted(out.items())


def decode_topology(raw: Mapping[str, Any]) -> tuple[tuple[str, ...], tuple[TopologyDomain, ...]]:
    """A TopologyAssignment as levels and domains: Kueue v1beta2's compressed ``slices`` or v1beta1's ``domains``."""
    if not raw:
        return (), ()
    levels = tuple(str(x) for x in _l(raw.get("levels")))
    domains: list[TopologyDomain] = []
    for d in _l(raw.get("domains")):
        d = _m(d)
        domains.append(TopologyDomain(tuple(str(v) for v in _l(d.get("values"))), _int(d.get("count"))))
    for s in _l(raw.get("slices")):
        s = s if type(s) is dict else _m(s)
        n = _int(s.get("domainCount"))
        per_level: list[list[str]] = []
        for lv in _l(s.get("valuesPerLevel")):
            lv = lv if type(lv) is dict else _m(lv)
            universal = lv.get("universal")
            if universal is not None:
                per_level.append([str(universal)] * n)
            else:
                ind = _m(lv.get("individual"))
                prefix, suffix = str(ind.get("prefix") or ""), str(ind.get("suffix") or "")
                per_level.append([f"{prefix}{r}{suffix}" for r in _l(ind.get("roots"))])
        counts_raw = _m(s.get("podCounts"))
        universal = counts_raw.get("universal")
        if universal is not None:
            counts = [_int(universal)] * n
        else:
            counts = [_int(c) for c in _l(counts_raw.get("individual"))]
        for i in range(n):
            values = tuple(level[i] for level in per_level if i < len(level))
            domains.append(TopologyDomain(values, counts[i] if i < len(counts) else 0))
    return levels, tuple(domains)


@dataclass(frozen=True, slots=True)
class PodSet:
    name: str
    count: int
    spec: Mapping[str, Any]
    """The Pod template's spec, as written (read by the demand parser and the fit pin)."""
    labels: Mapping[str, str] = field(default_factory=dict)
    """The Pod template's labels."""
    shape: tuple[Any, ...] | None = field(init=False, repr=False, compare=False)
    """The template's containers as a key (:func:`gpuctl.core.credits.template_key`), made once: the quota book
    and gate 1 read each shape once for the thousands of Workloads that share it."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", template_key(self.spec))


class CheckState(NamedTuple):
    name: str
    state: str
    message: str = ""
    requeue_after_seconds: int | None = None
    last_transition: str = ""


_FLAGS = (
    ("quota_reserved", "QuotaReserved"),
    ("admitted", "Admitted"),
    ("evicted", "Evicted"),
    ("finished", "Finished"),
)


@dataclass(frozen=True, slots=True)
class Workload:
    namespace: str
    name: str
    queue_name: str
    podsets: tuple[PodSet, ...]
    active: bool = True
    conditions: Mapping[str, Condition] = field(default_factory=dict)
    cluster_queue: str = ""
    assignments: tuple[PodSetAssignment, ...] = ()
    checks: tuple[CheckState, ...] = ()
    uid: str = ""
    resource_version: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    priority: int = 0
    """``spec.priority`` (Kueue copies the priority class's value there)."""
    created: str = ""
    """``metadata.creationTimestamp`` (RFC 3339)."""
    max_execution_seconds: int | None = None
    """``spec.maximumExecutionTimeSeconds``: Kueue evicts the Workload once it has run that long."""
    preemption_gates: tuple[tuple[str, str], ...] = ()
    """``spec.preemptionGates`` with each one's position (``Open`` or ``Closed``) from its status; a gate the status
    does not mention yet is closed."""
    variant_of: str = ""
    """Concurrent Admission: the parent Workload (same namespace) this Variant was made for (its controller owner)."""
    variant_name: str = ""
    """Set where a listing folds a family into one line (:func:`gpuctl.core.variants.folded`): the name of the
    Variant standing for it under its parent's name."""
    variants: int = 0
    """How many Variants the folded family has."""
    key: str = field(init=False, repr=False, compare=False)
    """``namespace/name``, made once (every index and set of Workloads is keyed by it)."""
    quota_reserved: bool = field(init=False, repr=False, compare=False)
    """The ``QuotaReserved`` condition is true (this and the three below are read from the conditions once: every
    gate and queue asks them again)."""
    admitted: bool = field(init=False, repr=False, compare=False)
    evicted: bool = field(init=False, repr=False, compare=False)
    finished: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        set_field = object.__setattr__
        set_field(self, "key", f"{self.namespace}/{self.name}")
        conditions = self.conditions
        for flag, kind in _FLAGS:
            c = conditions.get(kind)
            set_field(self, flag, c is not None and c.status == "True")

    @property
    def pod_owner(self) -> str:
        """The name its Pods carry (``kueue.x-k8s.io/workload``): a Variant's are its parent's."""
        return self.variant_of or self.name

    @property
    def closed_preemption_gates(self) -> tuple[str, ...]:
        return tuple(name for name, position in self.preemption_gates if position != "Open")

    @property
    def concurrent_parent(self) -> bool:
        """Concurrent Admission: a parent Workload, whose Variants hold quota and are judged in its place."""
        return self.labels.get(CONCURRENT_PARENT_LABEL) == "true"

    def check(self, name: str) -> CheckState | None:
        for c in self.checks:
            if c.name == name:
                return c
        return None

    def assignment(self, podset: str) -> PodSetAssignment | None:
        for a in self.assignments:
            if a.name == podset:
                return a
        return None


_NO_LABELS: Mapping[str, str] = {}


def _template_labels(template: Mapping[str, Any]) -> Mapping[str, str]:
    labels = _m(_m(template.get("metadata")).get("labels"))
    return {str(k): str(v) for k, v in labels.items()} if labels else _NO_LABELS


def _podset(raw: Any) -> PodSet:
    p = raw if type(raw) is dict else _m(raw)
    template = _m(p.get("template"))
    return PodSet(
        str(p.get("name") or "main"), _int(p.get("count"), 1), _m(template.get("spec")), _template_labels(template)
    )


def _assignment(raw: Any) -> PodSetAssignment:
    a = raw if type(raw) is dict else _m(raw)
    levels, domains = decode_topology(_m(a.get("topologyAssignment")))
    usage = a.get("resourceUsage")
    return PodSetAssignment(
        str(a.get("name") or "main"),
        {intern(str(k)): intern(str(v)) for k, v in _m(a.get("flavors")).items()},
        _int(a.get("count"), 0),
        levels,
        domains,
        {str(k): q for k, v in _m(usage).items() if (q := _quantity(v)) is not None} if usage else {},
    )


def _check_state(raw: Any) -> CheckState:
    c = raw if type(raw) is dict else _m(raw)
    requeue = c.get("requeueAfterSeconds")
    return CheckState(
        str(c.get("name", "")),
        str(c.get("state", "")),
        str(c.get("message", "")),
        requeue if isinstance(requeue, int) else None,
        str(c.get("lastTransitionTime") or ""),
    )


CONCURRENT_PARENT_LABEL = "kueue.x-k8s.io/concurrent-admission-parent"


def _preemption_gates(spec: Mapping[str, Any], status: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    gates = [str(_m(g).get("name") or "") for g in _l(spec.get("preemptionGates"))]
    if not gates:
        return ()
    positions = {
        str(_m(g).get("name") or ""): str(_m(g).get("position") or "") for g in _l(status.get("preemptionGates"))
    }
    return tuple((g, positions.get(g) or "Closed") for g in gates if g)


def _controller_workload(meta: Mapping[str, Any]) -> str:
    """The Workload that controls this one (a Concurrent Admission Variant's parent), "" for none."""
    for ref in _l(meta.get("ownerReferences")):
        r = _m(ref)
        if (
            r.get("kind") == "Workload"
            and r.get("controller") is True
            and str(r.get("apiVersion", "")).startswith("kueue.x-k8s.io/")
        ):
            return str(r.get("name") or "")
    return ""


def parse_workload(obj: Mapping[str, Any]) -> Workload:
    meta = _m(obj.get("metadata"))
    spec = _m(obj.get("spec"))
    status = _m(obj.get("status"))
    admission = _m(status.get("admission"))
    labels = meta.get("labels")
    limit = spec.get("maximumExecutionTimeSeconds")
    return Workload(
        namespace=intern(str(meta.get("namespace") or "default")),
        name=str(meta.get("name", "")),
        queue_name=intern(str(spec.get("queueName") or "")),
        podsets=tuple(_podset(p) for p in _l(spec.get("podSets"))),
        active=spec.get("active") is not False,
        conditions=parse_conditions(status.get("conditions")),
        cluster_queue=intern(str(admission.get("clusterQueue") or "")),
        assignments=tuple(_assignment(a) for a in _l(admission.get("podSetAssignments"))),
        checks=tuple(_check_state(c) for c in _l(status.get("admissionChecks"))),
        uid=str(meta.get("uid", "")),
        resource_version=str(meta.get("resourceVersion", "")),
        labels={intern(str(k)): intern(str(v)) for k, v in _m(labels).items()} if labels else {},
        priority=_int(spec.get("priority")),
        created=str(meta.get("creationTimestamp") or ""),
        max_execution_seconds=limit if isinstance(limit, int) and not isinstance(limit, bool) else None,
        preemption_gates=_preemption_gates(spec, status) if "preemptionGates" in spec else (),
        variant_of=_controller_workload(meta) if "ownerReferences" in meta else "",
    )


@dataclass(frozen=True, slots=True)
class ResourceFlavor:
    name: str
    node_labels: Mapping[str, str]
    topology_name: str = ""
    notes: Mapping[str, str] = field(default_factory=dict)
    """The ``note.gpustack.ai/*`` annotations, without their prefix (``product``, ``memory``, ``cpuDetail``, ...)."""

    accelerator_keys: tuple[str, ...] = field(init=False, compare=False)
    """Accelerator node keys the flavor pins (``acceleratable.feature.gpustack.ai/<aKey>: "true"``)."""

    def __post_init__(self) -> None:
        keys = []
        for k, v in self.node_labels.items():
            if k.startswith(naming.ACCELERATABLE_PREFIX) and v == "true":
                rest = k[len(naming.ACCELERATABLE_PREFIX) :]
                if "." not in rest and "-" in rest:
                    keys.append(rest)
        object.__setattr__(self, "accelerator_keys", tuple(sorted(keys)))

    def count_pin(self, accelerator_key: str) -> str | None:
        return self.node_labels.get(naming.accelerator_count_label(accelerator_key))

    @property
    def device_selector(self) -> dict[str, str]:
        """The node labels a node's Devices carries too: all but the per-node ``.count`` and the topology profile."""
        return {
            k: v
            for k, v in self.node_labels.items()
            if not (k.startswith(naming.ACCELERATABLE_PREFIX) and k.endswith(".count"))
            and k != naming.LABEL_TOPOLOGY_PROFILE
        }


def parse_resource_flavor(obj: Mapping[str, Any]) -> ResourceFlavor:
    meta = _m(obj.get("metadata"))
    spec = _m(obj.get("spec"))
    return ResourceFlavor(
        name=str(meta.get("name", "")),
        node_labels={str(k): str(v) for k, v in _m(spec.get("nodeLabels")).items()},
        topology_name=str(spec.get("topologyName") or ""),
        notes={
            str(k)[len(naming.NOTE_PREFIX) :]: str(v)
            for k, v in _m(meta.get("annotations")).items()
            if str(k).startswith(naming.NOTE_PREFIX)
        },
    )


@dataclass(frozen=True, slots=True)
class FlavorQuota:
    """One ``resourceGroups[].flavors[].resources[]`` entry: a flavor's quota of one resource."""

    flavor: str
    resource: str
    nominal: Fraction
    borrowing_limit: Fraction | None = None
    """How much more than ``nominal`` the queue may borrow from its cohort (None: no limit)."""
    lending_limit: Fraction | None = None
    """How much of ``nominal`` the cohort may borrow (None: all of it)."""


@dataclass(frozen=True, slots=True)
class ActiveCondition:
    """A ClusterQueue's ``Active`` condition, or ``present=False`` where its status has conditions but not this one."""

    status: str
    message: str
    present: bool = True


@dataclass(frozen=True, slots=True)
class ClusterQueue:
    name: str
    labels: Mapping[str, str]
    stop_policy: str
    admission_checks: tuple[str, ...]
    nominal: Mapping[str, int]
    """Σ nominalQuota per covered resource."""
    reserved: Mapping[str, int]
    """Σ ``status.flavorsReservation`` per resource."""
    flavors: tuple[str, ...] = ()
    pending: int = 0
    reserving: int = 0
    admitted: int = 0
    cohort: str = ""
    quotas: tuple[FlavorQuota, ...] = ()
    """Every flavor's quota per resource, in the order Kueue tries the flavors."""
    queueing_strategy: str = "BestEffortFIFO"
    reported: tuple[tuple[str, str, Fraction], ...] = ()
    """(flavor, resource, total) the queue's status reports used, what Kueue admits against."""
    reported_field: str = ""
    """The status field ``reported`` comes from (``flavorsReservation``, else ``flavorsUsage``); "" when the status
    reports none."""
    preemption_within: str = "Never"
    """``spec.preemption.withinClusterQueue``: whom a pending Workload may evict to take their quota."""
    effective_quotas: tuple[FlavorQuota, ...] | None = None
    """``status.effectiveQuotas.resourceGroups`` (Dynamic Quota Orchestration, Kueue 0.20+): the quota an
    orchestrator computed, which Kueue admits against instead of the spec's where its feature gate is on."""
    effective_by: str = ""
    """The orchestrator that wrote ``effectiveQuotas`` (``Kind/name``)."""
    quota_field: str = "spec.resourceGroups"
    """Where ``quotas`` and ``nominal`` were read: the spec, or ``status.effectiveQuotas`` once they are in force."""
    active: ActiveCondition | None = None
    """Its ``Active`` condition (None while its status has no condition at all)."""

    @property
    def quota_note(self) -> str:
        """Evidence that the queue admits against an orchestrator's effective quotas ("" where it is the spec's)."""
        if self.quota_field == "spec.resourceGroups":
            return ""
        by = f", written by {self.effective_by}" if self.effective_by else ""
        return f"admits against status.effectiveQuotas (Dynamic Quota Orchestration{by}), not the spec's nominal quota"

    def with_effective_quotas(self) -> ClusterQueue:
        """The queue as Kueue admits against it with Dynamic Quota Orchestration on: its effective quotas in place of
        the spec's (itself when it has none)."""
        if self.effective_quotas is None:
            return self
        nominal: dict[str, int] = {}
        for q in self.effective_quotas:
            nominal[q.resource] = nominal.get(q.resource, 0) + int(q.nominal)
        return replace(
            self, quotas=self.effective_quotas, nominal=nominal, quota_field="status.effectiveQuotas.resourceGroups"
        )

    def reservation_milli(self, resource: str) -> int:
        """Σ ``status.flavorsReservation[].resources[].total`` of one resource, in thousandths (0 when the status
        reports no reservation)."""
        if self.reported_field != "flavorsReservation":
            return 0
        return int(sum((t for _, r, t in self.reported if r == resource), Fraction(0)) * 1000)

    @property
    def instancetype_mark(self) -> bool:
        return self.labels.get(naming.LABEL_RESOURCE_TYPE) == naming.RESOURCE_TYPE_INSTANCETYPES


def _quantity(value: Any) -> Fraction | None:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return None
    try:
        return parse_quantity(value)
    except QuantityError:
        return None


def parse_cluster_queue(obj: Mapping[str, Any]) -> ClusterQueue:
    from gpuctl.core.credits import quota_from_cluster_queue, usage_from_cluster_queue

    meta = _m(obj.get("metadata"))
    spec = _m(obj.get("spec"))
    status = _m(obj.get("status"))
    checks = [str(c) for c in _l(spec.get("admissionChecks"))]
    checks += [str(_m(c).get("name", "")) for c in _l(_m(spec.get("admissionChecksStrategy")).get("admissionChecks"))]
    groups = [_m(g) for g in _l(spec.get("resourceGroups"))]
    flavors = tuple(str(_m(f).get("name", "")) for g in groups for f in _l(g.get("flavors")))
    quotas = _flavor_quotas(groups)
    effective = _m(status.get("effectiveQuotas"))
    by = _m(effective.get("orchestratorRef"))
    reported: list[tuple[str, str, Fraction]] = []
    reported_field = ""
    for field_name in ("flavorsReservation", "flavorsUsage"):
        entries = _l(status.get(field_name))
        if entries:
            reported_field = field_name
            for f in entries:
                for r in _l(_m(f).get("resources")):
                    total = _quantity(_m(r).get("total"))
                    reported.append((str(_m(f).get("name", "")), str(_m(r).get("name", "")), total or Fraction(0)))
            break
    return ClusterQueue(
        name=str(meta.get("name", "")),
        labels={str(k): str(v) for k, v in _m(meta.get("labels")).items()},
        stop_policy=str(spec.get("stopPolicy") or "None"),
        admission_checks=tuple(dict.fromkeys(c for c in checks if c)),
        nominal=quota_from_cluster_queue(groups),
        reserved=usage_from_cluster_queue(status),
        flavors=flavors,
        pending=_int(status.get("pendingWorkloads")),
        reserving=_int(status.get("reservingWorkloads")),
        admitted=_int(status.get("admittedWorkloads")),
        cohort=str(spec.get("cohortName") or spec.get("cohort") or ""),
        quotas=quotas,
        queueing_strategy=str(spec.get("queueingStrategy") or "BestEffortFIFO"),
        reported=tuple(reported),
        reported_field=reported_field,
        preemption_within=str(_m(spec.get("preemption")).get("withinClusterQueue") or "Never"),
        effective_quotas=_flavor_quotas([_m(g) for g in _l(effective.get("resourceGroups"))]) if effective else None,
        effective_by=f"{by.get('kind') or 'orchestrator'}/{by.get('name')}" if by.get("name") else "",
        active=_active_condition(_l(status.get("conditions"))),
    )


def _active_condition(conditions: list[Any]) -> ActiveCondition | None:
    if not conditions:
        return None
    for c in conditions:
        c = _m(c)
        if c.get("type") == "Active":
            return ActiveCondition(str(c.get("status") or ""), str(c.get("message") or ""))
    return ActiveCondition("", "", present=False)


def _flavor_quotas(groups: list[Mapping[str, Any]]) -> tuple[FlavorQuota, ...]:
    return tuple(
        FlavorQuota(
            str(_m(f).get("name", "")),
            str(_m(r).get("name", "")),
            _quantity(_m(r).get("nominalQuota")) or Fraction(0),
            _quantity(_m(r).get("borrowingLimit")),
            _quantity(_m(r).get("lendingLimit")),
        )
        for g in groups
        for f in _l(g.get("flavors"))
        for r in _l(_m(f).get("resources"))
    )


@dataclass(frozen=True, slots=True)
class LocalQueue:
    namespace: str
    name: str
    cluster_queue: str
    stop_policy: str = "None"
    """``spec.stopPolicy``: ``Hold`` or ``HoldAndDrain`` stop the LocalQueue's Workloads from being admitted."""


def parse_local_queue(obj: Mapping[str, Any]) -> LocalQueue:
    meta = _m(obj.get("metadata"))
    spec = _m(obj.get("spec"))
    return LocalQueue(
        str(meta.get("namespace") or "default"),
        str(meta.get("name", "")),
        str(spec.get("clusterQueue") or ""),
        str(spec.get("stopPolicy") or "None"),
    )


@dataclass(frozen=True, slots=True)
class AdmissionCheck:
    name: str
    controller: str
    active: bool
    message: str = ""
    deleting: bool = False


def parse_admission_check(obj: Mapping[str, Any]) -> AdmissionCheck:
    meta = _m(obj.get("metadata"))
    conditions = parse_conditions(_m(obj.get("status")).get("conditions"))
    active = conditions.get("Active")
    return AdmissionCheck(
        name=str(meta.get("name", "")),
        controller=str(_m(obj.get("spec")).get("controllerName") or ""),
        active=active is not None and active.true,
        message=active.message if active else "",
        deleting=bool(meta.get("deletionTimestamp")),
    )
