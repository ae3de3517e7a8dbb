"""GPU counters as DCGM defines them, from the work each engine step does.

- ``tensor_active`` (DCGM_FI_PROF_PIPE_TENSOR_ACTIVE): the fraction of cycles the tensor pipes are busy:
  GEMM FLOPs over the dense peak at the serving precision plus attention FLOPs over the BF16 peak, per
  second. A perfectly efficient GEMM would read 1; real steps read 0.3-0.6.
- ``sm_active`` (DCGM_FI_PROF_SM_ACTIVE): the fraction of time an SM has a warp resident: high whenever a
  step runs, lower while all-reduces (a few SMs) and launch gaps fill the step.
- ``dram_active`` (DCGM_FI_PROF_DRAM_ACTIVE): bytes moved over the peak HBM bandwidth; DCGM reads at most
  about 0.8 in practice, so it is capped there.
- ``gpu_util`` (NVML utilisation): the fraction of time any kernel runs, >= sm_active.
Measurement noise (absolute and relative) is added, then everything is clipped to 0..1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from fleetsim.pool import DECODE, PREFILL, PoolFlow, PoolModel, PoolTraffic

FloatArray = npt.NDArray[np.float64]

DRAM_ACTIVE_CEILING = 0.8
_ABS_NOISE = 0.006
_REL_NOISE = 0.02
_IDLE_POWER_SHARE = 0.12


@dataclass(frozen=True)
class Activity:
    """Per (window, worker) activity of each GPU of the worker (tensor-parallel ranks do equal work)."""

    tensor: FloatArray
    sm: FloatArray
    dram: FloatArray
    util: FloatArray
    nvlink_bytes_s: FloatArray  # each direction
    pcie_tx_bytes_s: FloatArray
    pcie_rx_bytes_s: FloatArray


def worker_activity(model: PoolModel, flow: PoolFlow, traffic: PoolTraffic) -> Activity:
    """Noise-free counters of every worker of a pool over a chunk."""
    step = model.step
    mix = traffic.mix
    ctx, keys = mix.decode_context[:, None], mix.prefill_keys[:, None]
    work = step.breakdown(flow.step_decode, flow.step_prefill, ctx, keys)
    steps = flow.steps_per_s
    tensor = steps * (work.gemm_flops / step.peak_flops + work.attention_flops / step.peak_bf16)
    dram = steps * work.hbm_bytes / step.peak_bandwidth
    busy = np.minimum(steps * work.seconds, 1.0)
    overhead = np.divide(
        work.comm_seconds + work.fixed_seconds, work.seconds, out=np.zeros_like(busy), where=work.seconds > 0
    )
    sm = busy * (1.0 - 0.8 * np.clip(overhead, 0.0, 1.0))
    kv_gpu = step.kv_bytes_token_gpu
    pcie_tx = np.where(flow.roles == PREFILL, flow.prompt_rate * kv_gpu, 0.0)
    pcie_rx = np.where(flow.roles == DECODE, flow.received_prompt_rate * kv_gpu, 0.0)
    return Activity(
        tensor=tensor,
        sm=sm,
        dram=dram,
        util=busy,
        nvlink_bytes_s=steps * work.link_bytes,
        pcie_tx_bytes_s=pcie_tx,
        pcie_rx_bytes_s=pcie_rx,
    )


def measured(true_value: FloatArray, rng: np.random.Generator, ceiling: float = 1.0) -> FloatArray:
    """A ratio as a counter reads it: relative and absolute noise, clipped to [0, ceiling]; idle reads 0."""
    noise = true_value * _REL_NOISE * rng.standard_normal(true_value.shape)
    noise += _ABS_NOISE * rng.standard_normal(true_value.shape)
    return np.where(true_value > 0.0, np.clip(true_value + noise, 0.0, ceiling), 0.0)


def power_w(
    tdp_w: FloatArray, sm: FloatArray, tensor: FloatArray, dram: FloatArray, rng: np.random.Generator
) -> FloatArray:
    """Board power: an idle floor plus a share of TDP that grows with SM, tensor and DRAM activity."""
    activity = np.clip(
        0.35 * sm + 0.40 * np.minimum(tensor / 0.6, 1.0) + 0.25 * np.minimum(dram / 0.7, 1.0), 0.0, 1.0
    )
    watts = tdp_w * (_IDLE_POWER_SHARE + (1.0 - _IDLE_POWER_SHARE) * activity)
    return np.clip(watts * (1.0 + 0.015 * rng.standard_normal(watts.shape)), 0.0, tdp_w * 1.02)
