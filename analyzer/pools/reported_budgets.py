"""The KV budgets the fleet's engines report, gathered per grid row and per interchangeable peer group.

Built from the inventory's workers and the pools' groups; the pipeline hands it to the pool analysis, which
prefers a worker's own figure, then a peer's, before any modelled budget (:mod:`analyzer.model.kv_budget`).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from analyzer.model.deployment import Deployment
from analyzer.pools.pool import Pool
from fleet.catalog import Catalog, EngineSettings
from fleet.inventory import WorkerRecord


@dataclass(frozen=True)
class PeerKey:
    """Workers whose budgets are interchangeable: the same model, precision, SKU and TP degree."""

    model: str
    precision: str
    sku: str
    tp: int


@dataclass(frozen=True)
class ReportedBudgets:
    """The KV budgets the fleet's engines report (tokens, per grid row), each row's engine, and every
    reported figure by :class:`PeerKey` (fleet-wide: a group borrows from another pool's workers)."""

    tokens: Mapping[int, int] = field(default_factory=dict)
    engines: Mapping[int, str] = field(default_factory=dict)
    peers: Mapping[PeerKey, tuple[int, ...]] = field(default_factory=dict)
    settings: Mapping[int, EngineSettings] = field(default_factory=dict)  # each row's engine's KV rule
    caps: Mapping[int, int] = field(default_factory=dict)  # each row's engine's concurrency cap, as reported

    @classmethod
    def from_workers(
        cls, pools: Iterable[Pool], workers: Mapping[int, WorkerRecord], catalog: Catalog
    ) -> ReportedBudgets:
        """From the pools' SKU groups and each grid row's worker as the inventory reports it; each worker's
        engine resolves through the catalog's ``engines:`` (its default engine where unknown)."""
        tokens = {
            row: int(w.kv_capacity_tokens)
            for row, w in workers.items()
            if w.kv_capacity_tokens is not None and w.kv_capacity_tokens > 0
        }
        peers: dict[PeerKey, list[int]] = {}
        for pool in pools:
            for group in pool.groups:
                key = peer_key(pool, group.deployment)
                if key is None:
                    continue
                peers.setdefault(key, []).extend(tokens[row] for row in group.members if row in tokens)
        settings = {}
        for row, w in workers.items():
            resolved = catalog.engines.resolve(w.engine) or catalog.engines.default
            if resolved is not None:
                settings[row] = resolved
        return cls(
            MappingProxyType(tokens),
            MappingProxyType({row: w.engine for row, w in workers.items()}),
            MappingProxyType({k: tuple(v) for k, v in peers.items() if v}),
            MappingProxyType(settings),
            MappingProxyType(
                {
                    row: int(w.max_running_requests)
                    for row, w in workers.items()
                    if w.max_running_requests is not None and w.max_running_requests > 0
                }
            ),
        )

    def of_rows(self, rows: Iterable[int]) -> list[int]:
        return [self.tokens[row] for row in rows if row in self.tokens]

    def engine_of(self, rows: Iterable[int]) -> str | None:
        """The engine most of the rows run (None where none says)."""
        named = [self.engines[row] for row in rows if self.engines.get(row)]
        return statistics.mode(named) if named else None

    def settings_of(self, rows: Iterable[int]) -> EngineSettings | None:
        """The KV rule of the engine most of the rows run (None where no row's engine resolves)."""
        rows = tuple(rows)
        keys = [self.settings[row].key for row in rows if row in self.settings]
        if not keys:
            return None
        chosen = statistics.mode(keys)
        return next(
            self.settings[row] for row in rows if row in self.settings and self.settings[row].key == chosen
        )


def peer_key(pool: Pool, d: Deployment | None) -> PeerKey | None:
    if d is None or pool.arch is None or pool.precision is None:
        return None
    return PeerKey(d.model.key, str(d.precision), d.gpu.key, d.tp)


def reported_median(values: Iterable[int]) -> tuple[float, float] | None:
    """(median, relative spread) of reported budgets; None when there are none."""
    figures = sorted(float(v) for v in values)
    if not figures:
        return None
    middle = statistics.median(figures)
    spread = statistics.median(abs(v / middle - 1.0) for v in figures) if middle > 0 else 0.0
    return middle, spread
