"""``phasefit``'s entry point leaves what a command made to the OS at exit (gc.freeze), however it ends."""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator

import pytest

import phasefit.cli as cli


@pytest.fixture
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()  # this process goes on: let the collector see those objects again


@pytest.mark.parametrize(("argv", "code"), [(["--help"], 0), (["no-such-command"], 2)])
def test_main_freezes_the_heap_before_the_interpreter_exits(
    unfrozen: None, monkeypatch: pytest.MonkeyPatch, argv: list[str], code: int
) -> None:
    monkeypatch.setattr(sys, "argv", ["phasefit", *argv])
    assert gc.get_freeze_count() == 0
    with pytest.raises(SystemExit) as stopped:
        cli.main()
    assert stopped.value.code == code
    assert gc.get_freeze_count() > 0
