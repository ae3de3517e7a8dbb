"""Per-pool latency targets: rules an operator writes, and the one that applies to a pool.

A rule names the pools it is for by any of ``cluster``, ``deployment`` and ``model`` (none: every pool)
and sets at least one target, in seconds at the 90th percentile: ``ttft_p90_s`` (time to first token),
``tpot_p90_s`` (time per output token) and ``e2e_p90_s`` (end to end). Rules come from three places
(:data:`TargetSource`): the analyzer's settings (``PHASEFIT_ANALYZER_TARGETS``), the operator's catalog
file (``targets:``) and the fleet-wide TPOT default (``PHASEFIT_ANALYZER_TPOT_SLO_S``).

Resolution (:func:`resolve`): of the rules that match a pool, the most specific applies, whole (a target it
leaves unset is unset for that pool, whatever less specific rules say). More match keys is more specific;
at an equal count a ``model`` equal to the pool's served model id beats one that names the pool's catalog
model (its key, an HF id or an alias); then a settings rule beats a catalog rule, which beats the global
default. Two rules of one source that match exactly the same pools are refused where they are read
(:func:`check_distinct`); two that still tie for a pool (``{"cluster": "east"}`` and ``{"model": "x"}``
for ``east/x``) resolve to the one listed first, and the pool's targets say so.

Pure: no I/O; the catalog reader and the analyzer's settings call :func:`parse_rules`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

TargetSource = Literal["settings", "catalog", "global"]
_RANK: Mapping[str, int] = {"global": 0, "catalog": 1, "settings": 2}
MATCH_KEYS = ("cluster", "deployment", "model")
TARGET_KEYS = ("ttft_p90_s", "tpot_p90_s", "e2e_p90_s")

Seconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]
Name = Annotated[str, Field(min_length=1)]


class TargetError(ValueError):
    """A target rule is malformed or duplicates another; the message names the rule."""


class TargetRule(BaseModel):
    """One rule: which pools (any of cluster, deployment, model; none: every pool) and their targets
    (seconds at p90; at least one)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    cluster: Name | None = None
    deployment: Name | None = None
    model: Name | None = Field(
        default=None, description="The served model id, or the catalog's model key, HF id or alias."
    )
    ttft_p90_s: Seconds | None = None
    tpot_p90_s: Seconds | None = None
    e2e_p90_s: Seconds | None = None

    @model_validator(mode="after")
    def _sets_a_target(self) -> TargetRule:
        if all(getattr(self, key) is None for key in TARGET_KEYS):
            raise ValueError(f"sets no target (give at least one of {', '.join(TARGET_KEYS)})")
        return self

    @property
    def keys(self) -> tuple[str, ...]:
        """The match keys it sets."""
        return tuple(key for key in MATCH_KEYS if getattr(self, key) is not None)

    def describe(self) -> str:
        """Its match keys as written, e.g. ``cluster='east', model='llama-70b'`` (``every pool``)."""
        return ", ".join(f"{key}={getattr(self, key)!r}" for key in self.keys) or "every pool"


@dataclass(frozen=True)
class PlacedRule:
    """A rule and where it was written: its source and its place there (named in errors and summaries)."""

    rule: TargetRule
    source: TargetSource
    where: str  # e.g. "PHASEFIT_ANALYZER_TARGETS[1]", "/etc/phasefit/catalog.yaml: targets[0]"


@dataclass(frozen=True)
class PoolIdentity:
    """What a rule matches a pool on: its cluster, deployment and served model id, and the names of its
    catalog model (key, HF ids, aliases; empty where the catalog does not know it)."""

    cluster: str
    deployment: str | None
    model_id: str
    model_names: tuple[str, ...] = ()


@dataclass(frozen=True)
class PoolTargets:
    """The targets that apply to one pool, and the rule they come from (``source`` "none": no rule)."""

    ttft_p90_s: float | None = None
    tpot_p90_s: float | None = None
    e2e_p90_s: float | None = None
    source: TargetSource | Literal["none"] = "none"
    rule: str | None = None  # PlacedRule.where
    notes: tuple[str, ...] = ()

    @property
    def is_set(self) -> bool:
        """Whether it sets any target."""
        return any(value is not None for value in (self.ttft_p90_s, self.tpot_p90_s, self.e2e_p90_s))


NO_TARGETS = PoolTargets()


def _describe(error: ValidationError) -> str:
    problems = []
    for detail in error.errors():
        field = ".".join(str(part) for part in detail["loc"])
        if detail["type"] == "extra_forbidden":
            known = ", ".join((*MATCH_KEYS, *TARGET_KEYS))
            problems.append(f"unknown key {field!r} (known: {known})")
        elif field:
            problems.append(f"{field}: {detail['msg']}")
        else:
            problems.append(str(detail["msg"]).removeprefix("Value error, "))
    return "; ".join(problems)


def parse_rule(entry: object, where: str) -> TargetRule:
    """One rule as written (a mapping), or :class:`TargetError` naming ``where``."""
    if isinstance(entry, TargetRule):
        return entry
    if not isinstance(entry, Mapping):
        raise TargetError(
            f"{where}: expected a mapping of match keys and targets, got {type(entry).__name__}"
        )
    try:
        return TargetRule.model_validate(dict(entry))
    except ValidationError as exc:
        raise TargetError(f"{where}: {_describe(exc)}") from exc


def parse_rules(entries: object, source: TargetSource, origin: str) -> tuple[PlacedRule, ...]:
    """A list of rules as written at ``origin`` (e.g. ``PHASEFIT_ANALYZER_TARGETS``), checked distinct."""
    if entries is None:
        return ()
    if not isinstance(entries, Sequence) or isinstance(entries, (str, bytes)):
        raise TargetError(f"{origin}: expected a list of rules, got {type(entries).__name__}")
    placed = tuple(
        PlacedRule(parse_rule(entry, f"{origin}[{i}]"), source, f"{origin}[{i}]")
        for i, entry in enumerate(entries)
    )
    check_distinct(placed)
    return placed


def _match_signature(rule: TargetRule) -> tuple[str | None, ...]:
    return (rule.cluster, rule.deployment, rule.model.casefold() if rule.model else None)


def check_distinct(rules: Sequence[PlacedRule]) -> None:
    """Refuse two rules of one source that match exactly the same pools (neither could ever apply
    alone): :class:`TargetError` naming both."""
    seen: dict[tuple[str, tuple[str | None, ...]], PlacedRule] = {}
    for placed in rules:
        key = (placed.source, _match_signature(placed.rule))
        first = seen.setdefault(key, placed)
        if first is not placed:
            raise TargetError(
                f"{placed.where}: matches the same pools as {first.where} ({placed.rule.describe()}): "
                "keep one rule per set of match keys"
            )


def global_rule(
    tpot_p90_s: float | None, where: str = "PHASEFIT_ANALYZER_TPOT_SLO_S"
) -> tuple[PlacedRule, ...]:
    """The fleet-wide TPOT default as the least specific rule (none where it is unset)."""
    if tpot_p90_s is None:
        return ()
    return (PlacedRule(TargetRule(tpot_p90_s=tpot_p90_s), "global", where),)


def _model_rank(rule: TargetRule, pool: PoolIdentity) -> int | None:
    """2: the rule names the pool's served id; 1: its catalog model; 0: it names no model; None: another."""
    if rule.model is None:
        return 0
    wanted = rule.model.casefold()
    if wanted == pool.model_id.casefold():
        return 2
    if any(wanted == name.casefold() for name in pool.model_names):
        return 1
    return None


def _specificity(placed: PlacedRule, pool: PoolIdentity) -> tuple[int, int, int] | None:
    """How specific a matching rule is (higher wins), None where it does not match the pool."""
    rule = placed.rule
    if rule.cluster is not None and rule.cluster != pool.cluster:
        return None
    if rule.deployment is not None and rule.deployment != pool.deployment:
        return None
    model = _model_rank(rule, pool)
    if model is None:
        return None
    return len(rule.keys), int(model == 2), _RANK[placed.source]


def resolve(rules: Sequence[PlacedRule], pool: PoolIdentity) -> PoolTargets:
    """The targets of one pool: the most specific matching rule's (the module docstring says how)."""
    ranked = [(rank, i) for i, placed in enumerate(rules) if (rank := _specificity(placed, pool)) is not None]
    if not ranked:
        return NO_TARGETS
    best = max(rank for rank, _ in ranked)
    tied = [rules[i] for rank, i in ranked if rank == best]
    chosen = tied[0]
    notes: tuple[str, ...] = ()
    if len(tied) > 1:
        others = ", ".join(p.where for p in tied[1:])
        notes = (f"latency targets: {chosen.where} and {others} match equally; the first listed applies",)
    rule = chosen.rule
    return PoolTargets(rule.ttft_p90_s, rule.tpot_p90_s, rule.e2e_p90_s, chosen.source, chosen.where, notes)
