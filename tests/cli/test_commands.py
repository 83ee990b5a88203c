"""partitions, explain, workloads, completion, the generated files, and what each command decodes, on the bundled
example snapshot."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuctl.cli.main import app

ROOT = Path(__file__).resolve().parents[2]
SNAPSHOT = str(ROOT / "examples" / "snapshot")
GOLDEN = Path(__file__).parent / "golden"
runner = CliRunner()


def run(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_partitions_table_matches_golden() -> None:
    code, out, _ = run("partitions", "--snapshot", SNAPSHOT)
    assert code == 0 and out == (GOLDEN / "partitions.txt").read_text()


def test_partitions_json_keeps_full_profiles_distinct_from_unoffered() -> None:
    code, out, _ = run("partitions", "--snapshot", SNAPSHOT, "-o", "json", "--by-card")
    assert code == 0
    cards = json.loads(out)["items"]
    first = cards[0]
    assert first["allocatedProfiles"] == [{"name": "3g.40gb", "count": 2}]
    assert {p["name"] for p in first["remainingProfiles"]} == {
        "1g.10gb",
        "1g.20gb",
        "2g.20gb",
        "3g.40gb",
        "4g.40gb",
        "7g.80gb",
    }
    assert all(p["count"] == 0 for p in first["remainingProfiles"])


@pytest.mark.parametrize(("name", "held_by"), [("chat", None), ("train-big", 2), ("embed", 3), ("batch", 4)])
def test_explain_workload_json(name: str, held_by: int | None) -> None:
    code, out, _ = run("explain", "workload", f"team-a/{name}", "--snapshot", SNAPSHOT, "-o", "json")
    assert code == 0
    data = json.loads(out)
    assert data["kind"] == "Workload" and data["namespace"] == "team-a" and data["name"] == name
    assert data["heldBy"] == held_by
    assert [g["verdict"] for g in data["gates"]][: (held_by or 6) - 1] == ["passed"] * ((held_by or 6) - 1)


def test_explain_exit_code() -> None:
    assert run("explain", "workload", "embed", "-n", "team-a", "--snapshot", SNAPSHOT, "--exit-code")[0] == 3
    assert run("explain", "workload", "chat", "-n", "team-a", "--snapshot", SNAPSHOT, "--exit-code")[0] == 0


def test_explain_report_matches_golden() -> None:
    code, out, _ = run("explain", "workload", "team-a/embed", "--snapshot", SNAPSHOT)
    assert code == 0 and out == (GOLDEN / "explain-embed.txt").read_text()


def test_explain_pod_follows_its_workload() -> None:
    code, out, _ = run("explain", "pod", "team-a/batch-0", "--snapshot", SNAPSHOT, "-o", "json")
    data = json.loads(out)
    assert code == 0 and data["kind"] == "Pod" and data["name"] == "batch-0" and data["heldBy"] == 4


def test_explain_unknown_workload_suggests() -> None:
    code, out, err = run("explain", "workload", "team-a/embedd", "--snapshot", SNAPSHOT)
    assert code == 1 and out == ""
    assert err.startswith('error: workload "team-a/embedd" not found') and "did you mean team-a/embed?" in err


def test_explain_bad_reference_is_a_usage_error() -> None:
    code, _, err = run("explain", "workload", "a/b/c", "--snapshot", SNAPSHOT)
    assert code == 2 and "use NAME or NAMESPACE/NAME" in err


@pytest.fixture
def example_now(monkeypatch: pytest.MonkeyPatch) -> None:
    """The clock at the example's "now": its ages are printed as they were on that day."""
    from gpuctl.cli import clock
    from gpuctl.core.queueing import epoch_seconds
    from testbed.example_snapshot import EXAMPLE_NOW

    at = epoch_seconds(EXAMPLE_NOW)
    monkeypatch.setattr(clock, "now", lambda: at)


def test_workloads_table_matches_golden(example_now: None) -> None:
    code, out, _ = run("workloads", "-A", "--snapshot", SNAPSHOT)
    assert code == 0 and out == (GOLDEN / "workloads.txt").read_text()


def test_workloads_ages_and_holds_read_the_conditions_times(example_now: None) -> None:
    """At 12:00:00: batch was created at 10:00:00 (120m) and admitted at 10:00:03, since when its Pods wait (gate 4,
    1h59m57s: 119m); train-big has waited for quota since QuotaReserved=False at 09:12:01 (167m, age 168m); embed's
    check went to Retry at 09:41:00 (139m, age 150m); chat runs (age 4h)."""
    code, table, _ = run("workloads", "-A", "--snapshot", SNAPSHOT, "--sort-by=.heldSince")
    assert code == 0
    rows = [re.split(r"\s{2,}", line.strip()) for line in table.splitlines()]
    assert rows[0][4:7] == ["HELD-BY", "HELD-FOR", "AGE"]
    assert [r[1] for r in rows[1:]] == ["chat", "train-big", "embed", "batch"]
    cells = {r[1]: r[4:7] for r in rows[1:]}
    assert cells == {
        "batch": ["4 scheduler / kubelet", "119m", "120m"],
        "train-big": ["2 Kueue quota", "167m", "168m"],
        "embed": ["3 gpustack-node-devices AdmissionCheck", "139m", "150m"],
        "chat": ["-", "-", "4h"],
    }
    _, body, _ = run("workloads", "-A", "--snapshot", SNAPSHOT, "--sort-by=.metadata.creationTimestamp", "-o", "json")
    items = json.loads(body)["items"]
    assert [i["name"] for i in items] == ["chat", "train-big", "embed", "batch"]
    assert [i["metadata"]["creationTimestamp"] for i in items] == [i["creationTimestamp"] for i in items]
    assert {i["name"]: i["heldSince"] for i in items} == {
        "chat": None,
        "train-big": "2026-11-30T09:12:01Z",
        "embed": "2026-11-30T09:41:00Z",
        "batch": "2026-11-30T10:00:03Z",
    }


def test_workloads_watch_needs_a_live_cluster() -> None:
    code, _, err = run("workloads", "-A", "-w", "--snapshot", SNAPSHOT)
    assert code == 2 and "--watch needs a live cluster" in err


def test_workloads_filters() -> None:
    _, out, _ = run("workloads", "-n", "team-a", "--held", "--snapshot", SNAPSHOT, "-o", "name")
    assert out.split() == [f"workload.kueue.x-k8s.io/{n}" for n in ("batch", "embed", "train-big")]
    _, out, _ = run("workloads", "-n", "other", "--snapshot", SNAPSHOT, "-o", "json")
    assert json.loads(out)["items"] == []
    code, _, err = run("workloads", "-n", "x", "-A", "--snapshot", SNAPSHOT)
    assert code == 2 and "exclusive" in err


def test_completion_scripts() -> None:
    for shell in ("bash", "zsh", "fish"):
        code, out, _ = run("completion", shell)
        assert code == 0 and "_GPUCTL_COMPLETE" in out
    assert run("completion", "tcsh")[0] == 2


def test_completion_protocol_completes_commands_and_flags() -> None:
    env = {
        "COMP_WORDS": "gpuctl views --by",
        "COMP_CWORD": "2",
        "_GPUCTL_COMPLETE": "complete_bash",
        "PATH": "/usr/bin:/bin",
    }
    gpuctl = str(Path(sys.executable).with_name("gpuctl"))
    out = subprocess.run([gpuctl], env=env, capture_output=True, text=True).stdout
    assert out.split() == ["--by-node", "--by-card", "--by-cluster"]


def test_generated_man_pages_and_completions_are_fresh(tmp_path: Path) -> None:
    from gpuctl.cli.docgen import generate

    for path in generate(tmp_path):
        committed = ROOT / path.relative_to(tmp_path)
        assert committed.exists(), f"{committed} is missing: run python -m gpuctl.cli.docgen"
        assert committed.read_text() == path.read_text(), f"{committed} is stale: run python -m gpuctl.cli.docgen"


def test_no_traceback_for_a_malformed_snapshot(tmp_path: Path) -> None:
    (tmp_path / "x.yaml").write_text("kind: [\n")
    for args in (["views"], ["partitions"], ["workloads", "-A"], ["explain", "workload", "a/b"]):
        code, _, err = run(*args, "--snapshot", str(tmp_path))
        assert code == 1 and "Traceback" not in err and err.count("\n") == 1


def test_deploy_manifests_are_fresh(tmp_path: Path) -> None:
    import shutil

    from gpuctl.operator.manifests import write

    shutil.copytree(ROOT / "deploy" / "crds", tmp_path / "crds")
    for path in write(tmp_path):
        committed = ROOT / "deploy" / path.relative_to(tmp_path)
        assert committed.read_text() == path.read_text(), (
            f"{committed} is stale: run python -m gpuctl.operator.manifests deploy"
        )


def test_every_served_webhook_is_registered_under_gpuctls_own_names() -> None:
    """What the standalone operator registers once it serves: every webhook it serves, in configurations of gpuctl's
    own names (none of GPUStack's), the mutating one still ordered before Kueue's."""
    from gpuctl.core import gpustack
    from gpuctl.core.webhooks import REGISTRY as WEBHOOKS
    from gpuctl.operator.manifests import webhook_configurations

    docs = webhook_configurations(ca_bundle="Q0E=")
    registered = {h["name"]: h["clientConfig"]["service"]["path"] for d in docs for h in d["webhooks"]}
    assert registered == {w.name: w.path for w in WEBHOOKS}
    assert docs[0]["metadata"]["name"] < "kueue-mutating-webhook-configuration"
    assert not {d["metadata"]["name"] for d in docs} & set(gpustack.CONFIGURATIONS)
    assert all(h["sideEffects"] == "None" for d in docs for h in d["webhooks"])


@pytest.mark.parametrize(
    "args",
    [
        ("views",),
        ("views", "--by-node"),
        ("views", "--by-card"),
        ("partitions",),
        ("partitions", "--by-node"),
        ("partitions", "--by-card"),
        ("workloads", "-A"),
        ("instancetype", "list"),
        ("explain", "workload", "team-a/chat"),
    ],
)
@pytest.mark.parametrize("output", ["table", "wide", "json", "yaml", "name"])
def test_every_read_command_speaks_every_output_format(args: tuple[str, ...], output: str) -> None:
    import yaml

    code, out, err = run(*args, "--snapshot", SNAPSHOT, "-o", output)
    assert code == 0, err
    assert out.strip()
    if output == "json":
        json.loads(out)
    elif output == "yaml":
        assert isinstance(yaml.safe_load(out), dict)
    elif output == "name":
        assert all("/" in line for line in out.splitlines())
    else:
        assert "\x1b[" not in out  # piped: plain text, no escape codes


def test_explain_on_a_snapshot_without_pods_says_it_judged_the_published_ledger(tmp_path: Path) -> None:
    import shutil

    for f in Path(SNAPSHOT).iterdir():
        if f.name != "pods.json":
            shutil.copy(f, tmp_path / f.name)
    code, out, _ = run("explain", "workload", "team-a/embed", "--snapshot", str(tmp_path), "-o", "json")
    assert code == 0
    gate3 = json.loads(out)["gates"][2]
    assert any("judged on the published Devices ledgers" in e for e in gate3["evidence"])
    # With the Pods, the ledger is rebuilt from their allocation records, as the check does, and nothing is said.
    code, out, _ = run("explain", "workload", "team-a/embed", "--snapshot", SNAPSHOT, "-o", "json")
    gate3 = json.loads(out)["gates"][2]
    assert gate3["check"]["state"] == "Retry"
    assert not any("published Devices ledgers" in e for e in gate3["evidence"])


@pytest.mark.parametrize(
    ("args", "records"),
    [
        (["workloads", "-A"], {"Pod", "Workload", "Node"}),
        (["usage", "-A"], {"Pod", "Workload"}),
        (["queue"], {"Pod", "Workload", "Node"}),
        (["fragmentation"], {"Workload"}),
    ],
)
def test_a_command_reading_a_kind_as_records_decodes_its_objects_once(
    args: list[str], records: set[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kinds a command reads as records are parsed as the snapshot is read; none is decoded again from the
    text the snapshot keeps."""
    from gpuctl.cluster import snapshot

    decoded: list[str] = []
    real = snapshot._Entry.object

    def counting(entry: snapshot._Entry) -> dict[str, object]:
        obj = real(entry)
        decoded.append(str(obj.get("kind")))
        return obj

    monkeypatch.setattr(snapshot._Entry, "object", counting)
    code, _, err = run(*args, "-o", "json", "--snapshot", SNAPSHOT)
    assert code == 0, err
    assert not records & set(decoded), decoded


def test_explain_instance_without_a_pod_blames_what_its_type_actually_lacks(tmp_path: Path) -> None:
    """The example Instance, no Pod made for it: its A10G type publishes detail and entrance, so the operator is
    named; with the type's detail removed, the detail is."""
    import shutil

    import yaml

    root = tmp_path / "snap"
    shutil.copytree(SNAPSHOT, root)
    shutil.copy(ROOT / "examples" / "instance.yaml", root / "instance.yaml")
    code, _, err = run("explain", "instance", "team-a/my-notebook", "--snapshot", str(root))
    assert code == 1 and err.count("\n") == 1
    assert "although InstanceType gpustack--nvidia-a10g-linux-amd64 publishes its detail and entrance" in err
    assert "has not published" not in err
    types = list(yaml.safe_load_all((root / "instancetypes.yaml").read_text()))
    for t in types:
        if t["metadata"]["name"] == "gpustack--nvidia-a10g-linux-amd64":
            t["status"].pop("detail")
    (root / "instancetypes.yaml").write_text(yaml.safe_dump_all(types))
    code, _, err = run("explain", "instance", "team-a/my-notebook", "--snapshot", str(root))
    assert code == 1
    assert "has not published its accelerator detail (status.detail)" in err and "operator makes the Pod once" in err


def test_explain_json_names_the_object_as_kubectl_does_and_keeps_the_contract() -> None:
    code, out, _ = run("explain", "workload", "team-a/embed", "--snapshot", SNAPSHOT, "-o", "json")
    assert code == 0
    data = json.loads(out)
    assert (data["apiVersion"], data["kind"]) == ("kueue.x-k8s.io/v1beta2", "Workload")
    assert data["metadata"]["name"] == "embed" and data["metadata"]["namespace"] == "team-a"
    assert {"namespace", "name", "heldBy", "gates"} <= set(data) and data["heldBy"] == 3
    code, out, _ = run(
        "explain", "workload", "team-a/embed", "--snapshot", SNAPSHOT, "-o", "jsonpath={.metadata.name}:{.heldBy}"
    )
    assert (code, out) == (0, "embed:3")
