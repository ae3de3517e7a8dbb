"""``phasefit alerts render`` without ``--out``: the rendered files on stdout, nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from phasefit.cli.alerts import app


def test_render_without_out_prints_yaml_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["render"])
    assert result.exit_code == 0, result.output
    assert list(tmp_path.iterdir()) == []
    documents = [d for d in yaml.safe_load_all(result.stdout) if d is not None]
    kinds = [d.get("kind") for d in documents]
    assert kinds.count("PrometheusRule") == 1 and len(documents) >= 2
    assert all("groups" in d for d in documents if d.get("kind") is None)
    assert result.stdout.startswith("---\n")


def test_render_json_without_out_carries_the_documents_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["render", "--json"])
    assert result.exit_code == 0, result.output
    assert list(tmp_path.iterdir()) == []
    payload = json.loads(result.stdout)
    assert "phasefit-prometheusrule.yaml" in payload["documents"] and payload["alerts"]
    for text in payload["documents"].values():
        assert yaml.safe_load(text)


def test_render_with_out_still_writes_the_files(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["render", "--out", str(tmp_path / "rules")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "rules" / "phasefit-prometheusrule.yaml").is_file()
    assert result.stdout == ""
