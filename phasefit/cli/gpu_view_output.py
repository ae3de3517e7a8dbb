"""``phasefit analyze`` on a fleet with GPUs and no serving engine: the GPU view as ``--json`` prints it and
as rich tables (every name literal text; unknown activity reads "unknown", never 0)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from phasefit.cli.output import add_row

if TYPE_CHECKING:
    from rich.console import Console

    from analyzer.telemetry.gpu_view import GpuView


def gpu_view_payload(view: GpuView) -> dict[str, Any]:
    """What ``--json`` prints for a fleet with GPUs and no engine: no summary, no findings, the GPU view."""
    body = view.to_json_dict()
    return {
        "mode": "gpu-view",
        "summary": None,
        "findings": [],
        "gpu_view": body,
        "warnings": body["warnings"],
    }


GPU_TABLE_ROWS = 200  # the GPU table of the human output stops here (--json has every GPU)


def _share(value: float | None) -> str:
    return "unknown" if value is None else f"{value:.0%}"


def _hours(value: float | None) -> str:
    return "unknown" if value is None else f"{value:,.1f}"


def print_gpu_view(view: GpuView, console: Console) -> None:
    """The GPU view as rich tables (every name literal text)."""
    from rich.table import Table
    from rich.text import Text

    t = view.totals
    console.print(
        Text.assemble(("phasefit analyze", "bold"), f" {view.from_} -> {view.to}: ", ("GPU view", "bold"))
    )
    console.print(f"{view.reason}.", markup=False)
    idle_unknown = f" (unknown for {t.idle_unknown_gpus} GPUs)" if t.idle_unknown_gpus else ""
    console.print(
        f"{t.gpus} GPUs, {_hours(t.gpu_hours)} GPU-hours; idle: {t.idle_gpus} GPUs, "
        f"{_hours(t.idle_gpu_hours)} idle GPU-hours{idle_unknown}; {t.gpus_without_profiling} GPUs "
        f"without DCGM profiling fields; {t.degraded_gpus} with degraded or lost telemetry",
        markup=False,
    )
    skus = Table(title="GPUs by SKU", title_justify="left")
    for column in ("SKU", "GPUs", "GPU-hours", "SM active", "tensor active", "DRAM active", "bottleneck",
                   "idle GPUs", "idle GPU-hours", "no profiling", "degraded"):  # fmt: skip
        skus.add_column(column, overflow="fold")
    for row in view.skus:
        add_row(
            skus,
            row.sku,
            row.gpus,
            _hours(row.gpu_hours),
            _share(row.sm_active),
            _share(row.tensor_active),
            _share(row.dram_active),
            ", ".join(f"{n} {kind}" for kind, n in row.bottlenecks.items()),
            row.idle_gpus,
            _hours(row.idle_gpu_hours),
            row.gpus_without_profiling,
            row.degraded_gpus,
        )
    console.print(skus)
    gpus = Table(title="GPUs", title_justify="left")
    for column in ("GPU", "node", "SKU", "pod", "hours", "SM", "tensor", "DRAM", "GPU util", "bottleneck",
                   "idle GPU-h", "degraded"):  # fmt: skip
        gpus.add_column(column, overflow="fold")
    for gpu in view.gpus[:GPU_TABLE_ROWS]:
        add_row(
            gpus,
            gpu.gpu_uuid,
            gpu.node or "-",
            gpu.sku or gpu.gpu_name or "unknown",
            gpu.worker_id or "-",
            _hours(gpu.hours),
            _share(gpu.sm_active),
            _share(gpu.tensor_active),
            _share(gpu.dram_active),
            _share(gpu.gpu_util),
            gpu.bottleneck,
            _hours(gpu.idle_gpu_hours),
            _share(max(gpu.degraded_share, gpu.lost_share)),
        )
    console.print(gpus)
    if len(view.gpus) > GPU_TABLE_ROWS:
        console.print(f"... {len(view.gpus) - GPU_TABLE_ROWS} more GPUs: see --json", markup=False)
    reasons = sorted({g.activity_unknown_reason for g in view.gpus if g.activity_unknown_reason})
    if reasons:
        console.print("Unknown activity", style="bold")
        for why in reasons:
            n = sum(1 for g in view.gpus if g.activity_unknown_reason == why)
            console.print(f"- {n} GPU(s): {why}", markup=False)
    if view.warnings:
        console.print("Warnings", style="bold")
        for line in view.warnings:
            console.print(f"- {line}", markup=False)
    console.print("To judge placement, expose these engine metrics", style="bold")
    for needed in view.engine_metrics_needed:
        console.print(
            f"- {needed.engine}: {', '.join(needed.metrics)} (labels: {', '.join(needed.labels)})",
            markup=False,
        )
    console.print(f"- {view.engine_join_help}", markup=False)
