"""A partition in flight takes one legal placement, not its whole card, for the operator's check on the real control
plane as for ``simulate``: a 4g.40gb admitted on an empty H100 (its Pods not allocated: it can only start at memory
slice 0) leaves a 3g.40gb slices 4-7, and Kueue admits both on the one card; a 7g.80gb after them does not fit."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from typer.testing import CliRunner

from gpuctl.cli.main import app
from testbed.factories import H100_MIB, H100_PROFILES
from testbed.gpucluster import KUEUE, KV
from testbed.operator_process import Operator, webhooks_registered
from tests.states import Model, State

from .whatif import Cluster, real_class, settled, workload

GPU = "nvidia.com/gpu"


@pytest.fixture(scope="module")
def operator(control_plane: Any, api: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    with webhooks_registered(control_plane, api, tmp_path_factory.mktemp("inflight-operator")) as op:
        yield op


def mig(profile: str) -> dict[str, str]:
    return {f"{GPU}.partitioned": "1", f"{GPU}.partitioned.mig-{profile}": "1"}


def test_a_4g_in_flight_leaves_a_3g_the_rest_of_its_card(
    operator: Operator, api: Any, control_plane: Any, tmp_path: Path
) -> None:
    suffix = uuid.uuid4().hex[:5]
    namespace = f"inflight-{suffix}"
    client.CoreV1Api(api).create_namespace({"metadata": {"name": namespace}})
    cluster = Cluster(api, namespace)
    model = Model(f"h100if-{suffix}", "NVIDIA H100 80GB HBM3", H100_MIB, H100_PROFILES)
    node = f"hp-{suffix}"
    state = State(namespace=namespace, topology=f"hostname-{suffix}")
    state.node(node, 1, model)
    state.nominal[model.pool] = 1
    kubeconfig = str(control_plane.kubeconfig)
    runner = CliRunner()
    try:
        cluster.load(state.objects())
        cluster.wait_active(model.pool)
        for name, profile, admitted in (
            ("four", "4g.40gb", True),
            ("three", "3g.40gb", True),
            ("seven", "7g.80gb", False),
        ):
            settled(cluster, [model.pool])
            manifest = workload(name, model, mig(profile))
            path = tmp_path / f"{name}.json"
            path.write_text(json.dumps(manifest))
            result = runner.invoke(
                app, ["simulate", "-f", str(path), "-n", namespace, "-o", "json", "--kubeconfig", kubeconfig]
            )
            assert result.exit_code == 0, result.stderr
            item = json.loads(result.stdout)
            cluster.objs.create_namespaced_custom_object(KUEUE, KV, namespace, "workloads", manifest)
            cluster.created.append(("workloads", name, namespace))
            got = real_class(cluster, name, False)
            if admitted:
                # Admitted, its Pods never started: the next one is judged with it in flight.
                assert got == ("admitted", (node,)) and item["heldBy"] is None, (name, got, item)
            else:
                assert got[0] in ("retry", "pending") and item["heldBy"] in (2, 3), (name, got, item)
                if got[0] == "retry":
                    assert item["heldBy"] == 3 and got[1] == item["gates"][2]["check"]["message"], (got, item)
    finally:
        cluster.cleanup()
        client.CoreV1Api(api).delete_namespace(namespace)
