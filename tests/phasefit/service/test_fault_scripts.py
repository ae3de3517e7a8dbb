"""The fault scripts, short, with two service processes: a SIGKILL of one worker under load, and a PostgreSQL
outage; each must end with every sample stored exactly once (their exit status says so)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.availability import unavailable
from tests.conftest import POSTGRES_ENV

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

SCRIPTS = Path(__file__).resolve().parents[3] / "scripts"
POSTGRES_BIN = Path("/usr/lib/postgresql/15/bin")


def _run(script: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, str(SCRIPTS / script), "--workers", "2", *args],
        capture_output=True, text=True, timeout=280, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr[-4000:]
    return done.stdout


def test_killing_one_of_two_worker_processes_loses_and_doubles_nothing() -> None:
    if not os.environ.get(POSTGRES_ENV, "").strip():
        unavailable(f"{POSTGRES_ENV} is not set", "the worker-kill fault check")
    out = _run("fault_kill_ingest.py", "--collectors", "8", "--interval", "1", "--kills", "2", "--up", "3")
    assert "2 service processes" in out
    assert out.count("SIGKILL of worker") == 2 and out.count("worker replaced") == 2, out
    assert "checksums: gpu match, engine match; dropped by spools: 0" in out
    assert "RESULT: every sample stored exactly once" in out


def test_a_postgresql_outage_under_two_processes_answers_503_and_loses_nothing() -> None:
    if not (POSTGRES_BIN / "initdb").is_file():
        unavailable(f"no PostgreSQL 15 server binaries in {POSTGRES_BIN} (Debian package 'postgresql-15')",
                    "the outage fault check")  # fmt: skip
    out = _run("fault_postgres_outage.py", "--collectors", "8", "--before", "3", "--outage", "6")
    assert "2 service process(es)" in out
    assert "RESULT: 503 + Retry-After throughout, every sample stored exactly once" in out
