from __future__ import annotations

import dataclasses
import io
import json
from datetime import UTC, datetime
from pathlib import Path

import jsonschema
import pytest
import typer
from rich.console import Console
from sqlalchemy import func, select
from typer.testing import CliRunner

from analyzer.pipeline import AnalysisResult, input_from_samples
from analyzer.pipeline import analyze as run_pipeline
from analyzer.results.summary import AnalyzeOutput
from fleet.catalog import load_catalog
from fleet.contract import GpuSample, TelemetrySource
from fleet.ingest import catalog_sku_resolver
from fleet.store.engine import make_engine, writing
from fleet.store.migrate import upgrade
from fleet.store.schema import AnalysisRunRow, FindingRow
from fleet.store.writer import write_samples
from phasefit.cli.analyze import analyze, parse_time
from phasefit.cli.result_output import print_result
from tests.analyzer.summary_samples import fleet_totals
from tests.analyzer.synthetic import H100, H200, Fleet, workers
from tests.phasefit.synthetic_store import synthetic_store

ROOT = Path(__file__).resolve().parents[2]
app = typer.Typer()
app.command()(analyze)


def _runner() -> CliRunner:
    return CliRunner()


@pytest.fixture
def store(tmp_path: Path) -> str:
    return synthetic_store(tmp_path, [("node00", H100, 0, 2), ("node01", H200, 2, 0)])


def test_json_output_has_the_summary_and_the_findings(store: str) -> None:
    result = _runner().invoke(app, ["--database-url", store, "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert set(payload) == {"summary", "findings", "warnings"}
    assert payload["warnings"] == payload["summary"]["warnings"]
    assert payload["summary"]["version"] == 3
    assert payload["summary"]["fleet"]["lost"]["tokens_per_s"]["value"] > 0
    assert payload["summary"]["from"] == "2024-06-03T00:00:00Z"
    finding = payload["findings"][0]
    for key in (
        "worker_id",
        "kind",
        "gpu_sku",
        "role",
        "bottleneck",
        "lost_tokens_per_s",
        "lost_tokens_per_s_low",
        "lost_tokens_per_s_high",
        "recommendation",
        "evidence",
        "first_seen",
        "last_seen",
        "status",
    ):
        assert key in finding, key
    kinds = {f["kind"] for f in payload["findings"]}
    assert kinds & {"decode-on-low-bandwidth", "prefill-on-high-bandwidth"}


def test_json_output_validates_against_the_published_schema_and_the_model(store: str) -> None:
    result = _runner().invoke(app, ["--database-url", store, "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    schema = json.loads((ROOT / "docs" / "summary.schema.json").read_text(encoding="utf-8"))
    validator = jsonschema.Draft202012Validator(
        schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(payload)]
    assert not errors, errors
    parsed = AnalyzeOutput.model_validate(payload)
    assert parsed.summary.fleet.workers == 4 and parsed.findings
    # The model writes back exactly what the CLI printed: keys, order and values.
    assert json.dumps(parsed.to_json_dict(), indent=2) == result.stdout.rstrip("\n")


def test_human_output_prints_the_summary_and_tables_and_reruns_do_not_duplicate(store: str) -> None:
    wide = {"COLUMNS": "250"}
    first = _runner().invoke(
        app, ["--database-url", store, "--from", "2024-06-03", "--to", "2024-06-03T08:00Z"], env=wide
    )
    assert first.exit_code == 0, first.output
    text = first.output
    assert (
        "Lost output tokens/s now" in text and "requests/s" in text and "Pools" in text and "Findings" in text
    )
    assert "decode-on-low-bandwidth" in text
    # recommendations are listed under the table by finding number, not folded into a column
    assert "Recommendations" in text and "#1 " in text
    second = _runner().invoke(
        app, ["--database-url", store, "--from", "2024-06-03", "--to", "2024-06-03T08:00Z"]
    )
    assert second.exit_code == 0
    engine = make_engine(store)
    with engine.connect() as connection:
        findings = connection.execute(select(func.count()).select_from(FindingRow)).scalar_one()
        runs = connection.execute(select(func.count()).select_from(AnalysisRunRow)).scalar_one()
    engine.dispose()
    payload = json.loads(_runner().invoke(app, ["--database-url", store, "--json"]).stdout)
    assert findings == len(payload["findings"])
    assert runs == 2  # one analysis run stored per invocation


def test_an_empty_store_says_what_to_do(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    engine = make_engine(url)
    upgrade(engine)
    engine.dispose()
    result = _runner().invoke(app, ["--database-url", url])
    assert result.exit_code == 1
    assert "no samples" in result.output


def test_a_missing_store_is_refused_and_not_created(tmp_path: Path) -> None:
    result = _runner().invoke(app, ["--database-url", f"sqlite:///{tmp_path / 'none.db'}"])
    assert result.exit_code == 1
    assert "no store at" in result.output and "PHASEFIT_DATABASE_URL" in result.output
    assert not (tmp_path / "none.db").exists()


def test_bad_times_are_usage_errors(store: str) -> None:
    result = _runner().invoke(app, ["--database-url", store, "--from", "yesterday-ish"])
    assert result.exit_code == 2
    assert "ISO 8601" in result.output
    reversed_range = _runner().invoke(
        app, ["--database-url", store, "--from", "2024-06-04", "--to", "2024-06-03"]
    )
    assert reversed_range.exit_code == 1
    assert "is not before" in reversed_range.output


def test_parse_time_reads_dates_zones_and_now() -> None:
    assert parse_time("2024-06-03", option="--from") == datetime(2024, 6, 3, tzinfo=UTC)
    assert parse_time("2024-06-03T12:00:00+02:00", option="--from").astimezone(UTC).hour == 10
    assert (datetime.now(UTC) - parse_time("now", option="--to")).total_seconds() < 5


def _printed(result: AnalysisResult) -> str:
    out = io.StringIO()
    print_result(result, Console(file=out, width=250, highlight=False))
    return out.getvalue()


def _analysis(fleet: Fleet, **window: float) -> AnalysisResult:
    gpu, eng = fleet.columns()
    return run_pipeline(input_from_samples(gpu, eng, **window), load_catalog())


def test_unknown_capacity_and_price_are_never_shown_as_zero() -> None:
    fleet = Fleet(workers([("node00", H100, 1, 1)]), hours=2)
    gpu, _ = fleet.columns()
    end = float(max(gpu["ts"]))
    result = _analysis(fleet, start=end + 7200.0, end=end + 4 * 3600.0)  # a range nothing was seen in
    assert result.summary["fleet"]["capacity_tokens_per_s"] is None
    assert result.summary["pools"][0]["capacity_tokens_per_s"] is None
    text = _printed(dataclasses.replace(result, findings=[]))
    assert "Capacity now unknown" in text and "Capacity now 0 " not in text
    assert "misplacement cost unknown (no placement analysis)" in text and "$0" not in text
    assert "unknown" in text.split("Pools", 1)[1]  # the pools table says unknown, not 0
    assert "capacity unknown: " in text  # with the reason, under the pools table
    assert "Lost capacity: unknown" in text


def test_no_findings_is_said_only_of_judged_workers() -> None:
    result = _analysis(
        Fleet(workers([("node00", H100, 2, 0), ("node01", H200, 0, 2)]), hours=6, source="nvml-basic")
    )
    text = _printed(dataclasses.replace(result, findings=[]))
    assert "No findings: every worker" not in text
    assert "No findings among 0 judged workers; 4 could not be judged: no profiling fields" in text
    assert result.summary["workers"][0]["misplaced"] is None
    judged = _analysis(
        Fleet(workers([("node00", H100, 4, 0), ("node01", H200, 2, 2)]), hours=24, rate_rps=lambda h: 40.0)
    )
    assert "No findings: every worker sits on hardware its bottleneck needs." in _printed(judged)


def test_pool_notes_show_under_the_pools_table_and_in_the_json(store: str) -> None:
    fleet = Fleet(workers([("node00", H100, 2, 0), ("node01", H200, 0, 2)]), hours=4)
    gpu, eng = fleet.columns()
    eng["precision"] = [None] * len(eng["ts"])
    result = run_pipeline(input_from_samples(gpu, eng), load_catalog(), extra_warnings=["a reader's note"])
    text = _printed(result)
    notes = text.split("Pool notes", 1)[1]
    assert "no worker reports its precision: assumed bf16" in notes
    assert "a reader's note" in result.summary["warnings"]
    payload = json.loads(_runner().invoke(app, ["--database-url", store, "--json"]).stdout)
    assert isinstance(payload["warnings"], list)
    lost = payload["summary"]["fleet"]["lost"]
    assert lost["output_tokens_per_s"]["value"] > 0 and lost["requests_per_s"]["value"] > 0
    assert payload["summary"]["fleet"]["judged_workers"] == 4


def test_the_tables_lead_with_output_tokens_and_requests(store: str) -> None:
    result = _runner().invoke(app, ["--database-url", store], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    text = result.output
    assert "lost output tok/s (range)" in text and "lost req/s" in text
    assert "total tok/s" in text and "(secondary)" in text
    assert "misplacement price not set" in text and "$0" not in text  # the default catalog has no prices
    assert text.index("Lost output tokens/s now") < text.index("(secondary) lost total tokens/s")


def test_devices_are_counted_as_whole_gpus_and_mig_instances() -> None:
    from phasefit.cli.result_output import devices_phrase

    assert devices_phrase(fleet_totals(gpus=64, mig_instances=0)) == "64 GPUs"
    fleet = {"gpus": 40, "whole_gpus": 24, "mig_instances": 16, "mig_parent_gpus": 8, "physical_gpus": 32}
    assert devices_phrase(fleet_totals(**fleet)) == (
        "32 physical GPUs: 24 whole GPUs and 16 MIG instances on 8 GPU(s)"
    )
    unknown = fleet | {"physical_gpus": None, "physical_gpus_reason": "2 MIG instance(s) name no parent GPU"}
    assert devices_phrase(fleet_totals(**unknown)).startswith(
        "physical GPUs unknown (2 MIG instance(s) name no parent GPU)"
    )


def test_judged_workers_say_what_evidence_judged_them() -> None:
    from phasefit.cli.result_output import judged_phrase

    strong = {"workers": 9, "judged_workers": 9, "judged_by_evidence": {"profiling": 9}}
    assert judged_phrase(fleet_totals(**strong)) == "9 judged"
    weak = {"workers": 9, "judged_workers": 9, "judged_by_evidence": {"profiling": 7, "utilisation": 2}}
    assert judged_phrase(fleet_totals(**weak)) == "9 judged: 7 on profiling, 2 on utilisation only"


def test_a_sample_stamped_far_in_the_future_does_not_empty_the_default_range(store: str) -> None:
    """A skewed clock stored one sample in 2099: the default range still ends near now, not there."""
    engine = make_engine(store)
    future = GpuSample(
        ts=datetime(2099, 12, 31, 23, 59, 59, 999999, tzinfo=UTC), window_s=60.0, node="node-skewed",
        gpu_uuid="GPU-skewed", gpu_index=0, gpu_name=H100, source=TelemetrySource.DCGM,
    )  # fmt: skip
    with writing(engine) as connection:
        write_samples(connection, [future], sku_resolver=catalog_sku_resolver())
    engine.dispose()
    result = _runner().invoke(app, ["--database-url", store, "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["summary"]["fleet"]["workers"] == 4


def test_a_finding_that_estimates_no_loss_prints_unknown_total() -> None:
    from fleet.contract import Finding, FindingKind
    from phasefit.cli.findings_table import FINDING_COLUMNS, finding_cells

    at = datetime(2026, 11, 24, tzinfo=UTC)
    degraded = Finding(
        kind=FindingKind.TELEMETRY_DEGRADED, worker_id="node01/decode-2", first_seen=at, last_seen=at
    )
    total = FINDING_COLUMNS.index("total tok/s")
    assert finding_cells(1, degraded)[total] == "unknown"  # never "0"
    legacy = degraded.model_copy(update={"lost_tokens_per_s": 0.0})  # written before the total was nullable
    assert finding_cells(1, legacy)[total] == "unknown"
    sized = degraded.model_copy(update={"lost_tokens_per_s": 1234.4, "lost_output_tokens_per_s": 0.0})
    assert finding_cells(1, sized)[total] == "1,234"


def test_a_range_the_prune_expired_says_so_and_an_unpruned_one_does_not() -> None:
    from types import SimpleNamespace

    from phasefit.cli.analyze import _retention_notes

    now = datetime(2026, 12, 6, tzinfo=UTC)
    settings = SimpleNamespace(rollup_hour_retention_days=400)
    since = datetime(2025, 1, 1, tzinfo=UTC)  # before the cutoff, 2025-11-01
    later = datetime(2026, 1, 1, tzinfo=UTC).timestamp()

    def data(*stamps: float) -> object:
        return SimpleNamespace(gpu_buckets={"ts": list(stamps)}, engine_buckets={"ts": []})

    (note,) = _retention_notes(settings, since, data(later), now)  # type: ignore[arg-type]
    assert "kept 400 days" in note and "before about 2025-11-01" in note
    kept = datetime(2025, 2, 1, tzinfo=UTC).timestamp()
    assert _retention_notes(settings, since, data(kept, later), now) == []  # type: ignore[arg-type]
    assert _retention_notes(SimpleNamespace(rollup_hour_retention_days=0), since, data(later), now) == []  # type: ignore[arg-type]


def test_why_a_pools_loss_reaches_zero_is_a_pool_note() -> None:
    """A move held back (its gain not sure) leaves a loss with a range from 0 and no recommendation: the
    pools table's notes say why, in the summary's own words."""
    result = _analysis(Fleet(workers([("node00", H100, 2, 0), ("node01", H200, 0, 2)]), hours=4))
    why = "no move is recommended: the split held back would most likely add 1,234 tokens/s [not markup]"
    pools = [
        p.model_copy(update={"loss_range_to_zero": why if i == 0 else None})
        for i, p in enumerate(result.typed_summary.pools)
    ]
    typed = result.typed_summary.model_copy(update={"pools": pools})
    text = _printed(dataclasses.replace(result, typed_summary=typed, findings=[]))
    assert f"{pools[0].pool}: {why}" in text.split("Pool notes", 1)[1]
