"""Goodput of one serving instance under latency targets: what it serves within its TTFT and TPOT.

- Decode: the largest batch whose step meets the TPOT target (a step is one output token per sequence),
  at most the batch the engine would run; its output tokens/s are the decode goodput.
- Prefill: the largest arrival rate whose time to first token meets the TTFT target at the 90th
  percentile, with queueing: the idle TTFT is the service floor and the wait is an M/M/1 queue's over the
  instance's prompt throughput (P(wait > t) = rho e^-(mu - lambda) t), a conservative tail for a batched,
  nearly deterministic server.

A TPOT target the engine's batch already meets leaves the decode goodput equal to its throughput; a TTFT
target always holds the load below saturation, where the queue grows without bound. The range of each
figure is the same search rerun at the ends of the prediction's band for that phase (the regime's held-out
error, the KV budget's and routing's ranges): a slower instance takes longer per step and per prompt.
Reasoning: docs/analyzer.md#goodput
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from analyzer.model.efficiency import CALIBRATED, EfficiencyParams
from analyzer.model.moe import step_time
from analyzer.model.perf_model import ThroughputPrediction

TAIL_QUANTILE = 0.9  # the targets are p90s, as the SLA planners and the issue state them
_BISECTIONS = 60


@dataclass(frozen=True)
class Targets:
    """Latency objectives at the 90th percentile, in seconds (None: no target)."""

    ttft_s: float | None = None
    tpot_s: float | None = None

    def __post_init__(self) -> None:
        for name in ("ttft_s", "tpot_s"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a positive number of seconds, got {value}")

    @property
    def any(self) -> bool:
        return self.ttft_s is not None or self.tpot_s is not None


@dataclass(frozen=True)
class Figure:
    """One goodput figure with its range (0 where no load meets the target)."""

    value: float
    low: float
    high: float


@dataclass(frozen=True)
class Goodput:
    """What one instance serves within its targets, per role."""

    targets: Targets
    decode_batch: float  # the largest batch meeting TPOT (the engine's batch when nothing binds)
    decode_tpot_s: float  # the step time at that batch
    decode_output_tokens_per_s: Figure
    decode_requests_per_s: Figure
    decode_binding: bool  # the TPOT target lowered the batch
    prefill_requests_per_s: Figure
    prefill_ttft_p90_s: float  # at that arrival rate (NaN without a TTFT target: not asked)
    prefill_binding: bool  # the TTFT target held the rate below the instance's throughput
    notes: tuple[str, ...] = field(default=())


def _largest(ok: Callable[[float], bool], low: float, high: float) -> float:
    """The largest x in [low, high] with ok(x), for ok monotone (true below, false above); ok(low) holds."""
    if ok(high):
        return high
    for _ in range(_BISECTIONS):
        mid = (low + high) / 2
        low, high = (mid, high) if ok(mid) else (low, mid)
    return low


def batch_meeting_tpot(step: Callable[[float], float], target: float, cap: float) -> float:
    """The largest batch in [0, ``cap``] whose decode step (``step(batch)`` seconds, rising with the batch)
    meets ``target``: ``cap`` when it does, towards 0 when no batch does."""
    return _largest(lambda b: step(b) <= target, 0.0, cap)


def ttft_p90_s(idle_ttft_s: float, service_rate: float, arrival_rate: float) -> float:
    """90th-percentile time to first token at ``arrival_rate`` requests/s on a prefill instance that serves
    ``service_rate`` requests/s and takes ``idle_ttft_s`` for a prompt alone (inf at or past saturation)."""
    if arrival_rate <= 0:
        return idle_ttft_s
    if arrival_rate >= service_rate:
        return math.inf
    rho = arrival_rate / service_rate
    wait = max(0.0, math.log(rho / (1.0 - TAIL_QUANTILE)) / (service_rate - arrival_rate))
    return idle_ttft_s + wait


def rate_meeting_ttft(idle_ttft_s: float, service_rate: float, target: float) -> float:
    """The largest arrival rate (requests/s) whose p90 time to first token (:func:`ttft_p90_s`) meets
    ``target`` on an instance serving ``service_rate`` requests/s with ``idle_ttft_s`` for a prompt alone:
    0 when the prompt alone misses it."""
    if idle_ttft_s > target or service_rate <= 0:
        return 0.0
    return _largest(lambda lam: ttft_p90_s(idle_ttft_s, service_rate, lam) <= target, 0.0, service_rate)


def _speeds(p: ThroughputPrediction, phase: str, central: float) -> tuple[float, float]:
    """The low and high ends of the prediction's band for ``phase`` as speed factors (1: central)."""
    if central <= 0:
        return 1.0, 1.0
    low, high = p.ranges.get(phase, (central, central))
    return low / central, high / central


def _decode(
    p: ThroughputPrediction, target: float | None, params: EfficiencyParams, speed: float = 1.0
) -> tuple[float, float]:
    """(batch, step seconds) of the largest decode batch meeting ``target`` on an instance ``speed`` times
    as fast as the central prediction; (0, step at 1) if none does."""
    d, w = p.deployment, p.workload

    def step(batch: float) -> float:
        return step_time(d, params, decode_seqs=batch, context_len=w.mean_context).total_s / speed

    if target is None or step(p.batch) <= target:
        return p.batch, step(p.batch)
    if step(1.0) > target or speed <= 0:
        return 0.0, step(1.0)
    batch = batch_meeting_tpot(step, target, p.batch)
    return batch, step(batch)


def _decode_rate(
    p: ThroughputPrediction, target: float | None, params: EfficiencyParams, speed: float
) -> float:
    batch, step = _decode(p, target, params, speed)
    return batch / step if batch > 0 else 0.0


def _prefill_rate(p: ThroughputPrediction, target: float | None, speed: float) -> float:
    """Requests/s the prefill instance serves within ``target`` (its throughput without one)."""
    service = speed * p.prefill_tokens_per_s / p.workload.isl
    if target is None:
        return service
    floor = p.ttft_s / speed if speed > 0 else math.inf
    return rate_meeting_ttft(floor, service, target)


def goodput(p: ThroughputPrediction, targets: Targets, params: EfficiencyParams = CALIBRATED) -> Goodput:
    """Goodput of the predicted instance under ``targets`` (pure; the prediction's parameters)."""
    notes: list[str] = []
    w = p.workload
    if not p.fits:
        zero = Figure(0.0, 0.0, 0.0)
        return Goodput(targets, 0.0, math.inf, zero, zero, False, zero, math.inf, False)
    batch, tpot = _decode(p, targets.tpot_s, params)
    decode_binding = batch < p.batch
    if targets.tpot_s is not None and batch == 0.0:
        notes.append(
            f"no batch meets TPOT {targets.tpot_s * 1e3:,.1f} ms: "
            f"one sequence's step takes {tpot * 1e3:,.1f} ms"
        )
    if targets.any:
        notes.append(
            "per role (prefill-only, decode-only instances); a colocated instance's goodput is not modelled: "
            "its prompt chunks lengthen the decode steps"
        )
    slow, fast = _speeds(p, "decode", p.decode_tokens_per_s)
    decode = Figure(
        batch / tpot if batch > 0 else 0.0,
        _decode_rate(p, targets.tpot_s, params, slow),
        _decode_rate(p, targets.tpot_s, params, fast),
    )
    service = p.prefill_tokens_per_s / w.isl
    rate, ttft = service, math.nan
    if targets.ttft_s is not None:
        rate = _prefill_rate(p, targets.ttft_s, 1.0)
        ttft = ttft_p90_s(p.ttft_s, service, rate)
        if rate == 0.0:
            notes.append(
                f"no load meets TTFT {targets.ttft_s * 1e3:,.1f} ms: "
                f"a prompt alone takes {p.ttft_s * 1e3:,.1f} ms"
            )
    slow, fast = _speeds(p, "prefill", p.prefill_tokens_per_s)
    prefill = Figure(rate, _prefill_rate(p, targets.ttft_s, slow), _prefill_rate(p, targets.ttft_s, fast))
    return Goodput(
        targets=targets,
        decode_batch=batch,
        decode_tpot_s=tpot,
        decode_output_tokens_per_s=decode,
        decode_requests_per_s=Figure(decode.value / w.osl, decode.low / w.osl, decode.high / w.osl),
        decode_binding=decode_binding,
        prefill_requests_per_s=prefill,
        prefill_ttft_p90_s=ttft,
        prefill_binding=targets.ttft_s is not None and rate < service,
        notes=tuple(notes),
    )
