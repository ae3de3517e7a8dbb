"""Every finding kind, its detector and its parameters, in one place.

A detector is a function of the analysis' inputs and this tree of parameters; each kind's module owns its
detection, thresholds and wording. :func:`rules_of_thumb` gathers the checks the pool-level kinds compute,
which the summary lists per pool.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from analyzer.findings import (
    kv_fabric,
    misplaced_worker,
    not_paying,
    not_serving,
    ratio_drift,
    role_drift,
    telemetry_degraded,
    underutilised,
)
from analyzer.findings.base import Check, FindingInputs
from analyzer.findings.loss import SeverityParams
from analyzer.findings.pool_condition import SegmentChecks
from analyzer.findings.recommend import RecommendParams
from analyzer.pools.analysis import PoolAnalysis, SegmentAnalysis
from fleet.contract import Finding, FindingKind


@dataclass(frozen=True)
class FindingParams:
    severity: SeverityParams = field(default_factory=SeverityParams)
    recommend: RecommendParams = field(default_factory=RecommendParams)
    underutilised: underutilised.UnderutilisedParams = field(
        default_factory=underutilised.UnderutilisedParams
    )
    not_paying: not_paying.NotPayingParams = field(default_factory=not_paying.NotPayingParams)
    kv_fabric: kv_fabric.KvFabricParams = field(default_factory=kv_fabric.KvFabricParams)
    role_drift: role_drift.RoleDriftParams = field(default_factory=role_drift.RoleDriftParams)
    not_serving: not_serving.NotServingParams = field(default_factory=not_serving.NotServingParams)
    telemetry_degraded: telemetry_degraded.DegradedParams = field(
        default_factory=telemetry_degraded.DegradedParams
    )


def rules_of_thumb(
    analysis: PoolAnalysis, segment: SegmentAnalysis, params: FindingParams | None = None
) -> list[Check]:
    """The rules of thumb computed for one segment of one pool, at these parameters."""
    p = params or FindingParams()
    checks = [
        not_paying.model_size_check(analysis, p.not_paying),
        not_paying.output_length_check(segment, p.not_paying),
        underutilised.utilisation_check(analysis, segment, p.underutilised),
        kv_fabric.kv_handoff_check(analysis, segment, p.kv_fabric),
        not_paying.colocated_check(analysis, segment, p.not_paying),
    ]
    return [c for c in checks if c is not None]


def _checks(p: FindingParams) -> SegmentChecks:
    return lambda analysis, segment: rules_of_thumb(analysis, segment, p)


@dataclass(frozen=True)
class Detector:
    kinds: tuple[FindingKind, ...]
    detect: Callable[[FindingInputs, FindingParams], list[Finding]]


DETECTORS: tuple[Detector, ...] = (
    Detector(misplaced_worker.KINDS, lambda i, p: misplaced_worker.detect(i, p.severity, p.recommend)),
    Detector(ratio_drift.KINDS, lambda i, p: ratio_drift.detect(i, p.severity)),
    Detector(underutilised.KINDS, lambda i, p: underutilised.detect(i, _checks(p))),
    Detector(kv_fabric.KINDS, lambda i, p: kv_fabric.detect(i, _checks(p))),
    Detector(not_paying.KINDS, lambda i, p: not_paying.detect(i, p.not_paying, _checks(p))),
    Detector(role_drift.KINDS, lambda i, p: role_drift.detect(i, p.role_drift)),
    Detector(not_serving.KINDS, lambda i, p: not_serving.detect(i, p.not_serving)),
    Detector(telemetry_degraded.KINDS, lambda i, p: telemetry_degraded.detect(i, p.telemetry_degraded)),
)


def detect_all(inputs: FindingInputs, params: FindingParams | None = None) -> list[Finding]:
    """Every registered detector's findings, in registry order."""
    p = params or FindingParams()
    return [finding for detector in DETECTORS for finding in detector.detect(inputs, p)]
