"""Check that a command line written in a manifest or a unit parses against the real ``phasefit`` CLI.

Options, choices and value types are checked by the CLI's own parser (nothing runs). A command that is not
in ``phasefit.cli`` is an error like any other.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

import typer

SAMPLE_WEEK = "2026-W48"


class NotWiredError(LookupError):
    """The command line names a command ``phasefit.cli`` does not have."""


def argv_from_shell(script: str) -> list[str]:
    """``exec phasefit report --week "$(date ...)" ...`` -> ["report", "--week", "2026-W48", ...]."""
    words = shlex.split(re.sub(r'"\$\(date [^)]*\)"', SAMPLE_WEEK, script))
    if words and words[0] == "exec":
        words = words[1:]
    if not words or not words[0].endswith("phasefit"):
        raise ValueError(f"not a phasefit command line: {script!r}")
    return words[1:]


def parse(argv: list[str]) -> dict[str, Any]:
    """The parsed parameters of ``phasefit ARGV``; raises NotWiredError or the CLI's own usage error."""
    from phasefit.cli import app

    command: Any = typer.main.get_command(app)
    path: list[str] = []
    rest = list(argv)
    while hasattr(command, "get_command"):
        if not rest:
            raise ValueError(f"`phasefit {' '.join(path)}` needs a subcommand")
        context = command.make_context("phasefit", [rest[0]], resilient_parsing=True)
        name = rest.pop(0)
        sub = command.get_command(context, name)
        if sub is None:
            raise NotWiredError(f"`phasefit {' '.join([*path, name])}` is not a phasefit command")
        command, path = sub, [*path, name]
    params: dict[str, Any] = command.make_context(" ".join(path), rest).params
    return params
