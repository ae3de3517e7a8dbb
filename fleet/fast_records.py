"""Validate a block of JSON lines fast, or say it cannot.

pydantic validates a ``gpu_sample`` line in ~11 us, which made parsing the cost of JSONL ingest. Here
msgspec decodes each line (~1-1.6 us) into Structs derived from :mod:`fleet.contract`'s own models (the same
fields, defaults and numeric bounds: every number is checked per record, in C). Names, enumerations and
timestamps are decoded as plain text and each *distinct* value is validated once through pydantic, with the
contract's own field annotation (a block of 7,500 lines holds a few thousand names and a handful of
windows; the values found valid are remembered across blocks, and recognised at a dictionary lookup, which
also makes each distinct text one object in the rows). The rows are then built a column at a time
(:meth:`fleet.store.rows.RowBatch.add_columns`), not record by record.

:func:`fast_block` returns exactly the :class:`~fleet.store.rows.RowBatch` the pydantic path builds, or
``None`` whenever it is not certain: a line msgspec cannot decode, a value pydantic refuses, one the store
cannot hold, a contract this module cannot mirror (:data:`UNMIRRORED`), a line that repeats a key (msgspec
keeps the last value silently: the Structs decoded leave a field the line does not hold UNSET, so the keys
held are known, and the block's quotes must be exactly two per key and per string value). The caller then
runs the pydantic path, which stays the authority and the only source of error messages (line and field).
"""

from __future__ import annotations

import operator
import types
import typing
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from functools import reduce
from itertools import chain, repeat
from operator import itemgetter
from typing import Annotated, Any, Literal

import msgspec
from annotated_types import Ge, Gt, Le, Lt, MaxLen, MinLen
from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo
from pydantic.types import AllowInfNan, AwareDatetime, Strict
from pydantic_core import PydanticUndefined, to_jsonable_python

from fleet.contract import ActivityEvidence, LatencyHistogram, Record, activity_evidence
from fleet.store.rows import ENGINE_SAMPLE_COLUMNS, GPU_SAMPLE_COLUMNS, RowBatch, RowValueError, TimeEncoding

TAG_FIELD = "kind"
_BOM = b"\xef\xbb\xbf"
_KNOWN_LIMIT = 50_000  # valid values remembered per field: a 10,000-GPU fleet's names, a bounded memory
_ROW_COLUMNS = {"gpu_sample": GPU_SAMPLE_COLUMNS, "engine_sample": ENGINE_SAMPLE_COLUMNS}
_EVIDENCE_VALUE: dict[str | None, str | None] = {None: None, **{m.value: m.value for m in ActivityEvidence}}
# Constraints on a number msgspec checks itself (Strict: msgspec never takes "5" or true for a number).
_BOUNDS = {Ge: "ge", Gt: "gt", Le: "le", Lt: "lt"}
_MSGSPEC_FIELD = type(msgspec.field())  # a default factory's wrapper


class NotMirroredError(TypeError):
    """The contract uses what this module cannot reproduce exactly; ingest then validates with pydantic."""


@dataclass
class TextField:
    """A field whose JSON form is a string (or a list of strings): decoded as text, each distinct value
    validated once by ``adapter`` (the contract's annotation for the field, or for a list's items)."""

    name: str
    adapter: TypeAdapter[Any]
    shape: Literal["str", "enum", "time", "list"]
    known: dict[Any, Any] = field(default_factory=dict)  # text -> what pydantic makes of it
    nullable: bool = True  # whether the field's type takes None (the Struct's does exactly when the model's)
    # text -> the value the rows take for it: one object per distinct text (the string pydantic returned,
    # an enumeration's value, the datetime), so a block's many equal names become one object each: hashed
    # once, and pickled once on their way back from a parsing process (a column of fresh strings pickled
    # and unpickled at twice the cost).
    rows: dict[Any, Any] = field(default_factory=dict)

    def check(self, column: Sequence[Any]) -> bool:
        """Whether pydantic accepts every value of ``column`` as it stands (a string stays that string, an
        enumeration's value is the text); remembers the values it accepts."""
        return self.row_values(column) is not None

    def row_values(self, column: Sequence[Any]) -> list[Any] | None:
        """:meth:`check` ``column``; the row value of each of its values (a list: the column's lists), or
        None if pydantic refuses one. Valid values are recognised at a dictionary lookup each."""
        if self.shape == "list":
            items = list(chain.from_iterable(filter(None, column)))  # the items of every list
            return list(column) if self._learn(items) else None
        try:
            return list(map(self.rows.__getitem__, column))
        except KeyError:
            pass  # a value not validated yet
        return list(map(self.rows.__getitem__, column)) if self._learn(column) else None

    def _learn(self, column: Sequence[Any]) -> bool:
        known = self.known
        if all(map(known.__contains__, column)):
            return True
        distinct = set(column)
        if len(known) + len(distinct) > _KNOWN_LIMIT:
            known.clear()
            self.rows.clear()
        known[None] = self.rows[None] = None  # only optional fields decode to None: nothing to validate
        for text in distinct.difference(known):
            try:
                value = self.adapter.validate_json(msgspec.json.encode(text))
            except ValidationError:
                return False
            if not self._kept(text, value):
                return False  # the contract would change the text: not a case the rows can take as is
            known[text] = value
            self.rows[text] = value._value_ if self.shape == "enum" else value
        return True

    def _kept(self, text: str, value: Any) -> bool:
        """Whether the rows can hold ``text`` as it is: pydantic made it that string, or the member of it."""
        if self.shape == "time":
            return True  # the rows take pydantic's datetime, never the text
        if self.shape == "enum":
            return bool(value._value_ == text)
        return type(value) is str and value == text


@dataclass(frozen=True)
class RecordKind:
    """One record kind of the contract mirrored as a msgspec Struct."""

    tag: str
    struct: type[msgspec.Struct]
    fields: tuple[str, ...]  # the Struct's fields, the model's order (the tag field is msgspec's tag)
    texts: tuple[TextField, ...]
    # What is decoded: ``struct`` with every default UNSET, so that the keys a line holds are known (a line
    # repeating a key holds more key ends than keys); ``defaults`` fills them in afterwards.
    keyed: type[msgspec.Struct]
    defaults: tuple[Any, ...]  # per field: msgspec.NODEFAULT (required), a value, or a _Factory
    # Optional fields holding a nested record (a latency histogram), decoded as raw JSON: each one held is
    # validated by pydantic itself (its model's own checks included), ~10 us a histogram.
    nested: tuple[tuple[str, TypeAdapter[Any]], ...] = ()


def mirror(models: Sequence[type[BaseModel]]) -> tuple[RecordKind, ...]:
    """Structs for a union of models told apart by their ``kind`` field; raises :class:`NotMirroredError`."""
    return tuple(_mirror_model(model) for model in models)


def _mirror_model(model: type[BaseModel]) -> RecordKind:
    config = dict(model.model_config)
    extra = config.pop("extra", "ignore")
    config.pop("frozen", None)
    config.pop("title", None)
    if extra not in ("forbid", "ignore") or config.pop("str_strip_whitespace", False) or config:
        raise NotMirroredError(f"{model.__name__}: model_config {model.model_config}")
    decorators = model.__pydantic_decorators__
    validators = (decorators.validators, decorators.field_validators, decorators.root_validators)
    if any(validators) or decorators.model_validators or model.__pydantic_post_init__:
        raise NotMirroredError(f"{model.__name__}: validators")
    tag: str | None = None
    fields: list[tuple[str, Any, Any]] = []
    texts: list[TextField] = []
    nested: list[tuple[str, TypeAdapter[Any]]] = []
    for name, info in model.model_fields.items():
        if info.alias or info.validation_alias or info.validate_default:
            raise NotMirroredError(f"{model.__name__}.{name}: alias or validated default")
        if name == TAG_FIELD:
            values = typing.get_args(info.annotation)
            if typing.get_origin(info.annotation) is not Literal or len(values) != 1:
                raise NotMirroredError(f"{model.__name__}.{name}: not a single Literal")
            tag = values[0]
            continue
        struct_type, text = _mirror_field(model.__name__, name, info)
        if struct_type is msgspec.Raw:
            nested.append((name, TypeAdapter(typing.cast(Any, info.annotation))))
        fields.append((name, struct_type, _default(info, text)))
        if text is not None:
            texts.append(text)
    if not isinstance(tag, str):
        raise NotMirroredError(f"{model.__name__}: no {TAG_FIELD!r} field")
    if tag not in _ROW_COLUMNS:
        raise NotMirroredError(f"{model.__name__}: the store has no rows for {tag!r}")
    shapes = {text.name: text.shape for text in texts}
    for column in _ROW_COLUMNS[tag]:  # the rows take "ts" as a datetime, every other column as decoded
        takes = shapes.get(column) == "time" if column == "ts" else shapes.get(column) not in ("time", "list")
        if column not in model.model_fields or not takes:
            raise NotMirroredError(f"{model.__name__}: row column {column} is not a field the rows can take")
    struct = msgspec.defstruct(
        model.__name__, fields, kw_only=True, tag_field=TAG_FIELD, tag=tag,
        forbid_unknown_fields=extra == "forbid", gc=False,  # only numbers, text and lists of text: no cycles
    )  # fmt: skip
    keyed_fields = [
        (name, kind if default is msgspec.NODEFAULT else kind | msgspec.UnsetType,
         default if default is msgspec.NODEFAULT else msgspec.UNSET)
        for name, kind, default in fields
    ]  # fmt: skip
    keyed = msgspec.defstruct(
        model.__name__, keyed_fields, kw_only=True, tag_field=TAG_FIELD, tag=tag,
        forbid_unknown_fields=extra == "forbid", gc=False,
    )  # fmt: skip
    defaults = tuple(
        _Factory(d.default_factory) if isinstance(d, _MSGSPEC_FIELD) else d for _, _, d in fields
    )
    names = tuple(name for name, _, _ in fields)
    return RecordKind(tag, struct, names, tuple(texts), keyed, defaults, tuple(nested))


@dataclass(frozen=True)
class _Factory:
    make: Callable[[], Any]


def _filled(column: Sequence[Any], default: Any, missing: int) -> Sequence[Any]:
    """``column`` with UNSET (a field the line does not hold, ``missing`` times) replaced by the field's
    default."""
    unset = msgspec.UNSET
    if isinstance(default, _Factory):
        make = default.make
        return [make() if value is unset else value for value in column]
    if missing == len(column):
        return [default] * len(column)
    return [default if value is unset else value for value in column]


def _mirror_field(model: str, name: str, info: FieldInfo) -> tuple[Any, TextField | None]:
    """The Struct type of one field, and how its text is validated (None for a number)."""
    base, optional, constraints = _unwrap(info.annotation, info.metadata)
    whole: Any = Annotated[info.annotation, *info.metadata] if info.metadata else info.annotation
    struct_type: Any
    text: TextField | None = None
    if base in (int, float):
        bounds: dict[str, Any] = {}
        for constraint in constraints:
            if type(constraint) in _BOUNDS:
                key = _BOUNDS[type(constraint)]
                bounds[key] = getattr(constraint, key)
            elif not isinstance(constraint, Strict | AllowInfNan):
                raise NotMirroredError(f"{model}.{name}: {constraint!r}")
        struct_type = Annotated[base, msgspec.Meta(**bounds)] if bounds else base
    elif typing.get_origin(base) is list:
        (item,) = typing.get_args(base)
        if _unwrap(item, [])[0] is not str:
            raise NotMirroredError(f"{model}.{name}: a list of {item!r}")
        lengths: dict[str, Any] = {}
        for constraint in constraints:
            if isinstance(constraint, MinLen):
                lengths["min_length"] = constraint.min_length
            elif isinstance(constraint, MaxLen):
                lengths["max_length"] = constraint.max_length
            else:
                raise NotMirroredError(f"{model}.{name}: {constraint!r}")
        struct_type = Annotated[list[str], msgspec.Meta(**lengths)] if lengths else list[str]
        text = TextField(name, TypeAdapter(item), "list", nullable=optional)
    elif isinstance(base, type) and issubclass(base, BaseModel):
        if not optional:
            raise NotMirroredError(f"{model}.{name}: a required nested record")
        return msgspec.Raw, None  # held as its JSON (null too), validated by pydantic (RecordKind.nested)
    elif base is str or (isinstance(base, type) and issubclass(base, datetime | AwareDatetime | StrEnum)):
        shape: Literal["str", "enum", "time"] = (
            "str" if base is str else "enum" if issubclass(base, StrEnum) else "time"
        )
        struct_type, text = str, TextField(name, TypeAdapter(whole), shape, nullable=optional)
    else:
        raise NotMirroredError(f"{model}.{name}: {info.annotation!r}")
    return (struct_type | None if optional else struct_type), text


def _unwrap(annotation: Any, metadata: list[Any]) -> tuple[Any, bool, list[Any]]:
    """(type, optional, constraints) of ``X``, ``X | None``, ``Annotated[X, ...]`` and their mixes."""
    optional = False
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = typing.get_args(annotation)
        if len(args) != 2 or type(None) not in args:
            raise NotMirroredError(f"a union {annotation!r}")
        annotation, optional = next(arg for arg in args if arg is not type(None)), True
    constraints = list(metadata)
    while typing.get_origin(annotation) is Annotated:
        annotation, *extra = typing.get_args(annotation)
        for item in extra:
            constraints.extend(item.metadata if isinstance(item, FieldInfo) else [item])
    return annotation, optional, constraints


def _default(info: FieldInfo, text: TextField | None) -> Any:
    """The Struct's default: the model's, as JSON gives it for text (an enumeration's value), checked to
    come back as the model's own default through the field's validation."""
    if info.default_factory is not None:
        if info.default_factory_takes_validated_data:
            raise NotMirroredError("a default factory taking the validated data")
        return msgspec.field(default_factory=info.default_factory)  # type: ignore[arg-type]
    if info.default is PydanticUndefined:
        return msgspec.NODEFAULT
    if text is None or info.default is None:
        return info.default
    jsonable = to_jsonable_python(info.default)
    if text.adapter.validate_json(msgspec.json.encode(jsonable)) != info.default:
        raise NotMirroredError(f"{text.name}: default {info.default!r}")
    return jsonable


def _record_models() -> tuple[type[BaseModel], ...]:
    union, _discriminator = typing.get_args(Record)
    return typing.get_args(union)


try:
    KINDS: tuple[RecordKind, ...] = mirror(_record_models())
    UNMIRRORED: str | None = None  # why fast_block always declines (tests/fleet/test_fast_records.py: never)
except NotMirroredError as exc:
    KINDS, UNMIRRORED = (), str(exc)
_DECODE: Callable[[bytes], Any] | None = (
    msgspec.json.Decoder(reduce(operator.or_, (kind.keyed for kind in KINDS))).decode if KINDS else None
)
_EVIDENCE_FIELDS = ("activity_evidence", "sm_active", "tensor_active", "dram_active", "gpu_util",
                    "mem_copy_util", "gr_engine_active")  # fmt: skip


def fast_block(block: bytes, first_line: int, time_encoding: TimeEncoding) -> RowBatch | None:
    """The finished batch of ``block``'s lines (``first_line``: the number of its first line), exactly as
    :func:`fleet.ingest.parse_block` builds it through pydantic, or None if this path is not certain."""
    decode = _DECODE
    if decode is None or not KINDS:
        return None
    lines = list(map(bytes.strip, block.split(b"\n")))  # blank lines and CR: as the pydantic path takes them
    if first_line == 1 and lines[0].startswith(_BOM):
        lines[0] = lines[0][3:]
        if not lines[0]:
            return None
    try:
        records = list(map(decode, filter(None, lines)))
    except msgspec.DecodeError:  # malformed JSON, or a value msgspec refuses (ValidationError subclasses it)
        return None
    batch = RowBatch(time_encoding, strict_repeats=True)
    quoted = 0  # the keys and the string values the lines hold
    single = set(map(type, records))  # usually one kind per block: no pass per kind then
    try:
        for kind in KINDS:
            if kind.keyed not in single:
                continue
            if len(single) == 1:
                of_kind = records
            else:
                of_kind = [record for record in records if type(record) is kind.keyed]
            if of_kind:
                found = _add_kind(batch, kind, of_kind)
                if found is None:
                    return None
                quoted += found
    except RowValueError:
        return None
    # Every key and every string is written between two quotes; a line that repeats a key (msgspec, like
    # pydantic, keeps the last value) holds more, and so does a string with an escaped quote: the pydantic
    # path decides those, and names the line and the key. One count over the block, at memory speed.
    if block.count(b'"') != 2 * quoted:
        return None
    try:
        return batch.finish()
    except RowValueError:
        return None


def _add_kind(batch: RowBatch, kind: RecordKind, records: list[Any]) -> int | None:
    """Add ``records`` (all of ``kind``) to ``batch`` column-wise; the number of keys and string values the
    lines hold (each key once), or None if pydantic refuses a value."""
    astuple = msgspec.structs.astuple
    tuples = list(map(astuple, records))
    transposed: list[Sequence[Any]] = list(zip(*tuples, strict=True))  # one tuple per field, at C speed
    unset, nodefault = msgspec.UNSET, msgspec.NODEFAULT
    # Fields some line does not hold (a required one cannot be UNSET: the line would not decode), and how
    # many lines do not: each column is scanned once, before the defaults are filled in.
    missing = {
        index: count
        for index, default in enumerate(kind.defaults)
        if default is not nodefault and (count := transposed[index].count(unset))
    }
    unheld = {kind.fields[index] for index in missing}
    strings = len(records)  # the tag's value
    positions = {name: index for index, name in enumerate(kind.fields)}
    for text in kind.texts:  # before the defaults are filled in: the values the lines hold
        index = positions[text.name]
        column = transposed[index]
        if text.shape == "list":
            strings += sum(len(value) for value in column if type(value) is list)
        else:
            absent = missing.get(index, 0)
            # None only where the type takes it, and only among the values held (~35 ns a value to count)
            nulls = column.count(None) if text.nullable and absent < len(column) else 0
            strings += len(column) - absent - nulls
    for index, count in missing.items():
        transposed[index] = _filled(transposed[index], kind.defaults[index], count)
    for name, adapter in kind.nested:
        index = positions[name]
        held = _nested(transposed[index], adapter)
        if held is None:
            return None
        transposed[index], nested_keys = held
        strings += nested_keys
    columns: dict[str, Sequence[Any]] = dict(zip(kind.fields, transposed, strict=True))
    value_columns = list(transposed)  # per field, the values pydantic holds (enumerations: their text)
    converted: list[tuple[str, Callable[[Any], Any]]] = []  # fields whose values_at() value is converted
    ts: list[Any] = []
    for text in kind.texts:
        column = columns[text.name]
        if missing.get(positions[text.name]) == len(column) and text.shape != "list":
            one = text.row_values(column[:1])  # no line holds it: every value is the default, checked once
            row_values = None if one is None else one * len(column)
        else:
            row_values = text.row_values(column)
        if row_values is None:
            return None
        if text.shape == "list":
            converted.append((text.name, _list_copy))
            continue
        if text.shape == "time":
            if text.name == "ts":
                ts = row_values  # the windows as pydantic's datetimes
        else:
            columns[text.name] = row_values  # one object per distinct text, equal to it
        if text.shape == "str":
            value_columns[positions[text.name]] = row_values
        else:
            converted.append((text.name, text.known.__getitem__))
    if kind.tag == "gpu_sample":
        # The contract's own derivation, on the same attributes (defaults filled in), as plain text. A
        # Struct holds UNSET where its line has no such field: those fields are set on every Struct from
        # their filled columns first (the Structs are this block's own, and read no more after this).
        for name in unheld.intersection(_EVIDENCE_FIELDS):
            deque(map(setattr, records, repeat(name), columns[name]), maxlen=0)
        columns["activity_evidence"] = list(map(_EVIDENCE_VALUE.__getitem__, map(activity_evidence, records)))
    keys = (TAG_FIELD, *kind.fields)

    def values_at(index: int) -> dict[str, Any]:
        """Record ``index``'s fields as pydantic holds them: enumeration members, UTC datetimes (defaults
        filled in as in the columns)."""
        values = dict(zip(keys, [kind.tag, *map(itemgetter(index), value_columns)], strict=True))
        for name, convert in converted:
            values[name] = convert(values[name])
        return values

    batch.add_columns(kind.tag, columns, ts, values_at)  # type: ignore[arg-type]
    return len(records) * (len(kind.fields) + 1) - sum(missing.values()) + strings  # + 1: the tag


def _nested(column: Sequence[Any], adapter: TypeAdapter[Any]) -> tuple[list[Any], int] | None:
    """A nested record's column as pydantic holds it (each raw JSON value validated by pydantic), and the
    keys its values hold; None if pydantic refuses one, or one holds a string or repeats a key (its
    quotes are not two per key of what was made of it: the pydantic path decides, and names the line)."""
    if not any(column):  # None everywhere (absent or null): nothing to validate
        return list(column), 0
    out: list[Any] = []
    keys = 0
    for held_raw in column:
        raw = None if held_raw is None else bytes(held_raw)
        if raw is None or raw == b"null":
            out.append(None)
            continue
        try:
            value = adapter.validate_json(raw)
        except ValidationError:
            return None
        held = keys_held(value)
        if raw.count(b'"') != 2 * held:
            return None
        keys += held
        out.append(value)
    return out, keys


def keys_held(record: BaseModel) -> int:
    """The keys a record's JSON held, its nested records' included (its ``":`` when no key repeats)."""
    held = record.model_fields_set
    if type(record) not in _NESTING:
        return len(held)
    values = map(record.__dict__.__getitem__, held)
    return len(held) + sum(keys_held(value) for value in values if isinstance(value, BaseModel))


def _nests(model: type[BaseModel]) -> bool:
    """Whether a field of ``model`` may hold a nested record."""
    for info in model.model_fields.values():
        for part in typing.get_args(info.annotation) or (info.annotation,):
            if isinstance(part, type) and issubclass(part, BaseModel):
                return True
    return False


# The record models that nest others: only their held keys need a walk (~1 us a record otherwise).
_NESTING = frozenset(
    model for model in (*_record_models(), LatencyHistogram) if isinstance(model, type) and _nests(model)
)


def _list_copy(value: list[str] | None) -> list[str] | None:
    """pydantic's own list of the same strings (each record gets its own list)."""
    return None if value is None else list(value)
