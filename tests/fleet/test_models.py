from __future__ import annotations

import csv
from dataclasses import replace
from pathlib import Path

import pytest

from fleet.catalog import load_catalog
from fleet.models import (
    ModelArch,
    ModelCatalog,
    active_params,
    attention_kv_read_bytes_per_token,
    decode_flops_per_token,
    decode_weight_bytes_read,
    kv_bytes_for_context,
    kv_bytes_per_token,
    prefill_flops,
    total_params,
    weight_bytes,
)
from fleet.precision import Precision

DATA = Path(__file__).resolve().parents[2] / "data"
MODELS_CSV = DATA / "benchmarks" / "models.csv"
KEY_OF_CSV_ROW = {
    "Llama-3.1-8B": "llama-3.1-8b",
    "Llama-3.1-70B / Llama-3.3-70B": "llama-3.1-70b",
    "Llama-3.1-405B": "llama-3.1-405b",
    "Llama-4-Scout-17B-16E": "llama-4-scout",
    "Llama-4-Maverick-17B-128E": "llama-4-maverick",
    "Qwen2.5-72B": "qwen2.5-72b",
    "Qwen3-235B-A22B": "qwen3-235b-a22b",
    "DeepSeek-V3 / R1": "deepseek-v3",
    "Mixtral-8x7B": "mixtral-8x7b",
    "Llama-2-70B": "llama-2-70b",
    "Llama-7B": "llama-7b",
    "Mistral-7B": "mistral-7b",
}


@pytest.fixture(scope="module")
def models() -> ModelCatalog:
    return load_catalog().models


def _csv_rows() -> list[dict[str, str]]:
    with MODELS_CSV.open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def test_the_catalog_holds_every_csv_model(models: ModelCatalog) -> None:
    assert set(models.models) == set(KEY_OF_CSV_ROW.values())
    assert {row["model"] for row in _csv_rows()} == set(KEY_OF_CSV_ROW)


@pytest.mark.parametrize("row", _csv_rows(), ids=lambda row: row["model"])
def test_derived_counts_match_the_csv(models: ModelCatalog, row: dict[str, str]) -> None:
    m = models.get(KEY_OF_CSV_ROW[row["model"]])
    assert total_params(m) / 1e9 == pytest.approx(float(row["params_derived_from_config_B"]), rel=0.01)
    assert active_params(m) / 1e9 == pytest.approx(
        float(row["active_params_derived_from_config_B"]), rel=0.01
    )
    assert kv_bytes_per_token(m, Precision.BF16) == float(row["kv_bytes_per_token_bf16_derived"])
    assert " ".join(row["source"].split()) == " ".join(m.sources.split())


def test_pinned_kv_bytes(models: ModelCatalog) -> None:
    llama70 = models.get("llama-3.1-70b")
    assert kv_bytes_per_token(llama70, Precision.BF16) == 2 * 80 * 8 * 128 * 2 == 327_680
    at_4096 = kv_bytes_for_context(llama70, 4096, Precision.BF16)
    assert at_4096 == 1_342_177_280  # 1.34 GB, not the "about 640 MB" of a widely shared article
    assert at_4096 / 2**20 == 1280
    assert kv_bytes_per_token(models.get("llama-3.1-8b"), Precision.BF16) == 131_072
    deepseek = models.get("deepseek-v3")
    assert kv_bytes_per_token(deepseek, Precision.BF16) == 61 * (512 + 64) * 2 == 70_272
    assert kv_bytes_per_token(llama70, Precision.FP8) == 163_840
    assert kv_bytes_per_token(models.get("llama-3.1-8b"), Precision.FP8) == 65_536
    assert kv_bytes_per_token(deepseek, Precision.FP8) == 35_136
    assert kv_bytes_per_token(llama70, Precision.FP4) == 81_920


def test_mla_kv_is_far_smaller_than_the_naive_gqa_formula(models: ModelCatalog) -> None:
    deepseek = models.get("deepseek-v3")
    naive = 2 * deepseek.layers * deepseek.kv_heads * deepseek.head_dim * 2
    assert naive / kv_bytes_per_token(deepseek, Precision.BF16) > 25


def test_llama4_chunked_attention_caps_kv(models: ModelCatalog) -> None:
    scout = models.get("llama-4-scout")
    per_layer = 2 * 8 * 128 * 2
    assert kv_bytes_per_token(scout, Precision.BF16) == 48 * per_layer == 196_608
    # below the 8192-token chunk every layer holds the whole context
    assert kv_bytes_for_context(scout, 4096, Precision.BF16) == 4096 * 48 * per_layer
    # 12 of 48 layers attend globally; the other 36 hold at most 8192 tokens
    assert kv_bytes_for_context(scout, 131_072, Precision.BF16) == per_layer * (12 * 131_072 + 36 * 8192)
    assert kv_bytes_for_context(scout, 131_072, Precision.BF16, windowed=False) == 131_072 * 48 * per_layer
    # the token that opens a new chunk reads one key on chunked layers
    assert attention_kv_read_bytes_per_token(scout, 8193, Precision.BF16) == per_layer * (12 * 8193 + 36)
    assert attention_kv_read_bytes_per_token(scout, 8192, Precision.BF16) == per_layer * 48 * 8192


def test_kv_read_per_decode_step(models: ModelCatalog) -> None:
    llama70 = models.get("llama-3.1-70b")
    assert attention_kv_read_bytes_per_token(llama70, 2048, Precision.BF16) == 327_680 * 2048
    deepseek = models.get("deepseek-v3")
    assert attention_kv_read_bytes_per_token(deepseek, 1000, Precision.FP8) == 35_136 * 1000
    assert attention_kv_read_bytes_per_token(llama70, 0, Precision.BF16) == 0
    with pytest.raises(ValueError, match="context_len"):
        attention_kv_read_bytes_per_token(llama70, -1, Precision.BF16)


def test_weight_bytes(models: ModelCatalog) -> None:
    llama70 = models.get("llama-3.1-70b")
    total = total_params(llama70)
    embeddings = 2 * 128_256 * 8192
    assert weight_bytes(llama70, Precision.BF16) == total * 2
    assert weight_bytes(llama70, Precision.FP16) == total * 2
    # quantised checkpoints keep the embedding table and LM head in 16-bit
    assert weight_bytes(llama70, Precision.FP8) == (total - embeddings) + embeddings * 2
    assert weight_bytes(llama70, Precision.FP8, quantized_embeddings=True) == total
    assert weight_bytes(llama70, Precision.INT4) == (total - embeddings) * 0.5 + embeddings * 2
    assert 72e9 < weight_bytes(llama70, Precision.FP8) < 73e9


def _llama8b_block_matmul_params() -> int:
    attention = 2 * 4096 * 4096 + 2 * 4096 * 8 * 128
    ffn = 3 * 4096 * 14_336
    return 32 * (attention + ffn)


def test_prefill_flops_by_hand(models: ModelCatalog) -> None:
    llama8 = models.get("llama-3.1-8b")
    n = 1000
    linear = 2 * n * _llama8b_block_matmul_params()
    logits = 2 * 128_256 * 4096
    attention = 32 * (2 * 32 * (128 + 128)) * (n * (n + 1) // 2)
    assert prefill_flops(llama8, n) == linear + logits + attention
    # 13.959e12 matmuls + 1.05e9 logits + 0.262e12 attention
    assert prefill_flops(llama8, n) == pytest.approx(14.2221e12, rel=1e-4)


def test_prefill_with_a_cached_prefix(models: ModelCatalog) -> None:
    for key in ("llama-3.1-70b", "llama-4-scout", "qwen3-235b-a22b"):
        m = models.get(key)
        logits = 2 * m.vocab * m.hidden
        for n, c in ((4096, 1024), (20_000, 9000), (100, 99)):
            assert prefill_flops(m, n, c) == pytest.approx(prefill_flops(m, n) - prefill_flops(m, c) + logits)
        assert prefill_flops(m, 500, 500) == 0
        assert prefill_flops(m, 0) == 0
    with pytest.raises(ValueError, match="exceeds"):
        prefill_flops(models.get("llama-3.1-8b"), 10, 11)
    with pytest.raises(ValueError, match="prompt_tokens"):
        prefill_flops(models.get("llama-3.1-8b"), -1)


def test_mla_prefill_up_projects_the_cached_latents(models: ModelCatalog) -> None:
    deepseek = models.get("deepseek-v3")
    n, c = 8192, 4096
    logits = 2 * deepseek.vocab * deepseek.hidden
    without = prefill_flops(deepseek, n) - prefill_flops(deepseek, c) + logits
    assert prefill_flops(deepseek, n, c) - without == pytest.approx(2 * c * 61 * 512 * 128 * (128 + 128))


def test_decode_equals_a_one_token_prefill_for_gqa(models: ModelCatalog) -> None:
    for key in ("llama-3.1-8b", "llama-3.1-70b", "llama-4-scout", "llama-4-maverick", "mixtral-8x7b"):
        m = models.get(key)
        for context in (1, 777, 8192, 8193, 50_000):
            assert decode_flops_per_token(m, context) == prefill_flops(m, context, context - 1)


def test_decode_flops_grow_linearly_with_context(models: ModelCatalog) -> None:
    llama70 = models.get("llama-3.1-70b")
    slope = 80 * 2 * 64 * (128 + 128)
    assert decode_flops_per_token(llama70, 5000) - decode_flops_per_token(llama70, 1000) == slope * 4000
    # at short context a token costs about 2 x the weights it multiplies
    assert decode_flops_per_token(llama70, 1) == pytest.approx(
        2 * (total_params(llama70) - 128_256 * 8192), rel=1e-4
    )
    # MLA decode attends over the latent (absorbed): 2 x heads x (512 + 64 + 512) per key and layer
    deepseek = models.get("deepseek-v3")
    slope_mla = 61 * 2 * 128 * (512 + 64 + 512)
    assert decode_flops_per_token(deepseek, 2000) - decode_flops_per_token(deepseek, 1000) == slope_mla * 1000


def test_moe_flops_follow_active_not_total_params(models: ModelCatalog) -> None:
    for key in ("mixtral-8x7b", "deepseek-v3", "qwen3-235b-a22b", "llama-4-maverick"):
        m = models.get(key)
        per_token = decode_flops_per_token(m, 1)
        assert per_token < 2 * active_params(m)
        assert per_token > 2 * (active_params(m) - 2 * m.vocab * m.hidden)


def test_decode_weight_bytes_read(models: ModelCatalog) -> None:
    llama70 = models.get("llama-3.1-70b")
    table = 128_256 * 8192 * 2
    assert decode_weight_bytes_read(llama70, Precision.BF16, 64) == pytest.approx(
        weight_bytes(llama70, Precision.BF16) - table, rel=1e-4
    )
    mixtral = models.get("mixtral-8x7b")
    expert = 3 * 4096 * 14_336 * 2
    one = decode_weight_bytes_read(mixtral, Precision.BF16, 1)
    assert one == pytest.approx(
        weight_bytes(mixtral, Precision.BF16) - 32 * 6 * expert - 32_000 * 4096 * 2, rel=1e-4
    )
    reads = [decode_weight_bytes_read(mixtral, Precision.BF16, b) for b in (1, 2, 8, 64, 512)]
    assert reads == sorted(reads)
    assert reads[-1] == pytest.approx(weight_bytes(mixtral, Precision.BF16) - 32_000 * 4096 * 2, rel=1e-4)
    with pytest.raises(ValueError, match="batch"):
        decode_weight_bytes_read(mixtral, Precision.BF16, 0)


@pytest.mark.parametrize(
    ("served", "key"),
    [
        ("meta-llama/Llama-3.1-70B-Instruct", "llama-3.1-70b"),
        ("meta-llama/Llama-3.3-70B-Instruct", "llama-3.1-70b"),
        ("meta-llama/Meta-Llama-3.1-70B-Instruct", "llama-3.1-70b"),
        ("nvidia/Llama-3.1-70B-Instruct-FP8", "llama-3.1-70b"),
        ("neuralmagic/Meta-Llama-3.1-70B-Instruct-quantized.w4a16", "llama-3.1-70b"),
        ("hugging-quants/Meta-Llama-3.1-70B-Instruct-AWQ-INT4", "llama-3.1-70b"),
        ("deepseek-ai/DeepSeek-R1-Distill-Llama-70B", "llama-3.1-70b"),
        ("LLAMA-3.3-70B-INSTRUCT", "llama-3.1-70b"),
        ("llama-3.1-70b", "llama-3.1-70b"),
        ("/models/Llama-3.1-70B-Instruct/", "llama-3.1-70b"),
        ("meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b"),
        ("RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8-dynamic", "llama-3.1-8b"),
        ("meta-llama/Llama-3.1-405B-Instruct-FP8", "llama-3.1-405b"),
        ("meta-llama/Llama-4-Scout-17B-16E-Instruct", "llama-4-scout"),
        ("meta-llama/Llama-4-Maverick-17B-128E-Instruct-FP8", "llama-4-maverick"),
        ("Qwen/Qwen2.5-72B-Instruct-AWQ", "qwen2.5-72b"),
        ("Qwen/Qwen3-235B-A22B-Instruct-2507-FP8", "qwen3-235b-a22b"),
        ("deepseek-ai/DeepSeek-V3", "deepseek-v3"),
        ("deepseek-ai/DeepSeek-V3-0324", "deepseek-v3"),
        ("deepseek-ai/DeepSeek-R1-0528", "deepseek-v3"),
        ("nvidia/DeepSeek-R1-FP4", "deepseek-v3"),
        ("deepseek-ai/DeepSeek-V3.1", "deepseek-v3"),
        ("mistralai/Mixtral-8x7B-Instruct-v0.1", "mixtral-8x7b"),
    ],
)
def test_served_ids_resolve(models: ModelCatalog, served: str, key: str) -> None:
    resolved = models.resolve(served)
    assert resolved is not None
    assert resolved.key == key


@pytest.mark.parametrize(
    "served",
    [
        "deepseek-ai/DeepSeek-R1-Distill-Qwen-32B",
        "meta-llama/Llama-3.2-1B-Instruct",
        "Qwen/Qwen2.5-7B-Instruct",
        "Qwen/Qwen3-30B-A3B",
        "mistralai/Mixtral-8x22B-Instruct-v0.1",
        "my-served-model",
        "instruct",
        "fp8",
        "",
        "/",
    ],
)
def test_unknown_ids_resolve_to_none(models: ModelCatalog, served: str) -> None:
    assert models.resolve(served) is None


def test_get_names_the_known_keys(models: ModelCatalog) -> None:
    with pytest.raises(KeyError, match=r"llama-3\.1-70b"):
        models.get("llama-70b")


BASE = ModelArch(
    key="t", name="T", layers=2, hidden=64, heads=4, kv_heads=2, head_dim=16, vocab=100, intermediate=128
)


def test_a_dense_model_has_every_layer_dense() -> None:
    assert BASE.dense_layers == 2 and BASE.moe_layers == 0
    assert active_params(BASE) == total_params(BASE)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"layers": 0}, "layers"),
        ({"dense_layers": 1}, "dense model"),
        ({"experts_total": 4, "experts_active": 5, "moe_intermediate": 32}, "experts_active"),
        ({"experts_total": 4, "experts_active": 2}, "moe_intermediate"),
        (
            {"experts_total": 4, "experts_active": 2, "moe_intermediate": 32, "dense_layers": 3},
            "dense_layers",
        ),
        ({"intermediate": None}, "intermediate"),
        ({"attention": "mla", "kv_lora_rank": 32}, "MLA"),
        ({"global_attention_every": 4}, "attention_chunk_size"),
    ],
)
def test_inconsistent_architectures_are_refused(changes: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        replace(BASE, **changes)  # type: ignore[arg-type]


def test_catalog_refuses_an_id_two_models_claim() -> None:
    with pytest.raises(ValueError, match="claimed by both"):
        ModelCatalog(
            {"a": replace(BASE, key="a", aliases=("x",)), "b": replace(BASE, key="b", hf_ids=("org/X",))},
            variant_suffixes=[],
        )
