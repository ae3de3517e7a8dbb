from __future__ import annotations

import pytest

from alerts.model import AlertingRule, RecordingRule, RuleGroup


def _alert(**overrides: object) -> AlertingRule:
    fields: dict[str, object] = {
        "alert": "PhasefitExample",
        "expr": "up == 0",
        "for_": "10m",
        "severity": "warning",
        "summary": "Something is wrong.",
        "description": "Target {{ $labels.instance }} is down.",
        "runbook_url": "https://example.org/runbooks/phasefitexample.md",
    }
    fields.update(overrides)
    return AlertingRule(**fields)  # type: ignore[arg-type]


def test_alert_renders_kube_prometheus_shape() -> None:
    assert _alert(description="Target\n   {{ $labels.instance }}\n is down.").to_dict() == {
        "alert": "PhasefitExample",
        "expr": "up == 0",
        "for": "10m",
        "labels": {"severity": "warning"},
        "annotations": {
            "summary": "Something is wrong.",
            "description": "Target {{ $labels.instance }} is down.",
            "runbook_url": "https://example.org/runbooks/phasefitexample.md",
        },
    }


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"alert": "WorkerMisplaced"}, "start with 'Phasefit'"),
        ({"for_": "30 minutes"}, "not a Prometheus duration"),
        ({"severity": "page"}, "severity"),
        ({"summary": "Worker {{ $labels.worker }} is bad."}, "static sentence"),
        ({"description": "  "}, "empty description"),
        ({"runbook_url": "docs/runbooks/x.md"}, "not an http(s) URL"),
        ({"labels": (("severity", "critical"),)}, "severity field"),
    ],
)
def test_alert_conventions_are_enforced(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        _alert(**overrides)


def test_recording_rule_name_must_be_level_metric_operations() -> None:
    assert RecordingRule("cluster:foo:sum", "sum(foo)").to_dict() == {
        "record": "cluster:foo:sum",
        "expr": "sum(foo)",
    }
    with pytest.raises(ValueError, match="level:metric:operations"):
        RecordingRule("foo_sum", "sum(foo)")


def test_multiline_expr_is_dedented_and_kept_as_block() -> None:
    rule = RecordingRule("a:b:c", "\n      sum by (x) (\n        foo\n      )\n    ")
    assert rule.to_dict()["expr"] == "sum by (x) (\n  foo\n)\n"


def test_group_may_not_mix_recording_and_alerting_rules() -> None:
    with pytest.raises(ValueError, match="mixes"):
        RuleGroup("g", (RecordingRule("a:b:c", "x"), _alert()))
    with pytest.raises(ValueError, match="empty"):
        RuleGroup("g", ())
