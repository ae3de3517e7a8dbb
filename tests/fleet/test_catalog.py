from __future__ import annotations

from pathlib import Path

import pytest

from fleet.catalog import Catalog, CatalogError, load_catalog
from fleet.models import total_params


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "catalog.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_builtin_catalog_loads() -> None:
    catalog = load_catalog()
    assert isinstance(catalog, Catalog)
    assert len(catalog.gpus.skus) == 16
    assert len(catalog.models.models) == 12
    assert load_catalog(None).gpus.get("H100-SXM") == catalog.gpus.get("H100-SXM")


def test_an_override_changes_only_the_fields_it_names(tmp_path: Path) -> None:
    builtin = load_catalog().gpus.get("H100-SXM")
    path = _write(
        tmp_path, "gpus:\n  H100-SXM: {hourly_price_usd: 2.9}\n  H200-SXM:\n    hourly_price_usd: 3.5\n"
    )
    catalog = load_catalog(path)
    h100 = catalog.gpus.get("H100-SXM")
    assert h100.hourly_price_usd == 2.9
    assert catalog.gpus.get("H200-SXM").hourly_price_usd == 3.5
    assert h100.hbm_bytes == builtin.hbm_bytes and h100.sources == builtin.sources
    assert catalog.gpus.resolve("NVIDIA H100 80GB HBM3").hourly_price_usd == 2.9
    assert catalog.gpus.get("B200").hourly_price_usd is None


def test_an_override_may_fill_an_unknown_figure_in_operator_units(tmp_path: Path) -> None:
    path = _write(tmp_path, "gpus:\n  H100-NVL: {bf16_dense_tflops: 835, fp8_dense_tflops: 1671}\n")
    nvl = load_catalog(path).gpus.get("H100-NVL")
    assert nvl.bf16_dense_flops == 835e12 and nvl.fp8_dense_flops == 1671e12


NEW_SKU = """
gpus:
  RTX-PRO-6000:
    name: RTX PRO 6000 Blackwell Server
    hbm_gb: 96
    hbm_bandwidth_tb_s: 1.6
    bf16_dense_tflops: null
    fp8_dense_tflops: null
    tdp_w: 600
    hourly_price_usd: 1.8
    nvml_names: [NVIDIA RTX PRO 6000 Blackwell Server Edition]
    sources: operator's own measurement
"""


def test_a_new_key_adds_a_sku_that_resolves(tmp_path: Path) -> None:
    catalog = load_catalog(_write(tmp_path, NEW_SKU))
    sku = catalog.gpus.resolve("NVIDIA RTX PRO 6000 Blackwell Server Edition")
    assert sku.key == "RTX-PRO-6000" and sku.known
    assert sku.hbm_bytes == 96_000_000_000 and sku.hbm_bandwidth_bytes_per_s == 1.6e12
    assert sku.bf16_dense_flops is None and sku.hourly_price_usd == 1.8
    assert len(catalog.gpus.skus) == 17


def test_a_new_sku_must_give_every_required_field(tmp_path: Path) -> None:
    path = _write(
        tmp_path, NEW_SKU.replace("    tdp_w: 600\n", "").replace("    bf16_dense_tflops: null\n", "")
    )
    with pytest.raises(CatalogError) as info:
        load_catalog(path)
    message = str(info.value)
    assert str(path) in message and "gpus.RTX-PRO-6000" in message
    assert "tdp_w" in message and "bf16_dense_tflops" in message


def test_new_models_and_model_overrides(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        """
models:
  llama-3.1-70b:
    aliases: [house-llama]
  tiny-moe:
    name: Tiny MoE
    hf_ids: [acme/Tiny-MoE-Instruct]
    layers: 4
    hidden: 512
    heads: 8
    kv_heads: 2
    head_dim: 64
    vocab: 1000
    attention: gqa
    moe_intermediate: 256
    experts_total: 8
    experts_active: 2
    sources: acme config.json
""",
    )
    catalog = load_catalog(path)
    llama = catalog.models.resolve("house-llama-FP8")
    assert llama is not None and llama.key == "llama-3.1-70b"
    assert llama.layers == 80
    assert catalog.models.resolve("llama3.3-70b") is None  # a list override replaces the list
    tiny = catalog.models.resolve("acme/Tiny-MoE-Instruct")
    assert tiny is not None and tiny.moe_layers == 4
    assert total_params(tiny) > 0


@pytest.mark.parametrize(
    ("text", "fragments"),
    [
        ("gpus:\n  H100-SXM: {hourly_price: 2.9}\n", ["gpus.H100-SXM", "unknown field", "hourly_price"]),
        ("models:\n  llama-3.1-8b: {layer: 3}\n", ["models.llama-3.1-8b", "unknown field", "layer"]),
        ("gpus:\n  H100-SXM: {hourly_price_usd: '2.9'}\n", ["gpus.H100-SXM", "hourly_price_usd"]),
        ("gpus:\n  H100-SXM: {hourly_price_usd: -1}\n", ["gpus.H100-SXM", "hourly_price_usd"]),
        ("gpus:\n  H100-SXM: {hbm_gb: true}\n", ["gpus.H100-SXM", "hbm_gb"]),
        ("gpus:\n  H100-SXM: 2.9\n", ["gpus.H100-SXM", "mapping"]),
        ("gpus: [H100-SXM]\n", ["gpus", "mapping"]),
        ("gpu:\n  H100-SXM: {hourly_price_usd: 2.9}\n", ["unknown top-level", "gpu"]),
        ("- a\n- b\n", ["top level"]),
        ("gpus:\n  H100-SXM: {hourly_price_usd: [2.9\n", ["malformed YAML"]),
        (
            "gpus:\n  H100-SXM: {hourly_price_usd: 2.9}\n  H100-SXM: {tdp_w: 1}\n",
            ["duplicate key", "H100-SXM"],
        ),
        ("gpus:\n  unknown: {hourly_price_usd: 1}\n", ["gpus.unknown", "reserved"]),
        ("gpus:\n  'bad key': {hourly_price_usd: 1}\n", ["bad key"]),
        ("gpus:\n  H200-SXM: {nvml_names: [NVIDIA H100 80GB HBM3]}\n", ["claimed by both"]),
        ("gpus:\n  H20: {name_patterns: ['NVIDIA H2.*']}\n", ["also matches patterns"]),
        ("models:\n  mixtral-8x7b: {experts_active: 9}\n", ["models.mixtral-8x7b", "experts_active"]),
        ("models:\n  deepseek-v3: {attention: sparse}\n", ["models.deepseek-v3", "attention"]),
        ("models:\n  qwen2.5-72b: {aliases: [llama-3.3-70b]}\n", ["claimed by both"]),
    ],
)
def test_bad_catalog_files_name_the_file_and_key(tmp_path: Path, text: str, fragments: list[str]) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(CatalogError) as info:
        load_catalog(path)
    message = str(info.value)
    assert str(path) in message
    for fragment in fragments:
        assert fragment in message


def test_missing_or_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match="cannot read"):
        load_catalog(tmp_path / "absent.yaml")
    (tmp_path / "binary.yaml").write_bytes(b"\xff\xfe\x00gpus")
    with pytest.raises(CatalogError, match=r"binary\.yaml"):
        load_catalog(tmp_path / "binary.yaml")


def test_an_empty_file_changes_nothing(tmp_path: Path) -> None:
    catalog = load_catalog(_write(tmp_path, "# nothing yet\n"))
    assert len(catalog.gpus.skus) == 16
    catalog = load_catalog(_write(tmp_path, "gpus:\nmodels:\n"))
    assert len(catalog.models.models) == 12


def test_catalog_error_is_a_value_error() -> None:
    assert issubclass(CatalogError, ValueError)


MIG_SKU = (
    NEW_SKU
    + """    mig:
      compute_slices: 4
      memory_slices: 4
      profiles: {1g.24gb: 1, 2g.48gb: 2, 4g.96gb: 4}
      sources: operator's nvidia-smi mig -lgip
"""
)


def test_an_operator_sku_may_bring_its_mig_table(tmp_path: Path) -> None:
    catalog = load_catalog(_write(tmp_path, MIG_SKU))
    sku = catalog.gpus.resolve("NVIDIA RTX PRO 6000 Blackwell Server Edition MIG 2g.48gb")
    assert sku.key == "RTX-PRO-6000/2g.48gb" and sku.known
    assert sku.hbm_bytes == 48e9 and sku.hbm_bandwidth_bytes_per_s == pytest.approx(1.6e12 / 2)
    assert sku.bf16_dense_flops is None  # the parent's unknown stays unknown
    assert "operator's nvidia-smi" in sku.sources
    without = load_catalog(_write(tmp_path, NEW_SKU)).gpus
    assert not without.resolve("NVIDIA RTX PRO 6000 Blackwell Server Edition MIG 2g.48gb").known


def test_an_override_replaces_a_mig_table_and_a_bad_one_names_the_file(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "gpus:\n  H100-SXM:\n    mig: {compute_slices: 7, memory_slices: 8, profiles: {1g.10gb: 1}, "
        "sources: mine}\n",
    )
    gpus = load_catalog(path).gpus
    assert gpus.get("H100-SXM/1g.10gb").known
    assert not gpus.resolve("NVIDIA H100 80GB HBM3 MIG 3g.40gb").known  # replaced, not extended
    bad = _write(
        tmp_path,
        "gpus:\n  H100-SXM:\n    mig: {compute_slices: 7, memory_slices: 8, profiles: {9g.10gb: 1}, "
        "sources: mine}\n",
    )
    with pytest.raises(CatalogError) as info:
        load_catalog(bad)
    assert str(bad) in str(info.value) and "gpus.H100-SXM" in str(info.value) and "9g.10gb" in str(info.value)
    unknown_field = _write(tmp_path, "gpus:\n  H100-SXM:\n    mig: {compute_slices: 7, slices: 8}\n")
    with pytest.raises(CatalogError, match="slices"):
        load_catalog(unknown_field)
