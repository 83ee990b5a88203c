"""``gpuctl usage`` on the bundled example snapshot: hand-checked holdings per mode, the groupings, the JSON list,
and the refusals."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from gpuctl.cli.main import app

ROOT = Path(__file__).resolve().parents[2]
SNAPSHOT = str(ROOT / "examples" / "snapshot")
A10G = "gpustack--nvidia-a10g-linux-amd64"
H100 = "gpustack--nvidia-h100-80gb-hbm3-linux-amd64"
runner = CliRunner()


def run(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["usage", "--snapshot", SNAPSHOT, *args])
    return result.exit_code, result.stdout, result.stderr


def items(*args: str) -> dict[tuple[str, str, str], dict[str, object]]:
    code, out, err = run(*args, "-o", "json")
    assert code == 0, err
    data = json.loads(out)
    assert data["kind"] == "UsageList"
    return {(i["namespace"], i["name"], i["instancetype"]): i for i in data["items"]}


def test_every_namespace_in_each_modes_unit_and_in_card_equivalents() -> None:
    got = items("-A")
    # team-a's chat Pod holds a10g-1's card 3 whole; its batch Workload is admitted with nothing allocated yet.
    chat = got[("team-a", "team-a", A10G)]
    assert chat["exclusive"] == {"cards": 1} and chat["cardEquivalents"] == {"total": 1.0, "exclusive": 1.0}
    assert chat["reserved"] == {"cardEquivalents": 1.0, "cpu": 0.0, "workloads": 1, "pods": 1}
    # team-b: two shares of a10g-1's card 2 (0.1 each), a 50 % slice of its card 1 and a 30 % slice on a10g-2.
    b = got[("team-b", "team-b", A10G)]
    assert b["shared"] == {"shares": 2} and b["sliced"] == {"slices": 2, "percent": 80.0}
    assert b["cardEquivalents"] == {"total": 1.0, "shared": 0.2, "sliced": 0.8}
    # h100-1's partitions have no Pod in the snapshot: the ledger's charge is nobody's. 1g.10gb is 9,856 MiB and
    # 3g.40gb 40,192 MiB of an 81,920 MiB card: (9856 + 2 x 40192) / 81920 = 1.1016.
    rest = got[("", "<none>", H100)]
    assert rest["partitioned"] == {"1g.10gb": 1, "3g.40gb": 2}
    assert rest["cardEquivalents"] == {"total": 1.1016, "partitioned": 1.1016}
    assert len(got) == 3


def test_the_table_reads_at_a_glance() -> None:
    code, out, _ = run("-A")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == [
        "NAMESPACE",
        "INSTANCETYPE",
        "EXCLUSIVE",
        "SHARED",
        "SLICED",
        "PARTITIONED",
        "CPU",
        "CARD-EQ",
        "RESERVED",
    ]
    assert lines[3].split() == ["team-b", A10G, "-", "2", "2", "(80%)", "-", "-", "1", "-"]


def test_one_namespace_per_workload_and_per_clusterqueue() -> None:
    by_workload = items("-n", "team-a", "--by", "workload")
    assert set(by_workload) == {("team-a", "chat", A10G), ("team-a", "batch", A10G)}
    assert by_workload[("team-a", "batch", A10G)]["cardEquivalents"] == {"total": 0.0}
    # A Pod's ClusterQueue is its Workload's, whatever labels the Pod carries.
    by_queue = items("-A", "--by", "clusterqueue")
    assert by_queue[("", A10G, A10G)]["cardEquivalents"] == {"total": 1.0, "exclusive": 1.0}
    assert by_queue[("", "<none>", A10G)]["cardEquivalents"] == {"total": 1.0, "shared": 0.2, "sliced": 0.8}


def test_a_pool_given_and_the_refusals() -> None:
    assert set(items("-A", H100)) == {("", "<none>", H100)}
    code, _, err = run("-A", "gpustack--nvidia-t4-linux-amd64")
    assert code == 1 and err.count("\n") == 1 and '"gpustack--nvidia-t4-linux-amd64" not found' in err
    code, _, err = run("-A", "-l", "team=a")
    assert code == 2 and "Traceback" not in err
    code, _, err = run("--by", "pod")
    assert code == 2 and "--by" in err
    code, out, _ = run("-n", "team-c")
    assert code == 0 and "Nothing held or reserved in namespace team-c." in out + _


def test_usage_since_reads_the_series_a_dump_kept(tmp_path: Path) -> None:
    """A snapshot with kept Prometheus series answers `usage --since` offline: one exclusive card held 10 h at 0 %
    (10 idle card-hours) and a reservation of half a card for 2 h; -o csv is a header and a row per group and mode."""
    import csv
    import io
    import json
    import shutil

    from gpuctl.core.cardhours import Window, sampled_queries

    root = tmp_path / "snap"
    shutil.copytree(ROOT / "examples" / "snapshot", root)
    until, step = 30 * 86400, 300
    start = until - 86400 - 1800

    def values(start_h: float, end_h: float, v: float) -> list[list[float]]:
        base = until - 86400
        return [[t, v] for t in range(base + int(start_h * 3600) + step, base + int(end_h * 3600) + 1, step)]

    card = {"UUID": "GPU-A", "GPU_I_PROFILE": ""}
    figures = {
        "held": [{"metric": {**card, "namespace": "team-a", "mode": "exclusive"}, "values": values(2, 12, 1.0)}],
        "busy": [{"metric": card, "values": [[t, 0.0] for t in range(start, until + 1, step)]}],
        "reserved": [{"metric": {"namespace": "team-b"}, "values": values(5, 7, 0.5)}],
        "covered": [{"metric": {}, "values": values(0, 24, 1.0)}],
    }
    w = Window(until=until, seconds=86400, step=step, idle_for=1800, idle_below=0.05)
    objs = [
        {
            "apiVersion": "gpuctl.gpustack.ai/v1",
            "kind": "PrometheusSeries",
            "metadata": {"name": name},
            "query": expr,
            "start": start,
            "end": until,
            "stepSeconds": step,
            "idleForSeconds": 1800,
            "series": figures[name],
        }
        for name, expr in sampled_queries(w).items()
    ]
    (root / "prometheusseries.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objs}))
    args = ["usage", "-A", "--since", "1d", "--until", "1970-01-31T00:00:00Z", "--snapshot", str(root)]
    result = CliRunner().invoke(app, [*args, "-o", "csv"])
    assert result.exit_code == 0, result.stderr
    rows = list(csv.reader(io.StringIO(result.stdout)))
    assert rows[0] == ["namespace", "mode", "card_hours", "idle_card_hours", "no_utilization_card_hours"]
    got = {(r[0], r[1]): tuple(float(x) for x in r[2:]) for r in rows[1:]}
    assert got == {("team-a", "exclusive"): (10.0, 10.0, 0.0), ("team-b", "reserved"): (1.0, 0.0, 0.0)}
    table = CliRunner().invoke(app, args)
    assert "the operator's series cover 24 h" in table.stdout and "idle only when its whole card is" in table.stdout
    wrong = CliRunner().invoke(app, [*args, "--step", "1m"])
    assert wrong.exit_code == 2 and "kept its series every 300s" in wrong.stderr
