"""Every alert has a runbook in the kube-prometheus format, and every runbook belongs to an alert."""

from __future__ import annotations

import re

from alerts.layout import RUNBOOKS_DIR
from alerts.rules_source import default_config, rule_files
from fleet.catalog import load_catalog

SECTIONS = ["Meaning", "Impact", "Diagnosis", "Mitigation"]


def _alert_names() -> set[str]:
    return {a.alert for f in rule_files(default_config(load_catalog().gpus)) for a in f.alerts}


def test_every_alert_has_a_runbook_with_the_four_sections() -> None:
    for name in sorted(_alert_names()):
        path = RUNBOOKS_DIR / f"{name.lower()}.md"
        assert path.is_file(), f"missing runbook {path}"
        text = path.read_text(encoding="utf-8")
        assert text.startswith(f"# {name}\n"), path
        assert re.findall(r"^## (\w+)$", text, flags=re.MULTILINE) == SECTIONS, path
        for section in re.split(r"^## \w+$", text, flags=re.MULTILINE)[1:]:
            assert len(section.split()) >= 20, f"{path}: a section is nearly empty"


def test_no_runbook_without_an_alert() -> None:
    runbooks = {p.stem for p in RUNBOOKS_DIR.glob("*.md") if p.name != "README.md"}
    assert runbooks == {name.lower() for name in _alert_names()}
