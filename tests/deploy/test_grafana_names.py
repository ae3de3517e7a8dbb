"""Names are data on the Grafana board too: cluster, node, SKU and role values come from the fleet's labels.

Grafana renders legends, stat titles and variable values as text; what it would interpret is a text panel
in HTML or Markdown mode, a data link or a dashboard link built from a label, or a variable pasted into
PromQL where Grafana does not escape it. Grafana's Prometheus data source escapes a variable's values for a
regex matcher (``=~"$var"``), so a value such as ``a"}) or vector(1) #`` stays one label value there; the
board must use variables nowhere else. The real Grafana cannot be installed from the registries these
machines reach (docs/grafana.md), so these are checks on the board's structure.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

BOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "phasefit.json"
GRAFANA_VARIABLES = {"__rate_interval", "__interval", "__range", "__interval_ms", "__range_s", "__range_ms"}
RENDERS_MARKUP = {"text", "news", "dashlist", "annolist", "html"}


def _panels(board: dict[str, Any]) -> Iterator[dict[str, Any]]:
    stack = list(board["panels"])
    while stack:
        panel = stack.pop()
        yield panel
        stack.extend(panel.get("panels") or [])


def _board() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(BOARD.read_text(encoding="utf-8"))
    return loaded


def test_no_panel_renders_markup_and_nothing_links_from_a_label() -> None:
    board = _board()
    assert not board.get("links"), "dashboard links would carry label values into URLs"
    for panel in _panels(board):
        assert panel["type"] not in RENDERS_MARKUP, panel.get("title")
        assert not panel.get("links"), panel.get("title")
        defaults = (panel.get("fieldConfig") or {}).get("defaults") or {}
        assert not defaults.get("links"), panel.get("title")
        for override in (panel.get("fieldConfig") or {}).get("overrides") or []:
            assert all(p.get("id") != "links" for p in override.get("properties", [])), panel.get("title")


def test_fleet_variables_reach_promql_only_inside_a_regex_matcher() -> None:
    """``label=~"$var"`` is the one form Grafana escapes for Prometheus; a bare ``$var`` anywhere else in an
    expression (``="$var"``, a function argument, outside quotes) would paste a hostile value as PromQL."""
    board = _board()
    fleet_variables = {v["name"] for v in board["templating"]["list"] if v.get("type") == "query"}
    assert fleet_variables, "the board's fleet variables"
    expressions = [t.get("expr", "") for p in _panels(board) for t in p.get("targets") or []]
    expressions += [
        v["query"] if isinstance(v.get("query"), str) else (v.get("query") or {}).get("query", "")
        for v in board["templating"]["list"]
        if v.get("type") == "query"
    ]
    assert expressions
    for expr in expressions:
        for match in re.finditer(r"\$\{?(\w+)", expr):
            name = match.group(1)
            if name in GRAFANA_VARIABLES or name.isdigit():
                continue
            assert name in fleet_variables, f"unknown variable ${name} in {expr}"
            before = expr[: match.start()]
            assert re.search(r'\w+=~"$', before), f"${name} outside a regex matcher in {expr}"
            assert expr[match.end() :].startswith('"'), f"${name} not closing its matcher in {expr}"


def test_legends_name_labels_as_text_only() -> None:
    """A legend is ``{{label}}`` text (Grafana escapes it); no legend builds markup around a label."""
    for panel in _panels(_board()):
        for target in panel.get("targets") or []:
            legend = target.get("legendFormat") or ""
            assert "<" not in legend and "](" not in legend, legend
