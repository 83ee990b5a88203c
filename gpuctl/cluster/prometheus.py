"""Instant queries to Prometheus: at a URL, or through the API server's proxy to a Service (with the kubeconfig's
credentials, as ``kubectl`` reaches a Service). Every answer is bounded in size and time, and parsed into samples
here; an error names the query's purpose and Prometheus's own words."""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuctl.cluster.errors import SourceError
from gpuctl.core.cardhours import Sample

ANSWER_LIMIT = 64 * 1024 * 1024
"""The largest answer read (bytes)."""


class PrometheusError(SourceError):
    """Prometheus could not be reached, or refused or failed a query."""


@dataclass(frozen=True, slots=True)
class ServiceRef:
    """``NAMESPACE/NAME:PORT`` of a Service serving Prometheus' HTTP API."""

    namespace: str
    name: str
    port: int
    scheme: str = "http"

    @staticmethod
    def parse(text: str) -> ServiceRef:
        ns, slash, rest = text.partition("/")
        name, colon, port = rest.partition(":")
        if not slash or not colon or not ns or not name or not port.isdigit() or not 0 < int(port) < 65536:
            raise PrometheusError(
                f"--prometheus-service {text!r}: give NAMESPACE/NAME:PORT (e.g. monitoring/prometheus-k8s:9090)"
            )
        return ServiceRef(ns, name, int(port))


class Prometheus:
    """Prometheus' HTTP API at ``url``, or behind ``service`` on the cluster ``live`` reaches."""

    def __init__(
        self, url: str | None = None, *, service: ServiceRef | None = None, live: Any = None, timeout: float = 120.0
    ) -> None:
        if (url is None) == (service is None):
            raise PrometheusError("give --prometheus URL or --prometheus-service NAMESPACE/NAME:PORT")
        if url is not None:
            parsed = urllib.parse.urlparse(url)
            if parsed.scheme not in ("http", "https") or not parsed.netloc:
                raise PrometheusError(f"--prometheus {url!r}: give an http:// or https:// URL")
        self.url = url.rstrip("/") if url else None
        self.service = service
        self.live = live
        self.timeout = timeout

    def describe(self) -> str:
        if self.url:
            return self.url
        assert self.service is not None
        return f"service {self.service.namespace}/{self.service.name}:{self.service.port}"

    def query(self, expr: str, at: float, what: str = "query") -> list[Sample]:
        """An instant query at ``at`` (epoch seconds): its vector's samples (NaN and infinite values left out)."""
        params = {"query": expr, "time": f"{at:.3f}", "timeout": f"{int(self.timeout)}s"}
        body = self._get("/api/v1/query", params, what)
        try:
            answer = json.loads(body)
        except ValueError:
            raise PrometheusError(f"{self.describe()} answered the {what} with something not JSON") from None
        if not isinstance(answer, Mapping) or answer.get("status") != "success":
            error = answer.get("error") if isinstance(answer, Mapping) else None
            raise PrometheusError(f"{self.describe()} failed the {what}: {error or 'no status'}")
        data = answer.get("data")
        if not isinstance(data, Mapping):
            raise PrometheusError(f"{self.describe()} answered the {what} without data")
        kind = data.get("resultType")
        result = data.get("result")
        if kind == "scalar" and isinstance(result, list) and len(result) == 2:
            return [Sample({}, _number(result[1]))]
        if kind != "vector" or not isinstance(result, list):
            raise PrometheusError(f"{self.describe()} answered the {what} with a {kind}, not a vector")
        out = []
        for item in result:
            if not isinstance(item, Mapping):
                continue
            metric, value = item.get("metric"), item.get("value")
            if not isinstance(metric, Mapping) or not isinstance(value, list) or len(value) != 2:
                continue
            number = _number(value[1])
            if math.isfinite(number):
                out.append(Sample({str(k): str(v) for k, v in metric.items()}, number))
        return out

    def _get(self, path: str, params: Mapping[str, str], what: str) -> str:
        if self.service is not None:
            return self._via_service(path, params, what)
        assert self.url is not None
        request = urllib.request.Request(
            f"{self.url}{path}",
            data=urllib.parse.urlencode(params).encode(),
            headers={"Content-Type": "application/x-www-form-urlencoded", "Accept": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout + 10) as response:
                raw = response.read(ANSWER_LIMIT + 1)
        except urllib.error.HTTPError as exc:
            raw = exc.read(ANSWER_LIMIT + 1)
            if exc.code not in (400, 422, 503):
                raise PrometheusError(f"{self.describe()} answered the {what} with HTTP {exc.code}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            said = getattr(reason, "strerror", None) or str(reason)  # the words, not the errno
            raise PrometheusError(f"cannot reach Prometheus at {self.describe()}: {str(said).lower()}") from None
        if len(raw) > ANSWER_LIMIT:
            raise PrometheusError(f"{self.describe()} answered the {what} with more than {ANSWER_LIMIT} bytes")
        return bytes(raw).decode("utf-8", "replace")

    def _via_service(self, path: str, params: Mapping[str, str], what: str) -> str:
        assert self.service is not None and self.live is not None
        s = self.service
        status, text = self.live.service_get(
            s.namespace,
            s.name,
            s.port,
            path,
            ANSWER_LIMIT,
            query=list(params.items()),
            scheme=s.scheme,
            read_timeout=self.timeout + 10,
        )
        if status == 200 or (status in (400, 422, 503) and text.lstrip().startswith("{")):
            return str(text)
        raise PrometheusError(f"{self.describe()} answered the {what} with HTTP {status}: {str(text)[:200]}")


def _number(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan
