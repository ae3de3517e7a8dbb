"""Colours and number formats shared by the report's charts and the dashboard's, so both read alike."""

from __future__ import annotations

import math

ROLE_COLOURS = {
    "prefill": "#4C78A8",
    "decode": "#F58518",
    "mixed": "#54A24B",
    "unknown": "#9D9D9D",
    "unattributed": "#BAB0AC",
}
SKU_MARKERS = ("o", "s", "^", "D", "v", "P")  # matplotlib markers, in SKU order
SKU_SHAPES = ("circle", "square", "triangle-up", "diamond", "triangle-down", "cross")  # Vega-Lite shapes
MISPLACED_COLOUR = "#D62728"
ROOF_COLOURS = ("#333333", "#8C564B", "#7F7F7F", "#17BECF")


def role_colour(role: str) -> str:
    return ROLE_COLOURS.get(role, ROLE_COLOURS["unknown"])


def si(value: float | None, unit: str = "", digits: int = 3) -> str:
    """``1.2k``, ``3.4M``, ``5.6G``: short, no scientific notation; ``-`` for missing or non-finite."""
    if value is None or not math.isfinite(value):
        return "-"
    magnitude = abs(value)
    for threshold, suffix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if magnitude >= threshold:
            return f"{value / threshold:.{digits}g}{suffix}{unit}"
    return f"{value:.{digits}g}{unit}"


def tokens_rate(value: float | None) -> str:
    return f"{si(value)} tok/s" if value is not None else "-"


def tokens_range(low: float | None, high: float | None) -> str:
    """``1.2k–1.9k tok/s`` (a range, never a sum)."""
    if low is None or high is None:
        return "-"
    return f"{si(low)}–{si(high)} tok/s"


def output_rate(value: float | None) -> str:
    """Lost output (generated) tokens/s: ``1.2k output tok/s``, ``unknown`` where not estimated."""
    return f"{si(value)} output tok/s" if value is not None else "unknown"


def output_range(low: float | None, high: float | None) -> str:
    return f"{si(low)}–{si(high)} output tok/s" if low is not None and high is not None else "range unknown"


def requests_rate(value: float | None) -> str:
    """Requests/s: ``0.75 req/s`` (small numbers keep two decimals), ``unknown`` where not estimated."""
    if value is None or not math.isfinite(value):
        return "unknown"
    return f"{value:,.2f} req/s" if abs(value) < 1000 else f"{si(value)} req/s"


def percent(value: float | None, digits: int = 0) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value * 100:.{digits}f}%"


def usd(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    return f"${value:,.0f}"


def evidence_line(evidence: dict[str, object]) -> str:
    """The counters a finding rests on, in one short line (``tensor 8% · DRAM 53% · KV 18%``)."""
    parts = []
    for key, label in (("tensor_active", "tensor"), ("dram_active", "DRAM"), ("kv_cache_usage", "KV")):
        value = evidence.get(key)
        if isinstance(value, int | float):
            parts.append(f"{label} {percent(float(value))}")
    now, best = evidence.get("prefill_decode_now"), evidence.get("prefill_decode_recommended")
    if isinstance(now, str) and isinstance(best, str):
        parts.append(f"prefill:decode {now} → {best}")
    return " · ".join(parts)
