"""Card-hours on a real Prometheus.

History: thirty days of the operator's per-holder series and the DCGM exporter's utilization, backfilled with
promtool, hold the hand-computed cases of the issue, each placed on its own day; ``usage --since 30d -o csv`` answers
them, equals the PromQL of docs/usage.md evaluated by that Prometheus, and equals ``usage --since`` on a dump of the
same series (our own evaluation against Prometheus').

Live: a Prometheus scrapes the real operator (as a ServiceMonitor would, with the operator's Pod labels on the
target and ``honor_labels``) and an endpoint serving the DCGM exporter's exposition; the join finds the holder of the
idle card, and not the holders of a card whose one slice works; the shipped recording rules evaluate.

Waits are hang guards only: nothing here bounds how long Prometheus takes."""

from __future__ import annotations

import csv
import io
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gpuctl.cli.main import app
from gpuctl.core.units import M
from gpuctl.core.usage import HOLDER_LABELS
from testbed.dcgm import ENGINE_ACTIVE, GPU_UTIL, FakeDcgmExporter, Holder
from testbed.factories import card_row
from testbed.gpucluster import new_pool, wait_for
from testbed.operator_process import Operator, free_port, running_operator
from testbed.prometheus import BackfillSeries, Prometheus, ScrapeJob

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()

H = 3600
DAY = 24 * H
STEP = 300
SCRAPE = 60
"""The backfill's scrape interval: one sample a minute."""
UNTIL = (int(time.time()) // STEP) * STEP - 2 * STEP
"""The window's end: a 5-minute boundary before the module's Prometheus starts (a backfill may not reach past it)."""
FIRST = UNTIL - 30 * DAY - H
"""The backfill's first sample: an hour before the window, so the idle rule's look-back has data."""
POOL = "gpustack--nvidia-h100-linux-amd64"
FOLD_3G40GB = 785_000 / 1_600_000
"""A 3g.40gb on an 80 GiB H100 by the credits fold: 40192 MiB x 1,600,000 units / 81920 MiB = 785,000 units of a
card's 1,600,000, 0.490625 of a card."""


def day(n: int, hours: float = 0) -> int:
    """The instant ``hours`` into the window's ``n``-th day (1 = its first)."""
    return UNTIL - 30 * DAY + (n - 1) * DAY + int(hours * H)


def minutes(start: int, end: int) -> list[int]:
    """A scrape every minute in ``(start, end]``: at a 5-minute step that is ``(end - start) / 300`` steps."""
    return list(range(start + SCRAPE, end + 1, SCRAPE))


def holder(namespace: str, uuid: str, mode: str, profile: str = "", **extra: str) -> dict[str, str]:
    """A holder series' labels as the operator writes them (empty ones are absent in Prometheus)."""
    labels = {k: "" for k in HOLDER_LABELS}
    labels.update(
        node="gpu-h100-0",
        UUID=uuid,
        GPU_I_PROFILE=profile,
        namespace=namespace,
        pod=f"{namespace}-pod",
        workload=f"{namespace}-wl",
        localqueue="default",
        clusterqueue=POOL,
        instancetype=POOL,
        mode=mode,
        **extra,
    )
    return {k: v for k, v in labels.items() if v}


def flat(name: str, labels: dict[str, str], start: int, end: int, value: float) -> BackfillSeries:
    return BackfillSeries(name, labels, [(t, value) for t in minutes(start, end)])


def card(uuid: str, index: int) -> dict[str, str]:
    """A whole card's exporter labels."""
    return {"UUID": uuid, "gpu": str(index), "Hostname": "gpu-h100-0", "modelName": "NVIDIA H100 80GB HBM3"}


# The cases, each on its own day of the window (5-minute step, idle below 5 % for 30 minutes):
# - team-a holds GPU-A whole for 10 h (day 5, 02:00-12:00) while the card reads 0 %: 10 card-hours, all 10 idle;
# - team-b holds a 3g.40gb of GPU-H (day 10, all day) while the instance works (60 %): 24 x 0.490625 = 11.775
#   card-hours, none idle;
# - team-c and team-d each hold a 30 % slice of GPU-S (day 15, all day) and the card reads 40 % (team-d works):
#   24 x 0.3 = 7.2 card-hours each, none idle for either;
# - team-e's Workload reserves 0.5 of a card for 2 h (day 20, 05:00-07:00): 0.5 x 2 = 1 reserved card-hour;
# - team-f holds GPU-G whole for 24 h (day 25) at 0 %, its exporter silent for 3 h (10:00-13:00): 24 held, 3 without
#   data, 21 idle (the runs either side of the gap are each longer than 30 minutes).
EXPECTED = {
    ("team-a", "exclusive"): (10.0, 10.0, 0.0),
    ("team-b", "partitioned"): (24 * FOLD_3G40GB, 0.0, 0.0),
    ("team-c", "sliced"): (7.2, 0.0, 0.0),
    ("team-d", "sliced"): (7.2, 0.0, 0.0),
    ("team-e", "reserved"): (1.0, 0.0, 0.0),
    ("team-f", "exclusive"): (24.0, 21.0, 3.0),
}


def history() -> list[BackfillSeries]:
    gap = (day(25, 10), day(25, 13))
    gpu_g = [(t, 0.0) for t in minutes(FIRST, UNTIL) if not gap[0] < t <= gap[1]]
    held_per_namespace = {
        ("team-a", "exclusive", day(5, 2), day(5, 12), 1.0),
        ("team-b", "partitioned", day(10), day(11), FOLD_3G40GB),
        ("team-c", "sliced", day(15), day(16), 0.3),
        ("team-d", "sliced", day(15), day(16), 0.3),
        ("team-f", "exclusive", day(25), day(26), 1.0),
    }
    return [
        # The operator's per-holder series.
        flat("gpuctl_card_holder", holder("team-a", "GPU-A", "exclusive"), day(5, 2), day(5, 12), 1.0),
        flat(
            "gpuctl_card_holder",
            holder("team-b", "GPU-H", "partitioned", "3g.40gb", mig_uuid="MIG-7d1c"),
            day(10),
            day(11),
            FOLD_3G40GB,
        ),
        flat("gpuctl_card_holder", holder("team-c", "GPU-S", "sliced"), day(15), day(16), 0.3),
        flat("gpuctl_card_holder", holder("team-d", "GPU-S", "sliced"), day(15), day(16), 0.3),
        flat("gpuctl_card_holder", holder("team-f", "GPU-G", "exclusive"), day(25), day(26), 1.0),
        flat(
            "gpuctl_workload_reserved_card_equivalents",
            {"namespace": "team-e", "workload": "team-e-wl", "localqueue": "default", "instancetype": POOL},
            day(20, 5),
            day(20, 7),
            0.5,
        ),
        # What the operator sums per namespace: the ledger's card-equivalents, the holders' sum.
        *(
            flat(
                "gpuctl_usage_card_equivalents",
                {"namespace": ns, "instancetype": POOL, "mode": mode},
                start,
                end,
                value,
            )
            for ns, mode, start, end, value in sorted(held_per_namespace)
        ),
        flat("gpuctl_pool_capacity", {"instancetype": POOL, "view": "EX"}, FIRST, UNTIL, 8.0),
        # The exporter's series for the whole backfill: a MIG instance's engine activity (a ratio), whole cards'
        # utilization (percent), and a second, idle instance of another profile on GPU-H that nobody holds.
        flat(
            ENGINE_ACTIVE,
            {**card("GPU-H", 1), "GPU_I_ID": "1", "GPU_I_PROFILE": "3g.40gb"},
            FIRST,
            UNTIL,
            0.6,
        ),
        flat(ENGINE_ACTIVE, {**card("GPU-H", 1), "GPU_I_ID": "9", "GPU_I_PROFILE": "1g.10gb"}, FIRST, UNTIL, 0.0),
        flat(GPU_UTIL, card("GPU-A", 0), FIRST, UNTIL, 0.0),
        flat(GPU_UTIL, card("GPU-S", 2), FIRST, UNTIL, 40.0),
        BackfillSeries(GPU_UTIL, card("GPU-G", 3), gpu_g),
    ]


@pytest.fixture(scope="module")
def history_prometheus(start_prometheus: Any) -> Prometheus:
    server: Prometheus = start_prometheus((), history())
    return server


def gpuctl(*args: str) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.stderr or result.stdout
    return result.stdout


def until_text() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(UNTIL))


def csv_rows(text: str) -> dict[tuple[str, str], tuple[float, float, float]]:
    rows = list(csv.DictReader(io.StringIO(text)))
    return {
        (r["namespace"], r["mode"]): (
            float(r["card_hours"]),
            float(r["idle_card_hours"]),
            float(r["no_utilization_card_hours"]),
        )
        for r in rows
    }


def documented_queries() -> dict[str, str]:
    """The PromQL blocks of docs/usage.md (30 days, 5-minute step, idle below 5 % for 30 minutes), by figure."""
    text = (ROOT / "docs" / "usage.md").read_text()
    found = dict(re.findall(r"<!-- cardhours:(\w+) -->\n```promql\n(.*?)\n```", text, re.S))
    assert set(found) == {"held", "idle", "noData", "reserved", "covered"}, sorted(found)
    return found


def test_thirty_days_of_the_hand_computed_cases_as_usage_since_answers_them(history_prometheus: Prometheus) -> None:
    out = gpuctl(
        "usage", "-A", "--since", "30d", "--until", until_text(), "--prometheus", history_prometheus.url, "-o", "csv"
    )
    assert out.splitlines()[0] == "namespace,mode,card_hours,idle_card_hours,no_utilization_card_hours"
    rows = csv_rows(out)
    assert set(rows) == set(EXPECTED)
    for key, expected in EXPECTED.items():
        assert rows[key] == pytest.approx(expected, abs=1e-6), key
    assert int(rows[("team-b", "partitioned")][0] * 100) / 100 == 11.77
    # The rows add up to the ledger's card-hours over the window (the integral of what it charged each namespace).
    ledger = history_prometheus.query(
        f"sum(sum_over_time(gpuctl_usage_card_equivalents[30d:{STEP}s])) * {STEP} / 3600", at=UNTIL
    )
    held = sum(v[0] for (_, mode), v in rows.items() if mode != "reserved")
    assert held == pytest.approx(ledger[0].value) == pytest.approx(10 + 24 * FOLD_3G40GB + 7.2 + 7.2 + 24)

    # The table says how much of the window the operator's series cover, and the hours without data.
    table = gpuctl("usage", "-A", "--since", "30d", "--until", until_text(), "--prometheus", history_prometheus.url)
    assert "the operator's series cover 720 h" in table
    assert "no utilization data for 3.00 card-hours" in table


def test_the_documented_promql_evaluated_by_prometheus_equals_the_csv(history_prometheus: Prometheus) -> None:
    answers = {name: history_prometheus.query(q, at=UNTIL) for name, q in documented_queries().items()}
    documented: dict[tuple[str, str], list[float]] = {}
    for figure, column in (("held", 0), ("idle", 1), ("noData", 2)):
        for s in answers[figure]:
            documented.setdefault((s.labels["namespace"], s.labels["mode"]), [0.0, 0.0, 0.0])[column] = s.value
    for s in answers["reserved"]:
        documented.setdefault((s.labels["namespace"], "reserved"), [0.0, 0.0, 0.0])[0] = s.value
    assert answers["covered"][0].value == pytest.approx(720.0)

    out = gpuctl(
        "usage", "-A", "--since", "30d", "--until", until_text(), "--prometheus", history_prometheus.url, "-o", "csv"
    )
    rows = csv_rows(out)
    assert set(rows) == set(documented)
    for key, values in documented.items():
        assert rows[key] == pytest.approx(tuple(values), abs=1e-6), key


def test_a_dump_answers_usage_since_as_prometheus_does(
    history_prometheus: Prometheus, control_plane: Any, tmp_path: Path
) -> None:
    """The series a dump keeps, evaluated by our own rules, against Prometheus' answer: per namespace and per
    LocalQueue."""
    target = tmp_path / "dump"
    gpuctl(
        "dump",
        str(target),
        "--kubeconfig",
        str(control_plane.kubeconfig),
        "--prometheus",
        history_prometheus.url,
        "--since",
        "31d",
    )
    for by in ("namespace", "localqueue"):
        common = ["usage", "-A", "--by", by, "--since", "30d", "--until", until_text(), "-o", "csv"]
        live = gpuctl(*common, "--prometheus", history_prometheus.url)
        offline = gpuctl(*common, "--snapshot", str(target))
        live_rows = list(csv.reader(io.StringIO(live)))
        offline_rows = list(csv.reader(io.StringIO(offline)))
        assert [r[:-3] for r in offline_rows] == [r[:-3] for r in live_rows], by
        for a, b in zip(offline_rows[1:], live_rows[1:], strict=True):
            assert [float(x) for x in a[-3:]] == pytest.approx([float(x) for x in b[-3:]], abs=1e-6), (by, a, b)


# ----------------------------------------------------------------------------------------------- live


@pytest.fixture(scope="module")
def live(
    control_plane: Any, api: Any, test_namespace: str, tmp_path_factory: pytest.TempPathFactory, start_prometheus: Any
) -> Iterator[tuple[Any, Operator, FakeDcgmExporter, Prometheus]]:
    """A pool of one 2-card node: GPU-0000 held whole by Pod ``idle-whole``, GPU-0001 sliced 30 % to ``slice-a`` and
    ``slice-b``; the operator (probes and /metrics over plain HTTP too); the exporter reporting both cards; a
    Prometheus scraping them every second, with the shipped recording rules."""
    pool = new_pool(api, test_namespace, nodes=1, cards=2, nominal_cards=2)
    node = pool.nodes[0]
    pool.allocated_pod("idle-whole", node, [{"id": "GPU-0000", "mode": 1, "allocated": M}])
    for name in ("slice-a", "slice-b"):
        pool.allocated_pod(name, node, [{"id": "GPU-0001", "mode": 3, "allocated": 3 * M // 10}])
    pool.write_ledger(node, [card_row(0, mode=1, allocated=M), card_row(1, mode=3, allocated=6 * M // 10, slices=2)])
    rules = tmp_path_factory.mktemp("rules") / "gpuctl.rules.yaml"
    shipped = yaml.safe_load((ROOT / "deploy" / "monitoring" / "prometheus-rules.yaml").read_text())
    rules.write_text(yaml.safe_dump({"groups": shipped["spec"]["groups"]}))
    probe_port = free_port()
    try:
        with (
            running_operator(control_plane, tmp_path_factory.mktemp("operator"), "--probe-port", str(probe_port)) as op,
            FakeDcgmExporter(hostname=node) as dcgm,
        ):
            dcgm.add_card(0, "GPU-0000", util=0, holder=Holder(test_namespace, "idle-whole"))
            dcgm.add_card(1, "GPU-0001", util=70)  # the exporter names one Pod per card at most: not a slice's
            monitor = yaml.safe_load((ROOT / "deploy" / "monitoring" / "service-monitor.yaml").read_text())
            [endpoint] = monitor["spec"]["endpoints"]
            jobs = [
                # As the shipped ServiceMonitor scrapes the operator: the target labelled with the operator's own
                # Pod's namespace and name, the holders' kept by its honorLabels.
                ScrapeJob(
                    "gpuctl-operator",
                    [f"127.0.0.1:{probe_port}"],
                    labels={"namespace": monitor["metadata"]["namespace"], "pod": "gpuctl-operator-0"},
                    metrics_path=endpoint["path"],
                    honor_labels=endpoint["honorLabels"],
                ),
                ScrapeJob("dcgm", [dcgm.target], labels={"node": node}),
            ]
            prometheus: Prometheus = start_prometheus(jobs, rule_files=[rules])
            prometheus.wait_targets_up(timeout=120)
            yield pool, op, dcgm, prometheus
    finally:
        pool.cleanup()


def test_the_operators_holder_series_join_the_exporters_in_prometheus(
    live: tuple[Any, Operator, FakeDcgmExporter, Prometheus], test_namespace: str
) -> None:
    pool, _, _, prometheus = live
    answer = prometheus.wait_for(
        f'gpuctl_card_holder{{instancetype="{pool.name}"}}', lambda a: len(a) == 3, timeout=120
    )
    by_pod = {s.labels["pod"]: s for s in answer}
    assert sorted(by_pod) == ["idle-whole", "slice-a", "slice-b"]
    whole = by_pod["idle-whole"]
    assert (whole.labels["namespace"], whole.labels["UUID"], whole.labels["mode"], whole.value) == (
        test_namespace,
        "GPU-0000",
        "exclusive",
        1.0,
    )
    assert {s.labels["UUID"]: s.value for s in answer if s.labels["mode"] == "sliced"} == {"GPU-0001": 0.3}
    # Every label the operator writes is one the docs name (the ones it leaves empty are absent).
    assert set(whole.labels) - {"__name__", "job", "instance"} <= set(HOLDER_LABELS)
    # Joined by card: each holder finds its card's utilization, whatever the exporter's own pod label says.
    joined = prometheus.query(
        f'gpuctl_card_holder{{instancetype="{pool.name}"}} * on(UUID) group_left() (max by (UUID) ({GPU_UTIL}) / 100)'
    )
    assert {s.labels["pod"]: s.value for s in joined} == pytest.approx(
        {"idle-whole": 0.0, "slice-a": 0.21, "slice-b": 0.21}
    )


def test_usage_idle_lists_the_idle_cards_holder_and_not_a_busy_cards_slices(
    live: tuple[Any, Operator, FakeDcgmExporter, Prometheus], test_namespace: str
) -> None:
    pool, _, dcgm, prometheus = live
    args = ["usage", "--idle", "-A", pool.name, "--prometheus", prometheus.url, "--idle-for", "10s", "--step", "2s"]

    def idle_pods() -> dict[str, float] | None:
        rows = list(csv.DictReader(io.StringIO(gpuctl(*args, "-o", "csv"))))
        found = {r["pod"]: float(r["card_equivalents"]) for r in rows}
        return found or None

    assert wait_for("the idle card's holder listed", idle_pods, timeout=120) == {"idle-whole": 1.0}
    # The recording rules evaluate on the operator's series: the namespace holds 1.6 card-equivalents.
    recorded = prometheus.wait_for(
        f'namespace_mode:gpuctl_card_holder:sum{{namespace="{test_namespace}"}}', lambda a: len(a) == 2, timeout=120
    )
    assert {s.labels["mode"]: s.value for s in recorded} == pytest.approx({"exclusive": 1.0, "sliced": 0.6})
    groups = prometheus.rule_groups()
    assert {g["name"] for g in groups} == {"gpuctl", "gpuctl-card-hours"}
    unhealthy = [(r["name"], r.get("lastError")) for g in groups for r in g["rules"] if r.get("health") == "err"]
    assert unhealthy == []

    # The card starts working: within a step, nobody is idle (steps of 2 s over scrapes every 1 s, so a late scrape
    # leaves no step empty).
    dcgm.set_util("GPU-0000", 55)
    assert wait_for("no idle holder", lambda: idle_pods() is None, timeout=120)


def test_of_two_replicas_only_the_leader_exports_the_holders(
    live: tuple[Any, Operator, FakeDcgmExporter, Prometheus],
    control_plane: Any,
    test_namespace: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Two ``--leader-elect`` replicas over the same cluster: one exports the holder series, the other none (a
    Prometheus scraping both would count each card twice); when the leader stops, the other takes over and does."""
    pool = live[0]

    def holders(op: Operator) -> int:
        status, body = op.get("/metrics")
        assert status == 200
        return sum(
            1 for line in body.decode().splitlines() if line.startswith("gpuctl_card_holder{") and pool.name in line
        )

    args = ("--leader-elect", f"--namespace={test_namespace}")
    with (
        running_operator(control_plane, tmp_path_factory.mktemp("replica-a"), *args) as a,
        running_operator(control_plane, tmp_path_factory.mktemp("replica-b"), *args) as b,
    ):
        counts = wait_for(
            "one replica exporting", lambda: sorted((holders(a), holders(b))) == [0, 3] or None, timeout=120
        )
        assert counts
        leader, standby = (a, b) if holders(a) else (b, a)
        assert holders(standby) == 0
        leader.proc.terminate()
        leader.proc.wait(30)
        wait_for("the standby takes over and exports", lambda: holders(standby) == 3, timeout=120)


def test_prometheus_reached_through_the_api_servers_service_proxy_answers_alike(
    start_prometheus: Any, control_plane: Any, api: Any, test_namespace: str
) -> None:
    """``--prometheus-service NS/NAME:PORT``: the same answers through the API server's proxy of a Service, with the
    kubeconfig's credentials, as at Prometheus' URL. The API server proxies to no loopback address, so this
    Prometheus listens on the machine's own."""
    from kubernetes import client

    one_day = [
        flat("gpuctl_card_holder", holder("team-a", "GPU-A", "exclusive"), day(30, 2), day(30, 12), 1.0),
        flat(GPU_UTIL, card("GPU-A", 0), day(29), UNTIL, 0.0),
    ]
    server: Prometheus = start_prometheus((), one_day, listen_host=control_plane.host_address)
    # As in a cluster: the Service's Endpoints name the Pod that serves it (the API server proxies only to an address
    # that is a Pod's), the Pod's IP the address Prometheus listens on.
    core = client.CoreV1Api(api)
    core.create_namespaced_pod(
        test_namespace,
        {
            "metadata": {"name": "prometheus-0", "labels": {"app": "prometheus"}},
            "spec": {"nodeName": "monitoring-node", "containers": [{"name": "prometheus", "image": "gpuctl-it/none"}]},
        },
    )
    ip = control_plane.host_address
    core.patch_namespaced_pod_status(
        "prometheus-0", test_namespace, {"status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}]}}
    )
    core.create_namespaced_service(
        test_namespace,
        {
            "metadata": {"name": "prometheus"},
            "spec": {
                "selector": {"app": "prometheus"},
                "ports": [{"name": "web", "port": 9090, "targetPort": server.port}],
            },
        },
    )
    target = {"kind": "Pod", "name": "prometheus-0", "namespace": test_namespace}
    core.create_namespaced_endpoints(
        test_namespace,
        {
            "metadata": {"name": "prometheus"},
            "subsets": [
                {"addresses": [{"ip": ip, "targetRef": target}], "ports": [{"name": "web", "port": server.port}]}
            ],
        },
    )
    common = ["usage", "-A", "--since", "1d", "--until", until_text(), "-o", "csv"]
    direct = gpuctl(*common, "--prometheus", server.url)
    proxied = gpuctl(
        *common,
        "--prometheus-service",
        f"{test_namespace}/prometheus:9090",
        "--kubeconfig",
        str(control_plane.kubeconfig),
    )
    assert proxied == direct
    assert csv_rows(direct) == {("team-a", "exclusive"): pytest.approx((10.0, 10.0, 0.0))}
