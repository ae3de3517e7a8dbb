"""A command whose optional dependency is missing names the extra that brings it, in one line.

The CLI imports each command's heavy dependencies inside the command (``phasefit collect`` runs without
SQLAlchemy), so a missing one surfaces as a ``ModuleNotFoundError`` while the command runs. ``main`` runs
the app inside :func:`missing_extra_exits`, which turns it into one line on stderr and exit status 1,
``error: phasefit analyze needs the 'store' extra (no module named 'sqlalchemy'): pip install
'phasefit[store]'``.

A module that no extra provides (one of ours, say) is a bug rather than an install choice and keeps its
traceback. ``phasefit dashboard`` runs Streamlit in a child process, and ``phasefit demo`` runs for a while
before it reaches its report and dashboard, so for those two the modules are looked up before they start.
``tests/packaging`` checks :data:`EXTRA_MODULES` against the extras in ``pyproject.toml``.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from types import MappingProxyType
from typing import Final, NoReturn

EXIT_MISSING_EXTRA: Final = 1  # a start-up error, as for every other command that cannot start

_STORE = frozenset({"sqlalchemy", "alembic", "psycopg", "msgspec"})
_ANALYZER = frozenset({"numpy", "scipy", "httpx"})
_SIM = frozenset({"numpy", "orjson"})
_REPORT = _STORE | _ANALYZER | {"matplotlib", "orjson"}
_DASHBOARD = frozenset({"streamlit", "httpx", "sqlalchemy", "psycopg"})

# The top-level modules each extra brings, as the code imports them. Smaller extras first: a command with
# no entry in COMMAND_EXTRAS is told the first extra here that has the module.
EXTRA_MODULES: Final[Mapping[str, frozenset[str]]] = MappingProxyType(
    {
        "store": _STORE,
        "analyzer": _ANALYZER,
        "sim": _SIM,
        "report": _REPORT,
        "dashboard": _DASHBOARD,
        "collector": frozenset(
            {"pynvml", "prometheus_client", "httpx", "numpy", "grpc", "kubernetes", "orjson"}
        ),
        "server": frozenset(
            {
                "fastapi",
                "uvicorn",
                "sqlalchemy",
                "alembic",
                "psycopg",
                "orjson",
                "msgspec",
                "prometheus_client",
            }
        ),
        "demo": _SIM | _REPORT | _DASHBOARD,
    }
)

# The extras a command (the first word after ``phasefit``) may need, the one to name first first.
COMMAND_EXTRAS: Final[Mapping[str, tuple[str, ...]]] = MappingProxyType(
    {
        "demo": ("demo",),
        "collect": ("collector",),
        "serve": ("server",),
        "ingest": ("store",),
        "analyze": ("analyzer", "store"),
        "plan": ("analyzer", "store"),
        "report": ("report",),
        "dashboard": ("dashboard",),
        "predict": ("analyzer",),
        "sim": ("sim",),
        "db": ("store",),
    }
)


def command_of(argv: Sequence[str]) -> str | None:
    """The command word of ``phasefit ARGS`` (the first argument that is not an option), if any."""
    return next((arg for arg in argv if not arg.startswith("-")), None)


def extra_for(module: str, command: str | None) -> str | None:
    """The extra to install for a missing top-level ``module`` under ``command``; None: no extra has it."""
    for extra in COMMAND_EXTRAS.get(command or "", ()):
        if module in EXTRA_MODULES[extra]:
            return extra
    return next((extra for extra, modules in EXTRA_MODULES.items() if module in modules), None)


def message(module: str, extra: str, command: str | None) -> str:
    who = f"phasefit {command}" if command else "phasefit"
    return f"{who} needs the {extra!r} extra (no module named {module!r}): pip install 'phasefit[{extra}]'"


def _exit(module: str, extra: str, command: str | None) -> NoReturn:
    sys.stderr.write(f"error: {message(module, extra, command)}\n")
    raise SystemExit(EXIT_MISSING_EXTRA)


def preflight_modules(argv: Sequence[str]) -> tuple[str, ...]:
    """Modules to look up before the command starts (see the module's docstring); none for ``--help``."""
    command = command_of(argv)
    if "--help" in argv or command not in ("dashboard", "demo"):
        return ()
    if command == "dashboard":
        return ("streamlit",)
    modules = EXTRA_MODULES["demo"] - ({"streamlit"} if "--no-serve" in argv else set())
    return tuple(sorted(modules))


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a broken or half-removed install counts as missing
        return False


@contextmanager
def missing_extra_exits(argv: Sequence[str]) -> Iterator[None]:
    """Run the CLI for ``argv`` (``sys.argv[1:]``): a missing optional module exits with one line."""
    command = command_of(argv)
    for module in preflight_modules(argv):
        if not _installed(module):
            extra = extra_for(module, command)
            if extra is not None:
                _exit(module, extra, command)
    try:
        yield
    except ModuleNotFoundError as exc:
        module = (exc.name or "").partition(".")[0]
        extra = extra_for(module, command) if module else None
        if extra is None:
            raise
        _exit(module, extra, command)
