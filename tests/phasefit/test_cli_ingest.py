"""`phasefit ingest`: stores good files, refuses bad ones whole, names file, line and field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from sqlalchemy import select
from typer.testing import CliRunner

from fleet.contract import dump_record
from fleet.store import migrate
from fleet.store.engine import make_engine
from fleet.store.queries import table_counts
from fleet.store.schema import GpuRow
from phasefit.cli import db
from phasefit.cli.ingest import ingest
from tests.fleet.store_factories import engine_sample, gpu_sample

runner = CliRunner()


def cli() -> typer.Typer:
    """The CLI as the lead wires it: `db` sub-app and the `ingest` command."""
    app = typer.Typer()
    app.add_typer(db.app, name="db")
    app.command()(ingest)
    return app


def _file(path: Path, bad_line: int | None = None) -> Path:
    lines = [dump_record(gpu_sample(i % 4, i)) for i in range(10)] + [dump_record(engine_sample(0, 0))]
    if bad_line is not None:
        record = json.loads(lines[bad_line - 1])
        record["tensor_active"] = 2.0
        lines[bad_line - 1] = json.dumps(record)
    path.write_text("\n".join(lines) + "\n")
    return path


def test_good_files_are_stored_a_bad_one_not_at_all_and_the_exit_status_says_so(
    store_url: str, tmp_path: Path
) -> None:
    good, bad = _file(tmp_path / "good.jsonl"), _file(tmp_path / "bad [1].jsonl", bad_line=7)
    result = runner.invoke(cli(), ["ingest", str(good), str(bad), "--database-url", store_url])
    assert result.exit_code == 1, result.output
    assert "created the phasefit schema" in result.stderr
    assert f"{good}: 11 records (10 gpu, 1 engine): 11 stored, 0 already stored" in result.stderr
    assert (
        f"error: {bad}:line 7: tensor_active: Input should be less than or equal to 1 (got 2.0)"
        in result.stderr
    )
    assert f"{bad}: nothing stored (all or nothing per file)" in result.stderr
    engine = make_engine(store_url)
    with engine.connect() as connection:
        counts = table_counts(connection)
        skus = dict(connection.execute(select(GpuRow.gpu_name, GpuRow.sku)).all())
    engine.dispose()
    assert (counts["gpu_samples"], counts["engine_samples"]) == (10, 1)
    assert skus == {"NVIDIA H100 80GB HBM3": "H100-SXM", "NVIDIA H200": "H200-SXM"}  # resolved by the catalog


def test_json_summary_and_the_database_url_from_the_environment(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PHASEFIT_DATABASE_URL", store_url)
    path = _file(tmp_path / "good.jsonl")
    first = runner.invoke(cli(), ["ingest", str(path), "--json", "--jobs", "0"])
    second = runner.invoke(cli(), ["ingest", str(path), "--json"])
    assert first.exit_code == 0 and second.exit_code == 0, first.output + second.output
    summary = json.loads(second.stdout)
    assert (summary["stored"], summary["duplicates"], summary["failed_files"]) == (0, 11, 0)
    assert summary["files"][0]["status"] == "stored" and summary["files"][0]["gpu_samples"] == 10
    bad = runner.invoke(cli(), ["ingest", str(_file(tmp_path / "bad.jsonl", bad_line=2)), "--json"])
    report = json.loads(bad.stdout)
    assert bad.exit_code == 1 and report["failed_files"] == 1
    assert report["files"][0]["errors"] == [
        {"line": 2, "field": "tensor_active", "message": "Input should be less than or equal to 1 (got 2.0)"}
    ]


def test_a_store_at_an_older_revision_is_refused(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = make_engine(store_url)
    migrate.upgrade(engine)
    engine.dispose()
    monkeypatch.setattr(migrate, "head_revision", lambda: "0099")  # as a newer phasefit would see it
    result = runner.invoke(cli(), ["ingest", str(_file(tmp_path / "a.jsonl")), "--database-url", store_url])
    assert result.exit_code == 1
    assert "this phasefit needs 0099: run `phasefit db upgrade`" in " ".join(result.stderr.split())


def test_help_states_all_or_nothing_and_bad_arguments_fail(tmp_path: Path) -> None:
    help_text = " ".join(runner.invoke(cli(), ["ingest", "--help"]).output.split())
    assert "all or nothing" in help_text and "NOTHING from that file is stored" in help_text
    missing = runner.invoke(cli(), ["ingest", str(tmp_path / "missing.jsonl")])
    assert missing.exit_code == 2
    wrong_url = runner.invoke(
        cli(), ["ingest", str(_file(tmp_path / "a.jsonl")), "--database-url", "mysql://x/y"]
    )
    assert wrong_url.exit_code == 1 and "unsupported database URL" in wrong_url.stderr


def test_a_first_file_that_cannot_be_read_is_reported_and_the_next_one_stored(
    store_url: str, tmp_path: Path
) -> None:
    broken = tmp_path / "broken.jsonl.gz"
    broken.write_bytes(b"\x1f\x8b\x08\x00 not gzip at all")
    good = _file(tmp_path / "good.jsonl")
    result = runner.invoke(cli(), ["ingest", str(broken), str(good), "--database-url", store_url])
    assert result.exit_code == 1, result.output
    assert f"{broken}: nothing stored" in result.stderr
    assert f"{good}: 11 records (10 gpu, 1 engine): 11 stored" in result.stderr


@pytest.mark.parametrize(
    ("url", "encoding"),
    [("sqlite:////tmp/x.db", "epoch_us"), ("sqlite+pysqlite:///x.db", "epoch_us"),
     ("postgresql+psycopg://u@h/db", "datetime")],
)  # fmt: skip
def test_the_first_file_is_parsed_for_the_store_the_url_names(
    tmp_path: Path, url: str, encoding: str
) -> None:
    from phasefit.cli.ingest import _parsing_early

    with _parsing_early(_file(tmp_path / "a.jsonl"), url, 0) as parsed:
        assert parsed is not None and parsed.encoding == encoding
        assert sum(len(batch.gpu_rows) for batch in parsed.results() if not isinstance(batch, list)) == 10
