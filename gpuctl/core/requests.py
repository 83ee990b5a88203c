"""Gate 1, the Pod webhook: the seven request rules, the folds into units, and the shared card-count pin.

Pods carrying ``kueue.x-k8s.io/queue-name`` are checked on CREATE; others pass untouched. The card memory that the
folds divide by comes from the InstanceType whose ``schedule.gpustack.ai/queue-entrance`` label equals the Pod's
queue name — never from the LocalQueue, which users can write.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from gpuctl.core import naming
from gpuctl.core.admission import (
    JSON,
    Admission,
    aggregate,
    allow,
    deep_copy,
    deny,
    fail_closed,
    forbidden,
    invalid,
    required,
)
from gpuctl.core.compat import StrEnum
from gpuctl.core.errors import GpuctlError
from gpuctl.core.instancetypes import InstanceType, find_by_entrance
from gpuctl.core.naming import Family, KeyKind, ResourceKey
from gpuctl.core.units import M, QuantityError, mib_to_units, parse_quantity, percent_to_units


class ContainerGroup(StrEnum):
    INIT = "init"
    APP = "app"
    SIDECAR = "sidecar"


@dataclass(frozen=True, slots=True)
class KeyValue:
    """One accelerator resource of a container, as written."""

    resource: str
    key: ResourceKey
    raw: Any
    section: str
    """``limits`` or ``requests``: where the value was read (limits first)."""


@dataclass(frozen=True, slots=True)
class ContainerAccelerators:
    """A container's accelerator keys, with its place in the Pod."""

    path: str
    name: str
    group: ContainerGroup
    values: tuple[KeyValue, ...]

    @property
    def families(self) -> frozenset[Family]:
        return frozenset(f for v in self.values if (f := v.key.family) is not None)

    def find(self, kind: KeyKind) -> list[KeyValue]:
        return [v for v in self.values if v.key.kind is kind]

    def field(self, v: KeyValue) -> str:
        return f"{self.path}.resources.{v.section}[{v.resource}]"


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def container_accelerators(path: str, container: Mapping[str, Any], group: ContainerGroup) -> ContainerAccelerators:
    resources = _mapping(container.get("resources"))
    seen: dict[str, KeyValue] = {}
    for section in ("limits", "requests"):
        for name, raw in _mapping(resources.get(section)).items():
            if name in seen:
                continue
            key = naming.classify_resource(str(name))
            if key is not None:
                seen[str(name)] = KeyValue(str(name), key, raw, section)
    return ContainerAccelerators(path, str(container.get("name", "")), group, tuple(seen.values()))


def pod_containers(spec: Mapping[str, Any]) -> list[ContainerAccelerators]:
    """Every container of a Pod spec with its lifetime group: init, app, or native sidecar."""
    out: list[ContainerAccelerators] = []
    for i, c in enumerate(_list(spec.get("initContainers"))):
        c = _mapping(c)
        group = ContainerGroup.SIDECAR if c.get("restartPolicy") == "Always" else ContainerGroup.INIT
        out.append(container_accelerators(f"spec.initContainers[{i}]", c, group))
    for i, c in enumerate(_list(spec.get("containers"))):
        out.append(container_accelerators(f"spec.containers[{i}]", _mapping(c), ContainerGroup.APP))
    return out


def _count(raw: Any) -> int | None:
    """A whole count, or None when the value is no whole quantity."""
    try:
        q = parse_quantity(raw)
    except QuantityError:
        return None
    return int(q) if q.denominator == 1 else None


def _text(raw: Any) -> str:
    return raw if isinstance(raw, str) else str(raw)


# ----------------------------------------------------------------------------------------------- the rules


def validate_request_rules(containers: Sequence[ContainerAccelerators]) -> list[str]:
    """The seven request rules; each error in Kubernetes' field-error wording (empty when the Pod passes)."""
    errors: list[str] = []
    # Rule 7: a native sidecar may not request an accelerator.
    for c in containers:
        if c.group is ContainerGroup.SIDECAR and c.families:
            errors.append(
                forbidden(
                    f"{c.path}.resources.limits",
                    "a restartable init container (a native sidecar) may not request an accelerator; "
                    "move the request to an app container",
                )
            )
    holders = [c for c in containers if c.group is not ContainerGroup.SIDECAR and c.families]
    # Rule 1: one family, one container group.
    families = sorted({f.value for c in holders for f in c.families})
    if len(families) > 1:
        errors.append(forbidden("spec", f"a Pod may request only one accelerator family, found [{' '.join(families)}]"))
    groups = {c.group for c in holders}
    if ContainerGroup.INIT in groups and ContainerGroup.APP in groups:
        errors.append(
            forbidden(
                "spec.initContainers",
                "a Pod's accelerator requests must all sit in one container group; spec.initContainers must give up "
                "its request, because its devices are held for the Pod's whole life while the scheduler charges the "
                "Pod only once",
            )
        )
    # Rule 6: at most one container may request a slicing family.
    slicing = [c for c in holders if c.families & {Family.SLICED, Family.PARTITIONED}]
    if len(slicing) > 1:
        errors.append(forbidden("spec", f"at most one container may request a slicing family, found {len(slicing)}"))
    # Rules 2, 3, 5 and the per-container half of 4.
    profiles: set[str] = set()
    for c in holders:
        errors.extend(_sliced_errors(c))
        errors.extend(_partitioned_errors(c, profiles))
    # Rule 4, Pod-wide.
    if len(profiles) > 1 and not any("a Pod may request only one partition profile" in e for e in errors):
        errors.append(
            forbidden("spec", f"a Pod may request only one partition profile, found [{' '.join(sorted(profiles))}]")
        )
    return errors


def _sliced_errors(c: ContainerAccelerators) -> list[str]:
    errors: list[str] = []
    by_mfr: dict[str, list[KeyValue]] = {}
    for v in c.values:
        if v.key.family is Family.SLICED:
            by_mfr.setdefault(v.key.manufacturer.name, []).append(v)
    for values in by_mfr.values():
        names = values[0].key.manufacturer.resources
        kinds = {v.key.kind: v for v in values}
        token = kinds.get(KeyKind.SLICED)
        if token is None:
            errors.append(
                required(f"{c.path}.resources.limits[{names.sliced}]", f"a sliced request must set {names.sliced}")
            )
            continue
        if _count(token.raw) != 1:
            errors.append(
                invalid(
                    c.field(token),
                    _text(token.raw),
                    "a logical slice request is always a single accelerator; multi-accelerator logical slicing is not "
                    "supported yet",
                )
            )
        pct = kinds.get(KeyKind.SLICED_MEMORY_PERCENT)
        mib = kinds.get(KeyKind.SLICED_MEMORY_MIB)
        if pct is None and mib is None:
            errors.append(
                required(
                    f"{c.path}.resources.limits",
                    f"a {names.sliced} request must set {names.sliced_memory_percentage} or {names.sliced_memory_mib}",
                )
            )
        elif pct is not None and mib is not None:
            errors.append(
                forbidden(
                    f"{c.path}.resources.limits",
                    f"cannot set both {names.sliced_memory_percentage} and {names.sliced_memory_mib}",
                )
            )
        elif pct is not None:
            p = _count(pct.raw)
            if p is None or not 0 < p <= 100:
                errors.append(invalid(c.field(pct), _text(pct.raw), "must be a whole percentage within (0, 100]"))
        elif mib is not None:
            m = _count(mib.raw)
            if m is None or m <= 0:
                errors.append(invalid(c.field(mib), _text(mib.raw), "must be a positive whole number of MiB"))
        cores = kinds.get(KeyKind.SLICED_CORES)
        if cores is not None:
            p = _count(cores.raw)
            if p is None or not 0 < p <= 100:
                errors.append(invalid(c.field(cores), _text(cores.raw), "must be within (0, 100]"))
    return errors


def _partitioned_errors(c: ContainerAccelerators, pod_profiles: set[str]) -> list[str]:
    errors: list[str] = []
    by_mfr: dict[str, list[KeyValue]] = {}
    for v in c.values:
        if v.key.family is Family.PARTITIONED:
            by_mfr.setdefault(v.key.manufacturer.name, []).append(v)
    for values in by_mfr.values():
        mfr = values[0].key.manufacturer
        names = mfr.resources
        if mfr.partition_kind is None:
            for v in values:
                errors.append(forbidden(c.field(v), f"{mfr.base} has no hardware partitioning"))
            continue
        token = next((v for v in values if v.key.kind is KeyKind.PARTITIONED), None)
        profile_values = [v for v in values if v.key.kind is KeyKind.PARTITIONED_PROFILE]
        if token is None:
            errors.append(
                required(
                    f"{c.path}.resources.limits[{names.partitioned}]",
                    f"a partitioned request must set {names.partitioned}",
                )
            )
        elif _count(token.raw) != 1:
            errors.append(
                invalid(
                    c.field(token),
                    _text(token.raw),
                    "a partition request is always a single accelerator; request one Pod per instance",
                )
            )
        if token is not None and not profile_values:
            errors.append(
                required(
                    f"{c.path}.resources.limits",
                    f"a {names.partitioned} request must name a profile, e.g. {names.partitioned}.<kind>-<profile>",
                )
            )
        for v in profile_values:
            if _count(v.raw) != 1:
                errors.append(
                    invalid(c.field(v), _text(v.raw), "a partition profile request must be exactly 1 instance")
                )
        own = sorted({v.key.profile for v in profile_values if v.key.profile})
        if len(own) > 1:
            errors.append(forbidden("spec", f"a Pod may request only one partition profile, found [{' '.join(own)}]"))
        pod_profiles.update(own)
    return errors


# ----------------------------------------------------------------------------------------------- folds


class FoldError(GpuctlError, ValueError):
    """A fold that cannot be computed (no InstanceType behind the queue, no card memory, unknown profile)."""


def resolve_instancetype(queue_name: str, types: Sequence[InstanceType]) -> InstanceType:
    """The one InstanceType fronting a queue name, by its ``schedule.gpustack.ai/queue-entrance`` label."""
    found = find_by_entrance(list(types), queue_name)
    if not found:
        raise FoldError(
            f'metadata.labels[{naming.LABEL_QUEUE_NAME}]: Invalid value: "{queue_name}": no InstanceType carries '
            f"{naming.LABEL_QUEUE_ENTRANCE}={queue_name}, so the request cannot be sized; use the entrance of an "
            "InstanceType (its status.entrance)"
        )
    if len(found) > 1:
        raise FoldError(
            f'metadata.labels[{naming.LABEL_QUEUE_NAME}]: Invalid value: "{queue_name}": '
            f"{len(found)} InstanceTypes carry {naming.LABEL_QUEUE_ENTRANCE}={queue_name} "
            f"({', '.join(sorted(t.name for t in found))}); exactly one must"
        )
    return found[0]


def card_memory_mib(instancetype: InstanceType) -> int:
    mib = instancetype.card_mib
    if mib is None:
        raise FoldError(
            f"InstanceType {instancetype.name} has no readable card memory (spec.memory, or status.detail.memory "
            "once the operator publishes the pool's detail); retry once its detail is ready"
        )
    return mib


def sliced_units(percent: int | None, mib: int | None, card_mib: int | None) -> int:
    """The ``.sliced.units`` of a logical slice: p x 16,000, else floor(m x M / card MiB)."""
    if percent is not None:
        return percent_to_units(percent)
    if mib is None or card_mib is None:
        raise FoldError("a slice needs a memory percentage, or MiB and the card's memory")
    return mib_to_units(mib, card_mib)


def slice_units_on_card(spec: Mapping[str, Any], manufacturer: str, card_mib: int) -> int:
    """The units a Pod's logical slice takes on a card of ``card_mib`` MiB: its ``.sliced.units`` where the webhook
    folded them, else its memory budget folded as the webhook folds it (what the allocator sizes the slice by when
    no webhook reviewed the Pod); 0 when it names neither."""
    for c in pod_containers(spec):
        if not any(v.key.manufacturer.name == manufacturer for v in c.find(KeyKind.SLICED)):
            continue
        units = [_count(v.raw) for v in c.find(KeyKind.SLICED_UNITS)]
        if units and units[0]:
            return max(0, units[0])
        percent = [_count(v.raw) for v in c.find(KeyKind.SLICED_MEMORY_PERCENT)]
        mib = [_count(v.raw) for v in c.find(KeyKind.SLICED_MEMORY_MIB)]
        try:
            return sliced_units(
                percent[0] if percent and percent[0] else None, mib[0] if mib and mib[0] else None, card_mib
            )
        except ValueError:  # no memory named, or a card of no memory
            return 0
    return 0


def partitioned_units(profile_mib: int, card_mib: int) -> int:
    """The ``.partitioned.units`` of a partition: floor(profile MiB x M / card MiB), as a same-VRAM slice costs."""
    return mib_to_units(profile_mib, card_mib)


def _set_resource(container: JSON, name: str, value: str, sections: Sequence[str]) -> None:
    resources = container.setdefault("resources", {})
    for section in sections:
        target = resources.get(section)
        if not isinstance(target, dict):
            target = resources[section] = {}
        target[name] = value


def _family_sections(container: Mapping[str, Any], key: ResourceKey) -> list[str]:
    """The maps (``limits``, ``requests``) where the container requests this manufacturer's family: the folded value
    goes to each of them, replacing whatever a client set there, so the two maps never disagree."""
    resources = _mapping(container.get("resources"))
    out = []
    for section in ("limits", "requests"):
        for name in _mapping(resources.get(section)):
            other = naming.classify_resource(str(name))
            if other is not None and other.family is key.family and other.manufacturer is key.manufacturer:
                out.append(section)
                break
    return out or ["limits"]


def _raw_container(pod: JSON, path: str) -> JSON:
    spec = pod["spec"]
    field, index = path.removeprefix("spec.").rstrip("]").split("[")
    container: JSON = spec[field][int(index)]
    return container


def _fold(pod: JSON, containers: Sequence[ContainerAccelerators], context: _Context) -> None:
    for c in containers:
        if c.group is ContainerGroup.SIDECAR:
            continue
        raw = _raw_container(pod, c.path)
        for v in c.find(KeyKind.SLICED):
            names = v.key.manufacturer.resources
            kinds = {x.key.kind: x for x in c.values if x.key.manufacturer is v.key.manufacturer}
            pct = kinds.get(KeyKind.SLICED_MEMORY_PERCENT)
            mib = kinds.get(KeyKind.SLICED_MEMORY_MIB)
            sections = _family_sections(raw, v.key)
            if pct is not None:
                units = sliced_units(_count(pct.raw), None, None)
            else:
                assert mib is not None
                m = _count(mib.raw) or 0
                card = context.card_mib()
                if m > card:
                    raise FoldError(
                        invalid(
                            c.field(mib),
                            _text(mib.raw),
                            f"must not exceed the card memory of InstanceType {context.instancetype().name} ({card} MiB)",
                        )
                    )
                units = sliced_units(None, m, card)
            if units <= 0:
                raise FoldError(
                    invalid(
                        c.field(mib or pct or v),
                        _text((mib or pct or v).raw),
                        f"cannot derive a positive {names.sliced_units} from the requested memory",
                    )
                )
            _set_resource(raw, names.sliced_units, str(units), sections)
            if KeyKind.SLICED_CORES not in kinds:
                _set_resource(raw, names.sliced_cores_percentage, "100", sections)
        for v in c.find(KeyKind.PARTITIONED_PROFILE):
            names = v.key.manufacturer.resources
            it = context.instancetype()
            assert v.key.profile is not None
            if not it.offered_profiles:
                raise FoldError(_no_profiles(it))
            offered = it.offered(v.key.profile)
            if offered is None or offered.memory_mib <= 0:
                raise FoldError(
                    invalid(
                        c.field(v),
                        _text(v.raw),
                        f"profile {v.key.profile} is not offered by InstanceType {it.name}; offered: "
                        f"{', '.join(p.name for p in it.offered_profiles)}",
                    )
                )
            units = partitioned_units(offered.memory_mib, context.card_mib())
            if units <= 0:
                raise FoldError(
                    invalid(
                        c.field(v),
                        _text(v.raw),
                        f"cannot derive a positive {names.partitioned_units} from the requested memory",
                    )
                )
            _set_resource(raw, names.partitioned_units, str(min(units, M)), _family_sections(raw, v.key))


def shared_pin_count(containers: Sequence[ContainerAccelerators]) -> int:
    """N of a shared request: the largest ``.shared`` count any one container asks for."""
    n = 0
    for c in containers:
        if c.group is ContainerGroup.SIDECAR:
            continue
        for v in c.find(KeyKind.SHARED):
            n = max(n, _count(v.raw) or 0)
    return n


def add_required_node_expression(spec: JSON, expression: JSON) -> bool:
    """AND an expression into every non-empty required node-affinity term, or add a single new term when there is
    none; never duplicate. Returns whether the spec changed."""
    affinity = spec.setdefault("affinity", {})
    node_affinity = affinity.setdefault("nodeAffinity", {})
    required_terms = node_affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = required_terms.get("nodeSelectorTerms")
    if not isinstance(terms, list):
        terms = required_terms["nodeSelectorTerms"] = []
    non_empty = [t for t in terms if isinstance(t, dict) and (t.get("matchExpressions") or t.get("matchFields"))]
    if not non_empty:
        terms.append({"matchExpressions": [expression]})
        return True
    changed = False
    for term in non_empty:
        expressions = term.setdefault("matchExpressions", [])
        if expression not in expressions:
            expressions.append(expression)
            changed = True
    return changed


def count_pin(accelerator_group: str, n: int) -> JSON:
    return {"key": naming.accelerator_count_label(accelerator_group), "operator": "Gt", "values": [str(n - 1)]}


class _Context:
    """Lazily resolves the InstanceType behind the Pod's queue: only folds that divide by card memory need it."""

    def __init__(self, queue_name: str, types: Sequence[InstanceType]) -> None:
        self._queue = queue_name
        self._types = types
        self._it: InstanceType | None = None

    def instancetype(self) -> InstanceType:
        if self._it is None:
            self._it = resolve_instancetype(self._queue, self._types)
        return self._it

    def card_mib(self) -> int:
        return card_memory_mib(self.instancetype())


POD_FOLD_PATHS: Final = (("spec", "initContainers"), ("spec", "containers"), ("spec", "affinity"))
"""What the Pod webhook may change: the containers' resources (folds) and the node affinity (the card-count pin)."""


@fail_closed
def admit_pod(pod: JSON, instancetypes: Sequence[InstanceType]) -> Admission:
    """The Pod accelerator webhook (CREATE, ``failurePolicy: Fail``): rules, folds and the shared card-count pin."""
    if not isinstance(pod, dict):
        return deny("the request object is not a Pod")
    labels = _mapping(_mapping(pod.get("metadata")).get("labels"))
    queue = labels.get(naming.LABEL_QUEUE_NAME)
    if queue is None:
        return allow(pod)
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return deny(required("spec", "a Pod must have a spec"))
    containers = pod_containers(spec)
    errors = validate_request_rules(containers)
    if errors:
        return deny(aggregate(errors))
    mutated = deep_copy(pod)
    context = _Context(str(queue), instancetypes)
    try:
        _fold(mutated, containers, context)
        n = shared_pin_count(containers)
        if n >= 2:
            group = context.instancetype().accelerator_group
            if not group:
                raise FoldError(
                    f"InstanceType {context.instancetype().name} names no acceleratorGroup, so a shared request of "
                    f"{n} cards cannot be pinned to nodes with {n} cards"
                )
            add_required_node_expression(mutated["spec"], count_pin(group, n))
    except FoldError as exc:
        return deny(str(exc))
    return allow(mutated, changed=POD_FOLD_PATHS)


def _no_profiles(it: InstanceType) -> str:
    """Why a partition request finds no profile on its pool: the detail not published yet (retry), the model's cards
    switched to partition mode first (a known profile table), or a model that may never partition."""
    from gpuctl.core.modes import profile_table

    where = "status.detail.slicedDetail.physical"
    if not it.manufacturer:
        return f"InstanceType {it.name} publishes no partition profiles yet ({where}); retry once its detail is ready"
    if profile_table(it.accelerator_group, it.product) is not None:
        return (
            f"InstanceType {it.name} publishes no partition profiles ({where}): none of its cards is in partition "
            f"mode; `gpuctl plan partitions {it.name}` shows the switches that would offer them, then retry"
        )
    return (
        f"InstanceType {it.name} publishes no partition profiles ({where}) although its detail is published: its "
        f"cards{' (' + it.product + ')' if it.product else ''} offer no partitions; request a slice or whole cards, "
        "or use a pool whose cards partition"
    )
