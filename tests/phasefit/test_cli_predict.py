"""``phasefit predict``: the JSON contract, human output on stderr, name resolution and clear errors."""

from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from analyzer.model.deployment import make_deployment
from analyzer.model.perf_model import Workload
from analyzer.model.perf_model import predict as run_model
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


ONE_H100 = ["--model", "llama-3.3-70b", "--gpu", "H100-SXM", "--tp", "1", "--precision", "fp8"]
LENGTHS = ["--isl", "1000", "--osl", "1000", "--json"]


def test_the_budget_names_its_source_and_assumptions() -> None:
    modelled = json.loads(runner.invoke(app, [*ONE_H100, *LENGTHS]).stdout)
    budget = modelled["kv_budget"]
    assert budget["source"] == "modelled"
    assert budget["assumptions"]["engine"] == "trtllm-bench"
    assert budget["assumptions"]["fraction"] == 0.95
    assert budget["tokens_low"] < budget["tokens"] < budget["tokens_high"]
    assert modelled["regime"] == "kv-starved"
    low, high = modelled["ranges"]["output"]["low"], modelled["ranges"]["output"]["high"]
    assert low < modelled["output_tokens_per_s"] < high
    assert modelled["uncertainty_parts"]["kv_budget"] > 0.5


def test_a_reported_budget_replaces_the_model() -> None:
    result = runner.invoke(app, [*ONE_H100, "--kv-budget-tokens", "30000", *LENGTHS])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["kv_budget"]["source"] == "given"
    assert payload["kv_budget"]["tokens"] == pytest.approx(30_000)
    assert payload["max_batch"] == 15  # 30,000 tokens of 2,000-token sequences
    modelled = json.loads(runner.invoke(app, [*ONE_H100, *LENGTHS]).stdout)
    assert payload["uncertainty"] < modelled["uncertainty"]


def test_an_engine_rule_and_its_fraction() -> None:
    args = ["--model", "llama-3.1-8b", "--gpu", "H100-SXM", "--precision", "fp8", *LENGTHS]
    vllm = json.loads(runner.invoke(app, [*args, "--gpu-memory-utilization", "0.8"]).stdout)
    assert vllm["kv_budget"]["assumptions"]["engine"] == "vllm"
    assert vllm["kv_budget"]["assumptions"]["fraction"] == 0.8
    fuller = json.loads(runner.invoke(app, [*args, "--gpu-memory-utilization", "0.95"]).stdout)
    assert fuller["kv_budget"]["tokens"] > vllm["kv_budget"]["tokens"]
    sglang = json.loads(runner.invoke(app, [*args, "--engine", "sglang"]).stdout)
    assert sglang["kv_budget"]["assumptions"]["basis"] == "static"
    unknown = runner.invoke(app, [*args, "--engine", "nope"])
    assert unknown.exit_code == 1 and "unknown engine 'nope'" in unknown.stderr


def test_expert_and_attention_data_parallel_layouts() -> None:
    args = ["--model", "qwen3-235b-a22b", "--gpu", "H200-SXM", "--tp", "8", "--precision", "fp8", *LENGTHS]
    plain = json.loads(runner.invoke(app, args).stdout)
    dp = json.loads(runner.invoke(app, [*args, "--ep", "8", "--attention-dp"]).stdout)
    assert (dp["ep"], dp["attention_dp"], plain["ep"], plain["attention_dp"]) == (8, True, 1, False)
    assert plain["regime"] == dp["regime"] == "moe"
    assert (
        dp["kv_budget"]["assumptions"]["weight_bytes_per_gpu"]
        > plain["kv_budget"]["assumptions"]["weight_bytes_per_gpu"]
    )
    dense = runner.invoke(
        app,
        [
            "--model",
            "llama-3.1-8b",
            "--gpu",
            "H200-SXM",
            "--precision",
            "fp8",
            "--tp",
            "2",
            "--ep",
            "2",
            *LENGTHS,
        ],
    )
    assert dense.exit_code == 1 and "dense model" in " ".join(dense.stderr.split())


def test_latency_targets_add_the_goodput_meeting_them() -> None:
    args = ["--model", "llama-3.1-70b", "--gpu", "H100-SXM", "--tp", "2", "--precision", "fp8"]
    args += ["--isl", "2000", "--osl", "500"]
    plain_run = runner.invoke(app, [*args, "--json"])
    assert json.loads(plain_run.stdout)["goodput"] is None
    result = runner.invoke(app, [*args, "--ttft-slo", "0.5", "--tpot-slo", "0.03", "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    served = payload["goodput"]
    assert served["tpot_slo_s"] == 0.03 and served["ttft_slo_s"] == 0.5
    assert served["decode_limited_by_tpot"] and served["decode_tpot_s"] == pytest.approx(0.03, rel=1e-6)
    decode = served["decode_output_tokens_per_s"]
    assert decode["low"] < decode["value"] < decode["high"]
    assert decode["value"] < payload["decode_tokens_per_s"]
    assert served["prefill_ttft_p90_s"] == pytest.approx(0.5, rel=1e-6)
    assert 0 < served["prefill_requests_per_s"]["value"] < payload["prefill_tokens_per_s"] / 2000
    human = runner.invoke(app, [*args, "--tpot-slo", "0.03"])
    assert human.exit_code == 0 and "decode goodput, TPOT <= 30.0 ms" in human.output


def test_a_latency_target_must_be_positive() -> None:
    args = ["--model", "llama-3.1-8b", "--gpu", "H100-SXM", *BASE, "--tpot-slo", "0"]
    result = runner.invoke(app, args)
    assert result.exit_code != 0


TP8_DENSE = ["--model", "llama-3.1-70b", "--gpu", "H200-SXM", "--tp", "8", "--precision", "fp8"]


def test_a_band_widened_by_the_measured_kernels_says_so() -> None:
    from analyzer.model.validation import MEASURED

    payload = json.loads(runner.invoke(app, [*TP8_DENSE, *LENGTHS]).stdout)
    p90 = MEASURED[("TP 4-8 dense", "decode")].absolute.p90
    reason = payload["uncertainty_widened"]
    assert reason.startswith(f"widened to {p90:.0%}: against AI Configurator's measured kernels, TP 4-8")
    assert payload["uncertainty"] >= p90
    assert payload["uncertainty_parts"]["validation"] == pytest.approx(p90)
    assert payload["ranges"]["output"]["widened"] == payload["ranges"]["decode"]["widened"] == reason
    assert "TP 4-8 dense prefill steps" in payload["ranges"]["prefill"]["widened"]
    human = runner.invoke(app, [*TP8_DENSE, "--isl", "1000", "--osl", "1000"])
    text = " ".join(human.stderr.split())
    assert f"uncertainty: output and decode ranges widened to {p90:.0%}: against" in text
    assert "uncertainty: prefill range widened to" in text


def test_a_band_within_the_validation_is_not_widened(monkeypatch: pytest.MonkeyPatch) -> None:
    from analyzer.model import validation

    monkeypatch.setattr(validation, "MEASURED", {})  # no measured-kernel figures: the held-out band stands
    payload = json.loads(runner.invoke(app, [*TP8_DENSE, *LENGTHS]).stdout)
    assert payload["uncertainty_widened"] is None
    assert all(r["widened"] is None for r in payload["ranges"].values())
    assert payload["uncertainty_parts"]["validation"] == 0.0
    human = runner.invoke(app, [*TP8_DENSE, "--isl", "1000", "--osl", "1000"])
    assert human.exit_code == 0 and "widened" not in human.stderr
