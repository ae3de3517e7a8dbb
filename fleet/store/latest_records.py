"""The GPU and worker records of a block's columns: each key's attributes at its latest record.

:class:`fleet.store.rows.RowBatch` keeps, per GPU and worker, the latest record it was given and folds it
into a :class:`~fleet.inventory.GpuRecord` or :class:`~fleet.inventory.WorkerRecord` when finished. A block
parsed a column at a time (:mod:`fleet.fast_records`) gives its records here instead, built at once from
the columns, with the checks that fold makes: a dict of every field per record, then its folding, were a
third of the parse of a block from a 10,000-GPU fleet, where each GPU is named about once per block.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from itertools import chain, repeat
from typing import Any

from fleet.contract import Role
from fleet.inventory import GpuRecord, WorkerRecord
from fleet.store.row_limits import INT32_MAX, RowValueError

# The text attributes of each record (a NUL character refused), and every column a record is built from.
GPU_TEXTS = ("gpu_name", "node", "parent_gpu_uuid", "mig_profile", "cluster")
WORKER_TEXTS = ("node", "engine", "model", "precision", "cluster", "deployment")
_GPU_COLUMNS = frozenset((*GPU_TEXTS, "gpu_index", "worker_id", "source", "state"))
_WORKER_COLUMNS = frozenset((
    *WORKER_TEXTS, "role", "role_source", "tp", "gpu_uuids", "kv_capacity_tokens", "max_running_requests",
    "gpu_join",
))  # fmt: skip
NodeSpans = dict[str, tuple[datetime, datetime]]  # node -> (first, last) window of the records naming it


@dataclass(frozen=True)
class LatestOf:
    """A block's records of one kind, column by column: ``latest`` and ``first`` per key (a GPU's uuid or a
    worker's id) are the index of its latest record and its first window; ``columns`` hold enumerations as
    their text, lists as lists."""

    keys: Sequence[str]
    latest: Mapping[str, int]
    first: Mapping[str, datetime]
    ts: Sequence[datetime]
    columns: Mapping[str, Sequence[Any]]

    def distinct(self) -> tuple[list[str], list[datetime], list[datetime], Callable[[str], list[Any]]]:
        """The keys (first appearance first), their first and latest windows, and a column's values at
        their latest records."""
        keys = list(dict.fromkeys(self.keys))
        rows = list(map(self.latest.__getitem__, keys))

        @cache  # a text column is read for its check, then for the records
        def at(name: str) -> list[Any]:
            return list(map(self.columns[name].__getitem__, rows))

        return keys, list(map(self.first.__getitem__, keys)), list(map(self.ts.__getitem__, rows)), at


def build(gpu: bool, block: LatestOf) -> tuple[dict[str, Any], NodeSpans] | None:
    """The records of ``block`` by key, and the span of each node they name; None where the columns lack an
    attribute (the caller then folds record by record). Raises :class:`RowValueError`."""
    if not (_GPU_COLUMNS if gpu else _WORKER_COLUMNS).issubset(block.columns):
        return None
    keys, firsts, lasts, at = block.distinct()
    for name in GPU_TEXTS if gpu else WORKER_TEXTS:
        _no_nul(name, at(name))
    nodes = at("node")
    records = _gpus(keys, firsts, lasts, at, nodes) if gpu else _workers(keys, firsts, lasts, at, nodes)
    return dict(zip(keys, records, strict=True)), _node_spans(nodes, firsts, lasts)


def _gpus(
    keys: list[str],
    firsts: list[datetime],
    lasts: list[datetime],
    at: Callable[[str], list[Any]],
    nodes: list[str],
) -> Iterable[GpuRecord]:
    indexes = at("gpu_index")
    if max(indexes, default=0) > INT32_MAX:
        raise RowValueError("gpu_index", f"{max(indexes)} does not fit a 32-bit integer")
    return map(
        GpuRecord, keys, nodes, at("gpu_name"), repeat(None), at("worker_id"), at("source"), at("state"),
        at("cluster"), at("parent_gpu_uuid"), at("mig_profile"), indexes, firsts, lasts,
    )  # fmt: skip


def _workers(
    keys: list[str],
    firsts: list[datetime],
    lasts: list[datetime],
    at: Callable[[str], list[Any]],
    nodes: list[str],
) -> Iterable[WorkerRecord]:
    gpu_uuids = [tuple(uuids) for uuids in at("gpu_uuids")]
    _no_nul("gpu_uuids", chain.from_iterable(gpu_uuids))
    return map(
        WorkerRecord, keys, nodes, at("engine"), at("model"), map(Role, at("role")), at("role_source"),
        at("precision"), at("tp"), gpu_uuids, at("cluster"), at("deployment"), at("kv_capacity_tokens"),
        at("max_running_requests"), at("gpu_join"), firsts, lasts,
    )  # fmt: skip


def _no_nul(name: str, texts: Iterable[str | None]) -> None:
    if "\x00" in "".join(filter(None, set(texts))):
        raise RowValueError(name, "contains a NUL character")


def _node_spans(nodes: list[str], firsts: list[datetime], lasts: list[datetime]) -> NodeSpans:
    spans: NodeSpans = {}
    for node, begun, ended in zip(nodes, firsts, lasts, strict=True):
        span = spans.get(node)
        if span is None:
            spans[node] = (begun, ended)
        elif begun < span[0] or ended > span[1]:
            spans[node] = (min(span[0], begun), max(span[1], ended))
    return spans
