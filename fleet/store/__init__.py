"""The store: SQLAlchemy schema, engines, the batch write path, read helpers, migrations and retention.

Modules (import them directly; this package imports nothing so a collector-only install never loads
SQLAlchemy by accident):

- :mod:`fleet.store.schema`: the tables and the sample views; :mod:`fleet.store.columns`: how timestamps are
  stored; :mod:`fleet.store.codes`: the enumerations' codes in raw samples.
- :mod:`fleet.store.engine`: ``make_engine(url)``, ``writing(engine)`` (a write transaction).
- :mod:`fleet.store.rows` / :mod:`fleet.store.writer`: records to rows, ``write_samples`` / ``write_batch``;
  :mod:`fleet.store.keys` and :mod:`fleet.store.lean`: the integer keys and lean rows the writer stores.
- :mod:`fleet.store.partitions`: PostgreSQL's daily partitions of raw samples, ``ensure_partitions``.
- :mod:`fleet.store.queries`: time-range samples as columns, GPUs and workers, ``table_counts``.
- :mod:`fleet.store.findings`, :mod:`fleet.store.alerts`, :mod:`fleet.store.reports`: analyzer findings,
  Alertmanager events and weekly reports.
- :mod:`fleet.store.migrate`: Alembic from code; :mod:`fleet.store.retention`: rollups and raw retention.
"""
