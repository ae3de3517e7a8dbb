"""The operator catalog's ``targets:`` list: read in order, refused with the file and rule named."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fleet.catalog import CatalogError, load_catalog


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "catalog.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_no_file_and_no_section_mean_no_targets(tmp_path: Path) -> None:
    assert load_catalog().targets == ()
    assert load_catalog(_write(tmp_path, "gpus:\n  H100-SXM: {hourly_price_usd: 2.9}\n")).targets == ()
    assert load_catalog(_write(tmp_path, "targets:\n")).targets == ()


def test_the_targets_are_read_in_order_with_where_they_are_written(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "gpus:\n  H100-SXM: {hourly_price_usd: 2.9}\n"
        "targets:\n"
        "  - tpot_p90_s: 0.08\n"
        "  - {cluster: east, model: llama-3.1-70b, ttft_p90_s: 1, tpot_p90_s: 0.04, e2e_p90_s: 20}\n",
    )
    first, second = load_catalog(path).targets
    assert first.source == second.source == "catalog"
    assert (first.where, second.where) == (f"{path}: targets[0]", f"{path}: targets[1]")
    assert first.rule.tpot_p90_s == 0.08 and first.rule.keys == ()
    assert second.rule.keys == ("cluster", "model") and second.rule.ttft_p90_s == 1.0


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("targets:\n  - {tpot: 0.05}\n", r"targets\[0\]: unknown key 'tpot'"),
        (
            "targets:\n  - {tpot_p90_s: 0.05}\n  - {model: x, tpot_p90_s: -0.05}\n",
            r"targets\[1\]: tpot_p90_s:",
        ),
        ("targets:\n  - {tpot_p90_s: .inf}\n", r"targets\[0\]: tpot_p90_s: Input should be a finite number"),
        ("targets:\n  - {model: x}\n", r"targets\[0\]: sets no target"),
        ("targets:\n  tpot_p90_s: 0.05\n", r"targets: expected a list of rules, got dict"),
        (
            "targets:\n  - {model: x, tpot_p90_s: 0.05}\n  - {model: x, ttft_p90_s: 1}\n",
            r"targets\[1\]: matches the same pools as .*targets\[0\] \(model='x'\)",
        ),
    ],
)
def test_a_bad_target_names_the_file_and_rule(tmp_path: Path, text: str, says: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(CatalogError, match=rf"^{re.escape(str(path))}: {says}"):
        load_catalog(path)


def test_an_unknown_top_level_key_still_lists_targets(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match=r"allowed: gpus, models, engines, targets"):
        load_catalog(_write(tmp_path, "slo:\n  - {tpot_p90_s: 0.05}\n"))
