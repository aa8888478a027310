"""The helpers that start the tests' children: ports handed out once."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest

from chaos_mode_tools.devtools import processes


class _OfferedSocket:
    """A socket whose bind to port 0 lands on the next of the ports the OS is made to offer."""

    def __init__(self, offers: Iterator[int]) -> None:
        self._offers = offers
        self._port = 0

    def bind(self, address: tuple[str, int]) -> None:
        self._port = next(self._offers)

    def getsockname(self) -> tuple[str, int]:
        return ("127.0.0.1", self._port)

    def __enter__(self) -> _OfferedSocket:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def test_a_port_the_os_offers_again_is_not_handed_out_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    first = processes.free_port()  # a real port, now handed out
    offers = iter([first, first, first + 1])  # the OS offers the same port twice, then another

    def offered(*args: Any, **kwargs: Any) -> _OfferedSocket:
        return _OfferedSocket(offers)

    monkeypatch.setattr(processes.socket, "socket", offered)
    assert processes.free_port() == first + 1


def test_ports_handed_out_side_by_side_are_distinct_and_were_free() -> None:
    ports = [processes.free_port() for _ in range(50)]
    assert len(set(ports)) == len(ports)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", ports[-1]))  # still free: nothing bound it
