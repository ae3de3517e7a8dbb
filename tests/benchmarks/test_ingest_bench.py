"""benchmarks/ingest_bench.py (issue 31): the parse-copy loader stores exactly the rows the raw baseline
stores, and the rows `phasefit ingest` stores, on SQLite and, when PHASEFIT_TEST_POSTGRES_URL is set, on
PostgreSQL (skipped with the reason otherwise; under CI=true it fails instead, see tests/conftest.py)."""

from __future__ import annotations

import importlib.util
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from benchmarks.ingest_bench import (
    OURS,
    PACKAGES,
    PARSE_COPY,
    RAW,
    ROOT,
    Inputs,
    Run,
    compile_packages,
    generate,
    postgres_store,
    ratios,
    run_path,
    sqlite_store,
    timed,
)
from benchmarks.parse_copy_loader import COLUMNS, PG_TYPES
from fleet.store.engine import make_engine
from fleet.store.lean import RAW_GPU_COLUMNS
from fleet.store.writer import _copy_types

RECORDS, GPUS = 2_000, 16
Fresh = Callable[[], AbstractContextManager[str]]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("ingest-bench")
    jsonl, csv_path = folder / "gpu_samples.jsonl", folder / "gpu_samples.csv"
    generate(jsonl, csv_path, RECORDS, GPUS)
    return jsonl, csv_path


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Fresh]]:
    """The dialect, and a factory of fresh stores at the head revision: new SQLite files; on PostgreSQL one
    new database (made through this module's throwaway one, which brings the conftest's skip-or-fail rule),
    emptied after each use, which is faster than a database per load."""
    if request.param == "sqlite":
        yield "sqlite", partial(sqlite_store, tmp_path)
        return
    admin: str = request.getfixturevalue("postgres_database")
    with postgres_store(admin, RECORDS, GPUS) as url:
        yield "postgresql", partial(_emptied_after, url)


_TABLES = text(
    "SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND tablename <> 'alembic_version'"
)


@contextmanager
def _emptied_after(url: str) -> Iterator[str]:
    try:
        yield url
    finally:
        engine = make_engine(url)
        with engine.begin() as connection:
            tables = connection.execute(_TABLES).scalars()
            connection.execute(text(f"TRUNCATE {', '.join(tables)}"))
        engine.dispose()


def _rows(url: str, sql: str) -> Counter[tuple[Any, ...]]:
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            return Counter(tuple(row) for row in connection.execute(text(sql)))
    finally:
        engine.dispose()


def _load(path: str, dialect: str, fresh: Fresh, inputs: Inputs) -> tuple[Counter[Any], Counter[Any]]:
    """The lean table's rows (integer keys) and the view's rows (names) after ``path`` loads ``inputs``."""
    with fresh() as url:
        run_path(path, dialect, url, inputs)
        lean = _rows(url, f"SELECT {', '.join(RAW_GPU_COLUMNS)} FROM raw_gpu_samples")
        return lean, _rows(url, "SELECT * FROM gpu_samples")


def test_the_loader_writes_the_lean_tables_columns_with_their_postgres_types() -> None:
    assert COLUMNS == RAW_GPU_COLUMNS
    assert _copy_types("raw_gpu_samples", RAW_GPU_COLUMNS) == PG_TYPES


def test_parse_copy_stores_the_rows_of_the_raw_baseline_and_of_ours(
    store: tuple[str, Fresh], files: tuple[Path, Path]
) -> None:
    dialect, fresh = store
    jsonl, csv_path = files
    # Two parsing processes over blocks of 64 kB (about 17 blocks): the loader's pool path, in file order.
    inputs = Inputs(jsonl, csv_path, RECORDS, GPUS, jobs=2, block_bytes=64 * 1024)
    raw_lean, raw_view = _load(RAW, dialect, fresh, inputs)
    copy_lean, copy_view = _load(PARSE_COPY, dialect, fresh, inputs)
    assert sum(raw_lean.values()) == sum(copy_lean.values()) == RECORDS == len(raw_lean)
    assert copy_lean == raw_lean
    _, ours_view = _load(OURS, dialect, fresh, inputs)  # ours picks its own integer keys: compare by name
    assert copy_view == raw_view == ours_view
    if dialect == "postgresql":
        text_lean, _ = _load(PARSE_COPY, dialect, fresh, Inputs(jsonl, csv_path, RECORDS, GPUS, jobs=0,
                                                                copy_format="text"))  # fmt: skip
        assert text_lean == raw_lean


def test_ratios_pair_the_runs_in_order() -> None:
    timings = [(OURS, 2.0), (PARSE_COPY, 1.0), (OURS, 1.0), (PARSE_COPY, 1.0), (OURS, 4.0), (PARSE_COPY, 3.0)]
    runs = [Run("sqlite", path, 100, seconds) for path, seconds in timings]
    assert ratios(runs, PARSE_COPY) == "0.75 (0.50..1.00)"
    assert ratios(runs, RAW) == ""


def test_the_packages_are_byte_compiled_as_an_install_leaves_them() -> None:
    """Where PYTHONDONTWRITEBYTECODE is set, each timed `phasefit ingest` would compile its modules again."""
    cached = [Path(importlib.util.cache_from_source(str(ROOT / name / "__init__.py"))) for name in PACKAGES]
    for path in cached:
        path.unlink(missing_ok=True)
    compile_packages()
    assert [path for path in cached if not path.is_file()] == []


def test_a_runs_cpu_time_counts_the_processes_it_waited_for() -> None:
    """Ours' parsing processes are its children: their CPU counts (wait4), not only the parent's."""
    burn = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass"
    child = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {burn!r}], check=True)"
    run = timed([sys.executable, "-c", child], "sqlite", OURS, 1)
    assert run.cpu_s is not None and run.cpu_s >= 0.3
