"""Shared helpers for the collector tests: the shared fixtures folder and small builders."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from collector.fake_nvml import FakeNvml
from fleet.clock import FakeClock

METRICS = Path(__file__).resolve().parents[1] / "fixtures" / "metrics"
DCGM_FIXTURE = METRICS / "dcgm-exporter_h100_standalone_digitalocean_docs_excerpt.prom"
VLLM_FIXTURE = METRICS / "vllm_v1_via_dynamo_worker_qwen3-0.6b.prom"
SGLANG_FIXTURE = METRICS / "sglang_via_dynamo_worker_qwen3-0.6b.prom"


def fixture_text(path: Path) -> str:
    if not path.exists():
        pytest.fail(f"fixture missing: {path} (the tests read tests/fixtures/metrics)")
    return path.read_text(encoding="utf-8")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def release_hangs() -> Iterator[list[FakeNvml]]:
    """Register fakes whose hanging calls must be released when the test ends (no leaked threads)."""
    fakes: list[FakeNvml] = []
    yield fakes
    for fake in fakes:
        fake.release_hangs()
