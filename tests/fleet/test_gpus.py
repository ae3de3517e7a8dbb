from __future__ import annotations

import csv
import logging
import pickle
from dataclasses import replace
from pathlib import Path

import pytest

from fleet.catalog import load_catalog
from fleet.gpus import GpuCatalog, GpuSku, MigGeometry, MigProfile, parse_mig_profile, unknown_sku
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
    "A100-SXM-40GB": "A100 40GB SXM",
    "A800-SXM-80GB": "A800 80GB SXM",
    "A10G": "A10G",
    "L4": "L4",
    "T4": "T4",
    "L20": "L20",
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


def test_the_catalog_holds_the_sixteen_skus(gpus: GpuCatalog) -> None:
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
    ],
)
def test_reported_names_resolve(gpus: GpuCatalog, reported: str, key: str) -> None:
    sku = gpus.resolve(reported)
    assert sku.known and not sku.is_mig
    assert sku.key == key


@pytest.mark.parametrize(
    ("reported", "profile"),
    [
        ("NVIDIA H100 80GB HBM3 MIG 1g.10gb", "1g.10gb"),
        ("NVIDIA H100 80GB HBM3 MIG 1G.10GB+me", "1g.10gb+me"),
        ("NVIDIA A100-SXM4-80GB MIG 1c.3g.40gb", "1c.3g.40gb"),
        ("NVIDIA B200 MIG 1g.23gb+me.all", "1g.23gb+me.all"),
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
        "NVIDIA A100-PCIE-40GB",
        "NVIDIA A10",
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


# --- MIG instances: SKUs of their own, derived from the parent's figures and the profile ----------------

MIG_PROFILES = DATA / "benchmarks" / "mig_profiles.csv"


def _mig_rows() -> list[dict[str, str]]:
    with MIG_PROFILES.open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


@pytest.mark.parametrize(
    ("reported", "key"),
    [
        ("NVIDIA H100 80GB HBM3 MIG 1g.10gb", "H100-SXM/1g.10gb"),
        ("NVIDIA H100 80GB HBM3 MIG 1G.10GB+me", "H100-SXM/1g.10gb"),  # media engines: same SMs and memory
        ("NVIDIA H100 PCIe MIG 3g.40gb", "H100-PCIe/3g.40gb"),
        ("NVIDIA H200 MIG 3g.71gb", "H200-SXM/3g.71gb"),
        ("NVIDIA H200 NVL MIG 1g.18gb", "H200-NVL/1g.18gb"),
        ("NVIDIA A100-SXM4-80GB MIG 7c.7g.80gb", "A100-SXM-80GB/7g.80gb"),  # one CI holding the whole GI
        ("NVIDIA B200 MIG 1g.23gb+me.all", "B200/1g.23gb"),
    ],
)
def test_mig_names_resolve_to_their_own_sku_never_the_parent(
    gpus: GpuCatalog, reported: str, key: str
) -> None:
    sku = gpus.resolve(reported)
    assert sku.known and sku.is_mig
    assert sku.key == key
    parent = gpus.get(key.split("/", maxsplit=1)[0])
    assert sku.parent_key == parent.key and sku != parent
    assert sku.hbm_bytes is not None and parent.hbm_bytes is not None
    assert sku.hbm_bytes <= parent.hbm_bytes


def test_dcgm_exporter_names_the_parent_and_the_profile_apart(gpus: GpuCatalog) -> None:
    """dcgm-exporter's modelName is the parent's name; GPU_I_PROFILE carries the profile."""
    assert gpus.resolve("NVIDIA H100 80GB HBM3", mig_profile="2g.20gb").key == "H100-SXM/2g.20gb"
    assert gpus.resolve("NVIDIA H200", mig_profile="7g.141gb").key == "H200-SXM/7g.141gb"
    assert gpus.resolve("NVIDIA H200").key == "H200-SXM"  # the same name without a profile: the whole GPU


@pytest.mark.parametrize("row", _mig_rows(), ids=lambda row: f"{row['gpu_key']}/{row['profile']}")
def test_every_catalogued_profile_derives_its_figures(gpus: GpuCatalog, row: dict[str, str]) -> None:
    """Compute x GPCs/7, bandwidth x memory slices/8, memory from the profile, for each sourced row."""
    parent = gpus.get(row["gpu_key"])
    sku = gpus.get(f"{row['gpu_key']}/{row['profile']}")
    compute = int(row["compute_slices"]) / int(row["compute_slices_total"])
    bandwidth = int(row["memory_slices"]) / int(row["memory_slices_total"])
    assert sku.hbm_bytes == int(row["memory_gb"]) * 1_000_000_000
    assert parent.hbm_bandwidth_bytes_per_s is not None
    assert sku.hbm_bandwidth_bytes_per_s == pytest.approx(parent.hbm_bandwidth_bytes_per_s * bandwidth)
    for precision in (Precision.BF16, Precision.FP8, Precision.FP4):
        whole = parent.peak_flops(precision)
        if whole is None:
            assert sku.peak_flops(precision) is None  # unknown stays unknown, never 0
        else:
            assert sku.peak_flops(precision) == pytest.approx(whole * compute)
    assert sku.compute_share == pytest.approx(compute)
    assert sku.bandwidth_share == pytest.approx(bandwidth)
    assert sku.tdp_w is None and sku.hourly_price_usd is None and sku.interconnect_bytes_per_s is None
    assert parent.key in sku.sources and row["profile"] in sku.sources


def test_the_slice_figures_of_the_issue(gpus: GpuCatalog) -> None:
    one = gpus.get("H100-SXM/1g.10gb")
    assert one.hbm_bytes == 10e9
    assert one.hbm_bandwidth_bytes_per_s == pytest.approx(3.35e12 / 8)  # 1 of 8 memory slices
    assert one.bf16_dense_flops == pytest.approx(989e12 / 7)  # 1 of 7 GPCs
    three = gpus.get("H100-SXM/3g.40gb")
    assert three.hbm_bandwidth_bytes_per_s == pytest.approx(3.35e12 / 2)  # 4 memory slices
    assert three.bf16_dense_flops == pytest.approx(989e12 * 3 / 7)
    four = gpus.get("H100-SXM/4g.40gb")
    assert four.hbm_bandwidth_bytes_per_s == three.hbm_bandwidth_bytes_per_s  # same memory, more compute
    assert four.bf16_dense_flops is not None and three.bf16_dense_flops is not None
    assert four.bf16_dense_flops > three.bf16_dense_flops
    full = gpus.get("H200-SXM/7g.141gb")
    h200 = gpus.get("H200-SXM")
    assert (
        full.hbm_bytes == h200.hbm_bytes and full.hbm_bandwidth_bytes_per_s == h200.hbm_bandwidth_bytes_per_s
    )
    assert full.key != h200.key  # a full-size instance is still an instance (no NVLink peer-to-peer)
    # The H200 slice of one GPC has more bandwidth per GPC than the H100's: decode's reason to prefer it.
    assert (gpus.get("H200-SXM/1g.18gb").hbm_bandwidth_bytes_per_s or 0) > (
        one.hbm_bandwidth_bytes_per_s or 0
    )


def test_the_catalog_tables_agree_with_the_sourced_rows(gpus: GpuCatalog) -> None:
    rows = _mig_rows()
    by_gpu: dict[str, dict[str, int]] = {}
    for row in rows:
        assert row["source"].strip(), row
        by_gpu.setdefault(row["gpu_key"], {})[row["profile"]] = int(row["memory_slices"])
        parent = gpus.get(row["gpu_key"])
        assert parent.mig is not None and parent.hbm_bytes is not None
        assert parent.mig.compute_slices == int(row["compute_slices_total"])
        assert parent.mig.memory_slices == int(row["memory_slices_total"])
        # The profile's memory is its memory slices' share of the GPU's (the names round it).
        share = int(row["memory_gb"]) * 1e9 / parent.hbm_bytes * parent.mig.memory_slices
        assert round(share) == int(row["memory_slices"]), row
        # As many instances fit as the GPU has slices of both kinds for.
        instances = int(row["max_instances"])
        assert instances * int(row["memory_slices"]) <= parent.mig.memory_slices
        assert instances * int(row["compute_slices"]) <= parent.mig.compute_slices
    tables = {key: dict(sku.mig.profiles) for key, sku in gpus.skus.items() if sku.mig is not None}
    assert tables == by_gpu
    for key in ("H100-SXM", "H200-SXM"):
        assert key in tables  # the issue's two: every profile it names is catalogued
    assert set(tables["H100-SXM"]) >= {"1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"}
    assert set(tables["H200-SXM"]) >= {"1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"}


@pytest.mark.parametrize(
    ("reported", "profile", "why"),
    [
        ("NVIDIA H100 80GB HBM3 MIG 5g.50gb", None, "not in the H100-SXM MIG table"),
        ("NVIDIA H100 80GB HBM3", "1g.18gb", "not in the H100-SXM MIG table"),  # an H200 profile
        ("NVIDIA A100-SXM4-80GB MIG 1c.3g.40gb", None, "compute instance"),
        ("NVIDIA H20", "1g.12gb", "no MIG profile table for H20"),
        ("NVIDIA L40S", "1g.12gb", "no MIG profile table for L40S"),
        ("NVIDIA GH200 96GB HBM3 MIG 1g.12gb", None, "GPU the catalog does not know"),
        ("NVIDIA H100 80GB HBM3", "half", "not a MIG profile name"),
    ],
)
def test_an_unknown_profile_is_the_explicit_unknown_with_its_reason_not_the_parent(
    reported: str, profile: str | None, why: str, caplog: pytest.LogCaptureFixture
) -> None:
    gpus = load_catalog().gpus  # its own: the warning is logged once per name and catalog
    with caplog.at_level(logging.WARNING, logger="fleet.gpus"):
        sku = gpus.resolve(reported, mig_profile=profile)
    assert sku.key == "unknown" and not sku.known
    assert sku.is_mig  # still an instance, counted as one
    assert why in sku.notes
    assert sku.hbm_bytes is None and sku.hbm_bandwidth_bytes_per_s is None and sku.bf16_dense_flops is None
    assert caplog.records and why in caplog.text


def test_lookup_and_get_know_mig_keys(gpus: GpuCatalog) -> None:
    assert gpus.lookup("H100-SXM") == gpus.get("H100-SXM")
    assert (
        gpus.lookup("H100-SXM/3g.40gb")
        == gpus.get("H100-SXM/3g.40gb")
        == gpus.resolve("NVIDIA H100 80GB HBM3 MIG 3g.40gb")
    )
    unknown = gpus.lookup("H100-SXM/9g.90gb")
    assert unknown is not None and not unknown.known and "9g.90gb" in unknown.notes
    with pytest.raises(KeyError, match="not in the H100-SXM MIG table"):
        gpus.get("H100-SXM/9g.90gb")
    assert gpus.lookup("H999/1g.10gb") is None and gpus.lookup("H999") is None
    assert "H100-SXM/1g.10gb" not in gpus.skus  # the whole-GPU SKUs only


def test_a_catalog_key_may_not_look_like_a_mig_key() -> None:
    with pytest.raises(ValueError, match="reserved for MIG"):
        GpuCatalog({"A/1g.5gb": _sku("A/1g.5gb")}, mig_suffix_pattern=MIG)


def test_a_mig_table_that_cannot_be_right_is_refused() -> None:
    def catalog(profiles: dict[str, int]) -> GpuCatalog:
        sku = replace(_sku("A"), hbm_bytes=80_000_000_000, mig=MigGeometry(7, 8, profiles, "test"))
        return GpuCatalog({"A": sku}, mig_suffix_pattern=MIG)

    assert catalog({"1g.10gb": 1}).get("A/1g.10gb").hbm_bytes == 10e9
    with pytest.raises(ValueError, match="GPCs"):
        catalog({"8g.80gb": 8})
    with pytest.raises(ValueError, match="memory slices"):
        catalog({"1g.10gb": 9})
    with pytest.raises(ValueError, match="more memory"):
        catalog({"7g.90gb": 8})
    with pytest.raises(ValueError, match="GPU-instance name"):
        catalog({"1g.10gb+me": 1})


def test_parse_mig_profile() -> None:
    assert parse_mig_profile("3g.40gb") == MigProfile("3g.40gb", 3, 40)
    assert parse_mig_profile("1G.10GB+me") == MigProfile("1g.10gb", 1, 10, None, "+me")
    assert parse_mig_profile("1c.3g.40gb") == MigProfile("3g.40gb", 3, 40, 1)
    assert parse_mig_profile("3c.3g.40gb") == MigProfile("3g.40gb", 3, 40)  # the whole GPU instance
    for text in ("", "MIG", "0g.10gb", "3g", "1g.10gb extra"):
        assert parse_mig_profile(text) is None


def test_skus_with_a_mig_table_stay_hashable_picklable_values(gpus: GpuCatalog) -> None:
    h100 = gpus.get("H100-SXM")
    again = load_catalog().gpus.get("H100-SXM")
    assert h100 == again and hash(h100) == hash(again)
    assert pickle.loads(pickle.dumps(h100)) == h100
    assert len({h100, again, gpus.get("H100-SXM/1g.10gb")}) == 2


# --- the GPUs of issue 29's catalog item: resolved from their NVML/DCGM names, unknown figures None ----

NEW_GPUS = [
    # (NVML/DCGM name, key, HBM bytes, bandwidth B/s, BF16/FP16 dense, FP8 dense, link B/s, TDP W)
    ("NVIDIA A100-SXM4-40GB", "A100-SXM-40GB", 40e9, 1.555e12, 312e12, None, 600e9, 400),
    ("NVIDIA A800-SXM4-80GB", "A800-SXM-80GB", 80e9, 2.039e12, 312e12, None, 400e9, 400),
    ("NVIDIA A10G", "A10G", 24e9, 0.6e12, None, None, None, None),
    ("NVIDIA L4", "L4", 24e9, 0.3e12, 121e12, 242.5e12, 64e9, 72),
    ("Tesla T4", "T4", 16e9, 0.3e12, 65e12, None, 32e9, 70),
    ("NVIDIA L20", "L20", 48e9, 0.864e12, 119.5e12, 239e12, 64e9, 275),
]


@pytest.mark.parametrize(
    ("reported", "key", "hbm", "bandwidth", "bf16", "fp8", "link", "tdp"),
    NEW_GPUS,
    ids=[row[1] for row in NEW_GPUS],
)
def test_the_added_gpus_resolve_with_their_figures(
    gpus: GpuCatalog,
    reported: str,
    key: str,
    hbm: float,
    bandwidth: float,
    bf16: float | None,
    fp8: float | None,
    link: float | None,
    tdp: float | None,
) -> None:
    sku = gpus.resolve(reported)
    assert sku.known and not sku.is_mig and sku.key == key
    assert sku.hbm_bytes == hbm
    assert sku.hbm_bandwidth_bytes_per_s == pytest.approx(bandwidth)
    for value, expected in (
        (sku.bf16_dense_flops, bf16),
        (sku.fp8_dense_flops, fp8),
        (sku.interconnect_bytes_per_s, link),
        (sku.tdp_w, tdp),
    ):
        if expected is None:
            assert value is None  # unknown or unsupported: None, never 0
        else:
            assert value == pytest.approx(expected)
    assert sku.fp4_dense_flops is None  # none of them has FP4 tensor cores
    assert sku.hourly_price_usd is None  # operators set prices
    assert sku.peak_flops(Precision.FP8) == sku.fp8_dense_flops
    assert sku.sources.strip()
    assert gpus.resolve(reported.upper()).key == key  # case ignored


def test_no_fp8_on_ampere_and_turing_is_unknown_never_zero(gpus: GpuCatalog) -> None:
    for key in ("A100-SXM-40GB", "A800-SXM-80GB", "A10G", "T4"):
        sku = gpus.get(key)
        assert sku.fp8_dense_flops is None and sku.peak_flops(Precision.FP8) is None
        assert sku.ridge_point(Precision.FP8) is None
    assert gpus.get("A10G").bf16_dense_flops is None  # no citable A10G figure: unknown, not the A10's
    assert gpus.get("A10G").ridge_point(Precision.BF16) is None
    t4 = gpus.get("T4")  # no BF16 on Turing: the field holds the FP16 tensor rate, said so in the notes
    assert t4.peak_flops(Precision.FP16) == 65e12 and "FP16" in t4.notes


@pytest.mark.parametrize(
    ("profile", "gb", "compute", "memory_slices"),
    [
        ("1g.5gb", 5, 1, 1),
        ("1g.10gb", 10, 1, 2),
        ("2g.10gb", 10, 2, 2),
        ("3g.20gb", 20, 3, 4),
        ("4g.20gb", 20, 4, 4),
        ("7g.40gb", 40, 7, 8),
    ],
)
def test_the_a100_40gb_mig_profiles_resolve(
    gpus: GpuCatalog, profile: str, gb: int, compute: int, memory_slices: int
) -> None:
    sku = gpus.resolve(f"NVIDIA A100-SXM4-40GB MIG {profile}")
    assert sku.known and sku.is_mig and sku.key == f"A100-SXM-40GB/{profile}"
    assert sku == gpus.resolve("NVIDIA A100-SXM4-40GB", mig_profile=profile)  # dcgm-exporter's way
    assert sku.hbm_bytes == gb * 1_000_000_000
    assert sku.bf16_dense_flops == pytest.approx(312e12 * compute / 7)
    assert sku.hbm_bandwidth_bytes_per_s == pytest.approx(1.555e12 * memory_slices / 8)
    assert sku.fp8_dense_flops is None  # the parent has none: unknown, never 0
    assert sku.name == f"A100 40GB SXM MIG {profile}"


def test_the_a800_takes_the_a100_80gb_mig_profiles(gpus: GpuCatalog) -> None:
    sku = gpus.resolve("NVIDIA A800-SXM4-80GB MIG 3g.40gb")
    assert sku.known and sku.key == "A800-SXM-80GB/3g.40gb"
    a800, a100 = gpus.get("A800-SXM-80GB"), gpus.get("A100-SXM-80GB")
    assert a800.mig is not None and a100.mig is not None
    assert dict(a800.mig.profiles) == dict(a100.mig.profiles)


@pytest.mark.parametrize("profile_apart", [False, True])
def test_an_unknown_parent_names_its_mig_instance_once(gpus: GpuCatalog, profile_apart: bool) -> None:
    """'<parent> MIG 2g.20gb', never '<parent> MIG 2g.20gb MIG 2g.20gb'."""
    parent = "NVIDIA GH200 96GB HBM3"
    sku = (
        gpus.resolve(parent, mig_profile="2g.20gb")
        if profile_apart
        else gpus.resolve(f"{parent} MIG 2g.20gb")
    )
    assert not sku.known and sku.is_mig
    assert sku.name == f"{parent} MIG 2g.20gb"
    assert sku.name.count("MIG") == 1 and sku.notes.count("MIG") == 1
    assert repr(parent) in sku.notes
