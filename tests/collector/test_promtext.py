"""The exposition parser agrees with prometheus_client's on the real captures, and refuses garbage."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from collector.promtext import PromParseError, parse
from tests.collector.conftest import DCGM_FIXTURE, SGLANG_FIXTURE, VLLM_FIXTURE, fixture_text
from tests.collector.dcgm_text import DEFAULT_FIELDS, exposition


@pytest.mark.parametrize("path", [DCGM_FIXTURE, VLLM_FIXTURE, SGLANG_FIXTURE], ids=lambda p: p.name)
def test_same_samples_as_prometheus_client(path: Path) -> None:
    text = fixture_text(path)
    reference = [
        (s.name, dict(s.labels), s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
    ]
    ours = [(s.name, dict(s.labels), s.value) for s in parse(text).samples]
    assert ours == reference
    assert len(ours) > 0


def test_same_samples_on_a_synthetic_eight_gpu_exporter() -> None:
    # gauges only: prometheus_client renames a counter sample without _total (as dcgm-exporter writes them)
    text = exposition(8, {k: v for k, v in DEFAULT_FIELDS.items() if v[0] == "gauge"})
    reference = [
        (s.name, dict(s.labels), s.value) for f in text_string_to_metric_families(text) for s in f.samples
    ]
    assert [(s.name, dict(s.labels), s.value) for s in parse(text).samples] == reference


def test_types_are_recorded() -> None:
    parsed = parse(fixture_text(VLLM_FIXTURE))
    assert parsed.types["vllm:prompt_tokens_total"] == "counter"
    assert parsed.types["vllm:time_to_first_token_seconds"] == "histogram"


def test_escapes_special_values_timestamps_and_exemplars() -> None:
    text = (
        'a{x="q\\"uote",y="back\\\\slash",z="new\\nline"} 1\n'
        "b +Inf\n"
        "c -Inf 1700000000000\n"
        "d NaN\n"
        'e{le="0.5",} 3 # {trace_id="abc"} 0.4\n'
        "f{} 2.5e3\n"
        "# EOF\n"
    )
    samples = parse(text).samples
    assert samples[0].labels == {"x": 'q"uote', "y": "back\\slash", "z": "new\nline"}
    assert samples[1].value == math.inf and samples[2].value == -math.inf and math.isnan(samples[3].value)
    assert samples[4].labels == {"le": "0.5"} and samples[4].value == 3
    assert samples[5].value == 2500.0


@pytest.mark.parametrize(
    "garbage",
    [
        "<html><body>502 Bad Gateway</body></html>",
        'metric{label="unterminated} 1',
        "metric{label=unquoted} 1",
        "metric one",
        "metric",
        '{"json": true}',
    ],
)
def test_garbage_is_an_error_with_a_line_number(garbage: str) -> None:
    with pytest.raises(PromParseError, match="line 2"):
        parse("ok_metric 1\n" + garbage + "\n")
