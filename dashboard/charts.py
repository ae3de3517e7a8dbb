"""The dashboard's figures over time and inventory (Altair; see :mod:`dashboard.chart_kit` for why Altair).
The roofline lives in :mod:`dashboard.roofline_chart`. Builders take the views and return Altair charts;
no Streamlit calls here.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import altair as alt

from analyzer.report.style import MISPLACED_COLOUR
from dashboard.chart_kit import HEIGHT, inline, iso, layered, role_scale, single
from dashboard.views import AlertView, GpuGroup, LostPoint, TrafficPoint, UtilisationPoint


def gpu_groups(groups: Sequence[GpuGroup]) -> alt.Chart:
    """GPUs per SKU, stacked by the role of their workers; a MIG SKU's bar counts its instances."""
    rows: dict[tuple[str, str], int] = {}
    for g in groups:
        rows[(g.sku, g.role)] = rows.get((g.sku, g.role), 0) + g.gpus
    data = [{"sku": sku, "role": role, "gpus": n} for (sku, role), n in sorted(rows.items())]
    return single(
        alt.Chart(inline(data), height=max(150, 50 * len({r["sku"] for r in data})))
        .mark_bar()
        .encode(
            y=alt.Y("sku:N", title=None),
            x=alt.X("gpus:Q", title="GPUs (MIG SKUs: instances)", stack="zero"),
            color=alt.Color("role:N", scale=role_scale([str(r["role"]) for r in data]), title="role"),
            order=alt.Order("role:N"),
            tooltip=["sku:N", "role:N", "gpus:Q"],
        )
    )


def utilisation(points: Sequence[UtilisationPoint], measure: str, title: str) -> alt.Chart:
    """Hourly mean of one activity ratio, one line per (role, SKU): colour = role, dash = SKU."""
    data = [
        {"ts": iso(p.ts), "sku": p.sku, "role": p.role, "value": getattr(p, measure), "gpus": p.gpus}
        for p in points
        if getattr(p, measure) is not None
    ]
    return single(
        alt.Chart(inline(data), title=title, height=HEIGHT)
        .mark_line(interpolate="monotone")
        .encode(
            x=alt.X("ts:T", title=None),
            y=alt.Y("value:Q", title=None, axis=alt.Axis(format="%"), scale=alt.Scale(domain=[0, 1])),
            color=alt.Color("role:N", scale=role_scale([str(r["role"]) for r in data]), title="role"),
            strokeDash=alt.StrokeDash("sku:N", title="SKU"),
            detail=["sku:N", "role:N"],
            tooltip=[
                alt.Tooltip("ts:T", format="%Y-%m-%d %H:%M"),
                "sku:N",
                "role:N",
                alt.Tooltip("value:Q", format=".1%"),
                "gpus:Q",
            ],
        )
    )


def lost_output(points: Sequence[LostPoint]) -> alt.Chart:
    """Lost output (generated) tokens/s per hour, the figure that leads (hours that do not know it are left
    out, never drawn as 0)."""
    data = [{"ts": iso(p.ts), "lost output tokens/s": p.output} for p in points if p.output is not None]
    return single(
        alt.Chart(inline(data), height=HEIGHT)
        .mark_line(color=MISPLACED_COLOUR)
        .encode(
            x=alt.X("ts:T", title=None),
            y=alt.Y("lost output tokens/s:Q", title="lost output tokens/s"),
            tooltip=[
                alt.Tooltip("ts:T", format="%Y-%m-%d %H:%M"),
                alt.Tooltip("lost output tokens/s:Q", format=",.0f"),
            ],
        )
    )


def lost_tokens(points: Sequence[LostPoint]) -> alt.LayerChart:
    """Lost total (prompt + output) tokens/s per hour, secondary: the central estimate as a line over its
    low-high band."""
    data = [
        {
            "ts": iso(p.ts),
            "lost": p.lost,
            "low": p.low if p.low is not None else p.lost,
            "high": p.high if p.high is not None else p.lost,
        }
        for p in points
        if p.lost is not None
    ]
    base = alt.Chart(inline(data), height=HEIGHT).encode(x=alt.X("ts:T", title=None))
    band = base.mark_area(opacity=0.25, color=MISPLACED_COLOUR).encode(
        y=alt.Y("low:Q", title="lost total tokens/s (prompt + output)"), y2="high:Q"
    )
    line = base.mark_line(color=MISPLACED_COLOUR).encode(
        y="lost:Q",
        tooltip=[
            alt.Tooltip("ts:T", format="%Y-%m-%d %H:%M"),
            alt.Tooltip("lost:Q", format=",.0f"),
            alt.Tooltip("low:Q", format=",.0f"),
            alt.Tooltip("high:Q", format=",.0f"),
        ],
    )
    return layered(band, line)


def traffic_mix(points: Sequence[TrafficPoint]) -> alt.Chart:
    """Prompt and generated tokens/s per hour (where each is real)."""
    data = []
    for p in points:
        data.append(
            {"ts": iso(p.ts), "pool": p.pool, "series": "prompt tokens/s", "value": p.prompt_tokens_per_s}
        )
        data.append(
            {
                "ts": iso(p.ts),
                "pool": p.pool,
                "series": "generated tokens/s",
                "value": p.generation_tokens_per_s,
            }
        )
    return single(
        alt.Chart(inline(data), height=HEIGHT)
        .mark_line()
        .encode(
            x=alt.X("ts:T", title=None),
            y=alt.Y("value:Q", title="tokens/s"),
            color=alt.Color("series:N", title=None),
            detail="pool:N",
            tooltip=[
                alt.Tooltip("ts:T", format="%Y-%m-%d %H:%M"),
                "pool:N",
                "series:N",
                alt.Tooltip("value:Q", format=",.0f"),
            ],
        )
    )


RATIO_SERIES = ["provisioned", "traffic needs", "recommended (analyzer)"]


def ratio_over_time(rows: Sequence[dict[str, Any]], changes: Sequence[dict[str, Any]]) -> alt.LayerChart:
    """Prefill:decode ratios per hour (``rows``: ts, series, value) with change points as vertical rules."""
    series = alt.Scale(domain=RATIO_SERIES, range=["#4C4C4C", "#F58518", "#4C78A8"])
    dashes = alt.Scale(domain=RATIO_SERIES, range=[[1, 0], [1, 0], [6, 4]])
    lines = (
        alt.Chart(inline(rows), height=HEIGHT + 40)
        .mark_line(interpolate="step-after")
        .encode(
            x=alt.X("ts:T", title=None),
            y=alt.Y("value:Q", title="prefill workers per decode worker"),
            color=alt.Color("series:N", title=None, scale=series, legend=alt.Legend(orient="bottom")),
            strokeDash=alt.StrokeDash("series:N", scale=dashes, legend=None),
            tooltip=[
                alt.Tooltip("ts:T", format="%Y-%m-%d %H:%M"),
                "series:N",
                alt.Tooltip("value:Q", format=".2f"),
            ],
        )
    )
    marks = (
        alt.Chart(inline(changes))
        .mark_rule(color=MISPLACED_COLOUR, strokeWidth=1.5, strokeDash=[3, 3])
        .encode(x="ts:T", tooltip=[alt.Tooltip("ts:T", format="%Y-%m-%d %H:%M"), "what:N"])
    )
    return layered(lines, marks)


def alert_timeline(alerts: Sequence[AlertView], since: datetime, until: datetime) -> alt.Chart:
    """One bar per alert episode from its start to its end (or to the range end while firing)."""
    rows = []
    for a in alerts:
        subject = (
            a.labels.get("worker") or a.labels.get("pool", "").split("/")[-1] or a.labels.get("node") or ""
        )
        rows.append(
            {
                "alert": f"{a.alertname or a.fingerprint} {subject}".strip(),
                "start": iso(max(a.starts_at, since)),
                "end": iso(min(a.ends_at or until, until)),
                "status": a.status,
                "summary": a.summary,
            }
        )
    status = alt.Scale(domain=["firing", "resolved"], range=[MISPLACED_COLOUR, "#54A24B"])
    return single(
        alt.Chart(inline(rows), height=max(120, 26 * len({r["alert"] for r in rows})))
        .mark_bar(cornerRadius=2)
        .encode(
            y=alt.Y("alert:N", title=None, axis=alt.Axis(labelLimit=260)),
            x=alt.X(
                "start:T",
                title=None,
                scale=alt.Scale(domain=[iso(since), iso(until)]),
                axis=alt.Axis(format="%a %d %b", tickCount="day"),
            ),
            x2="end:T",
            color=alt.Color("status:N", scale=status),
            tooltip=[
                "alert:N",
                "status:N",
                alt.Tooltip("start:T", format="%Y-%m-%d %H:%M"),
                alt.Tooltip("end:T", format="%Y-%m-%d %H:%M"),
                "summary:N",
            ],
        )
    )
