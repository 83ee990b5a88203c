"""With the operator stopped, `simulate` says what the API server will do, and the API server does it: the Pod
webhook fails closed, so a queued Pod is refused; registered `Ignore`, the Pod is let through unreviewed; `explain`
names the check no one serves, and Kueue keeps the Workload there.

The operator runs with leader election and its webhooks registered by URL (the `deployed` fixture of doctor's tests);
it is stopped (SIGSTOP) until its Lease lapses."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from typer.testing import CliRunner

from gpuctl.cli.main import app
from gpuctl.core import naming
from testbed.gpucluster import KUEUE, KV, new_pool, wait_for
from testbed.operator_process import Operator
from tests.integration.test_doctor import deployed, paused

__all__ = ["deployed"]  # the fixture, used by name

POD_WEBHOOK = "pod-accelerators.gpustack.ai"
TIMEOUT = 90  # every API call's: a create waits out the webhook's own timeout before the API server answers


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


@contextlib.contextmanager
def pod_webhook_policy(api: Any, policy: str) -> Iterator[None]:
    """The Pod webhook registered with ``failurePolicy: policy`` until the block ends (then Fail again)."""
    adm = client.AdmissionregistrationV1Api(api)

    def set_to(value: str) -> None:
        config = adm.read_mutating_webhook_configuration(naming.MUTATING_CONFIGURATION, _request_timeout=TIMEOUT)
        for w in config.webhooks:
            if w.name == POD_WEBHOOK:
                w.failure_policy = value
        adm.replace_mutating_webhook_configuration(naming.MUTATING_CONFIGURATION, config, _request_timeout=TIMEOUT)

    set_to(policy)
    try:
        yield
    finally:
        set_to("Fail")


def test_simulate_says_what_the_api_server_will_do_with_the_pod_and_it_does(
    deployed: Operator, api: Any, control_plane: Any, test_namespace: str, tmp_path: Path
) -> None:
    pool = new_pool(api, test_namespace)
    core = client.CoreV1Api(api)
    try:
        pod = _queued_pod(test_namespace, pool.entrance, "while-down")
        manifest = tmp_path / "pod.json"
        manifest.write_text(json.dumps(pod))
        kubeconfig = str(control_plane.kubeconfig)

        def simulate() -> tuple[int, str]:
            result = CliRunner().invoke(app, ["simulate", "-f", str(manifest), "--kubeconfig", kubeconfig])
            return result.exit_code, result.stdout

        def gate1_line(out: str) -> str:
            return next(ln for ln in out.splitlines() if "1. Pod webhook" in ln)

        code, out = simulate()
        assert code == 0 and "will refuse" not in out, out  # serving: the webhook answers
        assert gate1_line(out).lstrip().startswith("ok"), out
        with paused(deployed):
            wait_for(
                "the Lease lapses and simulate says so", lambda: "will refuse the Pod" in simulate()[1], timeout=90
            )
            line = gate1_line(simulate()[1])
            assert line.lstrip().startswith("FAILED") and f"{POD_WEBHOOK} fails closed" in line, line
            # The real API server refuses it, as said.
            with pytest.raises(ApiException) as refused:
                core.create_namespaced_pod(test_namespace, pod, dry_run="All", _request_timeout=TIMEOUT)
            assert POD_WEBHOOK in str(refused.value.body)

            # Registered Ignore, the same Pod is let through unreviewed: said, and done (the API server may take a
            # moment to load the changed configuration, so the create is retried until it is admitted).
            with pod_webhook_policy(api, "Ignore"):
                line = gate1_line(simulate()[1])
                assert line.lstrip().startswith("ok") and "through unreviewed" in line, line
                assert f"{POD_WEBHOOK} fails open (failurePolicy Ignore)" in line, line

                def admitted() -> bool:
                    try:
                        core.create_namespaced_pod(test_namespace, pod, dry_run="All", _request_timeout=TIMEOUT)
                    except ApiException:
                        return False
                    return True

                wait_for("the API server to let the Pod through", admitted, timeout=120, interval=1)

            # A Workload reaching the check while no one serves it: no verdict is written, and explain says so.
            pool.submit("at-check", {"nvidia.com/gpu": "1"})

            def explained() -> dict[str, Any]:
                result = CliRunner().invoke(
                    app, ["explain", "workload", f"{test_namespace}/at-check", "--kubeconfig", kubeconfig, "-o", "json"]
                )
                return dict(json.loads(result.stdout)) if result.exit_code == 0 else {}

            wait_for("quota reserved and gate 3 reached", lambda: explained().get("heldBy") == 3, timeout=60)
            e = explained()
            g3 = e["gates"][2]
            assert g3["verdict"] == "held", e
            assert g3["summary"] == "the gpustack-node-devices check is not served: no verdict is written", e
            # The real party: Kueue holds the Workload at the check, whose state no one has moved from Pending.
            w = client.CustomObjectsApi(api).get_namespaced_custom_object(
                KUEUE, KV, test_namespace, "workloads", "at-check", _request_timeout=TIMEOUT
            )
            checks = {c["name"]: c for c in (w.get("status") or {}).get("admissionChecks") or []}
            assert checks[naming.NODE_DEVICES_CHECK]["state"] == "Pending", w
            conditions = {c["type"]: c["status"] for c in (w.get("status") or {}).get("conditions") or []}
            assert conditions.get("QuotaReserved") == "True" and conditions.get("Admitted") != "True", w
            text = CliRunner().invoke(
                app, ["explain", "workload", f"{test_namespace}/at-check", "--kubeconfig", kubeconfig]
            )
            assert "check is not served: no verdict is written" in text.stdout, text.stdout
        # Serving again: the check judges it, and gate 1 is the webhook's again.
        wait_for("the check to admit the Workload", lambda: explained().get("heldBy") != 3, timeout=90)
        assert gate1_line(simulate()[1]).lstrip().startswith("ok")
    finally:
        pool.cleanup()
