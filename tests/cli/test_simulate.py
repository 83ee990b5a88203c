"""``gpuctl simulate`` on the bundled example snapshot: the JSON contract, sequences, scenarios, exit codes, errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpuctl.cli.main import app

ROOT = Path(__file__).resolve().parents[2]
SNAPSHOT = str(ROOT / "examples" / "snapshot")
POD = str(ROOT / "examples" / "pod.yaml")
INSTANCE = str(ROOT / "examples" / "instance.yaml")
ENTRANCE = "gpustack-fnv64-c4680bb149644f1c"
runner = CliRunner()


def run(*args: str, stdin: str | None = None) -> tuple[int, str, str]:
    result = runner.invoke(app, ["simulate", "--snapshot", SNAPSHOT, *args], input=stdin)
    return result.exit_code, result.stdout, result.stderr


def whole_cards(name: str, cards: int) -> str:
    return json.dumps(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Workload",
            "metadata": {"name": name, "namespace": "team-a"},
            "spec": {
                "queueName": ENTRANCE,
                "podSets": [
                    {
                        "name": "main",
                        "count": 1,
                        "template": {
                            "spec": {
                                "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(cards)}}}]
                            }
                        },
                    }
                ],
            },
        }
    )


def test_one_admitted_pod_gives_explains_object_with_its_placement() -> None:
    code, out, _ = run("-f", POD, "-o", "json")
    assert code == 0
    data = json.loads(out)
    assert (data["kind"], data["namespace"], data["name"], data["heldBy"], data["admitted"]) == (
        "Pod",
        "team-a",
        "embed-small",
        None,
        True,
    )
    assert [g["verdict"] for g in data["gates"]] == ["passed"] * 5
    # A quarter of a card goes to the fullest card that still fits it: a10g-1's GPU-0001 holds a half slice.
    [node] = data["placement"]["nodes"]
    assert (node["name"], node["pods"], node["cards"]) == ("a10g-1", 1, ["GPU-0001"])
    # As Allocate would record it: the webhook folded the 25 % into 400000 units.
    assert node["allocations"] == [
        {"pod": 0, "container": "server", "card": "GPU-0001", "group": "a10g", "mode": 3, "units": 400000}
    ]


def test_several_manifests_run_in_sequence_and_give_a_list(tmp_path: Path) -> None:
    path = tmp_path / "three.yaml"
    path.write_text("\n---\n".join(whole_cards(n, 1) for n in ("first", "second", "third")))
    code, out, _ = run("-f", str(path), "-o", "json", "--exit-code", "--kueue-version", "0.17")
    data = json.loads(out)
    assert data["kind"] == "List" and data["kueue"] == {"version": "v0.17.0", "source": "--kueue-version"}

    def placed(items: list[dict[str, Any]]) -> list[tuple[str, bool, list[str]]]:
        return [(i["name"], i["admitted"], [n["name"] for n in i.get("placement", {}).get("nodes", [])]) for i in items]

    # The queue has two cards of quota left. TAS puts the first on a10g-1: the fewest free raw keys that hold it.
    # On Kueue 0.17 the first's Pod carries Kueue's topology annotation, so TAS never counts its keys: a10g-1 still
    # sorts first for the second, but the credits it charges no longer fit there, and Kueue sets it aside on every try.
    assert placed(data["items"]) == [("first", True, ["a10g-1"]), ("second", False, []), ("third", False, [])]
    second = data["items"][1]["gates"][1]
    assert second["part"] == "tas-placement" and second["summary"].endswith(
        "no longer fits after processing another workload"
    )
    assert any("on a10g-1 by their raw requests" in line for line in second["evidence"])
    assert code == 3  # --exit-code: one would be held
    # The snapshot's own Kueue (its manager's image: v0.19.2) charges the first's raw keys: a10g-1 is full for the
    # second, which goes to a10g-2; the third finds no quota left.
    code, out, _ = run("-f", str(path), "-o", "json", "--exit-code")
    data = json.loads(out)
    assert data["kueue"]["version"] == "v0.19.2" and "kueue-controller-manager" in data["kueue"]["source"]
    assert placed(data["items"]) == [("first", True, ["a10g-1"]), ("second", True, ["a10g-2"]), ("third", False, [])]
    assert data["items"][2]["gates"][1]["part"] == "quota" and code == 3


def test_stdin_and_suggest(tmp_path: Path) -> None:
    code, out, _ = run("-f", "-", "--suggest", "-o", "json", stdin=whole_cards("three", 3))
    assert code == 0
    data = json.loads(out)
    assert data["heldBy"] == 2 and "placement" not in data
    kinds = {u["kind"]: u for u in data["unblockers"]}
    assert kinds["finish"]["workloads"] == ["team-a/batch"] and kinds["finish"]["admitted"] is True
    assert kinds["add-nodes"]["count"] == 1


def test_scenarios_change_the_answer(tmp_path: Path) -> None:
    path = tmp_path / "three.json"
    path.write_text(whole_cards("three", 3))
    assert json.loads(run("-f", str(path), "-o", "json", "--without", "team-a/batch")[1])["admitted"] is True
    # Three cards with one more node: Kueue 0.17's TAS still picks a10g-2 by its raw keys (an admitted Workload's
    # Pods are charged credits, not keys), where the check holds it; the snapshot's Kueue 0.19 counts the keys the
    # admitted Workload holds and takes the new node. Four cards fit no node of the pool: the new one takes it.
    grown = json.loads(
        run("-f", str(path), "-o", "json", "--add-nodes", "1", "--like", "a10g-2", "--kueue-version", "0.17")[1]
    )
    assert grown["heldBy"] == 3 and "a10g-2 has 2 free of 4" in grown["gates"][2]["summary"]
    grown = json.loads(run("-f", str(path), "-o", "json", "--add-nodes", "1", "--like", "a10g-2")[1])
    assert grown["admitted"] and [n["name"] for n in grown["placement"]["nodes"]] == ["a10g-2-sim-1"]
    wide = tmp_path / "four.json"
    wide.write_text(whole_cards("four", 4))
    assert json.loads(run("-f", str(wide), "-o", "json", "--add-nodes", "1", "--like", "a10g-2")[1])["admitted"] is True
    held = json.loads(run("-f", POD, "-o", "json", "--hold", "gpustack--nvidia-a10g-linux-amd64")[1])
    assert held["heldBy"] == 2 and "stopped (Hold)" in held["gates"][1]["summary"]
    code, out, _ = run("-f", str(wide), "-o", "json", "--add-nodes", "auto", "--like", "a10g-2")
    assert code == 0 and json.loads(out)["addNodes"] == {"like": "a10g-2", "count": 1}


def test_an_existing_workload_simulated_anew() -> None:
    code, out, _ = run("--workload", "team-a/train-big", "-o", "json")
    assert code == 0
    data = json.loads(out)
    assert data["name"] == "train-big" and data["heldBy"] == 2


def test_the_table_names_the_gate_and_the_cards() -> None:
    code, out, _ = run("-f", POD)
    assert code == 0
    assert out.splitlines()[0] == "Pod team-a/embed-small: would be admitted on a10g-1 (GPU-0001)"
    code, out, _ = run("-f", "-", "--suggest", stdin=whole_cards("three", 3))
    assert "Workload team-a/three: would be held at gate 2 (Kueue quota)" in out
    assert "  would admit: 1 Workload(s) finish: team-a/batch (priority 0)" in out


@pytest.mark.parametrize(
    ("args", "stdin", "message"),
    [
        ((), None, "give the workloads to simulate"),
        (
            ("-f", "-"),
            '{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}}',
            "kind 'Service' cannot be simulated",
        ),
        (("-f", "-", "--add-nodes", "2"), "{}", "--add-nodes and --like go together"),
        (("-f", POD, "--add-nodes", "x", "--like", "a10g-1"), None, "give a number of nodes or 'auto'"),
        (("-f", POD, "--without", "team-a/nope"), None, "--without team-a/nope: no such Workload"),
        (("-f", POD, "--drain", "nope"), None, "pool 'nope' has no ClusterQueue of that name"),
        (("-f", POD, "--at-quota", "nope"), None, "--at-quota nope: no ClusterQueue of that name"),
        (("-f", POD, "--add-nodes", "auto", "--like", "nope"), None, "--like nope: no node of that name"),
        (("-f", "/nonexistent.yaml"), None, "/nonexistent.yaml: cannot read"),
        (("-f", "-"), "kind: [", "not valid YAML"),
    ],
)
def test_bad_input_is_one_line_and_exit_2_or_1(args: tuple[str, ...], stdin: str | None, message: str) -> None:
    code, out, err = run(*args, stdin=stdin)
    assert code in (1, 2) and out == ""
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_an_instance_simulates_as_its_pod() -> None:
    code, out, _ = run("-f", INSTANCE, "-o", "json")
    assert code == 0
    data = json.loads(out)
    assert data["kind"] == "Instance" and data["admitted"] is True
    assert any("nvidia.com/gpu.sliced.memory-percentage=50" in e for e in data["gates"][0]["evidence"])


def test_a_template_without_the_queue_label_is_said_in_the_default_line(tmp_path: Path) -> None:
    """The Job is queued (its own label) but its Pod template carries none: the webhook never reviews its Pods."""
    job = tmp_path / "job.yaml"
    job.write_text(
        "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: nolabel\n  namespace: team-a\n  labels:\n"
        "    kueue.x-k8s.io/queue-name: gpustack-fnv64-c4680bb149644f1c\nspec:\n  template:\n    spec:\n"
        "      restartPolicy: Never\n      containers:\n      - name: main\n        image: registry.invalid/app:1\n"
        "        resources:\n          limits:\n            nvidia.com/gpu: '1'\n"
    )
    result = CliRunner().invoke(app, ["simulate", "-f", str(job), "--snapshot", str(ROOT / "examples" / "snapshot")])
    assert result.exit_code == 0, result.stderr
    line = next(ln for ln in result.stdout.splitlines() if "1. Pod webhook" in ln)
    assert "will not review the Pods of pod set main" in line and "kueue.x-k8s.io/queue-name" in line
    labelled = job.read_text().replace(
        "  template:\n    spec:\n",
        "  template:\n    metadata:\n      labels:\n        kueue.x-k8s.io/queue-name: gpustack-fnv64-c4680bb149644f1c\n"
        "    spec:\n",
    )
    job.write_text(labelled)
    result = CliRunner().invoke(app, ["simulate", "-f", str(job), "--snapshot", str(ROOT / "examples" / "snapshot")])
    assert "will not review" not in result.stdout
