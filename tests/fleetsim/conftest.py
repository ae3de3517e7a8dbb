"""Fixtures of the simulator tests: the catalog and the repository's reference data folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleet.catalog import Catalog, load_catalog

DATA = Path(__file__).resolve().parents[2] / "data"


@pytest.fixture(scope="session")
def catalog() -> Catalog:
    return load_catalog()


@pytest.fixture(scope="session")
def data_dir() -> Path:
    return DATA
