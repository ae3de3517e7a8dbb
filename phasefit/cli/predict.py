"""``phasefit predict``: throughput of one serving instance (TP GPUs) from the calibrated performance model.

A plain command function; the lead registers it with ``app.command()(predict)``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from phasefit.cli.output import emit_json, fail, human

if TYPE_CHECKING:
    from analyzer.perf_model import ThroughputPrediction


def prediction_payload(p: ThroughputPrediction) -> dict[str, Any]:
    """The JSON document ``predict --json`` prints (token rates are per instance of ``tp`` GPUs)."""
    from analyzer.efficiency import CALIBRATION_PROVENANCE

    d, w = p.deployment, p.workload
    return {
        "model": d.model.key,
        "gpu": d.gpu.key,
        "precision": str(d.precision),
        "kv_precision": str(d.kv_precision),
        "tp": d.tp,
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
        "notes": list(p.notes),
        "calibration": CALIBRATION_PROVENANCE.get("fitted_at", CALIBRATION_PROVENANCE.get("status", "")),
    }


def _print_human(p: ThroughputPrediction) -> None:
    from rich.table import Table

    d, w = p.deployment, p.workload
    concurrency = "engine-chosen batch" if w.concurrency is None else f"concurrency {w.concurrency}"
    table = Table(
        title=f"{d.model.name} {d.precision} (KV {d.kv_precision}) on {d.tp} x {d.gpu.name}, "
        f"ISL {w.isl} / OSL {w.osl}, {concurrency}"
    )
    table.add_column("quantity")
    table.add_column("value", justify="right")
    rows = [
        ("output tokens/s (colocated)", f"{p.output_tokens_per_s:,.0f}"),
        ("prefill tokens/s (prefill-only)", f"{p.prefill_tokens_per_s:,.0f}"),
        ("decode tokens/s (decode-only)", f"{p.decode_tokens_per_s:,.0f}"),
        ("max batch (KV capacity)", f"{max(0.0, p.max_batch):,.0f}"),
        ("batch", f"{p.batch:,.1f}"),
        ("bottleneck", f"{p.bottleneck} (prefill {p.prefill_bottleneck}, decode {p.decode_bottleneck})"),
        ("TTFT, idle instance", f"{p.ttft_s * 1e3:,.1f} ms"),
        ("TPOT at this batch", f"{p.tpot_s * 1e3:,.1f} ms" if p.fits else "-"),
    ]
    for name, value in rows:
        table.add_row(name, value)
    console = human()
    console.print(table)
    for note in p.notes:
        console.print(f"[yellow]note:[/] {note}")


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
    json_output: Annotated[bool, typer.Option("--json", help="Print JSON on stdout.")] = False,
) -> None:
    """Predict prefill, decode and colocated throughput of one serving instance of TP GPUs."""
    from pydantic import ValidationError

    from analyzer.deployment import DeploymentError, make_deployment
    from analyzer.perf_model import Workload
    from analyzer.perf_model import predict as run_model
    from fleet.catalog import CatalogError, load_catalog
    from fleet.settings import Settings

    try:
        catalog = load_catalog(Settings().catalog_path)
        deployment = make_deployment(
            catalog, model=model, gpu=gpu, precision=precision, tp=tp, kv_precision=kv_precision
        )
        prediction = run_model(deployment, Workload(isl, osl, concurrency))
    except (CatalogError, DeploymentError, ValidationError, ValueError) as exc:
        fail(str(exc))
        return
    if json_output:
        emit_json(prediction_payload(prediction))
    else:
        _print_human(prediction)
