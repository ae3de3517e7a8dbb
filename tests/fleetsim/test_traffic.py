"""The fitted length distributions against the Azure trace, and the per-window arrival draws."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from fleetsim.traffic import (
    TrafficShape,
    burst_multiplier,
    diurnal_rate,
    draw_arrivals,
    mix_stats,
    moments,
    sample_lengths,
)


def _trace(data_dir: Path, service: str) -> dict[str, np.ndarray]:
    path = data_dir / "azure-llm-trace-2023" / f"AzureLLMInferenceTrace_{service}.csv"
    with path.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    return {
        "prompt": np.array([int(r["ContextTokens"]) for r in rows]),
        "output": np.array([int(r["GeneratedTokens"]) for r in rows]),
    }


@pytest.mark.parametrize("service", ["code", "conv"])
@pytest.mark.parametrize("kind", ["prompt", "output"])
def test_fitted_lengths_match_the_azure_trace(data_dir: Path, service: str, kind: str) -> None:
    real = _trace(data_dir, service)[kind]
    drawn = sample_lengths(service, kind, 40_000, np.random.default_rng(7))  # type: ignore[arg-type, unused-ignore]
    statistic = stats.ks_2samp(real, drawn).statistic
    print(f"{service} {kind}: KS {statistic:.4f}, medians {np.median(real):.0f} / {np.median(drawn):.0f}")
    assert statistic < 0.05
    m = moments(service, kind)  # type: ignore[arg-type, unused-ignore]
    assert m.mean == pytest.approx(real.mean(), rel=0.03)


def test_issue_medians() -> None:
    # The issue's description of the trace: code median prompt ~1,500 / output 13; conv ~1,000 / 129.
    assert moments("code", "prompt").p50 == pytest.approx(1469, rel=0.02)
    assert moments("code", "output").p50 == pytest.approx(13, abs=1)
    assert moments("conv", "prompt").p50 == pytest.approx(1020, rel=0.02)
    assert moments("conv", "output").p50 == pytest.approx(129, abs=2)


def test_mix_stats_move_with_the_code_share() -> None:
    mix = mix_stats(np.array([0.0, 0.5, 1.0]))
    assert np.all(np.diff(mix.mean_prompt) > 0)  # code prompts are longer
    assert np.all(np.diff(mix.mean_output) < 0)  # and outputs far shorter
    assert np.all(mix.prompt_p99 >= mix.prompt_p50)
    # Within one service a decode batch holds requests weighted by output length: on average their
    # prompt plus more than half their output. In a mix, short-output code requests weigh little.
    pure = mix_stats(np.array([0.0, 1.0]))
    assert np.all(pure.decode_context > pure.mean_prompt + pure.mean_output / 2)
    assert mix.decode_context[1] < mix.mean_prompt[1]


def test_arrivals_have_the_right_means() -> None:
    rng = np.random.default_rng(3)
    rate = np.full(4000, 20.0)
    share = np.full(4000, 0.3)
    arr = draw_arrivals(rate, share, 30.0, rng)
    mix = mix_stats(share[:1])
    assert arr.requests.mean() == pytest.approx(600.0, rel=0.01)
    assert (arr.prompt_tokens.sum() / arr.requests.sum()) == pytest.approx(mix.mean_prompt[0], rel=0.01)
    assert (arr.output_tokens.sum() / arr.requests.sum()) == pytest.approx(mix.mean_output[0], rel=0.02)
    assert np.all(arr.prompt_tokens >= 0)


def test_diurnal_cycle_weekends_and_bursts() -> None:
    shape = TrafficShape(rate_rps=10.0, diurnal_amplitude=0.4, peak_hour_utc=16.0, weekend_factor=0.5)
    monday = 1717372800.0  # 2024-06-03T00:00:00Z
    hours = np.arange(0, 24 * 7, 1.0) * 3600.0
    rate = diurnal_rate(shape, monday + hours)
    assert rate[16] == pytest.approx(14.0)
    assert rate[4] == pytest.approx(6.0)
    assert rate[5 * 24 + 16] == pytest.approx(7.0)  # Saturday
    day_rng = np.random.default_rng
    t = np.arange(0, 86_400 * 3, 60.0)
    factor = burst_multiplier(TrafficShape(rate_rps=1.0, bursts_per_day=4.0), t, 60.0, day_rng)
    assert factor.min() == 1.0 and factor.max() > 1.5
    # A window's multiplier does not depend on the other windows computed with it.
    assert np.array_equal(
        factor[1000:1200],
        burst_multiplier(TrafficShape(rate_rps=1.0, bursts_per_day=4.0), t[1000:1200], 60.0, day_rng),
    )
