"""Prometheus metrics in the text exposition format: requests, denials and a latency histogram per webhook, and
controller writes."""

from __future__ import annotations

import threading
from collections import defaultdict

BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0)


class Metrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: dict[str, int] = defaultdict(int)
        self.denials: dict[str, int] = defaultdict(int)
        self.mutations: dict[str, int] = defaultdict(int)
        self.buckets: dict[str, list[int]] = defaultdict(lambda: [0] * len(BUCKETS))
        self.seconds: dict[str, float] = defaultdict(float)
        self.writes: dict[str, int] = defaultdict(int)
        self.connection_errors = 0

    def observe(self, webhook: str, seconds: float, allowed: bool, mutated: bool) -> None:
        with self._lock:
            self.requests[webhook] += 1
            self.seconds[webhook] += seconds
            if not allowed:
                self.denials[webhook] += 1
            if mutated:
                self.mutations[webhook] += 1
            counts = self.buckets[webhook]
            for i, bound in enumerate(BUCKETS):
                if seconds <= bound:
                    counts[i] += 1

    def wrote(self, controller: str) -> None:
        with self._lock:
            self.writes[controller] += 1

    def render(self) -> str:
        with self._lock:
            lines = [
                "# HELP gpuctl_webhook_requests_total Admission reviews answered, per webhook.",
                "# TYPE gpuctl_webhook_requests_total counter",
                *(f'gpuctl_webhook_requests_total{{webhook="{w}"}} {n}' for w, n in sorted(self.requests.items())),
                "# HELP gpuctl_webhook_denials_total Admission reviews denied, per webhook.",
                "# TYPE gpuctl_webhook_denials_total counter",
                *(f'gpuctl_webhook_denials_total{{webhook="{w}"}} {n}' for w, n in sorted(self.denials.items())),
                "# HELP gpuctl_webhook_mutations_total Admission reviews answered with a patch, per webhook.",
                "# TYPE gpuctl_webhook_mutations_total counter",
                *(f'gpuctl_webhook_mutations_total{{webhook="{w}"}} {n}' for w, n in sorted(self.mutations.items())),
                "# HELP gpuctl_webhook_duration_seconds Time to answer an admission review.",
                "# TYPE gpuctl_webhook_duration_seconds histogram",
            ]
            for w in sorted(self.requests):
                for bound, count in zip(BUCKETS, self.buckets[w], strict=True):
                    lines.append(f'gpuctl_webhook_duration_seconds_bucket{{webhook="{w}",le="{bound}"}} {count}')
                lines.append(f'gpuctl_webhook_duration_seconds_bucket{{webhook="{w}",le="+Inf"}} {self.requests[w]}')
                lines.append(f'gpuctl_webhook_duration_seconds_sum{{webhook="{w}"}} {self.seconds[w]:.6f}')
                lines.append(f'gpuctl_webhook_duration_seconds_count{{webhook="{w}"}} {self.requests[w]}')
            lines += [
                "# HELP gpuctl_controller_writes_total Objects written by a controller.",
                "# TYPE gpuctl_controller_writes_total counter",
                *(f'gpuctl_controller_writes_total{{controller="{c}"}} {n}' for c, n in sorted(self.writes.items())),
                "# HELP gpuctl_webhook_connection_errors_total Connections dropped before an answer (TLS or client errors).",
                "# TYPE gpuctl_webhook_connection_errors_total counter",
                f"gpuctl_webhook_connection_errors_total {self.connection_errors}",
            ]
        return "\n".join(lines) + "\n"
