"""One parameter tree: every threshold found by its path, documented, and set from the settings."""

from __future__ import annotations

import dataclasses

import pytest

from analyzer.findings.registry import DETECTORS
from analyzer.pipeline import AnalyzerParams, analyze, input_from_samples
from analyzer.settings import AnalyzerSettings
from analyzer.tunable import OverrideError, tunables, with_overrides
from fleet.catalog import load_catalog
from fleet.contract import FindingKind, TelemetrySource
from tests.analyzer.synthetic import H100, H200, Fleet, workers

CATALOG = load_catalog()


def test_every_threshold_has_a_path_a_default_and_a_meaning() -> None:
    leaves = tunables(AnalyzerParams())
    paths = [t.path for t in leaves]
    assert len(paths) == len(set(paths)) and len(paths) >= 45
    assert all(t.doc.strip() and t.doc.rstrip().endswith((".", ")")) for t in leaves)
    assert {
        "bottleneck.tensor_saturation",
        "findings.underutilised.below",
        "pool.capacity.saturated_kv",
    } <= set(paths)


# Fields of the tree that are not thresholds: the operator's mappings and rules, and a bucket's length.
UNTUNED = {
    "clusters", "pool_params", "targets", "tpot_slo_where", "window_s", "ttft_slo_s", "kv_link_bytes_per_s",
}  # fmt: skip


def test_every_parameter_field_of_the_tree_is_documented() -> None:
    """A threshold added without ``tunable`` (so without a description) fails here, not silently."""

    def undocumented(node: object, prefix: str = "") -> list[str]:
        out = []
        for f in dataclasses.fields(node):  # type: ignore[arg-type]
            value = getattr(node, f.name)
            if dataclasses.is_dataclass(value):
                out += undocumented(value, f"{prefix}{f.name}.")
            elif f.name not in UNTUNED and "phasefit.doc" not in f.metadata:
                out.append(prefix + f.name)
        return out

    assert undocumented(AnalyzerParams()) == []


def test_an_override_changes_one_leaf_and_keeps_the_rest() -> None:
    base = AnalyzerParams()
    changed = with_overrides(base, {"findings.underutilised.below": 0.25, "findings.not_serving.buckets": 4})
    assert changed.findings.underutilised.below == 0.25 and changed.findings.not_serving.buckets == 4
    assert changed.findings.severity == base.findings.severity and changed.pool == base.pool


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        ({"findings.underused": 0.3}, "unknown threshold findings.underused"),
        ({"findings.underutilised.below": "low"}, "takes a number"),
        ({"findings.not_serving.buckets": 2.5}, "takes a whole number"),
        ({"findings.underutilised.below": 1.5}, "must lie in (0, 1]"),
        ({"findings.underutilised.below": True}, "takes a number"),
    ],
)
def test_a_bad_override_names_the_path(overrides: dict[str, object], says: str) -> None:
    with pytest.raises(OverrideError, match="findings") as error:
        with_overrides(AnalyzerParams(), overrides)
    assert says in str(error.value)


def test_the_settings_reach_any_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "PHASEFIT_ANALYZER_THRESHOLDS", '{"bottleneck.kv_full": 0.85, "pool.peak_quantile": 0.9}'
    )
    params = AnalyzerSettings().params()
    assert params.bottleneck.kv_full == 0.85 and params.pool.peak_quantile == 0.9
    monkeypatch.setenv("PHASEFIT_ANALYZER_THRESHOLDS", '{"bottleneck.kv_ful": 0.85}')
    with pytest.raises(ValueError, match=r"unknown threshold bottleneck\.kv_ful"):
        AnalyzerSettings()


def test_a_threshold_changes_the_verdict_and_its_wording() -> None:
    """The under-utilised finding's threshold and its text come from the one parameter."""
    fleet = Fleet(workers([("node00", H100, 2, 0), ("node01", H200, 0, 2)]), hours=6, rate_rps=lambda h: 2.0)
    gpu, engine = fleet.columns()
    data = input_from_samples(gpu, engine)
    found = analyze(data, CATALOG).findings
    (low,) = [f for f in found if f.kind is FindingKind.UNDERUTILISED_POOL]
    assert "below ~40%" in str(low.evidence["utilisation_detail"])
    utilisation = low.evidence["utilisation"]
    assert isinstance(utilisation, float)
    strict = with_overrides(AnalyzerParams(), {"findings.underutilised.below": utilisation / 2})
    assert not [
        f for f in analyze(data, CATALOG, strict).findings if f.kind is FindingKind.UNDERUTILISED_POOL
    ]
    loose = with_overrides(AnalyzerParams(), {"findings.underutilised.below": 0.9})
    (again,) = [f for f in analyze(data, CATALOG, loose).findings if f.kind is FindingKind.UNDERUTILISED_POOL]
    assert "below ~90%" in str(again.evidence["utilisation_detail"])


def test_every_finding_kind_has_exactly_one_detector() -> None:
    kinds = [kind for detector in DETECTORS for kind in detector.kinds]
    assert sorted(kinds) == sorted(FindingKind) and len(kinds) == len(set(kinds))


def test_a_mapping_override_changes_the_entries_it_names() -> None:
    params = with_overrides(AnalyzerParams(), {"bottleneck.dram_saturation": {"nvml-gpm": 0.85}})
    saturation = params.bottleneck.dram_saturation
    assert saturation[TelemetrySource.NVML_GPM] == 0.85 and saturation[TelemetrySource.DCGM] == 0.8
    with pytest.raises(OverrideError, match="has no entry nvml"):
        with_overrides(AnalyzerParams(), {"bottleneck.dram_saturation": {"nvml": 0.85}})
