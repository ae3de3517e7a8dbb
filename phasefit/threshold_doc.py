"""The "Analyzer thresholds" section of docs/configuration.md, written from the analyzer's parameter tree."""

from __future__ import annotations

from collections.abc import Mapping

from analyzer.pipeline import AnalyzerParams
from analyzer.tunable import tunables

TITLE = "Analyzer thresholds"


def _value(value: object) -> str:
    if value is None:
        return "`null`"
    if isinstance(value, Mapping):
        return "<br>".join(f"`{k}`: `{v:g}`" for k, v in value.items())
    if isinstance(value, float):
        return f"`{value:g}`"
    return f"`{value}`"


def render_thresholds() -> str:
    """A table of every threshold: its path, type, default and meaning."""
    lines = [
        "Every threshold the analysis uses, by its path in the analyzer's parameter tree",
        "(`analyzer.pipeline.AnalyzerParams`), each declared once beside the code that uses it. Set any of",
        "them with `PHASEFIT_ANALYZER_THRESHOLDS`, a JSON object of path -> value, e.g.",
        "`PHASEFIT_ANALYZER_THRESHOLDS='{\"findings.underutilised.below\": 0.35}'`; an unknown path or a",
        "value of the wrong type is refused at start with the path named. A mapping's override changes the",
        "entries it names. The alert rules take `bottleneck.busy`, `bottleneck.tensor_saturation` and",
        "`bottleneck.dram_saturation` (DCGM) from the same tree (`phasefit alerts render`).",
        "",
        "| Path | Type | Default | Meaning |",
        "|---|---|---|---|",
    ]
    for t in tunables(AnalyzerParams()):
        doc = t.doc.replace("|", "\\|")
        lines.append(f"| `{t.path}` | {t.kind} | {_value(t.default)} | {doc} |")
    return "\n".join(lines) + "\n"
