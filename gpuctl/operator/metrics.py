"""The operator's Prometheus metrics (``prometheus_client``, one registry per process):

- webhooks: requests by outcome, denials, mutations and a latency histogram per webhook; open and refused connections;
- the check: verdicts by state, and the latency from seeing a Workload's quota reserved to writing its verdict;
- controllers: writes, API errors, work-queue depth and retries;
- pools and queues: the views the status writer published, free and stranded capacity and the fragmentation score
  per pool and view; pending Workloads, the head's age and Workloads held per gate, per ClusterQueue;
- the cache: whether each kind is synced and how long since the API server last answered its watch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from gpuctl.core.fragmentation import Shape, ViewFragmentation, demand_shapes
from gpuctl.core.queueing import epoch_seconds, queue_timestamp
from gpuctl.core.workloads import Workload
from gpuctl.operator.workqueue import WorkQueue

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
VERDICT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0)
"""Fine below the 0.2 s a verdict is meant to take, so a scrape tells the operator's share of it."""


class _Gauges(Collector):
    """Gauges read at scrape time from the running parts (the cache, the work queues, the server)."""

    def __init__(self) -> None:
        self.sources: list[Callable[[], Iterable[GaugeMetricFamily]]] = []

    def collect(self) -> Iterator[GaugeMetricFamily]:
        for source in self.sources:
            yield from source()


class Metrics:
    def __init__(self) -> None:
        self.texts: list[Callable[[], Iterable[bytes]]] = []
        """Families rendered by their owners as exposition text (kept from scrape to scrape where they are large),
        written after the registry's."""
        self.registry = CollectorRegistry(auto_describe=False)
        r = self.registry
        self.requests = Counter(
            "gpuctl_webhook_requests",
            "AdmissionReviews answered, by webhook and outcome.",
            ["webhook", "outcome"],
            registry=r,
        )
        self.denials = Counter("gpuctl_webhook_denials", "Reviews denied, by webhook.", ["webhook"], registry=r)
        self.mutations = Counter("gpuctl_webhook_mutations", "Reviews answered with a patch.", ["webhook"], registry=r)
        self.duration = Histogram(
            "gpuctl_webhook_duration_seconds",
            "Time from a review's arrival to its answer, by webhook.",
            ["webhook"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.connections_refused = Counter(
            "gpuctl_webhook_connections_refused",
            "Connections closed for exceeding a limit, by reason.",
            ["reason"],
            registry=r,
        )
        self.verdicts = Counter("gpuctl_check_verdicts", "Gate-3 verdicts computed, by state.", ["state"], registry=r)
        self.verdict_latency = Histogram(
            "gpuctl_check_verdict_latency_seconds",
            "From seeing a Workload's quota reserved to writing its check state.",
            buckets=VERDICT_BUCKETS,
            registry=r,
        )
        self.writes = Counter(
            "gpuctl_controller_writes", "Writes to the API server, by controller.", ["controller"], registry=r
        )
        self.api_errors = Counter(
            "gpuctl_api_errors", "API calls that failed, by controller (or informer).", ["component"], registry=r
        )
        self.retries = Counter(
            "gpuctl_workqueue_retries", "Keys requeued after a failure, by controller.", ["controller"], registry=r
        )
        self.gauges = _Gauges()
        r.register(self.gauges)

    # ------------------------------------------------------------------------------------------- recording

    def observe(self, webhook: str, seconds: float, allowed: bool, mutated: bool, outcome: str = "answered") -> None:
        self.requests.labels(webhook, outcome).inc()
        self.duration.labels(webhook).observe(seconds)
        if not allowed:
            self.denials.labels(webhook).inc()
        if mutated:
            self.mutations.labels(webhook).inc()

    def wrote(self, controller: str) -> None:
        self.writes.labels(controller).inc()

    def gauge(self, source: Callable[[], Iterable[GaugeMetricFamily]]) -> None:
        self.gauges.sources.append(source)

    def text(self, source: Callable[[], Iterable[bytes]]) -> None:
        """Register families rendered as text (:func:`family_header`, :func:`sample_lines`): their names must be no
        other family's."""
        self.texts.append(source)

    def render(self) -> bytes:
        return generate_latest(self.registry) + b"".join(chunk for source in self.texts for chunk in source())


def counter_family(name: str, documentation: str, labels: list[str], values: Iterable[tuple[list[str], float]]) -> Any:
    """A counter read off a count kept elsewhere (``name`` without ``_total``, which the exposition adds)."""
    family = CounterMetricFamily(name, documentation, labels=labels)
    for label_values, value in values:
        family.add_metric(label_values, value)
    return family


def event_families(queued: int, recorded: int, aggregated: int, dropped: Mapping[str, int]) -> Iterator[Any]:
    """The Event recorder: Events waiting to be written, and every occurrence by what became of it."""
    yield gauge_family("gpuctl_events_queued", "Events (and series updates) waiting to be written.", [], [([], queued)])
    outcomes = {"recorded": recorded, "aggregated": aggregated, **{f"dropped-{k}": v for k, v in dropped.items()}}
    yield counter_family(
        "gpuctl_events",
        "Occurrences recorded: written, folded into a series, or dropped (rate-limited, queue-full, failed).",
        ["outcome"],
        (([outcome], float(n)) for outcome, n in sorted(outcomes.items())),
    )


def gauge_family(name: str, documentation: str, labels: list[str], values: Iterable[tuple[list[str], float]]) -> Any:
    family = GaugeMetricFamily(name, documentation, labels=labels)
    for label_values, value in values:
        family.add_metric(label_values, value)
    return family


# ----------------------------------------------------------------------------------------------- pools and queues

VIEW_FIELDS = ("accelerator", "acceleratorShared", "acceleratorSliced", "acceleratorPartitioned", "cpu")

Pools = Mapping[str, tuple[Mapping[str, Any], tuple[ViewFragmentation, ...]]]
"""Per InstanceType: the status views the status writer published, and the pool's fragmentation."""


def pool_gauges(pools: Pools) -> Iterator[Any]:
    """Per InstanceType and view: the published views, free and stranded capacity and the fragmentation score."""
    for field, doc in (
        ("onceMaxRequest", "The largest single request the view can take now, in its unit."),
        ("remaining", "What the view has left, in its unit."),
        ("capacity", "The view's capacity, in its unit."),
    ):
        yield gauge_family(
            f"gpuctl_pool_{_snake(field)}",
            doc,
            ["instancetype", "view"],
            (
                ([name, view], float(status[view][field]))
                for name, (status, _) in sorted(pools.items())
                for view in VIEW_FIELDS
                if isinstance(status.get(view), dict)
            ),
        )
    yield gauge_family(
        "gpuctl_pool_free",
        "Free capacity per view (percent of a card for EX, SL and PT; shares for SH).",
        ["instancetype", "view"],
        (([name, f.view], float(f.free)) for name, (_, frag) in sorted(pools.items()) for f in frag),
    )
    yield gauge_family(
        "gpuctl_pool_stranded",
        "Free capacity requests of a shape cannot use, per view and shape (the view's unit).",
        ["instancetype", "view", "shape"],
        (
            ([name, f.view, str(fit.shape)], float(fit.stranded))
            for name, (_, frag) in sorted(pools.items())
            for f in frag
            for fit in f.fits
        ),
    )
    yield gauge_family(
        "gpuctl_pool_fragmentation_score",
        "Share of free capacity the pending (or reference) shapes cannot use, 0 to 1.",
        ["instancetype", "view"],
        (([name, f.view], f.score) for name, (_, frag) in sorted(pools.items()) for f in frag),
    )


def usage_families(
    held: Mapping[tuple[str, str, str], float], reserved: Mapping[tuple[str, str], float]
) -> Iterator[Any]:
    """Who holds what, in card-equivalents by the credits fold (:func:`gpuctl.core.usage.usage_gauges`)."""
    yield gauge_family(
        "gpuctl_usage_card_equivalents",
        "Card-equivalents held by running Pods, per namespace, InstanceType and mode (exclusive, shared, sliced, "
        "partitioned); namespace empty for what the ledger charges to no Pod.",
        ["namespace", "instancetype", "mode"],
        (([ns, pool, mode], v) for (ns, pool, mode), v in sorted(held.items())),
    )
    yield gauge_family(
        "gpuctl_usage_reserved_card_equivalents",
        "Card-equivalents reserved by admitted Workloads whose Pods hold no allocation yet (held but idle).",
        ["namespace", "instancetype"],
        (([ns, pool], v) for (ns, pool), v in sorted(reserved.items())),
    )


# ----------------------------------------------------------------------------------------------- as text
#
# The holder series are one per Pod and card: 40,000 and more on a large cluster, where prometheus_client's rendering
# alone took two seconds a scrape. Their lines are written here, as ``generate_latest`` writes them, node by node
# and Workload by Workload, and kept while what they were written from stays (``gpuctl.operator.scrape``).

HOLDER = "gpuctl_card_holder"
HOLDER_HELP = (
    "Card-equivalents a Pod holds on one card (the sum over its containers, by the credits fold); UUID is the card's "
    "id as the ledger records it, GPU_I_PROFILE a partition's profile and mig_uuid its MIG device (the DCGM "
    "exporter's names: join by UUID and GPU_I_PROFILE); GPU_I_ID is empty, the allocation record naming none."
)
RESERVED_BY_WORKLOAD = "gpuctl_workload_reserved_card_equivalents"
RESERVED_BY_WORKLOAD_HELP = "Card-equivalents an admitted Workload reserves whose Pods hold no allocation yet."


def family_header(name: str, documentation: str, kind: str = "gauge") -> bytes:
    """A family's ``# HELP`` and ``# TYPE`` lines, as ``generate_latest`` writes them."""
    doc = documentation.replace("\\", r"\\").replace("\n", r"\n")
    return f"# HELP {name} {doc}\n# TYPE {name} {kind}\n".encode()


def _escape(value: str) -> str:
    if "\\" in value or "\n" in value or '"' in value:
        return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
    return value


def sample_lines(name: str, labels: Sequence[str], rows: Iterable[tuple[Sequence[str], float]]) -> bytes:
    """A family's sample lines, byte for byte as ``generate_latest`` writes them (labels in name order)."""
    order = sorted(range(len(labels)), key=lambda i: labels[i])
    prefixes = [f'{name}{{{labels[order[0]]}="', *(f'",{labels[i]}="' for i in order[1:])] if labels else []
    out = []
    for values, value in rows:
        if prefixes:
            head = "".join(p + _escape(values[i]) for p, i in zip(prefixes, order, strict=True)) + '"} '
        else:
            head = name + " "
        out.append(head + floatToGoString(value) + "\n")  # type: ignore[no-untyped-call]
    return "".join(out).encode()


@dataclass(frozen=True, slots=True)
class QueueState:
    """What the queue gauges say that does not change with the clock: per ClusterQueue its pending count and head,
    and the Workloads held per ClusterQueue and gate."""

    pending: Mapping[str, tuple[int, Workload | None]]
    held: Mapping[tuple[str, str], int]
    checks: Mapping[str, tuple[str, tuple[tuple[str, str, str], ...]]] = dataclasses.field(default_factory=dict)
    """Per Workload held at gate 3 (``namespace/name``): its ClusterQueue and every AdmissionCheck on it."""


def queue_gauges(
    state: QueueState, fragmentation: Mapping[str, tuple[ViewFragmentation, ...]], now: float
) -> Iterator[Any]:
    """Per ClusterQueue: pending Workloads, the head's age and whether fragmentation blocks it; Workloads held per
    queue and gate."""
    pending: list[tuple[list[str], float]] = []
    age: list[tuple[list[str], float]] = []
    blocked: list[tuple[list[str], float]] = []
    for cq, (count, head) in state.pending.items():
        pending.append(([cq], float(count)))
        if head is not None:
            joined = epoch_seconds(queue_timestamp(head))
            age.append(([cq], max(0.0, now - joined) if joined is not None else 0.0))
            shapes = demand_shapes([head])
            frag = fragmentation.get(cq, ())
            blocked.append(([cq], 1.0 if shapes and _blocked(shapes[0], frag) else 0.0))
    yield gauge_family("gpuctl_queue_pending", "Pending Workloads per ClusterQueue.", ["cluster_queue"], pending)
    yield gauge_family(
        "gpuctl_queue_head_age_seconds",
        "How long the head of each ClusterQueue has waited since it joined the queue.",
        ["cluster_queue"],
        age,
    )
    yield gauge_family(
        "gpuctl_queue_head_blocked_by_fragmentation",
        "1 when the pool has free capacity enough for the head's request in total, but none of it usable.",
        ["cluster_queue"],
        blocked,
    )
    yield gauge_family(
        "gpuctl_workloads_held",
        "Workloads held, per ClusterQueue and the gate that holds them.",
        ["cluster_queue", "gate"],
        (([cq, gate], float(n)) for (cq, gate), n in sorted(state.held.items())),
    )
    yield gauge_family(
        "gpuctl_workload_admission_check",
        "Each AdmissionCheck on a Workload held at gate 3: its state and message (the first 200 characters).",
        ["namespace", "workload", "cluster_queue", "check", "state", "message"],
        (
            ([key.partition("/")[0], key.partition("/")[2], cq, name, check_state, message[:200]], 1.0)
            for key, (cq, checks) in sorted(state.checks.items())
            for name, check_state, message in checks
        ),
    )


def workqueue_gauges(queues: Sequence[tuple[str, WorkQueue[str]]]) -> Iterator[Any]:
    """Per controller: the keys waiting in its queue, and those waiting for a delay or a backoff."""
    yield gauge_family(
        "gpuctl_workqueue_depth",
        "Keys waiting in each controller's queue.",
        ["controller"],
        (([name], float(len(queue))) for name, queue in queues),
    )
    yield gauge_family(
        "gpuctl_workqueue_delayed",
        "Keys waiting for a delay or backoff.",
        ["controller"],
        (([name], float(queue.delayed)) for name, queue in queues),
    )


def _snake(name: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in name)


def _blocked(shape: Shape, frag: tuple[ViewFragmentation, ...]) -> bool:
    """The head's shape finds no usable room although the view's free capacity would hold it."""
    for f in frag:
        for fit in f.fits:
            if fit.shape == shape:
                need = shape.size * 100 if shape.view == "accelerator" else shape.size
                return fit.requests == 0 and f.free >= need
    return False
