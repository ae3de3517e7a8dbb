"""`plan --add/--remove/--replace` gives the gain over the recommended split as well as over now."""

from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from phasefit.cli.plan import plan
from tests.analyzer.synthetic import H100, H200
from tests.phasefit.synthetic_store import synthetic_store

app = typer.Typer()
app.command()(plan)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    # Decode-bound: one H200 decode worker behind three H100 prefill workers at long outputs.
    return synthetic_store(tmp_path_factory.mktemp("gain"), [("node00", H100, 3, 0), ("node01", H200, 0, 1)])


def test_json_gives_the_gain_over_the_recommended_split_next_to_the_gain_over_now(store: str) -> None:
    result = CliRunner().invoke(app, ["--database-url", store, "--json", "--add", "H200-SXM:2"])
    assert result.exit_code == 0, result.output
    w = json.loads(result.stdout)["what_if"]
    keys = list(w)
    assert keys.index("gain_vs_recommended") == keys.index("gain_vs_now") + 1
    for unit in ("output_tokens_per_s", "requests_per_s", "tokens_per_s"):
        what_if, best = w["capacity_what_if"][unit], w["capacity_best_now"][unit]
        over_best = w["gain_vs_recommended"][unit]
        for end in ("value", "low", "high"):
            assert over_best[end] == pytest.approx(what_if[end] - best["value"], abs=0.2)
        assert set(over_best) == {"value", "low", "high"}
    # Today's GPUs re-split already gain something: the GPUs added bring less than the whole gain.
    assert w["gain_vs_recommended"]["output_tokens_per_s"]["value"] > 0
    assert (
        w["gain_vs_recommended"]["output_tokens_per_s"]["value"]
        <= w["gain_vs_now"]["output_tokens_per_s"]["value"]
    )


def test_the_tables_say_both_gains(store: str) -> None:
    result = CliRunner().invoke(app, ["--database-url", store, "--add", "H200-SXM:2"], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    text = " ".join(result.stderr.split())
    assert "gain vs now: output tokens/s +" in text
    assert "gain vs the recommended split of today's GPUs: output tokens/s +" in text
    assert text.index("gain vs now") < text.index("gain vs the recommended split")


def test_removing_what_was_added_gains_nothing_over_the_recommended_split(store: str) -> None:
    args = ["--database-url", store, "--json", "--add", "H200-SXM:2", "--remove", "H200-SXM:2"]
    w = json.loads(CliRunner().invoke(app, args).stdout)["what_if"]
    assert w["gain_vs_recommended"]["output_tokens_per_s"]["value"] == pytest.approx(0.0, abs=0.5)
