"""Bearer tokens, held as SHA-256 digests only, one per collector so one can be revoked.

Token file format (also the format of the ``PHASEFIT_*_TOKENS`` variables, where entries may be separated by
spaces as well as newlines)::

    # comments and blank lines are ignored
    node-a:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
    node-b:60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752:node-b,node-b-*
    a-plain-token-of-at-least-16-characters

- ``NAME:SHA256HEX`` names a collector and the digest of its token (``printf %s TOKEN | sha256sum``);
- an optional third field binds the token to node names (comma-separated shell patterns): records naming
  another node are refused with 403, so one leaked token cannot write another node's telemetry;
- a line without ``:`` is a plain token, hashed when read and named ``token-<first 8 hex of its digest>``.

:class:`TokenRegistry` re-reads its file whenever the file's identity, size or mtime changes (checked on
every lookup: a ``stat`` per request), so adding or removing a line takes effect without a restart. A file
that stops parsing keeps the last good set (and says so in the log); a file that disappears revokes all.
"""

from __future__ import annotations

import fnmatch
import hashlib
import hmac
import logging
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

MIN_PLAIN_TOKEN_LENGTH = 16
_HEX_DIGEST = re.compile(r"[0-9a-fA-F]{64}")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@/-]{0,127}")


class TokenFormatError(ValueError):
    """A token file or variable that cannot be read; the message names the source and line."""


@dataclass(frozen=True)
class Token:
    """One credential: who it is (``name``), its digest, and the nodes it may write for (empty: any)."""

    name: str
    digest: str
    nodes: tuple[str, ...] = ()

    def allows_node(self, node: str) -> bool:
        return not self.nodes or any(fnmatch.fnmatchcase(node, pattern) for pattern in self.nodes)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def parse_tokens(text: str, *, source: str, split_spaces: bool = False) -> dict[str, Token]:
    """Tokens keyed by digest; raises :class:`TokenFormatError` for the first bad entry."""
    tokens: dict[str, Token] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        for entry in line.split() if split_spaces else [line]:
            token = _parse_entry(entry, f"{source}, line {number}")
            tokens[token.digest] = token
    return tokens


def _parse_entry(entry: str, where: str) -> Token:
    if ":" not in entry:
        if len(entry) < MIN_PLAIN_TOKEN_LENGTH or any(ch.isspace() for ch in entry):
            raise TokenFormatError(
                f"{where}: a plain token must be at least {MIN_PLAIN_TOKEN_LENGTH} characters without spaces "
                "(generate one with `openssl rand -hex 32`)"
            )
        digest = hash_token(entry)
        return Token(f"token-{digest[:8]}", digest)
    parts = entry.split(":")
    if len(parts) > 3 or not _HEX_DIGEST.fullmatch(parts[1]):
        raise TokenFormatError(
            f"{where}: expected NAME:SHA256HEX[:NODE-PATTERNS] (64 hex digits: "
            "`printf %s TOKEN | sha256sum`); a plain token must not contain ':'"
        )
    if not _NAME.fullmatch(parts[0]):
        raise TokenFormatError(f"{where}: token name {parts[0]!r} must match {_NAME.pattern}")
    nodes = tuple(p for p in parts[2].split(",") if p) if len(parts) == 3 else ()
    if len(parts) == 3 and not nodes:
        raise TokenFormatError(f"{where}: the node field is empty (omit it to allow any node)")
    return Token(parts[0], parts[1].lower(), nodes)


def read_token_file(path: Path) -> dict[str, Token]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TokenFormatError(f"cannot read token file {path}: {exc}") from None
    return parse_tokens(text, source=str(path))


class TokenRegistry:
    """Tokens from a fixed set (an environment variable) and a file re-read when it changes.

    ``TokenRegistry(path=Path("/etc/phasefit/ingest-tokens")).lookup(presented)`` gives the matching
    :class:`Token` or None; ``configured`` says whether any source was given at all.
    """

    def __init__(
        self,
        *,
        static: Mapping[str, Token] | None = None,
        path: Path | None = None,
        on_reload_error: Callable[[], None] | None = None,
    ) -> None:
        self._static = dict(static or {})
        self._path = path
        self._on_reload_error = on_reload_error
        self._lock = threading.Lock()
        self._file_tokens: dict[str, Token] = {}
        self._file_key: tuple[int, int, int, int] | None = None
        if path is not None:
            self._file_tokens = read_token_file(path)  # at start a bad file is fatal, later it is logged
            self._file_key = _identity(path)

    @property
    def configured(self) -> bool:
        return bool(self._static) or self._path is not None

    def lookup(self, presented: str) -> Token | None:
        """The token ``presented`` matches, or None (unknown, revoked or malformed)."""
        self._refresh()
        digest = hash_token(presented)
        token = self._static.get(digest) or self._file_tokens.get(digest)
        if token is None or not hmac.compare_digest(token.digest, digest):
            return None
        return token

    def names(self) -> list[str]:
        self._refresh()
        return sorted({t.name for t in (*self._static.values(), *self._file_tokens.values())})

    def _refresh(self) -> None:
        if self._path is None:
            return
        key = _identity(self._path)
        if key == self._file_key:
            return
        with self._lock:
            if key == self._file_key:
                return
            if key is None:
                log.error("token file %s is gone: every token it held is revoked", self._path)
                self._file_tokens = {}
                self._file_key = None
                return
            try:
                tokens = read_token_file(self._path)
            except TokenFormatError as exc:
                log.error("keeping the previous tokens: %s", exc)
                if self._on_reload_error is not None:
                    self._on_reload_error()
                self._file_key = key  # do not re-parse the same bad file on every request
                return
            self._file_tokens = tokens
            self._file_key = key
            log.info("token file %s re-read: %d token(s)", self._path, len(tokens))


def _identity(path: Path) -> tuple[int, int, int, int] | None:
    try:
        stat = path.stat()
    except OSError:
        return None
    return (stat.st_ino, stat.st_dev, stat.st_size, stat.st_mtime_ns)
