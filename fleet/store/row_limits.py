"""What a stored row can hold: the integer bounds of its columns, and the error for a value beyond them.

Apart from :mod:`fleet.store.rows` so that :mod:`fleet.store.latest_records`, which rows builds on, raises
the same error (it is re-exported from rows, where the rest of the project imports it).
"""

from __future__ import annotations

INT64_MAX = 2**63 - 1
INT32_MAX = 2**31 - 1


class RowValueError(ValueError):
    """A record the contract accepts but the store cannot hold (an integer beyond 64 bits, a NUL char)."""

    def __init__(self, field_name: str, message: str, tag: int | None = None) -> None:
        super().__init__(f"{field_name}: {message}")
        self.field = field_name
        self.message = message
        self.tag = tag  # what the caller passed to RowBatch.add for the offending record (ingest: its line)
