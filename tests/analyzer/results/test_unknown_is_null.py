"""Unknown is never 0 (issue 29, A): every numeric field of ``phasefit analyze --json`` (the summary, its
pools and fleet, the findings) is nullable in the published schema unless it is always known (counts and
the like, in the explicit allow-list below with the reason), and a finding, a pool and a fleet built from
unknown sources serialize their unknown figures as null, not 0."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from analyzer.findings import evidence as finding_evidence
from analyzer.findings.loss import loss_evidence
from analyzer.findings.recommend import _per_worker, _replicas
from analyzer.pipeline import AnalysisResult, analyze, input_from_samples
from analyzer.pools.capacity import RoleCapacity
from analyzer.results import summary as summary_model
from fleet.catalog import load_catalog
from fleet.contract import FindingKind
from tests.analyzer.summary_samples import fleet_totals, pool_summary
from tests.analyzer.synthetic import H100, H200, Fleet, workers

ROOT = Path(__file__).resolve().parents[3]
PUBLISHED = ROOT / "docs" / summary_model.SCHEMA_FILE
CATALOG = load_catalog()

_COUNT = "a count of things the analyzer holds (pools, workers, devices, findings): always known"
_COUNTS_BY = "counts by a key: a key is present only where something was counted"
# "<definition>.<property>" (".*" for the values of a mapping) -> why it is never unknown.
ALWAYS_KNOWN: dict[str, str] = {
    **{
        f"FleetTotals.{k}": _COUNT
        for k in (
            "pools",
            "workers",
            "judged_workers",
            "unjudged_workers",
            "gpus",
            "whole_gpus",
            "mig_instances",
            "mig_parent_gpus",
            "unattributed_gpus",
            "misplaced_workers",
            "open_findings",
        )
    },
    **{
        f"FleetTotals.{k}.*": _COUNTS_BY
        for k in ("unjudged_reasons", "judged_by_evidence", "open_findings_by_kind")
    },
    **{f"PoolSummary.{k}": _COUNT for k in ("gpus", "whole_gpus", "mig_instances", "workers")},
    "PoolSummary.workers_by_sku_role.*.*": _COUNTS_BY,
    "SegmentSummary.current_placement.*.*": _COUNTS_BY,
    "SegmentSummary.best_placement.*.*": _COUNTS_BY + " (the plan itself is null where none was searched)",
    **{
        f"GroupRecommendation.{k}": "workers per role now or in the searched plan: the group exists only "
        "where a placement was searched"
        for k in ("prefill_now", "decode_now", "prefill_best", "decode_best")
    },
    "ModelInfo.changes_scored": _COUNT,
    "ModelInfo.heldout_ratio_error_p90": "a constant of the calibration shipped with the code",
    "ModelInfo.heldout_absolute_error_p90": "a constant of the calibration shipped with the code",
    "Summary.version": "the summary version, a constant",
    "Summary.bucket_s": "the analysis's own bucket width, a parameter of the run",
    "ChangeOutcome.hours_after": "hours between two segment boundaries, both timestamps of the run",
    "TargetAttainment.target_s": "the operator's target: an attainment exists only for a target that is set",
    "TargetAttainment.worker_buckets": _COUNT + " (0 where none was measured: share null, with the reason)",
}


def _schema() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(PUBLISHED.read_text(encoding="utf-8"))
    return schema


def _types(node: dict[str, Any], defs: dict[str, Any]) -> set[str]:
    """The JSON types a property may hold (a $ref to a model is "object")."""
    if "$ref" in node:
        target = defs[node["$ref"].rsplit("/", 1)[-1]]
        return _types(target, defs) if "properties" not in target else {"object"}
    out: set[str] = set()
    for key in ("anyOf", "oneOf"):
        for option in node.get(key, []):
            out |= _types(option, defs)
    kind = node.get("type")
    if isinstance(kind, list):
        out |= set(kind)
    elif isinstance(kind, str):
        out.add(kind)
    if "const" in node and isinstance(node["const"], int | float):
        out.add("number")
    if "enum" in node and any(isinstance(v, int | float) and not isinstance(v, bool) for v in node["enum"]):
        out.add("number")
    return out


def _values(node: dict[str, Any], defs: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The schemas of a mapping's values (``additionalProperties``), through anyOf and refs."""
    if "$ref" in node:
        target = defs[node["$ref"].rsplit("/", 1)[-1]]
        if "properties" not in target:
            yield from _values(target, defs)
        return
    for option in node.get("anyOf", []):
        yield from _values(option, defs)
    extra = node.get("additionalProperties")
    if isinstance(extra, dict):
        yield extra


def numeric_fields(schema: dict[str, Any]) -> dict[str, bool]:
    """Every numeric property of every model in the schema -> whether it is nullable. Mapping values are
    named ``<prop>.*`` (``<prop>.*.*`` for a mapping of mappings)."""
    defs = schema["$defs"]
    out: dict[str, bool] = {}

    def visit(name: str, node: dict[str, Any]) -> None:
        types = _types(node, defs)
        if types & {"number", "integer"}:
            out[name] = "null" in types
        for values in _values(node, defs):
            visit(f"{name}.*", values)

    for model, definition in defs.items():
        for prop, node in definition.get("properties", {}).items():
            visit(f"{model}.{prop}", node)
    return out


def test_the_walk_sees_the_numeric_fields() -> None:
    fields = numeric_fields(_schema())
    assert fields["PoolSummary.capacity_tokens_per_s"] is True
    assert fields["Loss.value"] is True
    assert fields["FleetTotals.gpus"] is False
    assert "PoolSummary.workers_by_sku_role.*.*" in fields
    assert "Finding.evidence.*" in fields and fields["Finding.evidence.*"] is True
    assert len(fields) > 80


def test_every_numeric_field_is_nullable_or_always_known() -> None:
    fields = numeric_fields(_schema())
    never_null = {name for name, nullable in fields.items() if not nullable}
    unexplained = never_null - set(ALWAYS_KNOWN)
    assert not unexplained, (
        "numeric fields that cannot be null: make them Optional (null where unknown) or add them to "
        f"ALWAYS_KNOWN with the reason: {sorted(unexplained)}"
    )
    stale = set(ALWAYS_KNOWN) - set(fields)
    assert not stale, f"ALWAYS_KNOWN names fields the schema no longer has: {sorted(stale)}"
    nullable_listed = {name for name in ALWAYS_KNOWN if fields.get(name)}
    assert not nullable_listed, f"nullable now, drop them from ALWAYS_KNOWN: {sorted(nullable_listed)}"


def test_findings_total_tokens_are_nullable() -> None:
    """A finding that estimates no loss (telemetry degraded, ...) says null total tokens/s, never 0."""
    fields = numeric_fields(_schema())
    assert all(fields[f"Finding.lost_tokens_per_s{bound}"] for bound in ("", "_low", "_high"))


def _zeros(data: Any, path: str = "") -> Iterator[str]:
    """Paths of every numeric 0 in JSON data."""
    if isinstance(data, dict):
        for key, value in data.items():
            yield from _zeros(value, f"{path}.{key}" if path else str(key))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            yield from _zeros(value, f"{path}[{i}]")
    elif isinstance(data, int | float) and not isinstance(data, bool) and data == 0:
        yield path


def test_a_pool_and_a_fleet_that_know_nothing_serialize_null() -> None:
    counts = {"gpus", "whole_gpus", "mig_instances", "workers", "pools", "judged_workers", "unjudged_workers"}
    counts |= {"mig_parent_gpus", "unattributed_gpus", "misplaced_workers", "open_findings", "physical_gpus"}
    for model in (pool_summary(), fleet_totals()):
        data = model.model_dump(mode="json")
        assert [p for p in _zeros(data) if p not in counts] == []
    pool = pool_summary().model_dump(mode="json")
    assert pool["lost"]["output_tokens_per_s"] == {"value": None, "low": None, "high": None}
    assert pool["lost"]["tokens_per_s"] == {"value": None, "low": None, "high": None}
    assert pool["capacity_tokens_per_s"] is None and pool["utilisation"] is None


@pytest.fixture(scope="module")
def nothing_seen() -> AnalysisResult:
    """A range with no telemetry in it: every figure unknown."""
    fleet = Fleet(workers([("node00", H100, 1, 1)]), hours=2)
    gpu, engine = fleet.columns()
    end = float(np.max(gpu["ts"]))
    return analyze(input_from_samples(gpu, engine, start=end + 7200.0, end=end + 4 * 3600.0), CATALOG)


def _unexplained_zeros(summary: dict[str, Any]) -> list[str]:
    prefixes = {"FleetTotals": "fleet", "PoolSummary": "pools[0]", "ModelInfo": "model"}
    allowed = {
        f"{prefixes[model]}.{field}"
        for model, _, field in (k.partition(".") for k in ALWAYS_KNOWN)
        if model in prefixes
    }
    return [p for p in _zeros(summary) if p not in allowed]


def test_an_analysis_that_saw_nothing_says_null(nothing_seen: AnalysisResult) -> None:
    assert nothing_seen.summary["pools"][0]["lost"]["tokens_per_s"]["value"] is None
    # the traffic of a range without telemetry is unknown (analyzer/pools/workload.py), not 0
    pool, fleet = nothing_seen.summary["pools"][0], nothing_seen.summary["fleet"]
    assert pool["traffic"]["prompt_tokens_per_s"] is None and pool["traffic"]["requests_per_s"] is None
    assert pool["demand_tokens_per_s"] is None and fleet["demand_output_tokens_per_s"] is None
    assert pool["segments"][0]["requests_per_s"] is None
    # a worker nobody could judge loses an unknown amount (analyzer/summarize.py), not 0
    for worker in nothing_seen.summary["workers"]:
        assert worker["unjudged_reason"] is not None
        assert worker["lost_output_tokens_per_s"] is None and worker["lost_tokens_per_s"] is None


def test_an_analysis_that_saw_nothing_has_no_zero_at_all(nothing_seen: AnalysisResult) -> None:
    assert _unexplained_zeros(nothing_seen.summary) == []


@pytest.fixture(scope="module")
def lost_gpu() -> AnalysisResult:
    fleet = Fleet(
        workers([("node00", H100, 4, 0), ("node01", H200, 2, 2)]),
        hours=12,
        lost=[("node01/decode-2", 9.0, 12.0)],
    )
    return analyze(input_from_samples(*fleet.columns()), CATALOG)


def test_a_telemetry_degraded_finding_states_no_loss_as_known(lost_gpu: AnalysisResult) -> None:
    (degraded,) = [f for f in lost_gpu.findings if f.kind is FindingKind.TELEMETRY_DEGRADED]
    data = degraded.model_dump(mode="json")
    for key in ("lost_output_tokens_per_s", "lost_requests_per_s"):
        assert data[key] is None, key
        assert data[f"{key}_low"] is None and data[f"{key}_high"] is None, key


def test_a_telemetry_degraded_finding_has_no_total_loss_of_0(lost_gpu: AnalysisResult) -> None:
    (degraded,) = [f for f in lost_gpu.findings if f.kind is FindingKind.TELEMETRY_DEGRADED]
    data = degraded.model_dump(mode="json")
    assert data["lost_tokens_per_s"] is None
    assert data["lost_tokens_per_s_low"] is None and data["lost_tokens_per_s_high"] is None
    # the findings that estimate a loss keep a number; an unknown total sorts after every known one
    totals = [f.lost_tokens_per_s for f in lost_gpu.findings]
    known = [t for t in totals if t is not None]
    assert known and totals[: len(known)] == sorted(known, reverse=True)


def test_a_group_that_does_not_fit_has_no_per_worker_figure() -> None:
    unknown = RoleCapacity(0.0, 1.0, "model", fits=False)
    assert _per_worker(unknown) is None
    assert _per_worker(RoleCapacity(1234.56, 0.1, "model")) == 1234.6
    assert _replicas(2.0, 100.0, None) is None
    assert _replicas(math.nan, 100.0, 50.0) is None  # the peak is unknown
    assert _replicas(2.0, 100.0, 50.0) == 4
    payload = summary_model.GroupRecommendation(
        prefill_now=1,
        decode_now=1,
        prefill_best=1,
        decode_best=1,
        prefill_tokens_per_s_per_worker=_per_worker(unknown),
        decode_tokens_per_s_per_worker=_per_worker(unknown),
        prefill_replicas_for_peak=None,
        decode_replicas_for_peak=None,
    ).model_dump(mode="json")
    assert payload["prefill_tokens_per_s_per_worker"] is None
    assert payload["decode_tokens_per_s_per_worker"] is None


def test_unreported_counters_are_unknown_in_a_findings_evidence() -> None:
    assert finding_evidence._sum(np.array([np.nan, np.nan])) is None
    assert finding_evidence._sum(np.array([np.nan, 2.0, 0.0])) == 2.0
    evidence: dict[str, float | str | None] = {}
    loss_evidence(
        evidence,
        {
            "lost_output_tokens_per_s": 10.0,
            "lost_output_tokens_per_s_low": None,
            "lost_output_tokens_per_s_high": 12.0,
            "lost_requests_per_s": 0.5,
            "lost_requests_per_s_low": 0.25,
            "lost_requests_per_s_high": None,
        },
    )
    assert evidence["lost_output_tokens"] == "10 output tokens/s (?-12)"
    assert evidence["lost_requests"] == "0.50 requests/s (0.25-?)"
