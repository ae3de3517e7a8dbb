"""Zero-agent mapping: query_range answers built from the real fixtures -> GpuFrame / EngineFrame."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest

from analyzer.sources.prometheus.fleet import PrometheusFleet
from analyzer.sources.prometheus.labels import Family, resolve_role
from analyzer.sources.prometheus.metrics import (
    ALL_QUERIES,
    GPU_QUERIES,
    MetricQuery,
    format_duration,
    plan,
)
from analyzer.sources.prometheus.series import (
    MIB,
    PrometheusPayloadError,
    RangeSeries,
    TimeGrid,
    parse_matrix,
)
from analyzer.sources.prometheus.source import map_fleet
from analyzer.telemetry.bottleneck import classify
from analyzer.telemetry.frames import ROLES, SOURCES, STATES
from fleet.catalog import load_catalog
from fleet.contract import Bottleneck, GpuState, Role, RoleSource, TelemetrySource
from tests.analyzer.prometheus_fixtures import (
    H100_NAME,
    H100_SPARE_UUID,
    H200_NAME,
    H200_UUID,
    SGLANG_FIXTURE,
    VLLM_FIXTURE,
    FixtureGpu,
    dcgm_gpu_labels,
    dcgm_label_template,
    matrix,
    points,
    samples,
)

STEP = 60.0
GRID = TimeGrid(start=1_768_264_400.0, step=STEP, n=10)
TIMES = GRID.times().tolist()
H100_UUID = dcgm_label_template()["UUID"]  # the real capture's GPU
H100_HOST = dcgm_label_template()["Hostname"]
DECODE = "llm/llama-decode-0"
PREFILL = "llm/llama-prefill-0"


def query(name: str) -> MetricQuery:
    return next(q for q in ALL_QUERIES if q.name == name)


Answers = dict[str, list[tuple[Mapping[str, str], Sequence[tuple[float, float]]]]]


def answers_to_results(answers: Answers) -> dict[MetricQuery, list[RangeSeries]]:
    """Each answer through its JSON form, as the client receives it."""
    out: dict[MetricQuery, list[RangeSeries]] = {}
    for name, series in answers.items():
        parsed, warnings = parse_matrix(matrix(series))
        assert warnings == []
        out[query(name)] = parsed
    return out


def dcgm_series(
    gpu: FixtureGpu, target: Mapping[str, str], **label_options: Any
) -> dict[str, tuple[dict[str, str], float]]:
    """Metric name -> (labels Prometheus returns after avg_over_time, value) for one GPU."""
    labels = {**dcgm_gpu_labels(gpu, **label_options), **target}
    names = {
        "sm_active": "DCGM_FI_PROF_SM_ACTIVE",
        "tensor_active": "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "dram_active": "DCGM_FI_PROF_DRAM_ACTIVE",
        "gpu_util": "DCGM_FI_DEV_GPU_UTIL",
        "fb_used_mib": "DCGM_FI_DEV_FB_USED",
    }
    return {names[k]: (labels, v) for k, v in gpu.values.items()}


H100_DECODE = FixtureGpu(
    0,
    H100_UUID,
    H100_NAME,
    {"sm_active": 0.62, "tensor_active": 0.18, "dram_active": 0.71, "gpu_util": 100, "fb_used_mib": 61440},
    pod=("llm", "llama-decode-0", "vllm"),
    pod_labels={"llm_d_ai_role": "decode"},
)
H100_SPARE = FixtureGpu(
    1, H100_SPARE_UUID, H100_NAME, {"sm_active": 0.0, "tensor_active": 0.0, "dram_active": 0.0, "gpu_util": 0}
)
H200_PREFILL = FixtureGpu(
    0,
    H200_UUID,
    H200_NAME,
    {"sm_active": 0.93, "tensor_active": 0.74, "dram_active": 0.32, "gpu_util": 100, "fb_used_mib": 120_000},
    pod=("llm", "llama-prefill-0", "sglang"),
)
H100_TARGET = {"job": "dcgm-exporter", "instance": "10.0.1.7:9400"}
H200_TARGET = {"job": "dcgm-exporter", "instance": "10.0.2.9:9400"}
VLLM_TARGET = {"job": "vllm", "instance": "10.0.1.21:8000", "namespace": "llm", "pod": "llama-decode-0"}
SGLANG_TARGET = {"job": "sglang", "instance": "10.0.2.33:30000", "namespace": "llm", "pod": "llama-prefill-0"}


def engine_labels(path: Any, name: str, target: Mapping[str, str], **changes: str) -> dict[str, str]:
    labels = samples(path, name)[0]
    labels.update(changes)
    return {**labels, **target}


def two_node_answers() -> Answers:
    """One H100 node (old ``Hostname`` label) with a decode pod and a spare GPU, one H200 node (new
    ``hostname`` label) with a prefill pod, a vLLM decode engine and an SGLang prefill engine."""
    answers: Answers = {}
    for gpu, target, options in (
        (H100_DECODE, H100_TARGET, {"hostname": H100_HOST}),
        (H100_SPARE, H100_TARGET, {"hostname": H100_HOST}),
        (H200_PREFILL, H200_TARGET, {"hostname": "gpu-h200-a", "hostname_label": "hostname"}),
    ):
        for name, (labels, value) in dcgm_series(gpu, target, **options).items():
            answers.setdefault(name, []).append((labels, points(TIMES, value)))
    vllm = {
        "vllm:prompt_tokens_total": 50.0,  # per second (rate)
        "vllm:generation_tokens_total": 400.0,
        "vllm:num_requests_running": 12.0,
        "vllm:num_requests_waiting": 3.0,
        "vllm:kv_cache_usage_perc": 0.42,
        "vllm:num_preemptions_total": 0.0,
    }
    for name, value in vllm.items():
        answers[name] = [(engine_labels(VLLM_FIXTURE, name, VLLM_TARGET), points(TIMES, value))]
    sglang = {
        "sglang:prompt_tokens_total": 2000.0,
        "sglang:generation_tokens_total": 10.0,
        "sglang:num_running_reqs": 4.0,
        "sglang:num_queue_reqs": 1.0,
        "sglang:token_usage": 0.2,
    }
    for name, value in sglang.items():
        labels = engine_labels(SGLANG_FIXTURE, name, SGLANG_TARGET)
        if "engine_type" in labels:
            labels["engine_type"] = "prefill"
        answers[name] = [(labels, points(TIMES, value))]
    return answers


@pytest.fixture(scope="module")
def fleet() -> PrometheusFleet:
    return map_fleet(answers_to_results(two_node_answers()), GRID, gpu_catalog=load_catalog().gpus)


def worker_rows(frame: Any, worker: str) -> np.ndarray[Any, np.dtype[np.bool_]]:
    return np.asarray(frame.worker == frame.workers.index(worker))


def test_gpu_frame_holds_attributed_gpus_with_ratios(fleet: PrometheusFleet) -> None:
    gpu = fleet.gpu
    assert gpu.workers == (DECODE, PREFILL)
    assert len(gpu) == 2 * GRID.n  # the spare GPU has no pod: not in the frame
    decode = worker_rows(gpu, DECODE)
    np.testing.assert_allclose(gpu.sm_active[decode], 0.62)
    np.testing.assert_allclose(gpu.tensor_active[decode], 0.18)
    np.testing.assert_allclose(gpu.dram_active[decode], 0.71)
    np.testing.assert_allclose(gpu.gpu_util[decode], 1.0)  # percent -> ratio
    np.testing.assert_allclose(gpu.tensor_active[~decode], 0.74)
    np.testing.assert_allclose(np.sort(gpu.ts[decode]), GRID.times())
    assert set(gpu.source.tolist()) == {SOURCES.index(TelemetrySource.PROMETHEUS)}
    assert set(gpu.state.tolist()) == {STATES.index(GpuState.OK)}
    mem = fleet.gpu_row_mem_used_bytes
    np.testing.assert_allclose(mem[decode], 61440 * MIB)  # MiB -> bytes
    np.testing.assert_allclose(mem[~decode], 120_000 * MIB)


def test_inventory_names_gpus_nodes_skus_and_leaves_the_spare_unattributed(fleet: PrometheusFleet) -> None:
    by_uuid = {(g.gpu_uuid, g.worker_id): g for g in fleet.gpus}
    h100 = by_uuid[(H100_UUID, DECODE)]
    assert (h100.node, h100.gpu_index, h100.gpu_name, h100.sku) == (H100_HOST, 0, H100_NAME, "H100-SXM")
    assert (h100.namespace, h100.pod, h100.container) == ("llm", "llama-decode-0", "vllm")
    h200 = by_uuid[(H200_UUID, PREFILL)]
    assert (h200.node, h200.gpu_name, h200.sku) == ("gpu-h200-a", H200_NAME, "H200-SXM")
    assert fleet.unattributed_gpus == (H100_SPARE_UUID,)
    assert any("1 GPU(s) carry no pod label" in note for note in fleet.notes)
    assert fleet.gpus[int(fleet.gpu_row_gpu[0])].worker_id in (DECODE, PREFILL)


def test_engine_frame_counts_tokens_per_window_and_joins_roles(fleet: PrometheusFleet) -> None:
    engine = fleet.engine
    assert engine.workers == (DECODE, PREFILL)
    decode, prefill = worker_rows(engine, DECODE), worker_rows(engine, PREFILL)
    assert decode.sum() == prefill.sum() == GRID.n
    np.testing.assert_allclose(engine.generation_tokens[decode], 400.0 * STEP)  # rate x step
    np.testing.assert_allclose(engine.prompt_tokens[decode], 50.0 * STEP)
    np.testing.assert_allclose(engine.prompt_tokens[prefill], 2000.0 * STEP)
    np.testing.assert_allclose(engine.requests_running[decode], 12.0)
    np.testing.assert_allclose(engine.requests_waiting[prefill], 1.0)
    np.testing.assert_allclose(engine.kv_cache_usage[decode], 0.42)
    np.testing.assert_allclose(engine.kv_cache_usage[prefill], 0.2)
    np.testing.assert_allclose(engine.preemptions[decode], 0.0)  # reported as 0: stays 0
    assert np.isnan(engine.preemptions[prefill]).all()  # SGLang reported no retractions: unknown, not 0
    assert set(engine.role[decode].tolist()) == {ROLES.index(Role.DECODE)}
    assert set(engine.role[prefill].tolist()) == {ROLES.index(Role.PREFILL)}


def test_workers_carry_engine_model_role_source_and_gpus(fleet: PrometheusFleet) -> None:
    workers = {w.worker_id: w for w in fleet.workers}
    assert set(workers) == {DECODE, PREFILL}
    decode, prefill = workers[DECODE], workers[PREFILL]
    assert (decode.engine, decode.model, decode.node) == ("vllm", "Qwen/Qwen3-0.6B", H100_HOST)
    assert (decode.role, decode.role_source) == (Role.DECODE, RoleSource.POD_LABEL)  # llm_d_ai_role on DCGM
    assert (prefill.role, prefill.role_source) == (Role.PREFILL, RoleSource.ENGINE)  # SGLang engine_type
    assert decode.gpu_uuids == (H100_UUID,)
    assert prefill.gpu_uuids == (H200_UUID,)
    assert (decode.first_seen, decode.last_seen) == (GRID.start, GRID.end)


def test_frames_feed_the_bottleneck_classifier(fleet: PrometheusFleet) -> None:
    grid = classify(fleet.gpu, fleet.engine, start=GRID.start - STEP, end=GRID.end)
    assert grid.verdict(DECODE)[0] is Bottleneck.MEMORY_BANDWIDTH
    assert grid.verdict(PREFILL)[0] is Bottleneck.COMPUTE


def single_gpu_answers(labels: Mapping[str, str], values: Mapping[str, float | Sequence[float]]) -> Answers:
    return {name: [(labels, points(TIMES, value))] for name, value in values.items()}


def decode_labels(**changes: str | None) -> dict[str, str]:
    labels = {**dcgm_gpu_labels(H100_DECODE, hostname=H100_HOST), **H100_TARGET}
    for key, value in changes.items():
        if value is None:
            labels.pop(key, None)
        else:
            labels[key] = value
    return labels


def test_label_drift_lowercase_uuid_hostname_and_old_pod_names() -> None:
    drift: dict[str, str | None] = {"UUID": None, "uuid": H100_UUID, "Hostname": None, "hostname": "node-7"}
    old_pod: dict[str, str | None] = {"pod": None, "namespace": None, "container": None}
    labels = decode_labels(**drift, **old_pod, pod_name="llama-decode-0", pod_namespace="llm")
    result = map_fleet(
        answers_to_results(single_gpu_answers(labels, {"DCGM_FI_PROF_DRAM_ACTIVE": 0.5})), GRID
    )
    (gpu,) = result.gpus
    assert (gpu.gpu_uuid, gpu.node, gpu.worker_id) == (H100_UUID, "node-7", DECODE)
    assert np.isnan(result.gpu.tensor_active).all()  # never reported: NaN, not 0
    assert set(result.gpu.state.tolist()) == {STATES.index(GpuState.DEGRADED)}


def test_exported_pod_labels_win_and_the_exporter_pod_attributes_nothing() -> None:
    """Without honor_labels, Prometheus renames dcgm-exporter's pod labels exported_*; the target's own
    pod/namespace are the exporter's and must not become a worker."""
    exporter = {
        "pod": "nvidia-dcgm-exporter-x7k2p",
        "namespace": "gpu-operator",
        "container": "nvidia-dcgm-exporter",
    }
    mapped = decode_labels(**exporter, exported_pod="llama-decode-0", exported_namespace="llm",
                           exported_container="vllm")  # fmt: skip
    spare = {**dcgm_gpu_labels(H100_SPARE, hostname=H100_HOST), **H100_TARGET, **exporter}
    answers: Answers = {
        "DCGM_FI_PROF_DRAM_ACTIVE": [(mapped, points(TIMES, 0.7)), (spare, points(TIMES, 0.0))]
    }
    result = map_fleet(answers_to_results(answers), GRID)
    assert result.gpu.workers == (DECODE,)
    assert result.unattributed_gpus == (H100_SPARE_UUID,)
    # No engine series name the pod: its GPU stays attributed to it, but it is no worker (as in the store).
    assert result.workers == ()
    assert any(note.startswith("1 pod(s) hold GPUs but no vLLM") for note in result.notes)


def test_mig_instances_are_gpus_of_their_own() -> None:
    mig = FixtureGpu(0, H100_UUID, H100_NAME, {}, pod=("kserve", "llm-predictor-0", "kserve-container"),
                     mig=("7", "1g.10gb"))  # fmt: skip
    labels = {**dcgm_gpu_labels(mig, hostname=H100_HOST), **H100_TARGET}
    answers = single_gpu_answers(
        labels, {"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": 0.3, "DCGM_FI_PROF_DRAM_ACTIVE": 0.2}
    )
    result = map_fleet(answers_to_results(answers), GRID, gpu_catalog=load_catalog().gpus)
    (gpu,) = result.gpus
    assert gpu.gpu_uuid == f"{H100_UUID}/7"
    assert (gpu.parent_gpu_uuid, gpu.mig_profile) == (H100_UUID, "1g.10gb")
    assert gpu.gpu_name == f"{H100_NAME} MIG 1g.10gb"
    assert gpu.sku == load_catalog().gpus.resolve(gpu.gpu_name).key  # as the catalog resolves MIG names
    assert np.isnan(result.gpu.gpu_util).all()  # GPU_UTIL is not supported on MIG: unknown


def test_preferred_name_wins_and_aliases_fill_gaps() -> None:
    labels = decode_labels()
    primary = [0.5] * 5 + [float("nan")] * 5
    answers = single_gpu_answers(labels, {
        "DCGM_FI_PROF_DRAM_ACTIVE": primary, "DCGM_FI_PROF_DRAM_UTIL_RATIO": 0.9,  # DCGM 4.6 name
        "DCGM_FI_DEV_GPU_UTIL_RATIO": [0.4] * 5 + [40.0] * 5,  # scale undocumented: > 1 read as percent
    })  # fmt: skip
    result = map_fleet(answers_to_results(answers), GRID)
    np.testing.assert_allclose(result.gpu.dram_active, [0.5] * 5 + [0.9] * 5)
    np.testing.assert_allclose(result.gpu.gpu_util, 0.4)


def test_profiling_stuck_at_zero_while_busy_is_missing_not_idle() -> None:
    values = {"DCGM_FI_PROF_SM_ACTIVE": 0.0, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": 0.0,
              "DCGM_FI_PROF_DRAM_ACTIVE": 0.0, "DCGM_FI_DEV_GPU_UTIL": 100.0}  # fmt: skip
    result = map_fleet(answers_to_results(single_gpu_answers(decode_labels(), values)), GRID)
    assert np.isnan(result.gpu.tensor_active).all() and np.isnan(result.gpu.dram_active).all()
    np.testing.assert_allclose(result.gpu.gpu_util, 1.0)
    assert set(result.gpu.state.tolist()) == {STATES.index(GpuState.DEGRADED)}
    assert any("read 0 while GPU_UTIL > 0" in note for note in result.notes)


def test_idle_gpu_with_zero_utilisation_stays_zero() -> None:
    values = {
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": 0.0,
        "DCGM_FI_PROF_DRAM_ACTIVE": 0.0,
        "DCGM_FI_DEV_GPU_UTIL": 0.0,
    }
    result = map_fleet(answers_to_results(single_gpu_answers(decode_labels(), values)), GRID)
    np.testing.assert_allclose(result.gpu.tensor_active, 0.0)
    assert set(result.gpu.state.tolist()) == {STATES.index(GpuState.OK)}


def test_xid_79_marks_the_gpu_lost_and_gaps_leave_no_rows() -> None:
    dram = [0.6] * 4 + [float("nan")] * 6
    xid = [0.0] * 6 + [79.0] * 4
    answers = single_gpu_answers(
        decode_labels(), {"DCGM_FI_PROF_DRAM_ACTIVE": dram, "DCGM_FI_DEV_XID_ERRORS": xid}
    )
    answers["DCGM_FI_PROF_DRAM_ACTIVE"] = [
        (decode_labels(), points(TIMES[:4], 0.6))
    ]  # a gap, as Prometheus omits
    result = map_fleet(answers_to_results(answers), GRID)
    assert len(result.gpu) == GRID.n  # xid reported every window
    lost = result.gpu.state == STATES.index(GpuState.LOST)
    np.testing.assert_allclose(result.gpu.ts[lost], TIMES[6:])
    assert np.isnan(result.gpu.dram_active[4:]).all()


def test_ratios_outside_zero_one_are_dropped() -> None:
    answers = single_gpu_answers(
        decode_labels(), {"DCGM_FI_PROF_SM_ACTIVE": [1.3] * 10, "DCGM_FI_PROF_DRAM_ACTIVE": 0.5}
    )
    result = map_fleet(answers_to_results(answers), GRID)
    assert np.isnan(result.gpu.sm_active).all()
    assert any("outside 0..1" in note for note in result.notes)


def test_sglang_ranks_are_deduplicated_and_vllm_dp_engines_summed() -> None:
    sg = {**SGLANG_TARGET}
    ranks = [engine_labels(SGLANG_FIXTURE, "sglang:num_running_reqs", sg, tp_rank=str(r)) for r in range(4)]
    dp = [
        engine_labels(VLLM_FIXTURE, "vllm:num_requests_running", VLLM_TARGET, engine=str(e)) for e in range(2)
    ]
    kv = [
        engine_labels(VLLM_FIXTURE, "vllm:kv_cache_usage_perc", VLLM_TARGET, engine=str(e)) for e in range(2)
    ]
    answers: Answers = {
        "sglang:num_running_reqs": [(labels, points(TIMES, 4.0)) for labels in ranks],
        "vllm:num_requests_running": [(dp[0], points(TIMES, 3.0)), (dp[1], points(TIMES, 5.0))],
        "vllm:kv_cache_usage_perc": [(kv[0], points(TIMES, 0.2)), (kv[1], points(TIMES, 0.6))],
    }
    result = map_fleet(answers_to_results(answers), GRID)
    engine = result.engine
    np.testing.assert_allclose(engine.requests_running[worker_rows(engine, PREFILL)], 4.0)
    np.testing.assert_allclose(engine.requests_running[worker_rows(engine, DECODE)], 8.0)
    np.testing.assert_allclose(engine.kv_cache_usage[worker_rows(engine, DECODE)], 0.4)
    assert any("no vLLM, SGLang or TensorRT-LLM" in note for note in result.notes) is False
    assert result.gpu.workers == ()  # no GPU series: the engine workers are engine-only


def test_legacy_kv_name_and_engines_outside_kubernetes() -> None:
    labels = {
        **samples(VLLM_FIXTURE, "vllm:kv_cache_usage_perc")[0],
        "job": "vllm",
        "instance": "gpu-host-3:8000",
    }
    result = map_fleet(
        answers_to_results({"vllm:gpu_cache_usage_perc": [(labels, points(TIMES, 0.8))]}), GRID
    )
    (worker,) = result.workers
    assert (worker.worker_id, worker.node, worker.namespace) == ("gpu-host-3:8000", "gpu-host-3", None)
    np.testing.assert_allclose(result.engine.kv_cache_usage, 0.8)
    assert np.isnan(result.engine.prompt_tokens).all()


def test_configurable_role_label_on_engine_series() -> None:
    labels = {
        **engine_labels(VLLM_FIXTURE, "vllm:num_requests_running", VLLM_TARGET),
        "serving_phase": "prefill",
    }
    answers: Answers = {"vllm:num_requests_running": [(labels, points(TIMES, 2.0))]}
    without = map_fleet(answers_to_results(answers), GRID)
    assert without.workers[0].role is Role.UNKNOWN
    assert any("without a role label" in note for note in without.notes)
    with_label = map_fleet(answers_to_results(answers), GRID, role_label="serving_phase")
    assert (with_label.workers[0].role, with_label.workers[0].role_source) == (
        Role.PREFILL,
        RoleSource.POD_LABEL,
    )
    assert set(with_label.engine.role.tolist()) == {ROLES.index(Role.PREFILL)}


E, P = RoleSource.ENGINE, RoleSource.POD_LABEL
SG = Family.SGLANG


@pytest.mark.parametrize(
    ("engine", "gpu", "expected"),
    [
        ([(SG, {"engine_type": "decode"})], [{"llm_d_ai_role": "prefill"}], (Role.DECODE, E)),
        ([(SG, {"engine_type": "unified"})], [{"llm_d_ai_role": "prefill"}], (Role.PREFILL, P)),
        ([(SG, {"engine_type": "unified"})], [], (Role.MIXED, E)),
        ([], [{"nvidia_com_dynamo_sub_component_type": "decode"}], (Role.DECODE, P)),
        ([], [{"nvidia_com_dynamo_component_type": "worker"}], (Role.MIXED, P)),
        ([], [{"llm_d_ai_role": "prefill-decode"}], (Role.MIXED, P)),
        ([(Family.VLLM, {"role": "bogus"})], [], (Role.UNKNOWN, RoleSource.NONE)),
    ],
)
def test_role_resolution_order(
    engine: list[tuple[Family, dict[str, str]]], gpu: list[dict[str, str]], expected: tuple[Role, RoleSource]
) -> None:
    assert (
        resolve_role([(1.0, f, labels) for f, labels in engine], [(1.0, labels) for labels in gpu], None)
        == expected
    )


def test_most_recent_role_label_wins() -> None:
    gpu = [(100.0, {"llm_d_ai_role": "prefill"}), (200.0, {"llm_d_ai_role": "decode"})]
    assert resolve_role([], gpu, None) == (Role.DECODE, RoleSource.POD_LABEL)


def test_pod_reassignment_splits_a_gpu_between_workers() -> None:
    first = decode_labels()
    second = decode_labels(pod="llama-decode-1")
    answers: Answers = {
        "DCGM_FI_PROF_DRAM_ACTIVE": [(first, points(TIMES[:5], 0.7)), (second, points(TIMES[5:], 0.1))]
    }
    result = map_fleet(answers_to_results(answers), GRID)
    assert result.gpu.workers == (DECODE, "llm/llama-decode-1")
    assert [g.windows for g in result.gpus] == [5, 5]
    assert result.unattributed_gpus == ()


def test_empty_results_give_empty_frames() -> None:
    result = map_fleet({}, GRID)
    assert len(result.gpu) == 0 and len(result.engine) == 0 and result.workers == ()
    assert any("no vLLM, SGLang or TensorRT-LLM" in note for note in result.notes)


def test_parse_matrix_rejects_what_is_not_a_matrix_and_reads_special_values() -> None:
    with pytest.raises(PrometheusPayloadError, match="bad_data"):
        parse_matrix({"status": "error", "errorType": "bad_data", "error": "bad_data: parse error"})
    with pytest.raises(PrometheusPayloadError, match="vector"):
        parse_matrix({"status": "success", "data": {"resultType": "vector", "result": []}})
    series, warnings = parse_matrix(
        {
            "status": "success",
            "warnings": ["PromQL info: metric might not be a counter"],
            "data": {
                "resultType": "matrix",
                "result": [{"metric": {"a": "b"}, "values": [[1.5, "NaN"], [2.5, "+Inf"]]}],
            },
        }
    )
    assert warnings == ["PromQL info: metric might not be a counter"]
    assert np.isnan(series[0].values[0]) and np.isinf(series[0].values[1])
    with pytest.raises(PrometheusPayloadError, match="malformed"):
        parse_matrix(
            {
                "status": "success",
                "data": {"resultType": "matrix", "result": [{"metric": {}, "values": [[1, "x"]]}]},
            }
        )


def test_time_grid_places_points_and_rejects_off_grid_ones() -> None:
    grid = TimeGrid.covering(100.0, 160.5, 15.0)
    assert (grid.n, grid.end) == (5, 160.0)
    np.testing.assert_array_equal(
        grid.columns(np.array([100.0, 130.0, 137.0, 175.0, 85.0])), [0, 2, -1, -1, -1]
    )
    with pytest.raises(ValueError, match="step"):
        TimeGrid.covering(0.0, 10.0, 0.0)
    with pytest.raises(ValueError, match="whole milliseconds"):
        TimeGrid(0.0, 0.0005, 10)


def test_query_plan_and_promql() -> None:
    assert plan(None) == ALL_QUERIES
    chosen = plan({"DCGM_FI_PROF_DRAM_ACTIVE", "vllm:prompt_tokens_total", "up"})
    assert [q.name for q in chosen] == [
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "DCGM_FI_.+|DCGM_EXP_.+|dcgm_.+",  # every dcgm-exporter series, for the GPU inventory
        "vllm:prompt_tokens_total",
    ]
    assert query("vllm:time_to_first_token_seconds").promql(60.0) == (
        "histogram_quantile(0.5, sum without (engine, tp_rank, pp_rank, dp_rank, moe_ep_rank, pid) "
        "(rate(vllm:time_to_first_token_seconds_bucket[60s])))"
    )
    assert query("vllm:time_to_first_token_seconds").reads({"vllm:time_to_first_token_seconds_bucket"})
    assert query("DCGM_FI_PROF_DRAM_ACTIVE").promql(120.0) == "avg_over_time(DCGM_FI_PROF_DRAM_ACTIVE[120s])"
    assert query("vllm:prompt_tokens_total").promql(2.5) == "rate(vllm:prompt_tokens_total[2500ms])"
    assert query("DCGM_FI_DEV_XID_ERRORS").promql(60) == "max_over_time(DCGM_FI_DEV_XID_ERRORS[60s])"
    assert all(q.family is Family.GPU for q in GPU_QUERIES)
    assert format_duration(0.25) == "250ms"
    with pytest.raises(ValueError, match="positive"):
        format_duration(0.0)


def test_inventory_and_sample_columns_match_the_store_shaped_inputs(fleet: PrometheusFleet) -> None:
    from analyzer.pools.pool import inventory_from_samples
    from analyzer.sources.prometheus.inventory import inventory, sample_columns
    from analyzer.telemetry.grid import aggregate_engine_samples, aggregate_gpu_samples

    inv = inventory(fleet)
    assert inv.worker_ids == (DECODE, PREFILL)
    skus = {g.gpu_uuid: (g.sku, g.worker_id, g.state) for g in inv.gpus}
    assert skus == {
        H100_UUID: ("H100-SXM", DECODE, "ok"),
        H100_SPARE_UUID: ("H100-SXM", None, "ok"),
        H200_UUID: ("H200-SXM", PREFILL, "ok"),
    }
    assert [g.gpu_uuid for g in inv.unattributed_gpus()] == [H100_SPARE_UUID]
    decode = next(w for w in inv.workers if w.worker_id == DECODE)
    assert (decode.engine, decode.model, decode.role, decode.tp) == (
        "vllm",
        "Qwen/Qwen3-0.6B",
        Role.DECODE,
        1,
    )

    gpu_columns, engine_columns = sample_columns(fleet)
    rebuilt = inventory_from_samples(gpu_columns, engine_columns)
    assert rebuilt.worker_ids == inv.worker_ids
    assert {w.worker_id: w.role for w in rebuilt.workers} == {DECODE: Role.DECODE, PREFILL: Role.PREFILL}
    gpu_buckets = aggregate_gpu_samples(gpu_columns, bucket_s=3600.0)
    engine_buckets = aggregate_engine_samples(engine_columns, bucket_s=3600.0)
    dram = dict(zip(gpu_buckets["gpu_uuid"], gpu_buckets["dram_active_avg"], strict=True))
    assert dram == pytest.approx({H100_UUID: 0.71, H200_UUID: 0.32})
    generated = dict(zip(engine_buckets["worker_id"], engine_buckets["generation_tokens_sum"], strict=True))
    assert generated[DECODE] == pytest.approx(400.0 * STEP * GRID.n)


def test_analysis_input_runs_the_pipeline(fleet: PrometheusFleet) -> None:
    from analyzer.pipeline import analyze
    from analyzer.sources.prometheus.inventory import analysis_input

    result = analyze(analysis_input(fleet), load_catalog())
    assert result.grid.workers == (DECODE, PREFILL)
    generated = result.grid.generation_tokens[result.grid.row(DECODE)].sum()
    assert generated == pytest.approx(400.0 * STEP * GRID.n)
    counts = result.summary["fleet"]
    assert (counts["gpus"], counts["unattributed_gpus"], counts["workers"]) == (3, 1, 2)
