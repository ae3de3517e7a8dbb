"""`phasefit demo` runs the main job end to end on a short simulated span."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from phasefit.cli import app


def test_demo_simulates_stores_and_summarises(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    result = CliRunner().invoke(app, ["demo", "--days", "0.1", "--no-serve", "--json", "--out", str(out)])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert (out / "records.jsonl").stat().st_size > 0
    assert json.loads((out / "truth.json").read_text())["scenario"] == "demo"
    lines = sum(1 for _ in (out / "records.jsonl").open())
    assert summary["records_stored"] == lines
    groups = {(g["sku"], g["role"]): g for g in summary["fleet"]}
    assert sum(g["gpus"] for g in groups.values()) == 64
    assert {sku for sku, _ in groups} == {"H100-SXM", "H200-SXM"}
    # Decode workers move bytes, prefill workers do math: the counters the demo stored must say so.
    decode, prefill = groups[("H200-SXM", "decode")], groups[("H100-SXM", "prefill")]
    assert decode["dram_active"] > prefill["dram_active"]
    assert prefill["tensor_active"] > decode["tensor_active"]


def test_demo_is_repeatable_in_the_same_folder(tmp_path: Path) -> None:
    args = ["demo", "--days", "0.05", "--no-serve", "--json", "--out", str(tmp_path)]
    first = json.loads(CliRunner().invoke(app, args).stdout)
    second = json.loads(CliRunner().invoke(app, args).stdout)
    assert first["records_stored"] == second["records_stored"]
    assert first["fleet"] == second["fleet"]
