"""One model pool over a chunk of windows: traffic, routing, queues and each worker's operating point.

Request flow is modelled statistically per window, never per request: a pool's arrivals (tokens) enter
a queue per stage that its workers drain at their capacity (Lindley's recursion, solved in closed form
over the chunk with cumulative sums). A disaggregated pool has two stages: prefill (prompt tokens) then
decode (the output tokens of the prefilled requests); a colocated pool one stage of requests served by
"mixed" workers that run decode steps with chunked prefill. ``capacity`` routing (load-aware, as llm-d
and Dynamo route) shares a stage's work in proportion to the workers' capacities from one queue;
``round-robin`` gives every up worker the same share, each with its own queue.

Saturated mode (the "unlimited request rate" of benchmarks) keeps every prefill queue non-empty; it is
how the ground truth measures what a placement sustains.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from fleet.contract import Role
from fleetsim.layout import FleetLayout, SimPool
from fleetsim.life import code_share, idle_factor
from fleetsim.physics import StepModel
from fleetsim.physics_choice import Physics
from fleetsim.rng import STREAM_ARRIVALS, STREAM_BURSTS, rng_for
from fleetsim.traffic import (
    Kind,
    MixStats,
    TrafficShape,
    WindowArrivals,
    burst_multiplier,
    diurnal_rate,
    draw_arrivals,
    mix_stats,
)

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

PREFILL, DECODE, MIXED = 0, 1, 2
ROLE_CODE = {Role.PREFILL: PREFILL, Role.DECODE: DECODE, Role.MIXED: MIXED}
_PREEMPT_SHARE = 0.03  # of admitted requests preempted per window while KV-bound and saturated


@dataclass(frozen=True)
class PoolTraffic:
    """What reaches the pool in each window of a chunk."""

    share: FloatArray  # code share of requests (mix)
    arrivals: WindowArrivals
    mix: MixStats


def pool_traffic(
    pool: SimPool, epoch0: float, window_start: FloatArray, *, window_s: float, seed: int, chunk: int
) -> PoolTraffic:
    """Arrivals for windows starting at ``window_start`` (seconds from the scenario start at ``epoch0``)."""
    spec = pool.spec
    t_mid = window_start + window_s / 2.0
    shape = TrafficShape(**spec.traffic.model_dump(exclude={"code_share", "prompt_scale", "output_scale"}))
    rate = diurnal_rate(shape, epoch0 + t_mid)
    rate = rate * burst_multiplier(
        shape, window_start, window_s, lambda day: rng_for(seed, STREAM_BURSTS, pool.index, day)
    )
    rate = rate * idle_factor(spec, t_mid)
    share = code_share(spec, t_mid)
    scale: dict[Kind, float] = {"prompt": spec.traffic.prompt_scale, "output": spec.traffic.output_scale}
    rng = rng_for(seed, STREAM_ARRIVALS, pool.index, chunk)
    arrivals = draw_arrivals(rate, share, window_s, rng, scale)
    return PoolTraffic(
        share=share,
        arrivals=arrivals,
        mix=mix_stats(share, spec.traffic.prompt_scale, spec.traffic.output_scale),
    )


@dataclass(frozen=True)
class Capacities:
    """Each worker's capacity per window in every role it could take (for the truth's search)."""

    prefill: FloatArray  # prompt tokens/s (compute, capped by the KV-handoff link)
    prefill_compute: FloatArray
    decode: FloatArray  # output tokens/s at the largest decode batch
    decode_batch: FloatArray
    decode_kv_bound: BoolArray
    mixed: FloatArray  # output tokens/s of a colocated worker at the mix's prompt/output ratio
    mixed_batch: FloatArray
    mixed_kv_bound: BoolArray


@dataclass
class QueueState:
    """Work waiting at window end, carried from chunk to chunk (tokens; one entry per queue)."""

    first: FloatArray = field(default_factory=lambda: np.zeros(1))
    second: FloatArray = field(default_factory=lambda: np.zeros(1))


@dataclass(frozen=True)
class PoolFlow:
    """A pool's chunk: per (window, worker) operating points and per-window pool totals."""

    roles: npt.NDArray[np.int64]  # (K,), or (W, K) where roles change within the chunk
    up: BoolArray
    prompt_rate: FloatArray  # prompt tokens/s prefilled
    output_rate: FloatArray  # output tokens/s generated
    received_prompt_rate: FloatArray  # decode: prompt tokens of the requests whose KV it received
    busy: FloatArray
    batch: FloatArray  # running sequences (decode, mixed) or prompts in flight (prefill)
    batch_max: FloatArray
    kv_bound: BoolArray
    kv_usage: FloatArray
    waiting: FloatArray  # requests queued
    wait_s: FloatArray  # queueing delay a request meets
    saturated: BoolArray
    preempt_rate: FloatArray
    steps_per_s: FloatArray  # engine steps per second
    step_decode: FloatArray  # decode sequences in one step
    step_prefill: FloatArray  # prompt tokens in one step
    offered_tokens: FloatArray  # (W,) prompt + output tokens/s arriving
    delivered_requests: FloatArray  # (W,) requests/s completed
    delivered_tokens: FloatArray  # (W,) prompt + output tokens/s of completed requests
    capacity_requests: FloatArray  # (W,) requests/s the up workers sustain at this mix


def lindley(arrivals: FloatArray, capacity: FloatArray, q0: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Served work per window and queue at window end for Q_n = max(0, Q_{n-1} + A_n - C_n), over axis 0.

    Closed form: Q_n = max(q0 + S_n, S_n - min_{1<=k<=n} S_k) with S the running sum of A - C.
    """
    running = np.cumsum(arrivals - capacity, axis=0)
    queue = np.maximum(q0 + running, running - np.minimum.accumulate(running, axis=0))
    previous = np.concatenate([np.broadcast_to(q0, (1, *queue.shape[1:])), queue[:-1]], axis=0)
    served = np.maximum(arrivals + previous - queue, 0.0)
    return served, queue


def _share(weights: FloatArray) -> FloatArray:
    total = weights.sum(axis=1, keepdims=True)
    out = np.zeros_like(weights)
    np.divide(weights, total, out=out, where=total > 0)
    return out


class PoolModel:
    """The physics of one pool's workers, and the flow of a chunk of its traffic through them."""

    def __init__(self, layout: FleetLayout, pool_index: int, physics: Physics | None = None) -> None:
        self.pool = layout.pools[pool_index]
        self.workers = [layout.workers[i] for i in self.pool.workers]
        chosen = physics or Physics()
        self.step: StepModel = chosen.step_model(
            self.pool.spec.pool_id,
            self.pool.spec.engine,
            [layout.hardware(w) for w in self.workers],
            self.pool.engine,
        )
        spec = self.pool.spec
        self.link_tokens_s = spec.kv_link_gb_s * 1e9 / self.step.kv_bytes_token
        self.colocated = spec.serving == "colocated"
        self.roles = np.array([ROLE_CODE[w.role] for w in self.workers], dtype=np.int64)

    def capacities(self, traffic: PoolTraffic) -> Capacities:
        mix = traffic.mix
        ctx = mix.decode_context[:, None]
        keys = mix.prefill_keys[:, None]
        width = (len(ctx), len(self.workers))
        tpot = self.pool.spec.tpot_target_s
        if self.colocated:
            ratio = (mix.mean_prompt / mix.mean_output)[:, None]
            lim = self.step.batch_limits(ctx, keys, ratio, tpot)
            mixed = self.step.decode_rate(lim.batch, ctx, keys, ratio)
            zeros = np.zeros(width)
            return Capacities(
                zeros, zeros, zeros, zeros, np.zeros(width, bool), mixed, lim.batch, lim.kv_bound
            )
        compute = np.broadcast_to(self.step.prefill_rate(keys), width)
        lim = self.step.batch_limits(ctx, 0.0, 0.0, tpot)
        decode = self.step.decode_rate(lim.batch, ctx, 0.0)
        zeros = np.zeros(width)
        return Capacities(
            prefill=np.minimum(compute, self.link_tokens_s),
            prefill_compute=compute,
            decode=np.broadcast_to(decode, width),
            decode_batch=np.broadcast_to(lim.batch, width),
            decode_kv_bound=np.broadcast_to(lim.kv_bound, width),
            mixed=zeros,
            mixed_batch=zeros,
            mixed_kv_bound=np.zeros(width, bool),
        )

    def _stage(
        self,
        arrivals: FloatArray | None,
        cap: FloatArray,
        q0: FloatArray,
        window_s: float,
        up_mask: BoolArray,
    ) -> tuple[FloatArray, FloatArray, FloatArray]:
        """Per-worker served rate, queued work and queue delay of one stage (saturated: ``arrivals`` None)."""
        work = cap * window_s
        if self.pool.spec.routing == "capacity":
            total = work.sum(axis=1)
            if arrivals is None:
                served, queue = total, np.zeros_like(total)
            else:
                served, queue = lindley(arrivals, total, q0[:1])
            share = _share(cap)
            delay = np.divide(queue, total, out=np.full_like(queue, 0.0), where=total > 0) * window_s
            return (
                served[:, None] * share / window_s,
                queue[:, None] * share,
                np.broadcast_to(delay[:, None], cap.shape),
            )
        n_up = up_mask.sum(axis=1, keepdims=True)
        if arrivals is None:
            return cap, np.zeros_like(cap), np.zeros_like(cap)
        each = np.divide(arrivals[:, None], n_up, out=np.zeros(cap.shape), where=n_up > 0) * up_mask
        q = q0 if q0.shape[0] == cap.shape[1] else np.zeros(cap.shape[1])
        served, queue = lindley(each, work, q)
        delay = np.divide(queue, work, out=np.zeros_like(queue), where=work > 0) * window_s
        return served / window_s, queue, delay

    def flow(
        self,
        traffic: PoolTraffic,
        caps: Capacities,
        up: BoolArray,
        state: QueueState,
        *,
        window_s: float,
        saturated: bool = False,
        roles: npt.NDArray[np.int64] | None = None,
    ) -> PoolFlow:
        """The chunk's flow; ``roles`` (codes per worker, or per window and worker where scheduled changes
        apply) replaces the layout's roles."""
        mix = traffic.mix
        arr = traffic.arrivals
        mean_p, mean_o = mix.mean_prompt[:, None], mix.mean_output[:, None]
        ctx, keys = mix.decode_context[:, None], mix.prefill_keys[:, None]
        roles = self.roles if roles is None else roles
        zeros = np.zeros(up.shape)
        if self.colocated:
            is_m = up & (roles == MIXED)
            cap = caps.mixed * is_m
            rate, queue, delay = self._stage(
                None if saturated else arr.output_tokens, cap, state.first, window_s, is_m
            )
            state.first = queue.sum(axis=1)[-1:] if self.pool.spec.routing == "capacity" else queue[-1]
            ratio = mean_p / mean_o
            batch_max = caps.mixed_batch
            batch = np.minimum(self.step.batch_for_rate(rate, ctx, keys, ratio), batch_max)
            full = (queue > 1e-6) | saturated
            batch = np.where(full & is_m, batch_max, batch)
            prompt_rate, output_rate, received = rate * ratio, rate, zeros
            kv_bound = caps.mixed_kv_bound
            waiting = queue / mean_o
            step_decode = np.maximum(batch, 1.0)
            step_prefill = step_decode * ratio
            steps = rate / step_decode
            busy = np.minimum(steps * self.step.breakdown(step_decode, step_prefill, ctx, keys).seconds, 1.0)
            pool_output = rate.sum(axis=1)
            capacity_requests = cap.sum(axis=1) / mix.mean_output
        else:
            is_p, is_d = up & (roles == PREFILL), up & (roles == DECODE)
            cap_p, cap_d = caps.prefill * is_p, caps.decode * is_d
            p_rate, p_queue, p_delay = self._stage(
                None if saturated else arr.prompt_tokens, cap_p, state.first, window_s, is_p
            )
            decode_arrivals = p_rate.sum(axis=1) * window_s * mix.mean_output / mix.mean_prompt
            d_rate, d_queue, d_delay = self._stage(decode_arrivals, cap_d, state.second, window_s, is_d)
            routed = self.pool.spec.routing == "capacity"
            state.first = p_queue.sum(axis=1)[-1:] if routed else p_queue[-1]
            state.second = d_queue.sum(axis=1)[-1:] if routed else d_queue[-1]
            d_batch = np.minimum(self.step.batch_for_rate(d_rate, ctx, 0.0), caps.decode_batch)
            d_full = (d_queue > 1e-6) & is_d
            d_batch = np.where(d_full, caps.decode_batch, d_batch)
            budget = float(self.step.engine.token_budget)
            tokens_per_step, p_steps, p_busy = self.prefill_load(p_rate, mean_p, keys)
            prompt_rate = p_rate
            output_rate = d_rate
            received = d_rate * mean_p / mean_o
            batch = np.where(roles == PREFILL, p_busy * tokens_per_step / mean_p, d_batch)
            batch_max = np.where(roles == PREFILL, budget / mean_p, caps.decode_batch)
            kv_bound = caps.decode_kv_bound & (roles == DECODE)
            waiting = np.where(roles == PREFILL, p_queue / mean_p, d_queue / mean_o)
            delay = np.where(roles == PREFILL, p_delay, d_delay)
            busy = np.where(roles == PREFILL, p_busy, np.minimum(d_batch, 1.0))
            step_decode = np.where(roles == PREFILL, 0.0, np.maximum(d_batch, 1.0))
            step_prefill = np.where(roles == PREFILL, tokens_per_step, 0.0)
            steps = np.where(roles == PREFILL, p_steps, d_rate / np.maximum(step_decode, 1.0))
            full = np.where(roles == PREFILL, (p_queue > 1e-6) | saturated, d_full)
            pool_output = d_rate.sum(axis=1)
            capacity_requests = np.minimum(
                cap_p.sum(axis=1) / mix.mean_prompt, cap_d.sum(axis=1) / mix.mean_output
            )
        kv_usage = np.clip(
            np.where(roles == PREFILL, batch * mean_p, batch * ctx) / self.step.kv_capacity_tokens, 0.0, 1.0
        )
        preempt = np.where(kv_bound & full & up, _PREEMPT_SHARE * output_rate / mean_o, 0.0)
        delivered = pool_output / mix.mean_output
        return PoolFlow(
            roles=roles,
            up=up,
            prompt_rate=prompt_rate * up,
            output_rate=output_rate * up,
            received_prompt_rate=received * up,
            busy=busy * up,
            batch=batch * up,
            batch_max=np.broadcast_to(batch_max, up.shape),
            kv_bound=np.broadcast_to(kv_bound, up.shape),
            kv_usage=kv_usage * up,
            waiting=waiting * up,
            wait_s=delay,
            saturated=full & up,
            preempt_rate=preempt,
            steps_per_s=steps * up,
            step_decode=step_decode,
            step_prefill=step_prefill,
            offered_tokens=(arr.prompt_tokens + arr.output_tokens) / window_s,
            delivered_requests=delivered,
            delivered_tokens=delivered * (mix.mean_prompt + mix.mean_output),
            capacity_requests=capacity_requests,
        )

    def prefill_load(
        self, p_rate: FloatArray, mean_p: FloatArray, keys: FloatArray
    ) -> tuple[FloatArray, FloatArray, FloatArray]:
        """Prompt tokens per step, steps per second and busy share of prefill workers taking ``p_rate``
        prompt tokens/s each: a step takes what arrived during the last one, at least a prompt, at most
        the token budget."""
        budget = float(self.step.engine.token_budget)
        tokens_per_step = np.clip(p_rate * self._prefill_step_s(keys), np.minimum(mean_p, budget), budget)
        p_steps = np.divide(p_rate, tokens_per_step, out=np.zeros(p_rate.shape), where=tokens_per_step > 0)
        p_busy = np.minimum(p_steps * self.step.breakdown(0.0, tokens_per_step, 0.0, keys).seconds, 1.0)
        return tokens_per_step, p_steps, p_busy

    def _prefill_step_s(self, keys: FloatArray) -> FloatArray:
        """Time of a full prefill step (the token budget) per worker."""
        return np.asarray(self.step.breakdown(0.0, float(self.step.engine.token_budget), 0.0, keys).seconds)


@dataclass(frozen=True)
class Latencies:
    """Latency quantiles (seconds) per (window, worker); NaN where the engine reports none."""

    ttft_p50: FloatArray
    ttft_p99: FloatArray
    tpot_p50: FloatArray
    tpot_p99: FloatArray
    ttft_p90: FloatArray
    tpot_p90: FloatArray
    e2e_p90: FloatArray  # the engine's own requests: a prefill worker's end with their first token


_Z90_OVER_Z99 = 1.2815516 / 2.3263479  # standard normal quantiles: p90 on a lognormal through p50 and p99


def lognormal_p90(p50: FloatArray, p99: FloatArray) -> FloatArray:
    """The 90th percentile of a lognormal latency with this median and 99th percentile."""
    with np.errstate(invalid="ignore", divide="ignore"):
        out: FloatArray = p50 * np.power(np.maximum(p99, p50) / p50, _Z90_OVER_Z99)
    return out


def latencies(model: PoolModel, flow: PoolFlow, traffic: PoolTraffic) -> Latencies:
    """What each engine's TTFT and TPOT histograms would say.

    Prefill: queueing + computing the prompt (+ waiting for the batch in progress); the engine reports
    no TPOT (it emits one token). Decode: TTFT is its own view (admission wait + KV transfer over the
    link + one step); TPOT is the step time at its batch, the p99 a step that also loads a transferred
    KV cache. Colocated: prefill runs in chunks of the token budget left beside the decode batch, and
    a decode step that carries a full chunk sets TPOT's p99.
    """
    step = model.step
    mix = traffic.mix
    keys = mix.prefill_keys[:, None]
    ctx = mix.decode_context[:, None]
    nan = np.full(flow.up.shape, np.nan)
    budget = float(model.step.engine.token_budget)
    b = np.maximum(flow.batch, 1.0)
    if model.colocated:
        ratio = (mix.mean_prompt / mix.mean_output)[:, None]
        t_step = step.breakdown(b, b * ratio, ctx, keys).seconds
        chunk = np.maximum(budget - b, 256.0)
        t_chunk = step.breakdown(b, chunk, ctx, keys).seconds
        p50, p99 = mix.prompt_p50[:, None], mix.prompt_p99[:, None]
        ttft50 = flow.wait_s + np.ceil(p50 / chunk) * t_chunk
        ttft99 = 2.0 * flow.wait_s + np.ceil(p99 / chunk) * t_chunk
        tpot99 = np.maximum(t_chunk, t_step * 1.05)
        ttft90, tpot90 = lognormal_p90(ttft50, ttft99), lognormal_p90(t_step, tpot99)
        e2e90 = ttft90 + mix.output_p90[:, None] * t_step
        return Latencies(ttft50, ttft99, t_step, tpot99, ttft90, tpot90, e2e90)
    roles = flow.roles
    is_p = roles == PREFILL
    full_step = step.breakdown(0.0, budget, 0.0, keys).seconds
    p50 = step.prefill_seconds(mix.prompt_p50[:, None])
    p99 = step.prefill_seconds(mix.prompt_p99[:, None])
    pre50 = flow.wait_s + p50 + flow.busy * full_step / 2.0
    pre99 = 2.0 * flow.wait_s + p99 + flow.busy * full_step
    t_dec = step.breakdown(b, 0.0, ctx, keys).seconds
    transfer50 = mix.prompt_p50[:, None] * step.kv_bytes_token / (model.pool.spec.kv_link_gb_s * 1e9)
    transfer99 = mix.prompt_p99[:, None] * step.kv_bytes_token / (model.pool.spec.kv_link_gb_s * 1e9)
    dec50 = flow.wait_s + transfer50 + t_dec
    dec99 = 2.0 * flow.wait_s + transfer99 + 1.5 * t_dec
    load_kv = mix.prompt_p50[:, None] * step.kv_bytes_token_gpu / step.bw_rate
    ttft50, ttft99 = np.where(is_p, pre50, dec50), np.where(is_p, pre99, dec99)
    tpot99 = t_dec * 1.05 + load_kv
    ttft90 = lognormal_p90(ttft50, ttft99)
    return Latencies(
        ttft_p50=ttft50,
        ttft_p99=ttft99,
        tpot_p50=np.where(is_p, nan, t_dec),
        tpot_p99=np.where(is_p, nan, tpot99),
        ttft_p90=ttft90,
        tpot_p90=np.where(is_p, nan, lognormal_p90(t_dec, tpot99)),
        # A prefill engine's requests end with their first token; a decode engine's run their output.
        e2e_p90=np.where(is_p, ttft90, ttft90 + mix.output_p90[:, None] * t_dec),
    )
