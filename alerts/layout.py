"""Where the alerting artefacts live in the package and, in a source checkout, in the repository."""

from __future__ import annotations

from pathlib import Path

from alerts.render import PROMETHEUS_RULE_FILE

PACKAGE_DIR = Path(__file__).resolve().parent
RULES_DIR = PACKAGE_DIR / "rules"
RULE_TESTS_DIR = PACKAGE_DIR / "tests"
ALERTMANAGER_EXAMPLE = PACKAGE_DIR / "alertmanager.example.yml"
REPOSITORY_DIR = PACKAGE_DIR.parent
RUNBOOKS_DIR = REPOSITORY_DIR / "docs" / "runbooks"


def checkout_prometheus_rule_path() -> Path | None:
    """``deploy/prometheus/phasefit-prometheusrule.yaml`` in a source checkout; ``None`` when installed."""
    deploy = REPOSITORY_DIR / "deploy"
    return deploy / "prometheus" / PROMETHEUS_RULE_FILE if deploy.is_dir() else None


def rule_test_files() -> list[Path]:
    return sorted(RULE_TESTS_DIR.glob("*.yaml"))
