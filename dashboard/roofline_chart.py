"""The roofline and the speed-of-light plane as Altair charts: both SKUs' roofs, every worker as a point
(colour = role, shape = SKU), misplaced workers ringed in red with the gain on the better roof.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import altair as alt

from analyzer.report.fleet_roofline import Roof, WorkerPoint, intensity_span
from analyzer.report.style import MISPLACED_COLOUR, ROOF_COLOURS, SKU_SHAPES
from dashboard.chart_kit import inline, layered, role_scale


def roofline(roofs: Sequence[Roof], points: Sequence[WorkerPoint], label_top: int = 8) -> alt.LayerChart:
    """Log-log roofline in TFLOP/s: every roof (slopes labelled with their bandwidth, the flat part with its
    peak), every worker (colour = role, shape = SKU), misplaced workers ringed in red and labelled."""
    lo, hi = intensity_span(points, roofs)
    curves, labels = [], []
    for roof in roofs:
        curves += [{"roof": roof.label, "intensity": at, "tflops": f / 1e12} for at, f in roof.curve(lo, hi)]
        at = lo * 3
        labels.append(
            {
                "roof": roof.label,
                "intensity": at,
                "tflops": roof.bandwidth * at / 1e12,
                "text": f"{roof.name}: {roof.bandwidth / 1e12:.2f} TB/s",
            }
        )
    peaks = sorted({(r.peak_flops, r.precision.value) for r in roofs})
    flat = [
        {"intensity": hi, "tflops": p / 1e12, "text": f"{p / 1e12:,.0f} TFLOP/s dense {prec.upper()}"}
        for p, prec in peaks
    ]
    ridges = [
        {
            "roof": r.label,
            "intensity": r.ridge,
            "tflops": r.peak_flops / 1e12,
            "text": f"{r.label} ridge: {r.ridge:,.0f} FLOP/byte",
        }
        for r in roofs
    ]
    roof_domain = [r.label for r in roofs]
    roof_scale = alt.Scale(domain=roof_domain, range=list(ROOF_COLOURS[: len(roof_domain)]))
    ys = [p.flops / 1e12 for p in points] + [r.peak_flops / 1e12 for r in roofs]
    y_lo = 10 ** math.floor(math.log10(max(min(ys) / 2, 1e-3))) if ys else 1.0
    y_hi = max(ys) * 2.2 if ys else 1e4
    x = alt.X(
        "intensity:Q",
        scale=alt.Scale(type="log", domain=[lo, hi]),
        axis=alt.Axis(format=",.0f"),
        title="arithmetic intensity, FLOP/byte (from tensor and DRAM activity)",
    )
    y = alt.Y(
        "tflops:Q",
        scale=alt.Scale(type="log", domain=[y_lo, y_hi]),
        axis=alt.Axis(format=",.0f"),
        title="achieved TFLOP/s per GPU (estimate)",
    )
    lines = (
        alt.Chart(inline(curves))
        .mark_line(strokeWidth=2)
        .encode(
            x=x,
            y=y,
            color=alt.Color("roof:N", scale=roof_scale, legend=alt.Legend(title="roof")),
            detail="roof:N",
        )
    )
    slope_text = [  # the fastest memory above-left of its slope, the others below-right of theirs
        alt.Chart(inline([label]))
        .mark_text(
            align="right" if i == 0 else "left",
            dx=-6 if i == 0 else 8,
            dy=-6 if i == 0 else 12 + 13 * (i - 1),
            fontSize=11,
        )
        .encode(x=x, y=y, text="text:N", color=alt.Color("roof:N", scale=roof_scale, legend=None))
        for i, label in enumerate(labels)
    ]
    flat_text = (
        alt.Chart(inline(flat))
        .mark_text(align="right", dy=-9, fontSize=11, color="#333")
        .encode(x=x, y=y, text="text:N")
    )
    ridge_marks = (
        alt.Chart(inline(ridges))
        .mark_point(shape="diamond", filled=True, size=60)
        .encode(x=x, y=y, color=alt.Color("roof:N", scale=roof_scale, legend=None), tooltip=["text:N"])
    )
    skus = sorted({p.sku for p in points})
    rows = [
        {
            "worker": p.worker_id,
            "pool": p.pool,
            "sku": p.sku,
            "role": p.role,
            "intensity": p.intensity,
            "tflops": p.flops / 1e12,
            "tensor": p.tensor_active,
            "dram": p.dram_active,
            "share": p.share_of_roof,
            "bound": p.bound,
            "misplaced": "yes" if p.misplaced else "no",
            "gpu_hours": p.weight,
        }
        for p in points
    ]
    tooltip = [
        "worker:N",
        "pool:N",
        "sku:N",
        "role:N",
        alt.Tooltip("intensity:Q", format=",.1f"),
        alt.Tooltip("tflops:Q", format=",.0f", title="TFLOP/s"),
        alt.Tooltip("tensor:Q", format=".1%"),
        alt.Tooltip("dram:Q", format=".1%"),
        alt.Tooltip("share:Q", format=".0%", title="of own roof"),
        "bound:N",
        "misplaced:N",
    ]
    dots = (
        alt.Chart(inline(rows))
        .mark_point(filled=True, opacity=0.9, size=110)
        .encode(
            x=x,
            y=y,
            color=alt.Color("role:N", scale=role_scale([str(r["role"]) for r in rows]), title="role"),
            shape=alt.Shape(
                "sku:N", scale=alt.Scale(domain=skus, range=list(SKU_SHAPES[: len(skus)])), title="SKU"
            ),
            tooltip=tooltip,
        )
    )
    misplaced = [r for r in rows if r["misplaced"] == "yes"]
    ring = (
        alt.Chart(inline(misplaced))
        .mark_point(filled=False, color=MISPLACED_COLOUR, size=420, strokeWidth=2)
        .encode(x=x, y=y, tooltip=tooltip)
    )
    top = sorted(misplaced, key=lambda r: (-float(r["gpu_hours"]), str(r["worker"])))[:label_top]
    names = [  # one layer per label, stacked downwards: nearby points would print over each other
        alt.Chart(inline([row]))
        .mark_text(align="left", dx=14, dy=-4 + 13 * i, color=MISPLACED_COLOUR)
        .encode(x=x, y=y, text="worker:N")
        for i, row in enumerate(top)
    ]
    gains = []
    for p in points:
        better = [r for r in roofs if p.misplaced and r.sku != p.sku and r.precision == p.precision]
        if better:
            target = max(better, key=p.gain_on)
            if p.gain_on(target) > 1.01:
                gains.append(
                    {
                        "intensity": p.intensity,
                        "tflops": p.flops / 1e12,
                        "roof": target.attainable(p.intensity) / 1e12,
                        "text": f"+{(p.gain_on(target) - 1) * 100:.0f}% on {target.name}",
                    }
                )
    arrows = (
        alt.Chart(inline(gains))
        .mark_rule(color=MISPLACED_COLOUR, strokeDash=[4, 3])
        .encode(x=x, y=y, y2="roof:Q")
    )
    arrow_text = (
        alt.Chart(inline(gains[:1]))
        .mark_text(align="right", dx=-8, color=MISPLACED_COLOUR)
        .encode(x=x, y=alt.Y("roof:Q", scale=alt.Scale(type="log", domain=[y_lo, y_hi])), text="text:N")
    )
    return layered(
        lines,
        *slope_text,
        flat_text,
        ridge_marks,
        arrows,
        arrow_text,
        dots,
        ring,
        *names,
        height=480,
        independent=True,
    )


def speed_of_light(points: Sequence[WorkerPoint]) -> alt.LayerChart:
    """Counter-native plane, no FLOP/byte estimate: DRAM activity over its practical ceiling (0.8) against
    tensor-pipe activity, with the quadrants that tell compute-, memory-, both- and neither-bound apart."""
    rows = [
        {
            "worker": p.worker_id,
            "sku": p.sku,
            "role": p.role,
            "dram": min(p.dram_active / 0.8, 1.0),
            "tensor": p.tensor_active,
            "misplaced": "yes" if p.misplaced else "no",
        }
        for p in points
    ]
    axis = alt.Scale(domain=[0, 1])
    x = alt.X("dram:Q", scale=axis, title="DRAM activity / 0.8 (memory pressure)", axis=alt.Axis(format="%"))
    y = alt.Y(
        "tensor:Q", scale=axis, title="tensor-pipe activity (compute pressure)", axis=alt.Axis(format="%")
    )
    rules = inline([{"v": 0.5}])
    vertical = alt.Chart(rules).mark_rule(strokeDash=[4, 4], color="#999").encode(x=alt.X("v:Q", scale=axis))
    horizontal = (
        alt.Chart(rules).mark_rule(strokeDash=[4, 4], color="#999").encode(y=alt.Y("v:Q", scale=axis))
    )
    dots = (
        alt.Chart(inline(rows))
        .mark_point(filled=True, size=90)
        .encode(
            x=x,
            y=y,
            color=alt.Color("role:N", scale=role_scale([str(r["role"]) for r in rows])),
            shape=alt.Shape("sku:N"),
            tooltip=[
                "worker:N",
                "sku:N",
                "role:N",
                alt.Tooltip("dram:Q", format=".0%"),
                alt.Tooltip("tensor:Q", format=".0%"),
                "misplaced:N",
            ],
        )
    )
    ring = (
        alt.Chart(inline([r for r in rows if r["misplaced"] == "yes"]))
        .mark_point(filled=False, color=MISPLACED_COLOUR, size=380, strokeWidth=2)
        .encode(x=x, y=y)
    )
    return layered(vertical, horizontal, dots, ring, height=420)
