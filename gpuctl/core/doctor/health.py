"""The operator's health: its Deployment (replicas, leader election), its leader Lease and how fresh it is, and its
own metrics (the check's verdict latency).
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuctl.core import naming
from gpuctl.core.doctor.records import (
    FAIL,
    INSTALL,
    OK,
    WARN,
    DeploymentRecord,
    Finding,
    LeaseRecord,
    WebhookEntry,
    duration_text,
    operator_fix,
    shell_word,
)
from gpuctl.core.queueing import epoch_seconds


def operator_health(
    deployment: DeploymentRecord | None,
    lease: LeaseRecord | None,
    served_by_service: bool,
    namespace: str,
    now: float,
    entries: Sequence[WebhookEntry] = (),
) -> list[Finding]:
    """The operator's replicas (when the webhooks are served by its Service) and its leader Lease."""
    out = []
    pods = operator_fix(namespace, deployment is not None)
    if deployment is None:
        if served_by_service:
            out.append(
                Finding(
                    "operator-replicas",
                    FAIL,
                    f"no Deployment {namespace}/{naming.OPERATOR_NAME}, yet the webhooks name its Service",
                    "every Pod the Pod webhook selects is refused while nothing serves it (failurePolicy Fail)",
                    INSTALL,
                )
            )
    elif deployment.ready == 0:
        out.append(
            Finding(
                "operator-replicas",
                FAIL,
                f"Deployment {deployment.namespace}/{deployment.name}: 0 of {deployment.replicas} replicas ready",
                "with no replica ready the Fail webhooks refuse every Pod and Instance they select",
                pods,
            )
        )
    elif deployment.ready < deployment.replicas:
        out.append(
            Finding(
                "operator-replicas",
                WARN,
                f"Deployment {deployment.namespace}/{deployment.name}: {deployment.ready} of {deployment.replicas} replicas ready",
                "two replicas keep the webhooks answering through a node's loss",
                pods,
            )
        )
    else:
        out.append(
            Finding(
                "operator-replicas",
                OK,
                f"Deployment {deployment.namespace}/{deployment.name}: {deployment.ready}/{deployment.replicas} ready",
            )
        )
    if lease is None:
        if deployment is not None and "--leader-elect" in deployment.args:
            out.append(
                Finding(
                    "operator-leader",
                    FAIL,
                    f"no Lease {namespace}/{naming.OPERATOR_NAME}: no replica leads",
                    "with --leader-elect only the Lease's holder runs the check, the status writer and the fit labels",
                    pods,
                )
            )
        elif deployment is not None and deployment.replicas > 1:
            out.append(
                Finding(
                    "operator-leader",
                    WARN,
                    f"Deployment {deployment.namespace}/{deployment.name} runs {deployment.replicas} replicas "
                    "without --leader-elect",
                    "every replica runs the controllers: verdicts and status writes race",
                    f"kubectl -n {namespace} edit deployment {naming.OPERATOR_NAME} (add --leader-elect)",
                )
            )
        return out
    if deployment is not None and "--leader-elect" not in deployment.args:
        return out  # a Lease left from an earlier deployment: nothing leads by it now
    renewed = epoch_seconds(lease.renew_time)
    age = None if renewed is None else now - renewed
    acquired = epoch_seconds(lease.acquire_time)
    held = "" if acquired is None else f", leading for {duration_text(now - acquired)}"
    if age is None or age > lease.duration_seconds:
        out.append(
            Finding(
                "operator-leader",
                FAIL,
                f"Lease {lease.namespace}/{lease.name}: {lease.holder or 'no holder'} last renewed "
                + ("never" if age is None else f"{duration_text(age)} ago")
                + f" (duration {lease.duration_seconds} s)",
                "no leader runs the check: Workloads wait at gate 3 and the views stop moving",
                pods,
            )
        )
    else:
        out.append(
            Finding(
                "operator-leader",
                OK,
                f"Lease {lease.namespace}/{lease.name}: {lease.holder}, renewed {duration_text(max(age, 0))} ago{held}",
            )
        )
        out += _url_ports(entries, lease, age)
    return out


def _url_ports(entries: Sequence[WebhookEntry], lease: LeaseRecord, age: float) -> list[Finding]:
    """Webhooks registered by URL whose port is not the one the running operator serves on (its Lease says)."""
    if lease.serving_port is None:
        return []
    wrong = [e for e in entries if e.ours and e.url and _url_port(e.url) not in (None, lease.serving_port)]
    if not wrong:
        return []
    by_config: dict[tuple[bool, str], list[dict[str, object]]] = {}
    for e in wrong:
        fixed = _with_port(e.url, lease.serving_port)
        by_config.setdefault((e.mutating, e.configuration), []).append(
            {"op": "replace", "path": f"/webhooks/{e.index}/clientConfig/url", "value": fixed}
        )
    fixes = [
        f"kubectl patch {'mutating' if mutating else 'validating'}webhookconfiguration {name} --type json "
        f"-p {shell_word(ops)}"
        for (mutating, name), ops in sorted(by_config.items())
    ]
    first = wrong[0]
    return [
        Finding(
            "webhook-url",
            FAIL,
            f"{first.name} ({first.configuration}) calls {first.url}"
            + (f" and {len(wrong) - 1} more webhook(s) call that port" if len(wrong) > 1 else "")
            + f", while the operator serves on port {lease.serving_port} (its Lease, renewed "
            f"{duration_text(max(age, 0))} ago)",
            "the process runs, but the API server calls a port where it does not answer: a Fail webhook refuses "
            "everything it selects",
            " && ".join(fixes),
        )
    ]


def _url_port(url: str) -> int | None:
    from urllib.parse import urlsplit

    try:
        return urlsplit(url).port or 443
    except ValueError:
        return None


def _with_port(url: str, port: int) -> str:
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    return urlunsplit(parts._replace(netloc=f"{host}:{port}"))


def histogram_quantile(buckets: Sequence[tuple[float, float]], q: float) -> float | None:
    """The q-quantile of a Prometheus histogram from its cumulative ``(le, count)`` buckets, interpolated within a
    bucket as Prometheus does; None with no observation. The +Inf bucket answers the largest finite bound."""
    ordered = sorted(buckets)
    if not ordered or ordered[-1][1] <= 0:
        return None
    rank = q * ordered[-1][1]
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in ordered:
        if count >= rank:
            if bound == float("inf"):
                return lower_bound
            width = count - lower_count
            return bound if width <= 0 else lower_bound + (bound - lower_bound) * (rank - lower_count) / width
        lower_bound, lower_count = bound, count
    return lower_bound
