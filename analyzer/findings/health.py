"""Per-worker findings that need no placement model: role drift, healthy but not serving, degraded telemetry.

- Role drift: a stable measured bottleneck that contradicts the worker's role (a prefill worker
  memory-bound, a decode worker compute-bound) for at least ``role_drift_hours`` at a confident verdict:
  the counters are the evidence, the role label only a prior.
- Healthy but not serving: the engine reports (it is up), its GPUs are not lost, its pool serves tokens,
  and it served none for ``not_serving_buckets`` buckets in a row.
- Telemetry degraded: the worker's GPUs are lost (Xid 79), marked degraded, silent while the engine reports,
  or only report utilisation (no profiling counters: the bottleneck cannot be measured) for at least
  ``degraded_share`` of the range or throughout the latest ``latest_buckets``.

Each finding is the latest run of its condition, open when the run reaches the end of the range.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np
import numpy.typing as npt

from analyzer.telemetry.bottleneck import BOTTLENECKS, EVIDENCE, BottleneckGrid, episodes
from analyzer.telemetry.frames import ROLES
from analyzer.telemetry.grid import WorkerGrid
from fleet.contract import (
    ActivityEvidence,
    Bottleneck,
    Finding,
    FindingKind,
    FindingStatus,
    Recommendation,
    Role,
    Severity,
)

_CONTRADICTS = {Role.PREFILL: Bottleneck.MEMORY_BANDWIDTH, Role.DECODE: Bottleneck.COMPUTE}


@dataclass(frozen=True)
class HealthParams:
    role_drift_hours: float = 6.0
    role_drift_confidence: float = 0.6
    not_serving_buckets: int = 2
    degraded_share: float = 0.25
    latest_buckets: int = 3


@dataclass(frozen=True)
class WorkerContext:
    pool: str
    sku: str
    role: Role


def _ts(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, tz=UTC)


def _latest_run(flags: npt.NDArray[np.bool_]) -> tuple[int, int] | None:
    """[first, last) of the last run of True values."""
    hits = np.flatnonzero(flags)
    if not hits.size:
        return None
    last = int(hits[-1]) + 1
    breaks = np.flatnonzero(~flags[:last])
    first = int(breaks[-1]) + 1 if breaks.size else 0
    return first, last


def health_findings(
    grid: WorkerGrid,
    bottlenecks: BottleneckGrid,
    context: Mapping[int, WorkerContext],
    params: HealthParams | None = None,
) -> list[Finding]:
    p = params or HealthParams()
    out = _role_drift(grid, bottlenecks, context, p)
    out += _not_serving(grid, context, p)
    out += _degraded(grid, bottlenecks, context, p)
    return out


def _role_drift(
    grid: WorkerGrid, bottlenecks: BottleneckGrid, context: Mapping[int, WorkerContext], p: HealthParams
) -> list[Finding]:
    out: list[Finding] = []
    end = float(grid.bucket_start[-1] + grid.bucket_s)
    rows = {w: i for i, w in enumerate(grid.workers)}
    latest: dict[str, Finding] = {}
    for episode in episodes(_contradicting(bottlenecks, p.role_drift_hours)):
        row = rows.get(episode.worker_id)
        if row is None or row not in context or _CONTRADICTS.get(episode.role) is not episode.bottleneck:
            continue
        if (
            episode.end - episode.start
        ) / 3600.0 < p.role_drift_hours or episode.confidence < p.role_drift_confidence:
            continue
        ctx = context[row]
        evidence: dict[str, float | str | None] = dict(episode.evidence)
        evidence["confidence"] = round(episode.confidence, 3)
        evidence["reason"] = episode.reason
        evidence["hours"] = round((episode.end - episode.start) / 3600.0, 2)
        latest[episode.worker_id] = Finding(
            kind=FindingKind.ROLE_DRIFT,
            worker_id=episode.worker_id,
            pool=ctx.pool,
            severity=Severity.WARNING,
            status=FindingStatus.OPEN if episode.end >= end - 1.0 else FindingStatus.RESOLVED,
            gpu_sku=ctx.sku,
            role=episode.role,
            bottleneck=episode.bottleneck,
            evidence=evidence,
            recommendation=Recommendation(
                action="investigate",
                detail=(
                    f"{episode.worker_id} is labelled {episode.role} but its counters have read "
                    f"{episode.bottleneck}-bound for {evidence['hours']} h: check the traffic routed to it "
                    "and its role configuration"
                ),
            ),
            first_seen=_ts(episode.start),
            last_seen=_ts(episode.end),
        )
    out.extend(latest.values())
    return out


def _contradicting(bottlenecks: BottleneckGrid, hours: float) -> BottleneckGrid:
    """The rows of workers whose stable verdict contradicts their role for at least ``hours`` in all (only
    those can have a role-drift episode; episodes are costly to summarise for a whole fleet)."""
    prefill, decode = ROLES.index(Role.PREFILL), ROLES.index(Role.DECODE)
    memory, compute = BOTTLENECKS.index(Bottleneck.MEMORY_BANDWIDTH), BOTTLENECKS.index(Bottleneck.COMPUTE)
    against = ((bottlenecks.role == prefill) & (bottlenecks.stable == memory)) | (
        (bottlenecks.role == decode) & (bottlenecks.stable == compute)
    )
    keep = np.flatnonzero(against.sum(axis=1) * bottlenecks.window_s / 3600.0 >= hours)
    changes: dict[str, object] = {"workers": tuple(bottlenecks.workers[i] for i in keep)}
    for f in dataclasses.fields(bottlenecks):
        value = getattr(bottlenecks, f.name)
        if isinstance(value, np.ndarray) and value.ndim == 2:
            changes[f.name] = value[keep]
    return dataclasses.replace(bottlenecks, **changes)  # type: ignore[arg-type]


def _not_serving(grid: WorkerGrid, context: Mapping[int, WorkerContext], p: HealthParams) -> list[Finding]:
    up = grid.engine_s > 0
    alive = np.nan_to_num(grid.lost_share) < 0.5
    served = (grid.prompt_tokens + grid.generation_tokens) > 0
    out: list[Finding] = []
    pools: dict[str, list[int]] = {}
    for row, ctx in context.items():
        pools.setdefault(ctx.pool, []).append(row)
    for rows in pools.values():
        pool_serves = served[rows].sum(axis=0) > 0
        for row in rows:
            flags = up[row] & alive[row] & ~served[row] & pool_serves
            run = _latest_run(flags)
            if run is None or run[1] - run[0] < p.not_serving_buckets:
                continue
            first, last = run
            ctx = context[row]
            hours = (last - first) * grid.bucket_s / 3600.0
            out.append(
                Finding(
                    kind=FindingKind.HEALTHY_NOT_SERVING,
                    worker_id=grid.workers[row],
                    pool=ctx.pool,
                    severity=Severity.WARNING,
                    status=FindingStatus.OPEN if last == grid.shape[1] else FindingStatus.RESOLVED,
                    gpu_sku=ctx.sku,
                    role=ctx.role,
                    bottleneck=Bottleneck.UNDERUTILISED,
                    evidence={
                        "hours": hours,
                        "requests_running": _nanmedian(grid.running[row, first:last]),
                        "requests_waiting": _nanmedian(grid.waiting[row, first:last]),
                        "gpu_util": _nanmedian(grid.gpu_util[row, first:last]),
                        "mem_used_bytes": _nanmedian(grid.mem_used_bytes[row, first:last]),
                    },
                    tokens_per_s=0.0,
                    recommendation=Recommendation(
                        action="investigate",
                        detail=(
                            f"{grid.workers[row]} is up and holds its GPUs but served no tokens for "
                            f"{hours:.1f} h while its pool served traffic: check its registration with the "
                            "router"
                        ),
                    ),
                    first_seen=_ts(float(grid.bucket_start[first])),
                    last_seen=_ts(float(grid.bucket_start[last - 1] + grid.bucket_s)),
                )
            )
    return out


def _nanmedian(values: npt.NDArray[np.float64]) -> float | None:
    finite = values[np.isfinite(values)]
    return float(np.median(finite)) if finite.size else None


def _degraded(
    grid: WorkerGrid, bottlenecks: BottleneckGrid, context: Mapping[int, WorkerContext], p: HealthParams
) -> list[Finding]:
    lost = np.nan_to_num(grid.lost_share) >= 0.5
    degraded = np.nan_to_num(grid.degraded_share) >= 0.5
    silent = (grid.gpu_s <= 0) & (grid.engine_s > 0)
    evidence = np.zeros(grid.shape, dtype=np.int8)
    rows = {w: i for i, w in enumerate(bottlenecks.workers)}
    order = np.array([rows.get(w, -1) for w in grid.workers])
    valid = order >= 0
    evidence[valid] = bottlenecks.evidence[order[valid]]
    basic = evidence == EVIDENCE.index(ActivityEvidence.UTILISATION)
    flagged = lost | degraded | silent | basic
    out: list[Finding] = []
    n = grid.shape[1]
    tail = min(p.latest_buckets, n)
    for row, ctx in context.items():
        share = float(flagged[row].mean())
        now = bool(flagged[row, n - tail :].all())
        if share < p.degraded_share and not now:
            continue
        run = _latest_run(flagged[row])
        if run is None:
            continue
        first, last = run
        what = {
            "GPU lost (Xid 79 / GPU_IS_LOST)": float(lost[row].mean()),
            "GPU samples marked degraded": float(degraded[row].mean()),
            "no GPU telemetry while the engine reports": float(silent[row].mean()),
            "utilisation only (no profiling counters)": float(basic[row].mean()),
        }
        main = max(what, key=lambda k: what[k])
        lost_now = bool(lost[row, n - tail :].any())
        out.append(
            Finding(
                kind=FindingKind.TELEMETRY_DEGRADED,
                worker_id=grid.workers[row],
                pool=ctx.pool,
                # A lost GPU pages through the collector's PhasefitGpuLost alert; here it is the analyzer
                # losing its evidence, never a critical finding on its own.
                severity=Severity.WARNING if lost_now or main != list(what)[3] else Severity.INFO,
                status=FindingStatus.OPEN if last == n else FindingStatus.RESOLVED,
                gpu_sku=ctx.sku,
                role=ctx.role,
                bottleneck=Bottleneck.UNKNOWN,
                evidence={
                    **{f"share: {k}": round(v, 4) for k, v in what.items()},
                    "main": main,
                    "flagged_share": round(share, 4),
                },
                recommendation=Recommendation(
                    action="investigate",
                    detail=(
                        f"{grid.workers[row]}: {main} for {share:.0%} of the range; its bottleneck cannot be "
                        "measured there"
                    ),
                ),
                first_seen=_ts(float(grid.bucket_start[first])),
                last_seen=_ts(float(grid.bucket_start[last - 1] + grid.bucket_s)),
            )
        )
    return out
