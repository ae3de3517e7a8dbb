"""Token files: formats, hashing, node binding, re-reading on change."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from phasefit.service.tokens import Token, TokenFormatError, TokenRegistry, hash_token, parse_tokens

PLAIN = "a-plain-token-0123456789"


def test_hashed_plain_and_node_bound_entries() -> None:
    bound = f"node-b:{hash_token('secret-b').upper()}:node-b,gpu-*"
    text = f"# header\n\nnode-a:{hash_token('secret-a')}\n{PLAIN}\n{bound}\n"
    tokens = parse_tokens(text, source="test")
    by_name = {token.name: token for token in tokens.values()}
    assert by_name["node-a"].digest == hash_token("secret-a")
    assert by_name[f"token-{hash_token(PLAIN)[:8]}"].nodes == ()
    bound = by_name["node-b"]
    assert bound.digest == hash_token("secret-b")  # hex case does not matter
    assert bound.allows_node("node-b") and bound.allows_node("gpu-7") and not bound.allows_node("node-c")
    assert PLAIN not in repr(tokens)  # only digests are kept


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("short", "at least 16 characters"),
        ("name:not-a-digest", "NAME:SHA256HEX"),
        (f"bad name:{hash_token('x')}", "must match"),
        (f"n:{hash_token('x')}:", "node field is empty"),
        (f"n:{hash_token('x')}:a:b", "NAME:SHA256HEX"),
    ],
)
def test_bad_lines_are_refused_with_the_line_number(line: str, message: str) -> None:
    with pytest.raises(TokenFormatError, match=message) as raised:
        parse_tokens(f"# ok\n{line}\n", source="tokens.txt")
    assert "tokens.txt, line 2" in str(raised.value)


def test_variables_may_separate_entries_with_spaces() -> None:
    tokens = parse_tokens(f"{PLAIN} second-plain-token-000000", source="env", split_spaces=True)
    assert len(tokens) == 2


def test_the_file_is_re_read_when_it_changes_and_a_missing_file_revokes_all(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text(f"{PLAIN}\n")
    errors: list[int] = []
    registry = TokenRegistry(path=path, on_reload_error=lambda: errors.append(1))
    assert isinstance(registry.lookup(PLAIN), Token)
    assert registry.lookup("another-token-0123456789") is None
    path.write_text("another-token-0123456789\n")
    os.utime(path, ns=(1, 1))  # a different mtime even on coarse clocks
    assert registry.lookup(PLAIN) is None
    assert registry.lookup("another-token-0123456789") is not None
    path.write_text("broken:entry\n")
    os.utime(path, ns=(2, 2))
    assert registry.lookup("another-token-0123456789") is not None  # the last good set stays
    assert errors == [1]
    path.unlink()
    assert registry.lookup("another-token-0123456789") is None
    assert registry.configured


def test_a_bad_file_at_start_is_fatal(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text("nope:nope\n")
    with pytest.raises(TokenFormatError):
        TokenRegistry(path=path)
    assert not TokenRegistry().configured
