"""promtool and amtool on the shipped artefacts, run by pytest so `make test` and CI run them.

Besides running the unit tests, this checks that they cover every alert firing and not firing around its
``for:`` edge, and every recording rule; and that they really bite (a shortened ``for:`` fails them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from alerts import check, tools
from alerts.layout import ALERTMANAGER_EXAMPLE, RULES_DIR, checkout_prometheus_rule_path, rule_test_files
from alerts.rules_source import default_config, rule_files
from fleet.catalog import load_catalog
from tests.alerts.helpers import require_tool

RULE_FILES = sorted(RULES_DIR.glob("*.yaml"))
TEST_FILES = rule_test_files()


def _tests(path: Path) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    return document


def _all_alerts() -> dict[str, str]:
    """alert name -> rule file name."""
    return {a.alert: f.name for f in rule_files(default_config(load_catalog().gpus)) for a in f.alerts}


def test_shipped_files_exist() -> None:
    assert [p.name for p in RULE_FILES] == [
        "phasefit-analyzer.yaml",
        "phasefit-collector.yaml",
        "phasefit-dcgm.yaml",
    ]
    assert [p.name for p in TEST_FILES] == [
        "phasefit-analyzer_test.yaml",
        "phasefit-collector_test.yaml",
        "phasefit-dcgm_test.yaml",
    ]


@pytest.mark.parametrize("path", RULE_FILES, ids=lambda p: p.name)
def test_promtool_check_rules(path: Path) -> None:
    require_tool("promtool")
    result = tools.check_rules([path])
    assert result.ok, result.output


def test_promtool_check_rules_on_the_prometheusrule_spec() -> None:
    require_tool("promtool")
    cr = checkout_prometheus_rule_path()
    assert cr is not None and cr.is_file()
    result = check.check_prometheus_rule(cr)
    assert result.ok, result.detail
    assert "35 rules found" in result.detail


@pytest.mark.parametrize("path", TEST_FILES, ids=lambda p: p.name)
def test_promtool_unit_tests_pass(path: Path) -> None:
    require_tool("promtool")
    result = tools.run_rule_tests([path])
    assert result.ok, result.output
    assert "SUCCESS" in result.output


def test_unit_tests_cover_every_alert_firing_and_not_firing_at_its_for_edge() -> None:
    alerts = _all_alerts()
    covered: dict[str, list[tuple[int, int]]] = {name: [] for name in alerts}
    for path in TEST_FILES:
        for group in _tests(path)["tests"]:
            evals: dict[str, dict[str, list[int]]] = {}
            for case in group.get("alert_rule_test", []):
                kind = "firing" if case["exp_alerts"] else "quiet"
                evals.setdefault(case["alertname"], {"firing": [], "quiet": []})[kind].append(
                    _minutes(case["eval_time"])
                )
            for name, times in evals.items():
                assert name in alerts, f"{path.name} tests unknown alert {name}"
                covered[name] += [
                    (quiet, firing)
                    for quiet in times["quiet"]
                    for firing in times["firing"]
                    if 0 < firing - quiet <= 5
                ]
    missing = sorted(name for name, pairs in covered.items() if not pairs)
    assert not missing, f"alerts without a quiet-then-firing pair in one test group: {missing}"


def test_unit_tests_cover_every_recording_rule() -> None:
    records = {r.record for f in rule_files(default_config(load_catalog().gpus)) for r in f.recording_rules}
    tested = {
        case["expr"].split("{")[0].strip()
        for path in TEST_FILES
        for group in _tests(path)["tests"]
        for case in group.get("promql_expr_test", [])
    }
    assert records <= tested, f"recording rules without a promql_expr_test: {sorted(records - tested)}"


def test_unit_tests_pin_every_for_duration(tmp_path: Path) -> None:
    """Shortening any one alert's ``for:`` to 1m must make its unit tests fail (the quiet eval fires)."""
    require_tool("promtool")
    for alert, rule_file in _all_alerts().items():
        workdir = tmp_path / alert
        (workdir / "rules").mkdir(parents=True)
        (workdir / "tests").mkdir()
        document = _tests(RULES_DIR / f"{rule_file}.yaml")
        for group in document["groups"]:
            for rule in group["rules"]:
                if rule.get("alert") == alert:
                    rule["for"] = "1m"
        (workdir / "rules" / f"{rule_file}.yaml").write_text(yaml.safe_dump(document), encoding="utf-8")
        # Only the test groups that exercise this alert, without their expression tests: faster.
        tests = _tests(RULES_DIR.parent / "tests" / f"{rule_file}_test.yaml")
        tests["tests"] = [
            {key: value for key, value in group.items() if key != "promql_expr_test"}
            for group in tests["tests"]
            if any(case["alertname"] == alert for case in group.get("alert_rule_test", []))
        ]
        test_file = workdir / "tests" / f"{rule_file}_test.yaml"
        test_file.write_text(yaml.safe_dump(tests), encoding="utf-8")
        result = tools.run_rule_tests([test_file])
        assert not result.ok, f"the unit tests still pass with {alert} for: 1m"
        assert alert in result.output


def test_amtool_accepts_the_alertmanager_example() -> None:
    require_tool("amtool")
    result = tools.check_alertmanager_config(ALERTMANAGER_EXAMPLE)
    assert result.ok, result.output
    config = yaml.safe_load(ALERTMANAGER_EXAMPLE.read_text(encoding="utf-8"))
    phasefit = next(r for r in config["receivers"] if r["name"] == "phasefit-service")
    webhook = phasefit["webhook_configs"][0]
    assert webhook["url"].endswith("/v1/alerts/alertmanager")
    assert webhook["http_config"]["authorization"]["type"] == "Bearer"
    assert webhook["send_resolved"] is True
    assert any(r.get("slack_configs") for r in config["receivers"])


def test_amtool_rejects_a_broken_configuration(tmp_path: Path) -> None:
    require_tool("amtool")
    broken = tmp_path / "alertmanager.yml"
    broken.write_text(
        ALERTMANAGER_EXAMPLE.read_text().replace("receiver: phasefit-service", "receiver: nowhere")
    )
    result = tools.check_alertmanager_config(broken)
    assert not result.ok
    assert "nowhere" in result.output


def _minutes(duration: str) -> int:
    total, number = 0, ""
    for char in duration:
        if char.isdigit():
            number += char
            continue
        total += int(number) * {"m": 1, "h": 60}[char]
        number = ""
    return total
