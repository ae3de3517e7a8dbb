"""The ingest envelope ``{"records": [...]}`` validated into store rows, or errors naming record and field.

Validation is the data contract's (:mod:`fleet.contract`, strict, with timestamps inside the window the
service passes: ``PHASEFIT_INGEST_MAX_AGE_S`` before its clock to ``PHASEFIT_INGEST_MAX_FUTURE_S`` after it)
plus the service's own limits: no object repeating a key, records per batch, the length of names (node, GPU,
worker, model, engine) and no control characters in them, and the nodes a token is bound to. Nothing here
touches the store; the result is a :class:`RowBatch` ready to write.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from fleet.contract import RECORD_KINDS, EngineSample, GpuSample, Record, error_message
from fleet.store.rows import RowBatch, RowValueError, TimeEncoding
from phasefit.service.wire import keys_all_distinct, repeated_key

MAX_REPORTED_ERRORS = 50
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_GPU_NAMES = ("node", "gpu_uuid", "gpu_name", "worker_id", "parent_gpu_uuid", "mig_profile")
_ENGINE_NAMES = ("worker_id", "node", "engine", "model", "precision")


@dataclass(frozen=True)
class RecordError:
    index: int | None  # None: the envelope itself
    field: str | None
    message: str


class BatchRejectedError(Exception):
    """A batch refused as a whole: ``status`` 413 (too many records), 422 (invalid) or 403 (foreign node)."""

    def __init__(self, status: int, reason: str, errors: list[RecordError]) -> None:
        super().__init__(f"{reason}: {errors[:1]}")
        self.status = status
        self.reason = reason
        self.errors = errors


class BatchValidator:
    """Parses ingest bodies under the configured limits (one per app: the limits are runtime settings)."""

    def __init__(self, *, max_records: int, max_string_length: int) -> None:
        self.max_records = max_records
        self.max_string_length = max_string_length
        self.envelope: type[BaseModel] = create_model(
            "IngestBatch",
            __config__=ConfigDict(extra="forbid"),
            records=(Annotated[list[Record], Field(max_length=max_records)], ...),
        )

    def parse(self, body: bytes, ts_window: tuple[datetime, datetime]) -> list[GpuSample | EngineSample]:
        """The records of ``body``, each stamped inside ``ts_window`` (earliest, latest exclusive), no object
        of it repeating a key (validated first: pydantic reads the last of repeated keys, and what it read
        tells how many distinct keys the body holds, which proves most bodies free of repeats cheaply)."""
        try:
            envelope = self.envelope.model_validate_json(body, context={"ts_window": ts_window})
        except ValidationError as exc:
            errors = exc.errors(include_url=False)
            if any(e["type"] == "too_long" and tuple(e["loc"]) == ("records",) for e in errors):
                raise BatchRejectedError(
                    413, "too_many_records",
                    [RecordError(None, "records", f"more than {self.max_records} records in one batch")],
                ) from None  # fmt: skip
            raise BatchRejectedError(422, "invalid", _record_errors(errors, ts_window)) from None
        records: list[GpuSample | EngineSample] = envelope.records  # type: ignore[attr-defined]
        distinct = len(envelope.model_fields_set) + sum(len(record.model_fields_set) for record in records)
        if not keys_all_distinct(body, distinct):
            repeated = repeated_key(body)
            if repeated is not None:
                raise BatchRejectedError(422, "repeated_key", [_repeat_error(repeated)])
        problems = list(_name_errors(records, self.max_string_length))
        if problems:
            raise BatchRejectedError(422, "invalid", problems[:MAX_REPORTED_ERRORS])
        return records


def rows_for(records: list[GpuSample | EngineSample], encoding: TimeEncoding) -> RowBatch:
    """Store rows for validated records; a value the store cannot hold is a 422 naming its record."""
    batch = RowBatch(encoding)
    index = 0
    try:
        for index, record in enumerate(records):
            batch.add(record, tag=index)
        return batch.finish()
    except RowValueError as exc:
        where = exc.tag if isinstance(exc.tag, int) else index
        raise BatchRejectedError(422, "invalid", [RecordError(where, exc.field, exc.message)]) from None


def check_nodes(records: list[GpuSample | EngineSample], allowed: Callable[[str], bool]) -> None:
    """Refuse (403) records for nodes a node-bound token may not write."""
    verdicts: dict[str, bool] = {}
    errors = []
    for index, record in enumerate(records):
        node = record.node
        if node not in verdicts:
            verdicts[node] = bool(allowed(node))
        if not verdicts[node]:
            errors.append(RecordError(index, "node", f"this token may not write records for node {node!r}"))
            if len(errors) >= MAX_REPORTED_ERRORS:
                break
    if errors:
        raise BatchRejectedError(403, "forbidden_node", errors)


def _name_errors(records: list[GpuSample | EngineSample], limit: int) -> Iterable[RecordError]:
    # A batch repeats a handful of names many times: check each distinct name once, and walk the records
    # (to name the index and field) only when one of them is bad.
    distinct: set[str | None] = set()
    for record in records:
        if isinstance(record, GpuSample):
            distinct.update((record.node, record.gpu_uuid, record.gpu_name, record.worker_id,
                             record.parent_gpu_uuid, record.mig_profile))  # fmt: skip
        else:
            distinct.update((record.worker_id, record.node, record.engine, record.model, record.precision))
            distinct.update(record.gpu_uuids)
    distinct.discard(None)
    texts = [text for text in distinct if text is not None]
    if all(len(text) <= limit for text in texts) and not _CONTROL.search("".join(texts)):
        return
    for index, record in enumerate(records):
        for name, text in _names(record):
            if text is None:
                continue
            if len(text) > limit:
                yield RecordError(index, name, f"longer than {limit} characters ({len(text)})")
            elif _CONTROL.search(text):
                yield RecordError(index, name, "contains a control character")


def _names(record: GpuSample | EngineSample) -> list[tuple[str, str | None]]:
    values = record.__dict__
    if isinstance(record, GpuSample):
        return [(name, values[name]) for name in _GPU_NAMES]
    texts = [(name, values[name]) for name in _ENGINE_NAMES]
    texts.extend((f"gpu_uuids.{i}", uuid) for i, uuid in enumerate(record.gpu_uuids))
    return texts


def _repeat_error(path: tuple[str | int, ...]) -> RecordError:
    """A repeated key as an error naming its record (when inside one) and its field."""
    key = path[-1]
    message = f"the key {key!r} appears more than once in one object (send each field once)"
    if len(path) >= 3 and path[0] == "records" and isinstance(path[1], int):
        return RecordError(path[1], ".".join(str(part) for part in path[2:]), message)
    return RecordError(None, ".".join(str(part) for part in path), message)


def _record_errors(errors: Sequence[Any], ts_window: tuple[datetime, datetime]) -> list[RecordError]:
    found = []
    for error in errors[:MAX_REPORTED_ERRORS]:
        loc = list(error["loc"])
        index: int | None = None
        if len(loc) >= 2 and loc[0] == "records" and isinstance(loc[1], int):
            index = loc[1]
            loc = loc[2:]
            if loc and loc[0] in RECORD_KINDS:
                loc = loc[1:]  # the union's tag, not a field
        field: str | None = ".".join(str(part) for part in loc) if loc else None
        message = error_message(error)
        kind = error["type"]
        if kind in ("union_tag_invalid", "union_tag_not_found"):
            field = "kind"
            message = f"{message} (one of {', '.join(RECORD_KINDS)})"
        elif kind == "json_invalid":
            message = f"body is not valid JSON ({error.get('ctx', {}).get('error', message)})"
        elif kind in ("model_type", "model_attributes_type"):
            message = "not a JSON object"
        elif "input" in error and kind not in ("missing", "extra_forbidden"):
            message = f"{message} (got {_short(error['input'])})"
        if field == "ts" and kind == "value_error" and "accepted window" in message:
            earliest, latest = ts_window
            message += (
                f"; this service accepts records stamped from {earliest:%Y-%m-%dT%H:%M:%SZ} to "
                f"{latest:%Y-%m-%dT%H:%M:%SZ} (PHASEFIT_INGEST_MAX_AGE_S before its clock to "
                "PHASEFIT_INGEST_MAX_FUTURE_S after it)"
            )
        found.append(RecordError(index, field, message))
    return found


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
