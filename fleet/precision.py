"""Numeric precisions of weights, KV cache and matmuls, and how engines and benchmarks spell them.

Engines, checkpoints and benchmark tables name precisions many ways ("bfloat16", "FP8 (weights+KV per
trtllm-bench FP8 quantization)", "AWQ", "nvfp4"): ``parse_precision`` maps them onto five values and
refuses anything else rather than guessing.
"""

from __future__ import annotations

import re
from enum import StrEnum


class Precision(StrEnum):
    BF16 = "bf16"
    FP16 = "fp16"
    FP8 = "fp8"
    FP4 = "fp4"  # NVFP4 / MXFP4 (Blackwell tensor cores)
    INT4 = "int4"  # weight-only 4-bit (AWQ, GPTQ, W4A16): the matmuls run in 16-bit


_SYNONYMS: dict[str, Precision] = {
    "bf16": Precision.BF16,
    "bfloat16": Precision.BF16,
    "fp16": Precision.FP16,
    "f16": Precision.FP16,
    "float16": Precision.FP16,
    "half": Precision.FP16,
    "fp8": Precision.FP8,
    "float8": Precision.FP8,
    "fp8_e4m3": Precision.FP8,
    "fp8_e4m3fn": Precision.FP8,
    "fp8_e5m2": Precision.FP8,
    "float8_e4m3fn": Precision.FP8,
    "float8_e5m2": Precision.FP8,
    "e4m3": Precision.FP8,
    "e5m2": Precision.FP8,
    "fp8-dynamic": Precision.FP8,
    "w8a8-fp8": Precision.FP8,
    "fp4": Precision.FP4,
    "nvfp4": Precision.FP4,
    "mxfp4": Precision.FP4,
    "fp4_e2m1": Precision.FP4,
    "int4": Precision.INT4,
    "awq": Precision.INT4,
    "gptq": Precision.INT4,
    "w4a16": Precision.INT4,
    "int4_awq": Precision.INT4,
    "int4-awq": Precision.INT4,
    "awq-int4": Precision.INT4,
    "gptq-int4": Precision.INT4,
    "int4-gptq": Precision.INT4,
}

_BYTES_PER_PARAM: dict[Precision, float] = {
    Precision.BF16: 2.0,
    Precision.FP16: 2.0,
    Precision.FP8: 1.0,
    Precision.FP4: 0.5,
    Precision.INT4: 0.5,
}

_SEPARATORS = re.compile(r"[\s,;:]+")


def parse_precision(text: str) -> Precision:
    """The precision ``text`` names; ``ValueError`` naming it when it is not one we know.

    Case is ignored, a ``torch.`` prefix and anything from the first parenthesis on are dropped
    ("FP8 (weights+KV per ...)" is FP8), and when the whole text is not a known spelling its first word
    is tried ("FP8 weights" is FP8). Scale factors of quantised formats are not part of the name.
    """
    cleaned = text.strip().lower().split("(", 1)[0].strip().removeprefix("torch.")
    if cleaned in _SYNONYMS:
        return _SYNONYMS[cleaned]
    words = [word for word in _SEPARATORS.split(cleaned) if word]
    if words and words[0].removeprefix("torch.") in _SYNONYMS:
        return _SYNONYMS[words[0].removeprefix("torch.")]
    known = ", ".join(sorted(_SYNONYMS))
    raise ValueError(f"unknown precision {text!r}; known spellings: {known}")


def bytes_per_param(precision: Precision) -> float:
    """Bytes one element takes at ``precision`` (nominal: block scales of 4-bit formats not included)."""
    return _BYTES_PER_PARAM[precision]
