"""Every read command on the example snapshot of a cluster that runs GPUStack's worker (examples/gpustack, its objects
in the shapes GPUStack's code writes them): golden tables, and what each must say of GPUStack's own objects."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuctl.cli.main import app

ROOT = Path(__file__).resolve().parents[2]
SNAPSHOT = str(ROOT / "examples" / "gpustack")
GOLDEN = Path(__file__).parent / "golden" / "gpustack"
runner = CliRunner()


def run(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, [*args, "--snapshot", SNAPSHOT])
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture(autouse=True)
def example_now(monkeypatch: pytest.MonkeyPatch) -> None:
    """The clock at the snapshot's "now" (its ages are printed as they were then)."""
    from gpuctl.cli import clock
    from gpuctl.core.queueing import epoch_seconds
    from testbed.example_snapshot import EXAMPLE_NOW

    at = epoch_seconds(EXAMPLE_NOW)
    monkeypatch.setattr(clock, "now", lambda: at)


def test_the_snapshot_is_what_its_generator_writes(tmp_path: Path) -> None:
    from testbed.gpustack_snapshot import write

    write(tmp_path)
    for f in sorted(tmp_path.iterdir()):
        assert (Path(SNAPSHOT) / f.name).read_text() == f.read_text(), "regenerate: python -m testbed.gpustack_snapshot"


GOLDENS = [
    ("views.txt", ["views"]),
    ("views-wide.txt", ["views", "-o", "wide"]),
    ("partitions.txt", ["partitions"]),
    ("workloads.txt", ["workloads", "-A", "-o", "wide"]),
    ("explain-prefill.txt", ["explain", "workload", "team-a/chat-prefill-0"]),
    ("explain-parked.txt", ["explain", "workload", "team-a/search-prefill-0"]),
    ("explain-embed.txt", ["explain", "workload", "team-a/k100-embed"]),
    ("simulate-prefill.txt", ["simulate", "--workload", "team-a/chat-prefill-0"]),
    ("simulate-k100.txt", ["simulate", "-f", str(ROOT / "examples" / "gpustack-k100-slice.yaml")]),
    ("usage.txt", ["usage", "-A"]),
    ("doctor.txt", ["doctor"]),
]


@pytest.mark.parametrize(("golden", "args"), GOLDENS, ids=[g for g, _ in GOLDENS])
def test_matches_golden(golden: str, args: list[str]) -> None:
    code, out, err = run(*args)
    assert code in (0, 3), err
    assert out == (GOLDEN / golden).read_text()


def test_the_k100_ai_pool_shows_its_cards() -> None:
    """GPUStack keeps ``_`` in a group id: the pool's key is hygon-k100_ai, and its two free cards show."""
    code, out, _ = run("views", "gpustack--hygon-k100_ai-linux-amd64", "-o", "json")
    [k100] = json.loads(out)["items"]
    assert code == 0 and k100["accelerator"] == {"onceMaxRequest": 2, "remaining": 2, "capacity": 4}
    assert k100["acceleratorSliced"]["remaining"] == 250  # two free cards and one half-sliced


def test_the_worker_s_resource_names_are_read_from_its_deployment() -> None:
    """The worker renames Hygon's resource to hygon.com/gpu: a K100 slice is read as one (folded, checked card by
    card, granted a card), where GPUStack's default name would see no accelerator in it at all."""
    manifest = str(ROOT / "examples" / "gpustack-k100-slice.yaml")
    code, out, _ = run("simulate", "-f", manifest, "-o", "json")
    item = json.loads(out)
    [placed] = item["placement"]["nodes"]
    assert code == 0 and item["admitted"] and (placed["name"], placed["cards"]) == ("k100-1", ["GPU-0002"])
    assert item["gates"][2]["check"]["state"] == "Ready"
    override = "GPUSTACK_HYGON_ACCELERATABLE_RESOURCE_NAME=hygon.com/dcu"
    code, out, _ = run("simulate", "-f", manifest, "-o", "json", "--worker-env", override)
    default = json.loads(out)
    assert [n["cards"] for n in default["placement"]["nodes"]] == [[]]
    assert "no accelerator flavor" in default["gates"][2]["summary"]


def test_a_replica_held_by_the_joint_check_is_explained_as_such() -> None:
    code, out, _ = run("explain", "workload", "team-a/chat-prefill-0", "-o", "json")
    data = json.loads(out)
    gate3 = data["gates"][2]
    assert code == 0 and data["heldBy"] == 3
    assert gate3["part"] == "gpustack-model-deployment-joint" and gate3["name"].startswith(
        "gpustack-model-deployment-joint"
    )
    assert {c["name"]: c["state"] for c in gate3["checks"]} == {
        "gpustack-node-devices": "Ready",
        "gpustack-model-deployment-joint": "Pending",
    }


def test_a_parked_replica_is_said_parked_and_held_at_gate_3() -> None:
    _, out, _ = run("explain", "workload", "team-a/search-prefill-0", "-o", "json")
    data = json.loads(out)
    assert data["heldBy"] == 3 and data["gates"][2]["summary"].startswith("parked by gpustack-model-deployment-joint")
    assert data["gates"][1]["verdict"] == "not-applicable"


def test_a_draining_pool_reads_zero_as_published() -> None:
    code, out, _ = run("views", "gpustack--thead-ppu-zw810e-linux-amd64", "-o", "json", "--published")
    [ppu] = json.loads(out)["items"]
    assert code == 0 and ppu["phase"] == "Draining"
    assert ppu["acceleratorPartitioned"] == {
        "onceMaxRequest": 0,
        "remaining": 0,
        "capacity": 0,
        "remainingProfiles": [],
        "allocatedProfiles": [],
    }
    assert ppu["differences"] == [] and "HoldAndDrain" in ppu["note"]


def test_the_stale_published_figure_is_shown_beside_the_computed_one() -> None:
    _, out, _ = run("views", "-o", "json")
    h100 = next(i for i in json.loads(out)["items"] if "h100" in i["name"])
    [d] = h100["differences"]
    assert (d["field"], d["published"], d["computed"]) == ("acceleratorPartitioned.remaining", "50", "49")
    _, doctor, _ = run("doctor", "-o", "json")
    found = [i for i in json.loads(doctor)["items"] if i["check"] == "shadow-view"]
    assert [("published 50" in i["saw"] and "computes 49" in i["saw"]) for i in found] == [True]
    assert not any("kubectl patch" in i["fix"] for i in json.loads(doctor)["items"])


def test_doctor_judges_gpustacks_own_webhooks_and_checks() -> None:
    _, out, _ = run("doctor", "-o", "json")
    items = json.loads(out)["items"]
    by = {}
    for i in items:
        by.setdefault(i["check"], []).append(i["status"])
    assert set(by["gpustack-webhooks"]) == {"ok"} and len(by["gpustack-webhooks"]) == 8
    assert by["gpustack-checks"] == ["ok", "ok"]
    assert by["operator-mode"] == ["ok"]
    assert "webhook" not in by  # gpuctl's own entries are the standalone's, not audited beside the worker
    kueue = {i["saw"] for i in items if i["check"] == "kueue-resources"}
    assert kueue == {
        "12 credits transformations of hygon, nvidia, thead; the other keys ignored by quotaCheckStrategy IgnoreUndeclared"
    }


@pytest.mark.parametrize(
    ("annotation", "verdict"),
    [
        ("kueue.x-k8s.io/podset-preferred-topology", "unknown"),
        ("kueue.x-k8s.io/podset-required-topology", "passed"),
    ],
)
def test_balanced_placement_is_said_unmodelled_for_a_preferred_level_only(
    tmp_path: Path, annotation: str, verdict: str
) -> None:
    """GPUStack's chart runs Kueue with TASBalancedPlacement: Kueue spreads a PodSet asking for a preferred topology
    level its own way, which simulate says it does not model; a required level is placed as without the gate."""
    import yaml

    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "sweep",
            "namespace": "team-a",
            "labels": {"kueue.x-k8s.io/queue-name": "gpustack-fnv64-b097e64db4b3e56a"},
        },
        "spec": {
            "parallelism": 2,
            "completions": 2,
            "template": {
                "metadata": {"annotations": {annotation: "kubernetes.io/hostname"}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "main",
                            "image": "registry.example.com/sweep:1",
                            "resources": {"limits": {"hygon.com/gpu": "1"}},
                        }
                    ],
                },
            },
        },
    }
    manifest = tmp_path / "job.yaml"
    manifest.write_text(yaml.safe_dump(job))
    _, out, err = run("simulate", "-f", str(manifest), "-o", "json")
    gate2 = json.loads(out)["gates"][1]
    assert gate2["verdict"] == verdict, (out, err)
    if verdict == "unknown":
        assert gate2["part"] == "tas-placement" and "TASBalancedPlacement" in gate2["summary"]


def test_the_joint_check_passes_what_is_no_modeldeployment_replica() -> None:
    code, out, _ = run("simulate", "-f", str(ROOT / "examples" / "gpustack-k100-slice.yaml"), "-o", "json")
    gate3 = json.loads(out)["gates"][2]
    assert code == 0 and gate3["verdict"] == "passed"
    assert any("gpustack-model-deployment-joint: Ready: nothing to wait for" in e for e in gate3["evidence"])


def test_diff_reports_a_disagreement_resolved_and_appearing(tmp_path: Path) -> None:
    """The worker corrects the stale figure between two reads: diff says it resolved, both values; read the other
    way round, it appeared, with the reason."""
    import shutil

    mended = tmp_path / "mended"
    shutil.copytree(SNAPSHOT, mended)
    types = json.loads((mended / "instancetypes.json").read_text())
    h100 = next(i for i in types["items"] if "h100" in i["metadata"]["name"])
    h100["status"]["acceleratorPartitioned"]["remaining"] = "49"
    (mended / "instancetypes.json").write_text(json.dumps(types))

    def disagreements(a: str, b: str) -> list[dict[str, object]]:
        result = runner.invoke(app, ["diff", a, b, "-o", "json"])
        assert result.exit_code == 0, result.stderr
        return [c for c in json.loads(result.stdout)["items"] if c["kind"] == "Disagreement"]

    [resolved] = disagreements(SNAPSHOT, str(mended))
    assert resolved["name"] == f"InstanceType/{h100['metadata']['name']}"
    assert resolved["change"] == "acceleratorPartitioned.remaining: resolved (was published 50, gpuctl computes 49)"
    assert resolved["after"] is None
    [appeared] = disagreements(str(mended), SNAPSHOT)
    assert str(appeared["change"]).startswith(
        "acceleratorPartitioned.remaining: appeared: published 50, gpuctl computes 49 ("
    )
    assert disagreements(SNAPSHOT, SNAPSHOT) == []


def test_a_card_in_a_mode_gpuctl_does_not_know_is_named_and_its_node_still_counts(tmp_path: Path) -> None:
    """A newer device manager writes mode 9 on one free K100_AI card: the card is named (views on stderr and in
    JSON, doctor as a finding) and read as GPUStack's status writer and check read it — free whole while its ledger
    leaves every unit — and the node's other cards stand."""
    import shutil

    odd = tmp_path / "odd"
    shutil.copytree(SNAPSHOT, odd)
    ledgers = json.loads((odd / "devices.json").read_text())
    k100 = next(i for i in ledgers["items"] if i["metadata"]["name"] == "k100-1")
    k100["status"]["groups"][0]["accelerators"][1]["mode"] = 9
    (odd / "devices.json").write_text(json.dumps(ledgers))
    line = (
        "Devices k100-1: card GPU-0001 (hygon-k100_ai index 1): allocation mode 9 is not one gpuctl knows (0 to 5); "
        "read as GPUStack's check reads it (whole while it leaves every unit; never shared, sliced or partitioned)"
    )
    result = runner.invoke(app, ["views", "gpustack--hygon-k100_ai-linux-amd64", "-o", "json", "--snapshot", str(odd)])
    assert result.exit_code == 0 and result.stderr == f"warning: {line}\n"
    [item] = json.loads(result.stdout)["items"]
    assert item["unreadableCards"] == [line]
    assert (item["accelerator"]["remaining"], item["accelerator"]["capacity"]) == (2, 4)
    whole = (ROOT / "examples" / "gpustack-k100-slice.yaml").read_text()
    whole = whole.replace('hygon.com/gpu.sliced: "1"', 'hygon.com/gpu: "2"').replace(
        '        hygon.com/gpu.sliced.memory-percentage: "30"\n', ""
    )
    two_cards = tmp_path / "two-cards.yaml"
    two_cards.write_text(whole)
    placed = runner.invoke(app, ["simulate", "-f", str(two_cards), "-o", "json", "--snapshot", SNAPSHOT])
    assert [n["cards"] for n in json.loads(placed.stdout)["placement"]["nodes"]] == [["GPU-0000", "GPU-0001"]]
    odd_answer = runner.invoke(app, ["simulate", "-f", str(two_cards), "-o", "json", "--snapshot", str(odd)])
    assert [n["cards"] for n in json.loads(odd_answer.stdout)["placement"]["nodes"]] == [["GPU-0000", "GPU-0001"]]
    doctor = runner.invoke(app, ["doctor", "-o", "json", "--snapshot", str(odd)])
    [finding] = [i for i in json.loads(doctor.stdout)["items"] if i["check"] == "unreadable-cards"]
    assert finding["status"] == "warn" and finding["saw"] == line
    _, clean, _ = run("doctor", "-o", "json")
    assert not any(i["check"] == "unreadable-cards" for i in json.loads(clean)["items"])


def test_partitions_show_what_a_draining_pool_publishes_beside_what_its_cards_can_carve() -> None:
    _, out, _ = run("partitions", "-o", "json")
    rows = {(i["instanceType"].split("--")[1][:5], i["profile"]): i for i in json.loads(out)["items"]}
    ppu = rows[("thead", "4g.48gb")]
    assert (ppu["remaining"], ppu["published"]) == (7, {"remaining": 0, "allocated": 0})
    assert "HoldAndDrain" in ppu["difference"]
    h100 = rows[("nvidi", "3g.40gb")]
    assert h100["published"] == {"remaining": h100["remaining"], "allocated": h100["allocated"]}
    assert "difference" not in h100
    _, h100_only, _ = run("partitions", "gpustack--nvidia-h100-80gb-hbm3-linux-amd64")
    assert "PUBLISHED" not in h100_only  # in agreement: not shown unless asked for
    _, asked, _ = run("partitions", "gpustack--nvidia-h100-80gb-hbm3-linux-amd64", "--published")
    assert asked.splitlines()[0].endswith("PUBLISHED") and all(r.endswith("matches") for r in asked.splitlines()[1:])
    code, _, err = run("partitions", "--by-node", "--published")
    assert code == 2 and "--published compares a pool's profiles" in err


def test_top_names_the_check_that_holds_each_workload_at_gate_3(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    code, out, _ = run("top", "--once")
    held = [line.lstrip(" >") for line in out.splitlines() if line.lstrip(" >").startswith("team-a/")]
    rows = {line.split()[0]: line for line in held}
    assert code == 0
    assert rows["team-a/chat-prefill-0"].rstrip().endswith("gpustack-model-deployment-joint Pending")
    assert rows["team-a/search-prefill-0"].rstrip().endswith("gpustack-model-deployment-joint parked")
    assert "gpustack" not in rows["team-a/chat-decode-0"].split("hygon-k100_ai-linux-amd64", 1)[1]


def test_queue_lists_each_pending_workloads_checks() -> None:
    _, out, _ = run("queue", "-o", "json")
    [decode] = json.loads(out)["items"]
    assert decode["name"] == "chat-decode-0" and decode["heldBy"] == 2
    assert isinstance(decode["checks"], list)
    _, wide, _ = run("queue", "-o", "wide")
    assert wide.splitlines()[0].rstrip().endswith("CHECKS")
