"""The Grafana dashboard, the Prometheus alert and recording rules built on the operator's metrics, and the
ServiceMonitor that scrapes them (written to deploy/monitoring by ``make docs``): pools (the four views, free and
stranded capacity, the fragmentation score), queues (depth, the head's age, Workloads held per gate), the webhooks'
latency, and card-hours held and idle."""

from __future__ import annotations

from typing import Any

from gpuctl.core import naming

HEAD_WAIT_SECONDS = 900
"""The head's wait past which a pool whose free capacity would hold it, but not usably, is alerted on."""
WEBHOOK_P99_SECONDS = 5.0
"""Half the webhooks' 10 s timeout."""

POOL = 'instancetype=~"$instancetype"'
QUEUE = 'cluster_queue=~"$instancetype"'


def _panel(pid: int, title: str, exprs: list[tuple[str, str]], x: int, y: int, unit: str = "short") -> dict[str, Any]:
    return {
        "id": pid,
        "type": "timeseries",
        "title": title,
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "gridPos": {"x": x, "y": y, "w": 12, "h": 8},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "targets": [
            {"refId": chr(ord("A") + i), "expr": expr, "legendFormat": legend} for i, (expr, legend) in enumerate(exprs)
        ],
    }


def dashboard() -> dict[str, Any]:
    """A Grafana dashboard (JSON model) for the pools and queues, one InstanceType or all (``$instancetype``)."""
    panels = [
        _panel(
            1,
            "Remaining per view (view units)",
            [(f"gpuctl_pool_remaining{{{POOL}}}", "{{instancetype}} {{view}}")],
            0,
            0,
        ),
        _panel(
            2,
            "Largest single request per view",
            [(f"gpuctl_pool_once_max_request{{{POOL}}}", "{{instancetype}} {{view}}")],
            12,
            0,
        ),
        _panel(
            3,
            "Free and stranded capacity (% of a card; SH in shares)",
            [
                (f"gpuctl_pool_free{{{POOL}}}", "free {{instancetype}} {{view}}"),
                (f"gpuctl_pool_stranded{{{POOL}}}", "stranded {{instancetype}} {{view}} {{shape}}"),
            ],
            0,
            8,
        ),
        _panel(
            4,
            "Fragmentation score",
            [(f"gpuctl_pool_fragmentation_score{{{POOL}}}", "{{instancetype}} {{view}}")],
            12,
            8,
            "percentunit",
        ),
        _panel(
            5,
            "Pending Workloads and the head's age",
            [
                (f"gpuctl_queue_pending{{{QUEUE}}}", "pending {{cluster_queue}}"),
                (f"gpuctl_queue_head_age_seconds{{{QUEUE}}} / 60", "head age (min) {{cluster_queue}}"),
            ],
            0,
            16,
        ),
        _panel(
            6,
            "Workloads held per gate",
            [(f"sum by (gate) (gpuctl_workloads_held{{{QUEUE}}})", "gate {{gate}}")],
            12,
            16,
        ),
        _panel(
            7,
            "Webhook latency p99",
            [
                (
                    "histogram_quantile(0.99, sum by (le, webhook) (rate(gpuctl_webhook_duration_seconds_bucket[5m])))",
                    "{{webhook}}",
                )
            ],
            0,
            24,
            "s",
        ),
        _panel(
            8,
            "Gate-3 verdicts",
            [("sum by (state) (rate(gpuctl_check_verdicts_total[5m]))", "{{state}}")],
            12,
            24,
            "ops",
        ),
        _panel(
            9,
            "Card-hours per namespace (range of the dashboard)",
            [
                (
                    f"sum by (namespace) (sum_over_time(gpuctl_usage_card_equivalents{{{POOL}}}[$__range:5m])) / 12",
                    "{{namespace}}",
                )
            ],
            0,
            32,
        ),
        _panel(
            11,
            "Card-hours per namespace and mode, from the holders (range of the dashboard)",
            [
                (
                    "sum by (namespace, mode) (sum_over_time(namespace_mode:gpuctl_card_holder:sum[$__range:1m])) / 60",
                    "{{namespace}} {{mode}}",
                )
            ],
            0,
            40,
        ),
        _panel(
            12,
            "Card-hours per LocalQueue (range of the dashboard)",
            [
                (
                    "sum by (namespace, localqueue) "
                    "(sum_over_time(localqueue_mode:gpuctl_card_holder:sum[$__range:1m])) / 60",
                    "{{namespace}}/{{localqueue}}",
                )
            ],
            12,
            40,
        ),
        _panel(
            13,
            "Idle card-hours per namespace (below 5 % for 30m+; range of the dashboard)",
            [
                (
                    "sum by (namespace) (sum_over_time(namespace:gpuctl_card_holder_idle:sum[$__range:1m])) / 60",
                    "{{namespace}}",
                )
            ],
            0,
            48,
        ),
        _panel(
            14,
            "Top idle holders now (card-equivalents)",
            [("topk(10, pod:gpuctl_card_holder_idle:sum)", "{{namespace}}/{{pod}} on {{node}} {{UUID}}")],
            12,
            48,
        ),
        _panel(
            10,
            "Held but idle: cards reserved with nothing allocated",
            [
                (
                    f"sum by (namespace) (gpuctl_usage_reserved_card_equivalents{{{POOL}}})",
                    "{{namespace}}",
                )
            ],
            12,
            32,
        ),
    ]
    return {
        "title": "gpuctl: GPU pools and queues",
        "uid": "gpuctl-pools",
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "30s",
        "tags": ["gpuctl", "kueue", "gpu"],
        "templating": {
            "list": [
                {"name": "datasource", "type": "datasource", "query": "prometheus"},
                {
                    "name": "instancetype",
                    "type": "query",
                    "datasource": {"type": "prometheus", "uid": "${datasource}"},
                    "query": "label_values(gpuctl_pool_capacity, instancetype)",
                    "includeAll": True,
                    "multi": True,
                    "allValue": ".*",
                },
            ]
        },
        "panels": panels,
    }


def alert_rules() -> dict[str, Any]:
    """A PrometheusRule (prometheus-operator) with the alerts the metrics support."""
    rules = [
        {
            "alert": "GpuPoolHeadBlockedByFragmentation",
            "expr": (
                f"gpuctl_queue_head_blocked_by_fragmentation == 1 and on (cluster_queue) "
                f"gpuctl_queue_head_age_seconds > {HEAD_WAIT_SECONDS}"
            ),
            "for": "5m",
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "{{ $labels.cluster_queue }}: the head of the queue waits while free capacity would hold it",
                "description": (
                    "The pool's free capacity adds up to the head's request but is spread over cards none of which "
                    "can take it. `gpuctl fragmentation {{ $labels.cluster_queue }}` names the fewest Workloads to "
                    "move; `gpuctl simulate --workload NS/NAME --suggest` proves what would admit it."
                ),
            },
        },
        {
            "alert": "GpuQueueHeadWaitingLong",
            "expr": "gpuctl_queue_head_age_seconds > 3600",
            "for": "10m",
            "labels": {"severity": "info"},
            "annotations": {
                "summary": "{{ $labels.cluster_queue }}: the head of the queue has waited over an hour",
                "description": "`gpuctl queue {{ $labels.cluster_queue }}` shows who waits, needing what, and why.",
            },
        },
        {
            "alert": "GpuctlWebhookSlow",
            "expr": (
                "histogram_quantile(0.99, sum by (le, webhook) "
                f"(rate(gpuctl_webhook_duration_seconds_bucket[5m]))) > {WEBHOOK_P99_SECONDS}"
            ),
            "for": "10m",
            "labels": {"severity": "critical"},
            "annotations": {
                "summary": "webhook {{ $labels.webhook }}: p99 latency near its 10 s timeout",
                "description": "A webhook that times out fails its Pods closed: check the operator's load and `/readyz`.",
            },
        },
    ]
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "gpuctl", "labels": {"app.kubernetes.io/name": "gpuctl-operator"}},
        "spec": {
            "groups": [{"name": "gpuctl", "rules": rules}, {"name": "gpuctl-card-hours", "rules": recording_rules()}]
        },
    }


def service_monitor(metrics_port: str = "metrics") -> dict[str, Any]:
    """The Prometheus Operator's scrape of the operator's Service, port ``metrics_port``. ``honorLabels``: the holder
    series carry their Pods' ``namespace`` and ``pod``, which without it become ``exported_namespace`` and
    ``exported_pod`` under the operator's own (and every card-hour would be the operator's namespace's). Only the
    replica that leads exports the cluster-wide series, so scraping both counts nothing twice."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": {
            "name": naming.OPERATOR_NAME,
            "namespace": naming.OPERATOR_NAMESPACE,
            "labels": {"app.kubernetes.io/name": naming.OPERATOR_NAME},
        },
        "spec": {
            "selector": {"matchLabels": {"app.kubernetes.io/name": naming.OPERATOR_NAME}},
            "namespaceSelector": {"matchNames": [naming.OPERATOR_NAMESPACE]},
            "endpoints": [{"port": metrics_port, "path": "/metrics", "interval": "30s", "honorLabels": True}],
        },
    }


def recording_rules() -> list[dict[str, Any]]:
    """Per namespace and per LocalQueue, the card-equivalents held (by mode) and held idle now, sampled each minute:
    their ``sum_over_time(...[30d:1m]) / 60`` are the card-hours of a month (docs/usage.md gives the exact
    figures ``gpuctl usage --since`` computes)."""
    from gpuctl.core.cardhours import JOIN, Window, busy

    w = Window(until=0, seconds=60, step=60, idle_for=1800, idle_below=0.05)
    on = ", ".join(JOIN)
    idle_now = f"(sum_over_time(({busy(w)} < bool 0.05)[30m:1m]) >= bool 30)"
    held = "gpuctl_card_holder"
    return [
        {"record": "namespace_mode:gpuctl_card_holder:sum", "expr": f"sum by (namespace, mode) ({held})"},
        {"record": "localqueue_mode:gpuctl_card_holder:sum", "expr": f"sum by (namespace, localqueue, mode) ({held})"},
        {
            "record": "namespace:gpuctl_card_holder_idle:sum",
            "expr": f"sum by (namespace) ({held} * on({on}) group_left() {idle_now})",
        },
        {
            "record": "pod:gpuctl_card_holder_idle:sum",
            "expr": f"sum by (namespace, pod, workload, localqueue, node, UUID, GPU_I_PROFILE) "
            f"({held} * on({on}) group_left() {idle_now}) > 0",
        },
    ]
