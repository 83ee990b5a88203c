"""The write side without a cluster: webhook dry-run on the example snapshot (every request-rule example), client
dry runs, and refusals before anything is sent."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gpuctl.cli.main import app
from gpuctl.core.admission import apply_patch
from testbed.request_examples import EXAMPLES, RuleExample

ROOT = Path(__file__).resolve().parents[2]
SNAPSHOT = str(ROOT / "examples" / "snapshot")
runner = CliRunner()


def run(*args: str, stdin: str | None = None) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args), input=stdin)
    return result.exit_code, result.stdout, result.stderr


def write(tmp_path: Path, obj: dict[str, Any], name: str = "obj.yaml") -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(obj))
    return str(path)


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: e.id)
def test_dry_run_answers_every_request_rule_example(example: RuleExample, tmp_path: Path) -> None:
    code, out, _ = run(
        "webhook", "dry-run", "pod", "-f", write(tmp_path, example.pod), "--snapshot", SNAPSHOT, "-o", "json"
    )
    result = json.loads(out)
    assert result["allowed"] is example.allowed
    assert code == (0 if example.allowed else 3)
    if example.message:
        assert result["message"] == example.message
    if example.allowed:
        assert apply_patch(example.pod, result["patch"]) == result["object"]
    assert set(result) == {"allowed", "message", "warnings", "patch", "object"}


def test_dry_run_reads_stdin_and_prints_a_readable_patch() -> None:
    pod = next(e for e in EXAMPLES if e.id == "rule2-accept").pod
    code, out, _ = run("webhook", "dry-run", "pod", "-f", "-", "--snapshot", SNAPSHOT, stdin=json.dumps(pod))
    assert code == 0
    assert out.splitlines() == [
        "pod default/p: allowed, 2 change(s):",
        '  add     /spec/containers/0/resources/limits/nvidia.com~1gpu.sliced.units "800000"',
        '  add     /spec/containers/0/resources/limits/nvidia.com~1gpu.sliced.cores-percentage "100"',
    ]


def test_dry_run_refuses_the_wrong_kind_and_bad_flags(tmp_path: Path) -> None:
    pod = write(tmp_path, EXAMPLES[0].pod)
    code, _, err = run("webhook", "dry-run", "instance", "-f", pod, "--snapshot", SNAPSHOT)
    assert code == 2 and "use `gpuctl webhook dry-run pod" in err
    code, _, err = run("webhook", "dry-run", "pod", "-f", pod, "--operation", "UPDATE", "--snapshot", SNAPSHOT)
    assert code == 2 and "needs --old FILE" in err
    code, _, err = run("webhook", "dry-run", "pod", "-f", pod, "--compare", "--snapshot", SNAPSHOT)
    assert code == 2 and "--compare goes with --server" in err
    code, _, err = run("webhook", "dry-run", "pod", "-f", pod, "--server-side", "--snapshot", SNAPSHOT)
    assert code == 2 and "drop --snapshot" in err
    code, _, err = run("webhook", "dry-run", "pod", "-f", str(tmp_path / "missing.yaml"), "--snapshot", SNAPSHOT)
    assert code == 1 and "cannot read" in err


def test_dry_run_of_a_workload_pins_it(tmp_path: Path) -> None:
    from testbed.factories import workload

    w = workload(
        "w",
        [("main", 1, {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.units": "800000"})],
        reserved=False,
        queue="gpustack-fnv64-c4680bb149644f1c",
    )
    code, out, _ = run("webhook", "dry-run", "workload", "-f", write(tmp_path, w), "--snapshot", SNAPSHOT, "-o", "json")
    result = json.loads(out)
    assert code == 0 and result["allowed"]
    assert [op["path"] for op in result["patch"]] == ["/spec/podSets/0/template/spec/affinity"]


def test_dry_run_of_an_instancetype_update_refuses_a_frozen_field(tmp_path: Path) -> None:
    from testbed.factories import instancetype

    old = instancetype()
    new = instancetype(unit_cpu="12")
    code, out, _ = run(
        "webhook",
        "dry-run",
        "instancetype",
        "-f",
        write(tmp_path, new, "new.yaml"),
        "--old",
        write(tmp_path, old, "old.yaml"),
        "--operation",
        "UPDATE",
        "--snapshot",
        SNAPSHOT,
        "-o",
        "json",
    )
    assert code == 3
    assert json.loads(out)["message"] == "spec: Forbidden: is immutable except displayName and inactive"


def _create(name: str, *flags: str) -> tuple[int, str, str]:
    return run("instancetype", "create", name, *flags, "--dry-run", "client", "--snapshot", SNAPSHOT)


def test_instancetype_create_client_dry_run_validates_before_sending() -> None:
    a10g = ("--accelerator-group", "nvidia-a10g", "--unit-cpu", "12")
    code, out, err = _create("a10g-12c128g", *a10g, "--unit-ram", "128Gi", "-o", "json")
    assert code == 0 and err == ""  # the snapshot's flavors describe nvidia-a10g: no warning
    stored = json.loads(out)
    assert stored["metadata"]["labels"]["schedule.gpustack.ai/queue-entrance"] == "gpustack-fnv64-d4c0e6cd72686015"
    code, _, err = _create("bad", *a10g, "--unit-ram", "128GB")
    assert code == 2 and 'spec.unitResources.ram: Invalid value: "128GB"' in err and "Gi" in err
    assert err.count("\n") == 1
    code, _, err = _create("x")
    assert code == 2 and "--accelerator-group GROUP" in err
    # The API server's own checks: the name, and quantities it cannot hold.
    code, _, err = _create("A10G_big", *a10g, "--unit-ram", "128Gi")
    assert code == 2 and 'metadata.name: Invalid value: "A10G_big": a lowercase RFC 1123 subdomain' in err
    code, _, err = _create(
        "huge", "--accelerator-group", "nvidia-a10g", "--unit-cpu", "1" + "0" * 19, "--unit-ram", "9999999999Gi"
    )
    assert code == 2 and "must be at most 9223372036854775807 cores" in err and "at most 8589934591Gi" in err
    # A group no ResourceFlavor describes: created as the server creates it, with the server's warning.
    code, out, err = _create("h200-8c", "--accelerator-group", "nvidia-h200", "--unit-cpu", "8", "--unit-ram", "64Gi")
    assert code == 0 and "would be created" in out
    assert err == (
        "Warning: no ResourceFlavor describes nvidia-h200 nodes yet: the card memory comes from status.detail once "
        "the operator publishes the pool's detail\n"
    )
    code, _, err = _create("gpustack--nvidia-a10g-linux-amd64", *a10g, "--unit-ram", "64Gi")
    assert code == 2 and "already exists" in err


def test_bad_dry_run_value_is_a_usage_error() -> None:
    code, _, err = run("hold", "x", "--dry-run", "maybe", "--kubeconfig", "/nonexistent")
    assert code == 2 and "--dry-run=maybe: use none, client or server" in err


def test_stop_without_a_selection_is_a_usage_error() -> None:
    code, _, err = run("instance", "stop", "--kubeconfig", "/nonexistent")
    assert code == 2 and "name the instances" in err


def test_instance_list_on_a_snapshot() -> None:
    code, out, err = run("instance", "list", "-A", "--snapshot", SNAPSHOT)
    assert code == 0 and out == "" and err == "No instances found in any namespace.\n"  # as kubectl says it


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ("kind: Pod\napiVersion: v1\nmetadata: foo\n", "metadata"),
        ("kind: Pod\napiVersion: v1\nmetadata: {labels: x}\n", "metadata.labels"),
        ("kind: Pod\napiVersion: v1\nmetadata: {}\nspec: x\n", "spec"),
    ],
)
def test_a_malformed_manifest_is_one_line(doc: str, field: str, tmp_path: Path) -> None:
    path = tmp_path / "pod.yaml"
    path.write_text(doc)
    code, _, err = run("webhook", "dry-run", "pod", "-f", str(path), "--snapshot", SNAPSHOT)
    assert code == 2
    assert err == f"error: {path}: {field} must be a mapping, not str; see 'gpuctl webhook dry-run -h'\n"


def test_a_client_dry_run_needs_no_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    monkeypatch.delenv("GPUCTL_SNAPSHOT", raising=False)
    flags = ("--cpu-only", "--unit-ram", "2Gi", "--dry-run=client")
    code, out, err = run("instancetype", "create", "c1", "--unit-cpu", "2", *flags)
    assert code == 2 and "spec.unitResources.cpu" in err and out == ""
    code, out, err = run("instancetype", "create", "c1", "--unit-cpu", "1", *flags, "-o", "json")
    assert code == 0, err
    assert json.loads(out)["spec"]["unitResources"] == {"cpu": "1", "ram": "2Gi"}
    assert len(err.strip().splitlines()) == 1 and "not checked whether the InstanceType exists" in err
    # The same with no kubeconfig stops a server dry run: it needs the server.
    code, _, err = run("instancetype", "create", "c1", "--unit-cpu", "1", "--cpu-only", "--unit-ram", "2Gi")
    assert code == 1 and "no kubeconfig" in err


POD_REFUSALS = {
    "two": 'Pod in version "v1" cannot be handled as a Pod: quantities must match the regular expression',
    "-1": 'Pod "p" is invalid: [spec.containers[0].resources.limits[nvidia.com/gpu]: Invalid value: "-1": must be '
    "greater than or equal to 0, spec.containers[0].resources.requests[nvidia.com/gpu]",
    "1.5": 'Pod "p" is invalid: [spec.containers[0].resources.limits[nvidia.com/gpu]: Invalid value: "1500m": must '
    "be an integer, spec.containers[0].resources.requests[nvidia.com/gpu]",
}


@pytest.mark.parametrize("cards", sorted(POD_REFUSALS))
def test_a_pod_the_api_server_refuses_is_refused_before_any_gate(cards: str, tmp_path: Path) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "team-a", "labels": {"kueue.x-k8s.io/queue-name": "q"}},
        "spec": {"containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": cards}}}]},
    }
    path = write(tmp_path, pod)
    for args in (("simulate", "-f", path), ("webhook", "dry-run", "pod", "-f", path)):
        code, out, err = run(*args, "--snapshot", SNAPSHOT)
        assert code == 2 and POD_REFUSALS[cards] in err and out == "", (args, code, out, err)
