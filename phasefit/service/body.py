"""Request bodies read under limits: JSON only, a deadline, bytes on the wire counted as they stream, gzip
decoded under a ceiling.

The media type is checked first, from the headers (415 naming ``application/json`` for anything else, see
:mod:`phasefit.service.wire`), so a body that would never be read as JSON is not read at all.

A ``Content-Length`` check alone is false security (starlette #2350): the stream itself is counted, and the
gzip decoder never produces more than the decoded limit plus one byte, so a bomb costs at most that much
memory before it is answered 413. The whole body must arrive within ``timeout_s`` (408 otherwise), so a
client trickling a byte at a time holds its connection for that long at most. A client that goes away
mid-body raises starlette's ``ClientDisconnect``, which the app counts as a disconnect (``create_app``).
"""

from __future__ import annotations

import asyncio
import zlib

from starlette.requests import Request

from phasefit.service.wire import content_type_problem


class BodyError(Exception):
    """A body refused before parsing: ``status`` 400, 408, 413 or 415, and why."""

    def __init__(self, status: int, message: str, reason: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.reason = reason  # short label for the rejection counter


_GZIP = ("gzip", "x-gzip")
_SLICE = 256 * 1024
_IDENTITY = ("", "identity")


async def read_body(request: Request, *, max_bytes: int, max_decoded_bytes: int, timeout_s: float) -> bytes:
    """The decoded body of a JSON request, or :class:`BodyError`."""
    problem = content_type_problem(request.headers.get("content-type"))
    if problem is not None:
        raise BodyError(415, problem, "content_type")
    encoding = request.headers.get("content-encoding", "").strip().lower()
    if encoding not in _GZIP + _IDENTITY:
        raise BodyError(
            415, f"unsupported Content-Encoding {encoding!r}: send gzip or no encoding", "encoding"
        )
    declared = request.headers.get("content-length")
    if declared is not None and declared.strip().isdigit() and int(declared) > max_bytes:
        raise BodyError(
            413, f"body of {int(declared)} bytes exceeds the limit of {max_bytes} bytes", "too_large"
        )
    chunks: list[bytes] = []
    received = 0
    try:
        async with asyncio.timeout(timeout_s):
            async for chunk in request.stream():
                received += len(chunk)
                if received > max_bytes:
                    raise BodyError(413, f"body exceeds the limit of {max_bytes} bytes", "too_large")
                chunks.append(chunk)
    except TimeoutError:
        raise BodyError(
            408, f"the body did not arrive within {timeout_s:g} s ({received} bytes received)", "body_timeout"
        ) from None
    raw = b"".join(chunks)
    if encoding in _GZIP:
        return gunzip_limited(raw, max_decoded_bytes)
    return raw


def gunzip_limited(data: bytes, limit: int) -> bytes:
    """Decode gzip (several members allowed, as ``gzip.decompress`` does) into at most ``limit`` bytes.

    Output is produced in slices of at most ``_SLICE`` bytes: zlib sizes its output buffer by the
    ``max_length`` it is given, so asking for the whole limit at once would cost that much per request."""
    out: list[bytes] = []
    produced = 0
    rest = data
    while rest:
        decoder = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        pending = rest
        while True:
            try:
                piece = decoder.decompress(pending, min(_SLICE, limit - produced + 1))
            except zlib.error as exc:
                raise BodyError(400, f"body is not valid gzip: {exc}", "bad_gzip") from None
            produced += len(piece)
            if produced > limit:
                raise BodyError(
                    413, f"gzip body decodes to more than the limit of {limit} bytes", "too_large"
                )
            out.append(piece)
            pending = decoder.unconsumed_tail
            if decoder.eof or (not pending and not piece):
                break
        if not decoder.eof:
            raise BodyError(400, "gzip body is truncated", "bad_gzip")
        rest = decoder.unused_data.lstrip(b"\x00")  # members may be followed by zero padding
    return b"".join(out)
