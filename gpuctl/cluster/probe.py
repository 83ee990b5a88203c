"""Live probes of the deployed admission chain for ``gpuctl doctor``: the webhook endpoints reached as the API server
reaches them (TLS verified with each configuration's caBundle, ``/readyz``, the review latency histogram), and
server-side dry runs the API server sends through the webhooks. Every call is bounded in time and size."""

from __future__ import annotations

import base64
import binascii
import re
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial

from gpuctl.cluster.errors import SourceError
from gpuctl.cluster.kinds import INSTANCETYPE, POD
from gpuctl.cluster.live import LiveSource
from gpuctl.core import naming
from gpuctl.core.doctor import EndpointProbe, LiveReview, WebhookEntry, histogram_quantile

READYZ_LIMIT = 64 * 1024
METRICS_LIMIT = 8 * 1024 * 1024
LATENCY_METRIC = "gpuctl_webhook_duration_seconds"
PROBE_NAME = "gpuctl-doctor-probe"

_BUCKET = re.compile(LATENCY_METRIC + r"_bucket\{(?P<labels>[^}]*)\}\s+(?P<value>\S+)")
_LE = re.compile(r'le="(?P<le>[^"]+)"')


def latency_buckets(metrics: str) -> list[tuple[float, float]]:
    """The review latency histogram of a ``/metrics`` page, summed over its label sets: ``(le, count)``."""
    sums: dict[float, float] = {}
    for m in _BUCKET.finditer(metrics):
        le = _LE.search(m.group("labels"))
        if le is None:
            continue
        try:
            bound, count = float(le.group("le")), float(m.group("value"))
        except ValueError:
            continue
        sums[bound] = sums.get(bound, 0.0) + count
    return sorted(sums.items())


def _https_get(url: str, context: ssl.SSLContext, limit: int, timeout: float) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=context) as r:
            body = r.read(limit + 1)
            status = int(r.status)
    except urllib.error.HTTPError as exc:
        body, status = exc.read(limit + 1), int(exc.code)
    if len(body) > limit:
        raise OSError(f"{url} answered more than {limit} bytes")
    return status, body.decode("utf-8", "replace")


def _https_path(base: str, context: ssl.SSLContext, timeout: float, path: str, limit: int) -> tuple[int, str]:
    return _https_get(base + path, context, limit, timeout)


def _context(ca_bundle: str) -> ssl.SSLContext:
    try:
        pem = base64.b64decode(ca_bundle, validate=True).decode("ascii")
    except (binascii.Error, UnicodeDecodeError):
        raise ssl.SSLError("the caBundle is not base64-encoded PEM") from None
    return ssl.create_default_context(cadata=pem)


def _finish(probe: EndpointProbe, get: Callable[[str, int], tuple[int, str]]) -> EndpointProbe:
    """/readyz and the latency histogram through ``get(path, limit) -> (status, body)``."""
    status, body = get("/readyz", READYZ_LIMIT)
    probe = replace(probe, readyz=status, readyz_body=body.strip())
    status, metrics = get("/metrics", METRICS_LIMIT)
    if status == 200:
        buckets = latency_buckets(metrics)
        if buckets and buckets[-1][1] > 0:
            probe = replace(probe, p99_seconds=histogram_quantile(buckets, 0.99), reviews=int(buckets[-1][1]))
    return probe


def probe_endpoints(live: LiveSource, entries: Sequence[WebhookEntry], timeout: float) -> list[EndpointProbe]:
    """One probe per endpoint and caBundle the operator's webhooks are registered with."""
    from gpuctl.core.webhooks import REGISTRY

    ours = {w.name for w in REGISTRY}
    groups: dict[tuple[str, str], list[WebhookEntry]] = {}
    for e in entries:
        if e.name not in ours:
            continue
        if e.url:
            parts = urllib.parse.urlsplit(e.url)
            target = f"{parts.scheme}://{parts.netloc}"
        elif e.service is not None:
            target = f"service {e.service[0]}/{e.service[1]}:{e.service[2]}"
        else:
            continue
        groups.setdefault((target, e.ca_bundle), []).append(e)
    out = []
    for (target, ca), group in sorted(groups.items()):
        configs = tuple(sorted({e.configuration for e in group}))
        probe = EndpointProbe(target, configs)
        try:
            if target.startswith("service "):
                ns, _, rest = target.removeprefix("service ").partition("/")
                name, _, port = rest.partition(":")
                out.append(_finish(probe, partial(live.service_get, ns, name, int(port))))
                continue
            if not ca:
                out.append(
                    EndpointProbe(target, configs, error="no caBundle: the API server cannot verify the endpoint")
                )
                continue
            context = _context(ca)
            probe = EndpointProbe(target, configs, ca_verified=True)
            out.append(_finish(probe, partial(_https_path, target, context, timeout)))
        except (OSError, SourceError) as exc:
            reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
            if isinstance(reason, ssl.SSLError):
                text = getattr(reason, "verify_message", "") or reason.reason or str(reason)
                error = f"TLS failed: {text} (the caBundle does not verify the serving certificate)"
                out.append(EndpointProbe(target, configs, error=error, ca_verified=False))
            else:
                out.append(EndpointProbe(target, configs, error=f"cannot reach it: {reason}"))
    return out


def dry_run_reviews(live: LiveSource, entries: Sequence[WebhookEntry], namespace: str) -> list[LiveReview]:
    """A Pod the Pod webhook selects and a CPU InstanceType, created with ``dryRun=All``: the API server calls the
    webhooks over TLS with their caBundle and persists nothing. A denial is an answer; a failed call is not."""
    from gpuctl.core.webhooks import REGISTRY

    ours = {w.name for w in REGISTRY}
    config_of = {e.name: e.configuration for e in entries if e.name in ours}
    requests = [
        (
            POD,
            f"dry-run create Pod {namespace}/{PROBE_NAME}",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": PROBE_NAME,
                    "namespace": namespace,
                    "labels": {naming.LABEL_QUEUE_NAME: PROBE_NAME},
                },
                "spec": {"containers": [{"name": "probe", "image": PROBE_NAME}]},
            },
            ("pod-accelerators.gpustack.ai",),
        ),
        (
            INSTANCETYPE,
            f"dry-run create InstanceType {PROBE_NAME}",
            {
                "apiVersion": f"{INSTANCETYPE.group}/{INSTANCETYPE.version}",
                "kind": "InstanceType",
                "metadata": {"name": PROBE_NAME},
                "spec": {"os": "linux", "arch": "amd64", "generalGroup": "generic"},
            },
            ("instancetype-default.gpustack.ai", "instancetype-validate.gpustack.ai"),
        ),
    ]
    out = []
    for kind, what, body, webhooks in requests:
        configs = sorted({config_of[w] for w in webhooks if w in config_of})
        if not configs:
            continue
        started = time.monotonic()
        error, sent = "", True
        try:
            live.create(kind, body, namespace=namespace if kind.namespaced else None, dry_run=True)
        except SourceError as exc:
            text = str(exc)
            failed = re.search(r'failed calling webhook "([^"]+)"', text)
            if failed:
                error = text
                named = config_of.get(failed.group(1))
                configs = [named] if named else configs
            elif text.startswith("forbidden"):
                error, sent = text, False
            # Anything else is an answer (a denial, a schema refusal after the mutating webhooks).
        out.append(LiveReview(", ".join(configs), what, time.monotonic() - started, error, sent))
    return out
