"""The outside probes (benchmarks/probes) stay valid scenario files the accuracy benchmark can run."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetsim.scenario import builtin_scenarios, load_scenario

PROBES = sorted((Path(__file__).resolve().parents[2] / "benchmarks" / "probes").glob("*.yaml"))


def test_there_are_probes() -> None:
    assert len(PROBES) >= 13


@pytest.mark.parametrize("path", PROBES, ids=[p.stem for p in PROBES])
def test_a_probe_loads_and_is_no_built_in(path: Path) -> None:
    scenario = load_scenario(path)
    assert scenario.name == path.stem
    assert scenario.name not in builtin_scenarios()
