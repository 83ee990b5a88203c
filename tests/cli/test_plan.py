"""``gpuctl plan partitions|drain`` and ``simulate --set-mode`` on the maintenance example snapshot: the JSON contract,
the table, exit codes and one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from gpuctl.cli.main import app
from tests.maintenance_snapshot import PATH, text

ROOT = Path(__file__).resolve().parents[2]
SNAPSHOT = str(ROOT / "examples" / "maintenance")
H100 = "gpustack--nvidia-h100-80gb-hbm3-linux-amd64"
A10G = "gpustack--nvidia-a10g-linux-amd64"
runner = CliRunner()


def run(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, [*args, "--snapshot", SNAPSHOT])
    return result.exit_code, result.stdout, result.stderr


def test_the_maintenance_snapshot_is_what_its_generator_writes() -> None:
    assert PATH.read_text() == text(), "regenerate it: python -m tests.maintenance_snapshot"


def test_plan_partitions_json_is_a_list_of_proven_steps() -> None:
    code, out, _ = run("plan", "partitions", "-o", "json")
    assert code == 0
    data = json.loads(out)
    assert (data["apiVersion"], data["kind"]) == ("gpuctl.gpustack.ai/v1", "PlanStepList")
    [step] = data["items"]
    assert set(step) >= {"step", "node", "cards", "blockedBy", "viewsBefore", "viewsAfter", "admits", "proven"}
    assert step["metadata"]["name"] == "h100-a" and step["metadata"]["labels"]["kubernetes.io/hostname"] == "h100-a"
    assert (step["step"], step["node"], step["cards"], step["to"], step["proven"]) == (
        1,
        "h100-a",
        ["GPU-0003", "GPU-0004", "GPU-0005"],
        "partitioned",
        True,
    )
    assert [a["name"] for a in step["admits"]] == [f"infer-{i}" for i in range(5)]
    assert all(a["kind"] == "Workload" and a["namespace"] == "team-a" for a in step["admits"])
    [summary] = data["plans"]
    assert summary["pool"] == H100 and summary["switches"] == 3
    assert summary["cost"]["accelerator"] == {"remaining": -3, "capacity": -3}
    assert {p["name"]: p["count"] for p in summary["viewsAfter"]["acceleratorPartitioned"]["remainingProfiles"]} == {
        "1g.10gb": 21,
        "1g.20gb": 12,
        "2g.20gb": 9,
        "3g.40gb": 6,
        "4g.40gb": 3,
        "7g.80gb": 3,
    }


def test_plan_partitions_table_fits_80_columns_and_names_what_it_costs() -> None:
    code, out, _ = run("plan", "partitions", H100)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["STEP", "NODE", "CARDS", "TO", "FIRST", "ADMITS"]
    assert lines[1].split() == ["1", "h100-a", "3", "partitioned", "-", "5"]
    assert all(len(line) <= 80 for line in lines[:2] + lines[3:])
    assert "  cost:     EX -3 cards, SH -30 shares, SL -300 %, PT +21 instances (capacity)" in lines
    code, wide, _ = run("plan", "partitions", H100, "-o", "wide")
    assert "GPU-0004   partitioned" in wide and "was whole; free: 1g.10gb 7, 1g.20gb 4" in wide


def test_plan_partitions_for_a_demand_of_ones_own() -> None:
    code, out, _ = run("plan", "partitions", H100, "--for", "7g.80gb=2", "-o", "json")
    assert code == 0
    [summary] = json.loads(out)["plans"]
    assert [d["asks"] for d in summary["demand"]] == ["1 x 7g.80gb partition"] * 2
    assert len(summary["admittedAfter"]) == 2 and summary["switches"] == 2
    # On Kueue 0.17, with five whole cards asked after them, two switches would admit six of seven but set aside a
    # whole-card request admitted as things are (TAS charges h100-a's credits): no plan takes that, and it says so.
    # From 0.18 TAS counts the raw keys those admitted hold, and the two switches admit all seven.
    code, out, _ = run("plan", "partitions", H100, "--for", "7g.80gb=2", "--for", "ex=5", "-o", "json")
    [summary] = json.loads(out)["plans"]
    assert summary["switches"] == 2 and len(summary["admittedAfter"]) == 7 and not summary["tried"]
    code, out, _ = run(
        "plan", "partitions", H100, "--for", "7g.80gb=2", "--for", "ex=5", "-o", "json", "--kueue-version", "0.17"
    )
    [summary] = json.loads(out)["plans"]
    assert summary["switches"] == 0 and len(summary["admittedAfter"]) == 5
    assert any("but sets aside team-a/for-ex-7, admitted as things are" in t["why"] for t in summary["tried"])
    held = {h["workload"]: h["why"] for h in summary["stillHeld"]}
    assert "none of its cards is in partition mode; `gpuctl plan partitions" in held["team-a/for-7g-80gb-1"]


def test_plan_partitions_refuses_what_it_cannot_read_in_one_line() -> None:
    for args, message in (
        (("--for", "3g.40gb=2"), "--for asks a demand of one pool"),
        ((H100, "--for", "3g.40gb"), "give PROFILE=N"),
        (("nope",), 'instancetype "nope" not found or not accelerated'),
        ((H100, "--for", "ex=1", "-n", "team-z"), "namespace team-z has no LocalQueue of pool"),
    ):
        code, out, err = run("plan", "partitions", *args)
        assert code in (1, 2) and out == "" and message in err and len(err.strip().splitlines()) == 1, (args, err)


def test_plan_drain_names_the_evicted_and_exits_3_when_one_has_nowhere_to_go() -> None:
    code, out, _ = run("plan", "drain", "a10g-a", "-o", "json")
    assert code == 0
    data = json.loads(out)
    [step] = data["items"]
    assert (step["node"], step["to"], step["proven"]) == ("a10g-a", "cordoned", True)
    evicted = {e["name"]: e for e in step["evicted"]}
    assert evicted["embed"]["result"] == "readmitted"
    assert evicted["embed"]["placement"]["nodes"][0]["name"] == "a10g-b"
    assert evicted["train"]["result"] == "held" and evicted["train"]["heldBy"] == 2
    assert [w["name"] for w in data["nowhere"]] == ["train"]
    assert [a["name"] for a in step["admits"]] == ["embed"]
    code, _, _ = run("plan", "drain", "a10g-a", "--exit-code")
    assert code == 3
    code, _, _ = run("plan", "drain", "h100-b", "--exit-code")
    assert code == 0  # "finetune" finds two free cards on h100-a
    code, out, _ = run("plan", "drain", "node/a10g-a", "-o", "name")
    assert (code, out) == (0, "node/a10g-a\n")


def test_plan_drain_suggests_what_would_make_room() -> None:
    code, out, _ = run("plan", "drain", "a10g-a", "--suggest", "-o", "json")
    assert code == 0
    train = next(e for e in json.loads(out)["items"][0]["evicted"] if e["name"] == "train")
    changes = {u["kind"]: u for u in train["unblockers"]}
    assert changes["finish"]["workloads"] == ["team-a/batch"] and changes["add-nodes"]["count"] == 1


def test_plan_drain_table_keeps_to_80_columns_and_wide_names_every_card() -> None:
    code, out, _ = run("plan", "drain", "h100-a", "a10g-b")
    assert code == 0
    table = out.splitlines()[:4]
    assert table[1].split() == ["1", "h100-a", "team-a/vllm-a", "3", "h100-b", "(3", "cards)"]
    assert table[3].split() == ["team-a/batch", "2", "nowhere:", "gate", "2"]
    assert all(len(line) <= 80 for line in table), table
    code, wide, _ = run("plan", "drain", "h100-a", "a10g-b", "-o", "wide")
    assert "h100-b (GPU-0000, GPU-0001, GPU-0002)" in wide and "nowhere: gate 2 (Kueue TAS placement)" in wide
    # Where the cards' ids fit, the narrow table names them.
    code, out, _ = run("plan", "drain", "a10g-a")
    assert "team-a/embed   1       a10g-b (GPU-0003)" in out


def test_plan_drain_refuses_unknown_and_repeated_nodes() -> None:
    code, _, err = run("plan", "drain", "nope")
    assert code == 1 and 'node "nope" not found: no Node or Devices object' in err
    code, _, err = run("plan", "drain", "a10g-a", "a10g-a")
    assert code == 2 and "a node is named twice" in err


def test_simulate_set_mode_switches_a_card_or_says_why_not(tmp_path: Path) -> None:
    job = tmp_path / "job.json"
    job.write_text(
        json.dumps(
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {
                    "name": "infer",
                    "namespace": "team-a",
                    "labels": {"kueue.x-k8s.io/queue-name": "gpustack-fnv64-e4768a65ca0ce96b"},
                },
                "spec": {
                    "template": {
                        "spec": {
                            "containers": [
                                {
                                    "name": "main",
                                    "image": "vllm",
                                    "resources": {
                                        "limits": {
                                            "nvidia.com/gpu.partitioned": "1",
                                            "nvidia.com/gpu.partitioned.mig-3g.40gb": "1",
                                        }
                                    },
                                }
                            ]
                        }
                    }
                },
            }
        )
    )
    code, out, _ = run("simulate", "-f", str(job), "-o", "json")
    assert code == 0 and json.loads(out)["heldBy"] == 2
    code, out, _ = run("simulate", "-f", str(job), "--set-mode", "h100-a/GPU-0007=partitioned", "-o", "json")
    data = json.loads(out)
    assert code == 0 and data["admitted"] and data["placement"]["nodes"][0]["cards"] == ["GPU-0007"]
    for value, message in (
        (
            "h100-a/GPU-0000=partitioned",
            "GPU-0000 holds allocations in whole (exclusive) mode (Workload team-a/vllm-a)",
        ),
        ("h100-a=sliced", "give NODE=partitioned|whole"),
        ("a10g-a/GPU-0000=partitioned", "no card of model nvidia-a10g reports partition profiles"),
    ):
        code, out, err = run("simulate", "-f", str(job), "--set-mode", value)
        assert code == 2 and out == "" and message in err and len(err.strip().splitlines()) == 1, (value, err)


def test_a_drain_says_which_ledger_it_reads_where_the_published_one_differs() -> None:
    """On the example snapshot h100-1's Pods record fewer partitions than its published ledger: the plan (as gate 3)
    reads the rebuilt ledger, and says what `views --by-node` reads instead, rather than differing silently."""
    example = str(ROOT / "examples" / "snapshot")

    def run(*args: str) -> tuple[int, str, str]:
        result = runner.invoke(app, list(args))
        return result.exit_code, result.stdout, result.stderr

    code, out, _ = run("plan", "drain", "h100-1", "--snapshot", example)
    assert code == 0
    _, by_node, _ = run("views", "--by-node", "--snapshot", example, "-o", "json")
    h100 = next(i for i in json.loads(by_node)["items"] if i["node"] == "h100-1")
    pt = h100["acceleratorPartitioned"]
    published = f"{pt['onceMaxRequest']}/{pt['remaining']}"  # as a views cell: the largest one request / remaining
    line = next(ln for ln in out.splitlines() if "published Devices" in ln)
    assert "rebuilt from its Pods' allocation records" in line and line.endswith(f"0/0 0/0 0/0 {published})")
    assert "before: EX/SH/SL/PT 0/0 0/0 0/0 1/56" in out
    _, body, _ = run("plan", "drain", "h100-1", "--snapshot", example, "-o", "json")
    data = json.loads(body)
    assert data["ledgers"] == "rebuilt-from-pods"
    assert [p["acceleratorPartitioned"]["remaining"] for p in data["published"]] == [pt["remaining"]]
    # Where the two agree (a10g-1), no such line.
    _, agree, _ = run("plan", "drain", "a10g-1", "--snapshot", example)
    assert "published Devices" not in agree
