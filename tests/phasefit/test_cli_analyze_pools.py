"""``phasefit analyze --pool`` / ``--shard`` / ``--processes``: part of a fleet, other pools left alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from sqlalchemy import select
from typer.testing import CliRunner

from fleet.store.engine import make_engine
from fleet.store.schema import FindingRow
from phasefit.cli.analyze import analyze
from tests.analyzer.synthetic import H100, H200
from tests.phasefit.synthetic_store import synthetic_store

app = typer.Typer()
app.command()(analyze)
# Two inverted pools (decode on H100, prefill on H200), told apart by cluster as an operator maps nodes.
SPEC = [("east0", H100, 0, 2), ("east1", H200, 2, 0), ("west0", H100, 0, 2), ("west1", H200, 2, 0)]
CLUSTERS = {node: node[:4] for node, *_ in SPEC}


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("PHASEFIT_ANALYZER_CLUSTERS", json.dumps(CLUSTERS))
    url = synthetic_store(tmp_path, SPEC)
    return url


def _run(store: str, *args: str) -> dict[str, object]:
    result = CliRunner().invoke(app, ["--database-url", store, "--json", *args])
    assert result.exit_code == 0, result.output
    payload: dict[str, object] = json.loads(result.stdout)
    return payload


def _pools(payload: dict[str, object]) -> list[str]:
    summary = payload["summary"]
    assert isinstance(summary, dict)
    return [p["pool"] for p in summary["pools"]]


def _open_pools(store: str) -> set[str]:
    engine = make_engine(store)
    with engine.connect() as connection:
        rows = connection.execute(select(FindingRow.pool).where(FindingRow.status == "open")).scalars()
        pools = {str(p) for p in rows}
    engine.dispose()
    return pools


def test_one_pool_is_analysed_and_the_others_findings_stay_open(store: str) -> None:
    everything = _run(store)
    assert (
        sorted(_pools(everything)) == ["east/llama-3.1-70b", "west/llama-3.1-70b"]
        or len(_pools(everything)) == 2
    )
    east, west = sorted(_pools(everything))
    assert _open_pools(store) == {east, west}
    alone = _run(store, "--pool", east)
    assert _pools(alone) == [east]
    assert any("covers pools" in w for w in alone["warnings"])  # type: ignore[union-attr]
    assert _open_pools(store) == {east, west}  # a run over east resolves none of west's findings


def test_shards_cover_the_pools_once_and_processes_change_nothing(store: str) -> None:
    parts = [_pools(_run(store, "--shard", f"{i}/2")) for i in range(2)]
    assert sorted(parts[0] + parts[1]) == sorted(_pools(_run(store)))
    assert parts[0] and parts[1]
    serial, parallel = _run(store), _run(store, "--processes", "2")
    assert parallel["findings"] == serial["findings"]


@pytest.mark.parametrize(
    ("args", "code", "says"),
    [
        (["--shard", "2/2"], 2, "is not INDEX/COUNT"),
        (["--pool", "nowhere/llama"], 1, "no pool nowhere/llama in the range"),
    ],
)
def test_a_bad_selection_says_what_exists(store: str, args: list[str], code: int, says: str) -> None:
    result = CliRunner().invoke(app, ["--database-url", store, *args])
    assert result.exit_code == code
    assert says in " ".join(result.output.split())
