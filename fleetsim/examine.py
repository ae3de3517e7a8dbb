"""The simulator as the analyzer's examiner: run a scenario, hand its records over, score what comes back.

Scoring shares nothing with the analyzer: it reads findings and the summary only, duck-typed. Pools are
matched by the workers they share (a majority of a truth pool's worker ids), never by name. Misplacement
kinds are scored by counts per (pool, SKU, from_role -> to_role), against the equivalent best split of
each truth segment that matches the analyzer best (most true positives, then fewest false ones); a
worker flagged twice counts once. pool-ratio-drift is scored by episode (consecutive truth segments
with ratio drift) against findings whose time span overlaps it; the kinds a scenario plants by
construction (``fleetsim.planted``, when present) by (pool, kind) or (pool, worker, kind) presence.
"""

from __future__ import annotations

import importlib
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from fleet import histograms
from fleet.catalog import Catalog
from fleet.contract import Finding, FindingKind
from fleetsim.examine_pools import ChangeScore, PoolScore, change_scores, epoch, pool_scores
from fleetsim.layout import build_layout
from fleetsim.measured_facts import missing_fields, underuse
from fleetsim.physics_choice import Physics, draw_seed, resolve_physics
from fleetsim.records import HISTOGRAMS
from fleetsim.scenario import Scenario, load_scenario
from fleetsim.source import dict_batches, jsonl_batches
from fleetsim.truth import compute_truth

MISPLACEMENT = (
    FindingKind.DECODE_ON_LOW_BANDWIDTH,
    FindingKind.PREFILL_ON_HIGH_BANDWIDTH,
    FindingKind.CAPACITY_ON_SMALL_MEMORY,
)
LOST_UNITS = ("tokens", "output_tokens", "requests")  # prompt + output tokens/s, output tokens/s, requests/s
_FLIP = {"prefill": "decode", "decode": "prefill"}


class Result(Protocol):
    """What the examiner reads of an analysis: its findings and its summary."""

    @property
    def findings(self) -> Sequence[Finding]: ...

    @property
    def summary(self) -> Mapping[str, Any]: ...


@dataclass(frozen=True)
class SimRun:
    scenario: str
    seed: int
    days: float
    window_s: float
    gpu_columns: dict[str, Any]
    engine_columns: dict[str, Any]
    truth: dict[str, Any]
    planted: list[dict[str, Any]] | None  # None: fleetsim.planted is not there
    physics: str = "model"


def _stored(histogram: Any) -> bytes | None:
    """A latency histogram as the analyzer's columns take it: the stored form (``fleet.histograms.encode``)
    of one in the contract's form (``le``, cumulative ``counts``, ``count``); stored bytes or None as is."""
    if histogram is None or isinstance(histogram, bytes):
        return histogram
    return histograms.encode(histograms.rebin(histogram["le"], histogram["counts"], histogram["count"]))


def records_to_columns(records: Iterable[Mapping[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Record dicts (``kind`` gpu_sample / engine_sample) -> (GPU columns, engine columns), epoch ``ts``;
    latency histograms (``ttft_histogram``, ...) in the stored form (``fleet.histograms.encode`` bytes)."""
    columns: dict[str, dict[str, list[Any]]] = {
        "gpu_sample": defaultdict(list),
        "engine_sample": defaultdict(list),
    }
    cache: dict[str, float] = {}
    for record in records:
        target = columns[record["kind"]]
        for key, value in record.items():
            if key == "ts" and value not in cache:
                cache[value] = epoch(value)
            if key in HISTOGRAMS:
                target[key].append(_stored(value))
                continue
            target[key].append(cache[value] if key == "ts" else value)
    gpu: dict[str, Any] = dict(columns["gpu_sample"])
    engine: dict[str, Any] = dict(columns["engine_sample"])
    for part in (gpu, engine):
        if "ts" in part:
            part["ts"] = np.asarray(part["ts"], dtype=np.float64)
    return gpu, engine


def _load(scenario: str | Scenario) -> Scenario:
    """A scenario given as itself (e.g. ``with_role_changes``'s copy), a built-in name or a path."""
    return scenario if isinstance(scenario, Scenario) else load_scenario(scenario)


def planted(
    scenario: str | Scenario,
    catalog: Catalog,
    *,
    days: float,
    window_s: float,
    physics: Physics | None = None,
) -> list[dict[str, Any]] | None:
    """The findings the scenario plants by construction; None where ``fleetsim.planted`` does not exist."""
    try:
        module = importlib.import_module("fleetsim.planted")
    except ModuleNotFoundError:
        return None
    sc = _load(scenario)
    layout = build_layout(sc, catalog)
    found = module.planted_findings(sc, layout, catalog, days=days, window_s=window_s, physics=physics)
    return [dict(item) for item in found]


def simulate(
    scenario: str | Scenario,
    catalog: Catalog,
    *,
    days: float,
    window_s: float = 60.0,
    seed: int = 0,
    truth: bool = True,
    physics: str | Physics = "model",
) -> SimRun:
    """A scenario's records as columns, with its ground truth and planted findings, under ``physics``
    (a name: resolved once for the run, from ``seed``). The latency histograms' columns hold the stored
    form (``fleet.histograms.encode`` bytes, or None), built straight from the simulation."""
    sc = _load(scenario)
    chosen = resolve_physics(physics, draw_seed(sc.name)) if isinstance(physics, str) else physics
    batches = dict_batches(
        sc, catalog, seed=seed, days=days, window_s=window_s, physics=chosen, histograms="encoded"
    )
    records = (r for batch in batches for r in batch)
    gpu, engine = records_to_columns(records)
    report = compute_truth(sc, catalog, seed, days, window_s=window_s, physics=chosen) if truth else {}
    plants = planted(sc, catalog, days=days, window_s=window_s, physics=chosen) if truth else None
    return SimRun(sc.name, seed, days, window_s, gpu, engine, report, plants, chosen.name)


def write_jsonl(
    scenario: str | Scenario,
    catalog: Catalog,
    path: Path,
    *,
    days: float,
    window_s: float = 60.0,
    seed: int = 0,
    physics: str | Physics = "model",
) -> int:
    """The scenario's records as a JSON-lines file (as ``phasefit sim run`` writes it); returns its size."""
    sc = _load(scenario)
    chosen = resolve_physics(physics, draw_seed(sc.name)) if isinstance(physics, str) else physics
    written = 0
    with path.open("wb") as fh:
        for data in jsonl_batches(sc, catalog, seed=seed, days=days, window_s=window_s, physics=chosen):
            fh.write(data)
            written += len(data)
    return written


# --- scoring --------------------------------------------------------------------------------------------


@dataclass
class Tally:
    tp: int = 0
    fp: int = 0
    fn: int = 0

    def add(self, other: Tally) -> None:
        self.tp, self.fp, self.fn = self.tp + other.tp, self.fp + other.fp, self.fn + other.fn

    @property
    def truth(self) -> int:
        return self.tp + self.fn

    @property
    def flagged(self) -> int:
        return self.tp + self.fp

    @property
    def precision(self) -> float | None:
        return self.tp / self.flagged if self.flagged else None

    @property
    def recall(self) -> float | None:
        return self.tp / self.truth if self.truth else None


@dataclass
class Score:
    scenario: str
    seed: int
    kinds: dict[str, Tally | None]  # None: no truth for that kind (unscored)
    flagged_by_kind: dict[str, int]
    misplaced: Tally  # by counts per (pool, SKU, from -> to), whatever the kind
    kinds_agree: int  # of the misplaced true positives, those whose kind is the truth's
    lost: dict[str, tuple[float | None, float]]  # unit -> (analyzer estimate or None, truth)
    critical_on_demand_limited: int  # judged over the hours each critical finding spans
    critical_on_demand_limited_segments: int  # judged by the truth segments' majority (coarser)
    notes: list[str] = field(default_factory=list)
    pools: list[PoolScore] = field(default_factory=list)  # per truth pool (fleetsim.examine_pools)
    changes: list[ChangeScore] = field(default_factory=list)
    truth_decision: tuple[tuple[str, ...], ...] = ()  # the truth's best placements, to compare across seeds
    physics: str = "model"


def pool_map(result: Result, truth: Mapping[str, Any]) -> dict[str, str]:
    """Analyzer pool key -> truth pool id, by the majority of each truth pool's workers."""
    where: dict[str, str] = {}
    for row in result.summary.get("workers") or []:
        if row.get("worker_id") and row.get("pool"):
            where[str(row["worker_id"])] = str(row["pool"])
    for f in result.findings:
        if f.worker_id and f.pool:
            where.setdefault(f.worker_id, f.pool)
    out: dict[str, str] = {}
    for pool, info in truth.get("pools", {}).items():
        votes = Counter(where[w] for w in info["workers"] if w in where)
        if votes:
            key, n = votes.most_common(1)[0]
            if 2 * n > len(info["workers"]) or len(votes) == 1:
                out.setdefault(key, pool)
    return out


def _tally(found: Mapping[Any, int], expected: Mapping[Any, int]) -> Tally:
    t = Tally()
    for key in set(found) | set(expected):
        a, b = found.get(key, 0), expected.get(key, 0)
        t.tp, t.fp, t.fn = t.tp + min(a, b), t.fp + max(a - b, 0), t.fn + max(b - a, 0)
    return t


def _misplaced(
    result: Result, truth: Mapping[str, Any], pools: Mapping[str, str]
) -> tuple[Counter[tuple[str, ...]], Counter[tuple[str, ...]]]:
    """(analyzer, truth) counts keyed (pool, sku, from, to, kind); the truth's best-matching splits."""
    sku_of = {w: info["sku"] for p in truth.get("pools", {}).values() for w, info in p["workers"].items()}
    workers: dict[str, tuple[tuple[str, ...], list[str]]] = {}  # worker -> (pool, sku, from, to), kinds
    for f in result.findings:
        if f.kind not in MISPLACEMENT or f.worker_id is None:
            continue
        role = str(f.role.value)
        pool = pools.get(f.pool or "", f"unmatched:{f.pool}")
        key = (pool, f.gpu_sku or sku_of.get(f.worker_id, "?"), role, _FLIP.get(role, "?"))
        workers.setdefault(f.worker_id, (key, []))[1].append(f.kind.value)
    plain: Counter[tuple[str, ...]] = Counter(key for key, _ in workers.values())
    expected: Counter[tuple[str, ...]] = Counter()
    kinds = {k.value for k in MISPLACEMENT}
    for seg in truth.get("segments", []):
        best: tuple[int, int] | None = None
        chosen: Counter[tuple[str, ...]] = Counter()
        for option in seg.get("misplaced_counts") or [[]]:
            rows: Counter[tuple[str, ...]] = Counter()
            for r in option:
                if r["kind"] in kinds:
                    rows[(seg["pool"], r["sku"], r["from_role"], r["to_role"], r["kind"])] += r["count"]
            mine = Counter({k[:4]: 0 for k in rows})
            for k, n in rows.items():
                mine[k[:4]] += n
            t = _tally({k: v for k, v in plain.items() if k[0] == seg["pool"]}, mine)
            if best is None or (t.tp, -t.fp) > best:
                best, chosen = (t.tp, -t.fp), rows
        for row, n in chosen.items():
            expected[row] = max(expected[row], n)
    found: Counter[tuple[str, ...]] = Counter()
    left = Counter(expected)
    for where, named in sorted(workers.values()):
        # A worker flagged under several kinds counts once, under the truth's kind where it has it.
        kind = next((k for k in named if left[(*where, k)] > 0), named[0])
        left[(*where, kind)] -= 1
        found[(*where, kind)] += 1
    return found, expected


def _spans(findings: Iterable[Finding]) -> list[tuple[float, float]]:
    return [(f.first_seen.timestamp(), f.last_seen.timestamp()) for f in findings]


def _ratio_drift(result: Result, truth: Mapping[str, Any], pools: Mapping[str, str]) -> Tally:
    episodes: list[tuple[str, float, float]] = []
    last: tuple[str, int] | None = None
    for d in truth.get("ratio_drift", []):
        if last == (d["pool"], d["segment"] - 1):
            pool, start, _ = episodes[-1]
            episodes[-1] = (pool, start, epoch(d["end"]))
        else:
            episodes.append((d["pool"], epoch(d["start"]), epoch(d["end"])))
        last = (d["pool"], d["segment"])
    found = [
        (pools.get(f.pool or "", ""), *span)
        for f in result.findings
        if f.kind is FindingKind.POOL_RATIO_DRIFT
        for span in _spans([f])
    ]

    def overlaps(a: tuple[str, float, float], b: tuple[str, float, float]) -> bool:
        return a[0] == b[0] and a[1] <= b[2] and b[1] <= a[2]

    tp = sum(1 for e in episodes if any(overlaps(e, f) for f in found))
    fp = sum(1 for f in found if not any(overlaps(e, f) for e in episodes))
    return Tally(tp, fp, len(episodes) - tp)


def _planted(
    result: Result,
    plants: Sequence[Mapping[str, Any]],
    pools: Mapping[str, str],
    kind: str,
    grey: frozenset[tuple[str, str | None]] = frozenset(),
) -> Tally:
    """Presence by (pool) or (pool, worker); a finding on a grey (unscored) pool or worker counts neither
    way."""
    names = {}
    for pool_id in set(pools.values()):
        names[pool_id] = pool_id
        names[pool_id.split("/", 1)[-1]] = pool_id
    wanted = {
        (names.get(str(p["pool"]), str(p["pool"])), p.get("worker_id")) for p in plants if p["kind"] == kind
    }
    found = {
        (pools.get(f.pool or "", f"unmatched:{f.pool}"), f.worker_id)
        for f in result.findings
        if f.kind.value == kind
    }

    def match(t: tuple[str, Any], a: tuple[str, Any]) -> bool:
        return t[0] == a[0] and (t[1] is None or t[1] == a[1])

    tp = sum(1 for t in wanted if any(match(t, a) for a in found))
    fp = sum(1 for a in found if not any(match(t, a) for t in wanted) and not any(match(g, a) for g in grey))
    return Tally(tp, fp, len(wanted) - tp)


def _unqueued(hourly: Sequence[float], lo_s: float, hi_s: float) -> bool:
    """Whether the truth's windows over the hours [lo_s, hi_s] (seconds from its start) were mostly
    unqueued; a span outside the truth's hours counts as neither."""
    first = max(0, int(lo_s // 3600))
    last = min(len(hourly), max(first + 1, int(-(-hi_s // 3600))))
    shares = hourly[first:last] if hi_s >= 0 else []
    return bool(shares) and sum(shares) / len(shares) < 0.5


def _critical_on_demand_limited(
    result: Result, truth: Mapping[str, Any], pools: Mapping[str, str], *, by_segment: bool = False
) -> int:
    """Critical findings over time the truth's pool was demand-limited: work queued in fewer than half the
    windows of the hours the finding spans (``by_segment``: in every truth segment it overlaps, each judged
    by the majority of its windows, which can be days long and hide a peak's backlog)."""
    segments = defaultdict(list)
    for seg in truth.get("segments", []):
        segments[seg["pool"]].append((epoch(seg["start"]), epoch(seg["end"]), bool(seg["demand_limited"])))
    start = epoch(truth["start"]) if truth.get("start") else None
    count = 0
    for f in result.findings:
        if f.severity.value != "critical" or (f.pool or "") not in pools:
            continue
        pool = pools[f.pool or ""]
        lo, hi = f.first_seen.timestamp(), f.last_seen.timestamp()
        hourly = (truth.get("pools") or {}).get(pool, {}).get("saturated_hourly")
        if not by_segment and hourly and start is not None:
            count += _unqueued(hourly, lo - start, hi - start)
            continue
        over = [dl for a, b, dl in segments[pool] if a <= hi and lo <= b]
        count += bool(over) and all(over)
    return count


def _lost(
    result: Result, truth: Mapping[str, Any], notes: list[str]
) -> dict[str, tuple[float | None, float]]:
    mean = (result.summary.get("fleet") or {}).get("lost_mean") or {}
    out: dict[str, tuple[float | None, float]] = {}
    for unit in LOST_UNITS:
        key = f"lost_{unit}_per_s"
        value = (mean.get(f"{unit}_per_s") or {}).get("value")
        if value is None:
            notes.append(
                f"summary['fleet']['lost_mean']['{unit}_per_s'] missing: no {unit.replace('_', ' ')} estimate"
            )
        out[unit] = (None if value is None else float(value), float(truth.get(key, 0.0)))
    return out


def score(result: Result, run: SimRun) -> Score:
    """The analyzer's result on ``run`` against its truth, by counts (module docstring)."""
    truth = run.truth
    pools = pool_map(result, truth)
    notes = [
        f"no analyzer pool matches truth pool {p}" for p in truth.get("pools", {}) if p not in pools.values()
    ]
    found, expected = _misplaced(result, truth, pools)
    kinds: dict[str, Tally | None] = {}
    for kind in MISPLACEMENT:
        kinds[kind.value] = _tally(
            {k: n for k, n in found.items() if k[4] == kind.value},
            {k: n for k, n in expected.items() if k[4] == kind.value},
        )
    plain_found: Counter[tuple[str, ...]] = Counter()
    plain_expected: Counter[tuple[str, ...]] = Counter()
    for k, n in found.items():
        plain_found[k[:4]] += n
    for k, n in expected.items():
        plain_expected[k[:4]] += n
    kinds_agree = sum(t.tp for t in kinds.values() if t is not None)
    kinds[FindingKind.POOL_RATIO_DRIFT.value] = _ratio_drift(result, truth, pools)
    if run.planted is None:
        notes.append("fleetsim.planted not found: the planted kinds are unscored")
    under, telemetry = FindingKind.UNDERUTILISED_POOL.value, FindingKind.TELEMETRY_DEGRADED.value
    (due_under, grey_under), (due_lost, grey_lost) = underuse(truth), missing_fields(run.gpu_columns, truth)
    # What the run measured replaces what the scenario planted for these two kinds; a pool-level telemetry
    # plant (GPUs serving no worker) stays: no worker's samples show it.
    plants = [
        p
        for p in run.planted or []
        if p["kind"] != under and not (p["kind"] == telemetry and p.get("worker_id") is not None)
    ]
    plants += due_under + due_lost
    grey = {under: frozenset(grey_under), telemetry: frozenset(grey_lost)}
    for kind in FindingKind:
        if kind.value not in kinds:
            kinds[kind.value] = (
                None
                if run.planted is None
                else _planted(result, plants, pools, kind.value, grey.get(kind.value, frozenset()))
            )
    return Score(
        scenario=run.scenario,
        seed=run.seed,
        kinds=kinds,
        flagged_by_kind=dict(Counter(f.kind.value for f in result.findings)),
        misplaced=_tally(plain_found, plain_expected),
        kinds_agree=kinds_agree,
        lost=_lost(result, truth, notes),
        critical_on_demand_limited=_critical_on_demand_limited(result, truth, pools),
        critical_on_demand_limited_segments=_critical_on_demand_limited(
            result, truth, pools, by_segment=True
        ),
        notes=notes,
        pools=pool_scores(result.summary, truth, pools, found),
        changes=change_scores(result.summary, truth, pools),
        truth_decision=_truth_decision(truth),
        physics=run.physics,
    )


def _truth_decision(truth: Mapping[str, Any]) -> tuple[tuple[str, ...], ...]:
    """The truth's shown best placement per pool and segment (what a right decision would be)."""
    return tuple(
        (seg["pool"], repr(sorted((sku, sorted(r.items())) for sku, r in seg["best_placement"].items())))
        for seg in truth.get("segments", [])
    )


def summarise(scores: Sequence[Score]) -> dict[str, dict[str, Any]]:
    """Per kind: truth and flagged counts (all runs), precision and recall per seed, mean and spread."""
    out: dict[str, dict[str, Any]] = {}
    seeds = sorted({s.seed for s in scores})
    for kind in [k.value for k in FindingKind] + ["misplaced (any kind)"]:
        per_seed: list[Tally] = []
        total, scored = Tally(), False
        for seed in seeds:
            t = Tally()
            for s in scores:
                got = s.misplaced if kind == "misplaced (any kind)" else s.kinds.get(kind)
                if s.seed == seed and got is not None:
                    t.add(got)
                    scored = True
            per_seed.append(t)
            total.add(t)
        precision = [p for t in per_seed if (p := t.precision) is not None]
        recall = [r for t in per_seed if (r := t.recall) is not None]
        out[kind] = {
            "scored": scored,
            "truth": total.truth,
            "flagged": sum(s.flagged_by_kind.get(kind, 0) for s in scores) if not scored else total.flagged,
            "tp": total.tp,
            "fp": total.fp,
            "fn": total.fn,
            "precision_mean": float(np.mean(precision)) if precision else None,
            "precision_spread": float(np.std(precision)) if precision else None,
            "recall_mean": float(np.mean(recall)) if recall else None,
            "recall_spread": float(np.std(recall)) if recall else None,
        }
    return out
