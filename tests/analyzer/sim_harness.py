"""The simulator as the analyzer's examiner: run a scenario, feed its records to the analyzer, score the
result against the scenario's ground truth. Shared by tests/analyzer/test_accuracy.py and
benchmarks/analyzer_accuracy.py (only tests and benchmarks may import the simulator).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from analyzer.misplacement import MISPLACEMENT_KINDS
from analyzer.pipeline import AnalysisResult
from fleetsim.scenario import load_scenario
from fleetsim.source import dict_batches, jsonl_batches
from fleetsim.truth import compute_truth
from fleet.catalog import Catalog

_LIST_FIELDS = ("gpu_uuids",)


@dataclass(frozen=True)
class SimRun:
    scenario: str
    days: float
    window_s: float
    gpu_columns: dict[str, Any]
    engine_columns: dict[str, Any]
    truth: dict[str, Any]


def _epoch(text: str, cache: dict[str, float]) -> float:
    value = cache.get(text)
    if value is None:
        value = cache[text] = datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    return value


def records_to_columns(records: Iterable[Mapping[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Record dicts (``kind`` gpu_sample / engine_sample) -> (GPU columns, engine columns), epoch ``ts``."""
    columns: dict[str, dict[str, list[Any]]] = {
        "gpu_sample": defaultdict(list),
        "engine_sample": defaultdict(list),
    }
    cache: dict[str, float] = {}
    for record in records:
        target = columns[record["kind"]]
        for key, value in record.items():
            target[key].append(_epoch(value, cache) if key == "ts" else value)
    gpu: dict[str, Any] = dict(columns["gpu_sample"])
    engine: dict[str, Any] = dict(columns["engine_sample"])
    for part in (gpu, engine):
        if "ts" in part:
            part["ts"] = np.asarray(part["ts"], dtype=np.float64)
    return gpu, engine


def simulate(
    scenario: str, catalog: Catalog, *, days: float, window_s: float = 60.0, seed: int = 0, truth: bool = True
) -> SimRun:
    """Run a built-in scenario and return its records as columns, with its ground truth."""
    sc = load_scenario(scenario)
    records = (
        r for batch in dict_batches(sc, catalog, seed=seed, days=days, window_s=window_s) for r in batch
    )
    gpu, engine = records_to_columns(records)
    report = compute_truth(sc, catalog, seed, days, window_s=window_s) if truth else {}
    return SimRun(scenario, days, window_s, gpu, engine, report)


def write_jsonl(
    scenario: str, catalog: Catalog, path: Path, *, days: float, window_s: float = 60.0, seed: int = 0
) -> int:
    """The scenario's records as a JSON-lines file (as ``phasefit sim run`` writes it); returns its size."""
    sc = load_scenario(scenario)
    written = 0
    with path.open("wb") as fh:
        for data in jsonl_batches(sc, catalog, seed=seed, days=days, window_s=window_s):
            fh.write(data)
            written += len(data)
    return written


@dataclass(frozen=True)
class Score:
    scenario: str
    true_positives: int
    false_positives: int
    false_negatives: int
    flagged: tuple[str, ...]
    truth_misplaced: tuple[str, ...]
    lost_estimate: float  # analyzer: time-weighted mean over the range, fleet total
    lost_low: float
    lost_high: float
    lost_truth: float
    truth_capacity: float  # time-weighted current saturated tokens/s in the truth
    worker_findings: int  # every worker-level finding (any kind)
    kinds_agree: int  # true positives whose finding kind is the truth's

    @property
    def lost_error(self) -> float | None:
        """|estimate - truth| / truth; None where the truth loses (almost) nothing."""
        if self.lost_truth <= 0.01 * max(self.truth_capacity, 1.0):
            return None
        return abs(self.lost_estimate - self.lost_truth) / self.lost_truth

    @property
    def lost_share_error(self) -> float:
        """|estimate - truth| over the truth's capacity (defined for every scenario)."""
        return abs(self.lost_estimate - self.lost_truth) / max(self.truth_capacity, 1.0)


def _time_weighted(truth: Mapping[str, Any], key: str) -> float:
    total = 0.0
    weight = 0.0
    for segment in truth.get("segments", []):
        span = _epoch(segment["end"], {}) - _epoch(segment["start"], {})
        total += span * float(segment[key])
        weight += span
    return total / weight if weight > 0 else 0.0


def _pool_weighted_sum(truth: Mapping[str, Any], key: str) -> float:
    """Time-weighted per pool, summed over pools (as the truth's lost_tokens_per_s is)."""
    by_pool: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for segment in truth.get("segments", []):
        by_pool[segment["pool"]].append(segment)
    return sum(_time_weighted({"segments": segments}, key) for segments in by_pool.values())


def score(result: AnalysisResult, truth: Mapping[str, Any], scenario: str) -> Score:
    flagged = {
        f.worker_id for f in result.findings if f.worker_id is not None and f.kind in MISPLACEMENT_KINDS
    }
    expected = {w["worker_id"] for w in truth.get("misplaced_workers", [])}
    truth_kinds = {(w["worker_id"], w["kind"]) for w in truth.get("misplaced_workers", [])}
    found_kinds = {(f.worker_id, f.kind.value) for f in result.findings if f.kind in MISPLACEMENT_KINDS}
    fleet = result.summary["fleet"]
    return Score(
        scenario=scenario,
        true_positives=len(flagged & expected),
        false_positives=len(flagged - expected),
        false_negatives=len(expected - flagged),
        flagged=tuple(sorted(flagged)),
        truth_misplaced=tuple(sorted(expected)),
        lost_estimate=float(fleet["lost_tokens_per_s_mean"] or 0.0),
        lost_low=float(fleet["lost_tokens_per_s_mean_low"] or 0.0),
        lost_high=float(fleet["lost_tokens_per_s_mean_high"] or 0.0),
        lost_truth=float(truth.get("lost_tokens_per_s", 0.0)),
        truth_capacity=_pool_weighted_sum(truth, "current_tokens_per_s"),
        worker_findings=sum(1 for f in result.findings if f.worker_id is not None),
        kinds_agree=len({w for w, _ in truth_kinds & found_kinds}),
    )


def totals(scores: Iterable[Score]) -> dict[str, float]:
    scores = list(scores)
    tp = sum(s.true_positives for s in scores)
    fp = sum(s.false_positives for s in scores)
    fn = sum(s.false_negatives for s in scores)
    errors = [e for s in scores if (e := s.lost_error) is not None]
    return {
        "precision": tp / (tp + fp) if tp + fp else 1.0,
        "recall": tp / (tp + fn) if tp + fn else 1.0,
        "lost_error_median": float(np.median(errors)) if errors else math.nan,
        "lost_error_max": max(errors) if errors else math.nan,
    }
