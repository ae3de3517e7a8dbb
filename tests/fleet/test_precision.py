from __future__ import annotations

import pytest

from fleet.precision import Precision, bytes_per_param, parse_precision


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("FP8", Precision.FP8),
        ("fp8", Precision.FP8),
        ("FP8 (weights+KV per trtllm-bench FP8 quantization)", Precision.FP8),
        ("fp8_e4m3", Precision.FP8),
        ("fp8_e5m2", Precision.FP8),
        ("torch.float8_e4m3fn", Precision.FP8),
        ("BF16", Precision.BF16),
        ("bfloat16", Precision.BF16),
        ("torch.bfloat16", Precision.BF16),
        ("  BFloat16  ", Precision.BF16),
        ("FP16", Precision.FP16),
        ("float16", Precision.FP16),
        ("half", Precision.FP16),
        ("FP4", Precision.FP4),
        ("NVFP4", Precision.FP4),
        ("mxfp4", Precision.FP4),
        ("INT4", Precision.INT4),
        ("AWQ", Precision.INT4),
        ("GPTQ", Precision.INT4),
        ("w4a16", Precision.INT4),
        ("int4_awq", Precision.INT4),
        ("FP8 weights, BF16 KV", Precision.FP8),
        ("fp8", Precision("fp8")),
    ],
)
def test_spellings_parse(text: str, expected: Precision) -> None:
    assert parse_precision(text) is expected


@pytest.mark.parametrize("text", ["INT8", "fp32", "auto", "", "float", "4bit", "bf 16"])
def test_unknown_spellings_raise_naming_the_text(text: str) -> None:
    with pytest.raises(ValueError, match="unknown precision") as info:
        parse_precision(text)
    assert repr(text) in str(info.value)


def test_every_precision_value_parses_to_itself() -> None:
    for precision in Precision:
        assert parse_precision(precision.value) is precision
        assert parse_precision(precision.value.upper()) is precision


@pytest.mark.parametrize(
    ("precision", "size"),
    [
        (Precision.BF16, 2.0),
        (Precision.FP16, 2.0),
        (Precision.FP8, 1.0),
        (Precision.FP4, 0.5),
        (Precision.INT4, 0.5),
    ],
)
def test_bytes_per_param(precision: Precision, size: float) -> None:
    assert bytes_per_param(precision) == size
