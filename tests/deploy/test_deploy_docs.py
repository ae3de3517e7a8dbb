"""The deployment docs name only things that exist, and mention every unit, component and overlay."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = ["deploy.md", "operations.md", "configuration.md"]


@pytest.mark.parametrize("page", PAGES)
def test_relative_links_resolve(page: str) -> None:
    text = (DOCS / page).read_text(encoding="utf-8")
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
        if "://" in target:
            continue
        assert (DOCS / target).exists(), f"{page} links to {target}, which does not exist"


@pytest.mark.parametrize("page", ["deploy.md", "operations.md"])
def test_repository_paths_named_in_the_docs_exist(page: str) -> None:
    text = (DOCS / page).read_text(encoding="utf-8")
    for found in set(
        re.findall(
            r"((?:deploy/(?:kubernetes|docker|systemd|prometheus|grafana)|alerts|benchmarks)/[\w./{},*-]*)",
            text,
        )
    ):
        # (kubectl's "deploy/NAME" resource syntax is not a path, hence the known folders above)
        path = found.rstrip(".,")
        if "*" in path or "{" in path:
            continue
        assert (ROOT / path).exists(), f"{page} names {path}, which does not exist"


def test_deploy_guide_covers_every_unit_component_and_overlay() -> None:
    text = (DOCS / "deploy.md").read_text(encoding="utf-8")
    for unit in sorted((ROOT / "deploy" / "systemd").iterdir()):
        stem = unit.stem
        assert stem in text, f"docs/deploy.md does not mention {unit.name}"
    for folder in sorted((ROOT / "deploy" / "kubernetes" / "components").iterdir()):
        assert f"{folder.name}/" in text or f"`{folder.name}`" in text, (
            f"component {folder.name} undocumented"
        )
    for folder in sorted((ROOT / "deploy" / "kubernetes" / "overlays").iterdir()):
        assert f"overlays/{folder.name}" in text or f"{folder.name}/" in text, (
            f"overlay {folder.name} undocumented"
        )


def test_security_defaults_are_documented() -> None:
    text = " ".join((DOCS / "deploy.md").read_text(encoding="utf-8").split())
    for phrase in (
        "refuses to start without an ingest token",
        "binds to 127.0.0.1 unless",
        "never logged",
        "--ssl-keyfile",
        "--ssl-certfile",
        "never requests `nvidia.com/gpu`",
    ):
        assert phrase in text, f"docs/deploy.md does not say: {phrase}"


def test_operations_guide_covers_the_operator_topics_without_invented_figures() -> None:
    text = (DOCS / "operations.md").read_text(encoding="utf-8")
    for heading in (
        "## Sizing",
        "## PostgreSQL",
        "## Retention",
        "## Upgrading",
        "## Backups",
        "## Rotating tokens",
    ):
        assert heading in text
    assert "see the README's Benchmarks section" in text
    assert "phasefit db upgrade" in text and "phasefit db prune" in text
