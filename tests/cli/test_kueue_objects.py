"""Kueue 0.19/0.20's object model on the example snapshot: pending-reason tokens (and the message reading older Kueue
needs), preemption gates, Concurrent Admission families, effective quotas and named preemptors, through explain,
workloads, queue, usage and simulate. The objects are shaped as Kueue's v1beta2 API types write them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gpuctl.cli.main import app
from gpuctl.core import naming
from testbed.factories import workload

ROOT = Path(__file__).resolve().parents[2]
CQ = "gpustack--nvidia-a10g-linux-amd64"
FLAVOR = "gpustack--generic--nvidia-a10g-linux-amd64-4d"
ENTRANCE = naming.queue_entrance(CQ)
CREDITS = "credits.gpustack.ai/nvidia"
JSON = dict[str, Any]
runner = CliRunner()


def pending(name: str, cards: int, reason: str, message: str, **extra: Any) -> JSON:
    w = workload(name, [("main", 1, {"nvidia.com/gpu": str(cards)})], reserved=False, queue=ENTRANCE)
    w["metadata"]["creationTimestamp"] = extra.pop("created", "2026-12-01T02:00:00Z")
    w["status"]["conditions"] = [
        {
            "type": "QuotaReserved",
            "status": "False",
            "reason": reason,
            "message": message,
            "lastTransitionTime": "2026-12-01T02:00:01Z",
        },
        *extra.pop("conditions", []),
    ]
    w["spec"].update(extra.pop("spec", {}))
    w["metadata"].update(extra.pop("metadata", {}))
    return w


def admitted(name: str, cards: int, node: str, **extra: Any) -> JSON:
    w = workload(
        name,
        [("main", 1, {"nvidia.com/gpu": str(cards)})],
        admitted=True,
        check_state="Ready",
        flavor_name=FLAVOR,
        hosts={"main": [(node, 1)]},
        queue=ENTRANCE,
    )
    w["status"]["admission"]["clusterQueue"] = CQ
    w["metadata"]["creationTimestamp"] = "2026-12-01T01:00:00Z"
    w["status"]["conditions"].extend(extra.pop("conditions", []))
    w["metadata"].update(extra.pop("metadata", {}))
    w["spec"].update(extra.pop("spec", {}))
    return w


def variant_of(parent: str, w: JSON, flavor: str = FLAVOR) -> JSON:
    w["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Workload",
            "name": parent,
            "uid": f"uid-{parent}",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    w["metadata"].setdefault("annotations", {})["kueue.x-k8s.io/workload-allowed-resource-flavors"] = flavor
    w["spec"]["preemptionGates"] = [{"name": "kueue.x-k8s.io/concurrent-admission"}]
    return w


QUOTA_SHORT = (
    f"couldn't assign flavors to pod set main: insufficient unused quota for {CREDITS} in flavor {FLAVOR}, "
    "1600000 more needed"
)
TAS_SHORT = (
    "couldn't assign flavors to pod set main: topology \"hostname\" doesn't allow to fit any of 1 pod(s). "
    'Total nodes: 2; excluded: resource "nvidia.com/gpu": 2'
)
MAX_SHORT = (
    f"couldn't assign flavors to pod set main: insufficient quota for {CREDITS} in flavor {FLAVOR}, previously "
    "considered podsets requests (0) + current podset request (16M) > maximum capacity (12800k)"
)
PREEMPTED = (
    "Preempted to accommodate a workload (UID: uid-preemptor, JobUID: UNKNOWN) due to prioritization in the "
    f"ClusterQueue; preemptor path: /{CQ}; preemptee path: /{CQ}"
)


def objects() -> list[JSON]:
    parent = admitted("fam", 1, "a10g-2", metadata={"labels": {"kueue.x-k8s.io/concurrent-admission-parent": "true"}})
    won = variant_of("fam", admitted("fam-variant-a10g-ab12c", 1, "a10g-2"))
    lost = variant_of("fam", pending("fam-variant-spot-de34f", 1, "PendingEvaluation", "", spec={"active": False}))
    waiting_parent = pending(
        "fam2", 1, "PendingEvaluation", "", metadata={"labels": {"kueue.x-k8s.io/concurrent-admission-parent": "true"}}
    )
    waiting = [
        variant_of("fam2", pending(f"fam2-variant-{flavor}-0000{i}", 1, "WaitingForQuota", QUOTA_SHORT))
        for i, flavor in enumerate(("a10g", "spot"))
    ]
    held_lq = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": "held-lq", "namespace": "team-a"},
        "spec": {"clusterQueue": CQ, "stopPolicy": "Hold"},
    }
    in_held = pending("in-held-lq", 1, "Suspended", "LocalQueue held-lq is inactive", spec={"queueName": "held-lq"})
    return [
        pending("wait-quota", 2, "WaitingForQuota", QUOTA_SHORT),
        pending("tas-failed", 4, "TopologyPlacementFailed", TAS_SHORT),
        pending("classic-tas", 1, "Pending", TAS_SHORT),
        pending("too-big", 10, "ExceedsMaxQuota", MAX_SHORT),
        pending(
            "preemptor",
            1,
            "WaitingForPreemptedWorkloads",
            QUOTA_SHORT + ". Pending the preemption of 1 workload(s)",
            metadata={"uid": "uid-preemptor"},
        ),
        admitted(
            "victim",
            1,
            "a10g-2",
            conditions=[
                {"type": "Evicted", "status": "True", "reason": "Preempted", "message": PREEMPTED},
                {"type": "Preempted", "status": "True", "reason": "InClusterQueue", "message": PREEMPTED},
            ],
        ),
        pending(
            "pods-wait",
            1,
            "WaitingForPodsReady",
            "waiting for all admitted workloads to be in PodsReady condition",
        ),
        pending(
            "gated",
            1,
            "AdmissionGated",
            "Workload requires preemption, but it's gated",
            spec={"preemptionGates": [{"name": "kueue.x-k8s.io/multikueue"}]},
            conditions=[
                {
                    "type": "BlockedOnPreemptionGates",
                    "status": "True",
                    "reason": "PreemptionGated",
                    "message": "Workload requires preemption, but it's gated",
                }
            ],
        ),
        held_lq,
        in_held,
        parent,
        won,
        lost,
        waiting_parent,
        *waiting,
    ]


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("kueue") / "snapshot"
    shutil.copytree(ROOT / "examples" / "snapshot", root)
    (root / "kueue-objects.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects()}))
    return root


def run(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def explain(snapshot: Path, name: str) -> JSON:
    code, out, err = run("explain", "workload", f"team-a/{name}", "--snapshot", str(snapshot), "-o", "json")
    assert code == 0, err
    data: JSON = json.loads(out)
    return data


def gate2(snapshot: Path, name: str) -> JSON:
    g: JSON = explain(snapshot, name)["gates"][1]
    assert g["gate"] == 2
    return g


# ----------------------------------------------------------------------------------------------- tokens


def test_a_token_names_the_part_of_gate_2_that_holds(snapshot: Path) -> None:
    assert gate2(snapshot, "wait-quota")["part"] == "quota"
    # TopologyPlacementFailed: TAS placement, though the quota is short too (4 cards asked, 2 left).
    tas = gate2(snapshot, "tas-failed")
    assert tas["part"] == "tas-placement" and tas["summary"] == TAS_SHORT
    assert "even if every admitted Workload were gone" in tas["hint"]
    # The classic reason says the same in words: read from the message.
    assert gate2(snapshot, "classic-tas")["part"] == "tas-placement"


def test_exceeds_max_quota_never_advises_waiting_and_says_by_how_much(snapshot: Path) -> None:
    g = gate2(snapshot, "too-big")
    assert g["part"] == "exceeds-max-quota" and g["name"] == "Kueue quota (never enough)"
    assert "wait" not in g["hint"].replace("waiting never", "")
    assert "waiting never admits it" in g["hint"]
    assert f"asks 3200000 credits (2 cards) of {CREDITS} over the most flavor {FLAVOR} can ever give it" in " ".join(
        g["evidence"]
    )


def test_a_preemption_names_its_victims_and_its_preemptor(snapshot: Path) -> None:
    g = gate2(snapshot, "preemptor")
    assert g["part"] == "preempting" and "being evicted for it: team-a/victim" in g["evidence"]
    assert g["hint"].startswith("Kueue is evicting team-a/victim for it")
    # The victim's eviction names its preemptor (Kueue's message gives only the UID).
    victim = explain(snapshot, "victim")["gates"][1]
    assert any(
        line.startswith("Preempted=True (InClusterQueue): preempted by team-a/preemptor (prioritization in the")
        for line in victim["evidence"]
    )


def test_waiting_for_pods_ready_names_the_admitted_workload_not_ready(snapshot: Path) -> None:
    g = gate2(snapshot, "pods-wait")
    assert g["part"] == "waiting-for-pods-ready"
    blocking = next(line for line in g["evidence"] if line.startswith("admitted, Pods not ready: "))
    assert "team-a/victim" in blocking and "team-a/fam" in blocking


def test_a_closed_preemption_gate_is_a_gate_2_hold_naming_the_gate(snapshot: Path) -> None:
    g = gate2(snapshot, "gated")
    assert g["part"] == "preemption-gated" and g["verdict"] == "held"
    assert "its preemption gate kueue.x-k8s.io/multikueue is closed" in g["summary"]
    assert any(line.startswith("BlockedOnPreemptionGates=True (PreemptionGated)") for line in g["evidence"])


def test_a_localqueue_on_hold_says_so(snapshot: Path) -> None:
    g = gate2(snapshot, "in-held-lq")
    assert g["summary"] == "LocalQueue team-a/held-lq is on Hold: it admits nothing"
    assert "patch localqueues.kueue.x-k8s.io held-lq" in g["hint"]
    one = json.loads(ONE_CARD)
    one["spec"]["queueName"] = "held-lq"
    result = runner.invoke(
        app, ["simulate", "-f", "-", "--snapshot", str(snapshot), "-o", "json"], input=json.dumps(one)
    )
    data = json.loads(result.stdout)
    assert data["heldBy"] == 2 and data["gates"][1]["summary"].startswith("LocalQueue team-a/held-lq is stopped (Hold)")


def test_workloads_lists_the_token_classified_holds(snapshot: Path) -> None:
    code, out, _ = run("workloads", "-n", "team-a", "--snapshot", str(snapshot), "-o", "json")
    assert code == 0
    by_name = {i["metadata"]["name"]: i for i in json.loads(out)["items"]}
    held = {name: by_name[name]["heldBy"] for name in ("wait-quota", "tas-failed", "too-big", "gated", "pods-wait")}
    assert held == dict.fromkeys(held, 2)


# ----------------------------------------------------------------------------------------------- Concurrent Admission


def test_a_family_is_one_workload_under_its_parents_name(snapshot: Path) -> None:
    code, out, _ = run("workloads", "-n", "team-a", "--snapshot", str(snapshot), "-o", "json")
    assert code == 0
    names = [i["metadata"]["name"] for i in json.loads(out)["items"]]
    assert "fam" in names and "fam2" in names
    assert not [n for n in names if "-variant-" in n]
    g = gate2(snapshot, "fam")
    assert g["verdict"] == "passed"
    assert any(
        "Concurrent Admission: 2 Variant(s)" in line and "fam-variant-a10g-ab12c stands for it" in line
        for line in g["evidence"]
    )


def test_a_waiting_family_takes_one_place_in_line(snapshot: Path) -> None:
    code, out, _ = run("queue", CQ, "--snapshot", str(snapshot), "-o", "json")
    assert code == 0
    names = [i["name"] for i in json.loads(out)["items"]]
    assert names.count("fam2") == 1 and not [n for n in names if "-variant-" in n]


def test_a_familys_cards_are_counted_once(snapshot: Path) -> None:
    code, out, _ = run("usage", "-A", "--by", "workload", "--snapshot", str(snapshot), "-o", "json")
    assert code == 0, out
    rows = [i for i in json.loads(out)["items"] if i["name"].startswith("fam")]
    # fam holds one card as reserved (admitted, its Pods not yet running); fam2 waits and holds nothing.
    assert [(r["name"], r["reserved"]["cardEquivalents"]) for r in rows] == [("fam", 1.0)]


def test_simulate_reads_the_family_once(snapshot: Path) -> None:
    # An existing family simulated anew is one Workload under its parent's name.
    code, out, err = run("simulate", "--workload", "team-a/fam2", "--snapshot", str(snapshot), "-o", "json")
    assert code == 0, err
    data = json.loads(out)
    assert data["name"] == "fam2" and data["kind"] == "Workload"
    # The quota book sums the reserved Workloads read: the example's 3.20 cards, the victim's card and the family's
    # one card (the parent's copied admission is not counted again).
    line = next(x for x in gate2(snapshot, "wait-quota")["evidence"] if "the reserved Workloads read add up to" in x)
    assert line.endswith("add up to 8320000 credits (5.20 cards)")


# ----------------------------------------------------------------------------------------------- effective quota


@pytest.fixture(scope="module")
def orchestrated(snapshot: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example snapshot (without the objects above) with an effective quota of 6 cards written by an
    orchestrator; Kueue's Configuration turns Dynamic Quota Orchestration on."""
    root = tmp_path_factory.mktemp("dqo") / "snapshot"
    shutil.copytree(ROOT / "examples" / "snapshot", root)
    queues = list(yaml.safe_load_all((root / "clusterqueues.yaml").read_text()))
    for q in queues:
        if q and q["metadata"]["name"] == CQ:
            groups = json.loads(json.dumps(q["spec"]["resourceGroups"]))
            for g in groups:
                for f in g["flavors"]:
                    for r in f["resources"]:
                        if r["name"] == CREDITS:
                            r["nominalQuota"] = str(6 * 1_600_000)
            q.setdefault("status", {})["effectiveQuotas"] = {
                "orchestratorRef": {
                    "apiGroup": "kueue.x-k8s.io",
                    "kind": "DynamicQuotaOrchestrator",
                    "name": "capacity",
                },
                "resourceGroups": groups,
            }
    (root / "clusterqueues.yaml").write_text(yaml.safe_dump_all(queues))
    config = (root / "kueue-config.yaml").read_text()
    (root / "kueue-config.yaml").write_text(
        config.replace(
            "      TopologyAwareScheduling: true\n",
            "      TopologyAwareScheduling: true\n      DynamicQuotaOrchestration: true\n",
        )
    )
    return root


ONE_CARD = json.dumps(
    {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": "one", "namespace": "team-a"},
        "spec": {
            "queueName": ENTRANCE,
            "podSets": [
                {
                    "name": "main",
                    "count": 1,
                    "template": {
                        "spec": {"containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
                    },
                }
            ],
        },
    }
)


def test_an_effective_quota_is_what_kueue_admits_against(orchestrated: Path) -> None:
    # Spec nominal 8 cards with 6 used: a card fits. The orchestrator's 6 leave none.
    result = runner.invoke(app, ["simulate", "-f", "-", "--snapshot", str(orchestrated), "-o", "json"], input=ONE_CARD)
    data = json.loads(result.stdout)
    assert data["heldBy"] == 2 and data["gates"][1]["part"] == "quota"
    assert any("admits against status.effectiveQuotas" in line for line in data["gates"][1]["evidence"])
    assert any("DynamicQuotaOrchestrator/capacity" in line for line in data["gates"][1]["evidence"])
    plain = runner.invoke(
        app, ["simulate", "-f", "-", "--snapshot", str(ROOT / "examples" / "snapshot"), "-o", "json"], input=ONE_CARD
    )
    assert json.loads(plain.stdout)["heldBy"] is None


def test_an_effective_quota_is_ignored_where_the_gate_is_off(orchestrated: Path, tmp_path: Path) -> None:
    root = tmp_path / "off"
    shutil.copytree(orchestrated, root)
    config = (root / "kueue-config.yaml").read_text()
    (root / "kueue-config.yaml").write_text(
        config.replace("DynamicQuotaOrchestration: true", "DynamicQuotaOrchestration: false")
    )
    result = runner.invoke(app, ["simulate", "-f", "-", "--snapshot", str(root), "-o", "json"], input=ONE_CARD)
    assert json.loads(result.stdout)["heldBy"] is None
