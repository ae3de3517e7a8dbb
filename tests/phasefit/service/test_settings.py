"""ServiceSettings refuse unsafe setups outside development mode."""

from __future__ import annotations

import re
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


TOKENS = "a-plain-token-0123456789"


@pytest.mark.parametrize(
    ("host", "mode"),
    [(None, "open"), ("127.0.0.1", "open"), ("::1", "open"), ("localhost", "open"), ("0.0.0.0", "token"),
     ("::", "token"), ("10.0.0.5", "token"), ("phasefit.example.com", "token")],
)  # fmt: skip
def test_reads_default_to_tokens_on_any_non_loopback_address(host: str | None, mode: str) -> None:
    values: dict[str, object] = {"ingest_tokens": TOKENS, "read_tokens": "b-plain-token-0123456789"}
    if host is not None:
        values["bind_host"] = host
    assert ServiceSettings(database_url=URL, **values).read_mode == mode  # type: ignore[arg-type]


def test_a_network_address_without_read_tokens_is_refused_with_what_to_do(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PHASEFIT_SERVICE_BIND_HOST", "0.0.0.0")
    with pytest.raises(ValidationError) as refused:
        ServiceSettings(database_url=URL, ingest_tokens=TOKENS)  # type: ignore[arg-type]
    message = str(refused.value)
    assert "read access defaults to 'token' on the non-loopback address 0.0.0.0" in message
    assert "PHASEFIT_READ_TOKENS_FILE" in message and "bind 127.0.0.1" in message


def test_open_reads_on_a_network_address_need_the_explicit_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PHASEFIT_SERVICE_BIND_HOST", "0.0.0.0")
    monkeypatch.setenv("PHASEFIT_READ_ACCESS", "open")
    with pytest.raises(ValidationError) as refused:
        ServiceSettings(database_url=URL, ingest_tokens=TOKENS)  # type: ignore[arg-type]
    message = str(refused.value)
    assert "PHASEFIT_READ_ACCESS=open is refused on the non-loopback address 0.0.0.0" in message
    assert "PHASEFIT_SERVICE_ALLOW_OPEN_READS_ON_NETWORK=true" in message
    monkeypatch.setenv("PHASEFIT_SERVICE_ALLOW_OPEN_READS_ON_NETWORK", "true")
    forced = ServiceSettings(database_url=URL, ingest_tokens=TOKENS)  # type: ignore[arg-type]
    assert forced.read_mode == "open" and forced.allow_open_reads_on_network
    monkeypatch.setenv("PHASEFIT_SERVICE_BIND_HOST", "127.0.0.1")
    monkeypatch.delenv("PHASEFIT_SERVICE_ALLOW_OPEN_READS_ON_NETWORK")
    assert ServiceSettings(database_url=URL, ingest_tokens=TOKENS).read_mode == "open"  # type: ignore[arg-type]


def test_development_mode_is_refused_on_a_network_address() -> None:
    with pytest.raises(
        ValidationError, match=re.escape("PHASEFIT_DEV serves without credentials and is refused on 0.0.0.0")
    ):
        ServiceSettings(database_url=URL, dev=True, bind_host="0.0.0.0")
    assert ServiceSettings(database_url=URL, dev=True, bind_host="127.0.0.1").read_mode == "open"


def test_the_per_token_ingest_limit_defaults_to_a_quarter_and_never_exceeds_the_admissions() -> None:
    settings = ServiceSettings(database_url=URL, ingest_tokens=TOKENS)  # type: ignore[arg-type]
    assert (settings.max_pending_ingests, settings.ingest_limit_per_token) == (256, 64)
    small = ServiceSettings(database_url=URL, ingest_tokens=TOKENS, max_pending_ingests=2)  # type: ignore[arg-type]
    assert small.ingest_limit_per_token == 1
    with pytest.raises(ValidationError, match="one token could take every admission slot"):
        ServiceSettings(
            database_url=URL,
            ingest_tokens=TOKENS,
            max_pending_ingests=8,
            max_pending_ingests_per_token=9,  # type: ignore[arg-type]
        )
    assert settings.body_timeout_s == 30.0
