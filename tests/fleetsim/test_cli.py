"""``phasefit sim scenarios`` and ``phasefit sim run`` through the Typer sub-app."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from fleet.contract import parse_record
from phasefit.cli.sim import app

runner = CliRunner()


def test_scenarios_lists_one_line_each() -> None:
    result = runner.invoke(app, ["scenarios"])
    assert result.exit_code == 0
    lines = [line for line in result.output.splitlines() if line.strip()]
    names = [line.split()[0] for line in lines]
    assert {"demo", "balanced", "inverted", "all-h100", "capacity", "underused", "mixed"} <= set(names)
    listed = json.loads(runner.invoke(app, ["scenarios", "--json"]).stdout)
    demo = next(s for s in listed if s["name"] == "demo")
    assert demo["gpus"] == 64 and demo["skus"] == ["H100-SXM", "H200-SXM"]


def test_run_writes_records_and_truth(tmp_path: Path) -> None:
    out, truth = tmp_path / "demo.jsonl", tmp_path / "truth.json"
    args = [
        "run",
        "demo",
        "--days",
        "0.05",
        "--out",
        str(out),
        "--truth",
        str(truth),
        "--seed",
        "2",
        "--window-s",
        "60",
    ]
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    lines = out.read_bytes().splitlines()
    assert summary["records"] == len(lines) > 0 and summary["window_s"] == 60
    assert all(parse_record(line).window_s == 60 for line in lines[:500])
    report = json.loads(truth.read_text())
    assert report["scenario"] == "demo" and report["seed"] == 2 and len(report["misplaced_workers"]) == 3
    assert not list(tmp_path.glob("*.partial"))
    again = tmp_path / "again.jsonl"
    assert (
        runner.invoke(
            app, ["run", "demo", "--days", "0.05", "--out", str(again), "--seed", "2", "--window-s", "60"]
        ).exit_code
        == 0
    )
    assert again.read_bytes() == out.read_bytes()


def test_run_rejects_an_unknown_scenario(tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["run", "no-such-scenario", "--days", "1", "--out", str(tmp_path / "x.jsonl")]
    )
    assert result.exit_code == 2
    assert "no scenario 'no-such-scenario'" in result.output
    assert not (tmp_path / "x.jsonl").exists()


def test_run_takes_a_physics_and_the_truth_names_it(tmp_path: Path) -> None:
    out, truth = tmp_path / "b.jsonl", tmp_path / "truth.json"
    common = ["run", "balanced", "--days", "0.02", "--window-s", "60", "--out", str(out)]
    result = runner.invoke(app, [*common, "--truth", str(truth), "--physics", "perturbed", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["physics"] == "perturbed"
    report = json.loads(truth.read_text())
    assert report["physics"]["name"] == "perturbed" and "max_running_requests" in report["physics"]["draw"]
    other = tmp_path / "other.json"
    seeded = [*common, "--truth", str(other), "--physics", "perturbed", "--physics-seed", "3"]
    assert runner.invoke(app, seeded).exit_code == 0
    assert json.loads(other.read_text())["physics"]["draw"] != report["physics"]["draw"]
    bad = runner.invoke(app, [*common, "--physics", "roofline"])
    assert bad.exit_code == 2 and "model, measured, perturbed" in bad.output
