"""The checks CI and ``phasefit alerts check`` run: promtool, amtool, and rendered files being current."""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from alerts import tools
from alerts.render import stale_outputs


@dataclass(frozen=True)
class CheckResult:
    name: str
    ok: bool
    detail: str


def check_rule_files(paths: Sequence[Path]) -> CheckResult:
    result = tools.check_rules(paths)
    return CheckResult(f"promtool check rules ({len(paths)} files)", result.ok, result.output)


def check_prometheus_rule(path: Path) -> CheckResult:
    """``promtool check rules`` on the groups of a PrometheusRule custom resource."""
    name = f"promtool check rules ({path.name} spec)"
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
        groups = document["spec"]["groups"]
    except (OSError, yaml.YAMLError, KeyError, TypeError) as exc:
        return CheckResult(name, False, f"cannot read spec.groups of {path}: {exc}")
    with tempfile.TemporaryDirectory(prefix="phasefit-cr-") as tmp:
        spec = Path(tmp) / "spec.yaml"
        spec.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False), encoding="utf-8")
        result = tools.check_rules([spec])
    return CheckResult(name, result.ok, result.output)


def run_rule_tests(paths: Sequence[Path]) -> CheckResult:
    result = tools.run_rule_tests(paths)
    return CheckResult(f"promtool test rules ({len(paths)} files)", result.ok, result.output)


def check_alertmanager(path: Path) -> CheckResult:
    result = tools.check_alertmanager_config(path)
    return CheckResult(f"amtool check-config {path.name}", result.ok, result.output)


def check_current(expected: Mapping[Path, str]) -> CheckResult:
    stale = stale_outputs(expected)
    detail = (
        "rendered files match alerts/rules_source.py"
        if not stale
        else "out of date (run `phasefit alerts render --checkout`): " + ", ".join(str(p) for p in stale)
    )
    return CheckResult("rendered files current", not stale, detail)
