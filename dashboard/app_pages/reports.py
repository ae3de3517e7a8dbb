"""Audit reports: the weekly placement audits, viewable inline and downloadable."""

from __future__ import annotations

import base64
import json

import streamlit as st

from analyzer.report.style import percent, si, usd
from dashboard import widgets

context = widgets.page(
    "Audit reports",
    "The weekly placement audits ('phasefit report --week YYYY-Www'), newest first. Each is a self-contained "
    "HTML file; the figures below are its summary.",
)


def _money(value: float | None) -> str:
    return usd(value) if value is not None else "price not set"


reports = widgets.served(context.reads.reports) or []
if not reports:
    st.info("No audit report stored yet: run 'phasefit report --week 2026-W48' (or the weekly CronJob).")
    st.stop()
trend = []
for r in reports:
    figures = r.figures
    trend.append(
        {
            "week": r.week,
            "lost tokens /week": widgets.known(figures.lost_tokens_week, si),
            "placement efficiency": widgets.known(figures.placement_efficiency, percent),
            "misplaced workers": figures.misplaced_workers,
            "misplacement $/week": usd(figures.misplacement_cost_per_week_usd),
            "idle $/week": usd(figures.idle_cost_per_week_usd),
            "created": widgets.fmt_time(r.created_at),
        }
    )
st.dataframe(trend, hide_index=True, width="stretch")

week = st.selectbox("Week", [r.week for r in reports], key="rp_week")
chosen = next(r for r in reports if r.week == week)
body = context.reads.report_body(week)
if body is None:
    st.error(f"The report for {week} disappeared from the store.")
    st.stop()
buttons = st.columns(4)
buttons[0].download_button(
    "Download HTML", body, file_name=f"phasefit-audit-{week}.html", mime="text/html", key="rp_html"
)
buttons[1].download_button(
    "Download JSON",
    json.dumps(chosen.summary, indent=2, sort_keys=True),
    file_name=f"phasefit-audit-{week}.json",
    mime="application/json",
    key="rp_json",
)
# A data: URL gives the report an opaque origin: whatever the stored HTML holds cannot reach the app.
st.iframe("data:text/html;base64," + base64.b64encode(body.encode()).decode("ascii"), height=900)
