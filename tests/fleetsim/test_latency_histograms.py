"""The engines' latency histograms: the same lognormal as the reported quantiles, counted in the
observations the engine makes, in the records (contract form) and the examiner's columns (stored form)."""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from fleet import histograms
from fleet.catalog import Catalog
from fleet.contract import EngineSample, parse_record
from fleetsim import latency_histograms
from fleetsim.examine import records_to_columns, simulate
from fleetsim.fleet_sim import Chunk, FleetSimulation
from fleetsim.latency_histograms import HistogramColumns
from fleetsim.pool import PREFILL
from fleetsim.records import HISTOGRAMS, RecordBuilder, to_records
from fleetsim.scenario import load_scenario

METRICS = {"ttft_histogram": "ttft_p90_s", "tpot_histogram": "tpot_p90_s", "e2e_histogram": "e2e_p90_s"}
ROUNDED = {"ttft_p90_s": 1e-4, "tpot_p90_s": 1e-5, "e2e_p90_s": 1e-3}  # the records' rounding of each


def _first_chunk(name: str, catalog: Catalog, *, seed: int = 3, window_s: float = 300.0) -> Chunk:
    sim = FleetSimulation(load_scenario(name), catalog, seed, window_s=window_s)
    return next(sim.chunks(sim.windows_in(1.0)))


def _decoded(stored: bytes | None) -> npt.NDArray[np.float64]:
    buckets = histograms.decode(stored)
    assert buckets is not None
    return buckets


def _p90(stored: bytes | None) -> float | None:
    return histograms.quantile(0.9, histograms.decode(stored))


def _bucket(value: float, rounded: float) -> tuple[float, float]:
    """The grid bucket holding a p90 recorded as ``value`` (to ``rounded`` seconds): histogram_quantile's
    answer lies in it (or, at a bound, in the bucket on either side)."""
    bounds = histograms.BOUNDS_S
    low = int(np.searchsorted(bounds, value - rounded / 2, side="left"))
    high = int(np.searchsorted(bounds, value + rounded / 2, side="left"))
    return (0.0 if low == 0 else bounds[low - 1]) * (1 - 1e-9), bounds[min(high, len(bounds) - 1)] * (
        1 + 1e-9
    )


def _floats(values: list[Any]) -> npt.NDArray[np.float64]:
    return np.asarray([math.nan if v is None else v for v in values], dtype=float)


@pytest.mark.parametrize("name", ["demo", "mixed", "ttft-target"])  # disaggregated, colocated, targets
def test_a_histograms_p90_is_the_reported_p90(name: str, catalog: Catalog) -> None:
    """Within the grid's interpolation error: always inside the grid bucket that holds the reported p90
    (histogram_quantile interpolates linearly inside it), and within 10% where the window's latencies
    spread over a few buckets. Where they nearly all fall in one bucket (a TPOT: p99 ~ 1.05 p50; a
    colocated TTFT: a whole number of prefill chunks) the p90 lands where linear interpolation puts it."""
    run = simulate(name, catalog, days=0.25, window_s=120.0, seed=1, truth=False)
    columns = run.engine_columns
    for histogram, quantile in METRICS.items():
        reported = _floats(columns[quantile])
        stored = columns[histogram]
        assert len(stored) == reported.size
        from_buckets = np.asarray([_p90(s) or math.nan for s in stored], dtype=float)
        known = np.isfinite(reported)
        assert known.sum() > 100, histogram
        assert np.array_equal(known, np.isfinite(from_buckets)), histogram  # where, and only where, reported
        for value, got in zip(reported[known], from_buckets[known], strict=True):
            low, high = _bucket(value, ROUNDED[quantile])
            assert low <= got <= high, (histogram, value, got)
        family = "tpot" if histogram == "tpot_histogram" else "ttft"  # end to end: the TTFT's sigma
        with np.errstate(invalid="ignore", divide="ignore"):
            sigma = (
                np.log(_floats(columns[f"{family}_p99_s"]) / _floats(columns[f"{family}_p50_s"])) / 2.3263479
            )
        wide = known & (sigma >= 0.2)
        if wide.sum() > 100:
            error = np.abs(from_buckets[wide] / reported[wide] - 1.0)
            assert np.median(error) < 0.05, histogram
            assert np.mean(error <= 0.1) > 0.99, histogram


def test_a_wide_histogram_keeps_its_p50_p90_and_p99() -> None:
    p50, p99 = np.array([0.4, 2.0]), np.array([2.5, 9.0])
    p90 = p50 * (p99 / p50) ** (latency_histograms.Z90 / latency_histograms.Z99)
    sigma = latency_histograms.sigma_of(p50, p99)
    cols = latency_histograms.histogram_columns(p90, sigma, np.array([500.0, 40.0]), np.array([True, True]))
    for i, stored in enumerate(latency_histograms.encoded(cols)):
        buckets = histograms.decode(stored)
        assert buckets is not None
        assert buckets.sum() == pytest.approx([500.0, 40.0][i])
        for q, want in ((0.5, p50[i]), (0.9, p90[i]), (0.99, p99[i])):
            assert histograms.quantile(q, buckets) == pytest.approx(want, rel=0.1)


def test_counts_are_the_observations(catalog: Catalog) -> None:
    """TTFT and end to end count the requests served, TPOT the output tokens generated."""
    for name in ("demo", "mixed"):
        sim = FleetSimulation(load_scenario(name), catalog, 2, window_s=300.0)
        chunk = next(sim.chunks(sim.windows_in(0.5)))
        e = chunk.engine
        for p, model in enumerate(sim.models):
            pc = sim.pool_chunk(p, chunk.index, chunk.first_window, len(chunk.window_end_epoch))
            mix = pc.traffic.mix
            idx = list(model.pool.workers)
            assert sim.schedule.pool_roles(p, sim.window_start(0, 1)) is None  # the layout's roles
            prefill = np.broadcast_to(model.roles == PREFILL, e.generation_tokens[:, idx].shape)
            generation = e.generation_tokens[:, idx].astype(float)
            requests = np.where(prefill, generation, generation / mix.mean_output[:, None])
            ttft, e2e = e.ttft_histogram.count[:, idx], e.e2e_histogram.count[:, idx]
            tpot = e.tpot_histogram.count[:, idx]
            np.testing.assert_allclose(ttft, requests, rtol=1e-9)
            np.testing.assert_allclose(e2e, requests, rtol=1e-9)
            np.testing.assert_allclose(tpot[~prefill], generation[~prefill])
            assert np.all(np.isnan(tpot[prefill]))  # a prefill engine reports no TPOT
            # A decode worker's requests are also the prompts whose KV it received.
            decode = ~prefill & (generation > 1000)
            if not model.colocated and decode.any():
                received = e.prompt_tokens[:, idx] / mix.mean_prompt[:, None]
                np.testing.assert_allclose(ttft[decode], received[decode], rtol=1e-2)
    # ... and the stored histograms hold them.
    rows, items = np.nonzero(e.present)
    for name in HISTOGRAMS:
        cells = getattr(e, name).take(rows, items)
        for stored, count in zip(latency_histograms.encoded(cells), cells.count.tolist(), strict=True):
            if stored is None:
                assert math.isnan(count)
            else:
                assert _decoded(stored).sum() == pytest.approx(count, rel=1e-6, abs=1e-6)


def test_merged_workers_p90_lies_between_theirs(catalog: Catalog) -> None:
    chunk = _first_chunk("demo", catalog)
    e = chunk.engine
    seen = 0
    for name in HISTOGRAMS:
        column = getattr(e, name)
        workers = np.flatnonzero(np.all(column.count > 0, axis=0))
        for a, b in itertools.pairwise(workers):
            rows = np.arange(column.count.shape[0])
            one = latency_histograms.buckets(column.take(rows, np.full(rows.size, a)))
            two = latency_histograms.buckets(column.take(rows, np.full(rows.size, b)))
            for x, y in zip(one, two, strict=True):
                qa, qb = histograms.quantile(0.9, x), histograms.quantile(0.9, y)
                merged = histograms.quantile(0.9, histograms.merged([x, y]))
                assert qa is not None and qb is not None and merged is not None
                assert min(qa, qb) * (1 - 1e-9) <= merged <= max(qa, qb) * (1 + 1e-9)
                seen += 1
    assert seen > 1000


def test_idle_workers_report_empty_histograms(catalog: Catalog) -> None:
    """An engine that served nothing exports its families empty; a prefill engine has no TPOT family."""
    chunk = _first_chunk("healthy-not-serving", catalog, seed=0)
    builder = RecordBuilder(FleetSimulation(load_scenario("healthy-not-serving"), catalog, 0, window_s=300.0))
    records = [r for r in to_records(builder.chunk_dicts(chunk)) if isinstance(r, EngineSample)]
    idle = [r for r in records if r.ttft_p90_s is None]
    assert idle and len(idle) < len(records)
    for r in idle:
        assert r.ttft_histogram is not None and r.ttft_histogram.count == 0.0 and r.ttft_histogram.le == []
        assert r.e2e_histogram is not None and r.e2e_histogram.count == 0.0
    for r in records:
        assert (r.tpot_histogram is None) == (r.role.value == "prefill")
        if r.ttft_p90_s is not None:
            assert r.ttft_histogram is not None and r.ttft_histogram.count > 0
    assert chunk.engine.present.any()


def test_records_with_histograms_validate_and_both_paths_agree(catalog: Catalog) -> None:
    for name in ("demo", "mixed"):
        sim = FleetSimulation(load_scenario(name), catalog, 4, window_s=300.0)
        builder = RecordBuilder(sim)
        chunk = next(sim.chunks(sim.windows_in(0.25)))
        parsed = [parse_record(line) for line in builder.chunk_jsonl(chunk).splitlines()]
        assert parsed == to_records(builder.chunk_dicts(chunk))
        engines = [r for r in parsed if isinstance(r, EngineSample)]
        assert all(r.ttft_histogram is not None and r.e2e_histogram is not None for r in engines)
        assert any(r.tpot_histogram is not None for r in engines)
        for r in engines:
            for histogram, quantile in METRICS.items():
                held = getattr(r, histogram)
                if held is None or held.count == 0:
                    continue
                p90 = histograms.quantile(0.9, histograms.rebin(held.le, held.counts, held.count))
                assert p90 is not None
                low, high = _bucket(getattr(r, quantile), ROUNDED[quantile])
                assert low <= p90 <= high, (histogram, getattr(r, quantile), p90)


def test_the_columns_hold_the_stored_form_of_the_records_histograms(catalog: Catalog) -> None:
    sim = FleetSimulation(load_scenario("demo"), catalog, 5, window_s=300.0)
    builder = RecordBuilder(sim)
    chunk = next(sim.chunks(sim.windows_in(0.1)))
    _, from_contract = records_to_columns(builder.chunk_dicts(chunk))
    _, encoded = records_to_columns(builder.chunk_dicts(chunk, histograms="encoded"))
    for name in HISTOGRAMS:
        assert len(from_contract[name]) == len(encoded[name]) > 0
        for a, b in zip(from_contract[name], encoded[name], strict=True):
            assert (a is None) == (b is None)
            if a is not None:
                total = max(float(_decoded(b).sum()), 1.0)
                np.testing.assert_allclose(_decoded(a), _decoded(b), atol=2e-3 * total)


def test_the_stored_form_decodes_to_the_buckets() -> None:
    rng = np.random.default_rng(7)
    n = 2000
    cols = HistogramColumns(
        median=np.exp(rng.uniform(-6.0, 6.0, n)),
        sigma=rng.choice([1e-3, 0.02, 0.3, 0.8, 2.0], n),
        count=np.where(
            rng.random(n) < 0.1, np.nan, np.where(rng.random(n) < 0.1, 0.0, rng.uniform(0.5, 1e5, n))
        ),
    )
    per_bucket = latency_histograms.buckets(cols)
    dicts: list[Any] = latency_histograms.contract_dicts(cols)
    for i, stored in enumerate(latency_histograms.encoded(cols)):
        if np.isnan(cols.count[i]):
            assert stored is None and dicts[i] is None
            continue
        assert stored is not None
        total = max(float(cols.count[i]), 1.0)
        decoded = _decoded(stored)
        np.testing.assert_allclose(decoded, per_bucket[i], atol=1e-6 * total)
        by_fleet = _decoded(histograms.encode(per_bucket[i]))
        np.testing.assert_allclose(decoded, by_fleet, atol=1e-4 * total)  # encode() drops near-flat knots
        contract = histograms.rebin(dicts[i]["le"], dicts[i]["counts"], dicts[i]["count"])
        np.testing.assert_allclose(contract, per_bucket[i], atol=2e-3 + 1e-6 * total)
