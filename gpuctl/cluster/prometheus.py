"""Instant queries to Prometheus: at a URL, or through the API server's proxy to a Service (with the kubeconfig's
credentials, as ``kubectl`` reaches a Service). Every answer is bounded in size and time, and parsed into samples
here; an error names the query's purpose and Prometheus's own words."""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuctl.cluster.errors import SourceError
from gpuctl.core.cardhours import Sample, Series

ANSWER_LIMIT = 64 * 1024 * 1024
"""The largest answer read (bytes)."""
RANGE_POINTS = 10_000
"""The most steps one range query asks for (Prometheus refuses more than 11,000 points a series)."""


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
        data = self._data(self._get("/api/v1/query", params, what), what)
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

    def query_range(self, expr: str, start: int, end: int, step: int, what: str = "query") -> list[Series]:
        """``expr`` at every step of ``[start, end]``, in pieces of at most :data:`RANGE_POINTS` steps: its series,
        values by epoch second (NaN and infinite values left out)."""
        merged: dict[tuple[tuple[str, str], ...], dict[int, float]] = {}
        piece = start
        while piece <= end:
            last = min(end, piece + (RANGE_POINTS - 1) * step)
            params = {
                "query": expr,
                "start": str(piece),
                "end": str(last),
                "step": f"{step}s",
                "timeout": f"{int(self.timeout)}s",
            }
            for labels, values in self._matrix(self._get("/api/v1/query_range", params, what), what):
                merged.setdefault(tuple(sorted(labels.items())), {}).update(values)
            piece = last + step
        return [Series(dict(k), v) for k, v in sorted(merged.items())]

    def _matrix(self, body: str, what: str) -> list[tuple[dict[str, str], dict[int, float]]]:
        data = self._data(body, what)
        result = data.get("result")
        if data.get("resultType") != "matrix" or not isinstance(result, list):
            raise PrometheusError(
                f"{self.describe()} answered the {what} with a {data.get('resultType')}, not a matrix"
            )
        out = []
        for item in result:
            if not isinstance(item, Mapping) or not isinstance(item.get("metric"), Mapping):
                continue
            values: dict[int, float] = {}
            for pair in item.get("values") or []:
                if isinstance(pair, list) and len(pair) == 2:
                    at, number = _number(pair[0]), _number(pair[1])
                    if math.isfinite(at) and math.isfinite(number):
                        values[int(at)] = number
            out.append(({str(k): str(v) for k, v in item["metric"].items()}, values))
        return out

    def _data(self, body: str, what: str) -> Mapping[str, Any]:
        try:
            answer = json.loads(body)
        except (ValueError, RecursionError):  # RecursionError: nested past what the parser's stack holds
            raise PrometheusError(f"{self.describe()} answered the {what} with something not JSON") from None
        if not isinstance(answer, Mapping) or answer.get("status") != "success":
            error = answer.get("error") if isinstance(answer, Mapping) else None
            raise PrometheusError(f"{self.describe()} failed the {what}: {error or 'no status'}")
        data = answer.get("data")
        if not isinstance(data, Mapping):
            raise PrometheusError(f"{self.describe()} answered the {what} without data")
        return data

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
        said = _kubernetes_status(text) if status != 200 else None
        if said is not None:  # the API server's own answer, not Prometheus' (no endpoint ready, say)
            raise PrometheusError(f"the API server's proxy to {self.describe()} answered the {what}: {said}")
        if status == 200 or (status in (400, 422, 503) and text.lstrip().startswith("{")):
            return str(text)
        raise PrometheusError(f"{self.describe()} answered the {what} with HTTP {status}: {str(text)[:200]}")


def _kubernetes_status(text: str) -> str | None:
    """The message of a Kubernetes ``Status`` a body holds (the API server's answer in place of the Service's), or
    None where it holds none."""
    if not text.lstrip().startswith("{"):
        return None
    try:
        answer = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(answer, Mapping) or answer.get("kind") != "Status":
        return None
    return str(answer.get("message") or answer.get("reason") or "failure")


def _number(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


@dataclass(frozen=True, slots=True)
class Kept:
    """The series a dump kept (``PrometheusSeries`` objects): their grid and each figure's series."""

    start: int
    end: int
    step: int
    idle_for: int
    series: Mapping[str, list[Series]]


def kept_series(objs: Sequence[Mapping[str, Any]]) -> Kept | None:
    """What a dump kept of Prometheus, parsed once; None when it kept nothing. A malformed object is an error
    naming it."""
    if not objs:
        return None
    grids = set()
    series: dict[str, list[Series]] = {}
    for obj in objs:
        name = str((obj.get("metadata") or {}).get("name") or "")
        try:
            grids.add((int(obj["start"]), int(obj["end"]), int(obj["stepSeconds"]), int(obj["idleForSeconds"])))
            series[name] = [
                Series(
                    {str(k): str(v) for k, v in (item.get("metric") or {}).items()},
                    {int(t): float(v) for t, v in item.get("values") or []},
                )
                for item in obj.get("series") or []
            ]
        except (KeyError, TypeError, ValueError, AttributeError):
            raise PrometheusError(f"the snapshot's PrometheusSeries {name!r} is malformed") from None
    if len(grids) != 1:
        raise PrometheusError("the snapshot's PrometheusSeries were not kept on one grid")
    start, end, step, idle_for = grids.pop()
    return Kept(start, end, step, idle_for, series)
