"""A real, throw-away Prometheus for the card-hour tests.

Prometheus and promtool are built from the pinned Go wrapper module ``hack/cluster/prometheus/<module version>/`` by
``hack/cluster/build.sh prometheus`` into the test-binary cache, as the control plane's binaries are. A
:class:`Prometheus` runs on a free loopback port with its TSDB in the test's own directory, scraping the loopback
targets it is given (every second by default), and answers instant and range queries through its HTTP API; every
call has a timeout.

History older than a test run comes from a backfill: :meth:`Prometheus.backfill` writes the series as OpenMetrics text
and turns it into TSDB blocks with ``promtool tsdb create-blocks-from openmetrics`` before Prometheus starts, so the
first query sees them. The blocks may reach up to the moment Prometheus starts — the last hours included: on start
the head accepts only samples later than the newest block's end, and every scrape after it is later. A backfilled
sample later than the start is refused here, since until the clock passes it every scrape would be dropped as out
of bounds (``up`` included). A running Prometheus loads blocks written into its directory only at its next block
reload (once a minute), so the harness does not backfill one that runs.

Retention is counted back from the newest block, and a block wholly older than that is deleted at start: a 30-day
backfill needs a retention above 30 days (with Prometheus's default of 15 days about half of it is gone). The
default here is 400 days.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from testbed.controlplane import BUILD_SH, Process, free_port, go_available, tail

BINARIES = ("prometheus", "promtool")
START_TIMEOUT = float(os.environ.get("GPUCTL_IT_START_TIMEOUT", "120"))
HTTP_TIMEOUT = 30.0
"""Every HTTP call's own timeout (seconds): a hang guard, not a latency bound."""
BUILD_TIMEOUT = 3600.0


class PrometheusUnavailable(Exception):
    """Prometheus cannot be provided here (tests skip, except under CI=true)."""


class PrometheusError(Exception):
    """Building, backfilling or starting Prometheus failed (tests must fail)."""


class QueryError(PrometheusError):
    """Prometheus answered a query with an error (``errorType``, ``error``)."""


# --------------------------------------------------------------------------
# binaries


def bin_dir() -> Path:
    """Where build.sh puts prometheus and promtool (no build)."""
    out = subprocess.run(
        ["bash", str(BUILD_SH), "--print-dir", "prometheus"], check=True, capture_output=True, text=True, timeout=60
    ).stdout
    return Path(out.strip().splitlines()[-1])


def missing_binaries(directory: Path) -> list[str]:
    return [b for b in BINARIES if not os.access(directory / b, os.X_OK)]


def build_binaries(log_path: Path) -> Path:
    """``build.sh prometheus`` (idempotent); returns the binaries' directory. Raises PrometheusError."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "wb") as log:
        proc = subprocess.run(
            ["bash", str(BUILD_SH), "prometheus"], stdout=subprocess.PIPE, stderr=log, timeout=BUILD_TIMEOUT
        )
    if proc.returncode != 0:
        raise PrometheusError(
            f"hack/cluster/build.sh prometheus failed (exit {proc.returncode}); log: {log_path}\n{tail(log_path)}"
        )
    return Path(proc.stdout.decode().strip().splitlines()[-1])


def resolve_binaries(log_path: Path, ci: bool) -> Path:
    """The binaries' directory, built when missing. Without ``go`` and without the binaries: PrometheusUnavailable,
    or PrometheusError under CI (``ci``)."""
    try:
        directory = bin_dir()
    except (subprocess.SubprocessError, OSError) as exc:
        raise PrometheusError(f"hack/cluster/build.sh --print-dir prometheus failed: {exc}") from exc
    if not missing_binaries(directory):
        return directory
    if not go_available():
        if ci:
            raise PrometheusError("prometheus/promtool missing and 'go' not found (CI=true)")
        raise PrometheusUnavailable(
            "prometheus: 'go' not found and prometheus/promtool not built (run hack/cluster/build.sh prometheus)"
        )
    built = build_binaries(log_path)
    if missing_binaries(built):
        raise PrometheusError(f"build.sh prometheus left {', '.join(missing_binaries(built))} missing in {built}")
    return built


# --------------------------------------------------------------------------
# scrape configuration


@dataclass(frozen=True)
class ScrapeJob:
    """One ``scrape_configs`` entry of static loopback targets (``127.0.0.1:<port>``)."""

    name: str
    targets: Sequence[str]
    labels: Mapping[str, str] = field(default_factory=dict)
    """Added to every series of the job's targets (as a ServiceMonitor's relabelling would add ``node``, say)."""
    metrics_path: str = "/metrics"
    honor_labels: bool = False
    """True: a scraped ``job``/``instance`` (or a label above) wins over the target's, as ``honor_labels`` does."""
    interval: str | None = None
    """The job's scrape interval; None: the global one."""

    def config(self) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "job_name": self.name,
            "metrics_path": self.metrics_path,
            "honor_labels": self.honor_labels,
            "static_configs": [{"targets": list(self.targets), "labels": dict(self.labels)}],
        }
        if self.interval is not None:
            entry["scrape_interval"] = self.interval
            entry["scrape_timeout"] = self.interval
        return entry


def config_document(jobs: Iterable[ScrapeJob], interval: str, rule_files: Iterable[Path] = ()) -> str:
    """prometheus.yml: the global interval (also the scrape timeout and the rule evaluation interval), the jobs."""
    document: dict[str, Any] = {
        "global": {"scrape_interval": interval, "scrape_timeout": interval, "evaluation_interval": interval},
        "scrape_configs": [job.config() for job in jobs],
    }
    rules = [str(p) for p in rule_files]
    if rules:
        document["rule_files"] = rules
    return yaml.safe_dump(document, sort_keys=False)


# --------------------------------------------------------------------------
# backfill


@dataclass(frozen=True)
class BackfillSeries:
    """One series to backfill: a gauge ``name{labels}`` with ``(epoch seconds, value)`` samples in time order."""

    name: str
    labels: Mapping[str, str]
    samples: Sequence[tuple[float, float]]


def grid(start: float, end: float, step: float) -> list[float]:
    """The instants ``start, start + step, ...`` up to and including ``end``."""
    count = math.floor((end - start) / step + 1e-9) + 1
    return [start + i * step for i in range(max(count, 0))]


def _value(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return str(int(value)) if float(value).is_integer() and abs(value) < 2**53 else repr(float(value))


def _timestamp(ts: float) -> str:
    """OpenMetrics timestamps are seconds; to the millisecond, as the TSDB stores them."""
    millis = round(ts * 1000)
    return f"{millis // 1000}.{millis % 1000:03d}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def write_openmetrics(path: Path, series: Iterable[BackfillSeries]) -> int:
    """The series as OpenMetrics text (one gauge family per name, each series' samples together and in time order,
    ``# EOF`` last); returns how many samples were written."""
    families: dict[str, list[BackfillSeries]] = {}
    for s in series:
        families.setdefault(s.name, []).append(s)
    count = 0
    with open(path, "w", encoding="utf-8") as out:
        for name, members in families.items():
            out.write(f"# TYPE {name} gauge\n")
            for s in members:
                labels = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(s.labels.items()))
                head = f"{name}{{{labels}}}" if labels else name
                last = -math.inf
                for ts, value in s.samples:
                    if ts <= last:
                        raise ValueError(f"{head}: samples out of time order at {ts}")
                    last = ts
                    out.write(f"{head} {_value(value)} {_timestamp(ts)}\n")
                    count += 1
        out.write("# EOF\n")
    return count


def create_blocks(
    promtool: Path, openmetrics: Path, tsdb_dir: Path, max_block_duration: str = "486h", timeout: float = 1800.0
) -> str:
    """``promtool tsdb create-blocks-from openmetrics``: blocks of at most ``max_block_duration`` (rounded down to a
    Prometheus compaction range: 2h, 6h, 18h, 54h, 162h, 486h, ...); promtool reads the whole file once for every
    block, so larger blocks backfill a long window faster. Returns promtool's output."""
    tsdb_dir.mkdir(parents=True, exist_ok=True)
    argv = [
        str(promtool),
        "tsdb",
        "create-blocks-from",
        f"--max-block-duration={max_block_duration}",
        "openmetrics",
        str(openmetrics),
        str(tsdb_dir),
    ]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise PrometheusError(f"{' '.join(argv)} failed (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc.stdout + proc.stderr


# --------------------------------------------------------------------------
# query answers


@dataclass(frozen=True)
class Sample:
    """One element of an instant vector: its labels (``__name__`` included when the expression keeps it)."""

    labels: dict[str, str]
    value: float
    timestamp: float


@dataclass(frozen=True)
class RangeSeries:
    """One series of a range query (a matrix): ``(epoch seconds, value)`` per step."""

    labels: dict[str, str]
    values: list[tuple[float, float]]


def _instant(data: Mapping[str, Any]) -> list[Sample]:
    kind, result = data["resultType"], data["result"]
    if kind == "vector":
        return [Sample(dict(r["metric"]), float(r["value"][1]), float(r["value"][0])) for r in result]
    if kind == "scalar":
        return [Sample({}, float(result[1]), float(result[0]))]
    raise QueryError(f"an instant query answered a {kind}; use query_range or a vector expression")


# --------------------------------------------------------------------------
# the server


@dataclass
class Prometheus:
    """``Prometheus(bin_dir, work_dir, jobs)``; ``backfill(...)`` (optional, before start), ``start()``, queries,
    ``stop()``. Logs to ``work_dir/logs/prometheus.log``; the TSDB is ``work_dir/tsdb``."""

    bin_dir: Path
    work_dir: Path
    jobs: Sequence[ScrapeJob] = ()
    scrape_interval: str = "1s"
    retention: str = "400d"
    rule_files: Sequence[Path] = ()
    extra_args: Sequence[str] = ()
    listen_host: str = "127.0.0.1"
    """The address it listens on: loopback, unless a test needs another (the API server proxies to no loopback
    address)."""
    port: int = field(init=False, default=0)
    process: Process | None = field(init=False, default=None)
    backfilled_samples: int = field(init=False, default=0)

    @property
    def tsdb_dir(self) -> Path:
        return self.work_dir / "tsdb"

    @property
    def config_path(self) -> Path:
        return self.work_dir / "prometheus.yml"

    @property
    def log_path(self) -> Path:
        return self.work_dir / "logs" / "prometheus.log"

    @property
    def url(self) -> str:
        return f"http://{self.listen_host}:{self.port}"

    @property
    def promtool(self) -> Path:
        return self.bin_dir / "promtool"

    def running(self) -> bool:
        return self.process is not None and self.process.running()

    # ---- backfill ------------------------------------------------------------

    def backfill(self, series: Iterable[BackfillSeries], max_block_duration: str = "486h") -> int:
        """Write ``series`` into the TSDB as blocks; only before :meth:`start`, and no sample later than now. Returns
        the samples written."""
        if self.running():
            raise PrometheusError(
                "backfill before start: a running Prometheus loads new blocks only at its next reload"
            )
        series = list(series)
        now = time.time()
        late = [s for s in series if s.samples and s.samples[-1][0] > now]
        if late:
            raise PrometheusError(
                f"{late[0].name}{dict(late[0].labels)}: a backfilled sample later than now would make Prometheus "
                "drop every scrape as out of bounds until then"
            )
        self.work_dir.mkdir(parents=True, exist_ok=True)
        source = self.work_dir / f"backfill-{self.backfilled_samples}.om.txt"
        written = write_openmetrics(source, series)
        if written:
            create_blocks(self.promtool, source, self.tsdb_dir, max_block_duration)
        source.unlink()
        self.backfilled_samples += written
        return written

    # ---- start / stop ----------------------------------------------------------

    def write_config(self) -> None:
        self.config_path.write_text(config_document(self.jobs, self.scrape_interval, self.rule_files))

    def start(self, timeout: float = START_TIMEOUT) -> None:
        if self.running():
            return
        self.tsdb_dir.mkdir(parents=True, exist_ok=True)
        self.write_config()
        self.port = free_port()
        self.process = Process(
            "prometheus",
            [
                str(self.bin_dir / "prometheus"),
                f"--config.file={self.config_path}",
                f"--storage.tsdb.path={self.tsdb_dir}",
                f"--storage.tsdb.retention.time={self.retention}",
                f"--web.listen-address={self.listen_host}:{self.port}",
                "--web.enable-lifecycle",
                "--web.enable-remote-write-receiver",
                "--log.level=info",
                *self.extra_args,
            ],
            self.log_path,
        )
        self.process.start()
        try:
            self.wait("Prometheus /-/ready", self._ready, timeout=timeout)
        except BaseException:
            self.stop()
            raise

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=5) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()

    def set_jobs(self, jobs: Sequence[ScrapeJob]) -> None:
        """Scrape ``jobs`` from now on: the configuration rewritten and reloaded (``POST /-/reload``)."""
        self.jobs = tuple(jobs)
        self.write_config()
        if self.running():
            self._http("POST", "/-/reload", {}, timeout=HTTP_TIMEOUT)

    # ---- HTTP API -------------------------------------------------------------

    def _http(self, method: str, path: str, params: Mapping[str, str], timeout: float) -> bytes:
        data = urllib.parse.urlencode(params).encode()
        url = f"{self.url}{path}"
        if method == "GET" and data:
            url, data = f"{url}?{data.decode()}", b""
        request = urllib.request.Request(url, data=data if method == "POST" else None, method=method)
        if method == "POST":
            request.add_header("Content-Type", "application/x-www-form-urlencoded")
        try:
            with urllib.request.urlopen(request, timeout=timeout) as resp:
                return bytes(resp.read())
        except urllib.error.HTTPError as exc:
            body = exc.read()
            try:
                answer = json.loads(body)
                raise QueryError(f"{path}: {answer.get('errorType')}: {answer.get('error')}") from exc
            except ValueError:
                raise PrometheusError(f"{method} {path}: HTTP {exc.code}: {body[:500]!r}") from exc

    def api(self, path: str, params: Mapping[str, str] | None = None, timeout: float = HTTP_TIMEOUT) -> Any:
        """``POST /api/v1/<path>`` with form ``params``; the answer's ``data``."""
        answer = json.loads(self._http("POST", f"/api/v1/{path}", params or {}, timeout))
        if answer.get("status") != "success":
            raise QueryError(f"{path}: {answer.get('errorType')}: {answer.get('error')}")
        return answer["data"]

    def query(self, expr: str, at: float | None = None, timeout: float = HTTP_TIMEOUT) -> list[Sample]:
        """An instant query (``/api/v1/query``) at ``at`` (epoch seconds; now if None)."""
        params = {"query": expr, "timeout": f"{timeout:g}s"}
        if at is not None:
            params["time"] = _timestamp(at)
        return _instant(self.api("query", params, timeout=timeout + 5))

    def query_range(
        self, expr: str, start: float, end: float, step: float, timeout: float = HTTP_TIMEOUT
    ) -> list[RangeSeries]:
        """A range query (``/api/v1/query_range``) over ``[start, end]`` every ``step`` seconds."""
        params = {
            "query": expr,
            "start": _timestamp(start),
            "end": _timestamp(end),
            "step": f"{step:g}",
            "timeout": f"{timeout:g}s",
        }
        data = self.api("query_range", params, timeout=timeout + 5)
        return [RangeSeries(dict(r["metric"]), [(float(t), float(v)) for t, v in r["values"]]) for r in data["result"]]

    def series(self, match: str, start: float | None = None, end: float | None = None) -> list[dict[str, str]]:
        """``/api/v1/series``: the label sets matching ``match``."""
        params = {"match[]": match}
        if start is not None:
            params["start"] = _timestamp(start)
        if end is not None:
            params["end"] = _timestamp(end)
        return [dict(s) for s in self.api("series", params)]

    def targets(self) -> list[dict[str, Any]]:
        """The active scrape targets (``/api/v1/targets``): ``labels``, ``health``, ``lastError``, ``lastScrape``..."""
        data = json.loads(self._http("GET", "/api/v1/targets", {"state": "active"}, HTTP_TIMEOUT))["data"]
        return list(data["activeTargets"])

    def rule_groups(self) -> list[dict[str, Any]]:
        """The loaded rule groups (``/api/v1/rules``), each rule with its ``health`` and ``lastError``."""
        data = json.loads(self._http("GET", "/api/v1/rules", {}, HTTP_TIMEOUT))["data"]
        return list(data["groups"])

    # ---- waiting ----------------------------------------------------------------

    def wait(self, what: str, probe: Callable[[], Any], timeout: float = 60.0, interval: float = 0.2) -> Any:
        """Poll ``probe()`` until it is truthy; a hang guard (``timeout``), failing at once if Prometheus exits."""
        deadline = time.monotonic() + timeout
        last_error: object = None
        while True:
            if self.process is not None and not self.process.running():
                raise PrometheusError(f"prometheus exited; log: {self.log_path}\n{tail(self.log_path)}")
            try:
                result = probe()
                if result:
                    return result
            except QueryError:
                raise
            except (PrometheusError, OSError) as exc:
                last_error = exc
            if time.monotonic() > deadline:
                raise PrometheusError(f"timed out after {timeout:.0f}s waiting for {what} (last error: {last_error})")
            time.sleep(interval)

    def wait_for(
        self, expr: str, predicate: Callable[[list[Sample]], bool] = bool, timeout: float = 60.0
    ) -> list[Sample]:
        """Query ``expr`` now until ``predicate(answer)`` holds (by default: until it answers anything)."""

        def probe() -> list[Sample] | None:
            answer = self.query(expr)
            return answer if predicate(answer) else None

        result: list[Sample] = self.wait(f"{expr!r} to answer as expected", probe, timeout=timeout)
        return result

    def wait_targets_up(self, timeout: float = 60.0) -> list[dict[str, Any]]:
        """Until every configured target has been scraped successfully at least once."""
        expected = sum(len(job.targets) for job in self.jobs)

        def probe() -> list[dict[str, Any]] | None:
            active = self.targets()
            up = [t for t in active if t.get("health") == "up"]
            return active if len(up) >= expected and len(active) == expected else None

        result: list[dict[str, Any]] = self.wait("every scrape target up", probe, timeout=timeout)
        return result
