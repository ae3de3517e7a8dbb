"""Small-integer codes for the enumerations the raw sample tables store (``SMALLINT``, 2 bytes, instead of
the value's text, 3 to 12 bytes).

The codes are stored data: a code never changes meaning. The ``gpu_samples`` / ``engine_samples`` views
decode them with a ``CASE`` spelled out in the migration that created the view (0005), so a value added to
an enumeration of :mod:`fleet.contract` needs a code here *and* a migration that recreates the views;
``tests/fleet/test_store_partitions.py`` writes every member of every enumeration and reads it back, and
fails until both exist. Until then the writer refuses the value by name (:class:`UnknownCodeError`) rather
than storing a number no view can read.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

STATE = MappingProxyType({"ok": 0, "lost": 1, "degraded": 2})  # fleet.contract.GpuState
SOURCE = MappingProxyType(  # fleet.contract.TelemetrySource
    {"nvml-gpm": 0, "nvml-basic": 1, "dcgm": 2, "prometheus": 3, "sim": 4}
)
EVIDENCE = MappingProxyType({"profiling": 0, "utilisation": 1})  # fleet.contract.ActivityEvidence
ROLE = MappingProxyType({"prefill": 0, "decode": 1, "mixed": 2, "unknown": 3})  # fleet.contract.Role
ROLE_SOURCE = MappingProxyType(  # fleet.contract.RoleSource
    {"engine": 0, "pod-label": 1, "component": 2, "cmdline": 3, "config": 4, "sim": 5, "none": 6}
)

# Raw sample column -> the codes of the enumeration it holds.
GPU_COLUMNS: Mapping[str, Mapping[str, int]] = MappingProxyType(
    {"state": STATE, "source": SOURCE, "activity_evidence": EVIDENCE}
)
ENGINE_COLUMNS: Mapping[str, Mapping[str, int]] = MappingProxyType({"role": ROLE, "role_source": ROLE_SOURCE})


class UnknownCodeError(ValueError):
    """A sample names an enumeration value the store has no code for (see the module docstring)."""


def encoder(codes: Mapping[str, int], *, nullable: bool = False) -> dict[str | None, int | None]:
    """A lookup for a column's values (``None`` -> ``None`` when the column is nullable); used with
    ``__getitem__`` so that a value without a code raises ``KeyError``, turned into :class:`UnknownCodeError`
    by :func:`unknown_code`."""
    table: dict[str | None, int | None] = {None: None} if nullable else {}
    table.update(codes)
    return table


def no_code_message(value: object, codes: Mapping[str, int]) -> str:
    known = ", ".join(sorted(codes))
    return (
        f"the store has no code for {value!r} (known: {known}); fleet/store/codes.py and a migration "
        "recreating the sample views must add it"
    )


def unknown_code(column: str, value: object, codes: Mapping[str, int]) -> UnknownCodeError:
    return UnknownCodeError(f"{column}: {no_code_message(value, codes)}")
