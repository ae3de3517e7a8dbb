"""``phasefit predict``: the JSON contract, human output on stderr, name resolution and clear errors."""

from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from analyzer.deployment import make_deployment
from analyzer.perf_model import Workload
from analyzer.perf_model import predict as run_model
from fleet.catalog import load_catalog
from phasefit.cli.predict import predict

runner = CliRunner()
app = typer.Typer()
app.command()(predict)  # as the lead wires it into the root app

BASE = ["--precision", "fp8", "--isl", "2048", "--osl", "2048"]


@pytest.fixture(autouse=True)
def _no_operator_catalog(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PHASEFIT_CATALOG_PATH", raising=False)


def test_json_contract_matches_the_model() -> None:
    result = runner.invoke(
        app, ["--model", "llama-3.1-70b", "--gpu", "H200-SXM", "--tp", "2", *BASE, "--json"]
    )
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    expected = run_model(
        make_deployment(load_catalog(), model="llama-3.1-70b", gpu="H200-SXM", precision="fp8", tp=2),
        Workload(2048, 2048),
    )
    assert payload["output_tokens_per_s"] == pytest.approx(expected.output_tokens_per_s)
    assert payload["prefill_tokens_per_s"] == pytest.approx(expected.prefill_tokens_per_s)
    assert payload["decode_tokens_per_s"] == pytest.approx(expected.decode_tokens_per_s)
    assert payload["max_batch"] == int(expected.max_batch)
    assert payload["bottleneck"] == str(expected.bottleneck)
    assert (payload["model"], payload["gpu"], payload["tp"], payload["mode"]) == (
        "llama-3.1-70b", "H200-SXM", 2, "max-throughput",
    )  # fmt: skip
    assert payload["kv_precision"] == "fp8"
    assert payload["decode_step"]["total_s"] > 0


def test_served_ids_nvml_names_and_concurrency() -> None:
    args = ["--model", "meta-llama/Llama-3.3-70B-Instruct", "--gpu", "NVIDIA H100 80GB HBM3", "--tp", "1"]
    result = runner.invoke(app, [*args, "--precision", "FP8", "--isl", "1000", "--osl", "1000", "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert (payload["model"], payload["gpu"]) == ("llama-3.1-70b", "H100-SXM")
    assert payload["bottleneck"] == "capacity"
    assert payload["max_batch"] < 32
    fixed = runner.invoke(
        app, [*args, "--precision", "fp8", "--isl", "1000", "--osl", "1000", "--concurrency", "4", "--json"]
    )
    assert json.loads(fixed.stdout)["batch"] == 4
    assert json.loads(fixed.stdout)["mode"] == "fixed-concurrency"


def test_human_output_goes_to_stderr() -> None:
    result = runner.invoke(app, ["--model", "llama-3.1-8b", "--gpu", "H100 SXM", *BASE])
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    assert "output tokens/s" in result.stderr and "H100 SXM" in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "gpt-17", "--gpu", "H100-SXM"], "unknown model 'gpt-17'"),
        (["--model", "llama-3.1-8b", "--gpu", "Z9000"], "unknown GPU 'Z9000'"),
        (["--model", "llama-3.1-8b", "--gpu", "H100-NVL"], "lacks catalog figure"),
    ],
)
def test_unknown_names_fail_clearly(args: list[str], message: str) -> None:
    result = runner.invoke(app, [*args, *BASE, "--json"])
    assert result.exit_code == 1
    assert result.stdout == ""
    assert message in " ".join(result.stderr.split())


def test_model_that_does_not_fit_says_so() -> None:
    result = runner.invoke(
        app,
        [
            "--model",
            "llama-3.1-405b",
            "--gpu",
            "H100-SXM",
            "--precision",
            "bf16",
            "--isl",
            "100",
            "--osl",
            "100",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["fits"] is False
    assert payload["output_tokens_per_s"] == 0
    assert payload["tpot_s"] is None
    assert "no room" in payload["notes"][0]
