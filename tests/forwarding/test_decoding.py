"""Bounded decoding: every coding decoded exactly, within its cap; a bomb stopped at the cap with memory to
match; malformed, truncated and trailing input told apart; z.ai's refusals read for their code however
large they decode."""

from __future__ import annotations

import gzip
import random
import tracemalloc
import zlib
from collections.abc import Callable

import brotli  # type: ignore[import-untyped]
import pytest
from hypothesis import given
from hypothesis import strategies as st

from chaos_mode.forwarding.decoding import PIECE, Decoded, Outcome, Unpacking, decode, pieces
from chaos_mode.forwarding.forwarder import MAX_ERROR_BODY, refusal_body
from chaos_mode.zai.errors import Action, classify_error
from chaos_mode.zai.zstd import zstd
from support.hostile import REFUSAL_HEAD, bomb

ENCODERS: dict[str, Callable[[bytes], bytes]] = {
    "gzip": gzip.compress,
    "x-gzip": gzip.compress,
    "deflate": zlib.compress,
    "br": lambda body: bytes(brotli.compress(body)),
    "zstd": lambda body: bytes(zstd.compress(body)),
}
BODY = b'{"model": "glm-4.7", "text": "' + b"chaos " * 40_000 + b'"}'
SMALL_BOMB = 64 << 20  # decodes to 64 MiB: enough to tell a cap from none


def raw_deflate(body: bytes) -> bytes:
    compressor = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    return compressor.compress(body) + compressor.flush()


@pytest.mark.parametrize("coding", sorted(ENCODERS))
def test_each_coding_decodes_whole_within_its_cap(coding: str) -> None:
    encoded = ENCODERS[coding](BODY)
    assert decode(encoded, coding, cap=len(BODY)) == decode(encoded, coding, cap=1 << 30)
    whole = decode(encoded, coding, cap=len(BODY))
    assert whole.outcome is Outcome.WHOLE and whole.body == BODY
    cut = decode(encoded, coding, cap=len(BODY) - 1)
    assert cut.outcome is Outcome.OVER_CAP and cut.body == BODY[:-1]
    assert all(len(piece) <= 2 * PIECE for piece in pieces(encoded, coding, cap=len(BODY)))


@pytest.mark.parametrize("coding", sorted(ENCODERS))
def test_a_body_that_compresses_little_decodes_whole(coding: str) -> None:
    """Megabytes of hex digits: zstd's decoder, asked for 64 KiB at a time, at times has output to give
    yet gives none for an empty feed; read as cut short there, such a body was broken past 128 KiB."""
    body = random.Random(7).randbytes(1 << 20).hex().encode()
    assert decode(ENCODERS[coding](body), coding, cap=1 << 30) == Decoded(body, Outcome.WHOLE)


@given(
    body=st.binary(max_size=4096)
    | st.builds(lambda b, n: b * n, st.binary(min_size=1, max_size=8), st.integers(0, 30_000)),
    coding=st.sampled_from(sorted(ENCODERS)),
    cap=st.integers(0, 300_000),
)
def test_a_body_decodes_to_its_first_cap_bytes(body: bytes, coding: str, cap: int) -> None:
    decoded = decode(ENCODERS[coding](body), coding, cap=cap)
    assert decoded.body == body[:cap]
    assert decoded.outcome is (Outcome.WHOLE if len(body) <= cap else Outcome.OVER_CAP)


def test_raw_deflate_is_read_as_deflate() -> None:
    assert decode(raw_deflate(BODY), "deflate", cap=1 << 20) == decode(
        zlib.compress(BODY), "deflate", cap=1 << 20
    )
    assert decode(raw_deflate(BODY), "deflate", cap=1 << 20).body == BODY


@pytest.mark.parametrize("coding", ["gzip", "zstd"])
def test_members_or_frames_one_after_another_are_one_body(coding: str) -> None:
    encode = ENCODERS[coding]
    assert decode(encode(b"chaos ") + encode(b"mode"), coding, cap=100).body == b"chaos mode"
    over = decode(encode(b"chaos ") + encode(b"mode"), coding, cap=8)
    assert (over.outcome, over.body) == (Outcome.OVER_CAP, b"chaos mo")


@pytest.mark.parametrize("coding", sorted(ENCODERS))
@pytest.mark.parametrize(
    "damage",
    [
        lambda encoded: encoded[: len(encoded) // 2],  # cut short
        lambda encoded: encoded[:-1],
        lambda encoded: encoded + b"junk",  # bytes after its end
        lambda encoded: encoded[:10] + bytes(b ^ 0x5A for b in encoded[10:40]) + encoded[40:],  # malformed
        lambda encoded: BODY,  # plain, labelled as compressed
    ],
    ids=["half", "last-byte", "trailing", "malformed", "plain"],
)
def test_damaged_input_is_broken_never_an_exception(coding: str, damage: Callable[[bytes], bytes]) -> None:
    decoded = decode(damage(ENCODERS[coding](BODY)), coding, cap=1 << 30)
    assert decoded.outcome is Outcome.BROKEN and BODY.startswith(decoded.body)


def unpacked(encoded: bytes, coding: str, cuts: list[int], cap: int = 1 << 30) -> tuple[bytes, bool]:
    """`encoded` fed to an `Unpacking` in chunks cut at `cuts`: what came out, and whether it stopped."""
    unpacking, out, at = Unpacking(coding, cap=cap), bytearray(), 0
    for cut in [*sorted(cuts), len(encoded)]:
        for piece in unpacking.pieces(encoded[at:cut]):
            assert len(piece) <= 2 * PIECE  # brotli may give a little over what it is asked
            out += piece
        at = max(at, cut)
    return bytes(out), unpacking.outcome is not None


@given(
    body=st.binary(max_size=4096)
    | st.builds(lambda b, n: b * n, st.binary(min_size=1, max_size=8), st.integers(0, 30_000)),
    coding=st.sampled_from([*sorted(ENCODERS), "raw-deflate", "gzip-members", "zstd-frames"]),
    cuts=st.lists(st.integers(0, 70_000), max_size=12),
    cap=st.integers(0, 300_000),
)
def test_a_body_streamed_in_any_chunks_decodes_as_the_whole_does(
    body: bytes, coding: str, cuts: list[int], cap: int
) -> None:
    """Streamed (an answer's compressed events as they come), a body decodes to its first `cap` bytes
    however it is cut, and stops there."""
    half = len(body) // 2
    encoded, coding = {
        "raw-deflate": (raw_deflate(body), "deflate"),
        "gzip-members": (gzip.compress(body[:half]) + gzip.compress(body[half:]), "gzip"),
        "zstd-frames": (ENCODERS["zstd"](body[:half]) + ENCODERS["zstd"](body[half:]), "zstd"),
    }.get(coding) or (ENCODERS[coding](body), coding)
    out, stopped = unpacked(encoded, coding, cuts, cap)
    assert out == body[:cap]
    assert stopped is (len(body) > cap)


@pytest.mark.parametrize("coding", sorted(ENCODERS))
def test_a_damaged_stream_stops_decoding_never_an_exception(coding: str) -> None:
    encoded = ENCODERS[coding](BODY)
    malformed = encoded[:10] + bytes(b ^ 0x5A for b in encoded[10:40]) + encoded[40:]
    out, stopped = unpacked(malformed, coding, [15, 100])
    assert stopped and BODY.startswith(out)
    out, stopped = unpacked(encoded + b"junk", coding, [len(encoded)])
    assert (out, stopped) == (BODY, True)  # all of it, then bytes that are no member nor frame
    out, stopped = unpacked(b"event: ping\n\n", coding, [])  # plain, labelled as compressed
    assert stopped and out == b""


@pytest.mark.parametrize("coding", ["br", "gzip", "zstd"])
def test_a_streamed_bomb_stops_at_the_cap_in_memory_to_match(coding: str) -> None:
    encoded = bomb(coding, b"{}", size=SMALL_BOMB)
    tracemalloc.start()
    try:
        out, stopped = unpacked(encoded, coding, [len(encoded) // 3], cap=1 << 20)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert stopped and len(out) == 1 << 20
    assert peak < 4 << 20, peak


def test_an_empty_body_is_empty_and_an_unknown_coding_is_broken() -> None:
    assert decode(b"", "br", cap=10).outcome is Outcome.WHOLE
    assert decode(b"{}", "compress", cap=10).outcome is Outcome.BROKEN


@pytest.mark.parametrize("coding", ["br", "gzip", "zstd"])
def test_a_bomb_stops_at_the_cap_in_memory_to_match(coding: str) -> None:
    """64 MiB of spaces decoded with a 1 MiB cap: no more than a few MiB allocated at any moment."""
    encoded = bomb(coding, b"{}", size=SMALL_BOMB)
    tracemalloc.start()
    try:
        decoded = decode(encoded, coding, cap=1 << 20)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert decoded.outcome is Outcome.OVER_CAP and len(decoded.body) == 1 << 20
    assert peak < 4 << 20, peak


@pytest.mark.parametrize("coding", ["br", "gzip", "zstd"])
def test_a_bombed_refusal_is_read_as_far_as_the_cap_for_its_code(coding: str) -> None:
    """z.ai's 1302 followed by 64 MiB of NULs: not JSON, but its first bytes say 1302."""
    body = refusal_body(bomb(coding, REFUSAL_HEAD, b"\0", SMALL_BOMB), coding.encode())
    assert len(body) <= MAX_ERROR_BODY
    error = classify_error(429, body, now=0.0)
    assert error is not None and (error.code, error.action) == ("1302", Action.CONCURRENCY)


@pytest.mark.parametrize(
    ("coding", "encode"),
    [
        (b"gzip", gzip.compress),
        (b"deflate", zlib.compress),
        (b"br", ENCODERS["br"]),
        (b" ZSTD ", ENCODERS["zstd"]),
        (None, bytes),
        (b"identity", bytes),
        (b"compress", bytes),
    ],
)
def test_refusals_are_decoded_for_their_code(coding: bytes | None, encode: Callable[[bytes], bytes]) -> None:
    assert refusal_body(encode(REFUSAL_HEAD), coding) == REFUSAL_HEAD


def test_an_undecodable_refusal_is_read_as_it_came() -> None:
    assert refusal_body(b"not gzip", b"gzip") == b"not gzip"
    assert refusal_body(b"not zstd", b"zstd") == b"not zstd"
    cut = refusal_body(gzip.compress(REFUSAL_HEAD)[:-12], b"gzip")  # cut short: its first bytes read
    error = classify_error(429, cut, now=0.0)
    assert error is not None and error.code == "1302"
