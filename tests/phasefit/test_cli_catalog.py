from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from phasefit.cli import app as root_app
from phasefit.cli.catalog import app

runner = CliRunner()


@pytest.fixture(autouse=True)
def _no_operator_catalog(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PHASEFIT_CATALOG_PATH", raising=False)


def test_gpus_json_lists_every_sku_with_nulls_for_unknowns() -> None:
    result = runner.invoke(app, ["gpus", "--json"])
    assert result.exit_code == 0, result.output
    skus = {row["key"]: row for row in json.loads(result.stdout)}
    assert len(skus) == 16
    h100 = skus["H100-SXM"]
    assert h100["hbm_bytes"] == 80_000_000_000
    assert h100["hbm_bandwidth_bytes_per_s"] == 3.35e12
    assert h100["bf16_dense_flops"] == 989e12
    assert h100["hourly_price_usd"] is None
    assert h100["nvml_names"] == ["NVIDIA H100 80GB HBM3"]
    assert round(h100["ridge_point_bf16_flop_per_byte"]) == 295
    assert skus["H100-NVL"]["bf16_dense_flops"] is None
    assert skus["H100-NVL"]["ridge_point_bf16_flop_per_byte"] is None
    for row in skus.values():
        assert row["sources"]
        assert {"interconnect", "interconnect_bytes_per_s", "tdp_w", "fp8_dense_flops", "known"} <= set(row)


def test_gpus_table_goes_to_stderr() -> None:
    result = runner.invoke(app, ["gpus"])
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    assert "H200-SXM" in result.stderr and "MI300X" in result.stderr


def test_models_json_carries_derived_figures() -> None:
    result = runner.invoke(app, ["models", "--json"])
    assert result.exit_code == 0, result.output
    models = {row["key"]: row for row in json.loads(result.stdout)}
    assert len(models) == 12
    llama = models["llama-3.1-70b"]
    assert llama["kv_bytes_per_token_bf16"] == 327_680
    assert llama["total_params"] == pytest.approx(70.554e9, rel=1e-3)
    assert llama["weight_bytes_bf16"] == pytest.approx(2 * llama["total_params"])
    deepseek = models["deepseek-v3"]
    assert deepseek["active_params"] == pytest.approx(37.552e9, rel=1e-3)
    assert deepseek["kv_bytes_per_token_bf16"] == 70_272
    assert deepseek["attention"] == "mla"
    assert models["llama-3.1-8b"]["experts_total"] is None


def test_models_table_goes_to_stderr() -> None:
    result = runner.invoke(app, ["models"])
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    assert "deepseek-v3" in result.stderr and "327,680" in result.stderr


def test_the_operator_catalog_is_merged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "catalog.yaml"
    path.write_text("gpus:\n  H100-SXM: {hourly_price_usd: 2.9}\n", encoding="utf-8")
    monkeypatch.setenv("PHASEFIT_CATALOG_PATH", str(path))
    result = runner.invoke(app, ["gpus", "--json"])
    assert result.exit_code == 0, result.output
    prices = {row["key"]: row["hourly_price_usd"] for row in json.loads(result.stdout)}
    assert prices["H100-SXM"] == 2.9
    assert prices["H200-SXM"] is None


@pytest.mark.parametrize("command", ["gpus", "models"])
def test_a_bad_operator_catalog_fails_naming_file_and_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    path = tmp_path / "catalog.yaml"
    path.write_text("gpus:\n  H100-SXM: {hourly_price: 2.9}\n", encoding="utf-8")
    monkeypatch.setenv("PHASEFIT_CATALOG_PATH", str(path))
    result = runner.invoke(app, [command, "--json"])
    assert result.exit_code != 0
    assert result.stdout == ""
    message = "".join(result.stderr.split())  # rich wraps long lines
    assert str(path).replace(" ", "") in message and "gpus.H100-SXM" in message and "hourly_price" in message


def test_wired_into_the_phasefit_cli() -> None:
    result = runner.invoke(root_app, ["catalog", "gpus", "--json"])
    assert result.exit_code == 0, result.output
    assert len(json.loads(result.stdout)) == 16
