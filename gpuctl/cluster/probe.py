"""Live probes of the deployed admission chain for ``gpuctl doctor``: the webhook endpoints reached as the API server
reaches them (TLS verified with each configuration's caBundle, ``/readyz``, the review latency histogram), and
server-side dry runs the API server sends through the webhooks. Every call is bounded in time and size."""

from __future__ import annotations

import base64
import binascii
import http.client
import json
import re
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from functools import partial

from gpuctl.cluster.errors import SourceError
from gpuctl.cluster.kinds import INSTANCETYPE, POD
from gpuctl.cluster.live import LiveSource
from gpuctl.core.doctor import EndpointProbe, LiveReview, ReviewProbe, WebhookEntry, histogram_quantile, review_probes

READYZ_LIMIT = 64 * 1024
METRICS_LIMIT = 8 * 1024 * 1024
LATENCY_METRIC = "gpuctl_webhook_duration_seconds"
# OpenSSL's verify results that say the chain does not lead to the bundle's CA (not a hostname or a date problem).
_UNTRUSTED = frozenset({2, 18, 19, 20, 21, 27})

_BUCKET = re.compile(LATENCY_METRIC + r"_bucket\{(?P<labels>[^}]*)\}\s+(?P<value>\S+)")
_LE = re.compile(r'(?:^|,)\s*le="(?P<le>[^"]+)"')


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


class _Unusable(ValueError):
    """A caBundle that is not a base64-encoded PEM certificate."""


def _context(ca_bundle: str) -> ssl.SSLContext:
    try:
        pem = base64.b64decode(ca_bundle, validate=True).decode("ascii")
        return ssl.create_default_context(cadata=pem)
    except (binascii.Error, UnicodeDecodeError, ValueError, ssl.SSLError):
        raise _Unusable("the caBundle is not a base64-encoded PEM certificate") from None


def _https_get(base: str, context: ssl.SSLContext, timeout: float, path: str, limit: int) -> tuple[int, str]:
    url = base + path
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=context) as r:
            body = r.read(limit + 1)
            status = int(r.status)
    except urllib.error.HTTPError as exc:
        body, status = exc.read(limit + 1), int(exc.code)
    if len(body) > limit:
        raise OSError(f"{url} answered more than {limit} bytes")
    return status, body.decode("utf-8", "replace")


def _finish(probe: EndpointProbe, get: Callable[[str, int], tuple[int, str]]) -> EndpointProbe:
    """/readyz and the latency histogram through ``get(path, limit) -> (status, body)``."""
    status, body = get("/readyz", READYZ_LIMIT)
    if status in (401, 403):
        return replace(probe, allowed=False, error=body.strip()[:200] or f"answered {status}")
    if status == 503 and "no endpoints available" in body:
        return replace(probe, error="no endpoint answers for the Service (no ready replica)")
    refusal = _status_message(body)
    if status >= 400 and refusal:
        # The API server's own answer (a Status object), not the operator's: it could not proxy to the Service.
        return replace(probe, error=f"the API server cannot reach the Service: {refusal}")
    probe = replace(probe, readyz=status, readyz_body=body.strip())
    status, metrics = get("/metrics", METRICS_LIMIT)
    if status == 200:
        buckets = latency_buckets(metrics)
        if buckets and buckets[-1][1] > 0:
            probe = replace(probe, p99_seconds=histogram_quantile(buckets, 0.99), reviews=int(buckets[-1][1]))
    return probe


def _status_message(body: str) -> str:
    """The message of a Kubernetes ``Status`` object, or "" when the body is not one."""
    try:
        obj = json.loads(body)
    except ValueError:
        return ""
    return str(obj.get("message") or "") if isinstance(obj, dict) and obj.get("kind") == "Status" else ""


def _tls_failure(probe: EndpointProbe, error: ssl.SSLError) -> EndpointProbe:
    if isinstance(error, ssl.SSLCertVerificationError):
        text = error.verify_message or str(error)
        if error.verify_code in _UNTRUSTED:
            return replace(
                probe, error=f"TLS: {text}: the caBundle does not verify the serving certificate", ca_verified=False
            )
        return replace(probe, error=f"TLS: the serving certificate is refused: {text}")
    from gpuctl.cluster.failures import plain

    return replace(probe, error=f"TLS failed: {plain(str(getattr(error, 'reason', None) or error))}")


def _reason(exc: object, timeout: float) -> str:
    """Why an endpoint could not be read, in plain words: a timeout (also one in the TLS handshake) says how long
    was waited."""
    from gpuctl.cluster.failures import plain

    if isinstance(exc, TimeoutError) or "timed out" in str(exc):
        return f"no answer within {timeout:g} s (it accepts the connection and answers nothing: a hung process?)"
    return plain(str(exc)) or type(exc).__name__


def probe_endpoints(live: LiveSource, entries: Sequence[WebhookEntry], timeout: float) -> list[EndpointProbe]:
    """One probe per endpoint and caBundle gpuctl's webhooks are registered with (a missing caBundle is the webhook
    audit's finding, not probed)."""
    groups: dict[tuple[str, str], list[WebhookEntry]] = {}
    for e in entries:
        if not e.ours or not e.ca_bundle:
            continue
        if e.url:
            try:
                parts = urllib.parse.urlsplit(e.url)
            except ValueError:
                continue
            target = f"{parts.scheme}://{parts.netloc}"
        elif e.service is not None:
            target = f"service {e.service[0]}/{e.service[1]}:{e.service[2]}"
        else:
            continue
        groups.setdefault((target, e.ca_bundle), []).append(e)
    out = []
    for (target, ca), group in sorted(groups.items()):
        probe = EndpointProbe(target, tuple(sorted({e.configuration for e in group})))
        try:
            if target.startswith("service "):
                service = group[0].service
                assert service is not None
                out.append(_finish(probe, partial(live.service_get, service[0], service[1], service[2])))
            else:
                out.append(
                    _finish(replace(probe, ca_verified=True), partial(_https_get, target, _context(ca), timeout))
                )
        except _Unusable as exc:
            out.append(replace(probe, error=str(exc), ca_verified=False))
        except ssl.SSLError as exc:
            out.append(_tls_failure(probe, exc))
        except urllib.error.URLError as exc:
            reason = exc.reason
            if isinstance(reason, ssl.SSLError):
                out.append(_tls_failure(probe, reason))
            else:
                out.append(replace(probe, error=f"cannot reach it: {_reason(reason, timeout)}", ca_verified=None))
        except (OSError, SourceError, ValueError, http.client.HTTPException) as exc:
            out.append(replace(probe, error=f"cannot reach it: {_reason(exc, timeout)}", ca_verified=None))
    return out


def dry_run_reviews(live: LiveSource, entries: Sequence[WebhookEntry], namespace: str) -> list[LiveReview]:
    """The doctor's probes (:func:`gpuctl.core.doctor.review_probes`), created with ``dryRun=All``: the API server
    calls the webhooks over TLS with their caBundle and persists nothing. Each tells whether its webhook ran (its
    change is in the returned object, or its refusal is the answer), not only whether the object was accepted."""
    config_of = {e.name: e.configuration for e in entries if e.ours}
    waits = {e.name: e.timeout_seconds or DEFAULT_WEBHOOK_TIMEOUT for e in entries if e.ours}
    probes = [p for p in review_probes(namespace) if p.webhook in config_of]  # unregistered: the audit says so
    if not probes:
        return []
    from concurrent.futures import ThreadPoolExecutor

    # Side by side: a hung webhook costs its timeout once, not once per probe.
    with ThreadPoolExecutor(max_workers=min(8, len(probes)), thread_name_prefix="gpuctl-review") as pool:
        return list(pool.map(lambda p: _review(live, p, config_of, waits, namespace), probes))


DEFAULT_WEBHOOK_TIMEOUT = 10
"""The API server's wait on a webhook whose configuration sets no ``timeoutSeconds``."""
ANSWER_MARGIN = 5.0
"""How much longer than a webhook's timeout the API server is given to answer a dry run it sends through it."""


def _review(
    live: LiveSource, p: ReviewProbe, config_of: Mapping[str, str], waits: Mapping[str, int], namespace: str
) -> LiveReview:
    kind = POD if p.kind == "Pod" else INSTANCETYPE
    review = LiveReview((config_of[p.webhook],), p.request, 0.0, webhook=p.webhook)
    started = time.monotonic()
    returned: dict[str, object] | None = None
    error = ""
    wait = waits[p.webhook] + ANSWER_MARGIN
    try:
        returned = live.create(
            kind,
            dict(p.body),
            namespace=namespace if kind.namespaced else None,
            dry_run=True,
            read_timeout=wait,
        )
    except SourceError as exc:
        error = str(exc)
        if error.startswith("cannot reach the API server") and "timed out" in error:
            # The API server answers every other request: what it waits on is the webhook.
            error = (
                f'failed calling webhook "{p.webhook}": no answer within {wait:g} s, the API server waiting on '
                f"the webhook for its timeoutSeconds ({waits[p.webhook]} s)"
            )
    seconds = time.monotonic() - started
    failed = re.search(r'failed calling webhook "([^"]+)"', error)
    if failed and failed.group(1) in config_of:
        review = replace(review, configurations=(config_of[failed.group(1)],), error=error)
    elif failed:
        review = replace(review, error=error, foreign=failed.group(1))
    elif error and "denied the request" not in error and "cannot create resource" in error:
        review = replace(review, error=error, sent=False)  # RBAC: the user may not create it
    elif not p.ran(returned, error):
        answer = f"refused: {error[:200]}" if error else "admitted without its change"
        review = replace(review, ran=False, answer=answer)
    return replace(review, seconds=seconds)
