"""The report's charts as PNG bytes (matplotlib, Agg, no pyplot state), each with alt text giving its main
number. PNGs carry no timestamp or software tag, so the same report data gives the same bytes.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from matplotlib import rc_context
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from analyzer.report.fleet_roofline import Roof, WorkerPoint, intensity_span
from analyzer.report.model import AuditReport, DriftEvent, HourlyLost, RatioPoint, SkuHours
from analyzer.report.style import (
    MISPLACED_COLOUR,
    ROOF_COLOURS,
    SKU_MARKERS,
    percent,
    role_colour,
    si,
    usd,
)

DPI = 110


@dataclass(frozen=True)
class Chart:
    name: str  # file-name stem: phasefit-audit-<week>-<name>.png
    title: str
    alt: str
    png: bytes


def _day(moment: datetime) -> float:
    """Days since 1970-01-01 UTC: the time axis in days (matplotlib's own date numbers), typed."""
    return moment.timestamp() / 86_400.0


def _days(moments: Sequence[datetime]) -> list[float]:
    return [_day(m) for m in moments]


def _time_axis(axes: Axes) -> None:
    """Ticks at midnight UTC (and noon on short ranges), labelled with the weekday and date."""
    lo, hi = axes.get_xlim()
    step = 0.5 if hi - lo <= 3.5 else 1.0
    ticks = [t * step for t in range(math.ceil(lo / step), math.floor(hi / step) + 1)]
    axes.set_xticks(ticks)
    axes.set_xticklabels(
        [
            datetime.fromtimestamp(t * 86_400.0, tz=UTC).strftime("%H:%M" if t % 1 else "%a %d %b")
            for t in ticks
        ],
        fontsize=8,
    )


def _png(figure: Figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None}, bbox_inches="tight")
    return buffer.getvalue()


def _style(axes: Axes) -> None:
    axes.spines[["top", "right"]].set_visible(False)
    axes.grid(True, which="major", color="#e6e6e6", linewidth=0.8)
    axes.set_axisbelow(True)


def _si_axis(axes: Axes, unit: str = "") -> None:
    axes.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: si(v, unit, 3)))


def lost_chart(
    hourly: Sequence[HourlyLost], last_week: Sequence[HourlyLost], drift: Sequence[DriftEvent]
) -> Chart:
    output = all(h.output for h in hourly) if hourly else True
    unit = "output tokens/s" if output else "total tokens/s (prompt + output; output unknown)"
    figure = Figure(figsize=(9.5, 3.2))
    axes = figure.add_subplot()
    if last_week:
        axes.plot(
            _days([h.ts for h in last_week]),
            [h.lost for h in last_week],
            color="#aaaaaa",
            linewidth=1.2,
            label="last week (same hour)",
        )
    if hourly:
        ts = _days([h.ts for h in hourly])
        axes.fill_between(
            ts,
            [h.low for h in hourly],
            [h.high for h in hourly],
            color=MISPLACED_COLOUR,
            alpha=0.18,
            linewidth=0,
            label="low–high",
        )
        axes.plot(ts, [h.lost for h in hourly], color=MISPLACED_COLOUR, linewidth=1.8, label=f"lost {unit}")
    for event in drift:
        axes.axvline(_day(event.at), color="#444444", linestyle=":", linewidth=1)
    axes.set_ylim(bottom=0)
    axes.set_ylabel("output tokens/s" if output else "total tokens/s")
    _si_axis(axes)
    _style(axes)
    axes.legend(loc="upper left", frameon=False, fontsize=8)
    _time_axis(axes)
    peak = max((h.lost for h in hourly), default=0.0)
    mean = sum(h.lost for h in hourly) / len(hourly) if hourly else 0.0
    return Chart(
        "lost",
        "Lost output tokens/s by hour" if output else "Lost total tokens/s by hour (output unknown)",
        f"Capacity lost to placement, hour by hour, in {unit}: mean {si(mean)}, peak {si(peak)}; dotted "
        "lines mark drift events, grey is last week.",
        _png(figure),
    )


def roofline_chart(roofs: Sequence[Roof], points: Sequence[WorkerPoint], label_top: int = 6) -> Chart:
    figure = Figure(figsize=(9.5, 5.2))
    axes = figure.add_subplot()
    lo, hi = intensity_span(points, roofs)
    for i, roof in enumerate(roofs):
        xs, ys = zip(*roof.curve(lo, hi), strict=True)
        colour = ROOF_COLOURS[i % len(ROOF_COLOURS)]
        axes.plot(xs, [y / 1e12 for y in ys], color=colour, linewidth=1.8)
        axes.plot([roof.ridge], [roof.peak_flops / 1e12], marker="D", color=colour, markersize=4)
        x_label = lo * 1.3
        axes.annotate(
            f"{roof.name}: {roof.bandwidth / 1e12:.2f} TB/s",
            (x_label, roof.bandwidth * x_label / 1e12),
            textcoords="offset points",
            xytext=(0, 6 + 10 * i),
            fontsize=8,
            color=colour,
        )
    for peak in sorted({(r.peak_flops, r.precision.value) for r in roofs}):
        axes.annotate(
            f"{peak[0] / 1e12:,.0f} TFLOP/s dense {peak[1].upper()}",
            (hi, peak[0] / 1e12),
            textcoords="offset points",
            xytext=(-4, 5),
            ha="right",
            fontsize=8,
            color="#333333",
        )
    skus = sorted({p.sku for p in points})
    for p in points:
        marker = SKU_MARKERS[skus.index(p.sku) % len(SKU_MARKERS)]
        axes.scatter(
            [p.intensity],
            [p.flops / 1e12],
            s=46,
            marker=marker,
            color=role_colour(p.role),
            edgecolors=MISPLACED_COLOUR if p.misplaced else "white",
            linewidths=2 if p.misplaced else 0.5,
            zorder=3,
        )
    misplaced = sorted((p for p in points if p.misplaced), key=lambda p: (-p.weight, p.worker_id))
    for n, p in enumerate(misplaced[:label_top]):
        better = [r for r in roofs if r.sku != p.sku and r.precision == p.precision and p.gain_on(r) > 1.01]
        label = p.worker_id
        if better:
            target = max(better, key=p.gain_on)
            axes.annotate(
                "",
                (p.intensity, target.attainable(p.intensity) / 1e12),
                (p.intensity, p.flops / 1e12),
                arrowprops={"arrowstyle": "->", "color": MISPLACED_COLOUR, "linewidth": 1.2},
            )
            label = f"{p.worker_id} (roof +{(p.gain_on(target) - 1) * 100:.0f}% on {target.name})"
        axes.annotate(
            label,
            (p.intensity, p.flops / 1e12),
            textcoords="offset points",
            xytext=(8, -4 - 9 * n),
            fontsize=7.5,
            color=MISPLACED_COLOUR,
        )
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlim(lo, hi)
    plain = FuncFormatter(lambda v, _pos: f"{v:,.0f}" if v >= 1 else f"{v:g}")
    axes.xaxis.set_major_formatter(plain)
    axes.yaxis.set_major_formatter(plain)
    axes.set_xlabel("arithmetic intensity, FLOP/byte (tensor activity × peak ÷ DRAM activity × bandwidth)")
    axes.set_ylabel("achieved TFLOP/s per GPU (estimate)")
    _style(axes)
    for role in sorted({p.role for p in points}):
        axes.scatter([], [], color=role_colour(role), label=role)
    for sku in skus:
        axes.scatter(
            [], [], marker=SKU_MARKERS[skus.index(sku) % len(SKU_MARKERS)], color="#666666", label=sku
        )
    axes.scatter([], [], color="white", edgecolors=MISPLACED_COLOUR, linewidths=2, label="misplaced")
    axes.legend(loc="lower right", frameon=False, fontsize=8, ncol=2)
    return Chart(
        "roofline",
        "The fleet on the roofline",
        f"Roofline of {len(points)} workers on "
        f"{', '.join(r.label for r in roofs)}; {len(misplaced)} misplaced worker(s) ringed in red.",
        _png(figure),
    )


def ratio_chart(ratios: Sequence[RatioPoint], drift: Sequence[DriftEvent]) -> Chart:
    figure = Figure(figsize=(9.5, 3.0))
    axes = figure.add_subplot()
    for pool in sorted({r.pool for r in ratios}):
        rows = [r for r in ratios if r.pool == pool]
        for key, style in (("provisioned", "-"), ("recommended", "--")):
            xs, ys = [], []
            for r in rows:
                value = getattr(r, key)
                xs += [_day(r.start), _day(r.end)]
                ys += [value, value]
            axes.plot(xs, ys, linestyle=style, linewidth=1.8, label=f"{pool.split('/')[-1]}: {key}")
    for event in drift:
        axes.axvline(_day(event.at), color=MISPLACED_COLOUR, linestyle=":", linewidth=1)
    axes.set_ylabel("prefill ÷ decode workers")
    axes.set_ylim(bottom=0)
    _style(axes)
    axes.legend(loc="upper left", frameon=False, fontsize=8)
    _time_axis(axes)
    latest = ratios[-1] if ratios else None
    alt = (
        f"Prefill:decode ratio per segment; latest {latest.provisioned or 0:.2f} provisioned against "
        f"{latest.recommended or 0:.2f} recommended."
        if latest
        else "Prefill:decode ratio per segment."
    )
    return Chart("ratio", "Prefill:decode ratio, provisioned against recommended", alt, _png(figure))


def sku_chart(rows: Sequence[SkuHours]) -> Chart:
    priced = bool(rows) and all(r.hourly_price_usd is not None for r in rows)
    scale = [(r.hourly_price_usd or 1.0) if priced else 1.0 for r in rows]
    figure = Figure(figsize=(9.5, 0.9 + 0.55 * max(1, len(rows))))
    axes = figure.add_subplot()
    left = [0.0] * len(rows)
    for key, label, colour in (
        ("well_placed", "well placed", "#4C78A8"),
        ("misplaced", "on misplaced workers", MISPLACED_COLOUR),
        ("unattributed", "no worker", "#BAB0AC"),
    ):
        values = [getattr(r, key) * s for r, s in zip(rows, scale, strict=True)]
        axes.barh([r.sku for r in rows], values, left=left, color=colour, label=label)
        left = [a + b for a, b in zip(left, values, strict=True)]
    axes.set_xlabel("$ this week (catalog prices)" if priced else "GPU-hours this week")
    _style(axes)
    axes.legend(loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=3, frameon=False, fontsize=8)
    wrong = sum(r.misplaced * s for r, s in zip(rows, scale, strict=True))
    total = sum(r.total * s for r, s in zip(rows, scale, strict=True))
    amount = usd(wrong) if priced else f"{wrong:,.0f} GPU-hours"
    return Chart(
        "gpu-hours",
        "Where the GPU time went",
        f"{amount} ({percent(wrong / total if total else None)}) "
        "of the week's GPU time ran on misplaced workers.",
        _png(figure),
    )


def charts(report: AuditReport) -> list[Chart]:
    # Names (pools, SKUs, workers) label the charts: text, never mathtext ("$...$" in a name would be drawn
    # as maths, or fail the report).
    with rc_context({"text.parse_math": False}):
        out = [lost_chart(report.hourly_lost, report.hourly_lost_last_week, report.drift_events)]
        if report.points:
            out.append(roofline_chart(report.roofs, report.points))
        if report.ratios:
            out.append(ratio_chart(report.ratios, report.drift_events))
        if report.sku_hours:
            out.append(sku_chart(report.sku_hours))
    return out
