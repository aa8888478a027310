"""The forwarder's HTTP/1.1 client, its pure parts: request targets, upstream proxy addresses, refusal bodies
decoded (the framing of answers has its own tests, against h11)."""

from __future__ import annotations

import gzip
import zlib

import pytest
from mitmproxy.net import encoding

from chaos_mode.forwarding.upstream import Destination, _proxy_address, decode


@pytest.mark.parametrize(
    ("target", "path", "url"),
    [
        (
            b"/api/anthropic/v1/messages?beta=true",
            b"/api/anthropic/v1/messages?beta=true",
            "https://api.z.ai/api/anthropic/v1/messages?beta=true",
        ),
        (b"http://127.0.0.1:9/v1/messages", b"/v1/messages", "https://api.z.ai/v1/messages"),
        (b"http://127.0.0.1:9", b"/", "https://api.z.ai/"),
    ],
)
def test_request_targets(target: bytes, path: bytes, url: str) -> None:
    to = Destination("https", "api.z.ai", 443)
    assert (to.path(target), to.url(target)) == (path, url)


@pytest.mark.parametrize(
    ("url", "address"),
    [
        ("http://127.0.0.1:8080", ("127.0.0.1", 8080)),
        ("http://user:pw@proxy.example:3128/", ("proxy.example", 3128)),
        ("http://[::1]:8080", ("::1", 8080)),
        ("https://proxy.example", ("proxy.example", 443)),
        ("http://proxy.example", ("proxy.example", 80)),
    ],
)
def test_upstream_proxy_addresses(url: str, address: tuple[str, int]) -> None:
    assert _proxy_address(url) == address


@pytest.mark.parametrize(
    ("coding", "encode"),
    [
        (b"gzip", gzip.compress),
        (b"deflate", zlib.compress),
        (b"br", lambda body: encoding.encode(body, "br")),
        (b"zstd", lambda body: encoding.encode(body, "zstd")),
        (None, bytes),
        (b"identity", bytes),
    ],
)
def test_refusals_are_decoded_for_their_code(coding: bytes | None, encode: object) -> None:
    body = b'{"error":{"code":"1302"}}'
    assert decode(encode(body), coding) == body  # type: ignore[operator]


def test_an_undecodable_refusal_is_read_as_it_came() -> None:
    assert decode(b"not gzip", b"gzip") == b"not gzip"
    assert decode(b"not zstd", b"zstd") == b"not zstd"
