"""Time bucketing for the read API (pure functions over the store's columns).

Buckets are aligned to multiples of ``step`` since the Unix epoch (as Prometheus aligns ranges), so pages and
repeated queries agree. Raw samples and rollup rows are first normalised to the same partial aggregates
(counts, sums, weighted means, maxima) and then merged per bucket; a raw query without a step returns every
sample as its own point.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

# A bucket width from one second to about three centuries, as its text says (so the OpenAPI document says it
# too): a number from 1 up with at most 10 integer digits in seconds (unit s or none), 8 in m, 6 in h, 5 in d,
# or from 1000 up with at most 13 in ms. Buckets align to multiples of the step since the epoch, so a range
# starting just before 1970 begins a step earlier: bounded, that start stays inside the calendar.
STEP_PATTERN = (
    r"^(?:[1-9][0-9]{0,9}(?:\.[0-9]+)?s?|[1-9][0-9]{0,7}(?:\.[0-9]+)?m|[1-9][0-9]{0,5}(?:\.[0-9]+)?h"
    r"|[1-9][0-9]{0,4}(?:\.[0-9]+)?d|[1-9][0-9]{3,12}(?:\.[0-9]+)?ms)$"
)
_STEP = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h|d)?")
_STEP_TEXT = re.compile(STEP_PATTERN)
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}

Columns = dict[str, list[Any]]


def parse_step(text: str) -> float:
    """``30``, ``30s``, ``5m``, ``1h``, ``1d`` (and ``1500ms``) to seconds; ValueError otherwise (also below
    one second, which :data:`STEP_PATTERN` already refuses)."""
    match = _STEP.fullmatch(text)
    if match is None:
        raise ValueError(f"step {text!r} is not a duration such as 60, 30s, 5m, 1h or 1d")
    seconds = float(match[1]) * _UNITS[match[2]]
    if not seconds >= 1.0:
        raise ValueError(f"step {text!r} is shorter than one second")
    if _STEP_TEXT.fullmatch(text) is None:
        raise ValueError(
            f"step {text!r} must start with a digit from 1 (30m, not 0.5h) and span at most about three "
            "centuries (10 integer digits in s, 8 in m, 6 in h, 5 in d, 13 in ms)"
        )
    return seconds


def bucket_start(ts: float, step: float) -> float:
    return math.floor(ts / step) * step


def to_datetime(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


def rows(columns: Columns) -> Iterator[dict[str, Any]]:
    names = list(columns)
    for values in zip(*(columns[name] for name in names), strict=True):
        yield dict(zip(names, values, strict=True))


P90_COLUMNS = ("ttft_p90_s", "tpot_p90_s", "e2e_p90_s")  # an engine point's: the mean of its windows'


@dataclass
class _Mean:
    total: float = 0.0
    weight: float = 0.0

    def add(self, value: float | None, weight: float = 1.0) -> None:
        if value is not None and weight > 0:
            self.total += value * weight
            self.weight += weight

    def value(self) -> float | None:
        return self.total / self.weight if self.weight > 0 else None


def _max(current: Any, value: Any) -> Any:
    if value is None:
        return current
    return value if current is None or value > current else current


@dataclass
class _EngineBucket:
    ts: float
    samples: int = 0
    window_s: float = 0.0
    role: str | None = None
    prompt_tokens: int = 0
    generation_tokens: int = 0
    preemptions: int | None = None
    running: _Mean = field(default_factory=_Mean)
    waiting: _Mean = field(default_factory=_Mean)
    kv: _Mean = field(default_factory=_Mean)
    ttft_p99_s: float | None = None
    tpot_p99_s: float | None = None
    p90s: dict[str, _Mean] = field(default_factory=lambda: {c: _Mean() for c in P90_COLUMNS})

    def point(self) -> dict[str, Any]:
        per_s = self.window_s if self.window_s > 0 else None
        return {
            "ts": to_datetime(self.ts), "samples": self.samples, "window_s": self.window_s, "role": self.role,
            "prompt_tokens": self.prompt_tokens, "generation_tokens": self.generation_tokens,
            "prompt_tokens_per_s": self.prompt_tokens / per_s if per_s else None,
            "generation_tokens_per_s": self.generation_tokens / per_s if per_s else None,
            "requests_running": self.running.value(), "requests_waiting": self.waiting.value(),
            "kv_cache_usage": self.kv.value(), "preemptions": self.preemptions,
            "ttft_p99_s": self.ttft_p99_s, "tpot_p99_s": self.tpot_p99_s,
            **{column: mean.value() for column, mean in self.p90s.items()},
        }  # fmt: skip


def engine_points(columns: Columns, step: float | None, *, rollup: bool) -> list[dict[str, Any]]:
    """Engine points of one worker: every raw sample (no step) or one per bucket."""
    buckets: dict[float, _EngineBucket] = {}
    for row in rows(columns):
        ts = row["ts"] if step is None else bucket_start(row["ts"], step)
        bucket = buckets.get(ts)
        if bucket is None:
            bucket = buckets[ts] = _EngineBucket(ts)
        n = int(row["samples"]) if rollup else 1
        bucket.samples += n
        bucket.window_s += float(row["window_s_sum"] if rollup else row["window_s"])
        bucket.role = row["role"] or bucket.role
        bucket.prompt_tokens += int(row["prompt_tokens_sum" if rollup else "prompt_tokens"])
        bucket.generation_tokens += int(row["generation_tokens_sum" if rollup else "generation_tokens"])
        preemptions = row["preemptions_sum" if rollup else "preemptions"]
        if preemptions is not None:
            bucket.preemptions = (bucket.preemptions or 0) + int(preemptions)
        suffix = "_avg" if rollup else ""
        bucket.running.add(row[f"requests_running{suffix}"], n)
        bucket.waiting.add(row[f"requests_waiting{suffix}"], n)
        bucket.kv.add(row[f"kv_cache_usage{suffix}"], n)
        bucket.ttft_p99_s = _max(bucket.ttft_p99_s, row["ttft_p99_s_max" if rollup else "ttft_p99_s"])
        bucket.tpot_p99_s = _max(bucket.tpot_p99_s, row["tpot_p99_s_max" if rollup else "tpot_p99_s"])
        for column, mean in bucket.p90s.items():
            mean.add(row.get(f"{column}{suffix}"), n)
    return [buckets[ts].point() for ts in sorted(buckets)]


@dataclass
class _GpuBucket:
    ts: float
    gpu_uuid: str
    samples: int = 0
    means: dict[str, _Mean] = field(default_factory=dict)
    mem_used_bytes: int | None = None
    lost_samples: int = 0
    degraded_samples: int = 0

    def point(self) -> dict[str, Any]:
        point: dict[str, Any] = {
            "ts": to_datetime(self.ts),
            "gpu_uuid": self.gpu_uuid,
            "samples": self.samples,
        }
        for name in _GPU_MEANS:
            mean = self.means.get(name)
            point[name] = mean.value() if mean is not None else None
        point.update(
            mem_used_bytes=self.mem_used_bytes,
            lost_samples=self.lost_samples,
            degraded_samples=self.degraded_samples,
        )
        return point


_GPU_MEANS = ("sm_active", "tensor_active", "dram_active", "gpu_util", "power_w")


def gpu_points(columns: Columns, step: float | None, *, rollup: bool) -> list[dict[str, Any]]:
    """GPU points of one worker's GPUs, ordered by (ts, gpu_uuid)."""
    buckets: dict[tuple[float, str], _GpuBucket] = {}
    for row in rows(columns):
        ts = row["ts"] if step is None else bucket_start(row["ts"], step)
        key = (ts, row["gpu_uuid"])
        bucket = buckets.get(key)
        if bucket is None:
            bucket = buckets[key] = _GpuBucket(ts, row["gpu_uuid"])
        n = int(row["samples"]) if rollup else 1
        bucket.samples += n
        for name in _GPU_MEANS:
            bucket.means.setdefault(name, _Mean()).add(row[f"{name}_avg" if rollup else name], n)
        bucket.mem_used_bytes = _max(
            bucket.mem_used_bytes, row["mem_used_bytes_max" if rollup else "mem_used_bytes"]
        )
        if rollup:
            bucket.lost_samples += int(row["lost_samples"])
            bucket.degraded_samples += int(row["degraded_samples"])
        else:
            bucket.lost_samples += row["state"] == "lost"
            bucket.degraded_samples += row["state"] == "degraded"
    return [buckets[key].point() for key in sorted(buckets)]


def cut_page(
    engine: list[dict[str, Any]], gpus: list[dict[str, Any]], limit: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], datetime | None]:
    """The points of the first ``limit`` distinct timestamps, and the timestamp the next page starts at."""
    stamps = sorted({p["ts"] for p in engine} | {p["ts"] for p in gpus})
    if len(stamps) <= limit:
        return engine, gpus, None
    cut = stamps[limit]
    return [p for p in engine if p["ts"] < cut], [p for p in gpus if p["ts"] < cut], cut


@dataclass(frozen=True)
class Episode:
    """A span during which a subject (worker or pool) lost tokens at a rate."""

    subject: str
    pool: str | None
    start: float
    end: float
    lost: float
    low: float | None  # None: the finding did not say
    high: float | None
    output: float | None = None  # lost output tokens/s (None: the finding did not say)
    requests: float | None = None  # lost requests/s


def _known_sum(values: Iterable[float | None]) -> float | None:
    """The sum, or None when any term is unknown (an unknown is never counted as 0)."""
    total = 0.0
    for value in values:
        if value is None:
            return None
        total += value
    return total


def lost_from_episodes(
    episodes: Sequence[Episode], start: float, end: float, step: float
) -> list[dict[str, Any]]:
    """Per bucket: per subject the largest loss among its episodes overlapping it, summed over subjects."""
    starts = list(_bucket_starts(start, end, step))
    chosen: list[dict[str, Episode]] = [{} for _ in starts]
    if starts:
        first_bucket = starts[0]
        for episode in episodes:
            first = max(0, math.floor((episode.start - first_bucket) / step))
            last = min(len(starts) - 1, math.floor((episode.end - first_bucket) / step))
            for i in range(first, last + 1):
                known = chosen[i].get(episode.subject)
                if known is None or episode.lost > known.lost:
                    chosen[i][episode.subject] = episode
    points = []
    for b, per_subject in zip(starts, chosen, strict=True):
        picked = list(per_subject.values())
        pools: dict[str, float] = {}
        for episode in picked:
            pool = episode.pool or "unpooled"
            pools[pool] = pools.get(pool, 0.0) + episode.lost
        points.append({
            "ts": to_datetime(b),
            "lost_tokens_per_s": sum(e.lost for e in picked) if picked else None,
            "lost_tokens_per_s_low": _known_sum(e.low for e in picked) if picked else None,
            "lost_tokens_per_s_high": _known_sum(e.high for e in picked) if picked else None,
            "lost_output_tokens_per_s": _known_sum(e.output for e in picked) if picked else None,
            "lost_requests_per_s": _known_sum(e.requests for e in picked) if picked else None,
            "pools": dict(sorted(pools.items())),
        })  # fmt: skip
    return points


@dataclass(frozen=True)
class RunTotals:
    """One analyzer run's fleet and per-pool lost tokens."""

    at: float
    lost: float | None
    low: float | None
    high: float | None
    pools: dict[str, float]
    output: float | None = None
    requests: float | None = None


def lost_from_runs(runs: Iterable[RunTotals], start: float, end: float, step: float) -> list[dict[str, Any]]:
    """Per bucket: the mean over the analyzer runs that finished in it (null when none did)."""
    grouped: dict[float, list[RunTotals]] = {}
    for run in runs:
        grouped.setdefault(bucket_start(run.at, step), []).append(run)
    points = []
    for b in _bucket_starts(start, end, step):
        group = grouped.get(b, [])
        pools: dict[str, _Mean] = {}
        for run in group:
            for pool, lost in run.pools.items():
                pools.setdefault(pool, _Mean()).add(lost)
        points.append({
            "ts": to_datetime(b),
            "lost_tokens_per_s": _mean(run.lost for run in group),
            "lost_tokens_per_s_low": _mean(run.low for run in group),
            "lost_tokens_per_s_high": _mean(run.high for run in group),
            "lost_output_tokens_per_s": _mean(run.output for run in group),
            "lost_requests_per_s": _mean(run.requests for run in group),
            "pools": {pool: mean.value() or 0.0 for pool, mean in sorted(pools.items())},
        })  # fmt: skip
    return points


def _mean(values: Iterable[float | None]) -> float | None:
    mean = _Mean()
    for value in values:
        mean.add(value)
    return mean.value()


def _bucket_starts(start: float, end: float, step: float) -> Iterator[float]:
    b = bucket_start(start, step)
    while b < end:
        yield b
        b += step
