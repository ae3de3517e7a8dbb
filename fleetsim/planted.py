"""Findings a scenario plants by construction: facts of the simulation, for the ground truth to merge.

``planted_findings(scenario, layout, catalog, days=, window_s=)`` lists, for a run of ``days`` from the
scenario's start, ``{"kind", "pool", "worker_id", "why"}`` (kind: a ``FindingKind`` value; pool: the
scenario's pool name; worker_id: as the records name it, None for a pool finding). What plants what:

- ``healthy-not-serving``: a drained worker (``life.drained``) that gets no traffic for at least half
  the run while its engine stays up.
- ``role-drift``: a worker whose role label (``labels``) names another phase than the one it runs, for
  at least half the run ("unknown" labels plant nothing).
- ``telemetry-degraded``: a worker with a GPU reported degraded (``life.degraded``) or lost
  (``life.gpu_lost``) during the run, or whose GPUs report utilisation only (``telemetry: basic``); a
  pool finding where the GPUs serve no worker.
- ``kv-fabric-underprovisioned``: a disaggregated pool whose prefill workers, at the diurnal peak of
  their base traffic, must hand off more KV bytes per second each than their link carries.
- ``underutilised-pool``: a pool whose mean request rate is under a fifth of what its workers sustain
  (the slower of its stages, or its colocated workers) at its base mix. The examiner scores this kind
  and worker-level ``telemetry-degraded`` on what the run measured instead (``fleetsim.measured_facts``):
  these plants say what a scenario sets out to cause.
- ``disaggregation-not-paying``: a disaggregated pool whose workers, all colocated on the same GPUs,
  would sustain over 2% more requests than the best prefill/decode split of them.

Misplacements and pool-ratio drift are not planted: the ground truth finds them by re-simulation.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fleet.catalog import Catalog
from fleet.contract import FindingKind, Role
from fleetsim.layout import FleetLayout, SimPool, build_layout
from fleetsim.physics_choice import Physics
from fleetsim.pool import DECODE, PREFILL, PoolModel, PoolTraffic
from fleetsim.scenario import Scenario
from fleetsim.traffic import WindowArrivals, mix_stats

UNDERUSED_SHARE = 0.2  # a pool is built underutilised when its mean load is under this share
NOT_PAYING_MARGIN = 0.02  # colocated must beat the best split by this (twice the truth's 1% tolerance)
_HALF = 0.5


def _entry(kind: FindingKind, pool: SimPool, worker_id: str | None, why: str) -> dict[str, Any]:
    return {"kind": kind.value, "pool": pool.spec.name, "worker_id": worker_id, "why": why}


def _covered(start_h: float, hours: float | None, run_h: float) -> float:
    """Share of the run [0, run_h) that [start_h, start_h + hours) covers."""
    end = run_h if hours is None else min(run_h, start_h + hours)
    return max(0.0, end - start_h) / run_h if run_h > 0 else 0.0


def _traffic(pool: SimPool) -> PoolTraffic:
    """One window of the pool's base mix (what capacities need)."""
    t = pool.spec.traffic
    share = np.array([t.code_share])
    zero = np.zeros(1)
    return PoolTraffic(
        share, WindowArrivals(zero, zero, zero), mix_stats(share, t.prompt_scale, t.output_scale)
    )


def _split_capacity(prefill: np.ndarray, decode: np.ndarray, mean_p: float, mean_o: float) -> float:
    """Requests/s of the best prefill/decode split: decode on the workers best at it relative to prefill."""
    order = np.argsort(-(decode / np.maximum(prefill, 1e-9)), kind="stable")
    best = 0.0
    for k in range(1, len(order)):
        dec, pre = order[:k], order[k:]
        best = max(best, min(float(prefill[pre].sum()) / mean_p, float(decode[dec].sum()) / mean_o))
    return best


def _colocated_capacity(
    scenario: Scenario, layout: FleetLayout, pool: SimPool, catalog: Catalog, physics: Physics
) -> float:
    """Requests/s the pool's workers sustain all colocated ("mixed") on the same GPUs."""
    pools = [
        p.model_copy(update={"serving": "colocated"}) if p.name == pool.spec.name else p
        for p in scenario.pools
    ]
    variant = scenario.model_copy(update={"pools": pools})
    mixed = {w.key: Role.MIXED for w in layout.workers if w.pool == pool.index}
    model = PoolModel(build_layout(variant, catalog, mixed), pool.index, physics)
    traffic = _traffic(pool)
    caps = model.capacities(traffic)
    return float(caps.mixed[0].sum() / traffic.mix.mean_output[0])


def _pool_facts(
    scenario: Scenario, layout: FleetLayout, catalog: Catalog, physics: Physics
) -> list[dict[str, Any]]:
    out = []
    for pool in layout.pools:
        if not pool.workers:
            continue
        spec = pool.spec
        model = PoolModel(layout, pool.index, physics)
        traffic = _traffic(pool)
        caps = model.capacities(traffic)
        mean_p, mean_o = float(traffic.mix.mean_prompt[0]), float(traffic.mix.mean_output[0])
        rate = spec.traffic.rate_rps
        if model.colocated:
            sustained = float(caps.mixed[0].sum()) / mean_o
        else:
            is_p, is_d = model.roles == PREFILL, model.roles == DECODE
            sustained = min(
                float(caps.prefill[0][is_p].sum()) / mean_p, float(caps.decode[0][is_d].sum()) / mean_o
            )
            peak_prompt = rate * (1.0 + spec.traffic.diurnal_amplitude) * mean_p / max(int(is_p.sum()), 1)
            need = peak_prompt * model.step.kv_bytes_token / 1e9
            if need > spec.kv_link_gb_s:
                why = f"{need:.2f} GB/s of KV per prefill worker at peak, link {spec.kv_link_gb_s:g} GB/s"
                out.append(_entry(FindingKind.KV_FABRIC_UNDERPROVISIONED, pool, None, why))
            split = _split_capacity(caps.prefill_compute[0], caps.decode[0], mean_p, mean_o)
            colocated = _colocated_capacity(scenario, layout, pool, catalog, physics)
            if colocated > split * (1.0 + NOT_PAYING_MARGIN):
                why = f"colocated {colocated:.0f} req/s, the best split of the same GPUs {split:.0f} req/s"
                out.append(_entry(FindingKind.DISAGGREGATION_NOT_PAYING, pool, None, why))
        if sustained > 0 and rate < UNDERUSED_SHARE * sustained:
            why = f"mean {rate:g} req/s against {sustained:.0f} req/s sustained ({rate / sustained:.0%})"
            out.append(_entry(FindingKind.UNDERUTILISED_POOL, pool, None, why))
    return out


def _worker_facts(scenario: Scenario, layout: FleetLayout, run_h: float) -> list[dict[str, Any]]:
    out = []
    by_key = layout.worker_by_key()
    for d in scenario.life.drained:
        w = by_key[d.worker]
        if _covered(d.at_hour, d.hours, run_h) >= _HALF:
            why = f"drained from hour {d.at_hour:g} while its engine stays up"
            out.append(_entry(FindingKind.HEALTHY_NOT_SERVING, layout.pools[w.pool], w.worker_id, why))
    for label in scenario.labels:
        if label.role == "unknown" or _covered(label.from_hour, None, run_h) < _HALF:
            continue
        node = layout.node_index(label.node) if label.node else None
        targets = [by_key[label.worker]] if label.worker else [w for w in layout.workers if w.node == node]
        for w in targets:
            if w.role.value != label.role:
                why = f"labelled {label.role} from hour {label.from_hour:g}, runs {w.role.value}"
                out.append(_entry(FindingKind.ROLE_DRIFT, layout.pools[w.pool], w.worker_id, why))
    return out


def _telemetry_facts(scenario: Scenario, layout: FleetLayout, run_h: float) -> list[dict[str, Any]]:
    reasons: dict[int, str] = {}  # GPU -> why
    events = [(d.node, d.gpus, d.at_hour, d.hours, "reported degraded") for d in scenario.life.degraded]
    events += [
        (g.node, [g.gpu], g.at_hour, g.recover_after_hours, "lost (Xid 79)") for g in scenario.life.gpu_lost
    ]
    for node_key, gpus, at_hour, hours, what in events:
        if _covered(at_hour, hours, run_h) <= 0:
            continue
        node = layout.node_index(node_key)
        for g in layout.gpus:
            if g.node == node and (gpus is None or g.local_index in gpus):
                reasons.setdefault(g.index, f"GPU {what} from hour {at_hour:g}")
    for g in layout.gpus:
        if g.basic:
            reasons.setdefault(g.index, "utilisation only: dcgm-exporter without profiling fields")
    out: dict[tuple[int, int], dict[str, Any]] = {}
    for index, why in sorted(reasons.items()):
        g = layout.gpus[index]
        if g.worker >= 0:
            w = layout.workers[g.worker]
            out.setdefault(
                (w.pool, w.index),
                _entry(FindingKind.TELEMETRY_DEGRADED, layout.pools[w.pool], w.worker_id, why),
            )
        else:
            pool = layout.pools[layout.node_pools[g.node]]
            out.setdefault((pool.index, -1), _entry(FindingKind.TELEMETRY_DEGRADED, pool, None, why))
    return list(out.values())


def planted_findings(
    scenario: Scenario,
    layout: FleetLayout,
    catalog: Catalog,
    *,
    days: float,
    window_s: float,
    physics: Physics | None = None,
) -> list[dict[str, Any]]:
    """The findings ``scenario`` plants over a run of ``days`` (see the module docstring), pools first."""
    run_h = days * 24.0
    if run_h < window_s / 3600.0:
        return []
    found = _pool_facts(scenario, layout, catalog, physics or Physics())
    found += _worker_facts(scenario, layout, run_h)
    found += _telemetry_facts(scenario, layout, run_h)
    return found
