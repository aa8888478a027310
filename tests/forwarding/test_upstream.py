"""The forwarder's HTTP/1.1 client, its pure parts: request targets and upstream proxy addresses (the framing
of answers has its own tests, against h11; refusal bodies decoded, test_decoding)."""

from __future__ import annotations

import pytest

from chaos_mode.forwarding.upstream import Destination, _proxy_address


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
