"""The typed summary (analyzer.results.summary): what the pipeline builds, the JSON it has always written, and
the schema published in docs/summary.schema.json."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pytest
from pydantic import ValidationError

from analyzer.findings.loss import range_to_zero
from analyzer.pipeline import AnalysisResult, analyze, input_from_samples
from analyzer.pools import analysis as pool_analysis
from analyzer.pools.split_search import PlacementResult
from analyzer.results import summary as summary_model
from analyzer.results.summary import (
    UNKNOWN_LOSS,
    AnalyzeOutput,
    FleetTotals,
    LostCapacity,
    PoolSummary,
    SegmentSummary,
    Summary,
)
from fleet.catalog import load_catalog
from phasefit.cli.analyze import analysis_payload, finding_payload
from tests.analyzer.summary_samples import fleet_totals, lost, pool_summary
from tests.analyzer.synthetic import H100, H100_1G, H200, Fleet, Worker, workers

ROOT = Path(__file__).resolve().parents[3]
PUBLISHED = ROOT / "docs" / summary_model.SCHEMA_FILE
CATALOG = load_catalog()


def _validator() -> jsonschema.protocols.Validator:
    schema = json.loads(PUBLISHED.read_text(encoding="utf-8"))
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    validator: jsonschema.protocols.Validator = cls(schema, format_checker=cls.FORMAT_CHECKER)
    return validator


@pytest.fixture(scope="module")
def misplaced() -> AnalysisResult:
    fleet = _misplaced_fleet()
    return analyze(input_from_samples(*fleet.columns()), CATALOG, extra_warnings=["a reader's note"])


@pytest.fixture(scope="module")
def nothing_seen() -> AnalysisResult:
    """A range with no telemetry in it: every figure unknown (null), every worker unjudged."""
    fleet = Fleet(workers([("node00", H100, 1, 1)]), hours=2)
    gpu, engine = fleet.columns()
    end = float(np.max(gpu["ts"]))
    return analyze(input_from_samples(gpu, engine, start=end + 7200.0, end=end + 4 * 3600.0), CATALOG)


def _misplaced_fleet() -> Fleet:
    return Fleet(
        workers([("node00", H100, 0, 2), ("node01", H200, 2, 0)]),
        hours=8,
        window_s=900.0,
        rate_rps=lambda h: 12.0,
        osl=lambda h: 900.0,
    )


@pytest.fixture(scope="module")
def with_slices() -> AnalysisResult:
    slices = [
        Worker(f"node02/prefill-mig-{k}", H100_1G, "prefill", tp=1, mig_profile="1g.10gb") for k in (1, 2)
    ]
    fleet = Fleet([*workers([("node00", H100, 0, 2), ("node01", H200, 2, 0)]), *slices], hours=4)
    return analyze(input_from_samples(*fleet.columns()), CATALOG)


RESULTS = ("misplaced", "nothing_seen", "with_slices")


def test_the_published_schema_is_current() -> None:
    assert PUBLISHED.is_file(), (
        "docs/summary.schema.json is missing: run `python -m analyzer.results.summary`"
    )
    assert PUBLISHED.read_text(encoding="utf-8") == summary_model.schema_text(), (
        "docs/summary.schema.json is stale: run `python -m analyzer.results.summary` and commit the result"
    )


def test_the_generator_writes_and_checks(tmp_path: Path) -> None:
    target = tmp_path / "schema.json"
    assert summary_model.main(["--check", str(target)]) == 1  # missing
    assert summary_model.main([str(target)]) == 0
    assert target.read_text(encoding="utf-8") == summary_model.schema_text()
    assert summary_model.main(["--check", str(target)]) == 0
    target.write_text("{}\n", encoding="utf-8")
    assert summary_model.main(["--check", str(target)]) == 1


def test_the_schema_is_deterministic_and_names_every_part() -> None:
    assert summary_model.schema_text() == summary_model.schema_text()
    schema = summary_model.json_schema()
    assert schema["$schema"] == summary_model.SCHEMA_DIALECT
    assert set(schema["properties"]) == {"summary", "findings", "warnings"}
    names = ("Summary", "FleetTotals", "PoolSummary", "SegmentSummary", "WorkerSummary", "Finding")
    for name in (*names, "LostCapacity", "Loss"):
        assert schema["$defs"][name]["additionalProperties"] is False, name
    assert "from" in schema["$defs"]["Summary"]["properties"]  # the JSON key, not the Python name


@pytest.mark.parametrize("name", RESULTS)
def test_the_typed_summary_is_the_json_summary(name: str, request: pytest.FixtureRequest) -> None:
    result: AnalysisResult = request.getfixturevalue(name)
    typed = result.typed_summary
    assert typed.to_json_dict() == result.summary
    assert Summary.model_validate(result.summary) == typed
    assert Summary.model_validate_json(json.dumps(result.summary)) == typed
    top = ["version", "from", "to", "bucket_s", "fleet", "model", "warnings", "pools", "workers", "scope"]
    assert list(result.summary) == top


@pytest.mark.parametrize("name", RESULTS)
def test_analysis_payloads_validate_against_the_schema_and_the_model(
    name: str, request: pytest.FixtureRequest
) -> None:
    result: AnalysisResult = request.getfixturevalue(name)
    payload = json.loads(json.dumps(analysis_payload(result)))
    _validator().validate(payload)
    assert AnalyzeOutput.model_validate(payload).to_json_dict() == payload
    # The payload is what it always was: the summary's JSON, each finding's own dump, the warnings.
    assert payload == json.loads(
        json.dumps({
            "summary": result.summary,
            "findings": [finding_payload(f) for f in result.findings],
            "warnings": result.summary["warnings"],
        })
    )  # fmt: skip


def test_unknown_is_null_never_zero(nothing_seen: AnalysisResult) -> None:
    fleet = nothing_seen.typed_summary.fleet
    assert fleet.lost == fleet.lost_mean == UNKNOWN_LOSS
    assert nothing_seen.summary["fleet"]["lost"]["tokens_per_s"] == {"value": None, "low": None, "high": None}
    for key in ("capacity_tokens_per_s", "weekly_cost_usd"):
        assert getattr(fleet, key) is None, key
    assert all(w.misplaced is None and w.unjudged_reason for w in nothing_seen.typed_summary.workers)
    (pool,) = nothing_seen.typed_summary.pools
    assert pool.capacity_tokens_per_s is None and pool.capacity_reason


def test_mig_instances_are_counted_apart(with_slices: AnalysisResult) -> None:
    fleet = with_slices.typed_summary.fleet
    assert fleet.mig_instances == 2 and fleet.gpus == fleet.whole_gpus + fleet.mig_instances
    assert fleet.physical_gpus is None and fleet.physical_gpus_reason  # the instances name no parent GPU


def test_a_summary_with_a_key_too_many_or_too_few_is_refused(misplaced: AnalysisResult) -> None:
    data: dict[str, Any] = json.loads(json.dumps(misplaced.summary))
    with pytest.raises(ValidationError, match="extra"):
        Summary.model_validate({**data, "fleet": {**data["fleet"], "lost_gpus": 0}})
    without = {k: v for k, v in data["pools"][0].items() if k != "capacity_reason"}
    with pytest.raises(ValidationError, match="capacity_reason"):
        Summary.model_validate({**data, "pools": [without]})
    for old in (1, 2):
        with pytest.raises(ValidationError, match="version"):
            Summary.model_validate({**data, "version": old})
    with pytest.raises(ValidationError, match="price"):
        PoolSummary.model_validate({**data["pools"][0], "price": "$0"})
    for document in ({**data, "version": 1}, {**data, "fleet": {**data["fleet"], "lost_gpus": 0}}):
        with pytest.raises(jsonschema.ValidationError):
            _validator().validate({"summary": document, "findings": [], "warnings": []})


def test_the_models_are_frozen_and_warnings_are_added_to_a_copy(misplaced: AnalysisResult) -> None:
    typed = misplaced.typed_summary
    with pytest.raises(ValidationError, match="frozen"):
        typed.fleet.workers = 0  # type: ignore[misc]
    later = typed.with_warnings(["learned later"])
    assert later.warnings == [*typed.warnings, "learned later"]
    assert "learned later" not in typed.warnings
    assert "a reader's note" in typed.warnings


def test_the_samples_for_readers_tests_are_valid() -> None:
    assert isinstance(fleet_totals(workers=3), FleetTotals)
    pool = pool_summary(lost=lost(tokens_per_s=1.0))
    assert pool.lost.tokens_per_s.value == 1.0 and pool.lost.tokens_per_s.low is None and pool.segments == []
    assert pool.lost_mean == UNKNOWN_LOSS and pool.loss_range_to_zero is None
    assert SegmentSummary.model_fields.keys() >= {"lost", "loss_range_to_zero"}


def _losses(summary: Summary) -> list[tuple[LostCapacity, str | None]]:
    """(loss, loss_range_to_zero) of every pool and segment."""
    rows: list[PoolSummary | SegmentSummary] = [
        *summary.pools,
        *(s for p in summary.pools for s in p.segments),
    ]
    return [(row.lost, row.loss_range_to_zero) for row in rows]


def test_version_3_holds_one_loss_per_unit(misplaced: AnalysisResult) -> None:
    typed, data = misplaced.typed_summary, misplaced.summary
    assert typed.version == summary_model.SUMMARY_VERSION == 3 and data["version"] == 3
    (pool,) = typed.pools
    units = {"output_tokens_per_s", "requests_per_s", "tokens_per_s"}
    for figures in (data["fleet"]["lost"], data["fleet"]["lost_mean"], data["pools"][0]["lost"]):
        assert set(figures) == units and all(
            set(loss) == {"value", "low", "high"} for loss in figures.values()
        )
    assert not any(k.startswith("lost_") and k not in ("lost_mean", "lost_reason") for k in data["pools"][0])
    for loss in (pool.lost.output_tokens_per_s, pool.lost.requests_per_s, pool.lost.tokens_per_s):
        assert loss.low is not None and loss.value is not None and loss.high is not None
        assert 0 < loss.low <= loss.value <= loss.high
    # The pool's loss is its latest segment's; the fleet adds the pools up.
    assert pool.lost == pool.segments[-1].lost and typed.fleet.lost == pool.lost
    assert typed.fleet.lost_mean == pool.lost_mean
    assert pool.lost.figure("requests_per_s", "high") == pool.lost.requests_per_s.high
    with pytest.raises(ValidationError, match="greater than or equal"):
        Summary.model_validate(
            {**data, "fleet": {**data["fleet"], "lost": lost(tokens_per_s=-1.0).model_dump()}}
        )


def test_the_range_to_zero_is_said_only_where_the_low_end_is_0_and_the_loss_is_not(
    misplaced: AnalysisResult, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert all(why is None for _, why in _losses(misplaced.typed_summary))  # its low ends are above 0
    cause = "the H200-SXM decode capacity's uncertainty"
    real = pool_analysis.place

    def to_zero(*args: Any, **kwargs: Any) -> PlacementResult:
        placement = real(*args, **kwargs)
        return dataclasses.replace(placement, lost_low=0.0, range_cause=cause)

    monkeypatch.setattr(pool_analysis, "place", to_zero)
    summary = analyze(input_from_samples(*_misplaced_fleet().columns()), CATALOG).typed_summary
    losses = _losses(summary)
    assert losses and all(loss.tokens_per_s.low == 0.0 for loss, _ in losses)
    for loss, why in losses:
        reaches_zero = loss.tokens_per_s.low == 0 and (loss.tokens_per_s.value or 0.0) > 0
        assert (why is not None) == reaches_zero
        assert why is None or why == f"the low end of the loss reaches 0 through {cause}"
    assert any(why is not None for _, why in losses)


def test_the_range_to_zero_is_worded_once(misplaced: AnalysisResult) -> None:
    placement = misplaced.pools[0].latest.placement if misplaced.pools[0].latest else None
    assert placement is not None and placement.lost_tokens_per_s > 0
    assert range_to_zero(None) is None and range_to_zero(placement) is None  # low end above 0
    zero = dataclasses.replace(placement, lost_low=0.0, range_cause="")
    assert range_to_zero(zero) == "the low end of the loss reaches 0 through the capacities' uncertainty"
    assert range_to_zero(dataclasses.replace(zero, lost_tokens_per_s=0.0, lost_high=0.0)) is None


def test_every_estimated_loss_says_what_it_rests_on(misplaced: AnalysisResult) -> None:
    (pool,) = misplaced.typed_summary.pools
    for row in (pool, *pool.segments):
        if row.lost.tokens_per_s.value is None:
            assert row.loss_basis is None and row.loss_basis_detail is None
        else:
            assert row.loss_basis in ("measured", "calibrated", "transferred", "model")
            assert row.loss_basis_detail
    assert pool.loss_basis == pool.segments[-1].loss_basis  # the pool's loss is its latest segment's
    (finding, *_) = [f for f in misplaced.findings if "loss_basis" in f.evidence]
    assert finding.evidence["loss_basis"] in ("measured", "calibrated", "transferred", "model")
