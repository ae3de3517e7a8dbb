"""KV fabric under-provisioned: the KV cache prefill hands to decode at peak needs more than the link
each prefill worker has (its share of the RDMA NICs, set by the operator; unset: the need without a
verdict)."""

from __future__ import annotations

from dataclasses import dataclass

from analyzer.findings.base import Check, FindingInputs
from analyzer.findings.pool_condition import SegmentChecks, checked_segments, failed, pool_finding
from analyzer.model.roofline import kv_bytes_per_sequence
from analyzer.pools.analysis import PoolAnalysis, SegmentAnalysis
from analyzer.tunable import tunable
from fleet.contract import Finding, FindingKind

KINDS = (FindingKind.KV_FABRIC_UNDERPROVISIONED,)


@dataclass(frozen=True)
class KvFabricParams:
    link_bytes_per_s: float | None = tunable(
        None,
        "KV-transfer bandwidth per prefill worker in bytes/s (PHASEFIT_ANALYZER_KV_LINK_GB_S sets it in "
        "GB/s); it also bounds each disaggregated prefill worker's capacity; null: the check reports the "
        "need without a verdict.",
    )
    alert_share: float = tunable(0.8, "The share of that link the KV handoff may use at peak.")

    def __post_init__(self) -> None:
        if self.link_bytes_per_s is not None and not self.link_bytes_per_s > 0:
            raise ValueError(f"link_bytes_per_s must be positive, got {self.link_bytes_per_s}")
        if not 0 < self.alert_share <= 1:
            raise ValueError(f"alert_share must lie in (0, 1], got {self.alert_share}")


def kv_handoff_check(
    analysis: PoolAnalysis, segment: SegmentAnalysis, p: KvFabricParams | None = None
) -> Check:
    """KV bytes/s one prefill worker hands to decode at peak (prompt tokens/s x KV bytes per token) against
    the link each prefill worker has."""
    p = p or KvFabricParams()
    prefill_workers = sum(1 for role in segment.roles.values() if role == "prefill")
    deployments = [g.deployment for g in analysis.pool.groups if g.deployment is not None]
    if not prefill_workers or not deployments or not segment.mix.isl > 0:
        return Check(
            "kv-handoff", None, p.link_bytes_per_s, None, "no disaggregated prefill to hand off from"
        )
    d = deployments[0]
    per_token = kv_bytes_per_sequence(d, max(1, round(segment.mix.isl))) / max(1.0, segment.mix.isl)
    mix = segment.mix
    peak_prompt = analysis.traffic.peak(segment.first, segment.last) * mix.isl / (mix.isl + mix.osl)
    need = peak_prompt / prefill_workers * per_token
    if p.link_bytes_per_s is None:
        return Check(
            "kv-handoff",
            need,
            None,
            None,
            f"{need / 1e9:,.2f} GB/s of KV per prefill worker at peak; link capacity not configured "
            "(PHASEFIT_ANALYZER_KV_LINK_GB_S)",
        )
    limit = p.link_bytes_per_s * p.alert_share
    return Check(
        "kv-handoff",
        need,
        limit,
        need <= limit,
        f"{need / 1e9:,.2f} GB/s of KV per prefill worker at peak against a "
        f"{p.link_bytes_per_s / 1e9:,.1f} GB/s link",
    )


def detect(inputs: FindingInputs, checks: SegmentChecks) -> list[Finding]:
    out: list[Finding] = []
    for analysis in inputs.analyses:
        segments = checked_segments(analysis, checks)
        flags = [failed(c, "kv-handoff") for c in segments]
        out += pool_finding(KINDS[0], analysis, flags, segments, ("kv-handoff",), "investigate")
    return out
