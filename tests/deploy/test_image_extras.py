"""Each container image installs the extras of every phasefit command the manifests run in it.

A command whose extra an image lacks would stop with "needs the 'X' extra" in production (the weekly
report's CronJob, say); the extras a command needs are phasefit/cli/extras.py's.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from phasefit.cli.extras import COMMAND_EXTRAS
from tests.packaging.test_extras import PROJECT, distributions, requirement

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILES = {
    "phasefit-service": ROOT / "deploy" / "docker" / "Dockerfile.service",
    "phasefit-collector": ROOT / "deploy" / "docker" / "Dockerfile.collector",
}


def image_extras(dockerfile: Path) -> set[str]:
    text = dockerfile.read_text(encoding="utf-8")
    (extras,) = re.findall(r"pip install[^\n]*'\.\[([^\]]*)\]'", text)
    return {e.strip() for e in extras.split(",")}


def _containers(node: object) -> list[dict[str, object]]:
    found: list[dict[str, object]] = []
    if isinstance(node, dict):
        if "image" in node and ("args" in node or "command" in node):
            found.append(node)
        for value in node.values():
            found += _containers(value)
    elif isinstance(node, list):
        for value in node:
            found += _containers(value)
    return found


def commands_by_image() -> dict[str, set[str]]:
    """image name -> the phasefit commands the manifests (and the image's own CMD) run in it."""
    runs: dict[str, set[str]] = {name: set() for name in DOCKERFILES}
    for name, dockerfile in DOCKERFILES.items():
        cmd = re.search(r'^CMD \["(\w+)"', dockerfile.read_text(encoding="utf-8"), re.MULTILINE)
        assert cmd, dockerfile.name
        runs[name].add(cmd[1])
    for path in sorted((ROOT / "deploy" / "kubernetes").rglob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            for container in _containers(document):
                image = str(container["image"]).split(":")[0]
                if image not in runs:
                    continue
                args = [str(a) for a in container.get("args", []) or []]  # type: ignore[union-attr]
                if "command" in container:  # a shell: every `phasefit WORD` in its script
                    runs[image] |= set(re.findall(r"\bphasefit (\w+)", " ".join(args)))
                elif args:
                    runs[image].add(args[0])
    return runs


def test_the_manifests_run_the_commands_expected() -> None:
    runs = commands_by_image()
    assert {"serve", "analyze", "report", "dashboard", "db"} <= runs["phasefit-service"]
    assert runs["phasefit-collector"] == {"collect"}


@pytest.mark.parametrize("image", sorted(DOCKERFILES))
def test_each_image_installs_what_its_commands_need(image: str) -> None:
    installed = {requirement(d)[0] for d in PROJECT["dependencies"]}
    for extra in image_extras(DOCKERFILES[image]):
        installed |= distributions(extra)
    problems = []
    for command in sorted(commands_by_image()[image]):
        for extra in COMMAND_EXTRAS.get(command, ()):
            lacking = sorted(distributions(extra) - installed)
            if lacking:
                problems.append(f"`phasefit {command}` needs phasefit[{extra}]; the image lacks {lacking}")
    assert not problems, f"{DOCKERFILES[image].name}:\n" + "\n".join(problems)
