"""The simulator at a benchmark's settings: maximum-throughput serving at fixed prompt and output lengths.

This is how the simulator is held against the published TensorRT-LLM perf-overview tables
(data/benchmarks/published.csv): ``trtllm-bench`` at an unlimited request rate, synthetic fixed
ISL/OSL, in-flight batching of context and generation requests in one engine, FP8 weights and KV, a
``kv_cache_free_gpu_mem_fraction`` of 0.95 and the GUARANTEED_NO_EVICT scheduler (a request holds KV for
ISL + OSL tokens from admission). The engine then runs at its largest batch; each step carries one token
of every running sequence and, in steady state, ISL / OSL prompt tokens per sequence.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from fleet.catalog import Catalog
from fleet.precision import Precision, parse_precision
from fleetsim.physics import Efficiency, EngineConfig, StepModel, WorkerHardware

# trtllm-bench's defaults for the v0.14 tables (max_num_tokens 8192; the batch is engine-chosen, so the
# batch limit is KV capacity rather than a configured maximum).
TRTLLM_BENCH_ENGINE = EngineConfig(
    max_batch=4096,
    token_budget=8192,
    hbm_utilization=1.0,
    kv_free_fraction=0.95,
    runtime_reserve_bytes=3e9,
    reserve_full_sequence=True,
)


@dataclass(frozen=True)
class BenchmarkSetting:
    """One row's settings: model (catalog key), SKU (catalog key), precision, TP, ISL and OSL."""

    model_key: str
    sku_key: str
    precision: str
    tp: int
    input_len: int
    output_len: int


@dataclass(frozen=True)
class BenchmarkResult:
    output_tokens_per_s: float  # of the whole TP group, like the tables
    batch: float
    kv_bound: bool
    step_s: float


def max_throughput(
    setting: BenchmarkSetting,
    catalog: Catalog,
    engine: EngineConfig = TRTLLM_BENCH_ENGINE,
    eff: Efficiency | None = None,
) -> BenchmarkResult:
    """Output tokens/s of one engine at an unlimited request rate with fixed ISL/OSL."""
    precision = parse_precision(setting.precision)
    hw = WorkerHardware(
        sku=catalog.gpus.get(setting.sku_key),
        model=catalog.models.get(setting.model_key),
        precision=precision,
        kv_precision=precision if precision is not Precision.INT4 else Precision.BF16,
        tp=setting.tp,
    )
    model = StepModel([hw], engine, eff or Efficiency())
    isl, osl = float(setting.input_len), float(setting.output_len)
    live_context = isl + osl / 2.0
    keys = (isl + 1.0) / 2.0
    ratio = isl / osl
    reserved = isl + osl if engine.reserve_full_sequence else live_context
    limits = model.batch_limits(live_context, keys, ratio, None, reserved)
    batch = np.floor(limits.batch)
    rate = model.decode_rate(batch, live_context, keys, ratio)
    step = model.breakdown(batch, batch * ratio, live_context, keys)
    return BenchmarkResult(
        output_tokens_per_s=float(rate.reshape(-1)[0]),
        batch=float(batch.reshape(-1)[0]),
        kv_bound=bool(limits.kv_bound.reshape(-1)[0]),
        step_s=float(step.seconds.reshape(-1)[0]),
    )


@dataclass(frozen=True)
class Comparison:
    setting: BenchmarkSetting
    published: float
    simulated: BenchmarkResult

    @property
    def error(self) -> float:
        """Relative error of the simulator: simulated / published - 1."""
        return self.simulated.output_tokens_per_s / self.published - 1.0


@dataclass(frozen=True)
class RatioComparison:
    """H200 SXM over H100 SXM for one (model, TP, ISL, OSL), published against simulated."""

    model_key: str
    tp: int
    input_len: int
    output_len: int
    published: float
    simulated: float

    @property
    def error(self) -> float:
        return self.simulated / self.published - 1.0


def _sku_key(text: str, catalog: Catalog) -> str | None:
    """The SKU a benchmark table names ("H200 SXM 141GB", "A100-SXM4-80GB"), matched on the catalog's
    keys, display names and NVML names without asking the resolver (which warns on every miss)."""
    wanted = {text.casefold().strip(), re.sub(r"\s+\d+\s*gb$", "", text.casefold().strip())}
    for sku in catalog.gpus.skus.values():
        names = {sku.key, sku.name, *sku.nvml_names, *(n.removeprefix("NVIDIA ") for n in sku.nvml_names)}
        if wanted & {n.casefold() for n in names}:
            return sku.key
    return None


def max_throughput_rows(rows: Iterable[Mapping[str, str]], catalog: Catalog) -> list[Comparison]:
    """The published.csv rows measured at an unlimited request rate (output tokens/s, engine-chosen
    batch), each against the simulator at the same settings. Rows whose model or GPU the catalog does
    not know are skipped."""
    out = []
    for row in rows:
        if row.get("metric") != "output_tokens_per_s" or not row.get("batch_or_concurrency", "").startswith(
            "max"
        ):
            continue
        model = catalog.models.resolve(row["model"])
        sku = _sku_key(row["gpu"], catalog)
        if model is None or sku is None:
            continue
        setting = BenchmarkSetting(
            model.key, sku, row["precision"], int(row["tp"]), int(row["input_len"]), int(row["output_len"])
        )
        out.append(Comparison(setting, float(row["value"]), max_throughput(setting, catalog)))
    return out


def ratio_rows(
    comparisons: Sequence[Comparison], high: str = "H200-SXM", low: str = "H100-SXM"
) -> list[RatioComparison]:
    """Pairs of rows that differ only in the GPU: the published and simulated ``high`` / ``low`` ratio."""
    by_key: dict[tuple[str, int, int, int], dict[str, Comparison]] = {}
    for c in comparisons:
        s = c.setting
        by_key.setdefault((s.model_key, s.tp, s.input_len, s.output_len), {})[s.sku_key] = c
    out = []
    for (model, tp, isl, osl), pair in by_key.items():
        if high in pair and low in pair:
            out.append(
                RatioComparison(
                    model, tp, isl, osl,
                    pair[high].published / pair[low].published,
                    pair[high].simulated.output_tokens_per_s / pair[low].simulated.output_tokens_per_s,
                )
            )  # fmt: skip
    return out


def format_tables(comparisons: Sequence[Comparison], ratios: Sequence[RatioComparison]) -> str:
    """Per-row and per-ratio error tables, plain text."""
    head = f"{'model':<14} {'GPU':<14} {'TP':>2} {'ISL/OSL':>11} {'published':>10} {'simulated':>10}"
    lines = [f"{head} {'error':>7}  limit"]
    for c in comparisons:
        s = c.setting
        limit = "KV" if c.simulated.kv_bound else "batch"
        lines.append(
            f"{s.model_key:<14} {s.sku_key:<14} {s.tp:>2} {f'{s.input_len}/{s.output_len}':>11} "
            f"{c.published:>10.0f} {c.simulated.output_tokens_per_s:>10.0f} {c.error:>+7.1%}  {limit}"
        )
    lines.append("")
    lines.append(f"{'model':<14} {'TP':>2} {'ISL/OSL':>11} {'H200/H100 pub':>13} {'sim':>6} {'error':>7}")
    for r in ratios:
        lines.append(
            f"{r.model_key:<14} {r.tp:>2} {f'{r.input_len}/{r.output_len}':>11} {r.published:>13.3f} "
            f"{r.simulated:>6.3f} {r.error:>+7.1%}"
        )
    abs_err = np.abs([c.error for c in comparisons])
    ratio_err = np.abs([r.error for r in ratios])
    lines.append("")
    lines.append(
        f"throughput: {int((abs_err < 0.25).sum())}/{len(abs_err)} rows within 25% "
        f"(median |error| {np.median(abs_err):.1%}, max {abs_err.max():.1%}); "
        f"H200/H100 ratio: {int((ratio_err < 0.10).sum())}/{len(ratio_err)} within 10% "
        f"(median {np.median(ratio_err):.1%}, max {ratio_err.max():.1%})"
    )
    return "\n".join(lines)
