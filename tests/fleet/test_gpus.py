from __future__ import annotations

import csv
import logging
from dataclasses import replace
from pathlib import Path

import pytest

from fleet.catalog import load_catalog
from fleet.gpus import GpuCatalog, GpuSku, unknown_sku
from fleet.precision import Precision

DATA = Path(__file__).resolve().parents[2] / "data"
GPU_SPECS = DATA / "benchmarks" / "gpu_specs.csv"
CSV_ROW_OF = {
    "H100-SXM": "H100 SXM",
    "H100-PCIe": "H100 PCIe",
    "H100-NVL": "H100 NVL",
    "H200-SXM": "H200 SXM",
    "H200-NVL": "H200 NVL",
    "H20": "H20",
    "B200": "B200 (HGX)",
    "A100-SXM-80GB": "A100 80GB SXM",
    "L40S": "L40S",
    "MI300X": "MI300X",
}


@pytest.fixture(scope="module")
def gpus() -> GpuCatalog:
    return load_catalog().gpus


@pytest.fixture(scope="module")
def spec_rows() -> dict[str, dict[str, str]]:
    with GPU_SPECS.open(newline="", encoding="utf-8") as handle:
        return {row["gpu"]: row for row in csv.DictReader(handle)}


def _plain_number(cell: str) -> float | None:
    try:
        return float(cell)
    except ValueError:
        return None


def test_the_catalog_holds_the_ten_skus(gpus: GpuCatalog) -> None:
    assert set(gpus.skus) == set(CSV_ROW_OF)
    for key, sku in gpus.skus.items():
        assert sku.key == key
        assert sku.known
        assert sku.hourly_price_usd is None  # operators set prices


@pytest.mark.parametrize("key", sorted(CSV_ROW_OF))
def test_figures_match_the_spec_sheet(
    gpus: GpuCatalog, spec_rows: dict[str, dict[str, str]], key: str
) -> None:
    """Plain numbers are taken as they stand (GB = 1e9, TB/s = 1e12, TFLOP/s = 1e12); blanks stay None."""
    row = spec_rows[CSV_ROW_OF[key]]
    sku = gpus.get(key)
    checks = [
        ("hbm_gb", sku.hbm_bytes, 1e9),
        ("hbm_bw_tbps", sku.hbm_bandwidth_bytes_per_s, 1e12),
        ("bf16_dense_tflops", sku.bf16_dense_flops, 1e12),
        ("fp8_dense_tflops", sku.fp8_dense_flops, 1e12),
        ("tdp_w", sku.tdp_w, 1.0),
    ]
    for column, value, scale in checks:
        cell = row[column].strip()
        if not cell:
            assert value is None, f"{key}.{column} is blank in the CSV: must stay unknown"
        elif _plain_number(cell) is not None:
            assert value == pytest.approx(float(cell) * scale, rel=1e-12), f"{key}.{column}"
    assert " ".join(row["source"].split()) == " ".join(sku.sources.split())


def test_cells_that_needed_a_choice(gpus: GpuCatalog) -> None:
    b200 = gpus.get("B200")
    assert b200.hbm_bytes == 180_000_000_000  # "180 (... 192 in some early specs)"
    assert b200.hbm_bandwidth_bytes_per_s == 7.7e12  # NVIDIA HGX B200 table, not 8.0
    assert "7.7" in b200.notes and "8.0" in b200.notes
    assert b200.fp4_dense_flops == 9000e12
    assert gpus.get("A100-SXM-80GB").fp8_dense_flops is None  # "n/a (no FP8)"
    assert gpus.get("H100-NVL").tdp_w == 400  # "350-400 (approx. 400 ...; 400 ...)"
    for key in ("H100-NVL", "H200-NVL"):
        assert gpus.get(key).bf16_dense_flops is None
        assert gpus.get(key).fp8_dense_flops is None
    assert gpus.get("H200-NVL").interconnect_bytes_per_s is None
    assert gpus.get("MI300X").interconnect_bytes_per_s is None


def test_dense_not_sparse_compute(gpus: GpuCatalog) -> None:
    h100, h200 = gpus.get("H100-SXM"), gpus.get("H200-SXM")
    assert h100.bf16_dense_flops == h200.bf16_dense_flops == 989e12
    assert h100.fp8_dense_flops == 1979e12  # the sparse headline is 3958
    assert gpus.get("B200").fp8_dense_flops == 4500e12  # the sparse headline is 9 PF


def test_ridge_points(gpus: GpuCatalog) -> None:
    h100, h200 = gpus.get("H100-SXM"), gpus.get("H200-SXM")
    assert h100.ridge_point(Precision.BF16) == pytest.approx(989e12 / 3.35e12)
    assert round(h100.ridge_point(Precision.BF16) or 0) == 295
    assert round(h200.ridge_point(Precision.BF16) or 0) == 206
    assert round(h100.ridge_point(Precision.FP8) or 0) == 591
    assert round(h200.ridge_point(Precision.FP8) or 0) == 412
    assert gpus.get("H100-NVL").ridge_point(Precision.BF16) is None
    assert gpus.get("A100-SXM-80GB").ridge_point(Precision.FP8) is None


def test_peak_flops_by_precision(gpus: GpuCatalog) -> None:
    h100 = gpus.get("H100-SXM")
    assert h100.peak_flops(Precision.FP16) == h100.peak_flops(Precision.BF16) == 989e12
    assert h100.peak_flops(Precision.INT4) == 989e12  # weight-only: 16-bit matmuls
    assert h100.peak_flops(Precision.FP8) == 1979e12
    assert h100.peak_flops(Precision.FP4) is None
    assert gpus.get("B200").peak_flops(Precision.FP4) == 9000e12


@pytest.mark.parametrize(
    ("reported", "key"),
    [
        ("NVIDIA H100 80GB HBM3", "H100-SXM"),
        ("NVIDIA H100 PCIe", "H100-PCIe"),
        ("NVIDIA H100 NVL", "H100-NVL"),
        ("NVIDIA H200", "H200-SXM"),
        ("NVIDIA H200 NVL", "H200-NVL"),
        ("NVIDIA H20", "H20"),
        ("NVIDIA B200", "B200"),
        ("NVIDIA A100-SXM4-80GB", "A100-SXM-80GB"),
        ("NVIDIA L40S", "L40S"),
        ("AMD Instinct MI300X", "MI300X"),
        ("AMD Instinct MI300X OAM", "MI300X"),
        ("AMD Instinct MI300X VF", "MI300X"),
        ("nvidia  h100 80gb   HBM3 ", "H100-SXM"),
        ("H100-SXM", "H100-SXM"),
        ("H200 SXM", "H200-SXM"),
        ("NVIDIA H100 80GB HBM3 MIG 1g.10gb", "H100-SXM"),
        ("NVIDIA H100 80GB HBM3 MIG 1G.10GB+me", "H100-SXM"),
        ("NVIDIA H200 MIG 3g.71gb", "H200-SXM"),
        ("NVIDIA H200 NVL MIG 1g.18gb", "H200-NVL"),
        ("NVIDIA A100-SXM4-80GB MIG 1c.3g.40gb", "A100-SXM-80GB"),
    ],
)
def test_reported_names_resolve(gpus: GpuCatalog, reported: str, key: str) -> None:
    sku = gpus.resolve(reported)
    assert sku.known
    assert sku.key == key


@pytest.mark.parametrize(
    ("reported", "profile"),
    [
        ("NVIDIA H100 80GB HBM3 MIG 1g.10gb", "1g.10gb"),
        ("NVIDIA H100 80GB HBM3 MIG 1G.10GB+me", "1g.10gb+me"),
        ("NVIDIA A100-SXM4-80GB MIG 1c.3g.40gb", "1c.3g.40gb"),
        ("NVIDIA H100 80GB HBM3", None),
        ("NVIDIA H200 NVL", None),
    ],
)
def test_mig_profile(gpus: GpuCatalog, reported: str, profile: str | None) -> None:
    assert gpus.mig_profile(reported) == profile


@pytest.mark.parametrize(
    "reported",
    [
        "NVIDIA GH200 96GB HBM3",
        "NVIDIA H100",
        "NVIDIA H800",
        "NVIDIA A100-SXM4-40GB",
        "NVIDIA H200 141GB HBM3e NVL",
        "NVIDIA H20 141GB HBM3e",
        "NVIDIA H100 80GB HBM3e",
        "AMD Instinct MI300A",
        "AMD Instinct MI325X",
        "",
    ],
)
def test_unknown_names_resolve_to_an_explicit_unknown_sku(
    gpus: GpuCatalog, reported: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="fleet.gpus"):
        sku = gpus.resolve(reported)
    assert sku == unknown_sku(reported)
    assert sku.key == "unknown" and not sku.known and sku.name == reported
    assert sku.hbm_bytes is None and sku.bf16_dense_flops is None and sku.hbm_bandwidth_bytes_per_s is None
    assert sku.peak_flops(Precision.BF16) is None and sku.ridge_point(Precision.BF16) is None
    assert any(repr(reported) in record.getMessage() for record in caplog.records)


def test_the_unknown_warning_is_logged_once_per_name(caplog: pytest.LogCaptureFixture) -> None:
    gpus = load_catalog().gpus
    with caplog.at_level(logging.WARNING, logger="fleet.gpus"):
        for _ in range(3):
            gpus.resolve("NVIDIA RTX 6000 Ada Generation")
    assert len(caplog.records) == 1


def _sku(key: str, *, names: tuple[str, ...] = (), patterns: tuple[str, ...] = ()) -> GpuSku:
    return replace(unknown_sku(key), key=key, name=key, known=True, nvml_names=names, name_patterns=patterns)


MIG = r"\s+MIG\s+(?P<profile>\S+)$"


def test_a_name_two_patterns_claim_is_unknown(caplog: pytest.LogCaptureFixture) -> None:
    catalog = GpuCatalog(
        {"A": _sku("A", patterns=("Acme X.*",)), "B": _sku("B", patterns=("Acme X1.*",))},
        mig_suffix_pattern=MIG,
    )
    assert catalog.resolve("Acme X2").key == "A"
    with caplog.at_level(logging.WARNING, logger="fleet.gpus"):
        assert catalog.resolve("Acme X1 Pro").key == "unknown"
    assert "several SKUs" in caplog.text and "'Acme X1 Pro'" in caplog.text


def test_inconsistent_catalogs_are_refused() -> None:
    with pytest.raises(ValueError, match="claimed by both"):
        GpuCatalog({"A": _sku("A", names=("Acme",)), "B": _sku("B", names=("ACME",))}, mig_suffix_pattern=MIG)
    with pytest.raises(ValueError, match="also matches patterns"):
        GpuCatalog(
            {"A": _sku("A", names=("Acme 1",)), "B": _sku("B", patterns=("Acme.*",))}, mig_suffix_pattern=MIG
        )
    with pytest.raises(ValueError, match="reserved"):
        GpuCatalog({"unknown": _sku("unknown")}, mig_suffix_pattern=MIG)
    with pytest.raises(ValueError, match="profile"):
        GpuCatalog({}, mig_suffix_pattern=r"\s+MIG\s+\S+$")
    with pytest.raises(ValueError, match="bad name pattern"):
        GpuCatalog({"A": _sku("A", patterns=("(",))}, mig_suffix_pattern=MIG)


def test_get_names_the_known_keys(gpus: GpuCatalog) -> None:
    with pytest.raises(KeyError, match="H100-SXM"):
        gpus.get("H100")
    assert gpus.get("H200-SXM").name == "H200 SXM"


def test_skus_mapping_is_read_only(gpus: GpuCatalog) -> None:
    with pytest.raises(TypeError):
        gpus.skus["X"] = gpus.get("H100-SXM")  # type: ignore[index]
