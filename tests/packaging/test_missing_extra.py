"""A command whose extra is not installed says which extra to install, in one line, with no traceback.

The missing module is simulated: in-process by replacing ``builtins.__import__``, and in a fresh interpreter
by a meta-path finder that refuses the module, as an environment without the extra would.
"""

from __future__ import annotations

import builtins
import gc
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import phasefit.cli as cli
from phasefit.cli import extras

ROOT = Path(__file__).resolve().parents[2]

_PROBE = """
import importlib.abc, sys
BLOCKED = set(filter(None, sys.argv[1].split(",")))
class Missing(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, Missing())
sys.argv = ["phasefit", *sys.argv[2:]]
from phasefit.cli import main
main()
"""


def run_without(modules: set[str], *argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _PROBE, ",".join(sorted(modules)), *argv],
        capture_output=True, text=True, timeout=120, check=False, cwd=cwd,
    )  # fmt: skip


def expected_line(command: str, module: str, extra: str) -> str:
    return (
        f"error: phasefit {command} needs the {extra!r} extra (no module named {module!r}): "
        f"pip install 'phasefit[{extra}]'\n"
    )


# --- which extra is named --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("module", "command", "extra"),
    [
        ("sqlalchemy", "analyze", "store"),
        ("numpy", "analyze", "analyzer"),
        ("httpx", "analyze", "analyzer"),
        ("matplotlib", "report", "report"),
        ("sqlalchemy", "report", "report"),
        ("uvicorn", "serve", "server"),
        ("sqlalchemy", "serve", "server"),
        ("streamlit", "dashboard", "dashboard"),
        ("httpx", "collect", "collector"),
        ("numpy", "collect", "collector"),
        ("numpy", "sim", "sim"),
        ("msgspec", "ingest", "store"),
        ("alembic", "db", "store"),
        ("orjson", "demo", "demo"),
        ("sqlalchemy", "docs", "store"),  # no entry for the command: the smallest extra that has it
        ("sqlalchemy", None, "store"),
    ],
)
def test_the_extra_named_for_a_missing_module(module: str, command: str | None, extra: str) -> None:
    assert extras.extra_for(module, command) == extra


def test_a_module_no_extra_provides_is_not_blamed_on_an_extra() -> None:
    assert extras.extra_for("fleet", "analyze") is None
    assert extras.extra_for("sklearn", "analyze") is None  # only the test extra has it


def test_the_command_is_the_first_word_that_is_not_an_option() -> None:
    assert extras.command_of(["--version"]) is None
    assert extras.command_of(["db", "upgrade", "--database-url", "x"]) == "db"
    assert extras.command_of([]) is None


def test_preflight_only_where_the_failure_would_come_late_or_in_a_child() -> None:
    assert extras.preflight_modules(["dashboard"]) == ("streamlit",)
    assert "streamlit" in extras.preflight_modules(["demo"])
    demo = extras.preflight_modules(["demo", "--no-serve"])
    assert "streamlit" not in demo and {"numpy", "sqlalchemy", "matplotlib", "orjson"} <= set(demo)
    assert extras.preflight_modules(["demo", "--help"]) == ()
    assert extras.preflight_modules(["analyze"]) == ()


# --- the exit ----------------------------------------------------------------------------------------------


def test_a_missing_module_exits_1_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped, extras.missing_extra_exits(["analyze", "--json"]):
        raise ModuleNotFoundError("No module named 'sqlalchemy'", name="sqlalchemy")
    assert stopped.value.code == extras.EXIT_MISSING_EXTRA == 1
    captured = capsys.readouterr()
    assert captured.err == expected_line("analyze", "sqlalchemy", "store")
    assert captured.out == ""


def test_a_submodule_names_its_top_level_module(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit), extras.missing_extra_exits(["collect"]):
        raise ModuleNotFoundError("No module named 'prometheus_client.core'", name="prometheus_client.core")
    assert "no module named 'prometheus_client'" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["fleet.nothing", "not_a_dependency", None])
def test_any_other_missing_module_keeps_its_traceback(name: str | None) -> None:
    with pytest.raises(ModuleNotFoundError), extras.missing_extra_exits(["analyze"]):
        raise ModuleNotFoundError("gone", name=name)


def test_other_errors_pass_through() -> None:
    with pytest.raises(ValueError, match="boom"), extras.missing_extra_exits(["analyze"]):
        raise ValueError("boom")


def test_main_names_the_store_extra_when_sqlalchemy_is_missing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Store-mode ``analyze`` with only the analyzer extra installed (issue 29): no traceback."""
    real_import = builtins.__import__

    def without_sqlalchemy(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.partition(".")[0] == "sqlalchemy":
            raise ModuleNotFoundError(f"No module named {name!r}", name="sqlalchemy")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(sys, "argv", ["phasefit", "analyze", "--database-url", f"sqlite:///{tmp_path}/s.db"])
    monkeypatch.setattr(builtins, "__import__", without_sqlalchemy)
    with pytest.raises(SystemExit) as stopped:
        cli.main()
    gc.unfreeze()  # main leaves the objects it saw to the OS at exit; this process goes on
    monkeypatch.setattr(builtins, "__import__", real_import)
    assert stopped.value.code == 1
    err = capsys.readouterr().err
    assert err.endswith(expected_line("analyze", "sqlalchemy", "store"))
    assert "Traceback" not in err


# --- end to end, in an interpreter that lacks the module -----------------------------------------------


@pytest.mark.parametrize(
    ("blocked", "argv", "line"),
    [
        (
            "sqlalchemy",
            ["analyze", "--database-url", "sqlite:///{tmp}/s.db"],
            expected_line("analyze", "sqlalchemy", "store"),
        ),
        (
            "httpx",
            ["analyze", "--prometheus", "http://127.0.0.1:9"],
            expected_line("analyze", "httpx", "analyzer"),
        ),
        ("uvicorn", ["serve"], expected_line("serve", "uvicorn", "server")),
        ("streamlit", ["dashboard"], expected_line("dashboard", "streamlit", "dashboard")),
        (
            "prometheus_client",
            ["collect", "--once"],
            expected_line("collect", "prometheus_client", "collector"),
        ),
    ],
    ids=lambda v: v if isinstance(v, str) and not v.startswith("error") else None,
)
def test_the_command_line_says_which_extra(blocked: str, argv: list[str], line: str, tmp_path: Path) -> None:
    result = run_without({blocked}, *(arg.format(tmp=tmp_path) for arg in argv), cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.endswith(line), result.stderr


def test_the_demo_stops_before_it_simulates_when_its_extra_is_missing(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    result = run_without({"numpy"}, "demo", "--no-serve", "--out", str(out), cwd=tmp_path)
    assert result.returncode == 1 and result.stderr == expected_line("demo", "numpy", "demo"), result.stderr
    assert not out.exists(), "the demo started before it found its extra missing"


def test_help_needs_no_extra(tmp_path: Path) -> None:
    optional = set().union(*extras.EXTRA_MODULES.values())
    result = run_without(optional, "analyze", "--help", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "--prometheus" in result.stdout
