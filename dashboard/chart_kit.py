"""What the dashboard's chart builders share: inline data, role colours, typed wrappers over Altair's
untyped builder calls.

Why Altair for the dashboard (and matplotlib only for the report's static PNGs): it ships with Streamlit,
renders in the browser (crisp at any size, no image round trip), gives hover tooltips (worker, SKU, role,
counters) and log axes natively, and its charts are data, so tests can inspect them.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import altair as alt

from analyzer.report.style import ROLE_COLOURS

ROLE_ORDER = ["prefill", "decode", "mixed", "unknown", "unattributed"]
HEIGHT = 260


def role_scale(present: Sequence[str]) -> alt.Scale:
    """Role colours, with only the roles present in the legend (known roles first, in a fixed order)."""
    domain = [r for r in ROLE_ORDER if r in present] + sorted(set(present) - set(ROLE_ORDER))
    return alt.Scale(domain=domain, range=[ROLE_COLOURS.get(r, ROLE_COLOURS["unknown"]) for r in domain])


def iso(ts: datetime) -> str:
    return ts.isoformat()


def inline(rows: Sequence[dict[str, Any]]) -> alt.InlineData:
    return alt.InlineData(values=list(rows))


def single(chart: Any) -> alt.Chart:
    """Altair's encode()/properties() are untyped; every builder here returns a single-view chart."""
    assert isinstance(chart, alt.Chart)
    return chart


def layered(*layers: Any, height: int | None = None, independent: bool = False) -> alt.LayerChart:
    chart = alt.LayerChart(layer=list(layers))
    if height is not None:
        chart = chart.properties(height=height)
    if independent:
        chart = chart.resolve_scale(color="independent", shape="independent")
    assert isinstance(chart, alt.LayerChart)
    return chart
