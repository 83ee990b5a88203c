"""End to end: the operator serves its webhooks to the real API server over TLS (registered by url:) and runs its
controllers against the real API server and Kueue."""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from typer.testing import CliRunner

from gpuctl.cli.main import app
from gpuctl.core import naming
from gpuctl.core.units import M
from gpuctl.operator.manifests import cli_roles
from testbed.factories import H100_PROFILES, ZERO_VIEWS, card_row, container, instancetype, physical_profiles, pod
from testbed.gpucluster import WORKER, WV, GpuPool, condition, new_pool, wait_for
from testbed.operator_process import Operator, webhooks_registered
from testbed.request_examples import EXAMPLES

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def operator(control_plane: Any, api: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Operator]:
    with webhooks_registered(control_plane, api, tmp_path_factory.mktemp("operator")) as op:
        yield op


@pytest.fixture(scope="module")
def pools(operator: Operator, api: Any, test_namespace: str) -> Iterator[dict[str, Any]]:
    """An A10G type and an H100 (MIG) type behind the entrances the request-rule examples use."""
    objs = client.CustomObjectsApi(api)
    made = []
    for raw in (
        instancetype(),
        instancetype(
            group_id="h100-80gb-hbm3", memory="80Gi", logical_count=0, profiles=physical_profiles(H100_PROFILES)
        ),
    ):
        status = raw.pop("status")
        raw["metadata"]["labels"] = {}  # the defaulting webhook stamps them
        objs.create_cluster_custom_object(WORKER, WV, "instancetypes", raw)
        objs.patch_cluster_custom_object_status(
            WORKER,
            WV,
            "instancetypes",
            raw["metadata"]["name"],
            {"status": {**ZERO_VIEWS, "phase": "", "detail": status["detail"]}},
        )
        made.append(raw["metadata"]["name"])
    yield {"names": made, "namespace": test_namespace}
    for name in made:
        with contextlib.suppress(ApiException):
            objs.delete_cluster_custom_object(WORKER, WV, "instancetypes", name)


def in_namespace(obj: dict[str, Any], namespace: str, name: str) -> dict[str, Any]:
    return {**obj, "metadata": {**obj["metadata"], "namespace": namespace, "name": name}}


def test_the_defaulting_webhook_stamped_the_pool_labels(pools: dict[str, Any], api: Any) -> None:
    it = client.CustomObjectsApi(api).get_cluster_custom_object(
        WORKER, WV, "instancetypes", "gpustack--nvidia-a10g-linux-amd64"
    )
    assert it["metadata"]["labels"][naming.LABEL_QUEUE_ENTRANCE] == "gpustack-fnv64-c4680bb149644f1c"
    assert it["metadata"]["labels"]["acceleratable.feature.gpustack.ai/nvidia-a10g"] == "true"


def test_a_sliced_pod_is_stored_with_its_units_folded(pools: dict[str, Any], api: Any) -> None:
    p = pod([container("main", {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-percentage": "25"})])
    stored = client.CoreV1Api(api).create_namespaced_pod(
        pools["namespace"], in_namespace(p, pools["namespace"], "folded")
    )
    limits = stored.spec.containers[0].resources.limits
    assert limits["nvidia.com/gpu.sliced.units"] == "400k" or limits["nvidia.com/gpu.sliced.units"] == "400000"
    assert limits["nvidia.com/gpu.sliced.cores-percentage"] == "100"


def test_a_pod_breaking_a_rule_is_refused_with_its_message(pools: dict[str, Any], api: Any) -> None:
    example = next(e for e in EXAMPLES if e.id == "rule6-reject")
    with pytest.raises(ApiException) as info:
        client.CoreV1Api(api).create_namespaced_pod(
            pools["namespace"], in_namespace(example.pod, pools["namespace"], "refused")
        )
    body = json.loads(info.value.body)
    assert body["message"] == f'admission webhook "pod-accelerators.gpustack.ai" denied the request: {example.message}'


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: e.id)
def test_server_dry_run_agrees_with_this_version(
    example: Any, pools: dict[str, Any], control_plane: Any, tmp_path: Path
) -> None:
    manifest = tmp_path / "pod.json"
    manifest.write_text(json.dumps(in_namespace(example.pod, pools["namespace"], f"cmp-{example.id}")))
    result = CliRunner().invoke(
        app,
        [
            "webhook",
            "dry-run",
            "pod",
            "-f",
            str(manifest),
            "--server-side",
            "--compare",
            "-o",
            "json",
            "--kubeconfig",
            str(control_plane.kubeconfig),
        ],
    )
    data = json.loads(result.stdout)
    assert data["agrees"], data["differences"]
    assert data["allowed"] is example.allowed
    assert result.exit_code == (0 if example.allowed else 3)


def test_server_dry_run_of_a_pod_that_exists_reviews_it_as_a_new_one(
    pools: dict[str, Any], api: Any, control_plane: Any, tmp_path: Path
) -> None:
    """A dry-run create of an existing Pod is refused (AlreadyExists) before any webhook sees it: the Pod is sent
    again under a generated name, and the webhooks' answer (the fold) comes back with a warning saying so."""
    p = in_namespace(
        pod([container("main", {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-percentage": "25"})]),
        pools["namespace"],
        "exists-already",
    )
    client.CoreV1Api(api).create_namespaced_pod(pools["namespace"], p)
    manifest = tmp_path / "pod.json"
    manifest.write_text(json.dumps(p))
    args = ["webhook", "dry-run", "pod", "-f", str(manifest), "--server-side", "--kubeconfig"]
    result = CliRunner().invoke(app, [*args, str(control_plane.kubeconfig), "-o", "json"])
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["allowed"] is True
    assert data["warnings"] == [
        f"Pod {pools['namespace']}/exists-already exists: it was reviewed as a new one (generateName)"
    ]
    units = [op for op in data["patch"] if op["path"].endswith("nvidia.com~1gpu.sliced.units")]
    assert units and units[0]["value"] in ("400k", "400000")
    assert data["object"]["metadata"]["name"] == "exists-already"
    assert (
        client.CoreV1Api(api)
        .list_namespaced_pod(pools["namespace"], field_selector="metadata.name=exists-already")
        .items
    )


def test_fragmented_cards_retry_then_ready_and_admitted_once_freed(
    operator: Operator, api: Any, test_namespace: str
) -> None:
    pool: GpuPool = new_pool(api, test_namespace, nodes=1, cards=8, nominal_cards=8)
    core = client.CoreV1Api(api)
    node = pool.nodes[0]
    try:
        # Eight Pods on the node, each holding a 50 % slice of one card (their allocation records).
        for i in range(8):
            record = {
                "main": {
                    "devices": {
                        "groups": [
                            {
                                "id": pool.group_id,
                                "manufacturer": "nvidia",
                                "accelerators": [{"id": f"GPU-{i:04d}", "mode": 3, "allocated": M // 2}],
                            }
                        ]
                    }
                }
            }
            core.create_namespaced_pod(
                test_namespace,
                {
                    "metadata": {
                        "name": f"slice-{pool.group_id}-{i}",
                        "annotations": {naming.ANNOTATION_ALLOCATED: json.dumps(record)},
                    },
                    "spec": {"nodeName": node, "containers": [{"name": "main", "image": "gpuctl-it/none"}]},
                },
            )
            pool.created.append(("pod", f"slice-{pool.group_id}-{i}", test_namespace))
        name = pool.submit("five-cards", {"nvidia.com/gpu": "5"})

        def check(state: str) -> Any:
            checks = {c["name"]: c for c in (pool.workload(name).get("status") or {}).get("admissionChecks") or []}
            c = checks.get(naming.NODE_DEVICES_CHECK)
            return c if c and c["state"] == state else None

        retry = wait_for("the check answers Retry", lambda: check("Retry"), timeout=60)
        assert (
            retry["message"]
            == f"needs 5 whole cards, {node} has 0 free of 8: all 8 hold slices; will retry as capacity frees"
        )
        assert (condition(pool.workload(name), "QuotaReserved") or {}).get("status") == "True"  # credits passed
        for i in range(8):
            core.delete_namespaced_pod(f"slice-{pool.group_id}-{i}", test_namespace, grace_period_seconds=0)
        wait_for("the check answers Ready", lambda: check("Ready"), timeout=60)
        wait_for(
            "Kueue admits the Workload",
            lambda: (condition(pool.workload(name), "Admitted") or {}).get("status") == "True",
            timeout=60,
        )
    finally:
        pool.cleanup()


def test_two_instancetypes_over_one_nodes_cards_hold_each_other(
    operator: Operator, api: Any, test_namespace: str, control_plane: Any
) -> None:
    """A custom InstanceType and a derived one serve the same node's cards through different queues. A Workload
    admitted through one (no Pods yet) holds the cards. Kueue 0.17's TAS counts each flavor apart, so the other's
    Workload reaches the check, which answers Retry, and `explain` — which judges on the same inputs — says Retry
    too. From 0.18 TAS counts the raw cards the first holds on the node across flavors, and holds the second at its
    placement; `explain` and `simulate` say that."""
    derived = new_pool(api, test_namespace, nodes=1, cards=2, nominal_cards=2)
    custom = derived.sibling(f"custom-{derived.group_id}")
    try:
        custom.create_pool_objects(2)
        first = custom.submit("custom-two-cards", {"nvidia.com/gpu": "2"})
        wait_for(
            "the custom type's Workload admitted",
            lambda: (condition(custom.workload(first), "Admitted") or {}).get("status") == "True",
            timeout=60,
        )
        second = derived.submit("derived-one-card", {"nvidia.com/gpu": "1"})
        if control_plane.versions.kueue_minor >= (0, 18):

            def refused() -> Any:
                c = condition(derived.workload(second), "QuotaReserved") or {}
                return (
                    c
                    if c.get("status") == "False" and 'excluded: resource "nvidia.com/gpu"' in c.get("message", "")
                    else None
                )

            held = wait_for("Kueue's TAS refuses the second", refused, timeout=60)
            result = CliRunner().invoke(
                app,
                [
                    "explain",
                    "workload",
                    f"{test_namespace}/{second}",
                    "-o",
                    "json",
                    "--kubeconfig",
                    str(control_plane.kubeconfig),
                ],
            )
            assert result.exit_code == 0, result.stderr
            gate2 = json.loads(result.stdout)["gates"][1]
            assert (gate2["verdict"], gate2["part"], gate2["summary"]) == ("held", "tas-placement", held["message"])
            return

        def check_state() -> Any:
            checks = {c["name"]: c for c in (derived.workload(second).get("status") or {}).get("admissionChecks") or []}
            c = checks.get(naming.NODE_DEVICES_CHECK)
            return c if c and c["state"] == "Retry" else None

        retry = wait_for("the check answers Retry", check_state, timeout=60)
        result = CliRunner().invoke(
            app,
            [
                "explain",
                "workload",
                f"{test_namespace}/{second}",
                "-o",
                "json",
                "--kubeconfig",
                str(control_plane.kubeconfig),
            ],
        )
        assert result.exit_code == 0, result.stderr
        gate3 = json.loads(result.stdout)["gates"][2]
        assert gate3["verdict"] == "held"
        assert gate3["check"] == {"state": "Retry", "message": retry["message"]}
        assert any(f"{test_namespace}/{first}" in e for e in gate3["evidence"])
    finally:
        custom.cleanup()
        derived.cleanup()


def _real_gate(pool: GpuPool, api: Any, manifest: dict[str, Any]) -> int | None:
    """Submit a manifest and watch where the real cluster (webhooks, Kueue, the operator) holds it: the gate, or
    None once Kueue admits it."""
    if manifest["kind"] == "Pod":
        try:
            client.CoreV1Api(api).create_namespaced_pod(pool.namespace, manifest)
        except ApiException as exc:
            assert "denied the request" in json.loads(exc.body)["message"]
            return 1
        pool.created.append(("pod", manifest["metadata"]["name"], pool.namespace))
        raise AssertionError("the Pod was stored: the Pod webhook let it through")
    name = manifest["metadata"]["name"]
    pool.objs.create_namespaced_custom_object(KUEUE_GROUP, "v1beta2", pool.namespace, "workloads", manifest)
    pool.created.append(("workloads", name, pool.namespace))

    def verdict() -> str | None:
        w = pool.workload(name)
        if (condition(w, "Admitted") or {}).get("status") == "True":
            return "admitted"
        checks = {c["name"]: c for c in (w.get("status") or {}).get("admissionChecks") or []}
        if (checks.get(naming.NODE_DEVICES_CHECK) or {}).get("state") == "Retry":
            return "gate3"
        reserved = condition(w, "QuotaReserved")
        if reserved is not None and reserved["status"] == "False" and reserved.get("message"):
            return "gate2"
        return None

    seen = wait_for(f"a verdict on {name}", verdict, timeout=60)
    if seen == "gate2":
        time.sleep(3)  # still unreserved a moment later: Kueue holds it at quota or placement
        assert verdict() == "gate2", pool.workload(name)
        return 2
    return 3 if seen == "gate3" else None


KUEUE_GROUP = "kueue.x-k8s.io"


def test_simulate_predicts_the_gate_the_real_cluster_holds_each_manifest_at(
    operator: Operator, api: Any, test_namespace: str, control_plane: Any, tmp_path: Path
) -> None:
    """Seven manifests, each simulated on the live cluster just before it is submitted: simulate's `heldBy` is the
    gate at which the webhooks, Kueue and the operator really hold it (None: Kueue admits it)."""
    pool = new_pool(api, test_namespace, nodes=1, cards=8, nominal_cards=8)
    node = pool.nodes[0]
    try:
        # Two cards hold a half slice each (allocation records of Pods outside Kueue): six whole cards are free.
        for i in range(2):
            pool.allocated_pod(
                f"half-{pool.group_id}-{i}", node, [{"id": f"GPU-{i:04d}", "mode": 3, "allocated": M // 2}]
            )

        def workload(name: str, limits: dict[str, str], queue: str = pool.entrance) -> dict[str, Any]:
            return {
                "apiVersion": f"{KUEUE_GROUP}/v1beta2",
                "kind": "Workload",
                "metadata": {"name": name, "namespace": test_namespace},
                "spec": {
                    "queueName": queue,
                    "podSets": [
                        {
                            "name": "main",
                            "count": 1,
                            "template": {"spec": {"restartPolicy": "Never", "containers": [container("main", limits)]}},
                        }
                    ],
                },
            }

        bad_pod = pod(
            [container("main", {"nvidia.com/gpu.sliced": "2"})],
            name="bad",
            namespace=test_namespace,
            queue=pool.entrance,
        )
        steps: list[tuple[dict[str, Any], int | None, bool]] = [
            # (manifest, the gate expected, delete it once judged so its retries do not take quota from the next)
            (bad_pod, 1, False),
            (workload("nine-cards", {"nvidia.com/gpu": "9"}), 2, True),  # 9 > 8 cards of quota
            (workload("seven-cards", {"nvidia.com/gpu": "7"}), 3, True),  # TAS sees 8 keys, the check 6 free cards
            (workload("three-cards", {"nvidia.com/gpu": "3"}), None, False),
            (workload("four-cards", {"nvidia.com/gpu": "4"}), 3, True),  # 3 left once three-cards is in flight
            (workload("two-shares", {"nvidia.com/gpu.shared": "2"}), None, False),
            (workload("no-queue", {"nvidia.com/gpu": "1"}, queue="gpustack-fnv64-0000000000000000"), 2, True),
        ]
        for manifest, expected, remove in steps:
            path = tmp_path / f"{manifest['metadata']['name']}.yaml"
            path.write_text(json.dumps(manifest))
            result = CliRunner().invoke(
                app, ["simulate", "-f", str(path), "-o", "json", "--kubeconfig", str(control_plane.kubeconfig)]
            )
            assert result.exit_code == 0, result.stderr
            predicted = json.loads(result.stdout)
            assert predicted["heldBy"] == expected, (manifest["metadata"]["name"], predicted)
            real = _real_gate(pool, api, manifest)
            assert real == predicted["heldBy"], (manifest["metadata"]["name"], predicted)
            if predicted["heldBy"] is None:
                assert predicted["placement"]["nodes"][0]["name"] == node
            if remove:
                pool.objs.delete_namespaced_custom_object(
                    KUEUE_GROUP, "v1beta2", test_namespace, "workloads", manifest["metadata"]["name"]
                )
    finally:
        pool.cleanup()


def test_instancetype_status_views_follow_the_ledger(operator: Operator, api: Any, test_namespace: str) -> None:
    pool = new_pool(api, test_namespace, nodes=1, cards=4, nominal_cards=4)
    objs = client.CustomObjectsApi(api)
    try:

        def status() -> dict[str, Any]:
            result: dict[str, Any] = (
                objs.get_cluster_custom_object(WORKER, WV, "instancetypes", pool.name).get("status") or {}
            )
            return result

        wait_for(
            "free views published",
            lambda: status().get("accelerator") == {"onceMaxRequest": 4, "remaining": 4, "capacity": 4},
            timeout=30,
        )
        assert status()["entrance"] == pool.entrance and status()["phase"] == "Active"
        pool.write_ledger(
            pool.nodes[0],
            [
                card_row(0, mode=3, allocated=M // 2, slices=1),
                card_row(1, mode=1, allocated=M),
                card_row(2),
                card_row(3),
            ],
        )
        wait_for(
            "views moved",
            lambda: status().get("accelerator") == {"onceMaxRequest": 2, "remaining": 2, "capacity": 4},
            timeout=30,
        )
        s = status()
        assert s["acceleratorSliced"] == {"onceMaxRequest": 100, "remaining": 250, "capacity": 400}
        assert s["acceleratorShared"]["remaining"] == 20
        node = client.CoreV1Api(api).read_node(pool.nodes[0])
        assert node.metadata.labels[naming.sliced_fit_label(pool.accelerator_key)] == str(M)
        assert node.metadata.labels[naming.shared_fit_label(pool.accelerator_key)] == "2"
    finally:
        pool.cleanup()


def test_a_hold_and_drain_queue_stops_its_instances(
    operator: Operator, api: Any, test_namespace: str, control_plane: Any
) -> None:
    """The drain stops the Instance; once the pool is resumed, doctor names it (the operator's stop, told by its field
    manager) and its fix starts it."""
    import shlex

    pool = new_pool(api, test_namespace, nodes=1, cards=4, nominal_cards=4, check=False)
    kubeconfig = ["--kubeconfig", str(control_plane.kubeconfig)]

    def drain_stopped() -> list[dict[str, Any]]:
        result = CliRunner().invoke(app, ["doctor", "-o", "json", "--no-probe", *kubeconfig])
        items = json.loads(result.stdout)["items"]
        return [i for i in items if i["check"] == "drain-stopped" and "drained-instance" in i["saw"]]

    objs = client.CustomObjectsApi(api)
    try:
        pool.instance("drained-instance", phase="Running")
        time.sleep(2)
        assert (
            objs.get_namespaced_custom_object(WORKER, WV, test_namespace, "instances", "drained-instance")["spec"][
                "stop"
            ]
            is False
        )
        objs.patch_cluster_custom_object(
            "kueue.x-k8s.io", "v1beta2", "clusterqueues", pool.name, {"spec": {"stopPolicy": "HoldAndDrain"}}
        )
        wait_for(
            "the operator stops the instance",
            lambda: (
                objs.get_namespaced_custom_object(WORKER, WV, test_namespace, "instances", "drained-instance")["spec"][
                    "stop"
                ]
                is True
            ),
            timeout=30,
        )
        assert not drain_stopped()  # the pool still drains
        # The Instance's own controller deletes the Pod and writes Stopped; then the pool is resumed.
        objs.patch_namespaced_custom_object_status(
            WORKER, WV, test_namespace, "instances", "drained-instance", {"status": {"phase": "Stopped"}}
        )
        assert CliRunner().invoke(app, ["resume", pool.name, *kubeconfig]).exit_code == 0
        [found] = wait_for("doctor to name the drain-stopped Instance", drain_stopped, timeout=30)
        assert found["status"] == "warn" and found["fix"].startswith("gpuctl instance start drained-instance")
        result = CliRunner().invoke(app, [*shlex.split(found["fix"])[1:], *kubeconfig])
        assert result.exit_code == 0, result.output
        assert not drain_stopped()
    finally:
        pool.cleanup()


MALFORMED = [
    b"",
    b"not json",
    b"[]",
    b"{}",
    b'{"request": null}',
    b'{"request": {"uid": "u1"}}',
    b'{"request": {"uid": "u2", "operation": "CREATE", "object": "a string"}}',
    b'{"request": {"uid": "u3", "operation": "CREATE", "object": {"kind": "Pod", "metadata": {"labels": {"kueue.x-k8s.io/queue-name": 5}}, "spec": {"containers": "x"}}}}',
    json.dumps(
        {
            "request": {
                "uid": "u4",
                "operation": "CREATE",
                "object": {
                    "kind": "Pod",
                    "metadata": {"labels": {"kueue.x-k8s.io/queue-name": "q"}},
                    "spec": {
                        "containers": [
                            {"name": str(i), "resources": {"limits": {"nvidia.com/gpu": "1"}}} for i in range(20000)
                        ]
                    },
                },
            }
        }
    ).encode(),
]


@pytest.mark.parametrize(
    "path",
    [
        "/mutate-pod-accelerators",
        "/mutate-workloads",
        "/validate-instancetypes",
        "/mutate-instances",
        "/validate-pod-kvcache",
    ],
)
def test_malformed_reviews_get_well_formed_answers(operator: Operator, path: str) -> None:
    for body in MALFORMED:
        code, raw = operator.post(path, body)
        assert code == 200
        review = json.loads(raw)
        assert review["apiVersion"] == "admission.k8s.io/v1" and review["kind"] == "AdmissionReview"
        assert isinstance(review["response"]["allowed"], bool) and "uid" in review["response"]
    assert operator.get("/healthz") == (200, b"ok")
    metrics = operator.get("/metrics")[1].decode()
    assert "gpuctl_webhook_requests_total" in metrics and "gpuctl_webhook_duration_seconds_bucket" in metrics


def test_read_commands_work_with_the_view_role_and_writes_are_forbidden(
    operator: Operator, api: Any, control_plane: Any, tmp_path: Path, test_namespace: str
) -> None:
    rbac = client.RbacAuthorizationV1Api(api)
    view = next(r for r in cli_roles() if r["metadata"]["name"] == "gpuctl-view")
    with contextlib.suppress(ApiException):
        rbac.create_cluster_role(view)
    with contextlib.suppress(ApiException):
        rbac.create_cluster_role_binding(
            {
                "metadata": {"name": "it-gpuctl-viewer"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "gpuctl-view"},
                "subjects": [{"kind": "User", "name": "viewer", "apiGroup": "rbac.authorization.k8s.io"}],
            }
        )
    kubeconfig = str(control_plane.write_kubeconfig(tmp_path / "viewer.kubeconfig", "viewer", []))
    runner = CliRunner()
    for args in (
        ["views", "-o", "json"],
        ["partitions", "-o", "json"],
        ["workloads", "-A", "-o", "json"],
        ["instance", "list", "-A", "-o", "json"],
        ["instancetype", "list", "-o", "json"],
    ):
        result = runner.invoke(app, [*args, "--kubeconfig", kubeconfig])
        assert result.exit_code == 0, (args, result.stderr)
        json.loads(result.stdout)
    result = runner.invoke(app, ["hold", "gpustack--nvidia-a10g-linux-amd64", "--kubeconfig", kubeconfig])
    assert result.exit_code == 1
    assert (
        "forbidden: cannot patch instancetypes.worker.gpustack.ai gpustack--nvidia-a10g-linux-amd64"
        in result.stdout + result.stderr
    )


def test_only_one_replica_leads_and_a_stale_lease_is_taken_over(control_plane: Any) -> None:
    from gpuctl.cluster.live import Connection, LiveSource
    from gpuctl.operator.leader import LeaderElector

    source = LiveSource(Connection(str(control_plane.kubeconfig)))
    first = LeaderElector(source, "default", name="it-leader", lease_seconds=2)
    second = LeaderElector(source, "default", name="it-leader", lease_seconds=2)
    assert first.try_acquire() is True
    assert second.try_acquire() is False
    assert first.try_acquire() is True  # renewing
    time.sleep(2.5)  # the first replica stops renewing
    assert second.try_acquire() is True
    assert first.try_acquire() is False


def _tmux() -> str:
    """tmux, installed from Debian's packages where the machine lacks it (as the image build installs its tools)."""
    import shutil
    import subprocess

    found = shutil.which("tmux")
    if found is None and shutil.which("apt-get") and os.geteuid() == 0:
        subprocess.run(
            "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tmux",
            shell=True,
            check=True,
            capture_output=True,
        )
        found = shutil.which("tmux")
    assert found, "tmux is needed to run gpuctl top under a terminal"
    return found


def test_top_runs_under_a_terminal_and_redraws_when_a_workload_is_admitted(
    operator: Operator, api: Any, test_namespace: str, control_plane: Any
) -> None:
    import re
    import shlex
    import subprocess
    import sys

    tmux = _tmux()
    pool = new_pool(api, test_namespace, nodes=1, cards=4, nominal_cards=4)
    session = f"gpuctl-top-{pool.group_id}"
    gpuctl = str(Path(sys.executable).with_name("gpuctl"))
    # One pool: the suite's other pools would push its rows below a 50-line pane.
    command = (
        f"{shlex.quote(gpuctl)} top {shlex.quote(pool.name)} --interval 0.5 "
        f"--kubeconfig {shlex.quote(str(control_plane.kubeconfig))}"
    )

    def pane() -> str:
        out = subprocess.run([tmux, "capture-pane", "-p", "-t", session], capture_output=True, text=True)
        return out.stdout

    def admitted_count() -> int | None:
        # The pool's queue row: its name folds over lines in 80 columns, its counts stay on the first.
        prefix = pool.name[:20]
        for line in pane().splitlines():
            cells = re.split(r"\s{2,}", line.strip())
            if line.startswith(prefix) and len(cells) >= 3 and cells[1].isdigit() and cells[2].isdigit():
                return int(cells[2])
        return None

    subprocess.run([tmux, "new-session", "-d", "-s", session, "-x", "80", "-y", "50", command], check=True)
    try:
        wait_for("top draws the pool's queue", lambda: admitted_count() == 0, timeout=60)
        assert all(len(line) <= 80 for line in pane().splitlines())
        name = pool.submit("top-one-card", {"nvidia.com/gpu": "1"})
        wait_for(
            "Kueue admits the Workload",
            lambda: (condition(pool.workload(name), "Admitted") or {}).get("status") == "True",
            timeout=60,
        )
        wait_for("top redraws with the admission", lambda: admitted_count() == 1, timeout=30)
        subprocess.run([tmux, "send-keys", "-t", session, "s"], check=True)  # a key re-sorts and redraws
        wait_for("the sort key is shown", lambda: "sort: free cards" in pane(), timeout=10)
        subprocess.run([tmux, "send-keys", "-t", session, "C-c"], check=True)
        wait_for(
            "top exits on Ctrl-C",
            lambda: subprocess.run([tmux, "has-session", "-t", session], capture_output=True).returncode != 0,
            timeout=15,
        )
    finally:
        subprocess.run([tmux, "kill-session", "-t", session], capture_output=True)
        pool.cleanup()


def test_pool_metrics_equal_views_and_follow_the_ledger(
    operator: Operator, api: Any, test_namespace: str, control_plane: Any
) -> None:
    """The operator's /metrics gauges for a pool equal `views -o json`, before and after the ledger moves."""
    from prometheus_client.parser import text_string_to_metric_families

    pool = new_pool(api, test_namespace, nodes=1, cards=4, nominal_cards=4)
    fields = {"onceMaxRequest": "once_max_request", "remaining": "remaining", "capacity": "capacity"}
    views_keys = ("accelerator", "acceleratorShared", "acceleratorSliced", "acceleratorPartitioned")

    def gauges() -> dict[tuple[str, str], float]:
        text = operator.get("/metrics")[1].decode()
        out = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.labels.get("instancetype") == pool.name and "view" in s.labels and "shape" not in s.labels:
                    out[(s.name, s.labels["view"])] = s.value
        return out

    def views() -> dict[str, Any]:
        result = CliRunner().invoke(
            app, ["views", pool.name, "-o", "json", "--kubeconfig", str(control_plane.kubeconfig)]
        )
        assert result.exit_code == 0, result.stderr
        [item] = json.loads(result.stdout)["items"]
        return dict(item)

    def agree() -> bool:
        g, v = gauges(), views()
        return all(
            g.get((f"gpuctl_pool_{metric}", view)) == v[view][field]
            for view in views_keys
            for field, metric in fields.items()
        )

    try:
        wait_for("the pool gauges equal views", agree, timeout=30)
        assert gauges()[("gpuctl_pool_remaining", "accelerator")] == 4
        pool.write_ledger(
            pool.nodes[0],
            [
                card_row(0, mode=3, allocated=M // 2, slices=1),
                card_row(1, mode=1, allocated=M),
                card_row(2),
                card_row(3),
            ],
        )
        wait_for("the ledger moved", lambda: views()["accelerator"]["remaining"] == 2, timeout=30)
        wait_for("the pool gauges follow it and equal views again", agree, timeout=30)
        # Fragmentation is recomputed at most every FRAGMENTATION_TTL (15 s) per pool, however often it is scraped.
        wait_for(
            "the fragmentation gauges to follow",
            lambda: (
                gauges().get(("gpuctl_pool_free", "accelerator")) == 250  # two free cards, half of the sliced one
                and gauges().get(("gpuctl_pool_fragmentation_score", "accelerator")) == 0.2  # 50 of 250 % stranded
            ),
            timeout=40,
        )
    finally:
        pool.cleanup()
