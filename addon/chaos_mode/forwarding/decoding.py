"""Content-codings undone with a cap on the decoded size: gzip (x-gzip), deflate (zlib or raw), br and zstd.

A body of a few kilobytes can decode to gigabytes. Every body the proxy decodes (z.ai's refusals, its quota
answers and its answers read for their usage, whole or as they stream, a client's request) is decoded here,
by streaming decoders fed at most `PIECE` bytes of input and asked for at most `PIECE` bytes of output at a
time, and stopped at the cap: the memory and the time spent are bounded by the cap, never by what the body
would decode to. Several gzip members or zstd frames one after another decode as one body, as mitmproxy
reads them.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import Final, Protocol

import brotli  # type: ignore[import-untyped]  # mitmproxy's dependency

from chaos_mode.zai.zstd import zstd

PIECE: Final = 64 * 1024  # bytes of input fed to a decoder, and of output asked of it, at a time
CODINGS: Final = frozenset({"gzip", "x-gzip", "deflate", "br", "zstd"})
_CONCATENATED: Final = frozenset({"gzip", "x-gzip", "zstd"})  # a member or frame may follow another
_ERRORS: Final = (zlib.error, brotli.error, zstd.ZstdError, EOFError)


class OverCap(Exception):
    """The body decodes to more than the cap."""


class Broken(ValueError):
    """The body does not decode: malformed, cut short, or bytes after its end."""


class Outcome(StrEnum):
    WHOLE = "whole"  # decoded to its end, within the cap
    OVER_CAP = "over-cap"  # more than the cap: the body is its first `cap` bytes
    BROKEN = "broken"  # malformed, cut short or bytes after its end: the body is what decoded before that


@dataclass(frozen=True, slots=True)
class Decoded:
    body: bytes
    outcome: Outcome

    @property
    def whole(self) -> bool:
        return self.outcome is Outcome.WHOLE


def coding_of(value: bytes | str | None) -> str:
    """A content-encoding header's value as a coding's name (lower-case; "" when absent)."""
    if isinstance(value, bytes):
        value = value.decode("latin-1")
    return (value or "").strip().lower()


def decode(body: bytes, coding: str, *, cap: int) -> Decoded:
    """`body` decoded as `coding` (one of `CODINGS`, else BROKEN), at most `cap` bytes of it."""
    decoded = bytearray()
    outcome = Outcome.WHOLE
    try:
        for piece in pieces(body, coding, cap=cap):
            decoded += piece
    except OverCap:
        outcome = Outcome.OVER_CAP
    except Broken:
        outcome = Outcome.BROKEN
    return Decoded(bytes(decoded), outcome)


def pieces(body: bytes, coding: str, *, cap: int) -> Iterator[bytes]:
    """`body` decoded as `coding` (one of `CODINGS`), piece by piece, `cap` bytes in all: OverCap after
    the first `cap` bytes when it decodes to more, Broken where it stops decoding."""
    if coding not in CODINGS:
        raise Broken(f"not a coding decoded here: {coding!r}")
    unpacking = Unpacking(coding, cap=cap)
    yield from unpacking.pieces(body)
    if unpacking.outcome is Outcome.OVER_CAP:
        raise OverCap(f"decodes to more than {cap} bytes")
    if unpacking.outcome is Outcome.BROKEN or (body and not unpacking.ended):
        raise Broken("cut short" if unpacking.outcome is None else unpacking.why)


class Unpacking:
    """A body in `coding` (one of `CODINGS`) undone as it comes, chunk by chunk, `cap` bytes out in all:
    past the cap, or where the body stops decoding, nothing more comes out (`outcome`)."""

    def __init__(self, coding: str, *, cap: int) -> None:
        self._coding, self._left = coding, cap
        self._decoder = _Zlib(zlib.MAX_WBITS) if coding == "deflate" else _decoder(coding)
        self._replay: bytearray | None = bytearray() if coding == "deflate" else None  # raw, if not zlib's
        self.outcome: Outcome | None = None  # OVER_CAP or BROKEN once it stopped
        self.why = ""

    @property
    def ended(self) -> bool:
        """The body came to its end (a member or frame's, for codings that may have more)."""
        return self.outcome is None and self._decoder.finished

    def pieces(self, chunk: bytes) -> Iterator[bytes]:
        """What `chunk` decodes to, at most `PIECE` bytes at a time (brotli's a little more)."""
        try:
            for piece in self._run(chunk):
                if len(piece) > self._left:
                    self.outcome = Outcome.OVER_CAP
                    if self._left:
                        yield piece[: self._left]
                    return
                self._left -= len(piece)
                yield piece
        except Broken as exc:
            self.outcome, self.why = Outcome.BROKEN, str(exc)

    def _run(self, data: bytes) -> Iterator[bytes]:
        if self.outcome is not None:
            return
        if self._replay is not None:
            self._replay += data
        at = 0  # fed `PIECE` bytes at a time: a decoder keeps (and copies) what it has not read yet
        while True:
            decoder = self._decoder
            if decoder.finished:
                if not (data := decoder.leftover + data[at:]):
                    return
                if self._coding not in _CONCATENATED:
                    raise Broken("bytes after the end of the body")
                self._decoder, at = _decoder(self._coding), 0
                continue
            fed = data[at : at + PIECE] if decoder.takes_input else b""
            at += len(fed)
            try:
                piece = decoder.feed(fed, PIECE)
            except _ERRORS as exc:
                if self._replay is None:
                    raise Broken(f"does not decode: {exc}") from None
                data, at, self._replay = bytes(self._replay), 0, None
                self._decoder = _Zlib(-zlib.MAX_WBITS)
                continue  # deflate with no zlib wrapping: read raw from its start, as mitmproxy reads it
            if piece:
                self._replay = None
                yield piece
            elif not fed:
                if at >= len(data):
                    return  # all of it read: the rest of the body is still to come
                if not decoder.takes_input:
                    raise Broken("the decoder gives nothing and takes nothing")


class _Decoder(Protocol):
    @property
    def takes_input(self) -> bool: ...
    @property
    def finished(self) -> bool: ...
    @property
    def leftover(self) -> bytes: ...
    def feed(self, data: bytes, limit: int) -> bytes: ...


def _decoder(coding: str) -> _Decoder:
    if coding == "br":
        return _Brotli()
    if coding == "zstd":
        return _Zstd()
    return _Zlib(16 + zlib.MAX_WBITS)  # gzip, x-gzip


class _Zlib:
    def __init__(self, wbits: int) -> None:
        self._inflate = zlib.decompressobj(wbits)

    @property
    def takes_input(self) -> bool:
        return not self._inflate.unconsumed_tail  # input left over from the last call goes first

    @property
    def finished(self) -> bool:
        return self._inflate.eof

    @property
    def leftover(self) -> bytes:
        return self._inflate.unused_data

    def feed(self, data: bytes, limit: int) -> bytes:
        return self._inflate.decompress(self._inflate.unconsumed_tail or data, limit)


class _Brotli:
    def __init__(self) -> None:
        self._decompressor = brotli.Decompressor()

    @property
    def takes_input(self) -> bool:
        return bool(self._decompressor.can_accept_more_data())

    @property
    def finished(self) -> bool:
        return bool(self._decompressor.is_finished())

    leftover = b""  # brotli refuses bytes after the end of its stream

    def feed(self, data: bytes, limit: int) -> bytes:
        return bytes(self._decompressor.process(data, output_buffer_limit=limit))


class _Zstd:
    def __init__(self) -> None:
        self._decompressor = zstd.ZstdDecompressor()

    @property
    def takes_input(self) -> bool:
        return bool(self._decompressor.needs_input)

    @property
    def finished(self) -> bool:
        return bool(self._decompressor.eof)

    @property
    def leftover(self) -> bytes:
        return bytes(self._decompressor.unused_data)

    def feed(self, data: bytes, limit: int) -> bytes:
        return bytes(self._decompressor.decompress(data, max_length=limit))
