"""The provisionable Grafana board: structure, variables, and that every metric its queries name is exported.

Exported names come from the real code and data, not from a list kept here: the collector's exporter and
the service's analyzer gauges are rendered, the recording rules are read from alerts/rules/*.yaml, and the
dcgm-exporter names from the real capture in tests/fixtures/metrics, the names phasefit itself reads, and
dcgm-exporter's default counters (below).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CAPTURES = ROOT / "tests" / "fixtures" / "metrics"
# dcgm-exporter's etc/default-counters.csv (NVIDIA/dcgm-exporter, 4.x): the profiling fields the board uses
# that the captures in tests/fixtures/metrics do not happen to carry.
DCGM_DEFAULT_COUNTERS = {
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_MEM_COPY_UTIL",
    "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_DEV_MEM_CLOCK",
    "DCGM_FI_DEV_XID_ERRORS",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "DCGM_FI_PROF_SM_ACTIVE",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "DCGM_FI_PROF_DRAM_ACTIVE",
}
BOARD = ROOT / "deploy" / "grafana" / "phasefit.json"
PROVIDER = ROOT / "deploy" / "grafana" / "provisioning" / "dashboards.yaml"

_STRING = re.compile(r'"(?:\\.|[^"\\])*"|`[^`]*`')
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENTIFIER = re.compile(r"(?<![\w:$.])([A-Za-z_:][\w:]*)(\s*\()?")
_PROMQL_WORDS = {
    "and",
    "or",
    "unless",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "offset",
    "inf",
    "nan",
}


def metric_names(expr: str) -> set[str]:
    """Metric names a PromQL expression reads: identifiers that are not functions, keywords, label names
    (inside {...} or grouping clauses), strings, durations or Grafana variables."""
    text = _STRING.sub('""', expr)
    text = re.sub(r"\{[^}]*\}", "", text)
    text = re.sub(r"\[[^\]]*\]", "", text)
    text = _GROUPING.sub("", text)
    names = set()
    for match in _IDENTIFIER.finditer(text):
        name, call = match.group(1), match.group(2)
        if call or name.lower() in _PROMQL_WORDS:
            continue
        names.add(name)
    return names


def test_metric_names_parser() -> None:
    expr = (
        'sum by (sku, role) (rate(phasefit_worker_prompt_tokens_total{cluster=~"$cluster", x="a{b}"}'
        "[$__rate_interval])) / on (pool) group_left (sku) max(cluster:phasefit_x:sum offset 5m) or vector(0)"
    )
    assert metric_names(expr) == {"phasefit_worker_prompt_tokens_total", "cluster:phasefit_x:sum"}


def _exposition_names(text: str) -> set[str]:
    names = set()
    for line in text.splitlines():
        parts = line.split()
        if line.startswith("# TYPE") and len(parts) >= 4:
            names.add(parts[2])
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{\s]", line, maxsplit=1)[0])
    return names


def collector_names() -> set[str]:
    from prometheus_client import generate_latest

    from collector.exporter import ExporterState, StateHolder, build_registry

    state = ExporterState(node="node-0", up=True, last_collect_unix=1.0, spool_records=0)
    return _exposition_names(generate_latest(build_registry(StateHolder(state))).decode())


def service_names() -> set[str]:
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.registry import Collector

    from phasefit.service import analyzer_gauges

    class Families(Collector):
        def collect(self) -> Any:
            return analyzer_gauges.families(analyzer_gauges.Conclusions())

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Families())
    return _exposition_names(generate_latest(registry).decode())


def recording_rule_names() -> set[str]:
    names = set()
    for path in sorted((ROOT / "alerts" / "rules").glob("*.yaml")):
        for group in yaml.safe_load(path.read_text())["groups"]:
            names.update(rule["record"] for rule in group["rules"] if "record" in rule)
    return names


def dcgm_names() -> set[str]:
    names = set()
    for path in sorted(CAPTURES.glob("dcgm-exporter_*.prom")):
        names |= _exposition_names(path.read_text())
    read = (ROOT / "analyzer" / "sources" / "prometheus" / "metrics.py").read_text()
    names.update(re.findall(r"DCGM_FI_[A-Z0-9_]+", read))  # what zero-agent mode queries
    names.update(DCGM_DEFAULT_COUNTERS)
    return names


@pytest.fixture(scope="module")
def board() -> dict[str, Any]:
    return dict(json.loads(BOARD.read_text()))


def _panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    panels = []
    for panel in board["panels"]:
        panels.append(panel)
        panels.extend(panel.get("panels", []))
    return panels


def _targets(board: dict[str, Any]) -> list[dict[str, Any]]:
    return [t for p in _panels(board) for t in p.get("targets", [])]


def test_identity_for_provisioning(board: dict[str, Any]) -> None:
    assert board["id"] is None
    assert board["uid"] == "phasefit-placement"  # stable: links and alert annotations depend on it
    assert 8 <= len(board["uid"]) <= 40
    assert "phasefit" in board["tags"]
    assert isinstance(board["schemaVersion"], int) and board["schemaVersion"] >= 36
    assert board["time"]["from"] == "now-7d"


def test_variables_in_order(board: dict[str, Any]) -> None:
    variables = board["templating"]["list"]
    assert [v["name"] for v in variables] == ["datasource", "cluster", "node", "sku", "role"]
    assert variables[0]["type"] == "datasource" and variables[0]["query"] == "prometheus"
    for variable in variables[1:]:
        assert variable["type"] == "query"
        assert variable["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert variable["refresh"] == 2  # on time-range change
        query = variable["query"]["query"]
        assert query.startswith("label_values(") and query.rstrip(")").endswith(variable["name"])


def test_panels_are_timeseries_and_stat_on_the_variable_datasource(board: dict[str, Any]) -> None:
    panels = [p for p in _panels(board) if p["type"] != "row"]
    assert {p["type"] for p in panels} == {"timeseries", "stat"}
    ids = [p["id"] for p in _panels(board)]
    assert len(ids) == len(set(ids))
    for panel in panels:
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert panel["targets"], panel["title"]
        assert panel.get("description"), panel["title"]
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
    for target in _targets(board):
        assert target["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
    rates = [t["expr"] for t in _targets(board) if "rate(" in t["expr"]]
    assert rates and all("[$__rate_interval]" in expr for expr in rates)


def test_panels_do_not_overlap(board: dict[str, Any]) -> None:
    cells: set[tuple[int, int]] = set()
    for panel in _panels(board):
        grid = panel["gridPos"]
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in cells, f"{panel['title']} overlaps another panel at {(x, y)}"
                cells.add((x, y))


def test_every_query_filters_by_cluster(board: dict[str, Any]) -> None:
    for target in _targets(board):
        assert 'cluster=~"$cluster"' in target["expr"], target["expr"]


def test_every_metric_is_exported_by_phasefit_or_dcgm_exporter(board: dict[str, Any]) -> None:
    phasefit = collector_names() | service_names() | recording_rule_names()
    dcgm = dcgm_names()
    assert "phasefit_gpu_dram_active_ratio" in phasefit and "phasefit_pool_ratio_drift" in phasefit
    assert "DCGM_FI_PROF_DRAM_ACTIVE" in dcgm and "DCGM_FI_DEV_SM_CLOCK" in dcgm
    queries = [t["expr"] for t in _targets(board)]
    for variable in board["templating"]["list"][1:]:  # label_values(SERIES, LABEL): SERIES names the metric
        match = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", variable["query"]["query"])
        assert match, variable["query"]["query"]
        queries.append(match[1])
    used: set[str] = set()
    for expr in queries:
        names = metric_names(expr)
        assert names, f"no metric in {expr!r}"
        unknown = names - phasefit - dcgm
        assert not unknown, f"{sorted(unknown)} in {expr!r} is exported by neither phasefit nor dcgm-exporter"
        used |= names
    # the board leads with what dashboard 12239 lacks: DRAM activity next to tensor activity, by role
    assert {
        "phasefit_gpu_dram_active_ratio",
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    } <= used


def test_provider_points_at_a_folder_of_files() -> None:
    provider = yaml.safe_load(PROVIDER.read_text())
    assert provider["apiVersion"] == 1
    (entry,) = provider["providers"]
    assert entry["type"] == "file" and entry["options"]["path"]


def _placement_panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    """The panels of the first row (the analyzer's placement figures), in reading order."""
    row_ys = [p["gridPos"]["y"] for p in board["panels"] if p["type"] == "row"]
    end = row_ys[1] if len(row_ys) > 1 else 10**6
    panels = [p for p in board["panels"] if p["type"] != "row" and p["gridPos"]["y"] < end]
    return sorted(panels, key=lambda p: (p["gridPos"]["y"], p["gridPos"]["x"]))


def _reads(panel: dict[str, Any]) -> set[str]:
    return {name for t in panel["targets"] for name in metric_names(t["expr"])}


def test_lost_capacity_leads_in_output_tokens_and_requests(board: dict[str, Any]) -> None:
    """Issue 13: output tokens/s and requests/s (fleet and per pool) ahead of the total-tokens panels,
    which say they are the secondary total; an unknown loss reads "unknown", not 0."""
    panels = _placement_panels(board)
    position = {p["id"]: i for i, p in enumerate(panels)}

    def reading(metric: str, kind: str) -> dict[str, Any]:
        (panel,) = [p for p in panels if metric in _reads(p) and p["type"] == kind]
        return panel

    fleet_output = reading("phasefit_fleet_lost_output_tokens_per_second", "stat")
    fleet_requests = reading("phasefit_fleet_lost_requests_per_second", "stat")
    fleet_total = reading("phasefit_fleet_lost_tokens_per_second", "stat")
    pool_output = reading("phasefit_pool_lost_output_tokens_per_second", "timeseries")
    pool_requests = reading("phasefit_pool_lost_requests_per_second", "timeseries")
    pool_total = reading("phasefit_pool_lost_tokens_per_second", "timeseries")
    assert position[fleet_output["id"]] < position[fleet_requests["id"]] < position[fleet_total["id"]]
    assert position[pool_output["id"]] < position[pool_total["id"]]
    assert position[pool_requests["id"]] < position[pool_total["id"]]
    for total in (fleet_total, pool_total):
        assert total["title"].startswith("Secondary: total"), total["title"]
        assert "prompt + output" in total["title"]
    for panel in (fleet_output, fleet_requests, pool_output, pool_requests):
        assert "Secondary" not in panel["title"] and "total" not in panel["title"].lower()
        assert "output tokens/s" in panel["title"] or "requests/s" in panel["title"]
    for panel in (fleet_output, fleet_requests):
        assert panel["fieldConfig"]["defaults"]["noValue"] == "unknown"
    worker = [p for p in panels if "phasefit_worker_lost_tokens_per_second" in _reads(p)]
    assert not worker, "per-worker loss should be shown in output tokens/s"
    assert "phasefit_worker_lost_output_tokens_per_second" in set().union(*(_reads(p) for p in panels))


def test_a_stat_counts_the_workers_the_analyzer_could_not_judge(board: dict[str, Any]) -> None:
    (panel,) = [
        p for p in _panels(board) if p["type"] == "stat" and "phasefit_fleet_unjudged_workers" in _reads(p)
    ]
    assert "unjudged" in panel["title"].lower()
    # 0 only when the analyzer reports judged workers; neither gauge: unknown, never 0.
    assert "phasefit_fleet_judged_workers" in _reads(panel)
    assert "vector(0)" not in panel["targets"][0]["expr"]
    assert panel["fieldConfig"]["defaults"]["noValue"] == "unknown"
