"""``gpuctl fragmentation`` on the bundled example snapshot: hand-checked numbers, the JSON list, shapes, errors."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from gpuctl.cli.main import app

ROOT = Path(__file__).resolve().parents[2]
SNAPSHOT = str(ROOT / "examples" / "snapshot")
A10G = "gpustack--nvidia-a10g-linux-amd64"
runner = CliRunner()


def run(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["fragmentation", "--snapshot", SNAPSHOT, *args])
    return result.exit_code, result.stdout, result.stderr


def test_the_a10g_pool_against_its_pending_three_card_request() -> None:
    code, out, _ = run(A10G, "-o", "json")
    assert code == 0
    data = json.loads(out)
    assert data["kind"] == "PoolFragmentationList"
    [item] = data["items"]
    assert item["pending"] == 1 and item["shapesFrom"] == "pending"  # train-big asks three whole cards
    ex = item["views"]["accelerator"]
    # a10g-1: card 0 free, 1 half sliced, 2 with two shares, 3 held whole -> 100 + 50 + 80 = 230 %;
    # a10g-2: card 0 with a 30 % slice, card 1 promised to team-a/batch (admitted, its Pod not allocated yet: the
    # ledger shows it free, the check holds it), two free -> 70 + 200 = 270 %. No node has three free whole cards.
    assert ex["free"] == 500
    assert ex["shapes"] == [{"shape": "ex=3", "usable": 0, "stranded": 500, "requests": 0}]
    assert ex["score"] == 1.0
    assert set(item["views"]) == {"accelerator", "acceleratorShared", "acceleratorSliced"}  # no partitioned card


def test_shapes_from_the_command_line_and_per_node_rows() -> None:
    code, out, _ = run(A10G, "--shape", "sl=60", "--by-node", "-o", "json")
    assert code == 0
    rows = {i["node"]: i["views"]["acceleratorSliced"]["shapes"][0] for i in json.loads(out)["items"]}
    # a10g-1's sliceable free: card 0 100 %, card 1 50 % (its shared and whole cards take no slice) -> one 60 % slice.
    assert rows["a10g-1"] == {"shape": "sl=60", "usable": 60, "stranded": 90, "requests": 1}
    assert rows["a10g-2"]["requests"] == 3  # 70 % and two free cards (the third is promised): one 60 % slice each


def test_the_table_and_bad_shapes() -> None:
    code, out, _ = run(A10G)
    assert code == 0
    assert out.splitlines()[0].split() == ["NAME", "VIEW", "FREE", "SHAPE", "USABLE", "STRANDED", "SCORE"]
    assert f"{A10G}   EX     500 %" in out
    code, out, err = run("--shape", "ex=0")
    assert code == 2 and "give 1 to 64 cards" in err and out == ""
    code, _, err = run("nope")
    assert code == 1 and 'instancetype "nope" not found' in err
