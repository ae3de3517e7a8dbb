"""The ``phasefit`` command line: one Typer app, one module per area (a router per area).

Area modules import their heavy dependencies inside the commands, so ``phasefit --help`` stays fast and a
collector-only install can run ``phasefit collect`` without SQLAlchemy or scikit-learn. Each module keeps
its own name here (``phasefit.cli.report`` is the module, ``phasefit.cli.report.report`` the command).
"""

from __future__ import annotations

import typer

from phasefit import __version__
from phasefit.cli import (
    alerts,
    analyze,
    catalog,
    collect,
    dashboard,
    db,
    demo,
    docs,
    ingest,
    plan,
    predict,
    report,
    serve,
    sim,
)

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


# The main job first, then the fleet's path: collect -> serve/ingest -> analyze -> report/dashboard.
app.command()(demo.demo)
app.command()(collect.collect)
app.command()(serve.serve)
app.command()(ingest.ingest)
app.command()(analyze.analyze)
app.command()(plan.plan)
app.command()(report.report)
app.command()(dashboard.dashboard)
app.command()(predict.predict)
app.add_typer(catalog.app, name="catalog")
app.add_typer(alerts.app, name="alerts")
app.add_typer(sim.app, name="sim")
app.add_typer(db.app, name="db")
app.add_typer(docs.app, name="docs")


def main() -> None:
    app()
