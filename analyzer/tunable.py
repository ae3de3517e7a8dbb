"""Thresholds as a tree of frozen dataclasses: each declared once, documented where declared, set by path.

A parameter class declares its fields with :func:`tunable` (a default and one line saying what it means);
the analyzer's parameters nest them (``findings.underutilised.below``). :func:`tunables` lists every leaf
with its dotted path, default and description (``docs/configuration.md`` is written from it) and
:func:`with_overrides` returns a copy with some leaves changed, refusing an unknown path or a value of the
wrong type with a message that names the path.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

DOC = "phasefit.doc"
T = TypeVar("T")


def tunable(default: Any, doc: str) -> Any:
    """A dataclass field with its description; mutable defaults (mappings) are copied per instance."""
    if isinstance(default, Mapping):
        frozen = types.MappingProxyType(dict(default))
        return dataclasses.field(default_factory=lambda: frozen, metadata={DOC: doc})
    return dataclasses.field(default=default, metadata={DOC: doc})


@dataclass(frozen=True)
class Tunable:
    path: str  # dotted, from the root of the tree
    default: object
    doc: str
    kind: str  # "float", "int", "float or null", "mapping"


def _is_node(value: object) -> bool:
    return dataclasses.is_dataclass(value) and not isinstance(value, type)


def _kind(annotation: object) -> str:
    origin = typing.get_origin(annotation)
    if origin in (dict, Mapping) or annotation in (dict, Mapping):
        return "mapping"
    args = typing.get_args(annotation) if origin in (typing.Union, types.UnionType) else ()
    optional = type(None) in args
    base = next((a for a in args if a is not type(None)), annotation)
    name = "int" if base is int else "float"
    return f"{name} or null" if optional else name


def tunables(root: object, prefix: str = "") -> list[Tunable]:
    """Every documented leaf under ``root``, depth first in declaration order."""
    out: list[Tunable] = []
    hints = typing.get_type_hints(type(root))
    for f in dataclasses.fields(root):  # type: ignore[arg-type]
        value = getattr(root, f.name)
        path = f"{prefix}{f.name}"
        if _is_node(value):
            out += tunables(value, f"{path}.")
        elif DOC in f.metadata:
            default = dict(value) if isinstance(value, Mapping) else value
            out.append(Tunable(path, default, str(f.metadata[DOC]), _kind(hints.get(f.name))))
    return out


class OverrideError(ValueError):
    """An override names no tunable or gives it a value of the wrong type."""


def _coerce(path: str, kind: str, value: object) -> object:
    if value is None and kind.endswith("or null"):
        return None
    if kind == "mapping":
        if not isinstance(value, Mapping):
            raise OverrideError(f"{path} takes an object of name -> number, got {value!r}")
        return types.MappingProxyType({str(k): _coerce(f"{path}.{k}", "float", v) for k, v in value.items()})
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise OverrideError(f"{path} takes a number, got {value!r}")
    if kind.startswith("int"):
        if float(value) != int(value):
            raise OverrideError(f"{path} takes a whole number, got {value!r}")
        return int(value)
    if not math.isfinite(float(value)):
        raise OverrideError(f"{path} takes a finite number, got {value!r}")
    return float(value)


def with_overrides(root: T, overrides: Mapping[str, object]) -> T:
    """``root`` with the leaves named by dotted path replaced; each parameter class still validates."""
    known = {t.path: t for t in tunables(root)}
    unknown = sorted(set(overrides) - set(known))
    if unknown:
        raise OverrideError(
            f"unknown threshold {', '.join(unknown)}: the thresholds are listed in docs/configuration.md "
            f"(e.g. {', '.join(sorted(known)[:3])})"
        )
    out = root
    for path, value in sorted(overrides.items()):
        new = _coerce(path, known[path].kind, value)
        if isinstance(new, Mapping):  # a mapping's override changes the entries it names, keeps the rest
            default = known[path].default
            assert isinstance(default, Mapping)
            unknown_keys = sorted(set(new) - {str(k) for k in default})
            if unknown_keys:
                raise OverrideError(
                    f"{path} has no entry {', '.join(unknown_keys)}: it has {', '.join(map(str, default))}"
                )
            new = types.MappingProxyType({k: new.get(str(k), v) for k, v in default.items()})
        out = _replace_at(out, path.split("."), new, path)
    return out


def _replace_at(node: T, names: list[str], value: object, path: str) -> T:
    head, rest = names[0], names[1:]
    new = value if not rest else _replace_at(getattr(node, head), rest, value, path)
    try:
        return dataclasses.replace(node, **{head: new})  # type: ignore[type-var]
    except ValueError as error:
        raise OverrideError(f"{path} = {value!r}: {error}") from error
