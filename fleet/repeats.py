"""One sample key sent twice in a file with other GPU or worker attributes, the second time in a later block.

A block's own repeats are compared as its records are added (:class:`~fleet.store.rows.RowBatch`, strict),
and a repeat's sample values by the writer (the row stored first). Its attributes (node, GPU name, model...)
live only in the ``gpus`` / ``workers`` rows, folded "latest window wins", so a repeat at a window earlier
than its GPU's or worker's latest would go uncompared. The blocks fingerprint each GPU's and worker's
attributes (:mod:`fleet.store.variants`): a key can repeat with other attributes only if its GPU or worker
came with more than one set of them. Only then, and only when the file met a stored key, is the file read
once more, comparing the records of those colliding keys (memory: those records only).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

import msgspec

from fleet.contract import RECORD_ADAPTER, GpuSample
from fleet.store.rows import ENGINE_ATTRIBUTES, GPU_ATTRIBUTES, RowValueError, repeated_with_other_values

SuspectKey = tuple[bool, str, datetime]  # (is a GPU, gpu_uuid or worker_id, ts as UTC)
_BOM = b"\xef\xbb\xbf"


class _Head(msgspec.Struct):
    """What picks a line out: its kind and key (every other field ignored)."""

    kind: str = ""
    gpu_uuid: str | None = None
    worker_id: str | None = None


_HEAD = msgspec.json.Decoder(_Head).decode


def suspects(
    collided: dict[str, set[tuple[str, datetime]]], changed: set[tuple[bool, str]]
) -> set[SuspectKey]:
    """The colliding sample keys (:class:`fleet.store.resend.Conflicts.collided`) of GPUs and workers sent
    with more than one set of attributes."""
    found: set[SuspectKey] = set()
    for kind, is_gpu in (("gpu_sample", True), ("engine_sample", False)):
        found.update((is_gpu, id_, ts) for id_, ts in collided[kind] if (is_gpu, id_) in changed)
    return found


def attribute_repeat(
    blocks: Iterable[tuple[bytes, int, int]], wanted: set[SuspectKey]
) -> tuple[int, RowValueError] | None:
    """The first line (number, error) repeating one of the ``wanted`` keys with other attributes, or None.
    ``blocks``: the file's (block of whole lines, number of its first line, bytes read) once more."""
    ids = {(is_gpu, id_) for is_gpu, id_, _ in wanted}
    first: dict[SuspectKey, dict[str, Any]] = {}
    for block, first_line, _read in blocks:
        for offset, raw in enumerate(block.split(b"\n")):
            line = raw.strip()
            if first_line == 1 and offset == 0:
                line = line.removeprefix(_BOM)
            head = _HEAD(line) if line else None
            is_gpu = head is not None and head.kind == "gpu_sample"
            if head is None or (is_gpu, head.gpu_uuid if is_gpu else head.worker_id) not in ids:
                continue
            record = RECORD_ADAPTER.validate_json(line)  # valid: the load checked every line
            id_ = record.gpu_uuid if isinstance(record, GpuSample) else record.worker_id
            key = (is_gpu, id_, record.ts)
            if key not in wanted:
                continue
            attributes = GPU_ATTRIBUTES if is_gpu else ENGINE_ATTRIBUTES
            values = {name: record.__dict__[name] for name in attributes.names}
            before = first.setdefault(key, values)
            if before != values:
                key_field = "gpu_uuid" if is_gpu else "worker_id"
                error = repeated_with_other_values(
                    key_field, id_, record.ts, before, values, first_line + offset
                )
                return first_line + offset, error
    return None
