"""The analyzer's summary as typed models (summary version 3), and the JSON schema published from them.

Unknown is ``null``, never 0. Each loss is one :class:`LostCapacity` (output tokens/s, requests/s and total
tokens/s, each a :class:`Loss`: the estimate and its range); version 2 held the same figures as flat
``lost_*`` fields. A field gained or lost is a change here, in ``docs/summary.schema.json``
(``python -m analyzer.results.summary``) and in its test. Reasoning: docs/analyzer.md#summary
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from analyzer.results.changes import ChangeOutcome
from fleet.contract import Bottleneck, Finding, FindingKind, Role

SUMMARY_VERSION = 3
SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
SCHEMA_FILE = "summary.schema.json"

Timestamp = Annotated[
    str,
    Field(
        description="RFC 3339 in UTC, e.g. 2024-06-03T00:00:00Z.", json_schema_extra={"format": "date-time"}
    ),
]


def iso(epoch: float) -> str:
    """A :data:`Timestamp`: epoch seconds as RFC 3339 in UTC with a Z."""
    return datetime.fromtimestamp(epoch, tz=UTC).isoformat().replace("+00:00", "Z")


Price = Literal["catalog", "price not set", "no placement analysis"]
Serving = Literal["disaggregated", "colocated", "unknown"]
Bound = Literal["prefill", "decode"]
RoutingMode = Literal["round-robin", "load-aware"]
PoolStateName = Literal["supply-limited", "demand-limited", "unknown"]
Evidence = Literal["profiling", "utilisation", "engine"]
TargetSourceName = Literal["settings", "catalog", "global", "none"]
# What a loss rests on, from the most direct evidence to the least (analyzer.pools.loss_basis).
LossBasisName = Literal["measured", "calibrated", "transferred", "model"]

TokensPerS = Annotated[float | None, Field(description="Tokens/s (prompt + output); null where unknown.")]
BestTokensPerS = Annotated[
    float | None,
    Field(
        description="Tokens/s (prompt + output) of the split the loss is counted against: the recommended "
        "one, or one held back because its gain is not sure (capacity + loss); null where unknown."
    ),
]
Usd = Annotated[float | None, Field(description="US dollars per week; null where no catalog price is set.")]
CountsBySkuRole = dict[str, dict[str, int]]
# Lost capacity: the units an SRE acts on first, total tokens last (secondary); each an estimate, a range.
LossUnit = Literal["output_tokens_per_s", "requests_per_s", "tokens_per_s"]  # the fields of LostCapacity
LossBound = Literal["value", "low", "high"]  # the fields of Loss
LOSS_UNITS: tuple[LossUnit, ...] = ("output_tokens_per_s", "requests_per_s", "tokens_per_s")
LossFigure = Annotated[
    float | None,
    Field(ge=0, description="The estimate; null where it was not estimated (unknown is never 0)."),
]
Low = Annotated[float | None, Field(ge=0, description="Lower bound of the estimate.")]
High = Annotated[float | None, Field(ge=0, description="Upper bound of the estimate.")]
RangeToZero = Annotated[
    str | None,
    Field(
        description="Why the low end of the loss reaches 0 while its estimate does not (the capacity whose "
        "uncertainty takes it there, or a move held back because its gain is not sure), or why the loss "
        "exceeds the gain of the move recommended (a larger move held back); null otherwise."
    ),
]
LossBasisField = Annotated[
    LossBasisName | None,
    Field(
        description="The least direct source the loss rests on: measured (seen saturated), calibrated (the "
        "model fitted to the pool's own telemetry), transferred (another SKU's calibration) or model; null "
        "where the loss was not estimated."
    ),
]
LossBasisDetail = Annotated[
    str | None,
    Field(description="Which figures the basis is: each split's bounding phase and its weakest capacity."),
]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Loss(_Model):
    """One loss figure in one unit: the estimate and the range it may lie in (null: unknown, never 0)."""

    value: LossFigure
    low: Low
    high: High


class LostCapacity(_Model):
    """What a misplacement costs, in each unit."""

    output_tokens_per_s: Loss = Field(
        description="Output (generated) tokens/s the best split of the same GPUs would add."
    )
    requests_per_s: Loss = Field(description="Requests/s the best split would add.")
    tokens_per_s: Loss = Field(description="Secondary: prompt + output tokens/s the best split would add.")

    def figure(self, unit: LossUnit, bound: LossBound) -> float | None:
        """One figure by name: ``unit`` a field of this model, ``bound`` one of :class:`Loss`."""
        loss: Loss = getattr(self, unit)
        value: float | None = getattr(loss, bound)
        return value


def lost_capacity(figure: Callable[[LossUnit, LossBound], float | None]) -> LostCapacity:
    """A :class:`LostCapacity` of ``figure(unit, bound)`` for every unit and bound (named as the fields)."""

    def loss(unit: LossUnit) -> Loss:
        return Loss(value=figure(unit, "value"), low=figure(unit, "low"), high=figure(unit, "high"))

    return LostCapacity(
        output_tokens_per_s=loss("output_tokens_per_s"),
        requests_per_s=loss("requests_per_s"),
        tokens_per_s=loss("tokens_per_s"),
    )


UNKNOWN_LOSS = lost_capacity(lambda unit, bound: None)


class RuleCheck(_Model):
    """One rule of thumb computed for the pool (does disaggregation pay here?)."""

    check: str
    value: float | None
    threshold: float | None
    passed: bool | None = Field(description="null where it could not be computed.")
    detail: str


class GroupRecommendation(_Model):
    """One SKU/TP group: workers per role now and in the best plan, per-worker throughput, and the replicas
    the peak demand needs if that group alone served each phase (Dynamo planner's formula). The
    recommendation builds it (``analyzer.findings.recommend``); the summary carries it as it is."""

    prefill_now: int
    decode_now: int
    prefill_best: int
    decode_best: int
    prefill_tokens_per_s_per_worker: float | None = Field(
        description="Prefill tokens/s one worker of the group sustains; null where unknown (it does not fit "
        "the model's KV cache, or the catalog lacks figures)."
    )
    decode_tokens_per_s_per_worker: float | None = Field(
        description="The same for decode; null where unknown."
    )
    prefill_replicas_for_peak: int | None
    decode_replicas_for_peak: int | None
    prefill_source: str | None = Field(
        default=None,
        description="Where the prefill figure comes from: measured (seen saturated), calibrated (the model "
        "fitted to this group's unsaturated telemetry), transferred (another group's calibration) or model.",
    )
    decode_source: str | None = Field(default=None, description="The same for the decode figure.")


class Traffic(_Model):
    """The pool's traffic in its latest segment."""

    prompt_tokens_per_s: float | None
    output_tokens_per_s: float | None
    requests_per_s: float | None
    mean_prompt_tokens: float | None
    mean_output_tokens: float | None
    requests_counted: bool = Field(description="Whether requests/s is a measurement (not derived).")


class TrafficDrift(_Model):
    """A change point in the pool's traffic mix."""

    start: Timestamp
    description: str
    magnitude: float | None


class Routing(_Model):
    """How each phase's router spreads requests, as the placement modelled it."""

    prefill: RoutingMode
    decode: RoutingMode


class SegmentSummary(_Model):
    """A stretch of one traffic mix and one set of serving workers."""

    start: Timestamp
    end: Timestamp
    mean_prompt_tokens: float | None
    mean_output_tokens: float | None
    requests_per_s: float | None
    demand_output_tokens_per_s: float | None
    demand_tokens_per_s: float | None
    undelivered_requests_per_s: float | None = Field(
        default=None,
        description="Requests/s that arrived and were not served: how fast the pool's queues grew over the "
        "segment (0 when they did not). Measured; null where no engine reports a queue.",
    )
    lost: LostCapacity = Field(description="What the segment's placement loses to its best split.")
    loss_range_to_zero: RangeToZero
    loss_basis: LossBasisField = None
    loss_basis_detail: LossBasisDetail = None
    capacity_tokens_per_s: TokensPerS
    capacity_reason: str | None = Field(description="Why the capacity is unknown; null when it is known.")
    best_tokens_per_s: BestTokensPerS
    utilisation: float | None
    demand_limited: bool | None = Field(
        description="It served its demand (its loss is idle capacity); null where its state is unknown."
    )
    pool_state: PoolStateName = Field(
        default="unknown", description="From its queues and the phases seen at their limit, never the model."
    )
    pool_state_evidence: str = Field(default="", description="What the pool state rests on.")
    bound: Bound | None
    routing: Routing | None
    current_placement: CountsBySkuRole = Field(description="SKU -> role -> workers now.")
    best_placement: CountsBySkuRole | None = Field(description="SKU -> role -> workers in the best plan.")
    notes: list[str]


class TargetAttainment(_Model):
    """One latency target against the engines' measured p90s over the analysed span."""

    metric: Literal["ttft", "tpot", "e2e"]
    target_s: float
    share: float | None = Field(
        description="Share of the measured serving time (worker-buckets weighted by engine seconds: prefill "
        "and colocated workers for TTFT, decode and colocated for TPOT and end to end) whose p90 met "
        "the target; null: unknown (reason)."
    )
    p90_s: float | None = Field(description="The measured p90, time-weighted over those worker-buckets.")
    worker_buckets: int
    reason: str | None = None
    pool_p90_s: float | None = Field(
        default=None,
        description="The pool's p90 over the span from its workers' histograms merged bucket by bucket "
        "(histogram_quantile(0.9, sum by (le) (...)) on a shared grid of bounds); null: no worker sent "
        "histograms (pool_reason).",
    )
    pool_met_share: float | None = Field(
        default=None,
        description="Share of the observations (requests, or output tokens for TPOT) in hours whose merged "
        "pool p90 met the target; null with pool_p90_s.",
    )
    observations: float | None = Field(
        default=None, description="Observations in the merged histograms over the span; null: none sent."
    )
    pool_reason: str | None = None


class LatencyTargets(_Model):
    """The latency targets that applied to a pool (seconds at the 90th percentile; null: unset) and the
    rule they come from. Its TPOT target sized the decode batches and its TTFT target the prefill load (so
    capacity, best split and loss are goodput); an end-to-end target is reported only."""

    ttft_p90_s: float | None = None
    tpot_p90_s: float | None = None
    e2e_p90_s: float | None = None
    source: TargetSourceName = Field(
        default="none",
        description="settings (PHASEFIT_ANALYZER_TARGETS), catalog (the operator catalog's targets), global "
        "(PHASEFIT_ANALYZER_TPOT_SLO_S or the threshold pool.capacity.tpot_slo_s; the rule names which) or "
        "none (no rule matches: capacity is raw throughput).",
    )
    rule: str | None = Field(
        default=None,
        description='Where the rule is written, e.g. "PHASEFIT_ANALYZER_TARGETS[0]"; null: none.',
    )
    attainment: list[TargetAttainment] = Field(
        default_factory=list, description="Each target set, measured (analyzer.pools.attainment)."
    )


class PoolSummary(_Model):
    """One pool: the workers that serve one model behind one router, (cluster, deployment, model)."""

    pool: str = Field(
        description="<cluster>/<model> or <cluster>/<deployment>/<model>: read cluster and deployment, "
        "never split the key."
    )
    cluster: str
    deployment: str | None
    model: str
    model_key: str | None
    precision: str | None
    serving: Serving
    gpus: int
    whole_gpus: int
    mig_instances: int
    physical_gpus: int | None
    physical_gpus_reason: str | None
    workers: int
    workers_by_sku_role: CountsBySkuRole
    lost: LostCapacity = Field(description="The loss of the latest segment's placement.")
    lost_reason: str | None = Field(description="Why the loss is unknown; null when it was estimated.")
    loss_range_to_zero: RangeToZero
    loss_basis: LossBasisField = None
    loss_basis_detail: LossBasisDetail = None
    lost_mean: LostCapacity = Field(
        description="Time-weighted mean over the segments of the range (a segment without a placement "
        "counts as 0)."
    )
    capacity_tokens_per_s: TokensPerS
    capacity_reason: str | None
    best_tokens_per_s: BestTokensPerS
    demand_output_tokens_per_s: float | None
    demand_tokens_per_s: float | None
    utilisation: float | None
    demand_limited: bool | None = Field(
        description="It served its demand (its loss is idle capacity); null where its state is unknown."
    )
    pool_state: PoolStateName = Field(
        default="unknown", description="From its queues and the phases seen at their limit, never the model."
    )
    pool_state_evidence: str = Field(default="", description="What the pool state rests on.")
    bound: Bound | None
    weekly_cost_usd: Usd
    idle_cost_per_week_usd: Usd
    misplacement_cost_per_week_usd: Usd
    price: Price
    prefill_decode_ratio: float | None
    recommended_prefill_decode_ratio: float | None
    prefill_decode_now: str | None = Field(description='Prefill:decode workers now, e.g. "2:4".')
    prefill_decode_recommended: str | None
    peak_requests_per_s: float | None
    recommended: dict[str, GroupRecommendation] | None = Field(description="Per SKU/TP group.")
    ratio_drift: bool
    traffic: Traffic
    checks: list[RuleCheck]
    calibration: dict[str, float | str | None] = Field(
        description="The pool's calibration factors (pooled and per group)."
    )
    drift_events: list[TrafficDrift]
    segments: list[SegmentSummary]
    notes: list[str]
    changes: list[ChangeOutcome] = Field(
        default_factory=list,
        description="Changes of the split seen in the range, each judged against the model's prediction; "
        "and a recommendation left standing.",
    )
    targets: LatencyTargets = Field(
        default_factory=LatencyTargets, description="The latency targets that applied and their rule."
    )


class WorkerSummary(_Model):
    """One serving worker and the verdict on it."""

    worker_id: str
    pool: str
    cluster: str
    sku: str
    role: Role
    model: str
    bottleneck: Bottleneck
    activity_evidence: Evidence | None = Field(description="What the verdict rests on; null when unjudged.")
    misplaced: bool | None = Field(description="null: not judged (see unjudged_reason).")
    unjudged_reason: str | None
    kinds: list[FindingKind] = Field(description="The kinds of its open misplacement findings.")
    lost_output_tokens_per_s: float | None
    lost_requests_per_s: float | None
    lost_tokens_per_s: float | None
    saturation: Literal["saturated", "unsaturated", "unknown"] = Field(
        default="unknown",
        description="Over its pool's latest segment: saturated when work waited for it while it ran at its "
        "limit (KV cache nearly full or running requests at their concurrency cap; prefill: busy, or TTFT "
        "rising with the queue where busy time is not reported) in most buckets; "
        "unknown where its engine reports no queue. Only a saturated worker's throughput is its capacity.",
    )
    saturated_share: float | None = Field(
        default=None, description="Share of its serving buckets it was saturated in; null: unknown."
    )
    saturation_evidence: str = Field(default="", description="What the saturation verdict rests on.")


class FleetTotals(_Model):
    """Fleet totals. A sum over pools is null when no pool knows the figure (capacity, best and costs: when
    any pool does not), with the pools that do not listed."""

    lost: LostCapacity = Field(description="The pools' losses added up (null where no pool knows one).")
    lost_unknown_pools: list[str]
    lost_mean: LostCapacity = Field(description="The pools' time-weighted means added up.")
    capacity_tokens_per_s: TokensPerS
    best_tokens_per_s: BestTokensPerS
    capacity_unknown_pools: list[str]
    demand_output_tokens_per_s: float | None
    demand_tokens_per_s: float | None
    demand_limited: bool = Field(
        description="Every pool served its demand (its loss is idle capacity); false where any pool's "
        "state is unknown."
    )
    weekly_cost_usd: Usd
    idle_cost_per_week_usd: Usd
    misplacement_cost_per_week_usd: Usd
    price: Price
    pools: int
    workers: int
    judged_workers: int
    unjudged_workers: int
    unjudged_reasons: dict[str, int] = Field(description="Why workers could not be judged -> how many.")
    judged_by_evidence: dict[str, int] = Field(description="profiling, utilisation or engine -> workers.")
    gpus: int = Field(description="Every device: whole GPUs plus MIG instances.")
    whole_gpus: int
    mig_instances: int
    mig_parent_gpus: int
    physical_gpus: int | None = Field(description="null where a MIG instance does not name its GPU.")
    physical_gpus_reason: str | None
    unattributed_gpus: int
    misplaced_workers: int
    open_findings: int
    open_findings_by_kind: dict[str, int]


class ModelInfo(_Model):
    """The performance model's calibration and its held-out error."""

    calibration: str = Field(description="When the model's constants were fitted.")
    heldout_ratio_error_p90: float
    heldout_absolute_error_p90: float
    changes_scored: int = Field(
        default=0, description="Changes of a split in the range whose outcome was scored."
    )
    realized_error_median: float | None = Field(
        default=None,
        description="Median of |realized / predicted - 1| over the changes scored; null if none.",
    )


class Scope(_Model):
    """The part of the fleet a partial analysis covered (``phasefit analyze --pool`` / ``--shard``)."""

    pools: list[str] = Field(description="The pool keys asked for; empty: every pool of the shard.")
    shard: list[int] | None = Field(description="[index, count], index from 0; null: no shard.")
    description: str


class Summary(_Model):
    """The analyzer's summary of one range (what phasefit analyze --json prints as its summary)."""

    model_config = ConfigDict(validate_by_name=True, validate_by_alias=True, serialize_by_alias=True)

    version: Literal[3] = Field(
        description="3: each loss is one object per unit (lost.<unit>.value/low/high, lost_mean on pools "
        "and the fleet) and says why its low end reaches 0 (loss_range_to_zero); version 2 held them as "
        "flat lost_<unit>[_mean][_low|_high] fields. Unknown figures are null, never 0."
    )
    from_: Timestamp = Field(alias="from")
    to: Timestamp
    bucket_s: float
    fleet: FleetTotals
    model: ModelInfo
    warnings: list[str]
    pools: list[PoolSummary]
    workers: list[WorkerSummary]
    scope: Scope | None = Field(default=None, description="Null: the analysis covered every pool.")

    def to_json_dict(self) -> dict[str, Any]:
        """The summary as JSON-ready data, as the analyzer has always written it (stored, printed)."""
        out: dict[str, Any] = self.model_dump(mode="json", by_alias=True)
        return out

    def with_warnings(self, warnings: Sequence[str]) -> Summary:
        """The summary with ``warnings`` appended (for notes a caller learns after the run)."""
        return self.model_copy(update={"warnings": [*self.warnings, *(str(w) for w in warnings)]})


class AnalyzeOutput(_Model):
    """What phasefit analyze --json prints: the summary, the findings and every warning printed."""

    summary: Summary
    findings: list[Finding]
    warnings: list[str] = Field(description="Every warning printed on stderr (the summary's warnings).")

    def to_json_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = self.model_dump(mode="json", by_alias=True)
        return out


def json_schema() -> dict[str, Any]:
    """The JSON Schema of ``phasefit analyze --json`` (its ``summary`` is :class:`Summary`)."""
    schema = AnalyzeOutput.model_json_schema(by_alias=True, mode="serialization")
    return {"$schema": SCHEMA_DIALECT, **schema}


def schema_text() -> str:
    """``docs/summary.schema.json`` as it should be committed (deterministic for a given code base)."""
    return json.dumps(json_schema(), indent=2, ensure_ascii=False) + "\n"


def default_output() -> Path:
    """docs/summary.schema.json of the source checkout this module lives in."""
    return Path(__file__).resolve().parents[2] / "docs" / SCHEMA_FILE


def main(argv: Sequence[str] | None = None) -> int:
    """Write the schema (``python -m analyzer.results.summary [PATH]``; ``--check``: exit 1 if stale)."""
    args = list(sys.argv[1:] if argv is None else argv)
    check = "--check" in args
    paths = [a for a in args if a != "--check"]
    target = Path(paths[0]) if paths else default_output()
    text = schema_text()
    if check:
        current = target.read_text(encoding="utf-8") if target.is_file() else None
        if current != text:
            sys.stderr.write(f"{target} is stale: run `python -m analyzer.results.summary`\n")
            return 1
        return 0
    target.write_text(text, encoding="utf-8")
    sys.stderr.write(f"wrote {target}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
