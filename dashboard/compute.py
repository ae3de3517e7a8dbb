"""Pure steps between the reads and the pages: tables, roofline points, ratio series, headline figures.

Kept out of the page scripts so they are typed, testable without Streamlit, and shared by the pages.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from analyzer.report.fleet_roofline import Roof, WorkerPoint, precision_of, roofs_for, worker_point
from analyzer.report.style import evidence_line, percent
from dashboard.views import (
    AnalysisView,
    FindingView,
    GpuGroup,
    Inventory,
    LostPoint,
    Scope,
    TrafficPoint,
    WorkerActivity,
    WorkerView,
)
from fleet.catalog import Catalog
from fleet.gpus import is_mig_key
from fleet.store.stored_summary import StoredPool, StoredSegment

MISPLACEMENT_KINDS = frozenset(
    {"decode-on-low-bandwidth", "prefill-on-high-bandwidth", "capacity-on-small-memory", "role-drift"}
)


def scoped_groups(inventory: Inventory, scope: Scope) -> list[GpuGroup]:
    """GPUs by SKU and role: the store's counts for the whole fleet, else the in-scope workers' GPUs."""
    if scope.cluster is None and scope.model is None:
        return list(inventory.groups)
    counts: Counter[tuple[str, str]] = Counter()
    for w in inventory.in_scope(scope):
        tp = w.record.tp
        if tp is not None:  # a worker whose GPUs nobody reported holds none we can count
            counts[(w.sku or "unresolved", w.record.role.value)] += tp
    return [GpuGroup(sku, role, "ok", n, mig=is_mig_key(sku)) for (sku, role), n in sorted(counts.items())]


def device_line(inventory: Inventory, groups: Sequence[GpuGroup], whole_fleet: bool) -> str:
    """Physical GPUs and MIG instances, counted apart (a GPU carved into seven instances is one GPU)."""
    whole = sum(g.gpus for g in groups if not g.mig)
    instances = sum(g.gpus for g in groups if g.mig)
    if not instances:
        return f"{whole:,} GPUs, no MIG instances"
    if not whole_fleet:
        return f"{whole:,} whole GPUs and {instances:,} MIG instances in the selection"
    physical = (
        f"{inventory.physical_gpus:,} physical GPUs"
        if inventory.physical_gpus is not None
        else "physical GPUs unknown (a MIG instance does not name its GPU)"
    )
    carved = (
        f" carved from {inventory.mig_parent_gpus:,} GPU(s)" if inventory.mig_parent_gpus is not None else ""
    )
    return f"{physical}: {whole:,} whole GPUs and {instances:,} MIG instances{carved}"


@dataclass(frozen=True)
class Headline:
    lost_output_now: float | None  # output (generated) tokens/s: what an SRE acts on
    lost_output_low: float | None
    lost_output_high: float | None
    lost_requests_now: float | None
    lost_now: float | None  # total (prompt + output) tokens/s: secondary
    lost_low: float | None
    lost_high: float | None
    lost_tokens_in_range: float | None  # total (prompt + output) tokens (not per second) over the range
    mean_lost: float | None
    efficiency: float | None  # current capacity / best placement's
    misplaced_workers: int
    open_findings: int
    open_by_severity: dict[str, int]
    source: str  # where "now" comes from
    judged_workers: int | None = None
    unjudged_workers: int | None = None
    unjudged_reasons: dict[str, int] = field(default_factory=dict)
    # Judged workers by what their verdict rests on: "profiling", "utilisation" (weaker), "engine".
    judged_by_evidence: dict[str, int] = field(default_factory=dict)
    capacity_unknown: bool = False  # the run has no fleet capacity or best (never shown as 0)
    # Output (generated) tokens lost over the range, from the hours whose output loss is known; None where
    # no hour knows it (the figure that leads; total tokens are secondary).
    lost_output_in_range: float | None = None
    lost_output_hours: int = 0  # hours it covers


def headline(
    analysis: AnalysisView | None, findings: Sequence[FindingView], lost: Sequence[LostPoint]
) -> Headline:
    open_findings = [f for f in findings if f.status == "open"]
    misplaced = {f.worker_id for f in open_findings if f.worker_id and f.kind in MISPLACEMENT_KINDS}
    severity = Counter(f.severity for f in open_findings)
    present = [p for p in lost if p.lost is not None]
    total = sum(float(p.lost or 0.0) * 3600.0 for p in present) if present else None
    mean_lost = total / (3600.0 * len(present)) if total is not None and present else None
    output_known = [p.output for p in lost if p.output is not None]
    output_total = sum(v * 3600.0 for v in output_known) if output_known else None
    fleet = analysis.fleet if analysis is not None else None
    if analysis is not None and fleet is not None:
        capacity, best = fleet.capacity_tokens_per_s, fleet.best_tokens_per_s
        return Headline(
            lost_output_now=fleet.lost.output_tokens_per_s.value,
            lost_output_low=fleet.lost.output_tokens_per_s.low,
            lost_output_high=fleet.lost.output_tokens_per_s.high,
            lost_requests_now=fleet.lost.requests_per_s.value,
            lost_now=fleet.lost.tokens_per_s.value,
            lost_low=fleet.lost.tokens_per_s.low,
            lost_high=fleet.lost.tokens_per_s.high,
            lost_tokens_in_range=total,
            mean_lost=mean_lost,
            efficiency=capacity / best if capacity and best else None,
            misplaced_workers=len(misplaced) if fleet.misplaced_workers is None else fleet.misplaced_workers,
            open_findings=len(open_findings),
            open_by_severity=dict(severity),
            source=f"analyzer run of {analysis.until:%Y-%m-%d %H:%M} UTC",
            judged_workers=fleet.judged_workers,
            unjudged_workers=fleet.unjudged_workers,
            unjudged_reasons=dict(fleet.unjudged_reasons),
            judged_by_evidence=dict(fleet.judged_by_evidence),
            capacity_unknown=capacity is None or best is None,
            lost_output_in_range=output_total,
            lost_output_hours=len(output_known),
        )
    last = present[-1] if present else None
    return Headline(
        lost_output_now=None,
        lost_output_low=None,
        lost_output_high=None,
        lost_requests_now=None,
        lost_now=last.lost if last else None,
        lost_low=last.low if last else None,
        lost_high=last.high if last else None,
        lost_tokens_in_range=total,
        mean_lost=mean_lost,
        efficiency=None,
        misplaced_workers=len(misplaced),
        open_findings=len(open_findings),
        open_by_severity=dict(severity),
        source="open findings (no analyzer run stored for this range)",
        lost_output_in_range=output_total,
        lost_output_hours=len(output_known),
    )


def _round(value: float | None, digits: int = 0) -> float | None:
    if value is None:
        return None
    return round(value, digits) if digits else float(round(value))


def total_lost(f: FindingView) -> float | None:
    """A finding's lost total (prompt + output) tokens/s, secondary; None where it states no loss: a finding
    that is not a throughput loss (telemetry degraded, not serving, ...) carries 0 total tokens/s beside a
    null output figure, and that 0 means unknown, never "loses nothing"."""
    if f.lost_output_tokens_per_s is None and f.lost_requests_per_s is None and not f.lost_tokens_per_s:
        return None
    return f.lost_tokens_per_s


def finding_rows(findings: Sequence[FindingView]) -> list[dict[str, Any]]:
    """One table row per finding, largest loss first: lost output tokens/s and requests/s first, total
    (prompt + output) tokens/s as the secondary column; None (an empty cell) where a finding is not a
    throughput loss."""
    rows = []
    for f in sorted(
        findings,
        key=lambda f: (
            -(f.lost_output_tokens_per_s or 0.0),
            f.lost_tokens_per_s is None,
            -(f.lost_tokens_per_s or 0.0),
            f.kind,
            f.subject,
        ),
    ):
        rows.append(
            {
                "worker": f.worker_id or "",
                "pool": f.pool or "",
                "kind": f.kind,
                "severity": f.severity,
                "SKU": f.gpu_sku or "",
                "role": f.role,
                "bottleneck": f.bottleneck,
                "lost output tok/s": _round(f.lost_output_tokens_per_s),
                "low": _round(f.lost_output_tokens_per_s_low),
                "high": _round(f.lost_output_tokens_per_s_high),
                "lost req/s": _round(f.lost_requests_per_s, 2),
                "total tok/s (secondary)": _round(total_lost(f)),
                "action": f.action or "",
                "expected gain tok/s": round(f.expected_gain_tokens_per_s)
                if f.expected_gain_tokens_per_s
                else None,
                "counterpart": f.counterpart_worker_id or "",
                "target SKU": f.target_sku or "",
                "evidence": evidence_line(f.evidence),
                "first seen": f.first_seen.strftime("%Y-%m-%d %H:%M"),
                "last seen": f.last_seen.strftime("%Y-%m-%d %H:%M"),
                "status": f.status,
                "detail": f.action_detail,
            }
        )
    return rows


@dataclass(frozen=True)
class RooflineView:
    roofs: list[Roof]
    points: list[WorkerPoint]
    undrawn: list[tuple[str, str]]  # (worker, why)


def roofline_view(
    workers: Sequence[WorkerView],
    activity: Sequence[WorkerActivity],
    findings: Sequence[FindingView],
    catalog: Catalog,
) -> RooflineView:
    """Every in-scope worker as a point on its SKU's roof, and the roofs of every SKU present."""
    by_worker = {a.worker_id: a for a in activity}
    misplaced = {f.worker_id for f in findings if f.status == "open" and f.kind in MISPLACEMENT_KINDS}
    points, undrawn = [], []
    pairs = set()
    for w in workers:
        precision = precision_of(w.record.precision)
        if w.sku:
            pairs.add((w.sku, precision))
        a = by_worker.get(w.record.worker_id)
        sku = catalog.gpus.lookup(w.sku) if w.sku else None
        point = (
            worker_point(
                worker_id=w.record.worker_id,
                pool=w.pool,
                sku=sku,
                role=w.record.role.value,
                precision=precision,
                tensor_active=a.tensor_active,
                dram_active=a.dram_active,
                misplaced=w.record.worker_id in misplaced,
                weight=a.gpu_hours,
            )
            if a is not None
            else None
        )
        if point is not None:
            points.append(point)
        elif a is None:
            undrawn.append((w.record.worker_id, "no GPU telemetry in the range"))
        elif sku is None:
            undrawn.append((w.record.worker_id, f"GPU model {w.sku or 'unknown'} has no catalog figures"))
        else:
            undrawn.append((w.record.worker_id, "no tensor or DRAM activity reported"))
    return RooflineView(roofs_for(catalog, sorted(pairs)), points, undrawn)


def point_rows(view: RooflineView) -> list[dict[str, Any]]:
    rows = []
    for p in sorted(view.points, key=lambda p: (not p.misplaced, p.pool, p.worker_id)):
        others = [r for r in view.roofs if r.sku != p.sku and r.precision == p.precision]
        best = max((p.gain_on(r) for r in others), default=None)
        rows.append(
            {
                "worker": p.worker_id,
                "pool": p.pool,
                "SKU": p.sku,
                "role": p.role,
                "intensity FLOP/B": round(p.intensity, 1),
                "TFLOP/s": round(p.flops / 1e12, 1),
                "tensor": percent(p.tensor_active),
                "DRAM": percent(p.dram_active),
                "of own roof": percent(p.share_of_roof),
                "bound": p.bound,
                "misplaced": p.misplaced,
                "other SKU's roof": f"{best:.2f}x" if best is not None else "-",
            }
        )
    return rows


def worker_capacities(pool: StoredPool) -> tuple[float, float] | None:
    """Per-worker prefill and decode tokens/s of the pool (worker-count weighted over its SKU groups whose
    counts and capacities are known)."""
    prefill = decode = weight = 0.0
    for group in (pool.recommended or {}).values():
        p, d = group.prefill_tokens_per_s_per_worker, group.decode_tokens_per_s_per_worker
        if group.prefill_now is None or group.decode_now is None or not (p and d):
            continue
        n = float(group.prefill_now + group.decode_now)
        prefill, decode, weight = prefill + p * n, decode + d * n, weight + n
    return (prefill / weight, decode / weight) if weight else None


def best_ratio(segment: StoredSegment) -> float | None:
    """The prefill:decode worker ratio of a segment's best placement; None where any count is unknown."""
    prefill = decode = 0
    for roles in (segment.best_placement or {}).values():
        if roles.prefill is None or roles.decode is None:
            return None
        prefill, decode = prefill + roles.prefill, decode + roles.decode
    return prefill / decode if decode else None


def ratio_series(
    traffic: Sequence[TrafficPoint], pool: StoredPool | None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Hourly prefill:decode ratios of one pool: provisioned (workers reporting each role), what the
    traffic needed (its prompt and generated tokens at the pool's per-worker capacities) and what the
    analyzer recommended per segment; and the change points."""
    rows: list[dict[str, Any]] = []
    capacities = worker_capacities(pool) if pool else None
    for p in traffic:
        ts = p.ts.isoformat()
        if p.decode_workers > 0.05:
            rows.append({"ts": ts, "series": "provisioned", "value": p.prefill_workers / p.decode_workers})
        if capacities and p.generation_tokens_per_s > 0:
            need_prefill = p.prompt_tokens_per_s / capacities[0]
            need_decode = p.generation_tokens_per_s / capacities[1]
            rows.append({"ts": ts, "series": "traffic needs", "value": need_prefill / need_decode})
    changes: list[dict[str, Any]] = []
    if pool:
        for segment in pool.segments:
            ratio = best_ratio(segment)
            for at in (segment.start, segment.end):
                if ratio is not None and at is not None:
                    rows.append({"ts": at.isoformat(), "series": "recommended (analyzer)", "value": ratio})
        for event in pool.drift_events or []:
            if event.start is not None:
                changes.append({"ts": event.start.isoformat(), "what": event.description or ""})
    return rows, changes
