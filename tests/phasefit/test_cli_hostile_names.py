"""Names are data: worker ids, nodes and clusters holding rich markup print literally, never as markup.

A cluster named ``[/bold]c`` used to end ``phasefit analyze`` with a ``MarkupError``; a worker named
``[link=...]x[/link]`` became a terminal hyperlink (OSC 8) when stderr was a terminal.
"""

from __future__ import annotations

from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from fleet.contract import EngineSample, GpuSample
from fleet.ingest import catalog_sku_resolver
from fleet.store.engine import make_engine, writing
from fleet.store.migrate import upgrade
from fleet.store.writer import write_samples
from phasefit.cli.analyze import analyze
from phasefit.cli.plan import plan
from tests.analyzer.synthetic import H100, H200, Fleet, Worker
from tests.phasefit.synthetic_store import records

CLUSTER = "[/bold]c"
LINK = "[link=https://evil.example]x[/link]"
RED = "[red]w[/red]"
HOSTILE = (CLUSTER, LINK, RED)
OSC8 = "\x1b]8;"
# A terminal as rich sees one: colours and hyperlinks on, wide enough that no name folds.
TERMINAL = {"FORCE_COLOR": "1", "TERM": "xterm-256color", "COLUMNS": "400", "NO_COLOR": ""}


def _fleet() -> Fleet:
    # Decode on the H100s while the H200s prefill: misplaced, so findings and plan changes name them.
    names = [
        Worker(f"{LINK}/decode-1", H100, "decode"),
        Worker(f"{RED}/decode-2", H100, "decode"),
        Worker("node01/prefill-1", H200, "prefill"),
        Worker("node01/prefill-2", H200, "prefill"),
    ]
    return Fleet(names, hours=8, window_s=900.0, rate_rps=lambda h: 12.0, osl=lambda h: 900.0)


def _with_cluster(samples: list[Any]) -> list[Any]:
    return [s.model_copy(update={"cluster": CLUSTER}) for s in samples]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('hostile') / 'phasefit.db'}"
    engine = make_engine(url)
    upgrade(engine)
    gpu, eng = _fleet().columns()
    samples = _with_cluster(records(gpu, GpuSample) + records(eng, EngineSample))
    with writing(engine) as connection:
        write_samples(connection, samples, sku_resolver=catalog_sku_resolver())
    engine.dispose()
    return url


def _app(command: Any) -> typer.Typer:
    app = typer.Typer()
    app.command()(command)
    return app


def _run(command: Any, url: str) -> str:
    result = CliRunner().invoke(_app(command), ["--database-url", url], env=TERMINAL)
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("command", [analyze, plan], ids=["analyze", "plan"])
def test_markup_in_names_prints_literally_and_never_as_a_link(store: str, command: Any) -> None:
    output = _run(command, store)
    assert OSC8 not in output
    assert "MarkupError" not in output
    plain = _strip_ansi(output)
    assert CLUSTER in plain  # in the pool's name
    assert LINK in plain and RED in plain  # findings (analyze) and role changes (plan) name the workers


def test_the_terminal_is_really_forced(store: str) -> None:
    """Guard for the test above: the run does colour its output, so rich saw a terminal."""
    assert "\x1b[" in _run(analyze, store)


def _strip_ansi(text: str) -> str:
    import re

    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def test_an_error_message_naming_a_hostile_name_prints_literally(capsys: pytest.CaptureFixture[str]) -> None:
    from phasefit.cli.output import fail

    with pytest.raises(typer.Exit) as exited:
        fail(f"no pool {CLUSTER}/{LINK}")
    assert exited.value.exit_code == 1
    assert f"error: no pool {CLUSTER}/{LINK}" in capsys.readouterr().err
