"""``phasefit predict``: throughput of one serving instance (TP GPUs) from the calibrated performance model.

The KV budget is the one ``--kv-budget-tokens`` states (what the engine reports: vLLM's
``num_gpu_blocks x block_size``, SGLang's ``max_total_num_tokens``), else the engine's memory rule
(``--engine``, ``--gpu-memory-utilization``; the catalog's ``engines:``), else the rule of the trtllm-bench
measurements the model is calibrated on. Every throughput comes with a low/high range that widens where
the model is weakest (KV-starved, MoE, a modelled budget, and where AI Configurator's measured kernels
disagree beyond the held-out band: ``uncertainty_widened`` and each range's ``widened`` say why), and the
JSON names the budget's assumptions.

A plain command function; the lead registers it with ``app.command()(predict)``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Annotated, Any

import typer

from phasefit.cli.output import add_row, emit_json, escape, fail, human, plain

if TYPE_CHECKING:
    from analyzer.model.goodput import Figure, Goodput
    from analyzer.model.perf_model import ThroughputPrediction


def prediction_payload(p: ThroughputPrediction) -> dict[str, Any]:
    """The JSON document ``predict --json`` prints (token rates are per instance of ``tp`` GPUs)."""
    from analyzer.model.efficiency import CALIBRATION_PROVENANCE

    d, w = p.deployment, p.workload
    budget = p.kv_budget
    return {
        "model": d.model.key,
        "gpu": d.gpu.key,
        "precision": str(d.precision),
        "kv_precision": str(d.kv_precision),
        "tp": d.tp,
        "ep": d.ep,
        "attention_dp": d.attention_dp,
        "isl": w.isl,
        "osl": w.osl,
        "concurrency": w.concurrency,
        "mode": str(w.mode),
        "fits": p.fits,
        "prefill_tokens_per_s": p.prefill_tokens_per_s,
        "decode_tokens_per_s": p.decode_tokens_per_s,
        "output_tokens_per_s": p.output_tokens_per_s,
        "output_tokens_per_s_per_gpu": p.output_tokens_per_s_per_gpu,
        "colocated_prompt_tokens_per_s": p.colocated_prompt_tokens_per_s,
        "max_batch": int(p.max_batch) if p.max_batch >= 1 else 0,
        "batch": p.batch,
        "bottleneck": str(p.bottleneck),
        "prefill_bottleneck": str(p.prefill_bottleneck),
        "decode_bottleneck": str(p.decode_bottleneck),
        "ttft_s": p.ttft_s,
        "tpot_s": p.tpot_s if p.fits else None,
        "decode_step": p.decode_step.as_dict() if p.decode_step else None,
        "prefill_step": p.prefill_step.as_dict() if p.prefill_step else None,
        "regime": p.regime,
        "uncertainty": p.uncertainty,
        "uncertainty_parts": dict(p.uncertainty_parts),
        "uncertainty_widened": p.widened,
        "ranges": {
            name: {"low": low, "high": high, "widened": p.widenings.get(name)}
            for name, (low, high) in p.ranges.items()
        },
        "kv_budget": None
        if budget is None
        else {
            "source": str(budget.source),
            "tokens": budget.tokens(d),
            "tokens_low": budget.low_bytes / budget.bytes * budget.tokens(d) if budget.bytes > 0 else 0.0,
            "tokens_high": budget.high_bytes / budget.bytes * budget.tokens(d) if budget.bytes > 0 else 0.0,
            "bytes": budget.bytes,
            "detail": budget.detail,
            "assumptions": dict(budget.assumptions),
        },
        "notes": list(p.notes),
        "calibration": CALIBRATION_PROVENANCE.get("fitted_at", CALIBRATION_PROVENANCE.get("status", "")),
    }


def _figure(f: Figure) -> dict[str, float]:
    return {"value": f.value, "low": f.low, "high": f.high}


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def goodput_payload(g: Goodput) -> dict[str, Any]:
    """The ``goodput`` object of ``predict --json`` (per instance; null where not asked or infinite)."""
    return {
        "ttft_slo_s": g.targets.ttft_s,
        "tpot_slo_s": g.targets.tpot_s,
        "decode_batch": g.decode_batch,
        "decode_tpot_s": _finite(g.decode_tpot_s),
        "decode_output_tokens_per_s": _figure(g.decode_output_tokens_per_s),
        "decode_requests_per_s": _figure(g.decode_requests_per_s),
        "decode_limited_by_tpot": g.decode_binding,
        "prefill_requests_per_s": _figure(g.prefill_requests_per_s),
        "prefill_ttft_p90_s": _finite(g.prefill_ttft_p90_s),
        "prefill_limited_by_ttft": g.prefill_binding,
        "notes": list(g.notes),
    }


def _goodput_rows(g: Goodput, fits: bool) -> list[tuple[str, str]]:
    def fig(f: Figure, unit: str) -> str:
        return f"{f.value:,.1f} ({f.low:,.1f}-{f.high:,.1f}) {unit}"

    if not fits:
        return [("goodput", "- (the model does not fit: nothing is served)")]
    rows = []
    if g.targets.tpot_s is not None:
        bound = "TPOT binds" if g.decode_binding else "TPOT met at the engine's batch"
        rows += [
            (
                f"decode goodput, TPOT <= {g.targets.tpot_s * 1e3:,.1f} ms",
                fig(g.decode_output_tokens_per_s, "tok/s"),
            ),
            ("  its batch and step", f"{g.decode_batch:,.1f} at {g.decode_tpot_s * 1e3:,.1f} ms ({bound})"),
        ]
    if g.targets.ttft_s is not None:
        ttft = "-" if not math.isfinite(g.prefill_ttft_p90_s) else f"{g.prefill_ttft_p90_s * 1e3:,.1f} ms"
        rows += [
            (
                f"prefill goodput, TTFT p90 <= {g.targets.ttft_s * 1e3:,.1f} ms",
                fig(g.prefill_requests_per_s, "req/s"),
            ),
            ("  TTFT p90 at that load", ttft),
        ]
    return rows


def _range(p: ThroughputPrediction, name: str, value: float) -> str:
    low, high = p.ranges.get(name, (value, value))
    return f"{value:,.0f} ({low:,.0f}-{high:,.0f})"


def widened_lines(p: ThroughputPrediction) -> list[str]:
    """One line per distinct widening, naming the ranges it widens."""
    by_reason: dict[str, list[str]] = {}
    for name, reason in p.widenings.items():
        by_reason.setdefault(reason, []).append(name)
    return [
        f"{' and '.join(names)} range{'s' if len(names) > 1 else ''} {reason}"
        for reason, names in by_reason.items()
    ]


def _print_human(p: ThroughputPrediction, g: Goodput | None = None) -> None:
    from rich.table import Table

    d, w = p.deployment, p.workload
    concurrency = "engine-chosen batch" if w.concurrency is None else f"concurrency {w.concurrency}"
    table = Table(
        title=plain(
            f"{d.model.name} {d.precision} (KV {d.kv_precision}) on {d.tp} x {d.gpu.name}, "
            f"ISL {w.isl} / OSL {w.osl}, {concurrency}"
        )
    )
    table.add_column("quantity")
    table.add_column("value", justify="right")
    budget = p.kv_budget
    rows = [
        ("output tokens/s (colocated)", _range(p, "output", p.output_tokens_per_s)),
        ("prefill tokens/s (prefill-only)", _range(p, "prefill", p.prefill_tokens_per_s)),
        ("decode tokens/s (decode-only)", _range(p, "decode", p.decode_tokens_per_s)),
        ("regime", p.regime),
        (
            "KV budget",
            "-" if budget is None else f"{budget.tokens(d):,.0f} tokens ({budget.source}): {budget.detail}",
        ),
        ("max batch (KV capacity)", f"{max(0.0, p.max_batch):,.0f}"),
        ("batch", f"{p.batch:,.1f}"),
        ("bottleneck", f"{p.bottleneck} (prefill {p.prefill_bottleneck}, decode {p.decode_bottleneck})"),
        ("TTFT, idle instance", f"{p.ttft_s * 1e3:,.1f} ms"),
        ("TPOT at this batch", f"{p.tpot_s * 1e3:,.1f} ms" if p.fits else "-"),
    ]
    rows += [] if g is None else _goodput_rows(g, p.fits)
    for name, value in rows:
        add_row(table, name, value)
    console = human()
    console.print(table)
    for line in widened_lines(p):
        console.print(plain(f"uncertainty: {line}"))
    for note in (*p.notes, *(() if g is None else g.notes)):
        console.print(f"[yellow]note:[/] {escape(note)}")


def predict(
    *,
    model: Annotated[str, typer.Option("--model", help="Catalog key or served model id.")],
    precision: Annotated[
        str, typer.Option("--precision", help="Weight precision: bf16, fp16, fp8, fp4, int4.")
    ],
    gpu: Annotated[str, typer.Option("--gpu", help="GPU SKU key, display name or NVML name.")],
    isl: Annotated[int, typer.Option("--isl", min=1, help="Input (prompt) length in tokens.")],
    osl: Annotated[int, typer.Option("--osl", min=1, help="Output length in tokens.")],
    tp: Annotated[int, typer.Option("--tp", min=1, help="Tensor-parallel GPUs per instance.")] = 1,
    concurrency: Annotated[
        int | None,
        typer.Option("--concurrency", min=1, help="Requests in flight; omit for the engine-chosen batch."),
    ] = None,
    kv_precision: Annotated[
        str | None,
        typer.Option("--kv-precision", help="KV-cache precision (default: fp8 with fp8/fp4 weights)."),
    ] = None,
    ep: Annotated[
        int, typer.Option("--ep", min=1, help="Expert-parallel degree of a MoE model (divides --tp).")
    ] = 1,
    attention_dp: Annotated[
        bool,
        typer.Option("--attention-dp", help="Attention data-parallel across the TP GPUs (MoE models)."),
    ] = False,
    engine: Annotated[
        str | None,
        typer.Option(
            "--engine",
            help="Serving engine whose KV memory rule models the budget (vllm, sglang, trtllm; the "
            "catalog's engines:). Default: the calibrated trtllm-bench rule, or vllm with "
            "--gpu-memory-utilization.",
        ),
    ] = None,
    gpu_memory_utilization: Annotated[
        float | None,
        typer.Option(
            "--gpu-memory-utilization",
            min=0.01,
            max=1.0,
            help="The engine's KV memory fraction (vLLM gpu_memory_utilization, SGLang "
            "mem_fraction_static, TensorRT-LLM free_gpu_memory_fraction).",
        ),
    ] = None,
    kv_budget_tokens: Annotated[
        int | None,
        typer.Option(
            "--kv-budget-tokens",
            min=1,
            help="The KV cache the engine reports holding, in tokens: used instead of any modelled budget.",
        ),
    ] = None,
    ttft_slo: Annotated[
        float | None,
        typer.Option(
            "--ttft-slo", min=1e-6, help="TTFT target at p90, seconds: adds the prefill goodput meeting it."
        ),
    ] = None,
    tpot_slo: Annotated[
        float | None,
        typer.Option(
            "--tpot-slo", min=1e-6, help="TPOT target at p90, seconds: adds the decode goodput meeting it."
        ),
    ] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print JSON on stdout.")] = False,
) -> None:
    """Predict prefill, decode and colocated throughput of one serving instance of TP GPUs."""
    from pydantic import ValidationError

    from analyzer.model.deployment import DeploymentError, make_deployment
    from analyzer.model.efficiency import CALIBRATED
    from analyzer.model.goodput import Targets, goodput
    from analyzer.model.kv_budget import BudgetSource, measured_budget, modelled_budget
    from analyzer.model.perf_model import Workload
    from analyzer.model.perf_model import predict as run_model
    from fleet.catalog import CatalogError, load_catalog
    from fleet.settings import Settings

    try:
        catalog = load_catalog(Settings().catalog_path)
        deployment = make_deployment(
            catalog,
            model=model,
            gpu=gpu,
            precision=precision,
            tp=tp,
            kv_precision=kv_precision,
            ep=ep,
            attention_dp=attention_dp,
        )
        budget = None
        if kv_budget_tokens is not None:
            budget = measured_budget(
                deployment, kv_budget_tokens, BudgetSource.GIVEN, f"{kv_budget_tokens:,} tokens as stated"
            )
        elif engine is not None or gpu_memory_utilization is not None:
            name = engine or "vllm"
            settings = catalog.engines.resolve(name)
            if settings is None:
                known = ", ".join(sorted(catalog.engines.engines))
                raise ValueError(f"unknown engine {name!r}; known engines: {known}")
            budget = modelled_budget(deployment, settings, CALIBRATED, fraction=gpu_memory_utilization)
        prediction = run_model(deployment, Workload(isl, osl, concurrency), budget=budget)
        targets = Targets(ttft_s=ttft_slo, tpot_s=tpot_slo)
        served = goodput(prediction, targets) if targets.any else None
    except (CatalogError, DeploymentError, ValidationError, ValueError) as exc:
        fail(str(exc))
        return
    if json_output:
        payload = prediction_payload(prediction)
        payload["goodput"] = None if served is None else goodput_payload(served)
        emit_json(payload)
    else:
        _print_human(prediction, served)
