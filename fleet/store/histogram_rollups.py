"""The latency histograms of the engine rollups: each bucket's windows' histograms summed bucket by bucket.

SQL cannot add encoded histograms (:mod:`fleet.histograms`), so after the SQL rollup has written a bucket's
other columns, the raw rows holding a histogram are read in (worker, bucket) order, an hour at a time, a
chunk of them summed at once (:func:`fleet.histograms.summed`, without decoding each), and the sums
written back a chunk of rollup rows per statement. Memory holds about one chunk; a bucket whose windows
hold no histogram of a kind keeps NULL there (unknown, never an empty histogram), and a bucket with one
keeps its stored bytes exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime, timedelta
from itertools import groupby, islice
from operator import itemgetter
from typing import Any

import numpy as np
from sqlalchemy import Connection, Select, Table, bindparam, or_, select, update
from sqlalchemy.sql.elements import ColumnElement

from fleet import histograms
from fleet.store.rows import HISTOGRAM_COLUMNS
from fleet.store.schema import EngineSampleRow, table_of

CHUNK_ROWS = 2_000  # raw rows fetched, and rollup rows updated, per round trip
# A bucket's sum of one histogram column: unknown, its one stored histogram, or per-bucket counts.
Summed = bytes | histograms.FloatArray | None
_HOUR = timedelta(hours=1)


def fill_histograms(
    connection: Connection,
    target: Table,
    start: datetime,
    end: datetime,
    bucket_of: Callable[[Any], ColumnElement[Any]],
    instant: Callable[[Any], datetime],
) -> None:
    """Fill the latency histograms of ``target``'s buckets in [start, end) (hour-aligned), which the SQL
    rollup has just written without them. ``bucket_of`` is the rollup's SQL bucket of a timestamp column,
    ``instant`` turns a bucket as the database returns it into the stored one."""
    names = [f"summed_{name}" for name in HISTOGRAM_COLUMNS]  # a bind may not be named as a column
    write = (
        update(target)
        .where(
            target.c.worker_id == bindparam("rollup_worker"), target.c.bucket == bindparam("rollup_bucket")
        )
        .values({name: bindparam(bound) for name, bound in zip(HISTOGRAM_COLUMNS, names, strict=True)})
    )
    hour = start
    while hour < end:  # an hour at a time: a short sort per read (rollup buckets never span hours)
        following = min(hour + _HOUR, end)
        with connection.execute(held_histograms(bucket_of, hour, following)) as rows:
            sums = (
                dict(
                    zip(names, map(_stored_sum, summed), strict=True),
                    rollup_worker=key[0],
                    rollup_bucket=instant(key[1]),
                )
                for key, summed in histogram_sums(rows, CHUNK_ROWS)
            )
            for chunk in _chunks(sums, CHUNK_ROWS):
                connection.execute(write, chunk)
        hour = following


def held_histograms(
    bucket_of: Callable[[Any], ColumnElement[Any]], start: datetime, end: datetime
) -> Select[Any]:
    """The raw engine samples in [start, end) holding a latency histogram, as ``(worker id, bucket,
    *HISTOGRAM_COLUMNS)`` in (worker, bucket) order (``bucket_of``: the SQL bucket of a timestamp column),
    streamed ``CHUNK_ROWS`` at a time: what :func:`histogram_sums` reads."""
    c = table_of(EngineSampleRow).c
    bucket = bucket_of(c.ts)
    held = [c[name] for name in HISTOGRAM_COLUMNS]
    return (
        select(c.worker_id, bucket, *held)
        .where(c.ts >= start, c.ts < end, or_(*(h.is_not(None) for h in held)))
        .order_by(c.worker_id, bucket)
        .execution_options(yield_per=CHUNK_ROWS)
    )


def histogram_sums(
    rows: Iterable[Sequence[Any]], chunk_rows: int = CHUNK_ROWS
) -> Iterator[tuple[tuple[Any, Any], list[Summed]]]:
    """Rows ``(key, key, stored histogram, ...)`` in key order, to each key and the bucket-wise sum of each
    of its histogram columns: None where no row held one, the stored bytes where one row did (that sum is
    itself, kept exactly), else the per-bucket counts. Read ``chunk_rows`` at a time (and the rest of the
    last key)."""
    buffer: list[Sequence[Any]] = []
    for row in rows:
        if len(buffer) >= chunk_rows and (row[0], row[1]) != (buffer[-1][0], buffer[-1][1]):
            yield from _chunk_sums(buffer)
            buffer = []
        buffer.append(row)
    if buffer:
        yield from _chunk_sums(buffer)


def _chunk_sums(rows: Sequence[Sequence[Any]]) -> Iterator[tuple[tuple[Any, Any], list[Summed]]]:
    keys = [(key, list(group)) for key, group in groupby(rows, key=itemgetter(0, 1))]
    columns = len(rows[0]) - 2
    summed: list[list[Summed]] = [[None] * columns for _ in keys]
    for place in range(2, columns + 2):
        several: list[bytes] = []  # the stored histograms of the keys holding more than one
        owner: list[int] = []  # which of those keys each belongs to (0, 1, ...)
        holders: list[int] = []  # those keys' positions in ``keys``
        for index, (_, group) in enumerate(keys):
            stored = [bytes(row[place]) for row in group if row[place] is not None]
            if len(stored) == 1:
                summed[index][place - 2] = stored[0]
            elif stored:
                owner.extend([len(holders)] * len(stored))
                holders.append(index)
                several.extend(stored)
        if several:
            sums = histograms.summed(several, np.asarray(owner, dtype=np.int64), len(holders))
            for index, total in zip(holders, sums, strict=True):
                summed[index][place - 2] = total
    for (key, _), values in zip(keys, summed, strict=True):
        yield key, values


def _stored_sum(summed: Summed) -> bytes | None:
    return summed if summed is None or isinstance(summed, bytes) else histograms.encode(summed)


def _chunks(items: Iterable[dict[str, Any]], size: int) -> Iterator[list[dict[str, Any]]]:
    iterator = iter(items)
    while chunk := list(islice(iterator, size)):
        yield chunk
