"""The simulated fleet as a streaming source: one window of records per call.

API::

    source = SimSource(scenario, catalog, seed=0, start=datetime(...), window_s=30.0)
    source.next_window()        -> list[GpuSample | EngineSample]   (typed, validated records)
    source.next_window_dicts()  -> list[dict]                       (the same records as JSON-ready dicts)
    source.window_end           -> datetime                         (end of the window the next call returns)
    source.exhausted            -> bool                             (True once ``days`` are all returned)

    # whole runs in batches (what ``phasefit sim run`` writes; for bulk ingest):
    jsonl_batches(scenario, catalog, seed=0, days=7, window_s=None, start=None) -> Iterator[bytes]
    dict_batches(scenario, catalog, seed=0, days=7, window_s=None, start=None)  -> Iterator[list[dict]]
        (histograms="encoded": latency histograms as fleet.histograms.encode bytes, not the contract's form)

    # as a collector GpuSource (``phasefit collect --source sim``):
    source = SimSource.for_collector(collector_settings, clock)
    source.start(); source.collect() -> SourceWindow(gpu_samples, engine_samples); source.close()

Each call returns the next window of simulated time (window ends at ``start + k * window_s``), whatever
the wall clock says: a collector calling every ``window_s`` seconds keeps simulated time in step with
real time. The source speaks for the whole simulated fleet (every node), or for one node when
``node`` (``PHASEFIT_SIM_NODE``) names it. A stream gives the same records as ``phasefit sim run`` for
the same scenario, seed, start and window.

Settings for the collector (environment): ``PHASEFIT_SIM_SCENARIO`` (a built-in name or a file; default
``demo``), ``PHASEFIT_SIM_SEED`` (default 0), ``PHASEFIT_SIM_NODE``; the window is the collector's
interval and the start its clock's now, rounded down to a whole window.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from fleet.catalog import Catalog
from fleet.contract import EngineSample, GpuSample
from fleetsim.fleet_sim import Chunk, FleetSimulation
from fleetsim.physics_choice import PHYSICS, Physics, draw_seed, resolve_physics
from fleetsim.records import HistogramForm, RecordBuilder, to_records
from fleetsim.scenario import Scenario, load_scenario

if TYPE_CHECKING:
    from collector.settings import CollectorSettings
    from collector.window import SourceWindow
    from fleet.clock import Clock


BATCH_RECORDS = 60_000  # records per batch of a whole run: bounds memory whatever the fleet's size


def _batches(sim: FleetSimulation, days: float) -> Iterator[tuple[Chunk, slice]]:
    step = max(1, BATCH_RECORDS // (len(sim.layout.gpus) + len(sim.layout.workers)))
    for chunk in sim.chunks(sim.windows_in(days)):
        for first in range(0, len(chunk.window_end_epoch), step):
            yield chunk, slice(first, first + step)


def jsonl_batches(
    scenario: Scenario,
    catalog: Catalog,
    *,
    seed: int = 0,
    days: float | None = None,
    window_s: float | None = None,
    start: datetime | None = None,
    physics: Physics | None = None,
) -> Iterator[bytes]:
    """A whole run as JSON lines, in batches of whole windows (each ends with a newline)."""
    sim = FleetSimulation(scenario, catalog, seed, window_s=window_s, start=start, physics=physics)
    builder = RecordBuilder(sim)
    for chunk, window_slice in _batches(sim, scenario.days if days is None else days):
        yield builder.chunk_jsonl(chunk, window_slice)


def dict_batches(
    scenario: Scenario,
    catalog: Catalog,
    *,
    seed: int = 0,
    days: float | None = None,
    window_s: float | None = None,
    start: datetime | None = None,
    physics: Physics | None = None,
    histograms: HistogramForm = "contract",
) -> Iterator[list[dict[str, Any]]]:
    """A whole run as record dicts (``{"kind": "gpu_sample", ...}``), in batches of whole windows; latency
    histograms in the contract's form or ``"encoded"`` (``RecordBuilder.chunk_dicts``)."""
    sim = FleetSimulation(scenario, catalog, seed, window_s=window_s, start=start, physics=physics)
    builder = RecordBuilder(sim)
    for chunk, window_slice in _batches(sim, scenario.days if days is None else days):
        yield builder.chunk_dicts(chunk, window_slice, histograms=histograms)


class SimSettings(BaseSettings):
    """What ``phasefit collect --source sim`` simulates (environment ``PHASEFIT_SIM_*``)."""

    model_config = SettingsConfigDict(env_prefix="PHASEFIT_SIM_", extra="ignore")

    scenario: str = Field(default="demo", description="Built-in scenario name or a scenario YAML file.")
    seed: int = Field(default=0, ge=0, description="Random seed: the same seed gives the same records.")
    node: str | None = Field(default=None, description="Emit only this simulated node's records.")
    physics: str = Field(
        default="model",
        pattern="^(" + "|".join(PHYSICS) + ")$",
        description="Step-time physics: model (formulas), measured (AI Configurator tables) or perturbed.",
    )
    physics_seed: int = Field(default=0, ge=0, description="Seed of the perturbed physics' draw.")


class SimSource:
    """A scenario's records, window by window."""

    name = "sim"

    def __init__(
        self,
        scenario: Scenario,
        catalog: Catalog,
        *,
        seed: int = 0,
        start: datetime | None = None,
        window_s: float | None = None,
        days: float | None = None,
        node: str | None = None,
        physics: Physics | None = None,
    ) -> None:
        self._sim = FleetSimulation(scenario, catalog, seed, window_s=window_s, start=start, physics=physics)
        if node is not None and node not in self._sim.layout.nodes:
            raise ValueError(
                f"node {node!r} is not in scenario {scenario.name!r}: {', '.join(self._sim.layout.nodes)}"
            )
        self._node = node
        self._builder = RecordBuilder(self._sim)
        self._limit = None if days is None else self._sim.windows_in(days)
        self._chunks: Iterator[Chunk] = self._sim.chunks(self._limit)
        self._chunk: Chunk | None = None
        self._row = 0
        self._returned = 0

    @classmethod
    def for_collector(cls, settings: CollectorSettings, clock: Clock) -> SimSource:
        """The source ``phasefit collect --source sim`` runs: settings from ``PHASEFIT_SIM_*``."""
        from fleet.catalog import load_catalog
        from fleet.settings import Settings

        sim = SimSettings()
        now = clock.now().astimezone(UTC)
        window = float(settings.interval_s)
        start = datetime.fromtimestamp((now.timestamp() // window) * window, UTC)
        scenario = load_scenario(sim.scenario)
        return cls(
            scenario,
            load_catalog(Settings().catalog_path),
            seed=sim.seed,
            start=start,
            window_s=window,
            node=sim.node,
            physics=resolve_physics(sim.physics, draw_seed(scenario.name, sim.physics_seed)),
        )

    @property
    def simulation(self) -> FleetSimulation:
        return self._sim

    @property
    def window_s(self) -> float:
        return self._sim.window_s

    @property
    def window_end(self) -> datetime:
        """End of the window the next call returns."""
        return datetime.fromtimestamp(self._sim.epoch0 + (self._returned + 1) * self._sim.window_s, UTC)

    @property
    def exhausted(self) -> bool:
        return self._limit is not None and self._returned >= self._limit

    def next_window_dicts(self) -> list[dict[str, Any]]:
        """The next window's records as dicts (empty once the source is exhausted)."""
        if self.exhausted:
            return []
        if self._chunk is None or self._row >= len(self._chunk.window_end_epoch):
            self._chunk = next(self._chunks)
            self._row = 0
        dicts = self._builder.chunk_dicts(self._chunk, slice(self._row, self._row + 1))
        self._row += 1
        self._returned += 1
        if self._node is not None:
            dicts = [d for d in dicts if d["node"] == self._node]
        return dicts

    def next_window(self) -> list[GpuSample | EngineSample]:
        """The next window's records, validated as the data contract's records."""
        return to_records(self.next_window_dicts())

    # --- collector GpuSource protocol ------------------------------------------------------------

    def start(self) -> None:
        """Nothing to prime: simulated counters need no first sample."""

    def collect(self) -> SourceWindow:
        from collector.window import SourceWindow

        window = SourceWindow()
        for record in self.next_window():
            if isinstance(record, GpuSample):
                window.gpu_samples.append(record)
            else:
                window.engine_samples.append(record)
        return window

    def close(self) -> None:
        """Nothing to release."""
