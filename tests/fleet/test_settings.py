from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from fleet.settings import Settings, default_database_url


def test_default_is_an_sqlite_file_in_the_user_data_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PHASEFIT_DATABASE_URL", raising=False)
    settings = Settings()
    assert settings.database_url == default_database_url()
    assert settings.database_url.startswith("sqlite:///")
    assert settings.database_url.endswith("phasefit.db")


def test_environment_overrides(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PHASEFIT_DATABASE_URL", "postgresql+psycopg://pf@db/phasefit")
    monkeypatch.setenv("PHASEFIT_CATALOG_PATH", str(tmp_path / "catalog.yaml"))
    settings = Settings()
    assert settings.database_url == "postgresql+psycopg://pf@db/phasefit"
    assert settings.catalog_path == tmp_path / "catalog.yaml"


@pytest.mark.parametrize("url", ["mysql://root@db/x", "postgresql://pf@db/x"])
def test_unsupported_urls_are_refused(url: str) -> None:
    with pytest.raises(ValidationError, match="database"):
        Settings(database_url=url)
