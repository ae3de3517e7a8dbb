"""A pool-level finding from computed checks: the latest run of segments where a condition held."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from analyzer.findings.base import Check, finite, latest_run, utc
from analyzer.pools.analysis import PoolAnalysis, SegmentAnalysis
from fleet.contract import Finding, FindingKind, FindingStatus, Recommendation, Severity

Checks = Mapping[str, Check]
# A segment's rules of thumb, at the analysis' parameters (analyzer.findings.registry.rules_of_thumb).
SegmentChecks = Callable[[PoolAnalysis, SegmentAnalysis], Sequence[Check]]


def checked_segments(analysis: PoolAnalysis, checks: SegmentChecks) -> list[dict[str, Check]]:
    """The checks of each segment by name; none for a segment whose capacity could not be estimated."""
    return [
        {c.name: c for c in checks(analysis, s)} if s.capacity_tokens_per_s > 0 else {}
        for s in analysis.segments
    ]


def failed(checks: Checks, name: str) -> bool:
    check = checks.get(name)
    return check is not None and check.passed is False


def pool_finding(
    kind: FindingKind,
    analysis: PoolAnalysis,
    flags: Sequence[bool],
    checks: Sequence[Checks],
    names: Sequence[str],
    action: str,
    extra: Callable[[int], Mapping[str, float | str | None]] | None = None,
) -> list[Finding]:
    """One warning over the latest run of flagged segments, its evidence the named checks of the run's last
    segment (plus ``extra(last)``), its recommendation the first named check's detail."""
    run = latest_run(flags)
    if run is None:
        return []
    first, last = run[0], run[1] - 1
    segment = analysis.segments[last]
    evidence: dict[str, float | str | None] = {}
    for name in names:
        check = checks[last].get(name)
        if check is not None:
            evidence[name] = check.value
            evidence[f"{name}_detail"] = check.detail
    if extra is not None:
        evidence.update(extra(last))
    return [
        Finding(
            kind=kind,
            pool=analysis.pool.key,
            severity=Severity.WARNING,
            status=FindingStatus.OPEN if last == len(analysis.segments) - 1 else FindingStatus.RESOLVED,
            evidence=evidence,
            tokens_per_s=finite(segment.mix.tokens_rate),  # None where the segment's traffic is unknown
            recommendation=Recommendation(
                action=action, detail=str(evidence.get(f"{names[0]}_detail", ""))[:2000]
            ),
            first_seen=utc(analysis.segments[first].start),
            last_seen=utc(segment.end),
        )
    ]
