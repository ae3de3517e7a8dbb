"""The ``phasefit`` command line: one Typer app, one module per area (a router per area).

Area modules import their heavy dependencies inside the commands, so ``phasefit --help`` stays fast and a
collector-only install can run ``phasefit collect`` without SQLAlchemy or scikit-learn.
"""

from __future__ import annotations

import typer

from phasefit import __version__
from phasefit.cli import alerts, catalog, db, docs, sim
from phasefit.cli.collect import collect
from phasefit.cli.demo import demo
from phasefit.cli.ingest import ingest
from phasefit.cli.predict import predict
from phasefit.cli.serve import serve

app = typer.Typer(
    name="phasefit",
    help="Find LLM inference workers whose bottleneck does not match their GPU, and the tokens it costs.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


@app.command()
def version() -> None:
    """Print phasefit's version."""
    typer.echo(__version__)


app.add_typer(catalog.app, name="catalog")
app.add_typer(alerts.app, name="alerts")
app.add_typer(sim.app, name="sim")
app.add_typer(db.app, name="db")
app.add_typer(docs.app, name="docs")
app.command()(ingest)
app.command()(predict)
app.command()(collect)
app.command()(demo)
app.command()(serve)


def main() -> None:
    app()
