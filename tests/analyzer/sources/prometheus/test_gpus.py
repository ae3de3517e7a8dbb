"""Zero-agent GPU inventory: every dcgm-exporter series lists its GPU (the real H100 capture, clocks only, is
a GPU of unknown activity), MIG instances are GPUs of their own (parent and profile kept, the parent's own
series no GPU), Xid 79 as the collector judges it, and the busy-time counters reach the sample columns."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from analyzer.sources.prometheus.inventory import inventory, sample_columns
from analyzer.sources.prometheus.metrics import GPU_PRESENCE, GPU_QUERIES, MetricQuery
from analyzer.sources.prometheus.series import RangeSeries, parse_matrix
from analyzer.sources.prometheus.source import map_fleet
from analyzer.telemetry.frames import STATES
from fleet.catalog import load_catalog
from fleet.contract import GpuState
from tests.analyzer.prometheus_fixtures import (
    DCGM_FIXTURE,
    H100_NAME,
    H100_SPARE_UUID,
    FixtureGpu,
    dcgm_capture,
    dcgm_gpu_labels,
    matrix,
    points,
)
from tests.analyzer.sources.prometheus.test_source import (
    DECODE,
    GRID,
    H100_HOST,
    H100_TARGET,
    H100_UUID,
    TIMES,
)

POD = {"namespace": "llm", "pod": "llama-decode-0", "container": "vllm"}
Answer = list[tuple[Mapping[str, str], Sequence[tuple[float, float]]]]


def gpu_query(name: str, matchers: str = "") -> MetricQuery:
    return next(q for q in GPU_QUERIES if q.name == name and q.matchers == matchers)


def results(answers: Mapping[MetricQuery, Answer]) -> dict[MetricQuery, list[RangeSeries]]:
    return {query: parse_matrix(matrix(series))[0] for query, series in answers.items()}


def listing(text: str, target: Mapping[str, str]) -> Answer:
    """The every-series listing Prometheus answers for an exposition: each series' labels without its name
    (one series per distinct label set), present at every step."""
    label_sets = {
        tuple(sorted({**sample.labels, **target}.items()))
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
    return [(dict(labels), points(TIMES, 1.0)) for labels in sorted(label_sets)]


def test_the_real_h100_capture_lists_its_gpu_with_activity_unknown() -> None:
    text = dcgm_capture(POD)
    fleet = map_fleet(
        results({GPU_PRESENCE: listing(text, H100_TARGET)}), GRID, gpu_catalog=load_catalog().gpus
    )
    (gpu,) = fleet.gpus
    assert (gpu.gpu_uuid, gpu.node, gpu.sku, gpu.worker_id) == (H100_UUID, H100_HOST, "H100-SXM", DECODE)
    assert gpu.windows == GRID.n and gpu.state is GpuState.DEGRADED
    assert len(fleet.gpu) == GRID.n
    assert np.isnan(fleet.gpu.tensor_active).all() and np.isnan(fleet.gpu.gpu_util).all()  # unknown, not 0
    assert set(fleet.gpu.state.tolist()) == {STATES.index(GpuState.DEGRADED)}
    assert any(note.startswith("1 GPU(s) report no DCGM_FI_PROF_PIPE_TENSOR_ACTIVE") for note in fleet.notes)
    inv = inventory(fleet)
    assert [(g.gpu_uuid, g.worker_id, g.state) for g in inv.gpus] == [(H100_UUID, DECODE, "degraded")]


def test_without_the_listing_the_capture_shows_no_gpu() -> None:
    """What zero-agent mode read before: only activity, memory and Xid fields, none in the real capture."""
    assert DCGM_FIXTURE.read_text().count("DCGM_FI_DEV_SM_CLOCK{") == 1
    assert not any(q.name in DCGM_FIXTURE.read_text() for q in GPU_QUERIES)


MIG = FixtureGpu(1, H100_SPARE_UUID, H100_NAME, {}, pod=("kserve", "llm-predictor-0", "kserve-container"),
                 mig=("7", "1g.10gb"))  # fmt: skip
PARENT = FixtureGpu(1, H100_SPARE_UUID, H100_NAME, {})


def mig_labels() -> tuple[dict[str, str], dict[str, str]]:
    instance = {**dcgm_gpu_labels(MIG, hostname=H100_HOST), **H100_TARGET}
    parent = {**dcgm_gpu_labels(PARENT, hostname=H100_HOST), **H100_TARGET}
    return instance, parent


def test_a_mig_instance_is_a_gpu_and_its_parent_is_not() -> None:
    instance, parent = mig_labels()
    answers: dict[MetricQuery, Answer] = {
        gpu_query("DCGM_FI_PROF_GR_ENGINE_ACTIVE"): [(instance, points(TIMES, 0.3))],
        gpu_query("DCGM_FI_DEV_FB_USED"): [(instance, points(TIMES, 4096))],
        GPU_PRESENCE: [(instance, points(TIMES, 1.0)), (parent, points(TIMES, 1.0))],  # power: the parent's
    }
    fleet = map_fleet(results(answers), GRID, gpu_catalog=load_catalog().gpus)
    (gpu,) = fleet.gpus
    assert gpu.gpu_uuid == f"{H100_SPARE_UUID}/7"
    assert (gpu.parent_gpu_uuid, gpu.mig_profile, gpu.worker_id) == (
        H100_SPARE_UUID,
        "1g.10gb",
        "kserve/llm-predictor-0",
    )
    gpu_columns, _ = sample_columns(fleet)
    assert set(gpu_columns["parent_gpu_uuid"]) == {H100_SPARE_UUID}
    assert set(gpu_columns["mig_profile"]) == {"1g.10gb"}
    np.testing.assert_allclose(gpu_columns["gr_engine_active"], 0.3)  # a MIG instance's own activity
    assert np.isnan(gpu_columns["mem_copy_util"]).all()
    assert inventory(fleet).gpus[0].parent_gpu_uuid == H100_SPARE_UUID


def decode_gpu_labels() -> dict[str, str]:
    gpu = FixtureGpu(0, H100_UUID, H100_NAME, {}, pod=("llm", "llama-decode-0", "vllm"))
    return {**dcgm_gpu_labels(gpu, hostname=H100_HOST), **H100_TARGET}


def test_xid_79_on_the_parent_loses_its_instances() -> None:
    instance, parent = mig_labels()
    xid = [0.0] * 6 + [79.0] * 4
    answers: dict[MetricQuery, Answer] = {
        gpu_query("DCGM_FI_PROF_DRAM_ACTIVE"): [(instance, points(TIMES, 0.2))],
        gpu_query("DCGM_FI_DEV_XID_ERRORS"): [(parent, points(TIMES, xid))],
    }
    fleet = map_fleet(results(answers), GRID)
    (gpu,) = fleet.gpus
    lost = fleet.gpu.state == STATES.index(GpuState.LOST)
    np.testing.assert_allclose(fleet.gpu.ts[lost], TIMES[6:])
    assert gpu.state is GpuState.LOST


@pytest.mark.parametrize(
    ("counts", "lost_windows"), [(None, 10), ([0.0] * 10, 0), ([0.0] * 7 + [2.0] * 3, 3)]
)
def test_where_the_exporter_counts_xids_the_count_decides(
    counts: list[float] | None, lost_windows: int
) -> None:
    """The last-Xid field stays 79 after the GPU recovers (NVIDIA/dcgm-exporter#500): an exporter that counts
    Xids in a window is believed instead, as the collector does."""
    labels = decode_gpu_labels()
    answers: dict[MetricQuery, Answer] = {
        gpu_query("DCGM_FI_PROF_DRAM_ACTIVE"): [(labels, points(TIMES, 0.2))],
        gpu_query("DCGM_FI_DEV_XID_ERRORS"): [(labels, points(TIMES, 79.0))],
    }
    if counts is not None:
        other = {**labels, "xid": "13"}
        answers[gpu_query("DCGM_EXP_XID_ERRORS_COUNT")] = [(other, points(TIMES, 1.0))]
        answers[gpu_query("DCGM_EXP_XID_ERRORS_COUNT", '{xid="79"}')] = [
            ({**labels, "xid": "79"}, points(TIMES, counts))
        ]
    fleet = map_fleet(results(answers), GRID)
    assert int((fleet.gpu.state == STATES.index(GpuState.LOST)).sum()) == lost_windows


def test_graphics_engine_activity_joins_the_broken_profiling_check() -> None:
    """All profiling fields 0 while GPU_UTIL > 0 is broken telemetry, unless GR_ENGINE_ACTIVE says a kernel
    ran (then the zeros are real)."""
    labels = decode_gpu_labels()
    profiling = ("DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE")
    zeros = dict.fromkeys(profiling, 0.0)
    answers: dict[MetricQuery, Answer] = {
        gpu_query(n): [(labels, points(TIMES, v))] for n, v in zeros.items()
    }
    answers[gpu_query("DCGM_FI_DEV_GPU_UTIL")] = [(labels, points(TIMES, 60.0))]
    stuck = map_fleet(results(answers), GRID)
    assert np.isnan(stuck.gpu.dram_active).all()
    answers[gpu_query("DCGM_FI_PROF_GR_ENGINE_ACTIVE")] = [(labels, points(TIMES, 0.5))]
    busy = map_fleet(results(answers), GRID)
    np.testing.assert_allclose(busy.gpu.dram_active, 0.0)
    assert not any("read 0 while GPU_UTIL" in note for note in busy.notes)
