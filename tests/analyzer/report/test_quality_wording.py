"""The data-quality table names what its unattributed count counts: devices once MIG instances are in it."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

from analyzer.report.blocks import Table
from analyzer.report.model import AuditReport, DataQuality
from analyzer.report.parts import quality_blocks


def _quality(**changes: Any) -> DataQuality:
    fields: dict[str, Any] = {
        "gpus": 8,
        "gpu_hours_expected": 8 * 168.0,
        "gpu_hours_with_telemetry": 8 * 168.0,
        "gpu_hours_by_source": {"dcgm": 8 * 168.0},
        "nodes_with_gaps": [],
        "lost_gpus": [],
        "degraded_gpu_hours": 0.0,
        "unattributed_gpus": 1,
        "workers": 4,
        "workers_role_unknown": 0,
        "role_sources": {"label": 4},
        "mig_instances": 0,
        "physical_gpus": 8,
        "mig_parent_gpus": 0,
    }
    fields.update(changes)
    return DataQuality(**fields)


def _rows(quality: DataQuality) -> dict[str, str]:
    report = cast(AuditReport, SimpleNamespace(quality=quality, price_source="no prices"))
    table = next(block for block in quality_blocks(report) if isinstance(block, Table))
    return {str(row[0]): str(row[1]) for row in table.rows}


def test_without_mig_the_unattributed_count_is_of_gpus() -> None:
    rows = _rows(_quality())
    assert rows["GPUs without a worker (unattributed, never guessed)"] == "1"


def test_with_mig_instances_the_unattributed_count_is_of_devices_not_gpus() -> None:
    rows = _rows(_quality(gpus=10, mig_instances=7, physical_gpus=4, mig_parent_gpus=1))
    label = next(key for key in rows if "without a worker" in key)
    assert label.startswith("devices without a worker") and "MIG instances" in label
    assert rows[label] == "1"
