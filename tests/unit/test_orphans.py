"""A ``Devices`` object whose Node is gone serves nothing: it is left out of every view, partition count,
fragmentation figure, simulation and the operator's status, and ``views --published`` and ``doctor`` name it.

The property runs on the differential test's generated cluster states (pools sharing nodes, Workloads in every phase,
Pods with and without allocation records) with the simulation's preparation (quota to spare, the check Active): adding
Devices objects for Nodes that do not exist, in any mode, changes no answer of the CLI or of the operator.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from gpuctl.cli.commands.fragmentation import pool_items
from gpuctl.cli.commands.partitions import profile_items
from gpuctl.cli.main import app
from gpuctl.cli.source import SourceSpec
from gpuctl.cli.usecases import compute_items, public
from gpuctl.cluster import read
from gpuctl.core import doctor, naming
from gpuctl.core.ledger import parse_devices, split_orphans
from gpuctl.core.simulate import Simulator
from gpuctl.core.submissions import Submission, SubmittedPodSet
from gpuctl.operator.controllers.status import StatusController
from testbed.factories import card_row, devices, h100_devices, instancetype, node
from tests.memory_cluster import MemoryCluster
from tests.unit.test_differential import NS, POOL_LABELS, POOLS, cluster_states, limits_of, operator
from tests.unit.test_simulate_properties import prepared

NO_SELECTORS = SourceSpec()

JSON = dict[str, Any]


@st.composite
def orphans(draw: st.DrawFn) -> list[JSON]:
    """One to three Devices objects of the generated pools' models, on Nodes no state has, in any mode."""
    out = []
    for i in range(draw(st.integers(1, 3))):
        name = f"gone-{i}"
        if draw(st.booleans()):
            count = draw(st.sampled_from((2, 4, 8)))
            rows = [card_row(j, mode=draw(st.sampled_from((0, 0, 1, 2, 3))), allocated=0) for j in range(count)]
            out.append(devices(name, cards=count, rows=rows))
        else:
            out.append(h100_devices(name, cards=draw(st.sampled_from((1, 2)))))
    return out


def submissions(draw: st.DrawFn, pools: list[str]) -> list[Submission]:
    subs = []
    for i in range(draw(st.integers(1, 3))):
        pool = draw(st.sampled_from(pools))
        subs.append(
            Submission(
                "Workload",
                NS,
                f"sim-{i}",
                naming.queue_entrance(POOLS[pool][0]),
                (SubmittedPodSet("main", draw(st.integers(1, 2)), {"containers": limits_of(pool, draw)}),),
            )
        )
    return subs


def answers(objects: list[JSON], subs: list[Submission]) -> JSON:
    """Everything a pool's capacity shows up in: views, partitions (per pool and per node), fragmentation,
    the simulated verdicts and placements, and the operator's published status."""
    cluster = MemoryCluster(copy.deepcopy(objects))
    simulator = Simulator(read.simulation_state(cluster))
    verdicts = []
    for sub in subs:
        outcome = simulator.simulate(sub)
        verdicts.append(
            (
                outcome.admitted,
                [(g.verdict, g.summary) for g in outcome.explanation.gates],
                [(n.name, n.pods, n.cards) for n in outcome.placement],
            )
        )
    controllers = operator(cluster)
    status = {
        name: controllers.get(StatusController).desired_status(cached)
        for name, cached in controllers.cache.instancetypes().items()
    }
    return {
        "views": [public(i) for i in compute_items(cluster, [], None)],
        "partitions": profile_items(cluster, None, NO_SELECTORS, False, False),
        "partitions-by-node": profile_items(cluster, None, NO_SELECTORS, True, False),
        "fragmentation": pool_items(cluster, [], [], None, False),
        "simulate": verdicts,
        "status": json.loads(json.dumps(status, default=str)),
    }


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(cluster_states(), orphans(), st.data())
def test_a_devices_object_for_a_missing_node_changes_no_view_partition_or_verdict(
    objects: list[JSON], extra: list[JSON], data: st.DataObject
) -> None:
    objects = prepared(objects)
    pools = ["derived", "custom"] + (
        ["h100"] if any(o["metadata"]["name"].startswith("h100") for o in objects if o["kind"] == "Devices") else []
    )
    subs = submissions(data.draw, pools)
    assert answers([*objects, *extra], subs) == answers(objects, subs)


def test_the_orphan_would_have_counted_had_its_node_existed() -> None:
    """The property is not vacuous: the same Devices object with its Node adds capacity to the pool."""
    base = [
        instancetype("gpustack--nvidia-a10g-linux-amd64"),
        node("a10g-1", labels={**POOL_LABELS, naming.accelerator_label("nvidia-a10g"): "true"}),
        devices("a10g-1", cards=4, rows=[card_row(i, mode=0, allocated=0) for i in range(4)]),
    ]
    orphan = devices("a10g-9", cards=4, rows=[card_row(i, mode=0, allocated=0) for i in range(4)])
    revived = node("a10g-9", labels={**POOL_LABELS, naming.accelerator_label("nvidia-a10g"): "true"})

    def remaining(objects: list[JSON]) -> int:
        [item] = compute_items(MemoryCluster(objects), [], None)
        return int(item["accelerator"]["remaining"])

    assert remaining(base) == 4
    assert remaining([*base, orphan]) == 4
    assert remaining([*base, orphan, revived]) == 8


def test_a_read_without_nodes_keeps_every_ledger() -> None:
    """A snapshot of ledgers only cannot tell a Node is gone: its ledgers all count."""
    ledgers = [parse_devices(devices(n, cards=2)) for n in ("a", "b")]
    assert split_orphans(ledgers, ()).served == ledgers
    assert split_orphans(ledgers, ()).orphaned == []
    served, orphaned = split_orphans(ledgers, {"a"})
    assert [d.node for d in served] == ["a"] and [d.node for d in orphaned] == ["b"]
    [item] = compute_items(
        MemoryCluster([instancetype("gpustack--nvidia-a10g-linux-amd64"), devices("a", cards=2)]), [], None
    )
    assert item["accelerator"]["remaining"] == 2


def test_views_published_and_doctor_name_each_orphan(tmp_path: Any) -> None:
    objects = [
        instancetype("gpustack--nvidia-a10g-linux-amd64"),
        node("a10g-1", labels={**POOL_LABELS, naming.accelerator_label("nvidia-a10g"): "true"}),
        devices("a10g-1", cards=4, rows=[card_row(i, mode=0, allocated=0) for i in range(4)]),
        devices("a10g-9", cards=4, rows=[card_row(i, mode=0, allocated=0) for i in range(4)]),
    ]
    (tmp_path / "snap.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    snap = ["--snapshot", str(tmp_path / "snap.json")]
    runner = CliRunner()
    table = runner.invoke(app, ["views", "--published", *snap])
    assert table.exit_code == 0, table.output
    assert "orphaned Devices a10g-9 (no Node a10g-9; left out): kubectl delete devices a10g-9" in table.stdout
    as_json = runner.invoke(app, ["views", "--published", "-o", "json", *snap])
    [item] = json.loads(as_json.stdout)["items"]
    assert item["orphanedDevices"] == [{"name": "a10g-9", "fix": "kubectl delete devices a10g-9"}]
    assert item["accelerator"]["remaining"] == 4
    found = runner.invoke(app, ["doctor", "-o", "json", *snap])
    [orphan] = [f for f in json.loads(found.stdout)["items"] if f["check"] == "orphaned-devices"]
    assert orphan["status"] == doctor.WARN
    assert orphan["saw"].startswith("orphaned Devices a10g-9")
    assert orphan["fix"] == "kubectl delete devices a10g-9"


def test_top_leaves_the_orphan_out_of_its_pools_read_once_or_watched() -> None:
    from gpuctl.cli.commands.top import Watched, read_once

    objects = [
        instancetype("gpustack--nvidia-a10g-linux-amd64"),
        node("a10g-1", labels={**POOL_LABELS, naming.accelerator_label("nvidia-a10g"): "true"}),
        devices("a10g-1", cards=4, rows=[card_row(i, mode=0, allocated=0) for i in range(4)]),
        devices("a10g-9", cards=4, rows=[card_row(i, mode=0, allocated=0) for i in range(4)]),
    ]
    cluster = MemoryCluster(objects)
    assert sorted(read_once(cluster).devices) == ["a10g-1"]
    watched = Watched(cluster)
    for informer in watched.informers:
        informer.relist()
    assert watched.synced and sorted(watched.records().devices) == ["a10g-1"]
