"""Session fixtures for the integration suite: a real control plane.

Fixtures:
  control_plane  -- ControlPlane (etcd + kube-apiserver + Kueue manager); see testbed/controlplane.py.
                    Attributes: kubeconfig, api_url, ca_file, ca_cert, ca_key, ca_cert_pem,
                    ca_bundle, logs_dir, kueue_webhook_url, timings; helpers serving_cert(),
                    client_cert(), write_kubeconfig().
  api / kube_client -- kubernetes.client.ApiClient for the admin (system:masters) kubeconfig.
  test_namespace -- a namespace shared by the session's tests.

Binaries come from hack/cluster/build.sh. With CI=true a missing binary is
built and any build/start failure fails the tests; elsewhere the suite is
skipped (one line) only when the binaries are missing and `go` is not found.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed import controlplane as cpmod

_STATE: dict[str, object] = {}
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
    if "control_plane" not in getattr(item, "fixturenames", ()):
        return
    for path in _log_files():
        report.sections.append(
            (f"{path.stem} log (last {LOG_TAIL_LINES} lines of {path})", cpmod.tail(path, LOG_TAIL_LINES))
        )
