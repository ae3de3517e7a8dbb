"""Scoring the analyzer's pool figures against the truth: state, lost output tokens, phantom loss, the
decision it took, and the role changes it saw and judged.

Per truth pool of a run (a "pool-run"), read duck-typed from the summary's ``pools`` (analyzer pools
are matched to truth pools by their workers, ``examine.pool_map``):

- state: supply-limited or demand-limited. The truth's is the time-weighted majority of its segments
  (a segment is demand-limited when its queues were empty in most windows); the analyzer's the same
  majority of its segments' ``demand_limited`` (its pool's own where no segment has one).
- lost output tokens/s: the analyzer's ``lost_mean.output_tokens_per_s`` (``value``, ``low``, ``high``)
  against the truth's time-weighted loss. Scored as a ratio where the truth lost something; on pools
  whose best split is the current one in every segment, any reported loss is phantom.
- the decision: which workers of which SKU it would move where, and the split it recommends, per SKU.
  Compared across seeds of one scenario by ``decisions_agree``.

Role changes (truth ``changes``) are seen when an analyzer change of the same pool names one of the
moved workers under its old or new id within ``CHANGE_SLACK_H`` hours of the change, and judged when
its verdict is one that compares (not "too early to tell" / "not comparable" / "not carried out").
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

RATIO_BAND = (0.75, 1.33)  # a loss estimate within this ratio of the truth counts as right
CHANGE_SLACK_H = 3.0
_UNJUDGED = {"too early to tell", "not comparable", "not carried out"}


def epoch(text: str) -> float:
    """An RFC 3339 timestamp of the truth (``Z`` or an offset) as epoch seconds."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


@dataclass(frozen=True)
class PoolScore:
    pool: str  # the truth's pool id
    matched: bool  # an analyzer pool holds most of its workers
    truth_demand_limited: bool
    reported_demand_limited: bool | None
    truth_lost_output: float
    reported_lost_output: float | None
    reported_low: float | None
    reported_high: float | None
    current_is_best: bool  # in every segment: nothing to gain, so any reported loss is phantom
    decision: tuple[tuple[str, ...], ...] = ()
    # What the analyzer says its loss rests on (the least direct of its pools'); "unsaid" where it does not
    basis: str = "unsaid"

    @property
    def state_right(self) -> bool | None:
        if self.reported_demand_limited is None:
            return None
        return self.reported_demand_limited == self.truth_demand_limited

    @property
    def ratio(self) -> float | None:
        if self.reported_lost_output is None or self.truth_lost_output <= 0:
            return None
        return self.reported_lost_output / self.truth_lost_output

    @property
    def in_band(self) -> bool | None:
        r = self.ratio
        return None if r is None else RATIO_BAND[0] <= r <= RATIO_BAND[1]

    @property
    def truth_in_range(self) -> bool | None:
        if self.truth_lost_output <= 0 or self.reported_low is None or self.reported_high is None:
            return None
        return self.reported_low <= self.truth_lost_output <= self.reported_high

    @property
    def phantom(self) -> float | None:
        """Output tokens/s reported lost on a pool with nothing to gain (None: the pool had something)."""
        if not self.current_is_best:
            return None
        return self.reported_lost_output or 0.0


@dataclass(frozen=True)
class ChangeScore:
    pool: str
    at: str
    seen: bool
    judged: bool
    verdict: str | None
    truth_gain_output: float | None
    reported_gain_output: float | None


def _truth_pools(truth: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Per truth pool: time-weighted demand-limited share and lost output, current-is-best everywhere."""
    out: dict[str, dict[str, Any]] = defaultdict(lambda: {"dl": 0.0, "lost": 0.0, "span": 0.0, "best": True})
    for seg in truth.get("segments", []):
        span = epoch(seg["end"]) - epoch(seg["start"])
        p = out[seg["pool"]]
        p["span"] += span
        p["dl"] += span * bool(seg["demand_limited"])
        p["lost"] += span * float(seg["lost_output_tokens_per_s"])
        p["best"] = p["best"] and bool(seg["current_is_best"])
    return out


def _state(pool: Mapping[str, Any]) -> bool | None:
    """The analyzer's pool state over the range, as the truth's is taken: the time-weighted majority of its
    segments' ``demand_limited`` (segments without one left out); the pool's own where no segment says."""
    span = weight = 0.0
    for seg in pool.get("segments") or []:
        if seg.get("demand_limited") is None or not seg.get("start") or not seg.get("end"):
            continue
        length = epoch(str(seg["end"])) - epoch(str(seg["start"]))
        span += length
        weight += length * bool(seg["demand_limited"])
    if span > 0:
        return weight > 0.5 * span
    value = pool.get("demand_limited")
    return None if value is None else bool(value)


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


def _decision(
    pools: Sequence[Mapping[str, Any]], flagged: Counter[tuple[str, ...]]
) -> tuple[tuple[str, ...], ...]:
    """What the analyzer decided for a truth pool: how many workers of each SKU it would move from which
    role to which (the kind it names them by is not the decision), and the recommended split per SKU."""
    moves: Counter[tuple[str, ...]] = Counter()
    for key, n in flagged.items():
        moves[key[:3]] += n  # (sku, from, to): the kind dropped
    rows = [(*key, str(n)) for key, n in sorted(moves.items())]
    for p in pools:
        for group, r in sorted((p.get("recommended") or {}).items()):
            rows.append(("split", group, str(r.get("prefill_best")), str(r.get("decode_best"))))
    return tuple(rows)


BASES = ("measured", "calibrated", "transferred", "model")


def _basis(pools: Sequence[Mapping[str, Any]]) -> str:
    """The least direct ``loss_basis`` of the analyzer's pools (``BASES`` order); "unsaid" where one says
    none."""
    said = [str(p.get("loss_basis")) for p in pools]
    if not said or any(b not in BASES for b in said):
        return "unsaid"
    return max(said, key=BASES.index)


def pool_scores(
    summary: Mapping[str, Any],
    truth: Mapping[str, Any],
    pools: Mapping[str, str],
    flagged: Counter[tuple[str, ...]],
) -> list[PoolScore]:
    """One score per truth pool; ``flagged`` counts the analyzer's misplaced workers keyed (pool, ...)."""
    by_truth: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for p in summary.get("pools") or []:
        if str(p.get("pool")) in pools:
            by_truth[pools[str(p.get("pool"))]].append(p)
    out = []
    for pool, t in sorted(_truth_pools(truth).items()):
        mine = by_truth.get(pool, [])
        means = [(p.get("lost_mean") or {}).get("output_tokens_per_s") or {} for p in mine]
        lost = [_float(m.get("value")) for m in means]
        low = [_float(m.get("low")) for m in means]
        high = [_float(m.get("high")) for m in means]
        states = [_state(p) for p in mine]
        span = max(t["span"], 1e-9)
        out.append(
            PoolScore(
                pool=pool,
                matched=bool(mine),
                truth_demand_limited=t["dl"] > 0.5 * span,
                reported_demand_limited=None if not states or None in states else all(states),
                truth_lost_output=t["lost"] / span,
                reported_lost_output=None if not lost or None in lost else sum(x or 0.0 for x in lost),
                reported_low=None if not low or None in low else sum(x or 0.0 for x in low),
                reported_high=None if not high or None in high else sum(x or 0.0 for x in high),
                current_is_best=t["best"],
                decision=_decision(mine, Counter({k[1:]: n for k, n in flagged.items() if k[0] == pool})),
                basis=_basis(mine),
            )
        )
    return out


def change_scores(
    summary: Mapping[str, Any], truth: Mapping[str, Any], pools: Mapping[str, str]
) -> list[ChangeScore]:
    """Each role change the truth carried out: seen (and judged) by the analyzer or not."""
    reported: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for p in summary.get("pools") or []:
        for change in p.get("changes") or []:
            if change.get("verdict") != "not carried out":
                reported[pools.get(str(p.get("pool")), "")].append(change)
    out = []
    for change in truth.get("changes", []):
        ids = {w["worker_id"] for w in change["workers"]} | {
            w["new_worker_id"] for w in change["workers"] if w.get("new_worker_id")
        }
        at = epoch(change["at"])
        match = next(
            (
                c
                for c in reported.get(change["pool"], [])
                if abs(epoch(str(c["at"])) - at) <= CHANGE_SLACK_H * 3600.0
                and ids & {m["worker_id"] for m in c.get("moved") or []}
            ),
            None,
        )
        verdict = None if match is None else str(match.get("verdict"))
        out.append(
            ChangeScore(
                pool=change["pool"],
                at=change["at"],
                seen=match is not None,
                judged=verdict is not None and verdict not in _UNJUDGED,
                verdict=verdict,
                truth_gain_output=_float(change.get("realized_gain_output_tokens_per_s")),
                reported_gain_output=None
                if match is None
                else _float(match.get("realized_output_tokens_per_s")),
            )
        )
    return out


@dataclass
class PoolTotals:
    """Pool-run measures over many runs (one physics)."""

    pool_runs: int = 0
    state_scored: int = 0
    state_right: int = 0
    loss_scored: int = 0
    in_band: int = 0
    range_scored: int = 0
    truth_in_range: int = 0
    ratios: list[float] = field(default_factory=list)
    # The same two loss measures over the supply-limited pool-runs with a true loss alone (the truth's
    # state): where the loss is undelivered demand, not idle capacity.
    supply_loss_scored: int = 0
    supply_in_band: int = 0
    supply_range_scored: int = 0
    supply_in_range: int = 0
    # Pool-runs with a true loss by what the analyzer said the loss rests on: [scored, in band, in range]
    by_basis: dict[str, list[int]] = field(default_factory=dict)
    phantom_pools: int = 0  # pool-runs with nothing to gain
    phantom_reported: int = 0  # ... of which the analyzer reported a loss on
    phantom_tokens: float = 0.0  # output tokens/s reported on them, summed
    changes: int = 0
    changes_seen: int = 0
    changes_judged: int = 0

    def add_pools(self, scores: Sequence[PoolScore]) -> None:
        for s in scores:
            self.pool_runs += 1
            if s.state_right is not None:
                self.state_scored += 1
                self.state_right += s.state_right
            if s.ratio is not None:
                self.loss_scored += 1
                self.in_band += bool(s.in_band)
                self.ratios.append(s.ratio)
            if s.truth_in_range is not None:
                self.range_scored += 1
                self.truth_in_range += s.truth_in_range
            if s.ratio is not None:
                counts = self.by_basis.setdefault(s.basis, [0, 0, 0])
                counts[0] += 1
                counts[1] += bool(s.in_band)
                counts[2] += bool(s.truth_in_range)
            if not s.truth_demand_limited:
                self.supply_loss_scored += s.ratio is not None
                self.supply_in_band += bool(s.in_band)
                self.supply_range_scored += s.truth_in_range is not None
                self.supply_in_range += bool(s.truth_in_range)
            if s.phantom is not None:
                self.phantom_pools += 1
                self.phantom_reported += s.phantom > 0.5
                self.phantom_tokens += s.phantom

    def add_changes(self, scores: Sequence[ChangeScore]) -> None:
        self.changes += len(scores)
        self.changes_seen += sum(s.seen for s in scores)
        self.changes_judged += sum(s.judged for s in scores)


def decisions_agree(decisions: Mapping[str, Mapping[int, Any]]) -> tuple[int, int]:
    """(scenarios whose seeds all took the same decision, scenarios run under two seeds or more)."""
    runs = [by_seed for by_seed in decisions.values() if len(by_seed) > 1]
    agree = sum(len({repr(d) for d in by_seed.values()}) == 1 for by_seed in runs)
    return agree, len(runs)
