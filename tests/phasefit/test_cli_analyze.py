from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import typer
from sqlalchemy import func, select
from typer.testing import CliRunner

from fleet.contract import EngineSample, GpuSample
from fleet.ingest import catalog_sku_resolver
from fleet.store.engine import make_engine, writing
from fleet.store.migrate import upgrade
from fleet.store.schema import AnalysisRunRow, FindingRow
from fleet.store.writer import write_samples
from phasefit.cli.analyze import analyze, parse_time
from tests.analyzer.synthetic import H100, H200, Fleet, workers

app = typer.Typer()
app.command()(analyze)


def _runner() -> CliRunner:
    return CliRunner()


def _records(columns: dict[str, Any], kind: type[GpuSample] | type[EngineSample]) -> list[Any]:
    names = [k for k in columns if k != "ts"]
    return [
        kind(ts=datetime.fromtimestamp(float(ts), tz=UTC), **{k: columns[k][i] for k in names})
        for i, ts in enumerate(columns["ts"])
    ]


@pytest.fixture
def store(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'phasefit.db'}"
    engine = make_engine(url)
    upgrade(engine)
    fleet = Fleet(
        workers([("node00", H100, 0, 2), ("node01", H200, 2, 0)]),
        hours=8,
        window_s=900.0,
        rate_rps=lambda h: 12.0,
        osl=lambda h: 900.0,
    )
    gpu, eng = fleet.columns()
    with writing(engine) as connection:
        write_samples(
            connection,
            _records(gpu, GpuSample) + _records(eng, EngineSample),
            sku_resolver=catalog_sku_resolver(),
        )
    engine.dispose()
    return url


def test_json_output_has_the_summary_and_the_findings(store: str) -> None:
    result = _runner().invoke(app, ["--database-url", store, "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert set(payload) == {"summary", "findings"}
    assert payload["summary"]["fleet"]["lost_tokens_per_s"] > 0
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


def test_human_output_prints_the_summary_and_tables_and_reruns_do_not_duplicate(store: str) -> None:
    wide = {"COLUMNS": "250"}
    first = _runner().invoke(
        app, ["--database-url", store, "--from", "2024-06-03", "--to", "2024-06-03T08:00Z"], env=wide
    )
    assert first.exit_code == 0, first.output
    text = first.output
    assert "Lost tokens/s now" in text and "Pools" in text and "Findings" in text
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


def test_a_store_without_the_schema_is_refused(tmp_path: Path) -> None:
    result = _runner().invoke(app, ["--database-url", f"sqlite:///{tmp_path / 'none.db'}"])
    assert result.exit_code == 1
    assert "phasefit db upgrade" in result.output


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
