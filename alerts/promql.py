"""Small builders for PromQL text and for the Go-template snippets in alert descriptions.

Descriptions look numbers up at notification time with the ``query`` template function, so an alert can
say how many tokens per second its worker loses even when the alert's own value is something else.
Queries are Go raw strings (backticks), so selectors keep their double quotes unescaped.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

_RE2_META = set(r".+*?()[]{}|^$\\")


def selector(*matchers: str) -> str:
    """``{a="1", b=~"x"}`` from matcher lists, skipping empty ones; ``""`` when nothing is left."""
    parts = [m.strip() for m in matchers if m.strip()]
    return "{" + ", ".join(parts) + "}" if parts else ""


def join_matchers(*matchers: str) -> str:
    """``a="1", b=~"x"``: matcher lists joined for use inside a larger selector."""
    return ", ".join(m.strip() for m in matchers if m.strip())


def labels(names: Iterable[str]) -> str:
    """``a, b, c`` for ``by (...)`` / ``on (...)`` clauses, in the given order without duplicates."""
    return ", ".join(dict.fromkeys(names))


def literal_regex(text: str) -> str:
    """A regex matching ``text`` literally, written for a PromQL double-quoted string (RE2 syntax)."""
    escaped = "".join("\\" + ch if ch in _RE2_META else ch for ch in text)
    return escaped.replace("\\", "\\\\")


def promql_regex(python_regex: str) -> str:
    """A catalog name pattern (Python syntax, no look-arounds) as a PromQL string body."""
    for unsupported in ("(?=", "(?!", "(?<=", "(?<!"):
        if unsupported in python_regex:
            raise ValueError(f"name pattern {python_regex!r} uses a look-around, which PromQL (RE2) lacks")
    return python_regex.replace("\\", "\\\\")


def number(value: float) -> str:
    """A float as PromQL reads it, without noise: 0.5, 3.35e+12, 300."""
    return f"{value:.10g}"


def matchers_from_labels(names: Sequence[str]) -> tuple[str, str]:
    """A printf format and its arguments selecting the alert's own values of ``names``.

    ``("cluster=%q, pool=%q", "$labels.cluster $labels.pool")``. A label missing on the alert expands to
    ``""``, which in PromQL matches series without that label: what a single-cluster setup needs.
    """
    fmt = ", ".join(f"{name}=%q" for name in names)
    args = " ".join(f"$labels.{name}" for name in names)
    return fmt, args


def query_value(
    query_format: str,
    args: str = "",
    *,
    as_: str = "humanize",
    missing: str = "unknown",
    before: str = "",
    after: str = "",
) -> str:
    """A template snippet printing the first value of a query, or ``missing`` when it returns nothing.

    ``query_format`` is a printf format (Go ``%q`` quotes a label value); ``as_`` a template function
    such as ``humanize`` or ``humanizePercentage``; ``before``/``after`` surround the value when found.
    """
    if "`" in query_format:
        raise ValueError("queries in templates may not contain backticks")
    call = f"printf `{query_format}` {args}".strip() if args else f"`{query_format}`"
    return (
        f"{{{{ with {call} | query }}}}{before}{{{{ . | first | value | {as_} }}}}{after}"
        f"{{{{ else }}}}{missing}{{{{ end }}}}"
    )


def query_rows(query_format: str, args: str, row: str, *, missing: str = "none") -> str:
    """A template snippet printing ``row`` (a template using ``.Labels`` and ``.Value``) per result."""
    if "`" in query_format:
        raise ValueError("queries in templates may not contain backticks")
    call = f"printf `{query_format}` {args}".strip() if args else f"`{query_format}`"
    return f"{{{{ range {call} | query }}}}{row}{{{{ else }}}}{missing}{{{{ end }}}}"
