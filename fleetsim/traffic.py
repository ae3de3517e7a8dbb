"""Request traffic: prompt/output length distributions fitted to Azure's trace, and arrivals per window.

Length distributions
--------------------
Fitted to the Azure LLM inference trace 2023 (Azure/AzurePublicDataset,
``data/AzureLLMInferenceTrace_code.csv`` and ``..._conv.csv``, one hour each, November 2023, CC-BY 4.0;
the trace of "Splitwise: Efficient generative LLM inference using phase splitting", Patel et al., ISCA
2024). Each service's prompt and output lengths are an empirical quantile function: the trace's
quantiles at ``_PROBS`` (below), interpolated linearly in log(tokens) and rounded to whole tokens. A
parametric fit does not do: the lengths are multi-modal (conversation prompts cluster near 200, 400, 1,050
and 4,080 tokens; code prompts are capped at 7,437) and a log-normal misses by a Kolmogorov-Smirnov
distance of 0.11-0.18, the quantile fit by under 0.02. Prompt and output length are drawn independently:
their log-correlation in the trace is -0.005 (code) and 0.087 (conv).

Arrivals
--------
The simulator never draws single requests (a week of a busy pool is tens of millions): per window it
draws the Poisson number of arrivals of each service and the sums of their lengths from the
distributions' moments (a normal approximation, exact in mean and variance, clipped at the minimum
length). Rates follow a diurnal cosine, a weekend factor and random bursts.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Literal

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
Service = Literal["code", "conv"]
SERVICES: tuple[Service, ...] = ("code", "conv")

# Cumulative probabilities of the quantile knots.
_PROBS: tuple[float, ...] = (
    0.0, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.125, 0.15, 0.175, 0.2, 0.225, 0.25, 0.275, 0.3, 0.325,
    0.35, 0.375, 0.4, 0.425, 0.45, 0.475, 0.5, 0.525, 0.55, 0.575, 0.6, 0.625, 0.65, 0.675, 0.7, 0.725,
    0.75, 0.775, 0.8, 0.825, 0.85, 0.875, 0.9, 0.925, 0.95, 0.975, 0.99, 0.995, 0.999, 1.0,
)  # fmt: skip

# Trace quantiles (tokens) at _PROBS, computed with numpy.quantile (linear) from the Azure trace CSVs.
# code: 8,819 requests, median prompt 1,469 and output 13. conv: 19,366 requests, median 1,020 and 129.
_QUANTILES: dict[Service, dict[str, tuple[int, ...]]] = {
    "code": {
        "prompt": (
            3, 12, 17, 44, 75, 102, 147, 185, 232, 299, 386, 484, 578, 679, 770, 863, 939, 1016, 1075,
            1153, 1261, 1370, 1469, 1585, 1690, 1798, 1909, 2048, 2164, 2305, 2433, 2578, 2744, 2942,
            3192, 3538, 3920, 4434, 5188, 6097, 7303, 7435, 7436, 7436, 7437, 7437,
        ),
        "output": (
            6, 6, 6, 6, 6, 6, 7, 7, 7, 8, 8, 9, 9, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 16,
            16, 18, 19, 20, 22, 24, 26, 29, 33, 39, 46, 55, 69, 90, 145, 251, 359, 825, 1899,
        ),
    },
    "conv": {
        "prompt": (
            2, 17, 29, 120, 181, 200, 207, 235, 372, 379, 387, 393, 396, 400, 403, 407, 414, 428, 703,
            922, 984, 1005, 1020, 1034, 1045, 1058, 1071, 1083, 1097, 1112, 1130, 1153, 1189, 1277, 1315,
            1434, 1876, 2309, 2734, 4075, 4083, 4092, 4142, 4831, 6179, 14050,
        ),
        "output": (
            7, 14, 16, 28, 41, 48, 54, 60, 67, 72, 77, 82, 85, 88, 91, 93, 96, 99, 103, 108, 113, 120,
            129, 139, 151, 162, 177, 195, 217, 373, 384, 391, 395, 396, 400, 406, 411, 416, 424, 430,
            451, 522, 601, 643, 954, 1000,
        ),
    },
}  # fmt: skip

Kind = Literal["prompt", "output"]
_MOMENT_GRID = 200_001


def sample_lengths(service: Service, kind: Kind, n: int, rng: np.random.Generator) -> npt.NDArray[np.int64]:
    """``n`` request lengths (tokens) from the fitted distribution."""
    probs = np.asarray(_PROBS)
    log_q = np.log(np.asarray(_QUANTILES[service][kind], dtype=np.float64))
    u = rng.random(n)
    return np.rint(np.exp(np.interp(u, probs, log_q))).astype(np.int64)


@dataclass(frozen=True)
class LengthMoments:
    """Moments of one length distribution (tokens): mean, E[x^2], min, and quantiles used for latency."""

    mean: float
    mean_sq: float
    minimum: float
    p50: float
    p99: float

    @property
    def variance(self) -> float:
        return self.mean_sq - self.mean**2


@cache
def moments(service: Service, kind: Kind) -> LengthMoments:
    """Exact moments of the fitted (rounded) distribution, by integrating its quantile function."""
    probs = np.asarray(_PROBS)
    log_q = np.log(np.asarray(_QUANTILES[service][kind], dtype=np.float64))
    u = (np.arange(_MOMENT_GRID) + 0.5) / _MOMENT_GRID
    x = np.rint(np.exp(np.interp(u, probs, log_q)))
    q = _QUANTILES[service][kind]
    return LengthMoments(
        mean=float(x.mean()),
        mean_sq=float((x * x).mean()),
        minimum=float(q[0]),
        p50=float(np.exp(np.interp(0.5, probs, log_q))),
        p99=float(np.exp(np.interp(0.99, probs, log_q))),
    )


@dataclass(frozen=True)
class MixStats:
    """Per-window statistics of a traffic mix (arrays over windows), the inputs the physics needs.

    ``decode_context`` is the mean context length of the sequences a decode worker holds: a request
    stays in the batch for its output length, so requests weigh by output length and hold on average
    prompt + output / 2 tokens: E[o (p + o/2)] / E[o] = E[p] + E[o^2] / (2 E[o]) (p, o independent).
    ``prefill_keys`` is the mean number of keys a prompt token attends to under the causal mask,
    token-weighted: (E[p^2] / E[p] + 1) / 2.
    """

    mean_prompt: FloatArray
    mean_output: FloatArray
    decode_context: FloatArray
    prefill_keys: FloatArray
    prompt_p50: FloatArray
    prompt_p99: FloatArray
    output_p50: FloatArray
    output_p99: FloatArray
    output_p90: FloatArray


def mix_stats(code_share: FloatArray, prompt_scale: float = 1.0, output_scale: float = 1.0) -> MixStats:
    """Statistics of a code/conv mix whose request share of code is ``code_share`` (per window), every
    prompt length multiplied by ``prompt_scale`` and every output length by ``output_scale``."""
    s = np.clip(np.asarray(code_share, dtype=np.float64), 0.0, 1.0)
    sp, so = prompt_scale, output_scale
    pc, oc = moments("code", "prompt"), moments("code", "output")
    pv, ov = moments("conv", "prompt"), moments("conv", "output")
    mean_p = (s * pc.mean + (1 - s) * pv.mean) * sp
    mean_p2 = (s * pc.mean_sq + (1 - s) * pv.mean_sq) * sp * sp
    mean_o = (s * oc.mean + (1 - s) * ov.mean) * so
    # E[o p] = E[o] E[p] within a service; the mixture weighs each service by its share.
    mean_op = (s * oc.mean * pc.mean + (1 - s) * ov.mean * pv.mean) * sp * so
    mean_o2 = (s * oc.mean_sq + (1 - s) * ov.mean_sq) * so * so
    decode_context = (mean_op + mean_o2 / 2.0) / mean_o
    prefill_keys = (mean_p2 / mean_p + 1.0) / 2.0
    return MixStats(
        mean_prompt=mean_p,
        mean_output=mean_o,
        decode_context=decode_context,
        prefill_keys=prefill_keys,
        prompt_p50=np.interp(s, _SHARE_GRID, _mixture_quantiles("prompt", 0.5)) * sp,
        prompt_p99=np.interp(s, _SHARE_GRID, _mixture_quantiles("prompt", 0.99)) * sp,
        output_p50=np.interp(s, _SHARE_GRID, _mixture_quantiles("output", 0.5)) * so,
        output_p99=np.interp(s, _SHARE_GRID, _mixture_quantiles("output", 0.99)) * so,
        output_p90=np.interp(s, _SHARE_GRID, _mixture_quantiles("output", 0.9)) * so,
    )


_SHARE_GRID = np.linspace(0.0, 1.0, 51)


@cache
def _mixture_quantiles(kind: Kind, q: float) -> FloatArray:
    """The ``q`` quantile of the code/conv mixture at each code share of ``_SHARE_GRID``."""
    probs = np.asarray(_PROBS)
    log_code = np.log(np.asarray(_QUANTILES["code"][kind], dtype=np.float64))
    log_conv = np.log(np.asarray(_QUANTILES["conv"][kind], dtype=np.float64))
    log_x = np.linspace(min(log_code[0], log_conv[0]), max(log_code[-1], log_conv[-1]), 4001)
    cdf_code = np.interp(log_x, log_code, probs)
    cdf_conv = np.interp(log_x, log_conv, probs)
    out = np.empty_like(_SHARE_GRID)
    for i, share in enumerate(_SHARE_GRID):
        cdf = share * cdf_code + (1.0 - share) * cdf_conv
        out[i] = math.exp(float(np.interp(q, cdf, log_x)))
    return out


@dataclass(frozen=True)
class TrafficShape:
    """How a pool's request rate moves: diurnal cycle, weekend dip and random bursts."""

    rate_rps: float
    diurnal_amplitude: float = 0.35
    peak_hour_utc: float = 16.0
    weekend_factor: float = 0.75
    bursts_per_day: float = 2.0
    burst_factor: float = 1.6
    burst_minutes: float = 12.0


def diurnal_rate(shape: TrafficShape, epoch_s: FloatArray) -> FloatArray:
    """Mean arrival rate (requests/s) at Unix times ``epoch_s`` (UTC), before bursts and idle periods."""
    hours = epoch_s / 3600.0
    cycle = 1.0 + shape.diurnal_amplitude * np.cos(2.0 * math.pi * (hours - shape.peak_hour_utc) / 24.0)
    weekday = (np.floor(hours / 24.0).astype(np.int64) + 3) % 7  # 1970-01-01 was a Thursday (3)
    weekend = np.where(weekday >= 5, shape.weekend_factor, 1.0)
    return shape.rate_rps * cycle * weekend


@dataclass(frozen=True)
class WindowArrivals:
    """What arrived at a pool in each window (arrays over windows)."""

    requests: FloatArray
    prompt_tokens: FloatArray
    output_tokens: FloatArray


def draw_arrivals(
    rate_rps: FloatArray,
    code_share: FloatArray,
    window_s: float,
    rng: np.random.Generator,
    scale: Mapping[Kind, float] | None = None,
) -> WindowArrivals:
    """Poisson arrivals per service and window, with length sums drawn from the services' moments
    (each kind's lengths multiplied by ``scale[kind]``, default 1)."""
    total_requests = np.zeros_like(rate_rps)
    sums: dict[Kind, FloatArray] = {"prompt": np.zeros_like(rate_rps), "output": np.zeros_like(rate_rps)}
    shares: Mapping[Service, FloatArray] = {"code": code_share, "conv": 1.0 - code_share}
    for service in SERVICES:
        lam = np.maximum(rate_rps * shares[service] * window_s, 0.0)
        n = rng.poisson(lam).astype(np.float64)
        for kind in ("prompt", "output"):
            m = moments(service, kind)
            draw = n * m.mean + np.sqrt(n * m.variance) * rng.standard_normal(n.shape)
            factor = (scale or {}).get(kind, 1.0)
            sums[kind] = sums[kind] + np.maximum(draw, n * m.minimum) * factor
        total_requests += n
    return WindowArrivals(requests=total_requests, prompt_tokens=sums["prompt"], output_tokens=sums["output"])


def burst_multiplier(
    shape: TrafficShape, t_s: FloatArray, window_s: float, day_rng: Callable[[int], np.random.Generator]
) -> FloatArray:
    """Rate multiplier from random bursts: per day, Poisson(``bursts_per_day``) bursts at uniform times,
    each ``burst_minutes`` long at ``burst_factor`` times the rate. ``day_rng(day)`` gives the day's
    generator, so a window's multiplier does not depend on which other windows are computed with it."""
    factor = np.ones(np.shape(t_s), dtype=np.float64)
    if shape.bursts_per_day <= 0 or len(t_s) == 0:
        return factor
    length = shape.burst_minutes * 60.0
    first = int(np.floor((float(np.min(t_s)) - length) / 86_400.0))
    last = int(np.floor((float(np.max(t_s)) + window_s) / 86_400.0))
    for day in range(max(first, 0), last + 1):
        rng = day_rng(day)
        for start in (day + rng.random(rng.poisson(shape.bursts_per_day))) * 86_400.0:
            overlap = np.clip(np.minimum(t_s + window_s, start + length) - np.maximum(t_s, start), 0.0, None)
            factor += (shape.burst_factor - 1.0) * overlap / window_s
    return factor
