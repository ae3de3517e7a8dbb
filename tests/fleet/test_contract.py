"""The data contract is strict on our own records: every bad input is an error naming the field."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import ValidationError

from fleet.contract import (
    EngineSample,
    Finding,
    FindingKind,
    GpuSample,
    GpuState,
    Role,
    TelemetrySource,
    dump_record,
    parse_record,
)


def gpu_line(**overrides: Any) -> str:
    record: dict[str, Any] = {
        "kind": "gpu_sample",
        "ts": "2026-11-23T10:00:30Z",
        "window_s": 30,
        "node": "node01",
        "gpu_uuid": "GPU-8f2a",
        "gpu_index": 0,
        "gpu_name": "NVIDIA H200",
        "worker_id": "node01/decode-0",
        "sm_active": 0.4,
        "tensor_active": 0.1,
        "dram_active": 0.7,
        "source": "dcgm",
    }
    record.update(overrides)
    return json.dumps({k: v for k, v in record.items() if v is not ...})


def engine_line(**overrides: Any) -> str:
    record: dict[str, Any] = {
        "kind": "engine_sample",
        "ts": "2026-11-23T10:00:30+00:00",
        "window_s": 30,
        "worker_id": "node01/decode-0",
        "node": "node01",
        "engine": "vllm",
        "role": "decode",
        "role_source": "pod-label",
        "model": "meta-llama/Llama-3.1-70B-Instruct",
        "tp": 2,
        "gpu_uuids": ["GPU-8f2a", "GPU-8f2b"],
        "prompt_tokens": 0,
        "generation_tokens": 51234,
        "kv_cache_usage": 0.62,
    }
    record.update(overrides)
    return json.dumps(record)


def field_of(error: ValidationError) -> str:
    return ".".join(str(p) for p in error.errors()[0]["loc"])


def test_gpu_sample_round_trips() -> None:
    record = parse_record(gpu_line())
    assert isinstance(record, GpuSample)
    assert record.state is GpuState.OK
    assert record.source is TelemetrySource.DCGM
    assert record.gpu_util is None  # not provided stays None, never 0
    assert parse_record(dump_record(record)) == record


def test_engine_sample_round_trips() -> None:
    record = parse_record(engine_line())
    assert isinstance(record, EngineSample)
    assert record.role is Role.DECODE
    assert record.gpu_uuids == ["GPU-8f2a", "GPU-8f2b"]
    assert parse_record(dump_record(record)) == record


def test_timestamps_are_normalised_to_utc() -> None:
    record = parse_record(gpu_line(ts="2026-11-23T12:00:30+02:00"))
    assert record.ts == datetime(2026, 11, 23, 10, 0, 30, tzinfo=UTC)
    assert record.ts.utcoffset() is not None


@pytest.mark.parametrize(
    ("line", "field"),
    [
        (gpu_line(ts="2026-11-23T10:00:30"), "gpu_sample.ts"),  # no time zone
        (gpu_line(dram_active=1.2), "gpu_sample.dram_active"),
        (gpu_line(sm_active=-0.1), "gpu_sample.sm_active"),
        (gpu_line(gpu_index=-1), "gpu_sample.gpu_index"),
        (gpu_line(window_s=0), "gpu_sample.window_s"),
        (gpu_line(colour="red"), "gpu_sample.colour"),  # unknown extra field
        (gpu_line(source="guess"), "gpu_sample.source"),
        (gpu_line(state="melted"), "gpu_sample.state"),
        (gpu_line(node=""), "gpu_sample.node"),
        (gpu_line(node="x" * 300), "gpu_sample.node"),
        (engine_line(generation_tokens=-5), "engine_sample.generation_tokens"),
        (engine_line(kv_cache_usage=1.5), "engine_sample.kv_cache_usage"),
        (engine_line(role="janitor"), "engine_sample.role"),
        (engine_line(tp=0), "engine_sample.tp"),
    ],
)
def test_bad_records_name_the_field(line: str, field: str) -> None:
    with pytest.raises(ValidationError) as info:
        parse_record(line)
    assert field_of(info.value) == field


def test_missing_required_field_is_named() -> None:
    bad = json.loads(gpu_line())
    del bad["gpu_uuid"]
    with pytest.raises(ValidationError) as info:
        parse_record(json.dumps(bad))
    assert field_of(info.value) == "gpu_sample.gpu_uuid"


def test_unknown_kind_is_rejected() -> None:
    with pytest.raises(ValidationError):
        parse_record(gpu_line(kind="cpu_sample"))


def test_nan_ratio_is_rejected() -> None:
    with pytest.raises(ValidationError):
        parse_record(gpu_line().replace('"dram_active": 0.7', '"dram_active": NaN'))


def test_finding_defaults() -> None:
    now = datetime(2026, 11, 23, tzinfo=UTC)
    finding = Finding(kind=FindingKind.DECODE_ON_LOW_BANDWIDTH, worker_id="w", first_seen=now, last_seen=now)
    # no loss estimated: unknown (null), never 0
    assert finding.lost_tokens_per_s is None
    assert finding.lost_tokens_per_s_low is None and finding.lost_tokens_per_s_high is None
    assert finding.status == "open"
    estimated = finding.model_copy(update={"lost_tokens_per_s": 0.0})  # a loss estimated as 0 stays 0
    assert Finding.model_validate_json(estimated.model_dump_json()).lost_tokens_per_s == 0.0
