"""Healthy but not serving: the engine reports (it is up), its GPUs are not lost, its pool serves tokens,
and it served none for several buckets in a row: often a worker the router lost."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analyzer.findings.base import FindingInputs, latest_run, nanmedian, utc
from analyzer.tunable import tunable
from fleet.contract import Bottleneck, Finding, FindingKind, FindingStatus, Recommendation, Severity

KINDS = (FindingKind.HEALTHY_NOT_SERVING,)


@dataclass(frozen=True)
class NotServingParams:
    buckets: int = tunable(
        2, "Buckets in a row a healthy worker served nothing while its pool served traffic."
    )
    lost_share: float = tunable(
        0.5, "A bucket whose GPUs were lost for at least this share of it is not a healthy one."
    )

    def __post_init__(self) -> None:
        if self.buckets < 1:
            raise ValueError(f"buckets must be at least 1, got {self.buckets}")


def detect(inputs: FindingInputs, p: NotServingParams) -> list[Finding]:
    grid, context = inputs.grid, inputs.context
    up = grid.engine_s > 0
    alive = np.nan_to_num(grid.lost_share) < p.lost_share
    served = (grid.prompt_tokens + grid.generation_tokens) > 0
    out: list[Finding] = []
    pools: dict[str, list[int]] = {}
    for row, ctx in context.items():
        pools.setdefault(ctx.pool, []).append(row)
    for rows in pools.values():
        pool_serves = served[rows].sum(axis=0) > 0
        for row in rows:
            run = latest_run(up[row] & alive[row] & ~served[row] & pool_serves)
            if run is None or run[1] - run[0] < p.buckets:
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
                        "requests_running": nanmedian(grid.running[row, first:last]),
                        "requests_waiting": nanmedian(grid.waiting[row, first:last]),
                        "gpu_util": nanmedian(grid.gpu_util[row, first:last]),
                        "mem_used_bytes": nanmedian(grid.mem_used_bytes[row, first:last]),
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
                    first_seen=utc(float(grid.bucket_start[first])),
                    last_seen=utc(float(grid.bucket_start[last - 1] + grid.bucket_s)),
                )
            )
    return out
