"""`phasefit demo` runs the main job end to end on a short simulated span."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from phasefit.cli import app


def _demo(out: Path, *extra: str) -> dict[str, Any]:
    args = ["demo", "--days", "0.1", "--no-serve", "--json", "--out", str(out), *extra]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    summary: dict[str, Any] = json.loads(result.stdout)
    return summary


def test_demo_simulates_stores_and_summarises(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    summary = _demo(out)
    # Streamed: the simulator's lines went into the store with no records file in the folder.
    assert sorted(p.name for p in out.iterdir() if p.suffix in (".jsonl", ".gz")) == []
    assert json.loads((out / "truth.json").read_text())["scenario"] == "demo"
    assert summary["records_stored"] > 0
    assert summary["folder"]["bytes"] == sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    groups = {(g["sku"], g["role"]): g for g in summary["fleet"]}
    assert sum(g["gpus"] for g in groups.values()) == 64
    assert {sku for sku, _ in groups} == {"H100-SXM", "H200-SXM"}
    # Decode workers move bytes, prefill workers do math: the counters the demo stored must say so.
    decode, prefill = groups[("H200-SXM", "decode")], groups[("H100-SXM", "prefill")]
    assert decode["dram_active"] > prefill["dram_active"]
    assert prefill["tensor_active"] > decode["tensor_active"]


@pytest.mark.parametrize("name", ["records.jsonl", "records.jsonl.gz"])
def test_demo_through_a_records_file_stores_what_the_stream_stores(tmp_path: Path, name: str) -> None:
    streamed = _demo(tmp_path / "streamed")
    records = tmp_path / name
    through_file = _demo(tmp_path / "file", "--records", str(records))
    opener = gzip.open if name.endswith(".gz") else open
    with opener(records, "rb") as fh:
        lines = sum(1 for _ in fh)
    assert through_file["records_stored"] == lines == streamed["records_stored"]
    assert through_file["fleet"] == streamed["fleet"]
    assert through_file["analysis"]["summary"] == streamed["analysis"]["summary"]


def test_demo_is_repeatable_in_the_same_folder(tmp_path: Path) -> None:
    first = _demo(tmp_path)
    second = _demo(tmp_path)
    assert first["records_stored"] == second["records_stored"]
    assert first["fleet"] == second["fleet"]


def test_demo_says_it_serves_the_dashboard_and_how_to_stop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    served: dict[str, Any] = {}
    monkeypatch.setattr("phasefit.cli.dashboard.dashboard", lambda **kwargs: served.update(kwargs))
    args = ["demo", "--days", "0.05", "--port", "8642", "--out", str(tmp_path)]
    result = CliRunner().invoke(app, args, terminal_width=400)
    assert result.exit_code == 0, result.output
    assert served["port"] == 8642 and served["host"] == "127.0.0.1"
    assert served["database_url"].endswith(str(tmp_path / "phasefit.db"))
    tail = result.output.strip().splitlines()[-2:]
    assert "now serving the dashboard at http://127.0.0.1:8642 until you press Ctrl-C" in " ".join(tail)
