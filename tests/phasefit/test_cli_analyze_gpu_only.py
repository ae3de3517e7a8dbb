"""`phasefit analyze` on a store with GPU samples and no engine (dcgm-exporter alone): exit 0 with the GPU
view; store-mode joins by pod and failed joins reported as such; the missing-profiling warning names the
DCGM fields and how to enable them."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import typer
from typer.testing import CliRunner

from analyzer.telemetry.gpu_view import PROFILING_FIELDS
from fleet.contract import EngineSample, GpuSample, Role, TelemetrySource
from fleet.ingest import catalog_sku_resolver
from fleet.store.engine import make_engine, writing
from fleet.store.migrate import upgrade
from fleet.store.writer import write_samples
from phasefit.cli.analyze import analyze

app = typer.Typer()
app.command()(analyze)

T0 = datetime(2024, 6, 3, tzinfo=UTC)
H100 = "NVIDIA H100 80GB HBM3"
H200 = "NVIDIA H200"
BUSY = "GPU-aaaa0000-0000-0000-0000-000000000001"
IDLE = "GPU-aaaa0000-0000-0000-0000-000000000002"
BLIND = "GPU-aaaa0000-0000-0000-0000-000000000003"
HOSTILE_POD = "llm/[bold red]pod[/]"


def _gpu(ts: datetime, uuid: str, index: int, name: str, **values: object) -> GpuSample:
    return GpuSample(ts=ts, window_s=900, node="node-a", gpu_uuid=uuid, gpu_index=index, gpu_name=name,
                     source=TelemetrySource.DCGM, **values)  # fmt: skip


def _store(path: Path, records: list[GpuSample | EngineSample]) -> str:
    url = f"sqlite:///{path}"
    engine = make_engine(url)
    upgrade(engine)
    with writing(engine) as connection:
        write_samples(connection, records, sku_resolver=catalog_sku_resolver())
    engine.dispose()
    return url


def _gpu_only(windows: int = 8) -> list[GpuSample | EngineSample]:
    out: list[GpuSample | EngineSample] = []
    for i in range(windows):
        ts = T0 + timedelta(minutes=15 * (i + 1))
        out.append(_gpu(ts, BUSY, 0, H100, worker_id=HOSTILE_POD, sm_active=0.9, tensor_active=0.7,
                        dram_active=0.3, gpu_util=1.0))  # fmt: skip
        out.append(_gpu(ts, IDLE, 1, H100, sm_active=0.0, tensor_active=0.0, dram_active=0.0, gpu_util=0.0))
        out.append(_gpu(ts, BLIND, 0, H200, gpu_util=0.5, state="degraded"))
    return out


def test_a_gpu_only_store_exits_0_with_the_gpu_view(tmp_path: Path) -> None:
    url = _store(tmp_path / "gpu.db", _gpu_only())
    result = CliRunner().invoke(app, ["--database-url", url, "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["mode"] == "gpu-view" and payload["summary"] is None and payload["findings"] == []
    view = payload["gpu_view"]
    assert (view["from"], view["to"]) == ("2024-06-03T00:00:00Z", "2024-06-03T02:00:00.000001Z")
    gpus = {g["gpu_uuid"]: g for g in view["gpus"]}
    assert gpus[BUSY]["bottleneck"] == "compute" and gpus[BUSY]["sm_active"] == 0.9
    assert gpus[IDLE]["idle"] is True and gpus[IDLE]["idle_gpu_hours"] == 2.0
    assert gpus[BLIND]["sm_active"] is None and gpus[BLIND]["bottleneck"] == "unknown"
    assert all(f in gpus[BLIND]["activity_unknown_reason"] for f in PROFILING_FIELDS)
    assert {s["sku"]: s["gpus"] for s in view["skus"]} == {"H100-SXM": 2, "H200-SXM": 1}
    assert view["totals"]["idle_gpu_hours"] == 2.0 and view["totals"]["gpus_without_profiling"] == 1
    assert payload["warnings"] == view["warnings"]
    profiling = [w for w in payload["warnings"] if "DCGM_FI_PROF_SM_ACTIVE" in w]
    assert len(profiling) == 1 and "DCGM_EXPORTER_COLLECTORS" in profiling[0] and "-f" in profiling[0]
    assert {m["engine"] for m in view["engine_metrics_needed"]} == {"vllm", "sglang", "trtllm"}


def test_the_human_gpu_view_prints_names_literally(tmp_path: Path) -> None:
    url = _store(tmp_path / "gpu.db", _gpu_only())
    result = CliRunner().invoke(app, ["--database-url", url])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "GPU view" in out and "idle GPU-hours" in out
    assert "[bold red]pod[/]" in out  # the pod name, printed as itself
    assert "vllm:generation_tokens_total" in out and "DCGM_FI_PROF_DRAM_ACTIVE" in out


def test_one_gpu_sample_is_a_gpu_view_over_the_real_range(tmp_path: Path) -> None:
    """The store that used to read 'no serving worker between ...18.017474 and ...18.017475'."""
    ts = datetime(2026, 12, 5, 10, 30, 18, 17474, tzinfo=UTC)
    url = _store(tmp_path / "one.db", [_gpu(ts, BLIND, 0, H100, gpu_util=0.0, state="degraded")])
    result = CliRunner().invoke(app, ["--database-url", url, "--json"])
    assert result.exit_code == 0, result.output
    view = json.loads(result.stdout)["gpu_view"]
    assert view["from"] == "2026-12-05T10:00:00Z" and view["to"] == "2026-12-05T10:30:18.017475Z"
    (gpu,) = view["gpus"]
    assert gpu["sm_active"] is None and gpu["idle"] is True  # GPU_UTIL read 0: idle; profiling: unknown


def _engine(ts: datetime, worker: str, gpu_uuids: list[str] | None = None) -> EngineSample:
    return EngineSample(ts=ts, window_s=900, worker_id=worker, node="node-a", engine="vllm", role=Role.DECODE,
                        model="m", prompt_tokens=9000, generation_tokens=90000, requests_running=10,
                        requests_waiting=0, kv_cache_usage=0.5, gpu_uuids=gpu_uuids or [])  # fmt: skip


def test_store_mode_joins_an_engine_known_by_its_pod_and_reports_a_failed_join(tmp_path: Path) -> None:
    records: list[GpuSample | EngineSample] = []
    for i in range(8):
        ts = T0 + timedelta(minutes=15 * (i + 1))
        # dcgm-exporter named the pod with its namespace; the engine is known by the pod name alone.
        records.append(_gpu(ts, BUSY, 0, H100, worker_id="llm/decode-0", sm_active=0.6, tensor_active=0.2,
                            dram_active=0.7, gpu_util=1.0))  # fmt: skip
        records.append(_engine(ts, "decode-0"))
        records.append(_engine(ts, "10.0.0.5:8000"))  # known by its URL only: no join possible
    url = _store(tmp_path / "join.db", records)
    result = CliRunner().invoke(app, ["--database-url", url, "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    warnings = payload["warnings"]
    assert any("joined to their GPUs by pod name" in w and "decode-0 <- llm/decode-0" in w for w in warnings)
    failed = [w for w in warnings if "could not be joined" in w]
    assert len(failed) == 1 and "'10.0.0.5:8000'" in failed[0] and "tried" in failed[0]
    assert "the join failed" in failed[0]
    workers = {w["worker_id"]: w for w in payload["summary"]["workers"]}
    assert (workers["decode-0"]["sku"], workers["decode-0"]["bottleneck"]) == ("H100-SXM", "memory-bandwidth")
    assert workers["10.0.0.5:8000"]["unjudged_reason"] == "no GPUs attributed to the worker"
    silent = [
        f for f in payload["findings"] if f["worker_id"] == "decode-0" and f["kind"] == "telemetry-degraded"
    ]
    assert silent == []  # joined: its GPU telemetry is there


def test_no_gpu_and_no_engine_sample_in_the_range_names_the_range(tmp_path: Path) -> None:
    url = _store(tmp_path / "old.db", _gpu_only(windows=1))
    result = CliRunner().invoke(
        app, ["--database-url", url, "--from", "2025-01-01T00:00:00Z", "--to", "2025-01-01T05:00:00Z"]
    )
    assert result.exit_code == 1
    assert "no serving worker and no GPU sample" in result.output
    assert "2025-01-01T00:00:00Z to 2025-01-01T05:00:00Z" in result.output


def test_a_worker_on_gpus_without_profiling_gets_the_fields_to_enable(tmp_path: Path) -> None:
    records: list[GpuSample | EngineSample] = []
    for i in range(8):
        ts = T0 + timedelta(minutes=15 * (i + 1))
        records.append(_gpu(ts, BLIND, 0, H100, worker_id="llm/decode-0", gpu_util=0.9, state="degraded"))
        records.append(_engine(ts, "llm/decode-0", [BLIND]))
    url = _store(tmp_path / "blind.db", records)
    result = CliRunner().invoke(app, ["--database-url", url, "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    (warning,) = [w for w in payload["warnings"] if "report no DCGM profiling field" in w]
    assert warning.startswith("1 of 1 GPU(s)")
    for needed in (*PROFILING_FIELDS, "counters CSV", "dcgm-exporter -f", "DCGM_EXPORTER_COLLECTORS"):
        assert needed in warning, needed
    assert payload["summary"]["warnings"] == payload["warnings"]


def test_a_failed_join_is_printed_in_the_human_output(tmp_path: Path) -> None:
    records: list[GpuSample | EngineSample] = []
    for i in range(4):
        ts = T0 + timedelta(minutes=15 * (i + 1))
        records.append(_gpu(ts, BUSY, 0, H100, worker_id="llm/[b]x", sm_active=0.5, tensor_active=0.2,
                            dram_active=0.6, gpu_util=1.0))  # fmt: skip
        records.append(_engine(ts, "10.0.0.5:8000"))
    url = _store(tmp_path / "failed.db", records)
    result = CliRunner().invoke(app, ["--database-url", url])
    assert result.exit_code == 0, result.output
    flat = " ".join(result.output.split())
    assert "engine '10.0.0.5:8000' (vllm, node 'node-a') could not be joined to a GPU" in flat
    assert "llm/[b]x" in flat  # the pod on dcgm-exporter's series, as its literal name


def test_the_cli_the_service_and_the_dashboard_show_one_view(tmp_path: Path) -> None:
    """One builder (analyzer.sources.store_gpu_view): `phasefit analyze --json`, GET /v1/gpu-view's reader and
    the dashboard's store read give the same view of the same range, thresholds and warnings included."""
    from dashboard.gpu_only import read_gpu_view as dashboard_view
    from phasefit.service.routers.gpu_view import gpu_view_of

    url = _store(tmp_path / "s.db", _gpu_only())
    since, until = T0, T0 + timedelta(hours=3)
    runner = CliRunner()
    result = runner.invoke(app, ["--database-url", url, "--json", "--from", since.isoformat(),
                                 "--to", until.isoformat()])  # fmt: skip
    assert result.exit_code == 0, result.output
    cli = json.loads(result.stdout)["gpu_view"]
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            served = gpu_view_of(connection, since, until)
        shown = dashboard_view(engine, since, until)
    finally:
        engine.dispose()
    assert not isinstance(served, str) and shown is not None
    assert served.model_dump(mode="json", by_alias=True) == cli
    assert shown.to_json_dict() == cli
