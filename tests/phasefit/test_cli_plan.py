from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from phasefit.cli.plan import plan
from tests.analyzer.synthetic import H100, H200, Fleet, workers
from tests.phasefit.synthetic_store import store_fleet, synthetic_store

app = typer.Typer()
app.command()(plan)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    # Decode on the H100s (low bandwidth) while the H200s prefill: misplaced both ways.
    return synthetic_store(tmp_path_factory.mktemp("plan"), [("node00", H100, 0, 2), ("node01", H200, 2, 0)])


def _json(url: str, *args: str) -> dict[str, Any]:
    result = CliRunner().invoke(app, ["--database-url", url, "--json", *args])
    assert result.exit_code == 0, result.output
    payload: dict[str, Any] = json.loads(result.stdout)
    return payload


def test_plan_names_the_misplaced_decode_worker_and_a_positive_gain(store: str) -> None:
    payload = _json(store)
    assert payload["version"] == 1 and payload["applied"] is False and payload["what_if"] is None
    [pool] = payload["pools"]
    assert pool["status"] == "change"
    moved = {c["worker_id"]: c for c in pool["changes"]}
    to_prefill = [c for c in moved.values() if c["sku"] == "H100-SXM" and c["to_role"] == "prefill"]
    assert to_prefill and all(c["from_role"] == "decode" for c in to_prefill)
    assert all(w.startswith("node00/") for w in (c["worker_id"] for c in to_prefill))
    # its decode work moves to the H200s through the worker that trades roles with it
    assert any(c["work_moves_to_sku"] == "H200-SXM" for c in to_prefill)
    gain = pool["gain"]["output_tokens_per_s"]
    assert gain["value"] > 0 and gain["low"] <= gain["value"] <= gain["high"]
    assert pool["gain"]["requests_per_s"]["value"] > 0
    replicas = {(r["sku"], r["role"]): r for r in pool["replicas"]}
    assert replicas[("H100-SXM", "decode")]["current"] == 2
    assert replicas[("H100-SXM", "decode")]["recommended"] < 2
    assert replicas[("H200-SXM", "decode")]["recommended"] > replicas[("H200-SXM", "decode")]["current"]
    # the replicas add up to the same workers: a plan of the same GPUs
    assert sum(r["current"] for r in pool["replicas"]) == sum(r["recommended"] for r in pool["replicas"])


def test_human_plan_prints_tables_on_stderr_and_nothing_on_stdout(store: str) -> None:
    result = CliRunner().invoke(app, ["--database-url", store], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    text = result.stderr
    assert "nothing is applied" in text and "Replicas per SKU and role" in text and "Role changes" in text
    assert "decode -> prefill" in text and "expected gain: output tokens/s +" in text
    assert "goodput" not in text  # no latency target: raw throughput, nothing said about goodput
    targets = {"COLUMNS": "250", "PHASEFIT_ANALYZER_TARGETS": '[{"tpot_p90_s": 0.05}]'}
    text = CliRunner().invoke(app, ["--database-url", store], env=targets).stderr
    assert (
        "Capacities and gains count goodput within the pool's latency targets (TPOT p90 0.05 s; settings "
        "rule PHASEFIT_ANALYZER_TARGETS[0])" in text
    )


def test_adding_h200s_to_a_decode_bound_pool_adds_capacity(tmp_path: Path) -> None:
    # Decode-bound: one H200 decode worker behind three H100 prefill workers at long outputs.
    url = synthetic_store(tmp_path, [("node00", H100, 3, 0), ("node01", H200, 0, 1)])
    base = _json(url)
    assert base["pools"][0]["bound_now"] == "decode"
    payload = _json(url, "--add", "H200-SXM:2")
    w = payload["what_if"]
    assert w["changes"] == [{"op": "add", "sku": "H200-SXM", "gpus": 2}]
    more = w["capacity_what_if"]["output_tokens_per_s"]["value"]
    assert more > w["capacity_now"]["output_tokens_per_s"]["value"]
    assert more > w["capacity_best_now"]["output_tokens_per_s"]["value"]
    assert w["gain_vs_now"]["output_tokens_per_s"]["value"] > 0
    assert w["gain_vs_now"]["requests_per_s"]["value"] > 0
    h200 = next(g for g in w["groups"] if g["sku"] == "H200-SXM")
    assert h200["gpus_what_if"] == h200["gpus_now"] + 2
    # the built-in catalog sets no prices: never $0
    assert w["cost_per_week_usd"] == {
        "now": "price not set",
        "what_if": "price not set",
        "change": "price not set",
    }
    # removing the same GPUs again is the pool as it is: no capacity gained
    back = _json(url, "--add", "H200-SXM:2", "--remove", "H200-SXM:2")["what_if"]
    assert back["capacity_what_if"]["output_tokens_per_s"]["value"] == pytest.approx(
        w["capacity_best_now"]["output_tokens_per_s"]["value"], rel=1e-6
    )


def test_a_new_sku_is_sized_from_the_pools_calibration(store: str) -> None:
    w = _json(store, "--replace", "H100-SXM:B200:2")["what_if"]
    b200 = next(g for g in w["groups"] if g["sku"] == "B200")
    assert b200["new_group"] and b200["gpus_now"] == 0 and b200["gpus_what_if"] == 2
    h100 = next(g for g in w["groups"] if g["sku"] == "H100-SXM")
    assert h100["gpus_what_if"] == h100["gpus_now"] - 2
    assert any("B200 is new to this pool" in n for n in w["notes"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--add", "H300-SXM:8"], "unknown GPU SKU 'H300-SXM'"),
        (["--add", "H200-SXM:3"], "not a multiple of the pool's TP degree (2)"),
        (["--add", "H200-SXM:0"], "must be positive"),
        (["--add", "H200-SXM"], "expected SKU:GPUS"),
        (["--remove", "H100-SXM:8"], "has only 4 H100-SXM GPUs"),
        (["--remove", "B200:2"], "runs no B200 GPUs"),
        (["--replace", "H100-SXM:H200-SXM:x"], "is not a whole number"),
        (["--add", "H200-SXM:2", "--pool", "nope"], "no pool 'nope'"),
    ],
)
def test_bad_what_if_arguments_exit_2_with_the_reason(store: str, args: list[str], message: str) -> None:
    result = CliRunner().invoke(app, ["--database-url", store, "--json", *args], env={"COLUMNS": "250"})
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.stderr.split())
    assert result.stdout == ""


def test_several_pools_need_pool(tmp_path: Path) -> None:
    url = synthetic_store(tmp_path, [("node00", H100, 0, 2), ("node01", H200, 2, 0)])
    # a second model in the same store makes a second pool
    store_fleet(
        url,
        Fleet(
            workers([("node02", H100, 1, 1)]),
            hours=8,
            window_s=900.0,
            model="meta-llama/Llama-3.1-8B-Instruct",
        ),
    )
    result = CliRunner().invoke(app, ["--database-url", url, "--add", "H200-SXM:2"], env={"COLUMNS": "250"})
    assert result.exit_code == 2
    assert "name the one the GPUs are added to or removed from with --pool" in " ".join(result.stderr.split())
    pools = [p["pool"] for p in _json(url)["pools"]]
    assert len(pools) == 2
    chosen = _json(url, "--add", "H200-SXM:2", "--pool", pools[0])
    assert chosen["what_if"]["pool"] == pools[0] and [p["pool"] for p in chosen["pools"]] == [pools[0]]
