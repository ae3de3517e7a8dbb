"""The "Latency targets" section of docs/configuration.md: its examples load as written."""

from __future__ import annotations

from pathlib import Path

import pytest

from analyzer.settings import AnalyzerSettings
from fleet.catalog import load_catalog
from phasefit.targets_doc import EXAMPLE_CATALOG, EXAMPLE_ENV, TITLE, render_targets


def test_the_settings_example_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PHASEFIT_ANALYZER_TARGETS", EXAMPLE_ENV)
    rules = AnalyzerSettings().params().targets
    assert [r.rule.keys for r in rules] == [("model",), ("cluster", "deployment", "model")]


def test_the_catalog_example_loads(tmp_path: Path) -> None:
    path = tmp_path / "catalog.yaml"
    path.write_text(EXAMPLE_CATALOG, encoding="utf-8")
    fleet_wide, east = load_catalog(path).targets
    assert fleet_wide.rule.keys == () and fleet_wide.rule.tpot_p90_s == 0.08
    assert east.rule.keys == ("cluster", "model") and east.rule.e2e_p90_s == 20


def test_the_section_is_in_the_reference() -> None:
    reference = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text(
        encoding="utf-8"
    )
    assert f"## {TITLE}\n\n{render_targets()}" in reference
