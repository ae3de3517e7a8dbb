"""Small, valid summary models for unit tests of the summary's readers (a fleet or a pool that knew nothing,
with the figures a test cares about set)."""

from __future__ import annotations

from typing import Any

from analyzer.results.summary import (
    UNKNOWN_LOSS,
    FleetTotals,
    LostCapacity,
    PoolSummary,
    Traffic,
    lost_capacity,
)
from analyzer.results.totals import PRICE_NOT_ANALYSED

UNKNOWN_LOSSES: dict[str, Any] = {"lost": UNKNOWN_LOSS, "lost_mean": UNKNOWN_LOSS}


def lost(**values: float | None) -> LostCapacity:
    """A loss with the estimates ``values`` set (e.g. ``tokens_per_s=1.0``), unknown elsewhere."""
    return lost_capacity(lambda unit, bound: values.get(unit) if bound == "value" else None)


def fleet_totals(**figures: Any) -> FleetTotals:
    """A fleet of nothing, unknown wherever unknown is allowed, with ``figures`` set."""
    base: dict[str, Any] = {
        **UNKNOWN_LOSSES,
        "lost_unknown_pools": [],
        "capacity_tokens_per_s": None,
        "best_tokens_per_s": None,
        "capacity_unknown_pools": [],
        "demand_output_tokens_per_s": None,
        "demand_tokens_per_s": None,
        "demand_limited": True,
        "weekly_cost_usd": None,
        "idle_cost_per_week_usd": None,
        "misplacement_cost_per_week_usd": None,
        "price": PRICE_NOT_ANALYSED,
        "pools": 0,
        "workers": 0,
        "judged_workers": 0,
        "unjudged_workers": 0,
        "unjudged_reasons": {},
        "judged_by_evidence": {},
        "gpus": 0,
        "whole_gpus": 0,
        "mig_instances": 0,
        "mig_parent_gpus": 0,
        "physical_gpus": 0,
        "physical_gpus_reason": None,
        "unattributed_gpus": 0,
        "misplaced_workers": 0,
        "open_findings": 0,
        "open_findings_by_kind": {},
    }
    return FleetTotals.model_validate({**base, **figures})


def pool_summary(**figures: Any) -> PoolSummary:
    """A pool with no workers and no estimate, with ``figures`` set."""
    traffic = Traffic(
        prompt_tokens_per_s=None,
        output_tokens_per_s=None,
        requests_per_s=None,
        mean_prompt_tokens=None,
        mean_output_tokens=None,
        requests_counted=False,
    )
    base: dict[str, Any] = {
        **UNKNOWN_LOSSES,
        "pool": "c/m",
        "cluster": "c",
        "deployment": None,
        "model": "m",
        "model_key": None,
        "precision": None,
        "serving": "unknown",
        "gpus": 0,
        "whole_gpus": 0,
        "mig_instances": 0,
        "physical_gpus": 0,
        "physical_gpus_reason": None,
        "workers": 0,
        "workers_by_sku_role": {},
        "lost_reason": "no placement analysis",
        "loss_range_to_zero": None,
        "capacity_tokens_per_s": None,
        "capacity_reason": "no telemetry in the range",
        "best_tokens_per_s": None,
        "demand_output_tokens_per_s": None,
        "demand_tokens_per_s": None,
        "utilisation": None,
        "demand_limited": None,
        "bound": None,
        "weekly_cost_usd": None,
        "idle_cost_per_week_usd": None,
        "misplacement_cost_per_week_usd": None,
        "price": PRICE_NOT_ANALYSED,
        "prefill_decode_ratio": None,
        "recommended_prefill_decode_ratio": None,
        "prefill_decode_now": None,
        "prefill_decode_recommended": None,
        "peak_requests_per_s": None,
        "recommended": None,
        "ratio_drift": False,
        "traffic": traffic,
        "checks": [],
        "calibration": {},
        "drift_events": [],
        "segments": [],
        "notes": [],
    }
    return PoolSummary.model_validate({**base, **figures})
