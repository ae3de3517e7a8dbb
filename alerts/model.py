"""Typed Prometheus rule groups: what the rule sources build and the renderer writes.

The constructors enforce the conventions the rule set promises (kube-prometheus's runbooks and
https://prometheus.io/docs/practices/rules): recording rules named ``level:metric:operations``, alerts
named ``Phasefit...`` with ``for:``, a ``severity``, ``summary``, ``description`` and ``runbook_url``.
A rule that breaks one of them is a programming error and fails at construction, not in production.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

AlertSeverity = Literal["critical", "warning", "info"]

_RECORD_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*:[a-zA-Z_][a-zA-Z0-9_]*:[a-zA-Z0-9_]+$")
_ALERT_NAME = re.compile(r"^Phasefit[A-Z][A-Za-z0-9]*$")
_DURATION = re.compile(r"^([0-9]+(ms|s|m|h|d|w|y))+$")
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


def check_duration(value: str, what: str) -> str:
    """Return ``value`` if it is a Prometheus duration such as ``30m`` or ``1h30m``; else raise."""
    if not _DURATION.fullmatch(value):
        raise ValueError(f"{what}: {value!r} is not a Prometheus duration (e.g. 30s, 5m, 1h)")
    return value


def check_label_name(value: str, what: str) -> str:
    """Return ``value`` if it is a valid Prometheus label name; else raise."""
    if not _LABEL_NAME.fullmatch(value):
        raise ValueError(f"{what}: {value!r} is not a valid Prometheus label name")
    return value


@dataclass(frozen=True)
class RecordingRule:
    record: str
    expr: str

    def __post_init__(self) -> None:
        if not _RECORD_NAME.fullmatch(self.record):
            raise ValueError(f"recording rule {self.record!r} is not named level:metric:operations")
        if not self.expr.strip():
            raise ValueError(f"recording rule {self.record!r} has an empty expression")

    def to_dict(self) -> dict[str, Any]:
        return {"record": self.record, "expr": _block(self.expr)}


@dataclass(frozen=True)
class AlertingRule:
    """One alert. ``summary`` is a static sentence; ``description`` may use Prometheus templating."""

    alert: str
    expr: str
    for_: str
    severity: AlertSeverity
    summary: str
    description: str
    runbook_url: str
    labels: tuple[tuple[str, str], ...] = field(default=())

    def __post_init__(self) -> None:
        if not _ALERT_NAME.fullmatch(self.alert):
            raise ValueError(f"alert {self.alert!r} must be CamelCase and start with 'Phasefit'")
        check_duration(self.for_, f"alert {self.alert} for")
        if self.severity not in ("critical", "warning", "info"):
            raise ValueError(f"alert {self.alert}: severity {self.severity!r} is not critical/warning/info")
        for name, text in (("summary", self.summary), ("description", self.description)):
            if not text.strip():
                raise ValueError(f"alert {self.alert} has an empty {name}")
        if "{{" in self.summary:
            raise ValueError(f"alert {self.alert}: summary must be one static sentence, without templating")
        if not self.runbook_url.startswith(("http://", "https://")):
            raise ValueError(f"alert {self.alert}: runbook_url {self.runbook_url!r} is not an http(s) URL")
        for name, _ in self.labels:
            check_label_name(name, f"alert {self.alert} label")
            if name == "severity":
                raise ValueError(f"alert {self.alert}: set severity through the severity field")

    def to_dict(self) -> dict[str, Any]:
        return {
            "alert": self.alert,
            "expr": _block(self.expr),
            "for": self.for_,
            "labels": {"severity": self.severity, **dict(self.labels)},
            "annotations": {
                "summary": self.summary,
                "description": _squash(self.description),
                "runbook_url": self.runbook_url,
            },
        }


Rule = RecordingRule | AlertingRule


@dataclass(frozen=True)
class RuleGroup:
    """A Prometheus rule group. Recording and alerting rules live in separate groups (kube-prometheus)."""

    name: str
    rules: tuple[Rule, ...]

    def __post_init__(self) -> None:
        if not self.rules:
            raise ValueError(f"rule group {self.name!r} is empty")
        kinds = {type(rule) for rule in self.rules}
        if len(kinds) > 1:
            raise ValueError(f"rule group {self.name!r} mixes recording and alerting rules")

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "rules": [rule.to_dict() for rule in self.rules]}


@dataclass(frozen=True)
class RuleFile:
    """One rendered file, ``<name>.yaml``: the groups one kind of deployment needs."""

    name: str
    description: str
    groups: tuple[RuleGroup, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"groups": [group.to_dict() for group in self.groups]}

    @property
    def alerts(self) -> tuple[AlertingRule, ...]:
        return tuple(r for g in self.groups for r in g.rules if isinstance(r, AlertingRule))

    @property
    def recording_rules(self) -> tuple[RecordingRule, ...]:
        return tuple(r for g in self.groups for r in g.rules if isinstance(r, RecordingRule))


def _block(expr: str) -> str:
    """Normalise an expression: strip common indentation, keep line breaks of multi-line PromQL."""
    lines = [line.rstrip() for line in expr.strip("\n").splitlines()]
    indents = [len(line) - len(line.lstrip()) for line in lines if line.strip()]
    cut = min(indents, default=0)
    text = "\n".join(line[cut:] for line in lines).strip()
    return text + "\n" if "\n" in text else text


def _squash(text: str) -> str:
    """Descriptions are written over several source lines; Alertmanager and chat show them as one."""
    return " ".join(text.split())
