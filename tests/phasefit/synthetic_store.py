"""A throwaway SQLite store holding a synthetic fleet's samples, for the CLI tests that read a store."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fleet.contract import EngineSample, GpuSample
from fleet.ingest import catalog_sku_resolver
from fleet.store.engine import make_engine, writing
from fleet.store.migrate import upgrade
from fleet.store.writer import write_samples
from tests.analyzer.synthetic import Fleet, workers


def records(columns: dict[str, Any], kind: type[GpuSample] | type[EngineSample]) -> list[Any]:
    """A synthetic fleet's sample columns as contract records."""
    names = [k for k in columns if k != "ts"]
    return [
        kind(ts=datetime.fromtimestamp(float(ts), tz=UTC), **{k: columns[k][i] for k in names})
        for i, ts in enumerate(columns["ts"])
    ]


def store_fleet(url: str, fleet: Fleet) -> None:
    """Write ``fleet``'s samples into the store at ``url`` (created at the head revision if new)."""
    engine = make_engine(url)
    upgrade(engine)
    gpu, eng = fleet.columns()
    with writing(engine) as connection:
        write_samples(
            connection,
            records(gpu, GpuSample) + records(eng, EngineSample),
            sku_resolver=catalog_sku_resolver(),
        )
    engine.dispose()


def synthetic_store(folder: Path, spec: list[tuple[str, str, int, int]], name: str = "phasefit.db") -> str:
    """The URL of a store holding 8 hours of ``spec``'s workers (decode-heavy traffic: 12 req/s, 900 output
    tokens), the fleet the CLI tests analyse."""
    url = f"sqlite:///{folder / name}"
    fleet = Fleet(workers(spec), hours=8, window_s=900.0, rate_rps=lambda h: 12.0, osl=lambda h: 900.0)
    store_fleet(url, fleet)
    return url
