"""The card-hour harness's pieces that need no Prometheus: the fake DCGM exporter's exposition (read back by the
Prometheus client library's own text parser), the OpenMetrics backfill file (by its OpenMetrics parser), the scrape
configuration. The harness on a real Prometheus is tests/integration/test_prometheus_harness.py."""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families
from prometheus_client.parser import text_string_to_metric_families

from testbed.dcgm import CONTENT_TYPE, ENGINE_ACTIVE, FB_USED, GPU_UTIL, FakeDcgmExporter, Holder
from testbed.prometheus import BackfillSeries, ScrapeJob, config_document, grid, write_openmetrics


def samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        assert family.type == "gauge"
        out[family.name] = [(dict(s.labels), s.value) for s in family.samples]
    return out


def test_whole_cards_report_utilization_and_mig_instances_engine_activity() -> None:
    dcgm = FakeDcgmExporter(hostname="node-a")
    dcgm.add_card(0, "GPU-a", util=42, fb_used=1024, holder=Holder("team-a", "train-0", "trainer"))
    dcgm.add_card(1, "GPU-b", fb_used=2048)
    dcgm.add_instance("GPU-b", 9, "1g.10gb", engine_active=0.25, holder=Holder("team-b", "serve-0"))
    dcgm.add_instance("GPU-b", 2, "3g.40gb", engine_active=0.0, fb_used=None)
    got = samples(dcgm.render())

    assert list(got) == [GPU_UTIL, FB_USED, ENGINE_ACTIVE]
    assert got[GPU_UTIL] == [
        (
            {
                "gpu": "0",
                "UUID": "GPU-a",
                "pci_bus_id": "00000000:18:00.0",
                "device": "nvidia0",
                "modelName": "NVIDIA H100 80GB HBM3",
                "Hostname": "node-a",
                "DCGM_FI_DRIVER_VERSION": dcgm.driver_version,
                "container": "trainer",
                "namespace": "team-a",
                "pod": "train-0",
            },
            42,
        )
    ]  # the card in MIG mode reports none
    active = {labels["GPU_I_ID"]: (labels, value) for labels, value in got[ENGINE_ACTIVE]}
    assert set(active) == {"2", "9"}
    labels, value = active["9"]
    assert (labels["UUID"], labels["GPU_I_PROFILE"], labels["gpu"], labels["pod"], value) == (
        "GPU-b",
        "1g.10gb",
        "1",
        "serve-0",
        0.25,
    )
    assert "pod" not in active["2"][0]
    assert {(lb["UUID"], lb.get("GPU_I_ID")): v for lb, v in got[FB_USED]} == {
        ("GPU-a", None): 1024,
        ("GPU-b", None): 2048,
        ("GPU-b", "9"): 0,
    }


def test_values_change_at_run_time_and_render_as_the_exporter_prints_them() -> None:
    dcgm = FakeDcgmExporter()
    dcgm.add_card(0, "GPU-a", util=10)
    dcgm.add_instance("GPU-a", 1, "7g.80gb", engine_active=0.5)
    dcgm.set_engine_active("GPU-a", 0.125, gi_id=1)
    dcgm.set_util("GPU-a", 55)  # a card in MIG mode may be given one explicitly
    dcgm.set_fb_used("GPU-a", 512.0)
    text = dcgm.render()
    assert "} 0.125000\n" in text  # the profiling ratios with six decimals
    assert 'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a",' in text and text.count("} 55\n") == 1
    assert "} 512\n" in text  # whole MiB as an integer
    dcgm.remove("GPU-a", gi_id=1)
    assert ENGINE_ACTIVE + "{" not in dcgm.render()
    dcgm.remove("GPU-a")
    assert samples(dcgm.render()) == {GPU_UTIL: [], FB_USED: [], ENGINE_ACTIVE: []}


def test_label_values_are_escaped() -> None:
    dcgm = FakeDcgmExporter(hostname='a"b\\c\nd')
    dcgm.add_card(0, "GPU-a")
    ((labels, _),) = samples(dcgm.render())[GPU_UTIL]
    assert labels["Hostname"] == 'a"b\\c\nd'


def test_the_exporter_serves_metrics_over_http_on_loopback() -> None:
    with FakeDcgmExporter() as dcgm:
        dcgm.add_card(0, "GPU-a", util=7)
        assert dcgm.target.startswith("127.0.0.1:")
        with urllib.request.urlopen(dcgm.url, timeout=10) as resp:
            assert resp.headers["Content-Type"] == CONTENT_TYPE
            body = resp.read().decode()
        assert samples(body)[GPU_UTIL][0][1] == 7
        assert dcgm.scrapes == 1
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(f"http://{dcgm.target}/other", timeout=10)


def test_the_backfill_file_is_openmetrics(tmp_path: Path) -> None:
    series = [
        BackfillSeries("x", {"UUID": "GPU-a", "pod": 'p"1'}, [(1000.0, 1), (1060.0, 0.5), (1120.5, 2)]),
        BackfillSeries("y", {}, [(1000.0, 3)]),
        BackfillSeries("x", {"UUID": "GPU-b"}, [(1000.0, 4)]),
    ]
    path = tmp_path / "in.txt"
    assert write_openmetrics(path, series) == 5
    text = path.read_text()
    assert text.endswith("# EOF\n")
    families = {f.name: f for f in openmetrics_families(text)}
    assert sorted(families) == ["x", "y"]
    got = [(s.labels, s.value, float(s.timestamp)) for s in families["x"].samples]
    assert got == [
        ({"UUID": "GPU-a", "pod": 'p"1'}, 1, 1000.0),
        ({"UUID": "GPU-a", "pod": 'p"1'}, 0.5, 1060.0),
        ({"UUID": "GPU-a", "pod": 'p"1'}, 2, 1120.5),
        ({"UUID": "GPU-b"}, 4, 1000.0),
    ]


def test_backfill_samples_must_be_in_time_order(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="out of time order"):
        write_openmetrics(tmp_path / "in.txt", [BackfillSeries("x", {}, [(2.0, 1), (1.0, 1)])])


def test_grid_and_scrape_configuration() -> None:
    assert grid(0, 600, 300) == [0, 300, 600]
    assert grid(0, 599, 300) == [0, 300]
    document = yaml.safe_load(
        config_document([ScrapeJob("dcgm", ["127.0.0.1:1234"], labels={"node": "n1"}, interval="2s")], "1s")
    )
    assert document["global"] == {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"}
    (job,) = document["scrape_configs"]
    assert job == {
        "job_name": "dcgm",
        "metrics_path": "/metrics",
        "honor_labels": False,
        "static_configs": [{"targets": ["127.0.0.1:1234"], "labels": {"node": "n1"}}],
        "scrape_interval": "2s",
        "scrape_timeout": "2s",
    }
    assert "rule_files" not in document
