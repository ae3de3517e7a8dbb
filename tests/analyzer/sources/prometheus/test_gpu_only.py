"""Zero-agent mode with dcgm-exporter alone (no engine series): the GPU view covers every GPU that reported,
pod or not, and `phasefit analyze --prometheus` exits 0 with it."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from typer.testing import CliRunner

from analyzer.sources.prometheus.fleet import PrometheusFleet
from analyzer.sources.prometheus.inventory import analysis_input, gpu_view_buckets
from analyzer.sources.prometheus.source import map_fleet
from analyzer.telemetry.gpu_view import PROFILING_HELP, build_gpu_view
from fleet.catalog import load_catalog
from phasefit.cli import app
from tests.analyzer.prometheus_fixtures import H100_SPARE_UUID, H200_NAME, H200_UUID, FixtureGpu, points
from tests.analyzer.sources.prometheus.test_source import (
    GRID,
    H100_DECODE,
    H100_HOST,
    H100_SPARE,
    H100_TARGET,
    H100_UUID,
    H200_TARGET,
    TIMES,
    Answers,
    answers_to_results,
    dcgm_series,
)

# An H200 whose exporter loads upstream default-counters.csv: GPU_UTIL, no profiling field.
H200_BLIND = FixtureGpu(0, H200_UUID, H200_NAME, {"gpu_util": 40, "fb_used_mib": 1000})


def dcgm_only_answers() -> Answers:
    answers: Answers = {}
    for gpu, target, options in (
        (H100_DECODE, H100_TARGET, {"hostname": H100_HOST}),
        (H100_SPARE, H100_TARGET, {"hostname": H100_HOST}),
        (H200_BLIND, H200_TARGET, {"hostname": "gpu-h200-a", "hostname_label": "hostname"}),
    ):
        for name, (labels, value) in dcgm_series(gpu, target, **options).items():
            answers.setdefault(name, []).append((labels, points(TIMES, value)))
    return answers


def dcgm_only_fleet() -> PrometheusFleet:
    return map_fleet(answers_to_results(dcgm_only_answers()), GRID, gpu_catalog=load_catalog().gpus)


def test_every_reporting_gpu_reaches_the_gpu_view() -> None:
    fleet = dcgm_only_fleet()
    data = analysis_input(fleet)
    assert data.inventory.workers == ()
    view = build_gpu_view(gpu_view_buckets(fleet), data.inventory.gpus, start="a", end="b")
    gpus = {g.gpu_uuid: g for g in view.gpus}
    assert set(gpus) == {H100_UUID, H100_SPARE_UUID, H200_UUID}  # the unattributed ones too
    decode, spare, blind = gpus[H100_UUID], gpus[H100_SPARE_UUID], gpus[H200_UUID]
    assert decode.worker_id == "llm/llama-decode-0" and decode.sku == "H100-SXM"
    assert (decode.tensor_active, decode.dram_active) == (0.18, 0.71)
    assert decode.bottleneck == "memory-bandwidth"
    assert spare.worker_id is None and spare.idle is True and spare.bottleneck == "underutilised"
    assert blind.sku == "H200-SXM" and blind.sm_active is None and blind.bottleneck == "unknown"
    assert blind.gpu_util == 0.4 and blind.idle is False
    # The read's own note on the missing fields now says how to enable them; the view does not repeat it.
    note = [n for n in fleet.notes if "DCGM_FI_PROF_DRAM_ACTIVE" in n]
    assert len(note) == 1 and PROFILING_HELP in note[0]
    again = build_gpu_view(gpu_view_buckets(fleet), [], start="a", end="b", warnings=fleet.notes)
    assert sum(PROFILING_HELP in w for w in again.warnings) == 1


def _iso(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, UTC).isoformat()


def test_analyze_prometheus_with_gpus_alone_exits_0_with_the_gpu_view(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fleet = dcgm_only_fleet()

    def read_fleet(*args: Any, **kwargs: Any) -> PrometheusFleet:
        return fleet

    monkeypatch.setattr("analyzer.sources.prometheus.client.read_fleet", read_fleet)
    span = ["--from", _iso(GRID.start - GRID.step), "--to", _iso(GRID.end)]
    result = CliRunner().invoke(
        app, ["analyze", "--prometheus", "http://prometheus.invalid", *span, "--json"]
    )
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["mode"] == "gpu-view" and payload["findings"] == []
    view = payload["gpu_view"]
    assert view["totals"]["gpus"] == 3 and view["totals"]["idle_gpus"] == 1
    assert view["totals"]["gpus_without_profiling"] == 1
    human = CliRunner().invoke(app, ["analyze", "--prometheus", "http://prometheus.invalid", *span])
    assert human.exit_code == 0, human.output
    assert "GPU view" in human.output and "llm/llama-decode-0" in human.output


@pytest.mark.e2e
@pytest.mark.timeout(60)
def test_a_real_prometheus_with_dcgm_exporter_alone() -> None:
    """Debian's prometheus scraping two dcgm-exporter expositions (one with a pod, one upstream-default CSV
    without profiling) and no engine: the CLI exits 0 with the GPU view."""
    import time

    from alerts.loopback_http import ExpositionServer
    from alerts.testing import ScrapeJob, prometheus_config, running_prometheus
    from tests.analyzer.prometheus_fixtures import dcgm_exposition
    from tests.analyzer.sources.prometheus.test_live import require_prometheus, wait_for_scrapes

    require_prometheus()
    pages = {
        "/h100": lambda: dcgm_exposition([H100_DECODE, H100_SPARE], hostname=H100_HOST),
        "/h200": lambda: dcgm_exposition([H200_BLIND], hostname="gpu-h200-a", hostname_label="hostname"),
    }
    with ExpositionServer(pages) as server:
        target = f"127.0.0.1:{server.port}"
        jobs = [
            ScrapeJob("dcgm-exporter-h100", target, "/h100"),
            ScrapeJob("dcgm-exporter-h200", target, "/h200"),
        ]
        with running_prometheus(prometheus_config(jobs, interval="1s")) as prometheus:
            wait_for_scrapes(prometheus, 6)
            end = float(int(time.time() - 0.5))
            span = ["--from", _iso(end - 4.0), "--to", _iso(end), "--step", "1"]
            cli = CliRunner().invoke(app, ["analyze", "--prometheus", prometheus.url, *span, "--json"])
    assert cli.exit_code == 0, cli.output
    view = json.loads(cli.stdout)["gpu_view"]
    gpus = {g["gpu_uuid"]: g for g in view["gpus"]}
    assert set(gpus) == {H100_UUID, H100_SPARE_UUID, H200_UUID}
    assert gpus[H100_UUID]["worker_id"] == "llm/llama-decode-0" and gpus[H100_UUID]["tensor_active"] == 0.18
    assert gpus[H100_SPARE_UUID]["idle"] is True
    assert gpus[H200_UUID]["sm_active"] is None and gpus[H200_UUID]["activity_unknown_reason"]
