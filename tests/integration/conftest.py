"""Session fixtures for the integration suite: a real control plane.

Fixtures:
  control_plane  -- ControlPlane (etcd + kube-apiserver + Kueue manager); see testbed/controlplane.py.
                    Attributes: kubeconfig, api_url, ca_file, ca_cert, ca_key, ca_cert_pem,
                    ca_bundle, logs_dir, kueue_webhook_url, timings; helpers serving_cert(),
                    client_cert(), write_kubeconfig().
  api / kube_client -- kubernetes.client.ApiClient for the admin (system:masters) kubeconfig.
  test_namespace -- a namespace shared by the session's tests.
  prometheus_bin -- the directory of prometheus and promtool (hack/cluster/build.sh prometheus).
  prometheus     -- a running Prometheus (testbed/prometheus.py) for a test module: it scrapes the jobs the module's
                    ``prometheus_jobs`` fixture returns, after backfilling what its ``prometheus_backfill`` returns
                    (override either in the module; both are empty here).
  start_prometheus -- a factory for more: start_prometheus(jobs, backfill=(), **Prometheus options); all stopped
                    when the module ends.

Binaries come from hack/cluster/build.sh. With CI=true a missing binary is
built and any build/start failure fails the tests; elsewhere the suite is
skipped (one line) only when the binaries are missing and `go` is not found.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from testbed import controlplane as cpmod
from testbed import prometheus as prommod

_STATE: dict[str, object] = {}
_PROMETHEUS: list[prommod.Prometheus] = []
"""The Prometheus servers running now: a failed test that used one gets its log."""
LOG_TAIL_LINES = int(os.environ.get("GPUCTL_IT_LOG_LINES", "120"))


def _ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.integration)


def _resolve_binaries(tmp_root: Path) -> Path:
    try:
        directory = cpmod.bin_dir()
    except Exception as exc:
        raise cpmod.ControlPlaneError(f"hack/cluster/build.sh --print-dir failed: {exc}") from exc
    if not cpmod.missing_binaries(directory):
        return directory
    if not cpmod.go_available():
        if _ci():
            raise cpmod.ControlPlaneError("control-plane binaries missing and 'go' not found (CI=true)")
        raise cpmod.ControlPlaneUnavailable(
            "integration: 'go' not found and control-plane binaries not built (run hack/cluster/build.sh)"
        )
    return cpmod.build_binaries(tmp_root / "build.log")


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[cpmod.ControlPlane]:
    if "error" in _STATE:
        pytest.fail(str(_STATE["error"]), pytrace=False)
    work = tmp_path_factory.mktemp("controlplane")
    _STATE["logs_dir"] = work / "logs"
    skip_reason = error = None
    try:
        directory = _resolve_binaries(work)
        cp = cpmod.ControlPlane(work_dir=work, bin_dir=directory)
        _STATE["cp"] = cp
        cp.start()
    except cpmod.ControlPlaneUnavailable as exc:
        if _ci():
            error = f"control plane unavailable under CI=true: {exc}"
        else:
            skip_reason = str(exc)
    except cpmod.ControlPlaneError as exc:
        error = f"control plane failed to start: {exc}"
    if skip_reason:
        pytest.skip(skip_reason)
    if error:
        _STATE["error"] = error
        pytest.fail(error, pytrace=False)
    t = cp.timings
    print(
        f"\ncontrol plane ready in {t['total']:.1f}s "
        f"(etcd {t['etcd_ready']:.1f}s, apiserver {t['apiserver_ready']:.1f}s, "
        f"CRDs {t['crds_established']:.1f}s, kueue {t.get('kueue_ready', 0):.1f}s); logs: {cp.logs_dir}"
    )
    try:
        yield cp
    finally:
        cp.stop()
        _STATE.pop("cp", None)


@pytest.fixture(scope="session")
def api(control_plane: cpmod.ControlPlane):
    """kubernetes.client.ApiClient authenticated as the admin (group system:masters)."""
    from kubernetes import config

    client = config.new_client_from_config(config_file=str(control_plane.kubeconfig))
    try:
        yield client
    finally:
        client.close()


@pytest.fixture(scope="session")
def kube_client(api):
    """Alias of ``api``."""
    return api


@pytest.fixture(scope="session")
def test_namespace(api) -> str:
    from kubernetes import client

    name = f"gpuctl-it-{int(time.time())}"
    client.CoreV1Api(api).create_namespace({"metadata": {"name": name}})
    return name


@pytest.fixture(scope="session")
def prometheus_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """prometheus and promtool, built when missing (the control plane's skip/fail policy)."""
    if "prometheus_error" in _STATE:
        pytest.fail(str(_STATE["prometheus_error"]), pytrace=False)
    try:
        return prommod.resolve_binaries(tmp_path_factory.getbasetemp() / "prometheus-build.log", _ci())
    except prommod.PrometheusUnavailable as exc:
        pytest.skip(str(exc))
    except (prommod.PrometheusError, OSError) as exc:
        _STATE["prometheus_error"] = f"prometheus binaries: {exc}"
        pytest.fail(str(_STATE["prometheus_error"]), pytrace=False)


@pytest.fixture(scope="module")
def start_prometheus(
    prometheus_bin: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[..., prommod.Prometheus]]:
    """``start_prometheus(jobs, backfill=(), **options)``: a Prometheus backfilled (before it starts), then scraping
    ``jobs``, ready on /-/ready; ``options`` are :class:`testbed.prometheus.Prometheus`'s (``scrape_interval``,
    ``retention``, ``rule_files``, ``extra_args``). Every one started is stopped when the module ends."""
    started: list[prommod.Prometheus] = []

    def start(
        jobs: Sequence[prommod.ScrapeJob], backfill: Iterable[prommod.BackfillSeries] = (), **options: Any
    ) -> prommod.Prometheus:
        server = prommod.Prometheus(prometheus_bin, tmp_path_factory.mktemp("prometheus"), tuple(jobs), **options)
        started.append(server)
        _PROMETHEUS.append(server)
        try:
            server.backfill(backfill)
            server.start()
        except prommod.PrometheusError as exc:
            pytest.fail(f"prometheus failed to start: {exc}", pytrace=False)
        return server

    try:
        yield start
    finally:
        for server in started:
            server.stop()
            _PROMETHEUS.remove(server)


@pytest.fixture(scope="module")
def prometheus_jobs() -> Sequence[prommod.ScrapeJob]:
    """What the module's ``prometheus`` scrapes: override in the module."""
    return ()


@pytest.fixture(scope="module")
def prometheus_backfill() -> Iterable[prommod.BackfillSeries]:
    """What the module's ``prometheus`` holds from before it started: override in the module."""
    return ()


@pytest.fixture(scope="module")
def prometheus(
    start_prometheus: Callable[..., prommod.Prometheus],
    prometheus_jobs: Sequence[prommod.ScrapeJob],
    prometheus_backfill: Iterable[prommod.BackfillSeries],
) -> prommod.Prometheus:
    """A running Prometheus scraping ``prometheus_jobs``, holding ``prometheus_backfill``."""
    return start_prometheus(prometheus_jobs, prometheus_backfill)


def _log_files() -> list[Path]:
    cp = _STATE.get("cp")
    if isinstance(cp, cpmod.ControlPlane):
        return cp.log_files()
    logs_dir = _STATE.get("logs_dir")
    if isinstance(logs_dir, Path) and logs_dir.is_dir():
        return sorted(logs_dir.glob("*.log"))
    return []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    outcome = yield
    report = outcome.get_result()
    if not report.failed:
        return
    fixtures = getattr(item, "fixturenames", ())
    if {"prometheus", "start_prometheus"} & set(fixtures):
        for server in _PROMETHEUS:
            path = server.log_path
            report.sections.append(
                (f"prometheus log (last {LOG_TAIL_LINES} lines of {path})", cpmod.tail(path, LOG_TAIL_LINES))
            )
    if "control_plane" not in fixtures:
        return
    for path in _log_files():
        report.sections.append(
            (f"{path.stem} log (last {LOG_TAIL_LINES} lines of {path})", cpmod.tail(path, LOG_TAIL_LINES))
        )
