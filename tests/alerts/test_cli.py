"""``phasefit alerts render|check`` through Typer's CliRunner on the sub-app."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from typer.testing import CliRunner

from phasefit.cli.alerts import app
from tests.alerts.helpers import require_tool

runner = CliRunner()


def test_render_to_a_folder_with_custom_selectors_labels_and_runbooks(tmp_path: Path) -> None:
    result = runner.invoke(
        app,
        [
            "render",
            "--out",
            str(tmp_path),
            "--runbook-base-url",
            "https://wiki.example.org/gpu/runbooks",
            "--job-selector",
            'dcgm=job="gpu-metrics"',
            "--job-selector",
            'collector=job="agents", namespace="gpu"',
            "--role-label",
            "llm_d_ai_role",
            "--cr-label",
            "release=kube-prometheus-stack",
            "--cr-namespace",
            "monitoring",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert len(summary["alerts"]) == 16
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "phasefit-analyzer.yaml",
        "phasefit-collector.yaml",
        "phasefit-dcgm.yaml",
        "phasefit-prometheusrule.yaml",
    ]
    dcgm = (tmp_path / "phasefit-dcgm.yaml").read_text()
    assert 'DCGM_FI_PROF_DRAM_ACTIVE{job="gpu-metrics", GPU_I_PROFILE="", pod!=""}' in dcgm
    assert "llm_d_ai_role" in dcgm
    assert "https://wiki.example.org/gpu/runbooks/phasefitdcgmdecodeonlowerbandwidthgpu.md" in dcgm
    assert 'up{job="agents", namespace="gpu"} == 0' in (tmp_path / "phasefit-collector.yaml").read_text()
    cr = yaml.safe_load((tmp_path / "phasefit-prometheusrule.yaml").read_text())
    assert cr["metadata"]["namespace"] == "monitoring"
    assert cr["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert cr["metadata"]["labels"]["prometheus"] == "k8s"

    again = runner.invoke(
        app,
        [
            "render",
            "--out",
            str(tmp_path),
            "--check",
            "--json",
            "--runbook-base-url",
            "https://wiki.example.org/gpu/runbooks",
        ],
    )
    assert again.exit_code == 1  # other selectors, role label and CR labels than the files on disk
    assert json.loads(again.stdout)["current"] is False


def test_runbook_base_url_from_the_environment(tmp_path: Path) -> None:
    result = runner.invoke(
        app,
        ["render", "--out", str(tmp_path)],
        env={"PHASEFIT_ALERTS_RUNBOOK_BASE_URL": "https://rb.example.org"},
    )
    assert result.exit_code == 0, result.output
    assert "https://rb.example.org/phasefitgpulost.md" in (tmp_path / "phasefit-collector.yaml").read_text()


def test_bad_input_fails_with_a_message_and_writes_nothing(tmp_path: Path) -> None:
    for args, message in (
        (["--job-selector", 'dcgm={job="x"}'], "label matchers"),
        (["--job-selector", 'nodes=job="x"'], "unknown selector key"),
        (["--job-selector", "dcgm"], "KEY=VALUE"),
        (["--role-label", "llm-d.ai/role"], "not a valid Prometheus label name"),
        (["--runbook-base-url", "docs/runbooks"], "http"),
    ):
        result = runner.invoke(app, ["render", "--out", str(tmp_path), *args])
        assert result.exit_code == 1, args
        assert message in result.output, (args, result.output)
    assert list(tmp_path.iterdir()) == []


def test_committed_files_are_current_per_render_check() -> None:
    result = runner.invoke(app, ["render", "--check", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"current": True, "stale": []}


def test_check_runs_promtool_amtool_and_the_currency_check() -> None:
    for tool in ("promtool", "amtool"):
        require_tool(tool)
    result = runner.invoke(app, ["check", "--json"])
    assert result.exit_code == 0, result.output
    checks = {c["check"]: c["ok"] for c in json.loads(result.stdout)}
    assert checks == {
        "promtool check rules (3 files)": True,
        "promtool check rules (phasefit-prometheusrule.yaml spec)": True,
        "promtool test rules (3 files)": True,
        "rendered files current": True,
        "amtool check-config alertmanager.example.yml": True,
    }


def test_check_fails_on_a_broken_rule_file(tmp_path: Path) -> None:
    require_tool("promtool")
    require_tool("amtool")
    (tmp_path / "phasefit-custom.yaml").write_text(
        "groups:\n- name: g\n  rules:\n  - alert: PhasefitBroken\n    expr: sum by (\n"
    )
    result = runner.invoke(app, ["check", "--dir", str(tmp_path)])
    assert result.exit_code == 1
    assert "FAILED promtool check rules" in result.output
