"""Latency-target rules: parsing and refusals, and which rule applies to a pool."""

from __future__ import annotations

from typing import Any

import pytest

from fleet.targets import (
    NO_TARGETS,
    PlacedRule,
    PoolIdentity,
    TargetError,
    TargetRule,
    TargetSource,
    global_rule,
    parse_rules,
    resolve,
)

LLAMA = PoolIdentity(
    cluster="east",
    deployment="chat",
    model_id="meta-llama/Llama-3.1-70B-Instruct-FP8",
    model_names=("llama-3.1-70b", "meta-llama/Llama-3.1-70B-Instruct"),
)


def _rules(source: TargetSource, *entries: dict[str, Any]) -> tuple[PlacedRule, ...]:
    return parse_rules(list(entries), source, source.upper())


def test_a_rule_needs_a_target_and_known_keys() -> None:
    assert TargetRule(tpot_p90_s=0.05).keys == ()
    assert TargetRule(cluster="east", model="x", ttft_p90_s=1).keys == ("cluster", "model")
    with pytest.raises(TargetError, match=r"^T\[0\]: sets no target"):
        parse_rules([{"cluster": "east"}], "settings", "T")


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ({"tpot_s": 0.05}, r"T\[1\]: unknown key 'tpot_s' \(known: cluster, deployment, model, ttft_p90_s"),
        ({"tpot_p90_s": 0}, r"T\[1\]: tpot_p90_s: Input should be greater than 0"),
        ({"ttft_p90_s": -1.0}, r"T\[1\]: ttft_p90_s: Input should be greater than 0"),
        ({"e2e_p90_s": float("inf")}, r"T\[1\]: e2e_p90_s: Input should be a finite number"),
        ({"tpot_p90_s": float("nan")}, r"T\[1\]: tpot_p90_s: Input should be a finite number"),
        ({"tpot_p90_s": "0.05"}, r"T\[1\]: tpot_p90_s: Input should be a valid number"),
        ({"tpot_p90_s": True}, r"T\[1\]: tpot_p90_s: Input should be a valid number"),
        ({"cluster": "", "tpot_p90_s": 0.05}, r"T\[1\]: cluster: String should have at least 1 character"),
        ("tpot 0.05", r"T\[1\]: expected a mapping of match keys and targets, got str"),
    ],
)
def test_a_bad_rule_is_refused_naming_it(entry: object, says: str) -> None:
    with pytest.raises(TargetError, match=says):
        parse_rules([{"tpot_p90_s": 0.05}, entry], "settings", "T")


def test_rules_must_be_a_list() -> None:
    assert parse_rules(None, "catalog", "f.yaml: targets") == ()
    with pytest.raises(TargetError, match=r"f.yaml: targets: expected a list of rules, got dict"):
        parse_rules({"tpot_p90_s": 0.05}, "catalog", "f.yaml: targets")


def test_two_rules_of_one_source_for_the_same_pools_are_refused() -> None:
    with pytest.raises(
        TargetError, match=r"T\[2\]: matches the same pools as T\[0\] \(cluster='east', model='X'\)"
    ):
        parse_rules(
            [
                {"cluster": "east", "model": "x", "tpot_p90_s": 0.05},
                {"cluster": "east", "tpot_p90_s": 0.05},
                {"model": "X", "cluster": "east", "ttft_p90_s": 1.0},  # the model's case is ignored
            ],
            "settings",
            "T",
        )


def test_no_rule_no_targets() -> None:
    assert resolve((), LLAMA) == NO_TARGETS
    assert NO_TARGETS.source == "none" and not NO_TARGETS.is_set
    assert resolve(_rules("settings", {"cluster": "west", "tpot_p90_s": 0.05}), LLAMA) == NO_TARGETS


def test_match_keys_must_all_match() -> None:
    rules = _rules(
        "settings",
        {"cluster": "east", "deployment": "batch", "tpot_p90_s": 0.01},
        {"cluster": "east", "model": "qwen3-32b", "tpot_p90_s": 0.02},
        {"cluster": "east", "tpot_p90_s": 0.03},
    )
    assert resolve(rules, LLAMA).tpot_p90_s == 0.03
    assert resolve(rules, LLAMA).rule == "SETTINGS[2]"


def test_the_model_matches_the_served_id_or_the_catalog_model() -> None:
    for name in (
        "meta-llama/Llama-3.1-70B-Instruct-FP8",
        "LLAMA-3.1-70B",
        "meta-llama/Llama-3.1-70B-Instruct",
    ):
        assert resolve(_rules("settings", {"model": name, "tpot_p90_s": 0.05}), LLAMA).tpot_p90_s == 0.05
    unknown = PoolIdentity("east", None, "my-finetune")
    assert resolve(_rules("settings", {"model": "llama-3.1-70b", "tpot_p90_s": 0.05}), unknown) == NO_TARGETS
    assert resolve(_rules("settings", {"model": "my-finetune", "tpot_p90_s": 0.05}), unknown).is_set


def test_more_match_keys_win_whatever_the_order_or_source() -> None:
    settings = _rules("settings", {"tpot_p90_s": 0.08}, {"model": "llama-3.1-70b", "tpot_p90_s": 0.06})
    catalog = _rules("catalog", {"cluster": "east", "model": "llama-3.1-70b", "tpot_p90_s": 0.04})
    chosen = resolve((*settings, *catalog, *global_rule(0.1)), LLAMA)
    assert (chosen.tpot_p90_s, chosen.source, chosen.rule) == (0.04, "catalog", "CATALOG[0]")


def test_the_served_id_beats_the_catalog_model_at_equal_count() -> None:
    rules = _rules(
        "settings",
        {"model": "llama-3.1-70b", "tpot_p90_s": 0.06},
        {"model": "meta-llama/Llama-3.1-70B-Instruct-FP8", "tpot_p90_s": 0.04},
    )
    assert resolve(rules, LLAMA).tpot_p90_s == 0.04


def test_settings_beat_the_catalog_which_beats_the_global_default() -> None:
    settings = _rules("settings", {"cluster": "east", "tpot_p90_s": 0.03})
    catalog = _rules("catalog", {"cluster": "east", "tpot_p90_s": 0.05})
    assert resolve((*catalog, *settings), LLAMA).source == "settings"
    assert resolve((*global_rule(0.1), *catalog), LLAMA).source == "catalog"
    fleet_wide = _rules("catalog", {"ttft_p90_s": 2.0})
    assert resolve((*global_rule(0.1), *fleet_wide), LLAMA).ttft_p90_s == 2.0
    only_global = resolve(global_rule(0.1), LLAMA)
    assert (only_global.tpot_p90_s, only_global.source, only_global.rule) == (
        0.1,
        "global",
        "PHASEFIT_ANALYZER_TPOT_SLO_S",
    )
    assert global_rule(None) == ()


def test_the_chosen_rule_applies_whole() -> None:
    rules = (
        *_rules("settings", {"cluster": "east", "ttft_p90_s": 0.5, "e2e_p90_s": 30}),
        *global_rule(0.05),
    )
    chosen = resolve(rules, LLAMA)
    assert (chosen.ttft_p90_s, chosen.tpot_p90_s, chosen.e2e_p90_s) == (0.5, None, 30)


def test_a_tie_resolves_to_the_first_listed_and_says_so() -> None:
    rules = _rules(
        "settings", {"cluster": "east", "tpot_p90_s": 0.05}, {"model": "llama-3.1-70b", "tpot_p90_s": 0.03}
    )
    chosen = resolve(rules, LLAMA)
    assert chosen.tpot_p90_s == 0.05 and chosen.rule == "SETTINGS[0]"
    assert chosen.notes == (
        "latency targets: SETTINGS[0] and SETTINGS[1] match equally; the first listed applies",
    )
    # Only the pools both match tie.
    other = PoolIdentity("west", None, "meta-llama/Llama-3.1-70B-Instruct", ("llama-3.1-70b",))
    assert resolve(rules, other).tpot_p90_s == 0.03 and resolve(rules, other).notes == ()
