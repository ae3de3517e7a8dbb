"""The GPUs and workers a load names with more than one set of attributes (node, GPU name, model...).

A sample key sent twice must come with the same attributes; only the latest record of each GPU and worker
is kept, so an earlier window's repeat cannot be compared from the batch alone. What is kept instead is
one fingerprint (the attributes as a tuple) per GPU and worker, or :data:`CHANGED` once a second one is
seen: only the keys of a changed GPU or worker can repeat with other attributes (:mod:`fleet.repeats`).
The attributes are the record's fields the sample rows do not hold (those are compared as rows).
"""

from __future__ import annotations

import typing
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat
from operator import itemgetter
from typing import Any

from fleet.contract import EngineSample, GpuSample

Key = tuple[bool, str]  # (is a GPU, gpu_uuid or worker_id)
Fingerprint = tuple[Any, ...]
CHANGED: Fingerprint = ("changed",)  # never a fingerprint: those hold every attribute (six or more)
_KEY, _FINGERPRINT = itemgetter(0), itemgetter(slice(1, None))  # of a (key, *fingerprint) row


@dataclass(frozen=True)
class Attributes:
    """The fields of a record kind that its sample rows do not hold; ``lists``: those holding a list."""

    names: tuple[str, ...]
    lists: frozenset[str]

    @classmethod
    def of(cls, model: type[GpuSample | EngineSample], row_columns: Sequence[str]) -> Attributes:
        fields = {n: f for n, f in model.model_fields.items() if n != "kind" and n not in row_columns}
        lists = frozenset(n for n, f in fields.items() if typing.get_origin(f.annotation) is list)
        return cls(tuple(fields), lists)

    def fingerprint(self, values: Mapping[str, Any]) -> Fingerprint:
        """A record's attributes as the fast path's columns hold them (enumerations as text, lists as
        tuples)."""
        return tuple(_plain(values[name]) for name in self.names)

    def fingerprints(self, keys: Sequence[str], columns: Mapping[str, Sequence[Any]]) -> set[tuple[Any, ...]]:
        """The distinct (key, *fingerprint) rows of a block's columns (zip and set: C speed per record)."""
        plain = [
            list(map(_plain, columns[name])) if name in self.lists else columns[name] for name in self.names
        ]
        return set(zip(keys, *plain, strict=True))


def note(variants: dict[Key, Fingerprint], key: Key, seen: Fingerprint) -> None:
    """Remember ``seen`` for ``key``; a second, other fingerprint (or a CHANGED one) makes it CHANGED."""
    known = variants.get(key)
    if known is None:
        variants[key] = seen
    elif known != seen:
        variants[key] = CHANGED


def note_rows(variants: dict[Key, Fingerprint], is_gpu: bool, rows: Collection[tuple[Any, ...]]) -> None:
    """:func:`note` for each (key, *fingerprint) row of :meth:`Attributes.fingerprints`; into an empty
    ``variants``, where no key comes twice, at once (once per GPU of a block: a third of the work left per
    GPU in the parse of a block from a 10,000-GPU fleet)."""
    keys, fingerprints = list(map(_KEY, rows)), list(map(_FINGERPRINT, rows))
    if not variants:
        fresh = dict(zip(zip(repeat(is_gpu), keys, strict=False), fingerprints, strict=True))
        if len(fresh) == len(rows):
            variants.update(fresh)
            return
    for key, seen in zip(keys, fingerprints, strict=True):
        note(variants, (is_gpu, key), seen)


def changed(variants: Mapping[Key, Fingerprint]) -> set[Key]:
    return {key for key, seen in variants.items() if seen == CHANGED}


def _plain(value: Any) -> Any:
    if type(value) is list:
        return tuple(value)
    return getattr(value, "_value_", value)
