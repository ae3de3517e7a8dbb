"""`phasefit demo` ends by printing the exact line that points later commands at its store."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from typer.testing import CliRunner

from phasefit.cli import app
from phasefit.cli.demo import export_line


def test_the_demo_prints_the_export_line_of_its_store_and_analyze_reads_it(tmp_path: Path) -> None:
    out = tmp_path / "demo folder"  # a space: the line must still paste into a shell
    result = CliRunner().invoke(app, ["demo", "--days", "0.05", "--no-serve", "--json", "--out", str(out)])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    url = f"sqlite:///{(out / 'phasefit.db').resolve()}"
    line = f"export PHASEFIT_DATABASE_URL={shlex.quote(url)}"
    assert summary["export"] == line == export_line(url)
    assert result.stderr.rstrip("\n").splitlines()[-1] == line  # the last line, whole
    # What the line sets is what the read commands then read.
    name, value = shlex.split(line.removeprefix("export "))[0].split("=", 1)
    analysed = CliRunner().invoke(app, ["analyze", "--json"], env={name: value})
    assert analysed.exit_code == 0, analysed.output
    assert json.loads(analysed.stdout)["summary"]["fleet"]["workers"] > 0


def test_the_export_line_quotes_only_what_needs_quoting() -> None:
    assert (
        export_line("sqlite:////data/phasefit.db")
        == "export PHASEFIT_DATABASE_URL=sqlite:////data/phasefit.db"
    )
    assert export_line("sqlite:////a b/p.db") == "export PHASEFIT_DATABASE_URL='sqlite:////a b/p.db'"
