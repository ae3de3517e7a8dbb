"""ServiceSettings refuse unsafe setups outside development mode."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from phasefit.service.settings import ServiceSettings

URL = "sqlite:///unused.db"


def test_no_ingest_token_is_refused_unless_dev(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "PHASEFIT_INGEST_TOKENS",
        "PHASEFIT_INGEST_TOKENS_FILE",
        "PHASEFIT_SERVICE_TOKENS_FILE",
        "PHASEFIT_DEV",
    ):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ValidationError, match="no ingest token configured"):
        ServiceSettings(database_url=URL)
    assert ServiceSettings(database_url=URL, dev=True).dev


def test_tokens_from_the_environment_including_the_deploy_alias(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "tokens"
    path.write_text("a-plain-token-0123456789\n")
    monkeypatch.setenv("PHASEFIT_SERVICE_TOKENS_FILE", str(path))
    assert ServiceSettings(database_url=URL).ingest_tokens_file == path
    monkeypatch.delenv("PHASEFIT_SERVICE_TOKENS_FILE")
    monkeypatch.setenv("PHASEFIT_INGEST_TOKENS", "a-plain-token-0123456789 b-plain-token-0123456789")
    settings = ServiceSettings(database_url=URL)
    assert settings.ingest_tokens is not None
    assert "a-plain-token" not in repr(settings)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"ingest_tokens": "short"}, "at least 16 characters"),
        ({"ingest_tokens": "a-plain-token-0123456789", "read_access": "token"}, "no read token"),
        ({"ingest_tokens": "a-plain-token-0123456789", "alertmanager_username": "am"}, "both"),
        ({"ingest_tokens": "a-plain-token-0123456789", "max_body_bytes": 10**9}, "max_decompressed_bytes"),
        ({"ingest_tokens_file": Path("/nonexistent/tokens")}, "cannot read token file"),
    ],
)
def test_unsafe_or_inconsistent_settings_are_refused(values: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        ServiceSettings(database_url=URL, **values)  # type: ignore[arg-type]


def test_the_basic_auth_password_can_come_from_a_file(tmp_path: Path) -> None:
    path = tmp_path / "password"
    path.write_text("s3cret\n")
    settings = ServiceSettings(
        database_url=URL, dev=True, alertmanager_username="am", alertmanager_password_file=path
    )
    assert settings.alertmanager_password_value() == "s3cret"
