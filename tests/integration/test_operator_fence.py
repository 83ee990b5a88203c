"""The operator's own writes, fenced, on the real control plane: with the generated ValidatingAdmissionPolicies
applied, the operator's service account (a certificate user of that name, bound to the operator's ClusterRole) may
change only the fit labels of a Node and only ``spec.stop`` of an Instance. The operator itself, running as that
account, still writes both; kubectl patches outside them are refused by the API server."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from gpuctl.core import naming
from gpuctl.operator.manifests import operator_role, operator_username
from testbed.factories import card_row
from testbed.gpucluster import WORKER, WV, GpuPool, new_pool, wait_for
from testbed.operator_process import Operator, running_operator

ROOT = Path(__file__).resolve().parents[2]
POLICY = ROOT / "deploy" / "standalone" / "operator-policy.yaml"
NODE_MESSAGE = "the gpuctl operator may change only the fit labels of a Node"
INSTANCE_MESSAGE = "the gpuctl operator may change only spec.stop of an Instance"


def kubectl(control_plane: Any, kubeconfig: Path, *args: str, stdin: str | None = None) -> tuple[int, str]:
    done = subprocess.run(
        [str(control_plane.bin_dir / "kubectl"), "--kubeconfig", str(kubeconfig), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done.returncode, done.stdout + done.stderr


@pytest.fixture(scope="module")
def fenced(control_plane: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The policies applied, the operator's ClusterRole bound to its service account; the account's kubeconfig."""
    work = tmp_path_factory.mktemp("fence")
    admin = control_plane.kubeconfig
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "it-fenced-operator"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": naming.OPERATOR_NAME},
        "subjects": [{"kind": "ServiceAccount", "name": naming.OPERATOR_NAME, "namespace": naming.OPERATOR_NAMESPACE}],
    }
    code, out = kubectl(control_plane, admin, "apply", "-f", "-", stdin=yaml.safe_dump_all([operator_role(), binding]))
    assert code == 0, out
    code, out = kubectl(control_plane, admin, "apply", "-f", str(POLICY))
    assert code == 0, out
    kubeconfig = control_plane.write_kubeconfig(work / "operator.kubeconfig", operator_username(), [])
    try:
        yield Path(kubeconfig)
    finally:
        kubectl(control_plane, admin, "delete", "-f", str(POLICY), "--ignore-not-found")


@pytest.fixture(scope="module")
def pool(api: Any, test_namespace: str) -> Iterator[GpuPool]:
    p = new_pool(api, test_namespace, nodes=1, cards=4, nominal_cards=4, check=False)
    try:
        yield p
    finally:
        p.cleanup()


@pytest.fixture(scope="module")
def operator(fenced: Path, control_plane: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Operator]:
    with running_operator(control_plane, tmp_path_factory.mktemp("fenced-operator"), kubeconfig=fenced) as op:
        yield op


def patch(control_plane: Any, kubeconfig: Path, *target: str, body: dict[str, Any]) -> tuple[int, str]:
    return kubectl(control_plane, kubeconfig, "patch", *target, "--type", "merge", "-p", json.dumps(body))


def test_outside_the_fence_the_api_server_refuses_the_operators_account(
    fenced: Path, pool: GpuPool, control_plane: Any
) -> None:
    node = ["node", pool.nodes[0]]
    instance = ["instance", "fenced-instance", "-n", pool.namespace]
    pool.instance("fenced-instance", phase="Running")
    # Each policy takes effect once the API server has compiled it (each on its own): wait for its first refusal.
    for target, message in ((node, NODE_MESSAGE), (instance, INSTANCE_MESSAGE)):
        outputs: list[str] = []

        def refused_once(target: list[str] = target, message: str = message, outputs: list[str] = outputs) -> bool:
            # A new value each time: a patch that changes nothing is not an update, and no policy sees it.
            body = {"metadata": {"labels": {"team": f"x{len(outputs)}"}}}
            outputs.append(patch(control_plane, fenced, *target, body=body)[1])
            return message in outputs[-1]

        try:
            wait_for(f"the fence of {target[0]}s to take effect", refused_once, timeout=30)
        except AssertionError as exc:
            raise AssertionError(f"{exc}: kubectl said {outputs[-3:]}") from None
    refused = [
        (node, {"metadata": {"labels": {naming.LABEL_MANAGED: None}}}, NODE_MESSAGE),
        (node, {"metadata": {"annotations": {"example.com/x": "y"}}}, NODE_MESSAGE),
        (node, {"spec": {"unschedulable": True}}, NODE_MESSAGE),
        (instance, {"spec": {"image": "elsewhere/evil"}}, INSTANCE_MESSAGE),
        (instance, {"spec": {"stop": True, "privileged": True}}, INSTANCE_MESSAGE),
        (instance, {"metadata": {"labels": {"team": "x"}}}, INSTANCE_MESSAGE),
    ]
    for target, body, message in refused:
        code, out = patch(control_plane, fenced, *target, body=body)
        assert code != 0 and message in out and "ValidatingAdmissionPolicy" in out, (body, out)
    # Inside it: a fit label, spec.stop.
    fit = naming.shared_fit_label(pool.accelerator_key)
    code, out = patch(control_plane, fenced, *node, body={"metadata": {"labels": {fit: "3"}}})
    assert code == 0, out
    code, out = patch(control_plane, fenced, *instance, body={"spec": {"stop": True}})
    assert code == 0, out
    stored = pool.objs.get_namespaced_custom_object(WORKER, WV, pool.namespace, "instances", "fenced-instance")
    assert stored["spec"]["stop"] is True and stored["spec"]["image"] == "gpuctl-it/none"
    # Anyone else is not fenced by it.
    code, out = patch(control_plane, control_plane.kubeconfig, *node, body={"metadata": {"labels": {"team": "y"}}})
    assert code == 0 and "no change" not in out, out


def test_the_operator_running_as_its_account_still_writes_through_the_fence(
    operator: Operator, pool: GpuPool, api: Any
) -> None:
    fit = naming.sliced_fit_label(pool.accelerator_key)
    pool.write_ledger(pool.nodes[0], [card_row(0, mode=3, allocated=800_000, slices=1), card_row(1), card_row(2)])

    def labelled() -> bool:
        labels = client.CoreV1Api(api).read_node(pool.nodes[0]).metadata.labels or {}
        return labels.get(fit) is not None

    wait_for("the operator's fit labels", labelled, timeout=30)
    pool.instance("drained-by-operator", phase="Running")
    pool.objs.patch_cluster_custom_object(
        "kueue.x-k8s.io", "v1beta2", "clusterqueues", pool.name, {"spec": {"stopPolicy": "HoldAndDrain"}}
    )
    wait_for(
        "the operator to stop the Instance",
        lambda: (
            pool.objs.get_namespaced_custom_object(WORKER, WV, pool.namespace, "instances", "drained-by-operator")[
                "spec"
            ]["stop"]
            is True
        ),
        timeout=30,
    )
    assert "refused" not in operator.log.read_text() and NODE_MESSAGE not in operator.log.read_text()
