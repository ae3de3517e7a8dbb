"""Telemetry degraded: the worker's GPUs are lost (Xid 79), marked degraded, silent while the engine
reports, or report utilisation only (no profiling counters), for a share of the range or throughout the
latest buckets: its bottleneck cannot be measured there. A lost GPU is reported however briefly it was lost:
it is a hardware fault, not a gap."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analyzer.findings.base import FindingInputs, latest_run, utc
from analyzer.telemetry.bottleneck import EVIDENCE
from analyzer.telemetry.gpu_view import PROFILING_HELP
from analyzer.tunable import tunable
from fleet.contract import (
    ActivityEvidence,
    Bottleneck,
    Finding,
    FindingKind,
    FindingStatus,
    Recommendation,
    Severity,
)
from fleet.gpus import UNKNOWN_SKU_KEY

KINDS = (FindingKind.TELEMETRY_DEGRADED,)
_UTILISATION_ONLY = "utilisation only (no profiling counters)"
_SILENT = "no GPU telemetry while the engine reports"
_NOT_JOINED = "no GPU joined to this engine"


@dataclass(frozen=True)
class DegradedParams:
    share: float = tunable(0.25, "A worker whose telemetry is degraded for at least this share of the range.")
    latest_buckets: int = tunable(3, "...or throughout this many of the latest buckets.")
    bucket_share: float = tunable(
        0.5, "A bucket counts as lost or degraded when its GPUs were so for at least this share of it."
    )

    def __post_init__(self) -> None:
        if self.latest_buckets < 1:
            raise ValueError(f"latest_buckets must be at least 1, got {self.latest_buckets}")


def detect(inputs: FindingInputs, p: DegradedParams) -> list[Finding]:
    grid, bottlenecks = inputs.grid, inputs.bottlenecks
    lost = np.nan_to_num(grid.lost_share) >= p.bucket_share
    degraded = np.nan_to_num(grid.degraded_share) >= p.bucket_share
    silent = (grid.gpu_s <= 0) & (grid.engine_s > 0)
    evidence = np.zeros(grid.shape, dtype=np.int8)
    rows = {w: i for i, w in enumerate(bottlenecks.workers)}
    order = np.array([rows.get(w, -1) for w in grid.workers], dtype=np.int64)
    valid = order >= 0
    evidence[valid] = bottlenecks.evidence[order[valid]]
    basic = evidence == EVIDENCE.index(ActivityEvidence.UTILISATION)
    flagged = lost | degraded | silent | basic
    out: list[Finding] = []
    n = grid.shape[1]
    tail = min(p.latest_buckets, n)
    for row, ctx in inputs.context.items():
        share = float(flagged[row].mean())
        # A lost GPU (Xid 79) is a hardware fault whatever its length: it is reported even where it was
        # short and has recovered (status resolved), unlike a gap or a missing field, which must last.
        if share < p.share and not bool(flagged[row, n - tail :].all()) and not bool(lost[row].any()):
            continue
        run = latest_run(flagged[row])
        if run is None:
            continue
        first, last = run
        what = {
            "GPU lost (Xid 79 / GPU_IS_LOST)": float(lost[row].mean()),
            "GPU samples marked degraded": float(degraded[row].mean()),
            _SILENT: float(silent[row].mean()),
            _UTILISATION_ONLY: float(basic[row].mean()),
        }
        main = max(what, key=lambda k: what[k])
        cause = _cause(main, ctx.sku)
        lost_now = bool(lost[row, n - tail :].any())
        out.append(
            Finding(
                kind=FindingKind.TELEMETRY_DEGRADED,
                worker_id=grid.workers[row],
                pool=ctx.pool,
                # A lost GPU pages through the collector's PhasefitGpuLost alert; here it is the analyzer
                # losing its evidence, never a critical finding on its own.
                severity=Severity.WARNING if lost_now or main != _UTILISATION_ONLY else Severity.INFO,
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
                        f"{grid.workers[row]}: {cause} for {share:.0%} of the range; its bottleneck "
                        f"cannot be measured there{_fix(main, ctx.sku)}"
                    ),
                ),
                first_seen=utc(float(grid.bucket_start[first])),
                last_seen=utc(float(grid.bucket_start[last - 1] + grid.bucket_s)),
            )
        )
    return out


def _cause(main: str, sku: str) -> str:
    """The main cause in words: an engine with no GPU at all is a failed join, not silent GPUs."""
    return _NOT_JOINED if main == _SILENT and sku == UNKNOWN_SKU_KEY else main


def _fix(main: str, sku: str) -> str:
    """What to do about it, where phasefit knows."""
    if main == _UTILISATION_ONLY:
        return f"; {PROFILING_HELP}"
    if main == _SILENT and sku == UNKNOWN_SKU_KEY:
        return (
            "; neither a GPU reporting this engine's id nor a dcgm-exporter series naming its pod was found "
            "(the analyze warnings say what was tried): give dcgm-exporter's series pod/namespace labels "
            "(Kubernetes pod mapping) or run the phasefit collector on the node"
        )
    return ""
