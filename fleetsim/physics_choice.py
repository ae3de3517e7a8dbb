"""Which physics a simulated fleet runs on: the examiner's choice, never the analyzer's.

- ``model``: the simulator's own step-time formulas (``fleetsim.physics``) at its default efficiencies.
  They share the FLOP and byte counts of ``fleet.models`` with the analyzer, so a score under this
  physics alone is not independent: the other two exist for that.
- ``measured``: decode and prefill step times interpolated from kernel timings NVIDIA AI Configurator
  measured on H100 SXM and H200 SXM (``data/measured``, ``fleetsim.measured``). Workers whose model, SKU
  or tensor-parallel size the tables do not cover fall back to ``model`` and the truth says so per pool.
- ``perturbed``: the ``model`` formulas with a draw per run (seeded by the run's seed, independent of
  any fit): prefill and decode efficiency, the H200-over-H100 decode advantage (+-15%), the engine's
  concurrency cap (128 to 1024 running requests) and the share of HBM the engine takes for weights and
  KV cache. The draw is recorded in the truth.

A ``Physics`` is resolved once per run and handed to every simulation of that run (the truth's
re-simulations under other seeds included), so a perturbed run keeps one draw throughout. The draw is
keyed by the scenario's name and a physics seed (``draw_seed``), not by the traffic seed: the seeds of
one scenario share a physics, so decisions can be compared across them, while every scenario gets its
own.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

import numpy as np

from fleetsim.measured import MeasuredStepModel, MeasuredTables, load_tables
from fleetsim.physics import Efficiency, EngineConfig, StepModel, WorkerHardware

PhysicsName = Literal["model", "measured", "perturbed"]
PHYSICS: tuple[str, ...] = get_args(PhysicsName)
_PERTURB_STREAM = 733_211  # keeps the draw independent of every other stream of the run's seed


@dataclass(frozen=True)
class Perturbation:
    """One run's draw of the perturbed physics."""

    prefill_efficiency: float  # multiplies the GEMM and attention efficiencies (compute-bound work)
    decode_efficiency: float  # multiplies the achieved share of HBM bandwidth (memory-bound work)
    h200_decode_advantage: float  # multiplies an H200's achieved HBM bandwidth (on top of the above)
    launch_factor: float  # multiplies the fixed per-layer cost of a step
    max_running_requests: int  # the engine's concurrency cap, whatever the scenario set
    hbm_utilization: float  # share of HBM the engine takes for weights, runtime and KV cache

    @classmethod
    def draw(cls, seed: int) -> Perturbation:
        rng = np.random.default_rng([seed, _PERTURB_STREAM])
        return cls(
            prefill_efficiency=round(float(rng.uniform(0.75, 1.25)), 4),
            decode_efficiency=round(float(rng.uniform(0.75, 1.25)), 4),
            h200_decode_advantage=round(float(rng.uniform(0.85, 1.15)), 4),
            launch_factor=round(float(rng.uniform(0.5, 2.0)), 4),
            max_running_requests=int(rng.choice([128, 192, 256, 384, 512, 768, 1024])),
            hbm_utilization=round(float(rng.uniform(0.80, 0.95)), 4),
        )

    def efficiency(self, base: Efficiency) -> Efficiency:
        return dataclasses.replace(
            base,
            gemm=min(base.gemm * self.prefill_efficiency, 0.95),
            attention=min(base.attention * self.prefill_efficiency, 0.95),
            bandwidth=min(base.bandwidth * self.decode_efficiency, 0.95),
            launch_s_per_layer=base.launch_s_per_layer * self.launch_factor,
        )

    def engine(self, base: EngineConfig) -> EngineConfig:
        return dataclasses.replace(
            base, max_batch=self.max_running_requests, hbm_utilization=self.hbm_utilization
        )


def _is_h200(hw: WorkerHardware) -> bool:
    return "H200" in hw.sku.key.upper()


@dataclass
class Physics:
    """A resolved physics: what every ``PoolModel`` of a run builds its step model with."""

    name: PhysicsName = "model"
    seed: int = 0
    perturbation: Perturbation | None = None
    tables: MeasuredTables | None = None
    eff: Efficiency = field(default_factory=Efficiency)
    sources: dict[str, dict[str, str]] = field(default_factory=dict)  # pool -> SKU -> source of numbers

    def step_model(
        self, pool: str, engine_name: str, workers: Sequence[WorkerHardware], engine: EngineConfig
    ) -> StepModel:
        """The step model of one pool's workers under this physics (records where its numbers come from)."""
        if self.perturbation is not None:
            model = StepModel(
                workers, self.perturbation.engine(engine), self.perturbation.efficiency(self.eff)
            )
            factor = np.array(
                [self.perturbation.h200_decode_advantage if _is_h200(w) else 1.0 for w in workers]
            )
            model.bw_rate = model.bw_rate * factor
            self._note(pool, workers, "perturbed model formulas")
            return model
        if self.tables is not None:
            measured = MeasuredStepModel(workers, engine, self.eff, self.tables, engine_name)
            for w, source in zip(workers, measured.sources, strict=True):
                self.sources.setdefault(pool, {})[w.sku.key] = source
            return measured
        self._note(pool, workers, "model formulas (fleetsim.physics)")
        return StepModel(workers, engine, self.eff)

    def _note(self, pool: str, workers: Sequence[WorkerHardware], source: str) -> None:
        for w in workers:
            self.sources.setdefault(pool, {})[w.sku.key] = source

    def describe(self) -> dict[str, Any]:
        """What the truth records of its physics: its name, the draw, the source of each pool's numbers."""
        out: dict[str, Any] = {
            "name": self.name,
            "sources": {p: dict(s) for p, s in sorted(self.sources.items())},
        }
        if self.perturbation is not None:
            out["draw"] = dataclasses.asdict(self.perturbation)
            out["draw_seed"] = self.seed
        if self.tables is not None:
            out["tables"] = self.tables.provenance()
        return out


def draw_seed(scenario: str, physics_seed: int = 0) -> int:
    """The perturbed draw's seed for a scenario: its name's CRC-32, offset by ``physics_seed``."""
    return zlib.crc32(scenario.encode()) + 1_000_003 * physics_seed


def resolve_physics(name: str = "model", seed: int = 0) -> Physics:
    """The physics called ``name`` with draw seed ``seed`` (``draw_seed``).

    ``ValueError`` naming the choices for an unknown name."""
    if name == "model":
        return Physics("model", seed)
    if name == "perturbed":
        return Physics("perturbed", seed, perturbation=Perturbation.draw(seed))
    if name == "measured":
        return Physics("measured", seed, tables=load_tables())
    raise ValueError(f"unknown physics {name!r}: choose one of {', '.join(PHYSICS)}")
