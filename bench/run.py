"""Benchmarks, each measured as a ratio against a reference run in the same process or on the same machine.

    python -m bench.run [--write docs/benchmarks.md] [--nodes 5000]

The machine is shared and noisy: every figure is the median of several runs, and every target is a ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuctl.cluster.bulk import bulk_allocation
from gpuctl.core.instancetypes import parse_instancetype
from gpuctl.core.ledger import parse_devices
from gpuctl.core.units import SHARE, M
from gpuctl.core.views import instancetype_views
from tests.factories import card_row, devices, instancetype

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Row:
    name: str
    measured: str
    reference: str
    ratio: float | None
    target: str
    ok: bool | None


def median_seconds(fn: Callable[[], object], repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def synthetic_devices(nodes: int, cards: int = 8, seed: int = 7) -> list[dict[str, Any]]:
    """A pool of ``nodes`` A10G nodes with ``cards`` cards each, in mixed states."""
    rng = random.Random(seed)
    out = []
    for n in range(nodes):
        rows = []
        for i in range(cards):
            roll = rng.random()
            if roll < 0.6:
                rows.append(card_row(i))
            elif roll < 0.75:
                rows.append(card_row(i, mode=3, allocated=rng.randint(1, 100) * 16000, slices=rng.randint(1, 4)))
            elif roll < 0.85:
                rows.append(card_row(i, mode=2, allocated=rng.randint(1, 10) * SHARE))
            else:
                rows.append(card_row(i, mode=1, allocated=M))
        out.append(devices(f"node-{n:05d}", cards=cards, rows=rows))
    return out


def bench_views_core(nodes: int) -> list[Row]:
    """The core's share of ``gpuctl views``: parse every Devices and compute the views, against json.loads."""
    raw = json.dumps({"apiVersion": "v1", "kind": "List", "items": synthetic_devices(nodes)})
    it = parse_instancetype(instancetype())
    items = json.loads(raw)["items"]

    def views() -> None:
        instancetype_views(it, [parse_devices(d) for d in items])

    # Both under the CLI's policy: the cyclic collector paused while a large object graph is built.
    with bulk_allocation():
        reference = median_seconds(lambda: json.loads(raw))
        measured = median_seconds(views)
    ratio = measured / reference
    return [
        Row(
            f"views core, {nodes} nodes x 8 cards",
            f"{measured * 1000:.0f} ms",
            f"json.loads of the same list: {reference * 1000:.0f} ms ({len(raw) / 2**20:.1f} MiB)",
            ratio,
            "core share < 150 ms",
            measured < 0.150,
        )
    ]


def _run(cmd: list[str]) -> tuple[float, int]:
    """Wall time and peak RSS (KiB) of one child process."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    if status != 0:
        err = proc.stderr.read().decode() if proc.stderr else ""
        raise RuntimeError(f"{' '.join(cmd)} failed: {err.strip()}")
    return elapsed, usage.ru_maxrss


def _median_run(cmd: list[str], repeat: int = 5) -> tuple[float, int]:
    runs = [_run(cmd) for _ in range(repeat)]
    return statistics.median(r[0] for r in runs), max(r[1] for r in runs)


def bench_views_process(nodes: int) -> list[Row]:
    """``gpuctl views -o json`` on a snapshot file, against a process that only json.loads the same file."""
    gpuctl = str(Path(sys.executable).with_name("gpuctl"))
    with tempfile.TemporaryDirectory() as tmp:
        snap = Path(tmp) / "snapshot"
        snap.mkdir()
        data = {"apiVersion": "v1", "kind": "List", "items": [*synthetic_devices(nodes), instancetype()]}
        path = snap / "cluster.json"
        path.write_text(json.dumps(data))
        size_kib = path.stat().st_size / 1024
        ref, ref_rss = _median_run([sys.executable, "-c", f"import json; json.load(open({str(path)!r}))"])
        got, rss = _median_run([gpuctl, "views", "-o", "json", "--snapshot", str(snap)])
    ratio = got / ref
    return [
        Row(
            f"gpuctl views -o json, {nodes}-node snapshot",
            f"{got * 1000:.0f} ms",
            f"python json.load of the file: {ref * 1000:.0f} ms",
            ratio,
            "< 2x",
            ratio < 2.0,
        ),
        Row(
            "peak RSS of that views process",
            f"{rss / 1024:.0f} MiB",
            f"raw JSON read: {size_kib / 1024:.0f} MiB (json.load alone: {ref_rss / 1024:.0f} MiB)",
            rss / size_kib,
            "< 4x the JSON size",
            rss / size_kib < 4.0,
        ),
    ]


def bench_startup() -> list[Row]:
    """``gpuctl --help`` and ``gpuctl version`` against a bare interpreter start."""
    gpuctl = str(Path(sys.executable).with_name("gpuctl"))
    bare, _ = _median_run([sys.executable, "-c", "pass"], repeat=9)
    rows = []
    for args in (["--help"], ["version"]):
        t, _ = _median_run([gpuctl, *args], repeat=9)
        rows.append(
            Row(
                f"gpuctl {' '.join(args)}",
                f"{t * 1000:.0f} ms",
                f"python -c pass: {bare * 1000:.0f} ms",
                t / bare,
                "informational",
                None,
            )
        )
    return rows


def bench_gate3(nodes: int) -> list[Row]:
    """One gate-3 verdict on a pool of ``nodes`` nodes: TAS-assigned, and a whole-pool search that finds no room."""
    from gpuctl.core.fit import FitContext, judge_workload
    from gpuctl.core.workloads import parse_resource_flavor, parse_workload
    from tests.factories import flavor, workload

    with bulk_allocation():
        ledgers = {d.node: d for d in (parse_devices(x) for x in synthetic_devices(nodes))}
    ctx = FitContext({"f-a10g": parse_resource_flavor(flavor("f-a10g"))}, ledgers)
    target = sorted(ledgers)[nodes // 2]
    tas = parse_workload(workload("w", [("main", 1, {"nvidia.com/gpu": "1"})], hosts={"main": [(target, 1)]}))
    pool = parse_workload(workload("w", [("main", 1, {"nvidia.com/gpu": "9"})]))
    reference = median_seconds(lambda: [n for n in ledgers.values() if n.node == target], repeat=9)
    rows = []
    for name, w in (("TAS-assigned node", tas), ("no hostname assignment, no node fits (scans the pool)", pool)):
        t = median_seconds(lambda w=w: judge_workload(w, ctx), repeat=9)  # type: ignore[misc]
        target_ms = 10.0 if w is tas else None
        rows.append(
            Row(
                f"gate-3 verdict, {nodes}-node pool, {name}",
                f"{t * 1000:.2f} ms",
                f"one pass over the pool's records: {reference * 1000:.2f} ms",
                t / reference,
                "< 10 ms" if target_ms else "informational",
                (t * 1000 < target_ms) if target_ms else None,
            )
        )
    return rows


BENCHMARKS: dict[str, Callable[[int], list[Row]]] = {
    "gate3": bench_gate3,
    "views-core": bench_views_core,
    "views-process": bench_views_process,
    "startup": lambda _nodes: bench_startup(),
}


def render(rows: list[Row], nodes: int) -> str:
    lines = [
        "# Benchmarks",
        "",
        "Written by `make bench` (`python -m bench.run --write docs/benchmarks.md`). Every figure is the median of",
        "several runs; targets (DESIGN.md §5) are ratios against a reference measured in the same run, because the",
        "machine is shared and noisy.",
        "",
        f"Last run: {time.strftime('%Y-%m-%d')} on {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
        f"synthetic pool of {nodes} nodes x 8 A10G cards (60 % free, 15 % sliced, 10 % shared, 15 % exclusive).",
        "",
        "| benchmark | measured | reference | ratio | target | met |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        ratio = f"{r.ratio:.2f}x" if r.ratio is not None else "-"
        met = {True: "yes", False: "**no**", None: "-"}[r.ok]
        lines.append(f"| {r.name} | {r.measured} | {r.reference} | {ratio} | {r.target} | {met} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", type=Path, help="write the results as Markdown to this file")
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--only", choices=sorted(BENCHMARKS), action="append")
    args = parser.parse_args()
    rows: list[Row] = []
    for name, bench in BENCHMARKS.items():
        if args.only and name not in args.only:
            continue
        print(f"running {name} ...", file=sys.stderr)
        rows.extend(bench(args.nodes))
    text = render(rows, args.nodes)
    print(text)
    if args.write:
        args.write.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
