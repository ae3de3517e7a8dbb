"""Fixtures of the simulator tests: the catalog, the shared data folder, small scenarios."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleet.catalog import Catalog, load_catalog

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared"


@pytest.fixture(scope="session")
def catalog() -> Catalog:
    return load_catalog()


@pytest.fixture(scope="session")
def shared() -> Path:
    if not SHARED.is_dir():
        pytest.skip(f"the shared data folder {SHARED} is not there")
    return SHARED
