"""The findings name their worker at any width and in a log: a table when it fits, else stacked blocks;
no column is dropped, no name is cut."""

from __future__ import annotations

import io

import pytest
import typer
from rich.console import Console
from typer.testing import CliRunner

from analyzer.pipeline import AnalysisResult, input_from_samples
from analyzer.pipeline import analyze as run_pipeline
from fleet.catalog import load_catalog
from phasefit.cli.analyze import analyze
from phasefit.cli.findings_table import FINDING_COLUMNS
from phasefit.cli.result_output import print_result
from tests.analyzer.synthetic import H100, H200, Fleet, Worker
from tests.phasefit.synthetic_store import store_fleet

LONG = "us-east-1a/gpu-node-0017.inference.example.internal/vllm-llama-3-70b-decode-7f9c8d6b5-x2x4q"
NAMES = (LONG, "[red]w[/red]/decode-2", "node01/prefill-1", "node01/prefill-2")


def _fleet() -> Fleet:
    # Decode on the H100s while the H200s prefill: the two decode workers are misplaced.
    workers = [
        Worker(NAMES[0], H100, "decode"),
        Worker(NAMES[1], H100, "decode"),
        Worker(NAMES[2], H200, "prefill"),
        Worker(NAMES[3], H200, "prefill"),
    ]
    return Fleet(workers, hours=8, window_s=900.0, rate_rps=lambda h: 12.0, osl=lambda h: 900.0)


@pytest.fixture(scope="module")
def result() -> AnalysisResult:
    gpu, eng = _fleet().columns()
    analysis = run_pipeline(input_from_samples(gpu, eng), load_catalog())
    assert {f.worker_id for f in analysis.findings} >= {NAMES[0], NAMES[1]}
    return analysis


def _findings_text(text: str) -> str:
    return text.split("Findings", 1)[1]


def _check(text: str, result: AnalysisResult) -> None:
    findings = _findings_text(text)
    for f in result.findings:
        assert f.worker_id is not None and f.worker_id in findings, (f.worker_id, findings)
    for column in FINDING_COLUMNS:
        assert column in findings, column
    for number in range(1, len(result.findings) + 1):
        assert f"#{number} " in findings or f"│ {number} " in findings
    for line in findings.splitlines():
        assert "…" not in line  # nothing cut with an ellipsis


@pytest.mark.parametrize("width", [60, 80, 99, 120, 160, 250])
def test_a_terminal_of_any_width_names_every_worker_and_every_column(
    result: AnalysisResult, width: int
) -> None:
    out = io.StringIO()
    print_result(
        result, Console(file=out, width=width, force_terminal=True, color_system=None, highlight=False)
    )
    _check(out.getvalue(), result)


def test_a_narrow_terminal_stacks_the_findings_and_a_wide_one_keeps_the_table(result: AnalysisResult) -> None:
    narrow, wide = io.StringIO(), io.StringIO()
    print_result(result, Console(file=narrow, width=80, force_terminal=True, color_system=None))
    print_result(result, Console(file=wide, width=400, force_terminal=True, color_system=None))
    assert f"#1 worker / pool: {result.findings[0].worker_id}" in narrow.getvalue()
    assert "worker / pool:" not in wide.getvalue() and "┃ worker / pool" in wide.getvalue()
    # The table's lines fit the width; only a stacked line holding a long name may pass it.
    for line in _findings_text(narrow.getvalue()).splitlines():
        assert len(line) <= 80 or LONG in line


def test_a_log_names_every_worker_and_every_column(tmp_path, result: AnalysisResult) -> None:  # type: ignore[no-untyped-def]
    url = f"sqlite:///{tmp_path / 'phasefit.db'}"
    store_fleet(url, _fleet())
    app = typer.Typer()
    app.command()(analyze)
    for env in ({}, {"COLUMNS": "80"}, {"COLUMNS": "120"}):  # stderr is not a terminal: a CronJob's log
        run = CliRunner().invoke(app, ["--database-url", url], env=env)
        assert run.exit_code == 0, run.output
        findings = _findings_text(run.stderr)
        for name in (NAMES[0], NAMES[1]):
            assert name in findings
        for column in FINDING_COLUMNS:
            assert column in findings
