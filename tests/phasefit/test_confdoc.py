"""The configuration reference: current, complete, truthful about variable names, silent about secrets."""

from __future__ import annotations

import enum
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import pytest
from pydantic import AliasChoices, BaseModel, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict
from typer.testing import CliRunner

from phasefit import confdoc
from phasefit.cli.docs import app

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "configuration.md"


def test_generated_reference_is_current() -> None:
    text, _ = confdoc.generate()
    assert REFERENCE.is_file(), "docs/configuration.md is missing: run `phasefit docs config`"
    assert REFERENCE.read_text(encoding="utf-8") == text, (
        "docs/configuration.md is stale: run `phasefit docs config` (or `python -m phasefit.confdoc`)"
    )


def test_generation_is_deterministic() -> None:
    assert confdoc.generate()[0] == confdoc.generate()[0]


def test_every_field_of_every_discovered_class_appears() -> None:
    found = confdoc.discover()
    assert any(path == "fleet.settings:Settings" for path, _ in found.classes)
    text = REFERENCE.read_text(encoding="utf-8")
    sections = {doc.path: doc for doc in confdoc.document_all(found)}
    for path, cls in found.classes:
        assert f"## {path}" in text
        section = sections[path]
        listed = {s.field.split(".")[0] for p in (path, *section.inherits) for s in sections[p].settings}
        assert listed == set(cls.model_fields), f"{path}: fields missing from the reference"
        for setting in confdoc.document_class(path, cls).settings:
            for env in setting.env_vars:
                assert f"`{env}`" in text, f"{path}.{setting.field}: {env} not in docs/configuration.md"


def test_every_real_setting_is_described() -> None:
    undocumented = [
        f"{path}.{s.field}"
        for path, cls in confdoc.discover().classes
        for s in confdoc.document_class(path, cls).settings
        if not s.description
    ]
    assert not undocumented, f"settings without a description (Field(description=...)): {undocumented}"


# --- a settings class with every shape the generator must get right ---------------------------------------


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Limits(BaseModel):
    max_batch: int = Field(default=100, ge=1, description="Most records per batch.")
    burst: float = Field(default=1.5, description="Burst factor.")


def _explode() -> str:
    """Never called by the generator: factories are described, not evaluated."""
    raise AssertionError("the generator evaluated a default factory")


class SampleSettings(BaseSettings):
    """Settings used only by this test."""

    model_config = SettingsConfigDict(env_prefix="PFTEST_", env_nested_delimiter="__", extra="ignore")

    plain: int = Field(default=3, ge=0, le=10, description="A bounded integer.")
    listen: str = Field(default=":9401", description="Address | with a pipe.")
    mode: Literal["fast", "safe"] = Field(default="safe", description="A literal.")
    colour: Colour = Field(default=Colour.BLUE, description="An enum.")
    flag: bool = Field(default=False, description="A flag.")
    aliased: str = Field(
        default="x", validation_alias=AliasChoices("PFTEST_ALIASED", "LEGACY_NAME"), description="Two names."
    )
    ingest_token: str = Field(default="plain-text-token-value", description="Named like a secret.")
    api_password: SecretStr = Field(default=SecretStr("hunter2"), description="Typed as a secret.")
    marked: str = Field(
        default="marked-value", json_schema_extra={"secret": True}, description="Marked secret."
    )
    computed: str = Field(default_factory=_explode, description="From a factory.")
    urls: list[str] = Field(default_factory=list, description="A list.")
    limits: Limits = Field(default_factory=Limits, description="Nested.")
    spool: Path = Field(default=Path.home() / "spool.sqlite", description="Under the home folder.")
    needed: str = Field(description="Required.")


@pytest.fixture
def sample_doc() -> confdoc.ClassDoc:
    return confdoc.document_class("tests.sample:SampleSettings", SampleSettings)


def _row(doc: confdoc.ClassDoc, field: str) -> confdoc.SettingDoc:
    return next(s for s in doc.settings if s.field == field)


def test_variable_names_and_types(sample_doc: confdoc.ClassDoc) -> None:
    assert _row(sample_doc, "plain").env_vars == ("PFTEST_PLAIN",)
    assert _row(sample_doc, "plain").type == "int, ≥ 0, ≤ 10"
    assert _row(sample_doc, "mode").type == '"fast" | "safe"'
    assert _row(sample_doc, "colour").type == '"red" | "blue"'
    assert _row(sample_doc, "colour").default == "`blue`"
    assert _row(sample_doc, "flag").default == "`false`"
    assert _row(sample_doc, "aliased").env_vars == ("PFTEST_ALIASED", "LEGACY_NAME")
    assert _row(sample_doc, "limits.max_batch").env_vars == ("PFTEST_LIMITS__MAX_BATCH",)
    assert _row(sample_doc, "limits.max_batch").type == "int, ≥ 1"
    assert _row(sample_doc, "urls").default == "`[]`"
    assert _row(sample_doc, "computed").default.startswith("computed: Never called by the generator")
    assert _row(sample_doc, "spool").default == "`~/spool.sqlite`"
    assert _row(sample_doc, "needed").default == "**required**"


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    for name in list(os.environ):
        if name.startswith("PFTEST_") or name == "LEGACY_NAME":
            monkeypatch.delenv(name)
    yield monkeypatch


def test_documented_names_really_set_the_settings(
    sample_doc: confdoc.ClassDoc, clean_env: pytest.MonkeyPatch
) -> None:
    """Set every documented variable and read it back through pydantic-settings itself."""
    values = {
        "plain": "7",
        "listen": "127.0.0.1:1",
        "mode": "fast",
        "colour": "red",
        "flag": "true",
        "ingest_token": "t",
        "api_password": "p",
        "marked": "m",
        "computed": "c",
        "urls": '["http://a"]',
        "limits.max_batch": "5",
        "limits.burst": "2.5",
        "spool": "/tmp/s",
        "needed": "n",
    }
    for setting in sample_doc.settings:
        if setting.field == "aliased":
            continue
        clean_env.setenv(setting.env_vars[0], values[setting.field])
    clean_env.setenv("LEGACY_NAME", "via-second-name")
    loaded = SampleSettings()
    assert loaded.plain == 7 and loaded.mode == "fast" and loaded.colour is Colour.RED and loaded.flag
    assert loaded.limits == Limits(max_batch=5, burst=2.5)
    assert loaded.urls == ["http://a"] and loaded.needed == "n" and loaded.computed == "c"
    assert loaded.aliased == "via-second-name"


def test_secrets_are_never_shown(sample_doc: confdoc.ClassDoc) -> None:
    text = confdoc.render([sample_doc])
    for field in ("ingest_token", "api_password", "marked"):
        row = _row(sample_doc, field)
        assert row.secret and row.default == confdoc.HIDDEN
    for value in ("plain-text-token-value", "hunter2", "marked-value"):
        assert value not in text
    assert not _row(sample_doc, "listen").secret


def test_rendered_table_escapes_pipes_and_links_the_operator_guide(sample_doc: confdoc.ClassDoc) -> None:
    text = confdoc.render([sample_doc])
    assert "Address \\| with a pipe." in text
    assert "[operations.md](operations.md)" in text
    assert "## tests.sample:SampleSettings" in text
    assert "(#testssamplesamplesettings)" in text
    assert "`PFTEST_`" in text and "`__`" in text


class SampleChild(SampleSettings):
    """A subclass that adds one setting and changes one default."""

    extra: int = Field(default=1, description="Added by the subclass.")
    plain: int = Field(default=4, ge=0, le=10, description="A bounded integer.")


def test_subclass_lists_only_what_it_adds_or_changes() -> None:
    found = confdoc.Discovery(
        classes=(("tests.sample:SampleSettings", SampleSettings), ("tests.sample:SampleChild", SampleChild)),
        missing=(),
    )
    parent, child = confdoc.document_all(found)
    assert not parent.inherits and len(parent.settings) > 10
    assert child.inherits == ("tests.sample:SampleSettings",)
    assert {s.field for s in child.settings} == {"extra", "plain"}
    text = confdoc.render([parent, child])
    assert "Also reads every setting of [`tests.sample:SampleSettings`](#testssamplesamplesettings)" in text


def test_secret_name_heuristic() -> None:
    field = SampleSettings.model_fields["listen"]
    for name in ("token", "ingest_token", "read_tokens", "db_password", "api_key", "webhook_secret"):
        assert confdoc.is_secret(name, field), name
    for name in ("token_file", "tokens_path", "secret_dir", "listen", "tokenizer"):
        assert not confdoc.is_secret(name, field), name


# --- discovery ---------------------------------------------------------------------------------------------


def test_discover_skips_modules_that_do_not_exist_yet() -> None:
    found = confdoc.discover(["fleet.settings:Settings", "phasefit.not_written_yet.settings:Nothing"])
    assert [p for p, _ in found.classes] == ["fleet.settings:Settings"]
    assert found.missing[0][0] == "phasefit.not_written_yet.settings:Nothing"


def test_discover_fails_on_a_missing_class_or_a_broken_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(LookupError, match="NoSuchClass"):
        confdoc.discover(["fleet.settings:NoSuchClass"])
    with pytest.raises(ValueError, match="module:ClassName"):
        confdoc.discover(["fleet.settings"])
    # A module that exists but lacks a dependency is an error, not "not written yet".
    (tmp_path / "pftest_broken_settings.py").write_text(
        "import pftest_dependency_that_is_not_installed\n", encoding="utf-8"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "pftest_broken_settings", raising=False)
    with pytest.raises(ModuleNotFoundError, match="pftest_dependency_that_is_not_installed"):
        confdoc.discover(["pftest_broken_settings:Settings"])


# --- the CLI -----------------------------------------------------------------------------------------------


def test_cli_writes_and_checks(tmp_path: Path) -> None:
    runner = CliRunner()
    target = tmp_path / "docs" / "configuration.md"
    result = runner.invoke(app, ["config", "--check", "--output", str(target)])
    assert result.exit_code == 1 and "does not exist" in result.output
    result = runner.invoke(app, ["config", "--output", str(target)])
    assert result.exit_code == 0, result.output
    assert target.read_text(encoding="utf-8") == confdoc.generate()[0]
    result = runner.invoke(app, ["config", "--check", "--output", str(target)])
    assert result.exit_code == 0, result.output
    target.write_text(target.read_text(encoding="utf-8") + "edited by hand\n", encoding="utf-8")
    result = runner.invoke(app, ["config", "--check", "--output", str(target)])
    assert result.exit_code == 1 and "stale" in result.output


def test_module_main_writes_the_file(tmp_path: Path) -> None:
    target = tmp_path / "configuration.md"
    assert confdoc.main([str(target)]) == 0
    assert target.read_text(encoding="utf-8") == confdoc.generate()[0]


def test_a_class_without_a_docstring_does_not_borrow_its_base_class_docstring() -> None:
    class Bare(BaseSettings):
        size: int = Field(default=1, description="A size.")

    assert confdoc.document_class("tests.sample:Bare", Bare).summary == ""
    assert confdoc.document_class("tests.sample:SampleSettings", SampleSettings).summary == (
        "Settings used only by this test."
    )
