"""The weekly report's standing what-ifs: configured once, answered every week under the pools."""

from __future__ import annotations

import pytest

from analyzer.planning.standing import StandingWhatIf
from analyzer.report.blocks import Heading, Table
from analyzer.report.build import build_audit
from analyzer.report.document import blocks
from analyzer.settings import AnalyzerSettings
from fleet.catalog import load_catalog
from fleet.store.engine import make_engine
from tests.analyzer.report.test_report import WEEK
from tests.dashboard.seed import Seeded, shared_seed


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Seeded:
    return shared_seed(tmp_path_factory)


def test_the_setting_is_checked_when_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "PHASEFIT_ANALYZER_REPORT_WHAT_IF", '[{"add": ["H200-SXM:16"]}, {"replace": ["H100-SXM:H200-SXM:8"]}]'
    )
    asked = AnalyzerSettings().report_what_if
    assert [a.describe() for a in asked] == ["+H200-SXM:16", "H100-SXM:H200-SXM:8 replaced"]
    monkeypatch.setenv("PHASEFIT_ANALYZER_REPORT_WHAT_IF", '[{"add": ["H200-SXM:lots"]}]')
    with pytest.raises(ValueError, match="is not a whole number of GPUs"):
        AnalyzerSettings()
    with pytest.raises(ValueError, match="needs at least one of add, remove or replace"):
        StandingWhatIf()


def test_the_report_answers_each_what_if_or_says_why_not(seeded: Seeded) -> None:
    asked = [StandingWhatIf(add=["H200-SXM:4"]), StandingWhatIf(add=["Z9000:4"])]
    engine = make_engine(seeded.url)
    with engine.connect() as connection:
        audit = build_audit(connection, WEEK, load_catalog(), version="test", what_ifs=asked)
    engine.dispose()
    answered, refused = audit.what_ifs
    assert answered.output_gain is not None and answered.pool == audit.pools[0].pool
    assert answered.output_low is not None and answered.output_low <= answered.output_gain
    assert refused.output_gain is None and "unknown GPU SKU 'Z9000'" in refused.answer
    document = blocks(audit, {})
    at = next(i for i, b in enumerate(document) if isinstance(b, Heading) and b.text == "Standing what-ifs")
    table = document[at + 1]
    assert isinstance(table, Table) and [row[0] for row in table.rows] == ["+H200-SXM:4", "+Z9000:4"]
    assert table.rows[1][2] == "not evaluated"
