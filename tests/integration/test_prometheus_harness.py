"""The card-hour tests' harness on a real Prometheus: the fake DCGM exporter scraped with its labels, 30 days of history
backfilled with promtool and summed as by hand, history reaching up to the start continued by the scrapes, a value
changed on the exporter seen by the next scrapes, and a second exporter added by a configuration reload.

Waits are hang guards only: nothing here bounds how long Prometheus takes."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from testbed.dcgm import ENGINE_ACTIVE, FB_USED, GPU_UTIL, FakeDcgmExporter, Holder
from testbed.prometheus import BackfillSeries, Prometheus, ScrapeJob

DAY = 86400
STEP = 300
"""The backfill's step: 5 minutes."""
WINDOW = 30 * DAY
STEPS = WINDOW // STEP

WHOLE = "GPU-0f0e0d0c-0000-4000-8000-000000000000"
MIG = "GPU-0f0e0d0c-0000-4000-8000-000000000001"
IDLE = "GPU-0f0e0d0c-0000-4000-8000-000000000002"
HISTORY = "GPU-0f0e0d0c-0000-4000-8000-0000000000aa"
"""A card only the backfill knows (a node gone since)."""

# The backfill ends one step before the module starts Prometheus, on a 5-minute boundary.
END = (int(time.time()) // STEP) * STEP - STEP
START = END - WINDOW


def util_at(k: int) -> int:
    """The backfilled card's utilization (percent) at step k of the window."""
    return (k * 7) % 101


def active_at(k: int) -> float:
    """The backfilled MIG instance's engine activity at step k: quarters, exact in binary."""
    return (k % 5) * 0.25


BEFORE_WINDOW = 1000
"""A sample exactly 30 days before the end: a ``[30d]`` range leaves its start out (it is left-open)."""


@pytest.fixture(scope="module")
def dcgm() -> Iterator[FakeDcgmExporter]:
    with FakeDcgmExporter(hostname="gpu-node-1") as exporter:
        exporter.add_card(0, WHOLE, util=42, fb_used=30_000, holder=Holder("team-a", "train-0", "trainer"))
        exporter.add_card(1, MIG, fb_used=12_000)
        exporter.add_instance(MIG, 1, "3g.40gb", engine_active=0.5, fb_used=9_000, holder=Holder("team-b", "serve-0"))
        exporter.add_instance(MIG, 9, "1g.10gb", engine_active=0.0, fb_used=0)
        exporter.add_card(2, IDLE, util=0, fb_used=0)
        yield exporter


@pytest.fixture(scope="module")
def prometheus_jobs(dcgm: FakeDcgmExporter) -> list[ScrapeJob]:
    return [ScrapeJob("dcgm", [dcgm.target], labels={"node": "gpu-node-1"})]


def scraped_labels(dcgm: FakeDcgmExporter, card: str) -> dict[str, str]:
    """The labels a scrape gives card ``card``'s whole-card series (the exporter's, the target's, the job's)."""
    return {
        "job": "dcgm",
        "instance": dcgm.target,
        "node": "gpu-node-1",
        "gpu": str(dcgm.cards[card].index),
        "UUID": card,
        "pci_bus_id": dcgm.cards[card].pci_bus_id,
        "device": f"nvidia{dcgm.cards[card].index}",
        "modelName": dcgm.cards[card].model,
        "Hostname": "gpu-node-1",
        "DCGM_FI_DRIVER_VERSION": dcgm.driver_version,
    }


@pytest.fixture(scope="module")
def prometheus_backfill(dcgm: FakeDcgmExporter) -> list[BackfillSeries]:
    history = {"job": "dcgm", "instance": "gpu-node-0:9400", "UUID": HISTORY, "gpu": "0", "Hostname": "gpu-node-0"}
    steps = range(1, STEPS + 1)
    return [
        BackfillSeries(
            GPU_UTIL,
            history,
            [(START, BEFORE_WINDOW)] + [(START + k * STEP, util_at(k)) for k in steps],
        ),
        BackfillSeries(
            ENGINE_ACTIVE,
            {**history, "GPU_I_ID": "3", "GPU_I_PROFILE": "2g.20gb"},
            [(START + k * STEP, active_at(k)) for k in steps],
        ),
        # The idle card's own series, as the scrapes will label it: 30 days of 0 up to the start, then scraped.
        BackfillSeries(GPU_UTIL, scraped_labels(dcgm, IDLE), [(START + k * STEP, 0) for k in steps]),
    ]


def one(samples: list, what: str):
    assert len(samples) == 1, f"{what}: {samples}"
    return samples[0]


def test_the_fake_exporters_series_are_scraped_with_its_labels(prometheus: Prometheus, dcgm: FakeDcgmExporter) -> None:
    prometheus.wait_targets_up(timeout=120)
    whole = one(prometheus.wait_for(f'{GPU_UTIL}{{UUID="{WHOLE}"}}', timeout=120), "the whole card")
    assert whole.labels == {
        "__name__": GPU_UTIL,
        **scraped_labels(dcgm, WHOLE),
        "container": "trainer",
        "namespace": "team-a",
        "pod": "train-0",
    }
    assert whole.value == 42

    # A card in MIG mode reports no utilization; its instances report engine activity with their id and profile.
    assert prometheus.query(f'{GPU_UTIL}{{UUID="{MIG}"}}') == []
    instances = {s.labels["GPU_I_PROFILE"]: s for s in prometheus.query(f'{ENGINE_ACTIVE}{{UUID="{MIG}"}}')}
    assert sorted(instances) == ["1g.10gb", "3g.40gb"]
    held = instances["3g.40gb"]
    assert (held.labels["GPU_I_ID"], held.labels["pod"], held.labels["namespace"], held.value) == (
        "1",
        "serve-0",
        "team-b",
        0.5,
    )
    assert {k: held.labels[k] for k in ("gpu", "device", "modelName", "Hostname")} == {
        "gpu": "1",
        "device": "nvidia1",
        "modelName": dcgm.cards[MIG].model,
        "Hostname": "gpu-node-1",
    }
    assert "pod" not in instances["1g.10gb"].labels  # no Pod holds it: the mapping adds no labels

    framebuffer = {
        (s.labels["UUID"], s.labels.get("GPU_I_ID", "")): s.value for s in prometheus.query(f'{FB_USED}{{job="dcgm"}}')
    }
    assert framebuffer == {(WHOLE, ""): 30_000, (MIG, ""): 12_000, (MIG, "1"): 9_000, (MIG, "9"): 0, (IDLE, ""): 0}


def test_thirty_days_of_backfill_sum_as_by_hand(prometheus: Prometheus) -> None:
    card = f'{GPU_UTIL}{{UUID="{HISTORY}"}}'
    expected = sum(util_at(k) for k in range(1, STEPS + 1))
    total = one(prometheus.query(f"sum_over_time({card}[30d])", at=END), "the backfilled card")
    assert total.value == expected
    assert one(prometheus.query(f"count_over_time({card}[30d])", at=END), "count").value == STEPS
    # One step later the first sample of the window falls out as well.
    later = one(prometheus.query(f"sum_over_time({card}[30d])", at=END + STEP), "a step later")
    assert later.value == expected - util_at(1)

    instance = f'{ENGINE_ACTIVE}{{UUID="{HISTORY}", GPU_I_PROFILE="2g.20gb"}}'
    active = one(prometheus.query(f"sum_over_time({instance}[30d])", at=END), "the backfilled instance")
    assert active.value == sum(active_at(k) for k in range(1, STEPS + 1))

    # A range query over the window, a day at a time: each point sums the day that ends there.
    days = one(prometheus.query_range(f"sum_over_time({card}[1d])", START + DAY, END, DAY), "by day")
    assert len(days.values) == 30
    per_day = DAY // STEP
    for i, (at, value) in enumerate(days.values):
        assert at == START + (i + 1) * DAY
        assert value == sum(util_at(k) for k in range(i * per_day + 1, (i + 1) * per_day + 1))


def test_history_up_to_the_start_is_continued_by_the_scrapes(prometheus: Prometheus, dcgm: FakeDcgmExporter) -> None:
    """The idle card's backfill ends a step before Prometheus started; the scrapes of the same series are appended to
    it: the series counts more samples than the backfill wrote, its backfilled part unchanged."""
    card = f'{GPU_UTIL}{{UUID="{IDLE}"}}'
    counted = prometheus.wait_for(
        f"count_over_time({card}[31d])", lambda answer: bool(answer) and answer[0].value > STEPS, timeout=120
    )
    assert one(counted, "the idle card").labels == scraped_labels(dcgm, IDLE)
    assert one(prometheus.query(f"count_over_time({card}[30d])", at=END), "backfilled").value == STEPS
    assert one(prometheus.query(f"max_over_time({card}[31d])"), "max").value == 0


def test_a_value_changed_on_the_exporter_shows_up(prometheus: Prometheus, dcgm: FakeDcgmExporter) -> None:
    prometheus.wait_for(f'{GPU_UTIL}{{UUID="{WHOLE}"}}', timeout=120)
    dcgm.set_util(WHOLE, 3)
    dcgm.set_engine_active(MIG, 0.75, gi_id=9)
    dcgm.set_holder(MIG, Holder("team-c", "notebook-0"), gi_id=9)
    prometheus.wait_for(f'{GPU_UTIL}{{UUID="{WHOLE}"}} == 3', timeout=120)  # the latest scrape's value
    changed = one(
        prometheus.wait_for(f'{ENGINE_ACTIVE}{{UUID="{MIG}", GPU_I_ID="9", pod="notebook-0"}} == 0.75', timeout=120),
        "the instance, now held",
    )
    assert changed.labels["namespace"] == "team-c"
    # The series' history keeps the value it had before the change.
    assert one(prometheus.query(f'max_over_time({GPU_UTIL}{{UUID="{WHOLE}"}}[1h])'), "max").value == 42


def test_a_second_exporter_joins_on_a_reload(prometheus: Prometheus, prometheus_jobs: list[ScrapeJob]) -> None:
    with FakeDcgmExporter(hostname="gpu-node-2") as second:
        second.add_card(0, "GPU-second", util=77)
        prometheus.set_jobs([*prometheus_jobs, ScrapeJob("dcgm-2", [second.target], labels={"node": "gpu-node-2"})])
        try:
            sample = one(prometheus.wait_for(f'{GPU_UTIL}{{UUID="GPU-second"}}', timeout=120), "the second node")
            assert (sample.labels["node"], sample.labels["Hostname"], sample.value) == ("gpu-node-2", "gpu-node-2", 77)
        finally:
            prometheus.set_jobs(prometheus_jobs)
