"""The findings of ``phasefit analyze``: a table where every column fits the console unwrapped, else one
block per finding (:mod:`phasefit.cli.fitted_table`). An unknown figure reads "-", never 0."""

from __future__ import annotations

from typing import TYPE_CHECKING

from phasefit.cli.fitted_table import print_fitted

if TYPE_CHECKING:
    from rich.console import Console

    from fleet.contract import Finding


def rate(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def figure_range(value: float | None, low: float | None, high: float | None, digits: int = 0) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f} ({rate(low, digits)}-{rate(high, digits)})"


# The findings' columns, in order: the header and the figure of one finding.
FINDING_COLUMNS = (
    "#",
    "severity",
    "kind",
    "worker / pool",
    "SKU",
    "role",
    "bottleneck",
    "lost output tok/s (range)",
    "lost req/s",
    "total tok/s",
    "since (UTC)",
    "status",
)


def finding_cells(number: int, f: Finding) -> tuple[str, ...]:
    """One finding's cells, in :data:`FINDING_COLUMNS` order (an unknown figure reads "-", never 0; the
    total tokens/s of a finding that estimates no loss reads "unknown")."""
    from analyzer.findings.loss import states_loss

    total = f.lost_tokens_per_s if states_loss(f) else None
    return (
        str(number),
        f.severity.value,
        f.kind.value,
        f.worker_id or f.pool or "fleet",
        f.gpu_sku or "-",
        f.role.value,
        f.bottleneck.value,
        figure_range(
            f.lost_output_tokens_per_s, f.lost_output_tokens_per_s_low, f.lost_output_tokens_per_s_high
        ),
        rate(f.lost_requests_per_s, 2),
        "unknown" if total is None else rate(total),
        f.first_seen.strftime("%m-%d %H:%M"),
        f.status.value,
    )


def print_findings(findings: list[Finding], console: Console) -> None:
    """The findings as a table when every cell fits the console's width unwrapped, else stacked: one block
    per finding, its worker on a line of its own (:func:`phasefit.cli.fitted_table.print_fitted`)."""
    rows = [finding_cells(number, f) for number, f in enumerate(findings, start=1)]
    print_fitted(console, "Findings", FINDING_COLUMNS, rows, "worker / pool")
