"""Role drift: a stable measured bottleneck contradicts the worker's role (a prefill worker memory-bound, a
decode worker compute-bound) for long enough at a confident verdict: the counters are the evidence, the
role label only a prior."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from analyzer.findings.base import FindingInputs, utc
from analyzer.telemetry.bottleneck import BOTTLENECKS, BottleneckGrid, episodes
from analyzer.telemetry.frames import ROLES
from analyzer.tunable import tunable
from fleet.contract import Bottleneck, Finding, FindingKind, FindingStatus, Recommendation, Role, Severity

KINDS = (FindingKind.ROLE_DRIFT,)
_CONTRADICTS = {Role.PREFILL: Bottleneck.MEMORY_BANDWIDTH, Role.DECODE: Bottleneck.COMPUTE}


@dataclass(frozen=True)
class RoleDriftParams:
    hours: float = tunable(6.0, "Hours a contradicting verdict must hold before it is a role drift.")
    confidence: float = tunable(
        0.6,
        "The verdict's confidence a role drift needs (busy-time counters reach 0.4 at most: never enough).",
    )


def detect(inputs: FindingInputs, p: RoleDriftParams) -> list[Finding]:
    grid, context = inputs.grid, inputs.context
    end = float(grid.bucket_start[-1] + grid.bucket_s)
    rows = {w: i for i, w in enumerate(grid.workers)}
    latest: dict[str, Finding] = {}
    for episode in episodes(_contradicting(inputs.bottlenecks, p.hours)):
        row = rows.get(episode.worker_id)
        if row is None or row not in context or _CONTRADICTS.get(episode.role) is not episode.bottleneck:
            continue
        if (episode.end - episode.start) / 3600.0 < p.hours or episode.confidence < p.confidence:
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
            first_seen=utc(episode.start),
            last_seen=utc(episode.end),
        )
    return list(latest.values())


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
