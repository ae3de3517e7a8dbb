"""A pool's traffic mix per bucket: prompt and output token rates, request rate, mean lengths.

Tokens and requests are counted only where they are real; a request rate that is not is NaN.
Reasoning: docs/analyzer.md#workload
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from analyzer.pools.pool import Pool
from analyzer.telemetry.frames import ROLES, FloatArray
from analyzer.telemetry.grid import WorkerGrid
from fleet.contract import Role

# A prefill worker generating more than this many tokens per prompt token is not a max_tokens=1 leg.
MAX_PREFILL_OUTPUT_SHARE = 0.05
# A worker whose prompts bring this many times the tokens the pool's max_tokens=1 legs generate per prompt
# token is decoding: at least 10 tokens per request where a prefill leg makes 1 (long prompts with short
# answers put a decode worker under MAX_PREFILL_OUTPUT_SHARE: 3,000-token prompts, 70-token answers).
DECODE_OVER_PREFILL_OUTPUT = 10.0
# Decode workers whose share of the prompt tokens prefilled stays under this in nine buckets in ten do not
# count whole prompts (an engine that counts only what it computed itself, none after a KV transfer): their
# count says nothing of the requests admitted. Judged per pool over the range, never per bucket: an engine
# that counts whole prompts reads under it exactly where a backlog makes most clients give up.
MIN_ADMITTED_SHARE = 0.5
_WHOLE_PROMPT_QUANTILE = 0.9

_PREFILL, _DECODE, _MIXED = ROLES.index(Role.PREFILL), ROLES.index(Role.DECODE), ROLES.index(Role.MIXED)
_UNKNOWN = ROLES.index(Role.UNKNOWN)


@dataclass(frozen=True)
class PoolTraffic:
    """Per-bucket traffic of one pool (arrays align with the grid's buckets)."""

    pool: str
    bucket_start: FloatArray
    bucket_s: float
    prompt_rate: FloatArray  # prompt tokens/s where counted as real
    output_rate: FloatArray  # generated tokens/s
    request_rate: FloatArray  # requests/s (NaN where no engine counts them)
    prefill_workers: FloatArray  # workers reporting per role (for context)
    decode_workers: FloatArray
    mixed_workers: FloatArray
    requests_counted: bool  # the prefill convention held (request_rate is a measurement)
    # Prompt tokens/s the decode workers counted as they admitted requests (NaN where none reported; None
    # where they do not count whole prompts): with the prefill workers' count, the share of prefilled
    # requests that reached decode.
    decode_prompt_rate: FloatArray | None = None

    @property
    def tokens_rate(self) -> FloatArray:
        return self.prompt_rate + self.output_rate

    @property
    def isl(self) -> FloatArray:
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.request_rate > 0, self.prompt_rate / self.request_rate, np.nan)

    @property
    def osl(self) -> FloatArray:
        """Generated tokens per request that reached decode (per request prefilled where decode workers do
        not count the prompts they admit)."""
        admitted = self.request_rate * self.admitted_share
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(admitted > 0, self.output_rate / admitted, np.nan)

    @property
    def admitted_share(self) -> FloatArray:
        """Per bucket, requests decode workers admitted per request prefilled (above 1 while a backlog between
        the phases drains; 1 where unknown)."""
        if self.decode_prompt_rate is None:
            return np.ones_like(self.prompt_rate)
        return admitted_share(self.prompt_rate, self.decode_prompt_rate)

    @property
    def prompt_per_output(self) -> FloatArray:
        """Prompt tokens per generated token of the requests decode served: the traffic's prefill:decode
        token ratio, ``isl / osl``. Where decode workers count the prompts they admit, their own count is
        the numerator: while a backlog between the phases builds or drains, the tokens prefilled in a bucket
        and those generated in it belong to different requests, and their ratio swings with the backlog
        while the requests' lengths do not."""
        prompt = self.prompt_rate * self.admitted_share
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.output_rate > 0, prompt / self.output_rate, np.nan)

    def window(self, first: int, last: int) -> TrafficMix:
        """The mean mix over buckets [first, last) (rates weighted by time, lengths by requests). Without
        traffic the rates are 0 where an engine of known role reported its counters (an idle pool) and NaN
        where none did (no telemetry: unknown, never 0)."""
        sl = slice(first, last)
        active = (self.prompt_rate[sl] + self.output_rate[sl]) > 0
        if not active.any():
            idle = 0.0 if self.reported(first, last) else float("nan")
            return TrafficMix(idle, idle, idle, float("nan"), float("nan"), 0)
        prompt = float(np.mean(self.prompt_rate[sl][active]))
        output = float(np.mean(self.output_rate[sl][active]))
        requests = self.request_rate[sl][active]
        counted = ~np.isnan(requests)
        request_rate = float(np.mean(requests[counted])) if counted.any() else float("nan")
        isl = prompt / request_rate if request_rate > 0 else float("nan")
        admitted = request_rate * self._admitted(sl, active)
        osl = output / admitted if admitted > 0 else float("nan")
        return TrafficMix(prompt, output, request_rate, isl, osl, int(active.sum()))

    def _admitted(self, sl: slice, active: npt.NDArray[np.bool_]) -> float:
        """Requests decode admitted per request prefilled over the active buckets of ``sl`` (1: unknown)."""
        if self.decode_prompt_rate is None:
            return 1.0
        decode = self.decode_prompt_rate[sl][active]
        prompt = self.prompt_rate[sl][active]
        known = ~np.isnan(decode) & ~np.isnan(prompt)
        if not known.any():
            return 1.0
        return float(admitted_share(prompt[known].mean(), decode[known].mean()))

    def reported(self, first: int, last: int) -> bool:
        """Whether some engine of known role (prefill, decode, mixed) reported its counters in a bucket of
        [first, last) whose tokens can be told apart by phase: where none did, the pool's traffic there is
        unknown."""
        sl = slice(first, last)
        workers = self.prefill_workers[sl] + self.decode_workers[sl] + self.mixed_workers[sl]
        return bool(((workers > 0) & ~np.isnan(self.prompt_rate[sl])).any())

    def peak(self, first: int, last: int, quantile: float = 0.95) -> float:
        """A high quantile of the hourly tokens/s over buckets [first, last) (the load to plan for)."""
        values = self.tokens_rate[first:last]
        values = values[values > 0]
        return float(np.quantile(values, quantile)) if values.size else 0.0


@dataclass(frozen=True)
class TrafficMix:
    """Mean traffic over a stretch of time."""

    prompt_rate: float
    output_rate: float
    request_rate: float  # NaN when not counted
    isl: float  # mean prompt tokens per request (NaN when not counted)
    osl: float  # mean generated tokens per request
    buckets: int

    @property
    def tokens_rate(self) -> float:
        return self.prompt_rate + self.output_rate

    def with_lengths(self, isl: float, osl: float) -> TrafficMix:
        rate = self.prompt_rate / isl if isl > 0 else float("nan")
        return TrafficMix(self.prompt_rate, self.output_rate, rate, isl, osl, self.buckets)


def _decode_share(prompt: FloatArray | float, decode_prompt: FloatArray | float) -> FloatArray:
    """Decode workers' prompt tokens over the prompt tokens prefilled (NaN where nothing was prefilled)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        share: FloatArray = np.where(prompt > 0, decode_prompt / prompt, np.nan)
    return share


def admitted_share(prompt: FloatArray | float, decode_prompt: FloatArray | float) -> FloatArray:
    """Requests decode workers admitted per request prefilled: the prompt tokens they counted over the prompt
    tokens prefilled. Below 1 where a backlog between the phases grows or clients abandon it (prefilled,
    never decoded); above 1 where it drains (decode admits requests prefilled in earlier buckets). Either
    way output per prefilled request misreads the output length, and output per admitted request does
    not: decode's tokens are generated for the requests it admits. 1 where unknown (decode counted
    nothing). Only for decode workers that count whole prompts (:func:`counts_whole_prompts`)."""
    share = _decode_share(prompt, decode_prompt)
    usable = np.isfinite(share) & (share > 0)
    out: FloatArray = np.where(usable, share, 1.0)
    return out


def counts_whole_prompts(prompt: FloatArray, decode_prompt: FloatArray) -> bool:
    """Whether the pool's decode workers count the whole prompt of each request they admit (vLLM V1 adds a
    request's prompt length at its first output, computed or received): their share of the prompt tokens
    prefilled reaches ``MIN_ADMITTED_SHARE`` in the buckets where the fewest clients give up (its 90th
    percentile). An engine counting only the prompt tokens it computed stays near 0 in every bucket."""
    share = _decode_share(prompt, decode_prompt)
    share = share[np.isfinite(share)]
    return bool(share.size) and float(np.quantile(share, _WHOLE_PROMPT_QUANTILE)) >= MIN_ADMITTED_SHARE


def acting_roles(pool: Pool, grid: WorkerGrid) -> tuple[WorkerGrid, tuple[str, ...]]:
    """The grid with the pool's worker-buckets read by what their counters show where a label is wrong or
    missing, and a note per such worker.

    A prefill leg generates one token per request (``max_tokens=1``). Where the pool's prefill-labelled
    workers keep that convention, a worker-bucket generating more than ``MAX_PREFILL_OUTPUT_SHARE`` tokens
    per prompt token is a decode worker's:

    - a worker labelled prefill that does so runs decode under a stale or wrong label. Read by its label, its
      output would count as prompts served (the mix's lengths collapse) and the placement would miss a
      decode worker. The role-drift finding names the label; the analysis counts what the worker does;
    - a worker that reports no role (``unknown``) is read as decode where it does so, and as prefill where
      it prefilled and kept the convention. Left out, its GPUs would be missing from the pool's capacity
      and from every split the search compares (a pool of 16 workers, 5 unlabelled, read at 64% of its
      capacity). One that showed a single phase holds it throughout, its idle buckets too (idle hours must
      not read as role changes); one that showed both is read bucket by bucket; one that served nothing
      stays unknown.
    """
    rows = np.array(pool.members, dtype=np.int64)
    role = grid.role[rows]
    prompt = np.nan_to_num(grid.rate(grid.prompt_tokens[rows], rows))
    generated = np.nan_to_num(grid.rate(grid.generation_tokens[rows], rows))
    serving = grid.engine_s[rows] > 0
    labelled = (role == _PREFILL) & serving & (prompt > 0)
    keeps = labelled & ~(generated > MAX_PREFILL_OUTPUT_SHARE * prompt)
    if not keeps.any():
        return grid, ()  # no prefill worker keeps the convention: nothing to tell a role by
    generating = generated > _decoding_share(prompt, generated, keeps) * prompt
    decoding = labelled & generating
    unlabelled = (role == _UNKNOWN) & serving
    as_decode = unlabelled & generating  # generating implies generated > 0
    as_prefill = unlabelled & ~generating & (prompt > 0)
    # A worker that showed one phase only holds it in its idle buckets too: idle hours must not read as role
    # changes that cut the pool's segments.
    only_prefill = as_prefill.any(axis=1) & ~as_decode.any(axis=1)
    only_decode = as_decode.any(axis=1) & ~as_prefill.any(axis=1)
    as_prefill |= (role == _UNKNOWN) & only_prefill[:, None]
    as_decode |= (role == _UNKNOWN) & only_decode[:, None]
    if not (decoding.any() or as_decode.any() or as_prefill.any()):
        return grid, ()
    new_role = grid.role.copy()
    new_role[rows] = np.where(decoding | as_decode, _DECODE, np.where(as_prefill, _PREFILL, role))
    notes = [
        f"{grid.workers[row]} is labelled prefill but generated "
        f"{generated[i][decoding[i]].sum() / prompt[i][decoding[i]].sum():.2f} tokens per prompt token in "
        f"{int(decoding[i].sum())} buckets, as a decode worker does: counted as decode there"
        for i, row in enumerate(rows)
        if decoding[i].any()
    ]
    notes += [_unlabelled_note(grid.workers[row], as_prefill[i], as_decode[i]) for i, row in enumerate(rows)]
    notes = [note for note in notes if note]
    return replace(grid, role=new_role), tuple(notes)


def _decoding_share(prompt: FloatArray, generated: FloatArray, keeps: npt.NDArray[np.bool_]) -> FloatArray:
    """Per bucket, the tokens per prompt token above which a worker decodes: ``DECODE_OVER_PREFILL_OUTPUT``
    times what the pool's prefill legs keeping the one-token convention generate (their median there, else
    over every bucket), never above ``MAX_PREFILL_OUTPUT_SHARE``."""
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(keeps, generated / np.where(prompt > 0, prompt, np.nan), np.nan)
    overall = float(np.nanmedian(share[keeps]))
    seen = keeps.any(axis=0)
    per_bucket = np.full(prompt.shape[1], overall)
    if seen.any():
        per_bucket[seen] = np.nanmedian(share[:, seen], axis=0)
    return np.minimum(MAX_PREFILL_OUTPUT_SHARE, DECODE_OVER_PREFILL_OUTPUT * per_bucket)[None, :]


def _unlabelled_note(worker: str, prefill: npt.NDArray[np.bool_], decode: npt.NDArray[np.bool_]) -> str:
    """What a worker that reports no role was counted as ("" where it served nothing)."""
    if prefill.any() != decode.any():
        phase = "prefill" if prefill.any() else "decode"
        return f"{worker} reports no role; its counters are a {phase} worker's: counted as {phase}"
    if not prefill.any():
        return ""
    return (
        f"{worker} reports no role; its counters are a prefill worker's in {int(prefill.sum())} buckets "
        f"and a decode worker's in {int(decode.sum())}: counted so there"
    )


def role_transitions(role: npt.NDArray[np.int8]) -> npt.NDArray[np.bool_]:
    """Per bucket (columns of ``role``: workers x buckets, -1 where silent): whether some worker's role
    there differs from its role in the bucket before or after (the change lies in one of the two)."""
    out = np.zeros(role.shape[1], dtype=bool)
    if role.shape[1] < 2:
        return out
    both = (role[:, 1:] >= 0) & (role[:, :-1] >= 0)
    changed = (both & (role[:, 1:] != role[:, :-1])).any(axis=0)
    out[1:] |= changed
    out[:-1] |= changed
    return out


def pool_traffic(pool: Pool, grid: WorkerGrid) -> PoolTraffic:
    """The pool's per-bucket traffic from its workers' engine counters."""
    rows = np.array(pool.members, dtype=np.int64)
    role = grid.role[rows]
    prompt = grid.rate(grid.prompt_tokens[rows], rows)
    generated = grid.rate(grid.generation_tokens[rows], rows)
    reporting = grid.engine_s[rows] > 0

    def total(values: FloatArray, mask: npt.NDArray[np.bool_]) -> FloatArray:
        summed: FloatArray = np.where(mask & reporting, np.nan_to_num(values), 0.0).sum(axis=0)
        return summed

    prefill, decode, mixed = role == _PREFILL, role == _DECODE, role == _MIXED
    prompt_rate = total(prompt, prefill) + total(prompt, mixed)
    output_rate = total(generated, decode) + total(generated, mixed)
    prefill_prompt = total(prompt, prefill)
    prefill_output = total(generated, prefill)
    has_prefill = prefill_prompt > 0
    share = (
        float(prefill_output[has_prefill].sum() / prefill_prompt[has_prefill].sum())
        if has_prefill.any()
        else 1.0
    )
    counted = (
        bool(has_prefill.any()) and 0.0 < share <= MAX_PREFILL_OUTPUT_SHARE and not (mixed & reporting).any()
    )
    requests = (
        np.where(has_prefill & (prefill_output > 0), prefill_output, np.nan)
        if counted
        else np.full(grid.shape[1], np.nan)
    )
    # A bucket where a worker changes role holds counters of both roles under one (a rollup keeps one role
    # per bucket): its tokens cannot be told apart by phase, so it says nothing of the mix.
    mixed_up = role_transitions(role)
    clean_prompt = np.where(mixed_up, np.nan, prompt_rate)
    decode_prompt = np.where(mixed_up | ~(decode & reporting).any(axis=0), np.nan, total(prompt, decode))
    return PoolTraffic(
        pool=pool.key,
        bucket_start=grid.bucket_start,
        bucket_s=grid.bucket_s,
        prompt_rate=clean_prompt,
        output_rate=np.where(mixed_up, np.nan, output_rate),
        request_rate=np.where(mixed_up, np.nan, requests),
        prefill_workers=(prefill & reporting).sum(axis=0).astype(np.float64),
        decode_workers=(decode & reporting).sum(axis=0).astype(np.float64),
        mixed_workers=(mixed & reporting).sum(axis=0).astype(np.float64),
        requests_counted=counted,
        decode_prompt_rate=decode_prompt if counts_whole_prompts(clean_prompt, decode_prompt) else None,
    )
