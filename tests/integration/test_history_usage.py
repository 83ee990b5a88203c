"""End to end on the real API server and Kueue: the Events the operator records for a Workload held at the check,
admitted, then evicted by a drain; `explain --history` telling that story with Kueue's own Events, live and from a
dump; and the usage gauges on /metrics equal to `gpuctl usage -o json`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from typer.testing import CliRunner

from gpuctl.cli.main import app
from gpuctl.core import naming
from gpuctl.core.queueing import epoch_seconds
from gpuctl.core.units import M
from gpuctl.operator.events import CONTROLLER
from testbed.factories import card_row
from testbed.gpucluster import GpuPool, condition, new_pool, wait_for
from testbed.operator_process import Operator, webhooks_registered

runner = CliRunner()


@pytest.fixture(scope="module")
def operator(control_plane: Any, api: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Operator]:
    with webhooks_registered(control_plane, api, tmp_path_factory.mktemp("operator")) as op:
        yield op


def gpuctl(control_plane: Any, *args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, [*args, "--kubeconfig", str(control_plane.kubeconfig)])
    return result.exit_code, result.stdout, result.stderr


def when(event: dict[str, Any]) -> float:
    """When an Event first happened, in seconds since the epoch."""
    stamp = event.get("eventTime") or event.get("deprecatedFirstTimestamp") or event["metadata"]["creationTimestamp"]
    seconds = epoch_seconds(stamp)
    assert seconds is not None, stamp
    return seconds


def events_about(api: Any, namespace: str, name: str) -> list[dict[str, Any]]:
    """The Events about a Workload through ``events.k8s.io/v1``, oldest first (read as JSON: the client's typed model
    refuses the Events Kueue records through the core API, which carry no ``eventTime``)."""
    listed = client.CustomObjectsApi(api).list_namespaced_custom_object("events.k8s.io", "v1", namespace, "events")
    mine = [
        e
        for e in listed["items"]
        if (e.get("regarding") or {}).get("kind") == "Workload" and e["regarding"].get("name") == name
    ]
    return sorted(mine, key=when)


def test_a_workload_held_at_the_check_admitted_then_drained_tells_its_story(
    operator: Operator, api: Any, test_namespace: str, control_plane: Any, tmp_path: Path
) -> None:
    pool: GpuPool = new_pool(api, test_namespace, nodes=1, cards=2, nominal_cards=2)
    node = pool.nodes[0]
    try:
        for i in range(2):  # both cards hold a half slice: a two-card Workload waits at the check
            pool.allocated_pod(f"slice-{i}", node, [{"id": f"GPU-{i:04d}", "mode": 3, "allocated": M // 2}])
        # A Job, so Kueue's job integration completes each eviction (suspends it, releases the quota) and requeues.
        job = pool.submit_job(f"story-{pool.group_id}", {"nvidia.com/gpu": "2"})

        def workload_of_job() -> str | None:
            made = pool.workload_of_job(job)
            return str(made["metadata"]["name"]) if made else None

        name = wait_for("Kueue creates the Job's Workload", workload_of_job)

        def retries() -> Any:
            ours = [e for e in events_about(api, test_namespace, name) if e.get("reportingController") == CONTROLLER]
            retry = [e for e in ours if e.get("reason") == "Retry"]
            return retry if retry and (retry[0].get("series") or {}).get("count", 0) >= 2 else None

        # Kueue answers each Retry by requeueing the Workload; the check says Retry again, with the same reason:
        # one Event whose series counts the repeats.
        [retry] = wait_for("a Retry series of two", retries, timeout=150, interval=1.0)
        assert retry["type"] == "Warning" and retry["action"] == "AdmissionCheck"
        assert retry["note"].startswith(f"{naming.NODE_DEVICES_CHECK}: needs 2 whole cards, {node} has 0 free of 2")
        assert retry["reportingInstance"] and retry["regarding"]["uid"] == pool.workload(name)["metadata"]["uid"]
        for i in range(2):
            client.CoreV1Api(api).delete_namespaced_pod(f"slice-{i}", test_namespace, grace_period_seconds=0)
        wait_for(
            "Kueue admits the Workload",
            lambda: (condition(pool.workload(name), "Admitted") or {}).get("status") == "True",
            timeout=90,
        )
        code, _, err = gpuctl(control_plane, "drain", pool.name, "--wait", "--timeout", "1m")
        assert code == 0, err
        wait_for(
            "the drain evicts it", lambda: (condition(pool.workload(name), "Evicted") or {}).get("status") == "True"
        )

        def reasons() -> list[str]:
            return [str(e.get("reason")) for e in events_about(api, test_namespace, name)]

        wait_for("Kueue's eviction Event", lambda: "EvictedDueToClusterQueueStopped" in reasons(), timeout=30)
        got = events_about(api, test_namespace, name)
        first: dict[str, float] = {}
        for e in got:
            first.setdefault(e["reason"], when(e))
        # Ours and Kueue's, in the order they happened (Kueue's core Events carry whole seconds only).
        # (Kueue 0.17 also records each Retry's eviction as EvictedDueToAdmissionCheck; 0.19 records none here, its
        # condition tells it.)
        assert {"QuotaReserved", "Retry", "Ready", "Admitted"} <= set(first), sorted(first)
        assert first["QuotaReserved"] <= first["Retry"] + 1 and first["Retry"] < first["Ready"], got
        assert (
            first["Ready"] <= first["Admitted"] + 1 and first["Admitted"] <= first["EvictedDueToClusterQueueStopped"]
        ), got
        ours = [(e["reason"], e.get("note")) for e in got if e.get("reportingController") == CONTROLLER]
        assert ours[0][0] == "Retry" and ours[-1][0] == "Ready" and {r for r, _ in ours} == {"Retry", "Ready"}, ours

        code, out, err = gpuctl(
            control_plane, "explain", "workload", f"{test_namespace}/{name}", "--history", "-o", "json"
        )
        assert code == 0, err
        live = json.loads(out)
        told = [(line["source"], line["reason"]) for line in live["history"]]
        for wanted in (("event", "QuotaReserved"), ("event", "Retry"), ("event", "Ready"), ("event", "Admitted")):
            assert wanted in told, (wanted, told)
        order = [r for s, r in told if s == "event"]
        assert order.index("Retry") < order.index("Ready") < order.index("EvictedDueToClusterQueueStopped")
        said = next(line for line in live["history"] if line["reason"] == "Retry")
        assert said["gate"] == 3 and said.get("count", 1) >= 2
        assert {s["state"] for s in live["states"]} >= {"quota", "check"}
        assert live["summary"].startswith(("waiting", "waited")) and live["incomplete"] is None

        # The same story from a dump (taken now: its Events and its time).
        code, _, err = gpuctl(control_plane, "dump", str(tmp_path / "dump"), "-n", test_namespace)
        assert code == 0, err
        result = runner.invoke(
            app,
            [
                "explain",
                "workload",
                f"{test_namespace}/{name}",
                "--history",
                "-o",
                "json",
                "--snapshot",
                str(tmp_path / "dump"),
            ],
        )
        assert result.exit_code == 0, result.stderr
        dumped = json.loads(result.stdout)
        assert [(line["source"], line["reason"]) for line in dumped["history"]] == told
        text = runner.invoke(
            app, ["explain", "workload", f"{test_namespace}/{name}", "--history", "--snapshot", str(tmp_path / "dump")]
        ).stdout
        assert "History (oldest first):" in text and "EvictedDueToClusterQueueStopped" in text
    finally:
        gpuctl(control_plane, "resume", pool.name)
        pool.cleanup()


def test_usage_gauges_on_metrics_equal_usage_json(
    operator: Operator, api: Any, test_namespace: str, control_plane: Any
) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    pool = new_pool(api, test_namespace, nodes=1, cards=4, nominal_cards=4)
    node = pool.nodes[0]
    try:
        pool.allocated_pod("whole", node, [{"id": "GPU-0000", "mode": 1, "allocated": M}])
        pool.allocated_pod("slice", node, [{"id": "GPU-0001", "mode": 3, "allocated": 3 * M // 10}])
        pool.write_ledger(
            node,
            [
                card_row(0, mode=1, allocated=M),
                card_row(1, mode=3, allocated=3 * M // 10, slices=1),
                card_row(2),
                card_row(3),
            ],
        )

        def gauges() -> dict[tuple[str, str], float]:
            out: dict[tuple[str, str], float] = {}
            for family in text_string_to_metric_families(operator.get("/metrics")[1].decode()):
                for s in family.samples:
                    if s.name == "gpuctl_usage_card_equivalents" and s.labels.get("instancetype") == pool.name:
                        out[(s.labels["namespace"], s.labels["mode"])] = s.value
            return out

        def usage() -> dict[tuple[str, str], float]:
            code, out, err = gpuctl(control_plane, "usage", pool.name, "-A", "-o", "json")
            assert code == 0, err
            return {
                (i["namespace"], mode): eq
                for i in json.loads(out)["items"]
                for mode, eq in i["cardEquivalents"].items()
                if mode != "total"
            }

        expected = {(test_namespace, "exclusive"): 1.0, (test_namespace, "sliced"): 0.3}
        assert usage() == expected
        # The gauges are recomputed at most every 15 s.
        wait_for("the usage gauges equal usage -o json", lambda: gauges() == usage() == expected, timeout=40)
    finally:
        pool.cleanup()
