"""The seeded store the dashboard tests read (built once per session, shared with the report tests)."""

from __future__ import annotations

import pytest

from tests.dashboard.seed import Seeded, shared_seed


@pytest.fixture(scope="session")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Seeded:
    return shared_seed(tmp_path_factory)
