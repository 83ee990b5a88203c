"""``gpuctl doctor`` on the example snapshot (a hand-written one, with the gaps the operator would have filled)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from typer.testing import CliRunner

from gpuctl.cli.main import app

ROOT = Path(__file__).resolve().parents[2]
SNAPSHOT = str(ROOT / "examples" / "snapshot")


def test_findings_as_a_list_and_exit_3_when_a_check_fails(tmp_path: Path) -> None:
    import shutil

    import yaml

    # The example with its CPU queue's resource groups emptied: under IgnoreUndeclared it admits everything.
    snapshot = tmp_path / "snapshot"
    shutil.copytree(SNAPSHOT, snapshot)
    queues = list(yaml.safe_load_all((snapshot / "clusterqueues.yaml").read_text()))
    queues[0]["spec"]["resourceGroups"] = []
    (snapshot / "clusterqueues.yaml").write_text(yaml.safe_dump_all(queues))
    result = CliRunner().invoke(app, ["doctor", "--snapshot", str(snapshot), "-o", "json"])
    assert result.exit_code == 3
    data = json.loads(result.stdout)
    assert data["kind"] == "DoctorFindingList"
    assert all(set(i) == {"check", "status", "saw", "why", "fix"} for i in data["items"])
    by_check = {(i["check"], i["status"]) for i in data["items"]}
    assert ("admissioncheck", "ok") in by_check
    # A CPU queue that declares no resource groups admits: the design says never leave one so.
    assert ("queue-resources", "fail") in by_check
    fails = [i for i in data["items"] if i["status"] == "fail"]
    assert all(i["fix"] and i["why"] for i in fails)


def test_the_table_has_one_line_per_finding() -> None:
    result = CliRunner().invoke(app, ["doctor", "--snapshot", SNAPSHOT])
    assert result.exit_code in (0, 3)
    lines = result.stdout.splitlines()
    assert lines[0].split()[:4] == ["STATUS", "CHECK", "SAW", "FIX"]
    assert len(lines) - 1 == len(
        json.loads(CliRunner().invoke(app, ["doctor", "--snapshot", SNAPSHOT, "-o", "json"]).stdout)["items"]
    )


def test_the_example_kueue_configuration_is_the_one_the_design_deploys() -> None:
    items = json.loads(CliRunner().invoke(app, ["doctor", "--snapshot", SNAPSHOT, "-o", "json"]).stdout)["items"]
    kueue = {(i["check"], i["status"]) for i in items if i["check"].startswith("kueue-")}
    assert kueue == {
        ("kueue-gates", "ok"),
        ("kueue-resources", "ok"),
        ("kueue-topology", "ok"),
        ("kueue-version", "ok"),
    }


def test_doctor_prints_the_versions_and_warns_outside_the_tested_range(tmp_path: Path) -> None:
    import shutil

    items = json.loads(CliRunner().invoke(app, ["doctor", "--snapshot", SNAPSHOT, "-o", "json"]).stdout)["items"]
    found = {i["check"]: i for i in items}
    assert found["kueue-version"]["saw"].startswith("Kueue v0.19.2 from the image of deployment kueue-system/")
    # The example snapshot was not written by `gpuctl dump`: the API server's version is not in it.
    assert found["kubernetes-version"]["status"] == "warn"
    root = tmp_path / "old"
    shutil.copytree(SNAPSHOT, root)
    text = (root / "kueue.yaml").read_text().replace("kueue:v0.19.2", "kueue:v0.16.4")
    (root / "kueue.yaml").write_text(text)
    (root / "dump.json").write_text(
        json.dumps(
            {
                "apiVersion": "gpuctl.gpustack.ai/v1",
                "kind": "Dump",
                "metadata": {"name": "dump", "creationTimestamp": "2026-12-01T05:00:00Z"},
                "source": "cluster https://example:6443",
                "kubernetesVersion": "v1.38.0",
            }
        )
    )
    items = json.loads(CliRunner().invoke(app, ["doctor", "--snapshot", str(root), "-o", "json"]).stdout)["items"]
    found = {i["check"]: i for i in items}
    assert (
        found["kueue-version"]["status"] == "warn" and "outside the tested 0.17–0.20" in found["kueue-version"]["saw"]
    )
    assert found["kubernetes-version"]["status"] == "warn"
    assert found["kubernetes-version"]["saw"] == "Kubernetes v1.38.0, outside the tested 1.35–1.37"


def test_kueue_resources_prints_the_generated_block() -> None:
    import yaml

    from gpuctl.core.credits import kueue_resources_config

    result = CliRunner().invoke(app, ["doctor", "--kueue-resources"])
    assert result.exit_code == 0
    assert yaml.safe_load(result.stdout) == {"resources": kueue_resources_config()}


def test_a_broken_kueue_configmap_is_a_finding_and_a_bad_option_a_usage_error(tmp_path: Path) -> None:
    import shutil

    snapshot = tmp_path / "snap"
    shutil.copytree(SNAPSHOT, snapshot)
    (snapshot / "kueue-config.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: kueue-manager-config, namespace: kueue-system}\n"
        "data:\n  controller_manager_config.yaml: 'featureGates: [unclosed'\n"
    )
    result = CliRunner().invoke(app, ["doctor", "--snapshot", str(snapshot), "-o", "json"])
    assert result.exit_code == 3, result.output
    [bad] = [i for i in json.loads(result.stdout)["items"] if i["check"] == "kueue-config"]
    assert bad["status"] == "fail" and "not valid YAML" in bad["saw"]
    (snapshot / "kueue-config.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: kueue-manager-config, namespace: kueue-system}\n"
        f"data:\n  controller_manager_config.yaml: '{'[' * 5000}'\n"
    )
    result = CliRunner().invoke(app, ["doctor", "--snapshot", str(snapshot), "-o", "json"])
    assert result.exit_code == 3 and "Traceback" not in result.output, result.output
    [deep] = [i for i in json.loads(result.stdout)["items"] if i["check"] == "kueue-config"]
    assert "nest" in deep["saw"] and deep["saw"].startswith("ConfigMap kueue-system/kueue-manager-config key")
    result = CliRunner().invoke(app, ["doctor", "--snapshot", SNAPSHOT, "--kueue-config", "no-slash"])
    assert result.exit_code == 2 and "NAMESPACE/NAME" in result.stderr and "Traceback" not in result.output


def test_a_dump_keeps_only_who_stopped_an_instance_and_when_a_pool_went_inactive_of_its_managed_fields() -> None:
    from gpuctl.cli.commands.dump import slim
    from gpuctl.core import naming
    from gpuctl.core.instances import parse_instance

    managed = [
        {"manager": "kubectl-create", "fieldsV1": {"f:spec": {"f:type": {}, "f:image": {}}}},
        {"manager": naming.INSTANCE_STOP_MANAGER, "fieldsV1": {"f:spec": {"f:stop": {}}}},
    ]
    instance = {"kind": "Instance", "metadata": {"name": "i", "managedFields": managed}, "spec": {"stop": True}}
    kept = slim(instance)
    assert kept["metadata"]["managedFields"] == [managed[1]]
    assert parse_instance(kept).stopped_by == naming.INSTANCE_STOP_MANAGER
    assert "managedFields" not in slim({"kind": "Pod", "metadata": {"name": "p", "managedFields": managed}})["metadata"]
    from gpuctl.core.instancetypes import parse_instancetype

    inactive = [
        {"manager": "kubectl-create", "time": "2026-01-01T00:00:00Z", "fieldsV1": {"f:spec": {"f:os": {}}}},
        {"manager": "gpuctl", "time": "2026-01-02T03:04:05Z", "fieldsV1": {"f:spec": {"f:inactive": {}}}},
    ]
    it = {"kind": "InstanceType", "metadata": {"name": "t", "managedFields": inactive}, "spec": {"inactive": True}}
    kept = slim(it)
    assert kept["metadata"]["managedFields"] == [inactive[1]]
    assert parse_instancetype(kept).inactive_since == "2026-01-02T03:04:05Z"


def test_on_a_dump_the_leader_lease_is_judged_at_the_time_the_dump_was_taken(tmp_path: Path) -> None:
    from gpuctl.cli.commands.dump import dump_record
    from gpuctl.core import naming

    renewed = "2026-01-01T00:00:00Z"
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": naming.OPERATOR_NAME, "namespace": naming.OPERATOR_NAMESPACE},
        "spec": {"replicas": 2, "template": {"spec": {"containers": [{"args": ["--leader-elect"]}]}}},
        "status": {"readyReplicas": 2},
    }
    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": naming.OPERATOR_NAME, "namespace": naming.OPERATOR_NAMESPACE},
        "spec": {"holderIdentity": "op-1", "renewTime": renewed, "acquireTime": renewed, "leaseDurationSeconds": 15},
    }

    def leader(*objects: dict[str, object]) -> dict[str, str]:
        (tmp_path / "snap.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)}))
        result = CliRunner().invoke(app, ["doctor", "--snapshot", str(tmp_path / "snap.json"), "-o", "json"])
        [found] = [i for i in json.loads(result.stdout)["items"] if i["check"] == "operator-leader"]
        return dict(found)

    fresh = leader(deployment, lease, dump_record("2026-01-01T00:00:03Z", "cluster https://example:6443"))
    assert fresh["status"] == "ok" and "renewed 3 s ago" in fresh["saw"]
    # Without the dump's own time, its age is measured from now: long expired.
    assert leader(deployment, lease)["status"] == "fail"


def test_a_snapshot_without_webhook_configurations_says_so_and_no_finding_is_a_python_repr() -> None:
    result = CliRunner().invoke(app, ["doctor", "--snapshot", SNAPSHOT, "-o", "json"])
    assert result.exit_code == 3  # the example snapshot has failing findings (queues missing)
    items = json.loads(result.stdout)["items"]
    webhook = [i for i in items if i["check"] == "webhook"]
    assert [i["status"] for i in webhook] == ["warn"] and "webhook configurations are not in the snapshot" in webhook[
        0
    ]["saw"]
    assert not any("not registered" in i["saw"] for i in items)
    text = " ".join(f"{i['saw']} {i['why']} {i['fix']}" for i in items)
    assert not re.search(r"\{'|': '|\('|\[\(|\bNone\b|\bTrue\b|\bFalse\b", text), text
    fit = [i for i in items if i["check"] == "shadow-fit-label"]
    assert fit and all("published absent, gpuctl computes" in i["saw"] and "{" not in i["saw"] for i in fit)
