"""``phasefit docs``: documents generated from the code, so they cannot drift from it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from phasefit.cli.output import escape, fail, human

app = typer.Typer(no_args_is_help=True)


@app.callback()
def docs() -> None:
    """Generate documentation from the code (the configuration reference)."""


@app.command("config")
def config(
    check: Annotated[
        bool,
        typer.Option("--check", help="Write nothing; exit 1 if the file differs from what would be written."),
    ] = False,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output", "-o", help="Where to write (default: docs/configuration.md of the checkout)."
        ),
    ] = None,
) -> None:
    """Write docs/configuration.md from the settings models: every environment variable, type and default."""
    from phasefit.confdoc import default_output, generate

    target = output if output is not None else default_output()
    text, found = generate()
    console = human()
    for path, why in found.missing:
        console.print(f"[yellow]skipped[/] {escape(f'{path}: {why}')}")
    if check:
        try:
            current = target.read_text(encoding="utf-8")
        except FileNotFoundError:
            fail(f"{target} does not exist: run `phasefit docs config`")
        except OSError as exc:
            fail(f"cannot read {target}: {exc.strerror}")
        else:
            if current != text:
                fail(f"{target} is stale: run `phasefit docs config` and commit the result")
            console.print(f"{target} is current", markup=False)
        return
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    except OSError as exc:
        fail(f"cannot write {target}: {exc.strerror}")
    console.print(f"wrote {target} ({len(found.classes)} settings classes)", markup=False)
