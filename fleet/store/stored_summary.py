"""Tolerant views of a stored analyzer summary, named after the fields of :mod:`analyzer.results.summary`.

The store keeps each run's summary as the analyzer wrote it (``Summary.to_json_dict()``), so a stored run may
be of an older summary version, or partial. These views read what the dashboard shows and never refuse a
run: a field the run lacks, or holds as something else (text where a number belongs), reads as unknown
(``None``), never as 0 and never as healthy. A loss reads as version 3 writes it (``lost``: one object per
unit, each ``value``/``low``/``high``); a run of version 2 or older, which held it as flat
``lost_<unit>[_low|_high]`` fields, reads into the same shape. Summaries the analyzer builds now
are the strict :class:`analyzer.results.summary.Summary`.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, model_validator


def _number(value: object) -> float | None:
    return None if isinstance(value, bool) or not isinstance(value, int | float) else float(value)


def _count(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return int(value) if isinstance(value, float) and value.is_integer() else None


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _flag(value: object) -> bool | None:
    return value if isinstance(value, bool) else None


def _instant(value: object) -> datetime | None:
    """An RFC 3339 timestamp (UTC when it names no zone), else unknown."""
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value)
        return parsed.astimezone(UTC) if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    except (ValueError, OverflowError):
        return None


def _counts(value: object) -> dict[str, int]:
    counts = {str(k): _count(v) for k, v in value.items()} if isinstance(value, dict) else {}
    return {k: n for k, n in counts.items() if n is not None}


def _texts(value: object) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _objects(value: object) -> list[dict[str, Any]] | None:
    """The objects of a list; None (not said) where the run holds no list."""
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else None


def _all_objects(value: object) -> list[dict[str, Any]]:
    return _objects(value) or []


def _by_key(value: object) -> dict[str, dict[str, Any]] | None:
    """The objects of a mapping, by key; None (not said) where the run holds no mapping."""
    return {str(k): v for k, v in value.items() if isinstance(v, dict)} if isinstance(value, dict) else None


def _some(value: object) -> dict[str, Any] | None:
    return value if isinstance(value, dict) and value else None


def _object(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


# Version 2's flat loss fields, lost_<unit>[_low|_high], read as version 3's lost.<unit>.<value|low|high>.
_UNITS = ("output_tokens_per_s", "requests_per_s", "tokens_per_s")
_FLAT_BOUNDS = {"value": "", "low": "_low", "high": "_high"}


def _flat_loss(row: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The loss of a version-2 row (flat fields) in version 3's shape."""
    return {
        unit: {bound: row.get(f"lost_{unit}{suffix}") for bound, suffix in _FLAT_BOUNDS.items()}
        for unit in _UNITS
    }


Figure = Annotated[float | None, BeforeValidator(_number)]
Count = Annotated[int | None, BeforeValidator(_count)]
Text = Annotated[str | None, BeforeValidator(_text)]
Flag = Annotated[bool | None, BeforeValidator(_flag)]
Instant = Annotated[datetime | None, BeforeValidator(_instant)]
Counts = Annotated[dict[str, int], BeforeValidator(_counts)]
Texts = Annotated[list[str], BeforeValidator(_texts)]


class _View(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class StoredLoss(_View):
    """One loss figure in one unit (``Loss``)."""

    value: Figure = None
    low: Figure = None
    high: Figure = None


AnyLoss = Annotated[StoredLoss, BeforeValidator(_object)]


class StoredLostCapacity(_View):
    """A loss in each unit (``LostCapacity``); a unit the run does not hold is unknown."""

    output_tokens_per_s: AnyLoss = StoredLoss()
    requests_per_s: AnyLoss = StoredLoss()
    tokens_per_s: AnyLoss = StoredLoss()


Lost = Annotated[StoredLostCapacity, BeforeValidator(_object)]


class _WithLoss(_View):
    """A row holding a loss: version 3's nested ``lost``, else version 2's flat fields."""

    @model_validator(mode="before")
    @classmethod
    def _nested(cls, data: object) -> object:
        if not isinstance(data, dict) or "lost" in data:
            return data
        return {**data, "lost": _flat_loss(data)}


class StoredGroupPlan(_View):
    """One SKU/TP group of a pool's ``recommended`` (``GroupRecommendation``)."""

    prefill_now: Count = None
    decode_now: Count = None
    prefill_best: Count = None
    decode_best: Count = None
    prefill_tokens_per_s_per_worker: Figure = None
    decode_tokens_per_s_per_worker: Figure = None


class StoredRoleCounts(_View):
    """Workers per role on one SKU of a segment's placement (``CountsBySkuRole`` values)."""

    prefill: Count = None
    decode: Count = None


class StoredSegment(_WithLoss):
    """A stretch of one traffic mix and one set of workers (``SegmentSummary``)."""

    start: Instant = None
    end: Instant = None
    lost: Lost = StoredLostCapacity()
    best_placement: Annotated[dict[str, StoredRoleCounts] | None, BeforeValidator(_by_key)] = None


class StoredDrift(_View):
    """A change point in a pool's traffic mix (``TrafficDrift``)."""

    start: Instant = None
    description: Text = None
    magnitude: Figure = None


class StoredCheck(_View):
    """One rule of thumb computed for a pool (``RuleCheck``)."""

    check: Text = None
    passed: Flag = None
    detail: Text = None


class StoredMoved(_View):
    """A worker a change of the split moved (``MovedWorker``)."""

    worker_id: Text = None
    from_role: Text = None
    to_role: Text = None
    from_sku: Text = None
    to_sku: Text = None
    new_worker_id: Text = None  # the worker that replaced it (a Deployment rollout)

    def describe(self) -> str:
        gpus = f" ({self.from_sku}->{self.to_sku})" if self.from_sku and self.to_sku else ""
        replaced = f" (replaced by {self.new_worker_id})" if self.new_worker_id else ""
        return f"{self.worker_id} {self.from_role}->{self.to_role}{gpus}{replaced}"


class StoredChange(_View):
    """A change of the pool's split and what followed (``ChangeOutcome``)."""

    at: Instant = None
    moved: Annotated[list[StoredMoved], BeforeValidator(_all_objects)] = []
    followed: Text = None
    verdict: Text = None
    reason: Text = None
    predicted_output_tokens_per_s: Figure = None
    realized_output_tokens_per_s: Figure = None
    realized_to_predicted: Figure = None


class StoredAttainment(_View):
    """One latency target of a pool against its engines' p90s (``TargetAttainment``)."""

    metric: Text = None
    target_s: Figure = None
    share: Figure = None  # None: unknown (never 0)
    p90_s: Figure = None
    pool_p90_s: Figure = None  # from the merged histograms; None: not sent, or a run before them
    pool_met_share: Figure = None


class StoredTargets(_View):
    """A pool's latency targets and their measured attainment (``LatencyTargets``)."""

    source: Text = None
    rule: Text = None
    attainment: Annotated[list[StoredAttainment], BeforeValidator(_all_objects)] = []


class StoredPool(_WithLoss):
    """One pool (``PoolSummary``); a list or mapping the run does not hold is None (not said), not empty."""

    pool: Text = None
    model: Text = None
    lost: Lost = StoredLostCapacity()
    loss_basis: Text = None  # measured, calibrated, transferred or model; None in runs before it was said
    loss_basis_detail: Text = None
    prefill_decode_now: Text = None
    prefill_decode_recommended: Text = None
    bound: Text = None
    capacity_tokens_per_s: Figure = None
    prefill_decode_ratio: Figure = None
    recommended_prefill_decode_ratio: Figure = None
    ratio_drift: Flag = None
    recommended: Annotated[dict[str, StoredGroupPlan] | None, BeforeValidator(_by_key)] = None
    checks: Annotated[list[StoredCheck] | None, BeforeValidator(_objects)] = None
    drift_events: Annotated[list[StoredDrift] | None, BeforeValidator(_objects)] = None
    segments: Annotated[list[StoredSegment], BeforeValidator(_all_objects)] = []
    changes: Annotated[list[StoredChange] | None, BeforeValidator(_objects)] = None
    targets: Annotated[StoredTargets, BeforeValidator(_object)] = StoredTargets()


class StoredFleet(_WithLoss):
    """Fleet totals (``FleetTotals``)."""

    lost: Lost = StoredLostCapacity()
    capacity_tokens_per_s: Figure = None
    best_tokens_per_s: Figure = None
    capacity_unknown_pools: Texts = []
    demand_limited: Flag = None
    misplaced_workers: Count = None
    judged_workers: Count = None
    unjudged_workers: Count = None
    unjudged_reasons: Counts = {}
    judged_by_evidence: Counts = {}


class StoredModel(_View):
    """The model's record in the run (``ModelInfo``): changes scored, realized-versus-predicted error."""

    changes_scored: Count = None
    realized_error_median: Figure = None


class StoredSummary(_View):
    """A stored run's summary (``Summary``): ``fleet`` is None where the run holds no fleet totals."""

    fleet: Annotated[StoredFleet | None, BeforeValidator(_some)] = None
    pools: Annotated[list[StoredPool], BeforeValidator(_all_objects)] = []
    model: Annotated[StoredModel | None, BeforeValidator(_some)] = None

    @classmethod
    def read(cls, stored: object) -> StoredSummary:
        """The view of a stored summary as the store returns it (anything that is not an object: empty)."""
        return cls.model_validate(stored if isinstance(stored, dict) else {})


class StoredReportSummary(_View):
    """The figures stored next to a weekly audit report (``reports.summary``, written by
    :meth:`analyzer.report.model.AuditReport.summary`), read as tolerantly as a run's summary."""

    lost_tokens_week: Figure = None
    placement_efficiency: Figure = None
    misplaced_workers: Count = None
    misplacement_cost_per_week_usd: Figure = None
    idle_cost_per_week_usd: Figure = None
