"""The GPU view on the dashboard: a store with GPU samples and no engine (dcgm-exporter alone) shows what
``phasefit analyze`` prints for it (analyzer/telemetry/gpu_view.py), instead of empty placement figures.

Either source: the store is read here (:func:`read_gpu_view`), the service's ``GET /v1/gpu-view`` by
:meth:`dashboard.api_source.ApiSource.gpu_view`; both give the analyzer's own
:class:`~analyzer.telemetry.gpu_view.GpuView` (:func:`gpu_view` picks the read). Names reach Streamlit
through ``st.dataframe`` (text as it is) or :func:`dashboard.plain.plain` (escaped Markdown); unknown
activity stays empty, never 0.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from analyzer.telemetry.gpu_view import GpuView
    from dashboard.data import Reads
    from dashboard.views import Scope


def read_gpu_view(engine: Engine, since: datetime, until: datetime) -> GpuView | None:
    """The GPU view of the store over [since, until), or None where an engine reported (placement can be
    judged: the usual pages apply) or no GPU sample lies in the range: the builder ``phasefit analyze`` and
    the service use too (:mod:`analyzer.sources.store_gpu_view`)."""
    from analyzer.settings import AnalyzerSettings
    from analyzer.sources.store_gpu_view import read_gpu_view as build

    with engine.connect() as connection:
        return build(connection, since, until, AnalyzerSettings().params().bottleneck).view


def gpu_view(reads: Reads, scope: Scope) -> GpuView | None:
    """The GPU view over the scope's range from the page's source (store or API), or None where there is
    none to show (an engine reported, or no GPU sample lies in the range)."""
    source: Any = reads.source
    if reads.kind == "api":
        view: GpuView | None = source.gpu_view(scope)
        return view
    return read_gpu_view(source.engine, scope.since, scope.until)


def _pct(value: float | None) -> float | None:
    return None if value is None else round(value * 100.0, 1)


def sku_rows(view: GpuView) -> list[dict[str, Any]]:
    return [
        {
            "SKU": s.sku,
            "GPUs": s.gpus,
            "GPU-hours": s.gpu_hours,
            "SM active %": _pct(s.sm_active),
            "tensor active %": _pct(s.tensor_active),
            "DRAM active %": _pct(s.dram_active),
            "bottleneck": ", ".join(f"{n} {kind}" for kind, n in s.bottlenecks.items()),
            "idle GPUs": s.idle_gpus,
            "idle GPU-hours": s.idle_gpu_hours,
            "without profiling": s.gpus_without_profiling,
            "degraded": s.degraded_gpus,
        }
        for s in view.skus
    ]


def gpu_rows(view: GpuView) -> list[dict[str, Any]]:
    return [
        {
            "GPU": g.gpu_uuid,
            "node": g.node,
            "SKU": g.sku or g.gpu_name,
            "pod": g.worker_id,
            "hours": g.hours,
            "SM active %": _pct(g.sm_active),
            "tensor active %": _pct(g.tensor_active),
            "DRAM active %": _pct(g.dram_active),
            "GPU util %": _pct(g.gpu_util),
            "bottleneck": g.bottleneck,
            "idle GPU-hours": g.idle_gpu_hours,
            "degraded %": _pct(max(g.degraded_share, g.lost_share)),
            "why unknown": g.activity_unknown_reason or g.bottleneck_reason,
        }
        for g in view.gpus
    ]


def render(view: GpuView) -> None:
    """The GPU view as tiles, two tables and the advice (every name literal)."""
    import streamlit as st

    from dashboard.plain import plain

    st.info(f"GPU view: {plain(view.reason)}.")
    t = view.totals
    tiles = st.columns(4)
    tiles[0].metric("GPUs", str(t.gpus), help=f"{t.gpu_hours:,.1f} GPU-hours of samples")
    tiles[1].metric("Idle GPUs", str(t.idle_gpus), help="Idle in every hour they reported.")
    idle_hours = t.idle_gpu_hours
    tiles[2].metric(
        "Idle GPU-hours",
        "unknown" if idle_hours is None else f"{idle_hours:,.1f}",
        help=f"Hours with SM activity (else GPU_UTIL) under {t.idle_below:.0%}; unknown for "
        f"{t.idle_unknown_gpus} GPU(s) that reported no activity field.",
    )
    tiles[3].metric("GPUs without profiling", str(t.gpus_without_profiling))
    st.subheader("GPUs by SKU")
    st.dataframe(sku_rows(view), hide_index=True, width="stretch")
    st.subheader("GPUs")
    st.caption("Empty activity cells are unknown (no DCGM profiling field), never 0: see 'why unknown'.")
    st.dataframe(gpu_rows(view), hide_index=True, width="stretch")
    for warning in view.warnings:
        st.warning(plain(warning))
    st.subheader("To judge placement, expose these engine metrics")
    for needed in view.engine_metrics_needed:
        st.markdown(
            f"- {plain(needed.engine)}: {plain(', '.join(needed.metrics))} "
            f"(labels: {plain(', '.join(needed.labels))})"
        )
    st.caption(plain(view.engine_join_help))
