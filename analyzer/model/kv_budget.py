"""The KV cache an instance holds: its engine's report, a peer's, else modelled with the assumptions named.

Pure: no I/O. The fleet's reported figures are gathered in :mod:`analyzer.pools.reported_budgets`.
Reasoning: docs/analyzer.md#kv_budget
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

from analyzer.model.deployment import Deployment
from analyzer.model.efficiency import EfficiencyParams
from analyzer.model.moe import kv_bytes_per_token_slot, weights_per_gpu
from fleet.catalog import EngineSettings

# Relative uncertainty of a budget an engine reports: exact in its own tokens; the conversion to
# sequences of a given length is what is approximate (hybrid-attention pools, block rounding).
MEASURED_SPREAD = 0.02
# A peer's figure: same model, precision, SKU and TP degree, but the engine's settings may differ.
PEER_SPREAD = 0.05
_TRTLLM_BENCH = "trtllm-bench"


class BudgetSource(StrEnum):
    MEASURED = "measured"  # the worker's own engine reports it
    PEER = "measured-on-peer"  # another worker of the same model, precision, SKU and TP reports it
    GIVEN = "given"  # an operator stated it (``phasefit predict --kv-budget-tokens``)
    INFERRED = "inferred"  # from this group's telemetry: KV in use per running sequence, or memory held
    MODELLED = "modelled"  # from the engine's memory rules and the catalog


@dataclass(frozen=True)
class KvBudget:
    """KV-cache bytes one instance holds (every GPU, every replica), with the range its source allows."""

    bytes: float
    low_bytes: float
    high_bytes: float
    source: BudgetSource
    detail: str  # what the figure rests on, in words
    assumptions: Mapping[str, float | str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0.0 <= self.low_bytes <= self.bytes <= self.high_bytes:
            raise ValueError(
                f"a KV budget needs 0 <= low <= bytes <= high, got {self.low_bytes}/{self.bytes}/"
                f"{self.high_bytes}"
            )

    def tokens(self, d: Deployment) -> float:
        """Token slots of the engine's pool (one token in every layer)."""
        return self.bytes / kv_bytes_per_token_slot(d)

    def scaled(self, factor: float, why: str) -> KvBudget:
        """The budget times ``factor`` (a calibration against this fleet's measurements), said so."""
        return KvBudget(
            self.bytes * factor,
            self.low_bytes * factor,
            self.high_bytes * factor,
            self.source,
            f"{self.detail}; x {factor:.3g} ({why})",
            self.assumptions,
        )

    @property
    def spread(self) -> float:
        """The range as a relative half-width, the wider side (1.0 where the low end holds no KV cache)."""
        if self.bytes <= 0:
            return 1.0
        return max(1.0 - self.low_bytes / self.bytes, self.high_bytes / self.bytes - 1.0)

    def as_evidence(self, d: Deployment | None = None) -> dict[str, float | str | None]:
        """What a finding's evidence says about the budget."""
        out: dict[str, float | str | None] = {
            "kv_budget": str(self.source),
            "kv_budget_bytes": round(self.bytes, 0),
            "kv_budget_detail": self.detail,
        }
        if d is not None:
            out["kv_budget_tokens"] = round(self.tokens(d), 0)
            slot = kv_bytes_per_token_slot(d)
            out["kv_budget_tokens_range"] = f"{self.low_bytes / slot:,.0f}-{self.high_bytes / slot:,.0f}"
        return out


def measured_budget(
    d: Deployment, tokens: float, source: BudgetSource = BudgetSource.MEASURED, detail: str = ""
) -> KvBudget:
    """A budget an engine reports (or an operator states) in tokens."""
    if tokens < 0 or not math.isfinite(tokens):
        raise ValueError(f"a KV budget in tokens must be a finite number >= 0, got {tokens}")
    spread = {BudgetSource.MEASURED: MEASURED_SPREAD, BudgetSource.PEER: PEER_SPREAD}.get(source, 0.0)
    size = tokens * kv_bytes_per_token_slot(d)
    return KvBudget(
        size,
        size * (1.0 - spread),
        size * (1.0 + spread),
        source,
        detail or f"{tokens:,.0f} tokens as the engine reports them",
        {"tokens": float(tokens)},
    )


def trtllm_bench_settings(fraction: float) -> EngineSettings:
    """The settings of the published trtllm-bench measurements the model is calibrated on: TensorRT-LLM's
    rule at the stated free-memory fraction, with the calibrated reserve."""
    return EngineSettings(
        key=_TRTLLM_BENCH,
        name="trtllm-bench",
        kv_memory_basis="free",
        kv_memory_fraction=fraction,
        kv_memory_fraction_range=(min(fraction, 0.85), max(fraction, 0.95)),
        runtime_reserve_bytes=None,
        runtime_reserve_range=(0.5, 2.5),
        sources="NVIDIA/TensorRT-LLM docs/source/performance/perf-overview.md (trtllm-bench throughput)",
    )


def _kv_per_gpu(basis: str, fraction: float, hbm: float, weights: float, reserve: float) -> float:
    if basis == "free":
        return fraction * max(0.0, hbm - weights - reserve)
    return max(0.0, fraction * hbm - weights - reserve)


def modelled_budget(
    d: Deployment,
    settings: EngineSettings,
    params: EfficiencyParams,
    *,
    fraction: float | None = None,
    reserve_bytes: float | None = None,
) -> KvBudget:
    """The budget the engine's rule gives on this instance. ``fraction`` and ``reserve_bytes`` (per GPU)
    override the catalog's; a stated fraction has no range of its own, the reserve always has one.

    Device memory is the catalog's nominal capacity (what engines see is somewhat more, e.g. 81,559 MiB
    on an H100 80GB): near the edge, where weights nearly fill a GPU, that difference and the reserve
    decide the budget, which is why the range there is wide."""
    f = settings.fraction_for(d.tp) if fraction is None else fraction
    if not 0.0 < f <= 1.0:
        raise ValueError(f"a KV memory fraction must be in (0, 1], got {f}")
    f_low, f_high = settings.kv_memory_fraction_range if fraction is None else (f, f)
    f_low, f_high = min(f_low, f), max(f_high, f)
    if reserve_bytes is not None:
        reserve, reserve_origin = reserve_bytes, "stated"
    elif settings.runtime_reserve_bytes is not None:
        reserve, reserve_origin = settings.runtime_reserve_bytes, f"{settings.name} catalog"
    else:
        reserve, reserve_origin = params.runtime_reserve_bytes, "calibrated"
    r_low, r_high = settings.runtime_reserve_range
    hbm, weights = d.hbm_bytes, weights_per_gpu(d)
    central = _kv_per_gpu(settings.kv_memory_basis, f, hbm, weights, reserve) * d.tp
    low = _kv_per_gpu(settings.kv_memory_basis, f_low, hbm, weights, reserve * r_high) * d.tp
    high = _kv_per_gpu(settings.kv_memory_basis, f_high, hbm, weights, reserve * r_low) * d.tp
    knob = {
        "free": "of the memory free after weights and reserve",
        "total": "of the device, weights and reserve inside it",
        "static": "of the device for weights plus KV cache",
    }[settings.kv_memory_basis]
    detail = (
        f"modelled for {settings.name}: {f:.2f} {knob}; {hbm / 1e9:.0f} GB per GPU, weights "
        f"{weights / 1e9:.1f} GB per GPU ({d.precision}, {d.layout}), reserve {reserve / 1e9:.2f} GB per GPU "
        f"({reserve_origin}); range {f_low:.2f}-{f_high:.2f} and reserve x{r_low:g}-{r_high:g}"
    )
    return KvBudget(
        central,
        min(low, central),
        max(high, central),
        BudgetSource.MODELLED,
        detail,
        MappingProxyType(
            {
                "engine": settings.key,
                "basis": settings.kv_memory_basis,
                "fraction": f,
                "fraction_low": f_low,
                "fraction_high": f_high,
                "reserve_bytes_per_gpu": reserve,
                "reserve_origin": reserve_origin,
                "hbm_bytes_per_gpu": hbm,
                "weight_bytes_per_gpu": weights,
            }
        ),
    )
