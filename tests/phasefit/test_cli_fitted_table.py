"""Tables that fit the console, else one block per row: no column dropped, no name cut or folded, names
taken literally (the findings' and the pools' tables of ``phasefit analyze``)."""

from __future__ import annotations

import io

from rich.console import Console

from analyzer.pipeline import analyze as run_pipeline
from analyzer.pipeline import input_from_samples
from fleet.catalog import load_catalog
from phasefit.cli.fitted_table import print_fitted
from phasefit.cli.result_output import POOL_COLUMNS, print_result
from tests.analyzer.synthetic import H100, H200, Fleet, Worker

NAME = "prod-eu1/[bold]qwen-chat[/bold]/Qwen/Qwen2.5-72B-Instruct-with-a-very-long-deployment-name"
COLUMNS = ("#", "pool", "capacity", "lost")


def _printed(width: int, rows: list[tuple[str, ...]]) -> str:
    out = io.StringIO()
    print_fitted(Console(file=out, width=width, highlight=False), "Pools", COLUMNS, rows, "pool")
    return out.getvalue()


def test_a_table_that_fits_is_a_table() -> None:
    text = _printed(200, [("1", NAME, "338,184", "5,441 (713-7,200)")])
    assert "┃ pool" in text and NAME in text and "…" not in text


def test_a_table_too_wide_is_stacked_with_every_name_whole_and_literal() -> None:
    rows = [("1", NAME, "338,184", "5,441 (713-7,200)"), ("2", "small", "unknown", "-")]
    text = _printed(60, rows)
    lines = text.splitlines()
    assert lines[0] == "Pools"
    assert f"#1 pool: {NAME}" in lines  # on one line, markup shown as written
    assert "#2 pool: small" in lines
    assert "   capacity: 338,184; lost: 5,441 (713-7,200)" in lines
    assert "   capacity: unknown; lost: -" in lines
    assert "…" not in text


def test_the_pools_table_of_analyze_stacks_in_a_narrow_console() -> None:
    workers = [Worker("node00/decode-1", H100, "decode"), Worker("node01/prefill-1", H200, "prefill")]
    gpu, eng = Fleet(workers, hours=4).columns()
    result = run_pipeline(input_from_samples(gpu, eng), load_catalog())
    pool = result.typed_summary.pools[0].pool
    out = io.StringIO()
    print_result(result, Console(file=out, width=80, highlight=False))
    text = out.getvalue().split("Pools", 1)[1]
    assert f"pool: {pool}" in text.splitlines()  # whole, on its own line
    for column in POOL_COLUMNS[1:]:
        assert f"{column}: " in text, column
