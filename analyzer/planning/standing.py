"""Standing what-ifs: GPU changes an operator asks about every week ("would 16 H200s help?"), configured
once and re-solved on each week's analysis (:mod:`analyzer.planning.what_if`) for the weekly report."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, model_validator

from analyzer.pipeline import AnalyzerParams, params_of_pool
from analyzer.planning.what_if import WhatIfError, choose_pool, parse_changes, resolve_skus, what_if
from analyzer.pools.analysis import PoolAnalysis
from fleet.catalog import Catalog


class StandingWhatIf(BaseModel):
    """One what-if as the operator configures it (``PHASEFIT_ANALYZER_REPORT_WHAT_IF``, a JSON list)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pool: str | None = Field(
        default=None, description="The pool key; may be left out where there is one pool."
    )
    add: list[str] = Field(default_factory=list, description="SKU:GPUS to add, e.g. H200-SXM:16.")
    remove: list[str] = Field(default_factory=list, description="SKU:GPUS to remove.")
    replace: list[str] = Field(default_factory=list, description="FROM_SKU:TO_SKU:GPUS.")

    @model_validator(mode="after")
    def _parses(self) -> StandingWhatIf:
        if not (self.add or self.remove or self.replace):
            raise ValueError("a what-if needs at least one of add, remove or replace")
        try:
            parse_changes(self.add, self.remove, self.replace)
        except WhatIfError as error:
            raise ValueError(str(error)) from error
        return self

    def describe(self) -> str:
        parts = (
            [f"+{s}" for s in self.add]
            + [f"-{s}" for s in self.remove]
            + [f"{s} replaced" for s in self.replace]
        )
        return ", ".join(parts) + (f" in {self.pool}" if self.pool else "")


@dataclass(frozen=True)
class WhatIfRow:
    asked: str
    pool: str | None
    output_gain: float | None
    output_low: float | None
    output_high: float | None
    requests_gain: float | None
    cost_change_per_week_usd: float | None
    answer: str  # the figures' caveats, or why it could not be evaluated


def evaluate(
    asked: Sequence[StandingWhatIf],
    analyses: Sequence[PoolAnalysis],
    catalog: Catalog,
    params: AnalyzerParams,
) -> list[WhatIfRow]:
    rows = []
    for spec in asked:
        try:
            changes = parse_changes(spec.add, spec.remove, spec.replace)
            analysis = choose_pool(analyses, spec.pool)
            pool = params_of_pool(params, analysis.pool.key, analysis.targets)  # as its analysis had them
            skus = resolve_skus(changes, catalog.gpus)
            result = what_if(analysis, changes, skus, pool.capacity, pool.tolerance)
        except WhatIfError as error:
            rows.append(WhatIfRow(spec.describe(), spec.pool, None, None, None, None, None, str(error)))
            continue
        gain = result.gain
        rows.append(
            WhatIfRow(
                spec.describe(),
                result.pool,
                gain.output_tokens_per_s.value,
                gain.output_tokens_per_s.low,
                gain.output_tokens_per_s.high,
                gain.requests_per_s.value,
                result.cost_change_per_week_usd,
                "; ".join(result.notes) or f"bound by {result.bound_what_if} after the change",
            )
        )
    return rows
