"""The use cases several commands share, owned by none of them: the views of InstanceTypes as the JSON contract
states them (``views``, ``diff``, ``instancetype describe``), one Workload explained gate by gate (``explain``,
``top``, ``simulate``), and a manifest read and its webhook context (``webhook dry-run``, ``instancetype create``).
"""

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuctl.cli import refs
from gpuctl.cli.errors import UsageError
from gpuctl.cluster import kinds
from gpuctl.core import naming
from gpuctl.core.compat import StrEnum

if TYPE_CHECKING:
    from gpuctl.cluster.kinds import Kind
    from gpuctl.cluster.read import Source
    from gpuctl.core.explain import Explanation
    from gpuctl.core.shadow import Disagreement
    from gpuctl.core.webhooks import WebhookContext
    from gpuctl.core.workloads import Workload

# ----------------------------------------------------------------------------------------------- views


def compute_items(
    source: "Source", names: list[str], selector: str | None, field_selector: str | None = None
) -> list[dict[str, Any]]:
    """The views of each InstanceType the names and selectors choose, as the JSON contract states them (plus the
    internal ``_type``, ``_pool`` and ``_labels``)."""
    from gpuctl.cluster import read
    from gpuctl.core import views

    types = read.instancetypes(source, names, label_selector=selector, field_selector=field_selector)
    devices, orphans = read.ledgers(source) if any(t.acceleratable for t in types) else ([], [])
    queues = read.cluster_queues(source) if types else {}
    items = []
    for t in types:
        queue = queues.get(t.name)
        v = views.instancetype_views(t, devices, queue)
        items.append(
            {
                "name": t.name,
                "entrance": t.entrance or t.queue_entrance_label,
                "phase": t.phase,
                **views.views_to_status(v),
                "_type": t,
                "_pool": views.pool_devices(devices, t) if t.acceleratable else [],
                "_orphans": [d.node for d in views.pool_devices(orphans, t)] if t.acceleratable else [],
                "_labels": dict(t.labels),
                "_views": v,
                "_queue": queue,
            }
        )
    return items


def disagreements(source: "Source") -> list["Disagreement"]:
    """Every figure the read's status writer, check and fit-label writer published (GPUStack's worker's, or the
    standalone operator's) that the core computes otherwise: views from the pools' ledgers, fit labels from each
    node's, the verdicts of Workloads the check judges now, and the stops of Instances whose pool drains or is gone."""
    from gpuctl.cluster import read
    from gpuctl.core.fit import READY, RETRY, judge_workload, judgeable
    from gpuctl.core.instances import parse_instance
    from gpuctl.core.lifecycle import should_stop_instance
    from gpuctl.core.shadow import survey

    state = read.admission_state(source)
    types = list(state.instancetypes.values())
    nodes = state.inputs.nodes or {}
    # The views and fit labels are written from the published ledgers (the check's are rebuilt from Pods).
    ledgers = read.ledgers(source, nodes).served
    labels = {n.name: n.labels for n in nodes.values()}
    verdicts = []
    for w in state.inputs.workloads:
        published = w.check(naming.NODE_DEVICES_CHECK)
        if published is None or published.state not in (READY, RETRY) or judgeable(w) is not None:
            continue
        v = judge_workload(w, state.inputs)
        verdicts.append((w.namespace, w.name, published.state, v.state, v.message))
    stops = []
    for raw in read.optional(source, kinds.INSTANCE):
        inst = parse_instance(raw)
        it = state.instancetypes.get(inst.type)
        cq = state.cluster_queues.get(inst.type)
        decision = should_stop_instance(it is not None, bool(it and it.deleting), cq.stop_policy if cq else "None")
        stops.append((inst.namespace, inst.name, inst.stop, decision))
    return survey(types, state.cluster_queues, ledgers, labels, verdicts, stops)


def checks_cell(checks: list[dict[str, str]]) -> str:
    """Every AdmissionCheck on a Workload and its state (``gpustack-node-devices=Retry,…``), as a table cell."""
    return ",".join(f"{c['name']}={c['state'] or '<none>'}" for c in checks) or "-"


def public(item: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in item.items() if not k.startswith("_")}


# ----------------------------------------------------------------------------------------------- explaining a Workload


MARKS = {"passed": "✓", "held": "⏸", "failed": "✗", "not-reached": "·", "not-applicable": "n/a", "unknown": "?"}
PLAIN_MARKS = {
    "passed": "ok",
    "held": "HELD",
    "failed": "FAILED",
    "not-reached": "--",
    "not-applicable": "n/a",
    "unknown": "??",
}
QUIET = ("passed", "not-reached", "not-applicable")
"""Verdicts whose evidence and hint only ``-o wide`` shows."""


def split_name(ref: str, namespace: str, kind: "Kind" = kinds.WORKLOAD) -> tuple[str, str]:
    """``[NAMESPACE/]NAME`` or kubectl's ``<resource>.<group>/NAME`` → (namespace, name); ``namespace`` fills a
    missing one."""
    ns, name = refs.split_name(ref, (kind,), what=f"explain {kind.kind.lower()}")
    return ns or namespace, name


def explanation_text(e: "Explanation", *, wide: bool = False, title: str | None = None) -> str:
    fancy = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
    marks = MARKS if fancy else PLAIN_MARKS
    held = e.held_by
    lines = [
        title
        or f"{e.kind} {e.namespace}/{e.name}: "
        + (f"held at gate {held} ({e.gates[held - 1].name})" if held else "runs: every gate passed")
    ]
    for g in e.gates:
        lines.append(f"  {marks[g.verdict]:<6} {g.gate}. {g.name}: {g.summary}")
        for ev in g.evidence if wide or g.verdict not in QUIET else ():
            lines.append(f"           - {ev}")
        if g.hint and g.verdict not in QUIET:
            lines.append(f"           hint: {g.hint}")
    return "\n".join(lines) + "\n"


def explained(source: "Source", namespace: str, name: str) -> "Explanation":
    from gpuctl.cluster import read
    from gpuctl.cluster.bulk import bulk_allocation
    from gpuctl.core.explain import explain_workload, with_position
    from gpuctl.core.queueing import pending, pending_order, position_of

    with bulk_allocation():
        w = read.workload(source, namespace, name)
        state = read.admission_state(source, probe_operator=True)  # gate 3 asks whether the check is served
        # A Concurrent Admission parent is explained as its family: the Variant standing for it.
        w = next((x for x in state.workloads if x.key == w.key), w)
        e = explain_workload(w, state.context_for(w))
        cq = state.cluster_queue_of(w)
        if pending(w) and cq:
            line = pending_order(state.workloads, {x.key: state.cluster_queue_of(x) for x in state.workloads}, cq)
            where = position_of(w, line)
            if where is not None:
                e = with_position(e, cq, where.position, where.total, where.ahead)
        return _with_plan(source, w, e)


def _with_plan(source: "Source", w: "Workload", e: "Explanation") -> "Explanation":
    """A partition Workload held before it runs: the held gate's hint names the ``plan partitions`` that admits it,
    when one does (simulated on the whole cluster, so only for a Workload that asks for a partition)."""
    from dataclasses import replace

    from gpuctl.cluster import read
    from gpuctl.core.fit import podset_demands
    from gpuctl.core.naming import Family
    from gpuctl.core.plan import partition_hint
    from gpuctl.core.simulate import Simulator

    held = e.held_by
    if held not in (1, 2, 3) or not any(d.family is Family.PARTITIONED for ps in w.podsets for d in podset_demands(ps)):
        return e
    hint = partition_hint(Simulator(read.simulation_state(source)), w)
    if not hint:
        return e
    gates = tuple(g._replace(hint=f"{g.hint}; {hint}" if g.hint else hint) if g.gate == held else g for g in e.gates)
    return replace(e, gates=gates)


# ----------------------------------------------------------------------------------------------- manifests


class WebhookKind(StrEnum):
    POD = "pod"
    WORKLOAD = "workload"
    INSTANCETYPE = "instancetype"
    INSTANCE = "instance"


EXPECTED_KIND = {"pod": "Pod", "workload": "Workload", "instancetype": "InstanceType", "instance": "Instance"}


def read_manifest(path: str, kind: WebhookKind) -> dict[str, Any]:
    """One object from a YAML or JSON file (``-`` for stdin); a clear error for anything else."""
    import yaml

    from gpuctl.cluster.errors import SourceError

    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        from gpuctl.core.errors import not_text

        raise SourceError(f"{path}: cannot read: {not_text(exc)}") from None
    except OSError as exc:
        raise SourceError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        docs = [d for d in yaml.load_all(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) if d is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else path
        raise SourceError(f"{where}: not valid YAML or JSON: {getattr(exc, 'problem', None) or exc}") from None
    if len(docs) != 1 or not isinstance(docs[0], dict):
        raise UsageError(
            f"{path}: expected exactly one {EXPECTED_KIND[kind.value]} object, found {len(docs)} documents"
        )
    obj: dict[str, Any] = docs[0]
    for field, value in (
        ("metadata", obj.get("metadata")),
        ("spec", obj.get("spec")),
        (
            "metadata.labels",
            (obj.get("metadata") or {}).get("labels") if isinstance(obj.get("metadata"), dict) else None,
        ),
        (
            "metadata.annotations",
            (obj.get("metadata") or {}).get("annotations") if isinstance(obj.get("metadata"), dict) else None,
        ),
    ):
        if value is not None and not isinstance(value, dict):
            raise UsageError(f"{path}: {field} must be a mapping, not {type(value).__name__}")
    if obj.get("kind") != EXPECTED_KIND[kind.value]:
        raise UsageError(
            f"{path}: kind is {obj.get('kind')!r}, not {EXPECTED_KIND[kind.value]}: use `gpuctl webhook dry-run {_kind_arg(obj.get('kind'))} -f {path}`"
        )
    return obj


def _kind_arg(kind: Any) -> str:
    for arg, k in EXPECTED_KIND.items():
        if k == kind:
            return arg
    return "<pod|workload|instancetype|instance>"


def webhook_context(source: "Source", kind: WebhookKind, obj: dict[str, Any]) -> "WebhookContext":
    """Read only what the webhooks of this kind look up."""
    from gpuctl.cluster import kinds, read
    from gpuctl.core.kvcache import (
        KVCacheContext,
        parse_kvcache_backend,
        parse_kvcache_pool,
        parse_kvcache_pool_binding,
    )
    from gpuctl.core.pins import PinContext
    from gpuctl.core.webhooks import KVCACHE_INJECT_LABEL, WebhookContext
    from gpuctl.core.workloads import parse_local_queue

    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    namespace = meta.get("namespace") or "default"
    if kind is WebhookKind.POD:
        kv = KVCacheContext()
        if labels.get(KVCACHE_INJECT_LABEL) == "true":
            kv = KVCacheContext.of(
                [parse_kvcache_pool_binding(o) for o in _optional(source, kinds.KVCACHE_BINDING, namespace)],
                [parse_kvcache_pool(o) for o in _optional(source, kinds.KVCACHE_POOL, None)],
                [parse_kvcache_backend(o) for o in _optional(source, kinds.KVCACHE_BACKEND, None)],
                request_namespace=namespace,
            )
        types = read.instancetypes(source) if "kueue.x-k8s.io/queue-name" in labels else []
        return WebhookContext(instancetypes=types, kvcache=kv)
    if kind is WebhookKind.WORKLOAD:
        queues = [parse_local_queue(o) for o in source.list(kinds.LOCALQUEUE, namespace=namespace)]
        cqs = read.cluster_queues(source)
        by_name = {t.name: t for t in read.instancetypes(source)}
        pins = PinContext(
            {(q.namespace, q.name): q.cluster_queue for q in queues}, {n: q.labels for n, q in cqs.items()}, by_name
        )
        return WebhookContext(pins=pins)
    if kind is WebhookKind.INSTANCE:
        type_name = (obj.get("spec") or {}).get("type")
        types = read.instancetypes(source, [type_name]) if isinstance(type_name, str) and type_name else []
        backing = read.cluster_queues(source) if types else {}
        return WebhookContext(
            instancetypes=types, stop_policies={n: q.stop_policy for n, q in backing.items() if n == type_name}
        )
    if kind is WebhookKind.INSTANCETYPE:
        return WebhookContext(flavors=tuple(read.flavors(source).values()))
    return WebhookContext()


def _optional(source: "Source", kind: Any, namespace: str | None) -> list[dict[str, Any]]:
    from gpuctl.cluster.errors import SourceError

    try:
        return source.list(kind, namespace=namespace)
    except SourceError as exc:
        if "is not served" in str(exc):
            return []
        raise
