"""The words that name a worker's phase role: pod label values, SGLang's ``engine_type``,
``--disaggregation-mode`` values, vLLM's ``kv_role``, TensorRT-LLM's server types, Dynamo component names.

Role resolution (which evidence speaks first) stays with each reader: ``collector/roles.py`` and
``analyzer/sources/prometheus/metrics.py``; both read the words here.
"""

from __future__ import annotations

from collections.abc import Iterable

from fleet.contract import Role

ROLE_WORDS: dict[str, Role] = {
    "prefill": Role.PREFILL,
    "encode-prefill": Role.PREFILL,
    "context": Role.PREFILL,  # TensorRT-LLM disaggregated "context" servers
    "ctx": Role.PREFILL,
    "kv_producer": Role.PREFILL,  # vLLM --kv-transfer-config kv_role
    "decode": Role.DECODE,
    "generation": Role.DECODE,  # TensorRT-LLM "generation" servers
    "gen": Role.DECODE,
    "kv_consumer": Role.DECODE,
    "prefill-decode": Role.MIXED,
    "encode-prefill-decode": Role.MIXED,
    "both": Role.MIXED,
    "agg": Role.MIXED,
    "aggregated": Role.MIXED,
    "unified": Role.MIXED,  # SGLang engine_type when not disaggregated (weak: old SGLang always says it)
    "mixed": Role.MIXED,
    "colocated": Role.MIXED,
    "null": Role.MIXED,  # SGLang's default --disaggregation-mode
}


def role_from_text(value: str | None) -> Role | None:
    """The role a word names (case-insensitive, ``_`` read as ``-``); None for an unknown word."""
    if not value:
        return None
    word = value.strip().lower()
    return ROLE_WORDS.get(word) or ROLE_WORDS.get(word.replace("_", "-"))


def role_from_component_names(names: Iterable[str]) -> Role | None:
    """Prefill or decode when Dynamo component names (``VllmPrefillWorker``, the ``dynamo_component`` metric
    label ``prefill``) say exactly one of them; None otherwise ("backend" serves either)."""
    lowered = [n.lower() for n in names]
    prefill = any("prefill" in n for n in lowered)
    decode = any("decode" in n for n in lowered)
    if prefill != decode:
        return Role.PREFILL if prefill else Role.DECODE
    return None
