"""The streaming source: the same records as a file run, window by window, and as a collector GpuSource."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from collector.settings import CollectorSettings
from fleet.catalog import Catalog
from fleet.clock import FakeClock
from fleet.contract import EngineSample, GpuSample
from fleetsim.fleet_sim import FleetSimulation
from fleetsim.records import RecordBuilder, to_records
from fleetsim.scenario import load_scenario
from fleetsim.source import SimSource

START = datetime(2024, 6, 3, tzinfo=UTC)


def test_stream_equals_the_batch_run(catalog: Catalog) -> None:
    scenario = load_scenario("balanced")
    source = SimSource(scenario, catalog, seed=5, start=START, window_s=60, days=0.05)
    streamed = []
    while not source.exhausted:
        end = source.window_end
        window = source.next_window()
        assert {r.ts for r in window} == {end}
        streamed += window
    assert source.next_window() == []
    sim = FleetSimulation(scenario, catalog, 5, window_s=60, start=START)
    builder = RecordBuilder(sim)
    batch = [r for chunk in sim.chunks(sim.windows_in(0.05)) for r in to_records(builder.chunk_dicts(chunk))]
    assert streamed == batch


def test_node_filter(catalog: Catalog) -> None:
    source = SimSource(load_scenario("balanced"), catalog, start=START, node="node02")
    window = source.next_window()
    assert window and {r.node for r in window} == {"node02"}
    with pytest.raises(ValueError, match="not in scenario"):
        SimSource(load_scenario("balanced"), catalog, node="node99")


def test_collector_source(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PHASEFIT_SIM_SCENARIO", "mixed")
    monkeypatch.setenv("PHASEFIT_SIM_SEED", "3")
    clock = FakeClock(datetime(2026, 3, 2, 12, 0, 7, tzinfo=UTC))
    source = SimSource.for_collector(CollectorSettings(node="n1", interval_s=10.0), clock)
    source.start()
    window = source.collect()
    source.close()
    assert source.name == "sim" and source.window_s == 10.0
    assert len(window.gpu_samples) == 32 and all(isinstance(s, GpuSample) for s in window.gpu_samples)
    assert len(window.engine_samples) == 16 and all(
        isinstance(s, EngineSample) for s in window.engine_samples
    )
    assert window.gpu_samples[0].ts == datetime(
        2026, 3, 2, 12, 0, 10, tzinfo=UTC
    )  # start rounded down to a window
    assert {s.role.value for s in window.engine_samples} == {"mixed"}


def test_whole_run_batches_agree(catalog: Catalog) -> None:
    from fleet.contract import parse_record
    from fleetsim.source import dict_batches, jsonl_batches

    scenario = load_scenario("mixed")
    lines = b"".join(jsonl_batches(scenario, catalog, seed=2, days=0.1, window_s=60)).splitlines()
    dicts = [d for batch in dict_batches(scenario, catalog, seed=2, days=0.1, window_s=60) for d in batch]
    assert len(lines) == len(dicts) == 144 * 48
    assert [parse_record(line) for line in lines[:300]] == to_records(dicts[:300])
