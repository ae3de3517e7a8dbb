"""The truth's goodput under a TTFT target: the prompt load each prefill worker takes with its simulated
TTFT p90 at or under the pool's target (``PoolSpec.ttft_target_s``).

A prefill engine's TTFT here is the simulator's own (:func:`fleetsim.pool.latencies`): queueing, the prompt's
computation and waiting for the step in progress, which grows with the worker's busy share. Below
saturation the fluid queue is empty, so the bound comes from the step in progress and the long prompts:
the largest load whose p90 meets the target is found by bisection on the worker's load, per window. The
analyzer never sees this: it bounds its own prefill capacity with its own queueing model.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import numpy.typing as npt

from fleetsim.pool import Capacities, PoolModel, PoolTraffic, lognormal_p90

FloatArray = npt.NDArray[np.float64]
BISECTIONS = 40  # halvings of the load's share of capacity: ~1e-12, far below the truth's noise


def ttft_bounded(model: PoolModel, traffic: PoolTraffic, caps: Capacities) -> Capacities:
    """``caps`` with each prefill worker's capacity held to its TTFT-target load; unchanged for a pool with
    no TTFT target, or a colocated one (its TTFT comes with the decode batch: not bounded here)."""
    target = model.pool.spec.ttft_target_s
    if target is None or model.colocated:
        return caps
    return replace(caps, prefill=ttft_bounded_prefill(model, traffic, caps.prefill, target))


def ttft_bounded_prefill(
    model: PoolModel, traffic: PoolTraffic, capacity: FloatArray, target_s: float
) -> FloatArray:
    """The largest prompt tokens/s per worker (at most ``capacity``) whose simulated TTFT p90 meets
    ``target_s``; 0 where a prompt alone misses it."""
    mix = traffic.mix
    keys, mean_p = mix.prefill_keys[:, None], mix.mean_prompt[:, None]
    step = model.step
    full_step = step.breakdown(0.0, float(step.engine.token_budget), 0.0, keys).seconds
    p50 = step.prefill_seconds(mix.prompt_p50[:, None])
    p99 = step.prefill_seconds(mix.prompt_p99[:, None])

    def meets(rate: FloatArray) -> npt.NDArray[np.bool_]:
        busy = model.prefill_load(rate, mean_p, keys)[2]
        ttft90 = lognormal_p90(p50 + busy * full_step / 2.0, p99 + busy * full_step)
        return np.asarray(ttft90 <= target_s)

    low, high = np.zeros(capacity.shape), np.ones(capacity.shape)
    for _ in range(BISECTIONS):
        middle = (low + high) / 2.0
        ok = meets(middle * capacity)
        low, high = np.where(ok, middle, low), np.where(ok, high, middle)
    bounded: FloatArray = np.where(meets(capacity), capacity, low * capacity)
    return bounded
