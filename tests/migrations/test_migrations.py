"""Alembic: `upgrade head` builds exactly the models' schema, `downgrade base` removes it.

The sample views (models with ``info={"view": True}``) and the raw tables' partitions are no tables Alembic
compares: the views are checked by name and columns, the partitions by :mod:`fleet.store.partitions`.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Column, Engine, Integer, MetaData, inspect, text

from fleet.store import migrate
from fleet.store.columns import to_epoch_us
from fleet.store.engine import make_engine
from fleet.store.partitions import PARTITION_NAME, compared_by_autogenerate, list_partitions
from fleet.store.queries import gpu_samples
from fleet.store.rows import ENGINE_SAMPLE_COLUMNS, GPU_SAMPLE_COLUMNS
from fleet.store.schema import Base, is_view


def _diffs(engine: Engine, metadata: MetaData) -> list[Any]:
    with engine.connect() as connection:
        context = MigrationContext.configure(
            connection,
            opts={
                "compare_type": True,
                "compare_server_default": True,
                "include_object": compared_by_autogenerate,
            },
        )
        return list(compare_metadata(context, metadata))


def tables(engine: Engine) -> set[str]:
    """Tables, without partitions."""
    return {name for name in inspect(engine).get_table_names() if PARTITION_NAME.fullmatch(name) is None}


@pytest.fixture
def engine(store_url: str) -> Any:
    engine = make_engine(store_url)
    yield engine
    engine.dispose()


def test_upgrade_head_on_an_empty_database_builds_exactly_the_models(engine: Engine) -> None:
    assert migrate.schema_status(engine).state is migrate.SchemaState.EMPTY
    migrate.upgrade(engine)
    assert migrate.current_revision(engine) == migrate.head_revision()
    assert _diffs(engine, Base.metadata) == []
    views = {name for name, table in Base.metadata.tables.items() if is_view(table)}
    assert tables(engine) == set(Base.metadata.tables) - views | {"alembic_version"}
    assert set(inspect(engine).get_view_names()) == views == {"gpu_samples", "engine_samples"}
    for name in views:
        columns = [column["name"] for column in inspect(engine).get_columns(name)]
        assert columns == list(Base.metadata.tables[name].c.keys())


def test_the_comparison_would_see_a_difference(engine: Engine) -> None:
    """Guards the test above: a model the migrations do not build must show up as a difference."""
    migrate.upgrade(engine)
    changed = MetaData(naming_convention=Base.metadata.naming_convention)
    for table in Base.metadata.tables.values():
        table.to_metadata(changed)
    changed.tables["reports"].append_column(Column("pages", Integer, nullable=True))
    kinds = [diff[0] for diff in _diffs(engine, changed)]
    assert kinds == ["add_column"]


def test_downgrade_to_base_leaves_only_the_version_table(engine: Engine) -> None:
    migrate.upgrade(engine)
    migrate.downgrade(engine, "base")
    assert set(inspect(engine).get_table_names()) == {"alembic_version"}
    assert inspect(engine).get_view_names() == []
    assert migrate.current_revision(engine) is None
    assert migrate.schema_status(engine).state is migrate.SchemaState.EMPTY
    migrate.upgrade(engine)  # and back up again
    assert migrate.schema_status(engine).state is migrate.SchemaState.CURRENT


def test_ensure_schema_creates_an_empty_store_and_refuses_other_revisions(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(migrate.SchemaNotCurrentError, match="empty"):
        migrate.ensure_schema(engine, create_if_empty=False)
    assert migrate.ensure_schema(engine).state is migrate.SchemaState.CURRENT
    with engine.begin() as connection:
        connection.execute(text("UPDATE alembic_version SET version_num = 'f00dcafe'"))
    with pytest.raises(migrate.SchemaNotCurrentError, match="newer than this phasefit"):
        migrate.ensure_schema(engine)
    with engine.begin() as connection:
        connection.execute(text(f"UPDATE alembic_version SET version_num = '{migrate.head_revision()}'"))
    # a phasefit whose head is a later revision sees this store as behind
    monkeypatch.setattr(migrate, "head_revision", lambda: "0099")
    with pytest.raises(migrate.SchemaNotCurrentError, match="run `phasefit db upgrade`"):
        migrate.ensure_schema(engine)
    monkeypatch.undo()
    with engine.begin() as connection:
        connection.execute(text("DROP TABLE alembic_version"))
    assert migrate.schema_status(engine).state is migrate.SchemaState.UNMANAGED
    with pytest.raises(migrate.SchemaNotCurrentError, match="not created by"):
        migrate.ensure_schema(engine)


# --- 0005: the lean raw tables, their data moved in place ----------------------------------------------

GPU_COLUMNS = GPU_SAMPLE_COLUMNS  # the views' columns: what the tables held at revision 0004
P90S = ("ttft_p90_s", "tpot_p90_s", "e2e_p90_s")  # revision 0009's
HISTOGRAMS = ("ttft_histogram", "tpot_histogram", "e2e_histogram")  # revision 0010's
ENGINE_COLUMNS = tuple(c for c in ENGINE_SAMPLE_COLUMNS if c not in (*P90S, *HISTOGRAMS))
DAY0 = datetime(2026, 3, 2, 23, 59, tzinfo=UTC)
LAST_HOUR = datetime(9999, 12, 31, 23, tzinfo=UTC)


def _legacy_rows(engine: Engine) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """Every sample as revision 0004 stored it (0.1 and 512.5 exactly; ratios with at most 6 digits)."""
    gpu: list[tuple[Any, ...]] = [
        ("GPU-a", DAY0, 60.0, "worker-a", 0.1, 0.25, 0.333333, None, 2**63 - 1, 512.5, 1980.0, 7, 8, 9, 10,
         "ok", "dcgm", None, None, "profiling"),
        ("GPU-a", DAY0 + timedelta(minutes=2), 60.0, None, None, None, None, 0.875, 0, 99.0, None, None, None,
         None, None, "lost", "nvml-basic", 0.5, 0.125, "utilisation"),
        ("GPU-b", DAY0 + timedelta(days=1), 10.0, "worker-b", 1.0, 0.0, 0.5, 0.5, 1, 0.0, 1410.0, 0, 0, 0,
         0, "degraded", "sim", None, None, None),
        # stored before the service bounded timestamps to 2000-2099
        ("GPU-b", LAST_HOUR, 10.0, None, None, None, None, None, None, None, None, None, None, None, None,
         "ok", "prometheus", None, None, None),
    ]  # fmt: skip
    engine_rows: list[tuple[Any, ...]] = [
        ("worker-a", DAY0, 60.0, "prefill", "pod-label", 2**62, 3, 4, 5, 0.7, None, 0.25, 1.5, None, None),
        ("worker-c", DAY0 + timedelta(days=1), 10.0, "unknown", "none", 0, 0, None, None, None, 0, None,
         None, 0.0125, 0.05),
    ]  # fmt: skip
    if engine.dialect.name == "sqlite":  # 0004 stored instants as epoch microseconds there
        gpu = [(row[0], to_epoch_us(row[1]), *row[2:]) for row in gpu]
        engine_rows = [(row[0], to_epoch_us(row[1]), *row[2:]) for row in engine_rows]
    return gpu, engine_rows


def _insert(engine: Engine, table: str, columns: tuple[str, ...], rows: list[tuple[Any, ...]]) -> None:
    with engine.begin() as connection:
        statement = text(f"INSERT INTO {table} ({', '.join(columns)}) VALUES (:{', :'.join(columns)})")
        connection.execute(statement, [dict(zip(columns, row, strict=True)) for row in rows])


def _stored(engine: Engine, table: str, columns: tuple[str, ...]) -> list[tuple[Any, ...]]:
    with engine.connect() as connection:
        statement = text(f"SELECT {', '.join(columns)} FROM {table} ORDER BY {columns[0]}, ts")
        return [tuple(row) for row in connection.execute(statement)]


def test_0005_moves_stored_samples_into_the_lean_tables_and_back_unchanged(engine: Engine) -> None:
    migrate.upgrade(engine, "0004")
    shape = _shape(engine)
    gpu, engine_rows = _legacy_rows(engine)
    _insert(engine, "gpu_samples", GPU_COLUMNS, gpu)
    _insert(engine, "engine_samples", ENGINE_COLUMNS, engine_rows)
    before = (_stored(engine, "gpu_samples", GPU_COLUMNS), _stored(engine, "engine_samples", ENGINE_COLUMNS))
    assert len(before[0]) == 4 and len(before[1]) == 2

    migrate.upgrade(engine, "0005")
    assert (
        _stored(engine, "gpu_samples", GPU_COLUMNS),
        _stored(engine, "engine_samples", ENGINE_COLUMNS),
    ) == before
    with engine.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM raw_gpu_samples")).scalar_one() == 4
        keys = connection.execute(text("SELECT gpu_uuid FROM gpu_keys ORDER BY id")).scalars().all()
        workers = connection.execute(text("SELECT worker_id FROM worker_keys ORDER BY id")).scalars().all()
        assert (keys, workers) == (["GPU-a", "GPU-b"], ["worker-a", "worker-b", "worker-c"])
        if engine.dialect.name == "postgresql":  # a partition per day that held samples, and DEFAULT
            names = [p.name for p in list_partitions(connection, "raw_gpu_samples")]
            assert names == [
                "raw_gpu_samples_p20260302",
                "raw_gpu_samples_p20260303",
                "raw_gpu_samples_default",
            ]
            default = connection.execute(text("SELECT count(*) FROM raw_gpu_samples_default")).scalar_one()
            assert default == 1  # the year-9999 sample: no day partition out there
        read = gpu_samples(connection, DAY0, DAY0 + timedelta(days=2), worker_ids=["worker-b"])
    assert (
        read["gpu_uuid"] == ["GPU-b"] and read["state"] == ["degraded"] and read["sm_clock_mhz"] == [1410.0]
    )

    migrate.downgrade(engine, "0004")
    assert (
        _stored(engine, "gpu_samples", GPU_COLUMNS),
        _stored(engine, "engine_samples", ENGINE_COLUMNS),
    ) == before
    assert inspect(engine).get_view_names() == [] and "raw_gpu_samples" not in tables(engine)
    assert _shape(engine) == shape  # the tables 0004 built, with their indexes
    migrate.upgrade(engine, "0005")  # and up again
    assert _stored(engine, "gpu_samples", GPU_COLUMNS) == before[0]


def _shape(engine: Engine) -> dict[str, Any]:
    """The sample tables' columns (name, type, nullable, in order), primary keys and indexes."""
    found: dict[str, Any] = {}
    with engine.connect() as connection:
        inspector = inspect(connection)
        for name in ("gpu_samples", "engine_samples"):
            columns = [(c["name"], str(c["type"]), c["nullable"]) for c in inspector.get_columns(name)]
            indexes = sorted((i["name"], tuple(i["column_names"])) for i in inspector.get_indexes(name))
            found[name] = (columns, inspector.get_pk_constraint(name), indexes)
    return found


# --- 0006: byte counts as 4-byte floats, a unique index per open partition (PostgreSQL) ------------------

COUNTS = ("mem_used_bytes", "nvlink_tx_bytes", "nvlink_rx_bytes", "pcie_tx_bytes", "pcie_rx_bytes")


def _indexes(engine: Engine) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """The raw tables' primary key names, and each partition's index names."""
    raw = ("raw_gpu_samples", "raw_engine_samples")
    with engine.connect() as connection:
        inspector = inspect(connection)
        keys = {table: inspector.get_pk_constraint(table)["name"] for table in raw}
        names = {
            p.name: sorted(index["name"] for index in inspector.get_indexes(p.name))
            for table in raw
            for p in list_partitions(connection, table)
        }
    return keys, names


def test_0006_keeps_byte_counts_as_4_byte_floats_and_indexes_each_partition(engine: Engine) -> None:
    migrate.upgrade(engine, "0004")
    gpu, engine_rows = _legacy_rows(engine)
    _insert(engine, "gpu_samples", GPU_COLUMNS, gpu)
    _insert(engine, "engine_samples", ENGINE_COLUMNS, engine_rows)
    migrate.upgrade(engine, "0005")
    before = (_stored(engine, "gpu_samples", GPU_COLUMNS), _stored(engine, "engine_samples", ENGINE_COLUMNS))

    migrate.upgrade(engine, "0006")
    after = (_stored(engine, "gpu_samples", GPU_COLUMNS), _stored(engine, "engine_samples", ENGINE_COLUMNS))
    if engine.dialect.name == "sqlite":
        assert after == before  # SQLite's tables are unchanged: exact integers
        return
    assert after[1] == before[1]  # engine samples: tokens and requests stay exact
    counts = [GPU_COLUMNS.index(c) for c in COUNTS]
    # 2**63 - 1 is stored as the largest 4-byte float a 64-bit integer holds; small counts are exact
    assert [after[0][0][i] for i in counts] == [2**63 - 2**39, 7, 8, 9, 10]
    assert [after[0][1][i] for i in counts] == [0, None, None, None, None]
    others = [i for i in range(len(GPU_COLUMNS)) if i not in counts]
    assert [[row[i] for i in others] for row in after[0]] == [[row[i] for i in others] for row in before[0]]
    keys, indexes = _indexes(engine)
    assert keys == {"raw_gpu_samples": None, "raw_engine_samples": None}
    assert indexes and all(names == [f"{name}_key"] for name, names in indexes.items())

    migrate.downgrade(engine, "0005")
    assert (
        _stored(engine, "gpu_samples", GPU_COLUMNS),
        _stored(engine, "engine_samples", ENGINE_COLUMNS),
    ) == after  # the counts as the floats held them, now integers again
    keys, _ = _indexes(engine)
    assert keys == {"raw_gpu_samples": "pk_raw_gpu_samples", "raw_engine_samples": "pk_raw_engine_samples"}
    migrate.upgrade(engine)
    assert _stored(engine, "gpu_samples", GPU_COLUMNS) == after[0]


def test_0005_refuses_a_stored_value_it_has_no_code_for_and_changes_nothing(engine: Engine) -> None:
    migrate.upgrade(engine, "0004")
    gpu, _ = _legacy_rows(engine)
    _insert(engine, "gpu_samples", GPU_COLUMNS, [(*gpu[0][:15], "melted", *gpu[0][16:])])
    with pytest.raises(RuntimeError, match=r"gpu_samples.state holds \['melted'\], which revision 0005"):
        migrate.upgrade(engine)
    assert migrate.current_revision(engine) == "0004"
    assert len(_stored(engine, "gpu_samples", GPU_COLUMNS)) == 1


# --- 0007: the concurrency cap each engine reports, on its worker row --------------------------------------


def _worker_rows(engine: Engine, columns: str) -> list[tuple[Any, ...]]:
    with engine.connect() as connection:
        return [tuple(row) for row in connection.execute(text(f"SELECT {columns} FROM workers ORDER BY 1"))]


def test_0007_adds_the_workers_concurrency_cap_and_its_downgrade_drops_only_that(engine: Engine) -> None:
    migrate.upgrade(engine, "0006")
    seen = DAY0 if engine.dialect.name == "postgresql" else to_epoch_us(DAY0)
    with engine.begin() as connection:
        connection.execute(
            text("INSERT INTO nodes (name, first_seen, last_seen) VALUES ('node-a', :seen, :seen)"),
            {"seen": seen},
        )
        connection.execute(
            text(
                "INSERT INTO workers (worker_id, node, engine, model, role, role_source, gpu_uuids, "
                "kv_capacity_tokens, first_seen, last_seen) VALUES ('worker-a', 'node-a', 'sglang', 'llama', "
                "'decode', 'engine', '[]', 92962, :seen, :seen)"
            ),
            {"seen": seen},
        )
    kept = "worker_id, engine, kv_capacity_tokens"
    before = _worker_rows(engine, kept)
    assert "max_running_requests" not in {c["name"] for c in inspect(engine).get_columns("workers")}

    migrate.upgrade(engine, "0007")
    assert _worker_rows(engine, f"{kept}, max_running_requests") == [(*before[0], None)]  # unknown, not 0
    with engine.begin() as connection:
        connection.execute(text("UPDATE workers SET max_running_requests = 4097"))
    assert _worker_rows(engine, f"{kept}, max_running_requests") == [(*before[0], 4097)]

    migrate.downgrade(engine, "0006")
    assert "max_running_requests" not in {c["name"] for c in inspect(engine).get_columns("workers")}
    assert _worker_rows(engine, kept) == before
    migrate.upgrade(engine)  # and up again: the cap is unknown until an engine reports it
    assert _worker_rows(engine, f"{kept}, max_running_requests") == [(*before[0], None)]


# --- 0008: a finding's total loss null where the finding estimates none ------------------------------------

TOTAL = ("lost_tokens_per_s", "lost_tokens_per_s_low", "lost_tokens_per_s_high")
_FINDING_COLUMNS = (
    "kind", "subject", "status", "severity", "role", "bottleneck", "evidence", *TOTAL,
    "lost_output_tokens_per_s", "lost_requests_per_s", "first_seen", "last_seen", "updated_at",
)  # fmt: skip


def _finding_rows(engine: Engine) -> list[tuple[Any, ...]]:
    """As revision 0007 stored them: a telemetry-degraded finding's 0 total beside null output and requests;
    a misplacement's loss; a loss estimated as 0 beside an output figure (kept 0)."""
    at = DAY0 if engine.dialect.name == "postgresql" else to_epoch_us(DAY0)
    return [
        ("telemetry-degraded", "worker:w-a", "open", "warning", "decode", "unknown", "{}", 0.0, 0.0, 0.0,
         None, None, at, at, at),
        ("decode-on-low-bandwidth", "worker:w-b", "open", "warning", "decode", "memory", "{}", 1200.5, 800.0,
         1500.0, 300.0, 0.25, at, at, at),
        ("pool-ratio-drift", "pool:c/m", "open", "info", "unknown", "unknown", "{}", 0.0, 0.0, 10.0, 0.0,
         0.0, at, at, at),
    ]  # fmt: skip


def _totals(engine: Engine) -> list[tuple[Any, ...]]:
    with engine.connect() as connection:
        statement = text(f"SELECT subject, {', '.join(TOTAL)} FROM findings ORDER BY subject")
        return [tuple(row) for row in connection.execute(statement)]


def _nullable_totals(engine: Engine) -> list[bool]:
    columns = {c["name"]: c["nullable"] for c in inspect(engine).get_columns("findings")}
    return [columns[name] for name in TOTAL]


def test_0008_makes_the_total_loss_nullable_and_its_unknown_zeros_null(engine: Engine) -> None:
    migrate.upgrade(engine, "0007")
    _insert(engine, "findings", _FINDING_COLUMNS, _finding_rows(engine))
    before = _totals(engine)
    assert _nullable_totals(engine) == [False, False, False]

    migrate.upgrade(engine, "0008")
    assert _nullable_totals(engine) == [True, True, True]
    assert _totals(engine) == [
        ("pool:c/m", 0.0, 0.0, 10.0),  # estimated as 0 (an output figure beside it): stays 0
        ("worker:w-a", None, None, None),  # no loss estimated: unknown, never 0
        ("worker:w-b", 1200.5, 800.0, 1500.0),
    ]
    with engine.connect() as connection:
        names = {i["name"] for i in inspect(connection).get_indexes("findings")}  # the batch copy kept them
        unique = {u["name"] for u in inspect(connection).get_unique_constraints("findings")}
    assert {"ix_findings_status_kind", "ix_findings_last_seen", "ix_findings_worker_id"} <= names
    assert "uq_findings_kind_subject_first_seen" in unique

    migrate.downgrade(engine, "0007")
    assert _nullable_totals(engine) == [False, False, False]
    assert _totals(engine) == before  # the 0 the older code wrote for unknown
    migrate.upgrade(engine)  # and up again
    assert _totals(engine)[1] == ("worker:w-a", None, None, None)


# --- 0009: the windows' p90 latencies ---------------------------------------------------------------------


def _latencies(engine: Engine, columns: str) -> list[tuple[Any, ...]]:
    with engine.connect() as connection:
        return [
            tuple(r) for r in connection.execute(text(f"SELECT {columns} FROM engine_samples ORDER BY ts"))
        ]


def test_0009_adds_the_p90_latencies_unknown_for_stored_samples_and_its_downgrade_drops_only_them(
    engine: Engine,
) -> None:
    migrate.upgrade(engine, "0008")
    at = DAY0 if engine.dialect.name == "postgresql" else to_epoch_us(DAY0)
    with engine.begin() as connection:
        connection.execute(text("INSERT INTO worker_keys (id, worker_id) VALUES (1, 'worker-a')"))
        connection.execute(
            text(
                "INSERT INTO raw_engine_samples (ts, worker_key, window_s, prompt_tokens, generation_tokens, "
                "ttft_p50_s, ttft_p99_s, role, role_source) VALUES (:at, 1, 60, 10, 20, 0.25, 1.5, 1, 0)"
            ),
            {"at": at},
        )
    kept = "worker_id, role, prompt_tokens, ttft_p50_s, ttft_p99_s"
    before = _latencies(engine, kept)
    assert before == [("worker-a", "decode", 10, 0.25, 1.5)]

    migrate.upgrade(engine, "0009")
    p90s = ", ".join(P90S)
    assert _latencies(engine, f"{kept}, {p90s}") == [(*before[0], None, None, None)]  # unknown, not 0
    for table in ("engine_samples_1m", "engine_samples_1h"):
        columns = {c["name"] for c in inspect(engine).get_columns(table)}
        assert {f"{name}_avg" for name in P90S} <= columns
    with engine.begin() as connection:
        connection.execute(text("UPDATE raw_engine_samples SET tpot_p90_s = 0.0625"))
    assert _latencies(engine, "tpot_p90_s") == [(0.0625,)]

    migrate.downgrade(engine, "0008")
    assert not set(P90S) & {c["name"] for c in inspect(engine).get_columns("raw_engine_samples")}
    assert _latencies(engine, kept) == before
    migrate.upgrade(engine)
    assert _latencies(engine, "tpot_p90_s") == [(None,)]


def test_the_head_is_read_from_the_scripts_as_alembic_reads_it() -> None:
    from alembic.script import ScriptDirectory

    alembic_head = ScriptDirectory.from_config(migrate.alembic_config()).get_current_head()
    assert migrate._head_from_scripts() == alembic_head


_ROOT = 'revision = "1"\ndown_revision = None\n'


@pytest.mark.parametrize(
    ("scripts", "head"),
    [
        ([_ROOT, 'revision: str = "2"\ndown_revision = "1"\n'], "2"),
        ([_ROOT, "revision = '2'\ndown_revision = '1'\n"], "2"),
        # two heads, a revision stated another way, a parent no script holds: left to Alembic
        ([_ROOT, 'revision = "2"\ndown_revision = None\n'], None),
        ([_ROOT, 'revision = make_id()\ndown_revision = "1"\n'], None),
        (['revision = "2"\ndown_revision = "1"\n'], None),
        ([_ROOT, 'revision = "2"\ndown_revision = "1"\nrevision = "3"\n'], None),  # stated twice
    ],
)
def test_a_history_the_scripts_do_not_state_plainly_is_left_to_alembic(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scripts: list[str], head: str | None
) -> None:
    (tmp_path / "versions").mkdir()
    for number, source in enumerate(scripts):
        (tmp_path / "versions" / f"{number:04d}_step.py").write_text(source)
    monkeypatch.setattr(migrate, "_script_location", lambda: str(tmp_path))
    assert migrate._head_from_scripts() == head


def test_the_migration_error_is_alembics_imported_on_first_use() -> None:
    from alembic.util import CommandError

    assert migrate.CommandError is CommandError
    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        migrate.Nothing  # noqa: B018


def test_editor_files_beside_the_scripts_are_not_migrations(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "versions").mkdir()
    (tmp_path / "versions" / "0001_a.py").write_text(_ROOT)
    (tmp_path / "versions" / ".#0001_a.py").symlink_to(tmp_path / "gone")  # an Emacs lock: dangling
    (tmp_path / "versions" / "__init__.py").write_text("")
    monkeypatch.setattr(migrate, "_script_location", lambda: str(tmp_path))
    assert migrate._head_from_scripts() == "1"


def test_a_version_table_of_two_revisions_is_refused_with_what_to_do(engine: Engine) -> None:
    migrate.upgrade(engine)
    with engine.begin() as connection:
        connection.execute(text("INSERT INTO alembic_version (version_num) VALUES ('f00d')"))
    with pytest.raises(migrate.SchemaNotCurrentError, match="2 revisions"):
        migrate.ensure_schema(engine)
