"""The seeded store the dashboard tests read (built once per session, shared with the report tests)."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from tests.dashboard.seed import Seeded, shared_seed


@pytest.fixture(scope="session")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Seeded:
    return shared_seed(tmp_path_factory)


@pytest.fixture(autouse=True)
def _restore_main_module() -> Iterator[None]:
    """Streamlit's AppTest runs a page as ``__main__``; put pytest's back, or every later test that starts
    a multiprocessing worker (spawn or forkserver re-imports ``__main__``) would re-run a dashboard page in
    the child and lose it."""
    main = sys.modules.get("__main__")
    yield
    if main is not None:
        sys.modules["__main__"] = main
