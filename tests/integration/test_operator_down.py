"""With the operator stopped, `simulate` says what the API server will do, and the API server does it: the Pod
webhook fails closed, so a queued Pod is refused; `explain` names the check no one serves.

The operator runs with leader election and its webhooks registered by URL (the `deployed` fixture of doctor's tests);
it is stopped (SIGSTOP) until its Lease lapses."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from typer.testing import CliRunner

from gpuctl.cli.main import app
from gpuctl.core import naming
from testbed.gpucluster import new_pool, wait_for
from testbed.operator_process import Operator
from tests.integration.test_doctor import deployed, paused

__all__ = ["deployed"]  # the fixture, used by name


def _queued_pod(namespace: str, queue: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {naming.LABEL_QUEUE_NAME: queue}},
        "spec": {
            "containers": [
                {"name": "main", "image": "gpuctl-it/none", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
            ]
        },
    }


def test_simulate_says_the_api_server_will_refuse_the_pod_and_it_does(
    deployed: Operator, api: Any, control_plane: Any, test_namespace: str, tmp_path: Path
) -> None:
    pool = new_pool(api, test_namespace)
    try:
        pod = _queued_pod(test_namespace, pool.entrance, "while-down")
        manifest = tmp_path / "pod.json"
        manifest.write_text(json.dumps(pod))
        kubeconfig = str(control_plane.kubeconfig)

        def simulate() -> tuple[int, str]:
            result = CliRunner().invoke(app, ["simulate", "-f", str(manifest), "--kubeconfig", kubeconfig])
            return result.exit_code, result.stdout

        code, out = simulate()
        assert code == 0 and "will refuse" not in out, out  # serving: the webhook answers
        pool.submit("at-check", {"nvidia.com/gpu": "1"})
        with paused(deployed):
            wait_for(
                "the Lease lapses and simulate says so", lambda: "will refuse the Pod" in simulate()[1], timeout=90
            )
            _, out = simulate()
            line = next(ln for ln in out.splitlines() if "1. Pod webhook" in ln)
            assert line.lstrip().startswith("FAILED") and "pod-accelerators.gpustack.ai fails closed" in line
            # The real API server refuses it, as said.
            with pytest.raises(ApiException) as refused:
                client.CoreV1Api(api).create_namespaced_pod(test_namespace, pod, _request_timeout=90)
            assert "pod-accelerators.gpustack.ai" in str(refused.value.body)
            # A Workload at the check: no verdict is written while no one serves it.
            result = CliRunner().invoke(
                app, ["explain", "workload", f"{test_namespace}/at-check", "--kubeconfig", kubeconfig]
            )
            assert "check is not served: no verdict is written" in result.stdout, result.stdout
    finally:
        pool.cleanup()
