"""The bare-metal systemd units: parsed as INI, hardening present, a dedicated user, secrets as credentials.

Where ``systemd-analyze`` exists, each unit is also checked by systemd's own parser (``verify``), which
reports unknown keys and invalid values; the only tolerated complaint is the not-yet-installed
``/opt/phasefit/bin/phasefit``.
"""

from __future__ import annotations

import configparser
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from tests.availability import require_executable
from tests.deploy.deploy_cli import argv_from_shell, parse

ROOT = Path(__file__).resolve().parents[2]
SYSTEMD = ROOT / "deploy" / "systemd"
SERVICES = sorted(SYSTEMD.glob("*.service"))
TIMERS = sorted(SYSTEMD.glob("*.timer"))
EXECUTABLE = "/opt/phasefit/bin/phasefit"

COMMON_HARDENING = {
    "NoNewPrivileges": "yes",
    "ProtectSystem": "strict",
    "ProtectHome": "yes",
    "PrivateTmp": "yes",
    "ProtectKernelTunables": "yes",
    "ProtectKernelModules": "yes",
    "ProtectControlGroups": "yes",
    "RestrictSUIDSGID": "yes",
    "LockPersonality": "yes",
    "CapabilityBoundingSet": "",
}


def load(path: Path) -> configparser.ConfigParser:
    # systemd allows repeated keys (Environment=, DeviceAllow=); keep every value, joined by newlines.
    parser = configparser.ConfigParser(
        strict=False,
        interpolation=None,
        delimiters=("=",),
        comment_prefixes=("#", ";"),
        empty_lines_in_values=False,
    )
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # keys are case-sensitive
    merged: dict[str, dict[str, list[str]]] = {}
    section = ""
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            merged.setdefault(section, {})
            continue
        key, sep, value = line.partition("=")
        assert sep, f"{path.name}: not key=value: {line!r}"
        merged[section].setdefault(key.strip(), []).append(value.strip())
    parser.read_dict({s: {k: "\n".join(v) for k, v in kv.items()} for s, kv in merged.items()})
    return parser


def values(unit: configparser.ConfigParser, key: str) -> list[str]:
    return unit.get("Service", key, fallback="").split("\n") if unit.has_option("Service", key) else []


def test_units_exist() -> None:
    names = {p.name for p in SERVICES}
    assert {"phasefit-collector.service", "phasefit-service.service"} <= names


@pytest.mark.parametrize("path", SERVICES, ids=lambda p: p.name)
def test_sections_and_start_command(path: Path) -> None:
    unit = load(path)
    assert set(unit.sections()) >= {"Unit", "Service"}
    assert unit.get("Unit", "Description")
    start = values(unit, "ExecStart")
    assert len(start) == 1 and (start[0].startswith(EXECUTABLE) or "exec " + EXECUTABLE in start[0]), start
    if not TIMERS or path.stem not in {t.stem for t in TIMERS}:
        assert unit.get("Install", "WantedBy") == "multi-user.target"


@pytest.mark.parametrize("path", SERVICES, ids=lambda p: p.name)
def test_hardening(path: Path) -> None:
    unit = load(path)
    for key, expected in COMMON_HARDENING.items():
        assert unit.has_option("Service", key), f"{path.name}: {key}= missing"
        assert unit.get("Service", key) == expected, f"{path.name}: {key}={unit.get('Service', key)!r}"
    assert values(unit, "AmbientCapabilities") in ([], [""])
    assert unit.get("Service", "SystemCallFilter").startswith("@system-service")


@pytest.mark.parametrize("path", SERVICES, ids=lambda p: p.name)
def test_dedicated_user_and_state_directory(path: Path) -> None:
    unit = load(path)
    dynamic = unit.get("Service", "DynamicUser", fallback="no") == "yes"
    user = unit.get("Service", "User", fallback="")
    assert dynamic or (user and user != "root"), f"{path.name}: runs as root"
    assert unit.get("Service", "StateDirectory", fallback=""), f"{path.name}: no StateDirectory"


@pytest.mark.parametrize("path", SERVICES, ids=lambda p: p.name)
def test_settings_from_root_only_files_and_tokens_as_credentials(path: Path) -> None:
    unit = load(path)
    env_files = values(unit, "EnvironmentFile")
    assert env_files and all(re.fullmatch(r"-?/etc/phasefit/[\w.-]+\.env", f) for f in env_files), env_files
    for env in values(unit, "Environment"):
        name, _, value = env.partition("=")
        assert not re.search(r"(TOKEN|PASSWORD|SECRET)$", name), (
            f"{path.name}: secret in Environment=: {name}"
        )
        assert "://" not in value or "@" not in value, f"{path.name}: credentials in a URL: {env}"
    for credential in values(unit, "LoadCredential"):
        _, _, source = credential.partition(":")
        assert source.startswith("/etc/phasefit/"), credential


def test_collector_reaches_the_gpus_and_the_service_does_not() -> None:
    collector = load(SYSTEMD / "phasefit-collector.service")
    assert collector.get("Service", "DevicePolicy") == "closed"
    assert "char-nvidia* rw" in values(collector, "DeviceAllow")
    # PrivateDevices would hide /dev/nvidia*; ProtectProc=invisible would hide the worker processes.
    assert collector.get("Service", "PrivateDevices", fallback="no") == "no"
    assert collector.get("Service", "ProtectProc", fallback="default") == "default"
    spool = [e for e in values(collector, "Environment") if e.startswith("PHASEFIT_COLLECTOR_SPOOL_PATH=")]
    assert spool and spool[0].endswith("%S/phasefit-collector/spool.sqlite")
    assert collector.get("Service", "StateDirectory") == "phasefit-collector"

    service = load(SYSTEMD / "phasefit-service.service")
    assert service.get("Service", "User") == "phasefit"
    assert service.get("Service", "PrivateDevices") == "yes"
    assert service.get("Service", "ProtectProc") == "invisible"
    # Behind a reverse proxy or uvicorn's TLS: the plain-HTTP default binds loopback only.
    assert "--host 127.0.0.1" in service.get("Service", "ExecStart")
    # The proxy makes the port reachable from the network: reads need a token on loopback too.
    environment = dict(e.split("=", 1) for e in values(service, "Environment"))
    assert environment["PHASEFIT_READ_ACCESS"] == "token"
    assert environment["PHASEFIT_READ_TOKENS_FILE"] == "/etc/phasefit/read-tokens"


@pytest.mark.parametrize("path", TIMERS, ids=lambda p: p.name)
def test_timers_start_an_existing_oneshot_unit(path: Path) -> None:
    timer = load(path)
    assert timer.get("Timer", "OnCalendar")
    assert timer.get("Timer", "Persistent") == "true"
    service = SYSTEMD / (path.stem + ".service")
    assert service.is_file(), f"{path.name} has no {service.name}"
    assert load(service).get("Service", "Type") == "oneshot"


@pytest.mark.parametrize("path", SERVICES + TIMERS, ids=lambda p: p.name)
def test_systemd_accepts_the_unit(path: Path) -> None:
    require_executable("systemd-analyze", "systemd", "systemd's own check of the unit")
    result = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(path)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    complaints = [
        line
        for line in (result.stdout + result.stderr).splitlines()
        if line.strip() and f"Command {EXECUTABLE} is not executable" not in line
    ]
    assert not complaints, "\n".join(complaints)


def test_every_phasefit_variable_in_the_units_is_a_documented_setting() -> None:
    from phasefit.confdoc import discover, document_class

    found = discover()
    known = {
        env for path, cls in found.classes for s in document_class(path, cls).settings for env in s.env_vars
    }
    used = {
        env.partition("=")[0]
        for path in SERVICES
        for env in values(load(path), "Environment")
        if env.startswith("PHASEFIT_")
    }
    unknown = sorted(used - known)
    assert not found.missing, f"settings classes that could not be imported: {found.missing}"
    assert not unknown, f"units set variables no settings class reads: {unknown}"


@pytest.mark.parametrize("path", SERVICES, ids=lambda p: p.name)
def test_exec_start_parses_against_the_cli(path: Path) -> None:
    (start,) = values(load(path), "ExecStart")
    line = start.replace("%%", "%").replace("%d/", "/run/credentials/unit/").replace("%S/", "/var/lib/")
    if line.startswith("/bin/sh -c "):
        argv = argv_from_shell(shlex.split(line)[2])
    else:
        words = shlex.split(line)
        assert words[0] == EXECUTABLE
        argv = words[1:]
    try:
        parse(argv)
    except Exception as exc:  # the CLI's usage errors
        pytest.fail(f"{path.name}: `phasefit {' '.join(argv)}` does not parse: {exc}")
