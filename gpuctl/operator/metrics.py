"""The operator's Prometheus metrics (``prometheus_client``, one registry per process):

- webhooks: requests by outcome, denials, mutations and a latency histogram per webhook; open and refused connections;
- the check: verdicts by state, and the latency from seeing a Workload's quota reserved to writing its verdict;
- controllers: writes, API errors, work-queue depth and retries;
- the cache: whether each kind is synced and how long since the API server last answered its watch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
VERDICT_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0)


class _Gauges(Collector):
    """Gauges read at scrape time from the running parts (the cache, the work queues, the server)."""

    def __init__(self) -> None:
        self.sources: list[Callable[[], Iterable[GaugeMetricFamily]]] = []

    def collect(self) -> Iterator[GaugeMetricFamily]:
        for source in self.sources:
            yield from source()


class Metrics:
    def __init__(self) -> None:
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

    def render(self) -> bytes:
        return generate_latest(self.registry)


def gauge_family(name: str, documentation: str, labels: list[str], values: Iterable[tuple[list[str], float]]) -> Any:
    family = GaugeMetricFamily(name, documentation, labels=labels)
    for label_values, value in values:
        family.add_metric(label_values, value)
    return family
