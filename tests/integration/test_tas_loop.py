"""The placement loop, judged by the real Kueue: whole-card replicas on a pool where one node's second card is held by
a Pod outside Kueue. Kueue 0.17's TAS charges admitted Workloads in credits and that Pod in raw ``nvidia.com/gpu``,
so the node never looks full: the second replica is placed there, the check answers Retry, Kueue evicts it and
places it there again, while the other node's two cards stay free — and ``simulate``, ``explain`` and ``doctor``
say so. From 0.18 TAS counts the raw keys and the second replica goes to the free node; nothing names a loop."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from typer.testing import CliRunner

from gpuctl.cli.main import app
from testbed.gpucluster import wait_for
from testbed.operator_process import Operator, webhooks_registered
from tests.states import Model, State, whole

from .whatif import Cluster, job, real_class, settled

GPU = "nvidia.com/gpu"


@pytest.fixture(scope="module")
def operator(control_plane: Any, api: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    with webhooks_registered(control_plane, api, tmp_path_factory.mktemp("loop-operator")) as op:
        yield op


def gpuctl(kubeconfig: str, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, [*args, "--kubeconfig", kubeconfig])
    return result.exit_code, result.stdout, result.stderr


def retries(api: Any, namespace: str, name: str) -> int:
    """How many times the check has answered Retry for the Workload (its Event's series count), read as JSON: the
    client's typed model refuses the Events Kueue records through the core API, which carry no ``eventTime``."""
    listed = client.CustomObjectsApi(api).list_namespaced_custom_object("events.k8s.io", "v1", namespace, "events")
    return max(
        (
            int((e.get("series") or {}).get("count") or 1)
            for e in listed["items"]
            if e.get("reason") == "Retry" and (e.get("regarding") or {}).get("name") == name
        ),
        default=0,
    )


def test_a_node_whose_cards_are_held_outside_kueue_loops_on_kueue_0_17_and_is_named(
    operator: Operator, api: Any, control_plane: Any, tmp_path: Path
) -> None:
    suffix = uuid.uuid4().hex[:5]
    namespace = f"loop-{suffix}"
    client.CoreV1Api(api).create_namespace({"metadata": {"name": namespace}})
    cluster = Cluster(api, namespace)
    model = Model(f"loop-{suffix}", "NVIDIA A10G", 24576)
    first, second = f"la-{suffix}", f"lb-{suffix}"
    state = State(namespace=namespace, topology=f"hostname-{suffix}")
    state.node(first, 2, model).node(second, 2, model)
    state.hold(None, first, whole(1))
    state.nominal[model.pool] = 4
    kubeconfig = str(control_plane.kubeconfig)
    looping = control_plane.versions.kueue_minor < (0, 18)
    try:
        cluster.load(state.objects())
        cluster.wait_active(model.pool)
        for i in range(2):
            settled(cluster, [model.pool])
            # Jobs, so Kueue's job integration completes each eviction (suspends the Job, releases the quota) and
            # queues the Workload again, as it does for a Deployment's replicas.
            manifest = job(f"r{i}", model, {GPU: "1"}, 1, False)
            path = tmp_path / f"r{i}.json"
            path.write_text(json.dumps(manifest))
            code, out, err = gpuctl(kubeconfig, "simulate", "-f", str(path), "-n", namespace, "-o", "json")
            assert code == 0, err
            item = json.loads(out)
            made = client.BatchV1Api(api).create_namespaced_job(namespace, manifest)
            cluster.created.append(("job", f"r{i}", namespace))
            w = wait_for(f"the Workload of Job r{i}", lambda made=made: cluster.workload_of(made.metadata.uid))
            name = w["metadata"]["name"]
            cluster.created.append(("workloads", name, namespace))
            got = real_class(cluster, name, False)
            if i == 0 or not looping:
                # Admitted where predicted: the first on the node TAS sorts first, the second (0.18+) on the free one.
                assert got[0] == "admitted" and item["heldBy"] is None, (got, item)
                assert got[1] == tuple(n["name"] for n in item["placement"]["nodes"])
                assert got[1] == ((first,) if i == 0 else (second,))
                cluster.run(name, item, None, manifest["spec"]["template"]["spec"])
                continue
            # Kueue 0.17: the check refuses the node TAS chose, again and again, and simulate said so beforehand.
            assert got[0] == "retry" and item["heldBy"] == 3, (got, item)
            hint = item["gates"][2]["hint"]
            assert hint.startswith(
                f"this does not converge by itself: after each Retry Kueue evicts it and places it on {first}"
            )
            assert f"{second} would pass the check" in hint and f"{namespace}/" in hint, hint
            # Evicted and placed again, on the same node: the check's second Retry (its Event's series reaches 2 at
            # once) is about a placement on the first node again, never the free one.
            wait_for(
                "Kueue to evict it and place it again",
                lambda name=name: retries(api, namespace, name) >= 2,
                timeout=300,
            )
            listed = client.CustomObjectsApi(api).list_namespaced_custom_object(
                "events.k8s.io", "v1", namespace, "events"
            )
            notes = [
                str(e.get("note"))
                for e in listed["items"]
                if e.get("reason") == "Retry" and (e.get("regarding") or {}).get("name") == name
            ]
            assert notes and all(first in n and second not in n for n in notes), notes
            code, out, err = gpuctl(kubeconfig, "explain", "workload", f"{namespace}/{name}", "-o", "json")
            assert code == 0, err
            gate3 = json.loads(out)["gates"][2]
            assert (
                gate3["hint"].startswith("this does not converge by itself") and f"{second} would pass" in gate3["hint"]
            )
        code, out, err = gpuctl(kubeconfig, "doctor", "--no-probe", "-o", "json")
        found = [i for i in json.loads(out)["items"] if i["check"] == "placement-loop" and first in i["saw"]]
        assert bool(found) == looping, (found, err)
    finally:
        cluster.cleanup()
        client.CoreV1Api(api).delete_namespace(namespace)
