"""``phasefit catalog gpus|models``: the GPU and model catalogs, built-in data merged with the operator's
catalog file (``PHASEFIT_CATALOG_PATH``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from phasefit.cli.output import add_row, emit_json, fail, human

if TYPE_CHECKING:
    from fleet.catalog import Catalog

app = typer.Typer(
    help="The GPU and model catalogs (built-in, merged with the file PHASEFIT_CATALOG_PATH names).",
    no_args_is_help=True,
)

JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON on stdout instead of a table on stderr.")]


def _load() -> Catalog:
    from pydantic import ValidationError

    from fleet.catalog import CatalogError, load_catalog
    from fleet.settings import Settings

    try:
        return load_catalog(Settings().catalog_path)
    except (CatalogError, ValidationError) as exc:
        fail(str(exc))
        raise  # unreachable: fail() raises typer.Exit


def _fmt(value: float | None, scale: float = 1.0, digits: int = 0) -> str:
    return "-" if value is None else f"{value / scale:,.{digits}f}"


@app.command("gpus")
def gpus(json_output: JsonFlag = False) -> None:
    """List the GPU SKUs: memory, bandwidth, dense compute, power, interconnect, price."""
    from dataclasses import asdict

    from fleet.precision import Precision

    catalog = _load()
    skus = list(catalog.gpus.skus.values())
    if json_output:
        rows: list[dict[str, Any]] = []
        for sku in skus:
            row = asdict(sku)
            row["ridge_point_bf16_flop_per_byte"] = sku.ridge_point(Precision.BF16)
            row["ridge_point_fp8_flop_per_byte"] = sku.ridge_point(Precision.FP8)
            rows.append(row)
        emit_json(rows)
        return
    from rich.table import Table

    table = Table(title="GPU catalog (dense TFLOP/s, ridge in FLOP/byte at BF16; '-' = unknown)")
    table.add_column("key", no_wrap=True)
    for column in ("HBM GB", "TB/s", "BF16 TF", "FP8 TF", "ridge", "TDP W"):
        table.add_column(column, justify="right", no_wrap=True)
    table.add_column("$/h", justify="right", no_wrap=True)
    table.add_column("interconnect", no_wrap=True, overflow="ellipsis", min_width=12)
    for sku in skus:
        link = sku.interconnect or "-"
        if sku.interconnect_bytes_per_s:
            link = f"{link} {sku.interconnect_bytes_per_s / 1e9:,.0f} GB/s"
        add_row(
            table,
            sku.key,
            _fmt(sku.hbm_bytes, 1e9),
            _fmt(sku.hbm_bandwidth_bytes_per_s, 1e12, 2),
            _fmt(sku.bf16_dense_flops, 1e12),
            _fmt(sku.fp8_dense_flops, 1e12),
            _fmt(sku.ridge_point(Precision.BF16)),
            _fmt(sku.tdp_w),
            _fmt(sku.hourly_price_usd, digits=2),
            link,
        )
    human().print(table)


@app.command("models")
def models(json_output: JsonFlag = False) -> None:
    """List the model architectures with derived total/active parameters and BF16 KV bytes per token."""
    from dataclasses import asdict

    from fleet.models import active_params, kv_bytes_per_token, total_params, weight_bytes
    from fleet.precision import Precision

    catalog = _load()
    archs = list(catalog.models.models.values())
    if json_output:
        rows: list[dict[str, Any]] = []
        for arch in archs:
            row = asdict(arch)
            row["total_params"] = total_params(arch)
            row["active_params"] = active_params(arch)
            row["kv_bytes_per_token_bf16"] = kv_bytes_per_token(arch, Precision.BF16)
            row["weight_bytes_bf16"] = weight_bytes(arch, Precision.BF16)
            rows.append(row)
        emit_json(rows)
        return
    from rich.table import Table

    table = Table(title="Model catalog (parameters computed from the config; KV bytes per token at BF16)")
    table.add_column("key", no_wrap=True)
    for column in ("layers", "attn", "experts", "total B", "active B", "KV B/token"):
        table.add_column(column, justify="right", no_wrap=True)
    for arch in archs:
        experts = "-" if arch.experts_total is None else f"{arch.experts_active}/{arch.experts_total}"
        add_row(
            table,
            arch.key,
            str(arch.layers),
            arch.attention.upper(),
            experts,
            _fmt(total_params(arch), 1e9, 2),
            _fmt(active_params(arch), 1e9, 2),
            _fmt(kv_bytes_per_token(arch, Precision.BF16)),
        )
    human().print(table)
