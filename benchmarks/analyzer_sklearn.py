"""Does scikit-learn earn a place in the analyzer? Each candidate use against the simple method the analyzer
uses, on simulated scenarios where the answer is known (issue 6, section 5).

1. Prefill speed (tokens per busy second) per worker: the analyzer's median of hourly ratios against the
   ratio of sums, least squares through the origin, scikit-learn's HuberRegressor and RANSACRegressor.
   Fit on the first four days of the demo scenario, predict every later hour's tokens from its busy
   share; also with 5% of the training hours corrupted (counters reset, a gap read as idle).
2. Decode step time, extrapolated to the saturated batch: fit on the capacity scenario's decode buckets
   below 200 running sequences, predict the TPOT of the buckets where the H100 decode workers ran saturated
   (KV cache full, ~290 sequences). The analyzer's fit (model step time x scale, with the decode compute
   rate fitted where large batches show it) against a straight line (numpy) and HuberRegressor on the
   same line and on the model's terms.
3. Degraded workers: the analyzer's rules (GPU lost, degraded or silent, utilisation-only telemetry)
   against IsolationForest over each worker-hour's activity counters, scored against the GPUs the demo
   scenario loses (its ground truth), counting the other workers flagged.

    .venv/bin/python benchmarks/analyzer_sklearn.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analyzer.model.roofline import step_time
from analyzer.pipeline import AnalysisResult, analyze, input_from_samples
from analyzer.pools.decode_fit import fit_decode_line
from analyzer.telemetry.frames import ROLES
from fleet.catalog import load_catalog
from fleet.contract import FindingKind, Role
from fleetsim.examine import simulate

PREFILL, DECODE = ROLES.index(Role.PREFILL), ROLES.index(Role.DECODE)


def _analysis(name: str, days: float) -> tuple[AnalysisResult, dict[str, Any]]:
    catalog = load_catalog()
    run = simulate(name, catalog, days=days)
    return analyze(input_from_samples(run.gpu_columns, run.engine_columns), catalog), run.truth


def _median_error(predicted: np.ndarray, actual: np.ndarray) -> float:
    keep = actual > 0
    return float(np.median(np.abs(predicted[keep] / actual[keep] - 1.0)))


def prefill_speed(result: AnalysisResult) -> list[tuple[str, float, float]]:
    from sklearn.linear_model import HuberRegressor, RANSACRegressor

    grid = result.grid
    split = 96  # first four days train
    rng = np.random.default_rng(0)
    rows = [i for i in range(len(grid.workers)) if (grid.role[i] == PREFILL).mean() > 0.9]
    out = []
    for corrupt in (0.0, 0.05):
        errors: dict[str, list[float]] = {
            "ratio of sums": [],
            "median of hourly ratios (analyzer)": [],
            "least squares": [],
            "Huber": [],
            "RANSAC": [],
        }
        for i in rows:
            busy = grid.gpu_util[i]
            tokens = grid.rate(grid.prompt_tokens[i], (i, slice(None)))
            ok = np.isfinite(busy) & np.isfinite(tokens) & (busy > 0.05)
            train = ok.copy()
            train[split:] = False
            test = ok.copy()
            test[:split] = False
            x, y = busy[train].copy(), tokens[train].copy()
            bad = rng.random(x.size) < corrupt
            y[bad] *= rng.choice([0.0, 3.0], size=int(bad.sum()))  # counter resets and double counts
            errors["ratio of sums"].append(_median_error(busy[test] * (y.sum() / x.sum()), tokens[test]))
            errors["median of hourly ratios (analyzer)"].append(
                _median_error(busy[test] * float(np.median(y / x)), tokens[test])
            )
            errors["least squares"].append(_median_error(busy[test] * float(x @ y / (x @ x)), tokens[test]))
            huber = HuberRegressor(fit_intercept=False).fit(x[:, None], y)
            errors["Huber"].append(_median_error(huber.predict(busy[test][:, None]), tokens[test]))
            ransac = RANSACRegressor(random_state=0).fit(x[:, None], y)
            errors["RANSAC"].append(_median_error(ransac.predict(busy[test][:, None]), tokens[test]))
        for method, values in errors.items():
            out.append(
                (
                    f"{method}{' , 5% corrupted' if corrupt else ''}",
                    float(np.median(values)),
                    float(np.max(values)),
                )
            )
    return out


def decode_step(result: AnalysisResult) -> list[tuple[str, float, float]]:
    from sklearn.linear_model import HuberRegressor

    (pool,) = result.pools
    grid = result.grid
    traffic = pool.traffic
    context = traffic.isl + traffic.osl / 2.0
    out: dict[str, list[float]] = {
        "analyzer (model x scale, fitted compute)": [],
        "straight line (numpy)": [],
        "Huber on the line": [],
        "Huber on the model's terms": [],
    }
    for group in pool.pool.groups:
        d = group.deployment
        assert d is not None
        rows = np.array(group.members)
        ok = (grid.role[rows] == DECODE) & np.isfinite(grid.tpot_s[rows]) & np.isfinite(context)[None, :]
        batch, tpot = grid.running[rows][ok], grid.tpot_s[rows][ok]
        ctx = np.broadcast_to(context, ok.shape)[ok]
        saturated = grid.kv_usage[rows][ok] >= 0.9
        train, test = (batch < 200) & ~saturated, saturated
        if train.sum() < 10 or test.sum() < 3:
            continue
        params = pool.calibration.params()
        line = fit_decode_line(d, params, batch[train], ctx[train], tpot[train])
        fitted = (
            params
            if line.compute_efficiency is None
            else params.__class__(**{**params.as_dict(), "compute_efficiency": line.compute_efficiency})
        )
        model = np.array(
            [
                step_time(d, fitted, decode_seqs=b, context_len=c).total_s
                for b, c in zip(batch[test], ctx[test], strict=True)
            ]
        )
        out["analyzer (model x scale, fitted compute)"].append(_median_error(line.scale * model, tpot[test]))
        a, b = np.polyfit(batch[train], tpot[train], 1)[::-1]
        out["straight line (numpy)"].append(_median_error(a + b * batch[test], tpot[test]))
        huber = HuberRegressor().fit(batch[train][:, None], tpot[train])
        out["Huber on the line"].append(_median_error(huber.predict(batch[test][:, None]), tpot[test]))
        base = np.array(
            [
                step_time(d, params, decode_seqs=b, context_len=c).total_s
                for b, c in zip(batch, ctx, strict=True)
            ]
        )
        small = np.array([step_time(d, params, decode_seqs=1.0, context_len=c).total_s for c in ctx])
        terms = np.column_stack([small, base - small])
        huber_terms = HuberRegressor(fit_intercept=False).fit(terms[train], tpot[train])
        out["Huber on the model's terms"].append(_median_error(huber_terms.predict(terms[test]), tpot[test]))
    return [(k, float(np.median(v)), float(np.max(v))) for k, v in out.items() if v]


def degraded_workers(result: AnalysisResult, truth: dict[str, Any]) -> list[tuple[str, int, int, int]]:
    from sklearn.ensemble import IsolationForest

    lost = {g["worker_id"] for g in truth.get("gpu_lost", []) if g.get("worker_id")}
    rules = {f.worker_id for f in result.findings if f.kind is FindingKind.TELEMETRY_DEGRADED}
    grid = result.grid
    features = np.stack(
        [
            grid.gpu_util,
            grid.tensor_active,
            grid.dram_active,
            grid.sm_active,
            grid.rate(grid.prompt_tokens + grid.generation_tokens),
        ],
        axis=-1,
    )
    x = np.nan_to_num(features.reshape(-1, features.shape[-1]), nan=-1.0)
    x = x / np.maximum(np.abs(x).max(axis=0), 1e-9)
    labels = IsolationForest(random_state=0, contamination=0.01).fit_predict(x).reshape(grid.shape)
    forest = {w for i, w in enumerate(grid.workers) if (labels[i] == -1).sum() >= 3}
    return [
        (name, len(found & lost), len(lost - found), len(found - lost))
        for name, found in (("rules (analyzer)", rules), ("IsolationForest", forest))
    ]


def main() -> int:
    began = time.perf_counter()
    demo, demo_truth = _analysis("demo", 7.0)
    capacity, _ = _analysis("capacity", 7.0)
    print(
        "1. Prefill speed per worker, predicting later hours' tokens (median / worst |error| over workers)\n"
    )
    print("| method | median | worst |")
    print("|---|---|---|")
    for name, median, worst in prefill_speed(demo):
        print(f"| {name} | {median:.2%} | {worst:.2%} |")
    print("\n2. Decode TPOT at the saturated batch, fitted below 200 sequences (capacity scenario)\n")
    print("| method | median | worst |")
    print("|---|---|---|")
    for name, median, worst in decode_step(capacity):
        print(f"| {name} | {median:.2%} | {worst:.2%} |")
    print("\n3. Degraded workers against the demo's lost GPUs (ground truth)\n")
    print("| method | found | missed | other workers flagged |")
    print("|---|---|---|---|")
    for name, found, missed, extra in degraded_workers(demo, demo_truth):
        print(f"| {name} | {found} | {missed} | {extra} |")
    print(f"\n({time.perf_counter() - began:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
