"""Key properties of the container images, read from the Dockerfiles (no container engine runs in CI).

Non-root numeric USER in the final stage, a pinned base, multi-stage builds, the collector image installing
only the `collector` extra (and that extra covering everything the collector imports), nothing that
compiles in the shipped stage.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

from tests.source_imports import top_level_imports

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "deploy" / "docker"
COLLECTOR = DOCKER / "Dockerfile.collector"
SERVICE = DOCKER / "Dockerfile.service"
BUILD_TOOLS = re.compile(
    r"\b(gcc|g\+\+|clang|make|build-essential|python3?-dev|libpq-dev|cmake|cargo|rustc|git)\b"
)


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)


def parse(path: Path) -> tuple[dict[str, str], list[Stage]]:
    """(global ARG defaults, stages) of a Dockerfile: continuations joined, comments dropped."""
    logical: list[str] = []
    pending = ""
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    assert not pending, f"{path}: dangling line continuation"
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in logical:
        keyword, _, rest = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            words = rest.split()
            base = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args[m.group(1) or m.group(2)], words[0])
            name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else None
            stages.append(Stage(base, name))
        elif keyword == "ARG" and not stages:
            key, _, value = rest.partition("=")
            args[key.strip()] = value.strip()
        else:
            assert stages, f"{path}: {keyword} before the first FROM"
            stages[-1].instructions.append((keyword, rest))
    return args, stages


def instructions(stage: Stage, keyword: str) -> list[str]:
    return [rest for kw, rest in stage.instructions if kw == keyword]


@pytest.mark.parametrize("path", [COLLECTOR, SERVICE], ids=lambda p: p.name)
def test_final_stage_runs_as_a_numeric_non_root_user(path: Path) -> None:
    _, stages = parse(path)
    users = instructions(stages[-1], "USER")
    assert users, f"{path.name}: the final stage sets no USER (it would run as root)"
    user, _, group = users[-1].partition(":")
    # Kubernetes can only enforce runAsNonRoot against a numeric user.
    assert user.isdigit() and int(user) != 0, f"{path.name}: USER {users[-1]!r} is not a numeric non-root UID"
    assert not group or (group.isdigit() and int(group) != 0)


@pytest.mark.parametrize("path", [COLLECTOR, SERVICE], ids=lambda p: p.name)
def test_base_image_is_pinned(path: Path) -> None:
    _, stages = parse(path)
    stage_names = {s.name for s in stages if s.name}
    for stage in stages:
        if stage.base in stage_names:
            continue
        image, _, digest = stage.base.partition("@")
        name, _, tag = image.rpartition(":")
        assert name == "python", f"{path.name}: unexpected base {stage.base}"
        # An exact patch release (3.11.14), the Debian release named, never a floating tag.
        assert re.fullmatch(r"3\.11\.\d+-slim-bookworm", tag), f"{path.name}: base tag {tag!r} is not exact"
        assert not digest or re.fullmatch(r"sha256:[0-9a-f]{64}", digest), f"{path.name}: bad digest {digest}"


@pytest.mark.parametrize("path", [COLLECTOR, SERVICE], ids=lambda p: p.name)
def test_multi_stage_and_no_build_tools_in_the_final_stage(path: Path) -> None:
    _, stages = parse(path)
    assert len(stages) >= 2, f"{path.name}: expected a build stage and a final stage"
    final = stages[-1]
    for run in instructions(final, "RUN"):
        assert "pip install" not in run, f"{path.name}: the final stage installs packages itself: {run}"
        if re.search(r"\b(apt-get|apt|apk|dnf|yum)\b.*\binstall\b", run):
            assert not BUILD_TOOLS.search(run), f"{path.name}: build tools in the final stage: {run}"
    copies = instructions(final, "COPY")
    assert any("--from=" in c for c in copies), f"{path.name}: the final stage copies nothing from the build"
    assert not [c for c in copies if "--from=" not in c], f"{path.name}: final stage copies sources directly"
    entrypoint = instructions(final, "ENTRYPOINT")
    assert entrypoint and "phasefit" in entrypoint[-1]


def _pip_installs(path: Path) -> list[str]:
    _, stages = parse(path)
    return [run for stage in stages for run in instructions(stage, "RUN") if "pip install" in run]


def test_collector_image_installs_only_the_collector_extra() -> None:
    installs = _pip_installs(COLLECTOR)
    assert len(installs) == 1, installs
    (command,) = installs
    assert "-c constraints.txt" in command, "pins must come from constraints.txt"
    extras = re.findall(r"'\.\[([^\]]*)\]'", command)
    assert extras == ["collector"], f"collector image installs extras {extras}"


def test_service_image_is_closed_by_default_on_the_address_it_binds() -> None:
    _, stages = parse(SERVICE)
    final = stages[-1]
    env: dict[str, str] = {}
    for rest in instructions(final, "ENV"):
        env.update(dict(word.split("=", 1) for word in rest.split()))
    [cmd] = instructions(final, "CMD")
    argv = json.loads(cmd)
    assert argv[0] == "serve"
    assert env["PHASEFIT_SERVICE_BIND_HOST"] == argv[argv.index("--host") + 1] == "0.0.0.0"
    assert env["PHASEFIT_READ_ACCESS"] == "token"


def test_service_image_installs_server_analyzer_report_and_dashboard() -> None:
    installs = _pip_installs(SERVICE)
    assert len(installs) == 1, installs
    assert "-c constraints.txt" in installs[0]
    extras = re.findall(r"'\.\[([^\]]*)\]'", installs[0])
    assert len(extras) == 1
    assert set(extras[0].split(",")) == {"server", "analyzer", "report", "dashboard"}


def _pyproject() -> dict[str, object]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


@pytest.mark.parametrize("path", [COLLECTOR, SERVICE], ids=lambda p: p.name)
def test_build_copies_every_package_the_wheel_needs(path: Path) -> None:
    """setuptools builds the wheel from what was COPYed: a package left out would silently be missing."""
    project = _pyproject()
    includes = project["tool"]["setuptools"]["packages"]["find"]["include"]  # type: ignore[index]
    packages = {pattern.rstrip("*") for pattern in includes}
    _, stages = parse(path)
    copied = {c.split()[0].rstrip("/") for c in instructions(stages[0], "COPY") if "--from=" not in c}
    missing = sorted(p for p in packages if (ROOT / p).is_dir() and p not in copied)
    assert not missing, f"{path.name}: build stage does not COPY {missing}"
    for needed in ("pyproject.toml", "constraints.txt", "README.md"):
        assert any(needed in c for c in instructions(stages[0], "COPY")), f"{path.name}: no COPY of {needed}"


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_name(spec: str) -> str:
    return _normalise(re.split(r"[\s\[<>=!~;]", spec, maxsplit=1)[0])


def test_collector_extra_provides_every_module_the_collector_imports() -> None:
    """The collector image has only the base dependencies and the `collector` extra: anything else the
    collector imports (even lazily, e.g. the pod-resources gRPC client) would fail on the GPU node."""
    project = _pyproject()["project"]
    allowed = {_requirement_name(d) for d in project["dependencies"]}  # type: ignore[index]
    allowed |= {_requirement_name(d) for d in project["optional-dependencies"]["collector"]}  # type: ignore[index]
    first_party = {
        "fleet", "fleetsim", "collector", "phasefit", "analyzer", "alerts", "dashboard", "migrations"
    }  # fmt: skip
    owners = packages_distributions()
    # `phasefit collect --source sim` runs the simulated fleet in the collector image too.
    sources = sorted((ROOT / "collector").rglob("*.py")) + sorted((ROOT / "fleetsim").rglob("*.py"))
    collect_cli = ROOT / "phasefit" / "cli" / "collect.py"
    if collect_cli.is_file():
        sources.append(collect_cli)
    problems: list[str] = []
    for source in sources:
        if "tests" in source.relative_to(ROOT).parts:
            continue
        for module in sorted(top_level_imports(source, runtime_only=True) - first_party):
            if module in sys.stdlib_module_names or module == "__future__":
                continue
            dists = {_normalise(d) for d in owners.get(module, [])}
            if not dists & allowed:
                where = ", ".join(sorted(dists)) or "no installed distribution"
                problems.append(f"{source.relative_to(ROOT)} imports {module!r} ({where})")
    assert not problems, (
        "modules the collector image would lack (add their distribution to the `collector` extra in "
        "pyproject.toml and pin it in constraints.txt):\n" + "\n".join(problems)
    )


def test_collector_never_imports_the_analyzer_or_server_stack() -> None:
    banned = {"analyzer", "sqlalchemy", "fastapi", "streamlit", "sklearn", "scipy", "alembic"}
    for source in sorted((ROOT / "collector").rglob("*.py")):
        hits = top_level_imports(source, runtime_only=True) & banned
        assert not hits, f"{source.relative_to(ROOT)} imports {sorted(hits)}"


def test_constraints_pin_every_dependency_the_images_install() -> None:
    pins = {}
    for raw in (ROOT / "constraints.txt").read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        if "==" in line:
            name, _, version = line.partition("==")
            pins[_normalise(name)] = version
    project = _pyproject()["project"]
    wanted = list(project["dependencies"])  # type: ignore[index]
    for extra in ("collector", "server", "analyzer", "dashboard"):
        wanted += project["optional-dependencies"][extra]  # type: ignore[index]
    unpinned = sorted({_requirement_name(d) for d in wanted} - set(pins))
    assert not unpinned, f"constraints.txt does not pin {unpinned}: image builds would not be reproducible"


_COLLECTOR_IMAGE_PROBE = """
import importlib.abc, sys
BLOCKED = set(sys.argv[1].split(","))
class NotInTheCollectorImage(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r} (not in the collector image)", name=name)
        return None
sys.meta_path.insert(0, NotInTheCollectorImage())
sys.argv = ["phasefit", *sys.argv[2:]]
from phasefit.cli import main
main()
"""


def _modules_of(distributions: set[str]) -> set[str]:
    return {
        module
        for module, dists in packages_distributions().items()
        if {_normalise(d) for d in dists} & distributions and not module.startswith("_")
    }


@pytest.mark.parametrize("argv", [["--help"], ["collect", "--help"]], ids=" ".join)
def test_cli_starts_with_only_what_the_collector_image_installs(argv: list[str]) -> None:
    """The collector image runs `phasefit collect`: the CLI must start without the server, analyzer and
    dashboard stacks (their imports belong inside the commands that need them)."""
    project = _pyproject()["project"]
    extras = project["optional-dependencies"]  # type: ignore[index]
    allowed = {_requirement_name(d) for d in project["dependencies"]}  # type: ignore[index]
    allowed |= {_requirement_name(d) for d in extras["collector"]}
    others = {
        _requirement_name(d) for name in ("server", "analyzer", "dashboard", "test") for d in extras[name]
    }
    blocked = _modules_of(others - allowed)
    assert {"sqlalchemy", "fastapi", "streamlit", "sklearn"} <= blocked
    result = subprocess.run(
        [sys.executable, "-c", _COLLECTOR_IMAGE_PROBE, ",".join(sorted(blocked)), *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,
    )
    assert result.returncode == 0, (
        f"`phasefit {' '.join(argv)}` fails without the server stack:\n{result.stderr}"
    )
