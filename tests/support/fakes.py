"""Test doubles shared by the unit tests."""

from __future__ import annotations


class FakeClock:
    """A clock that moves only when told to: inject it where the code takes `clock=`."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
