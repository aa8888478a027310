"""A bound on code that may never give the event loop back: a test of it fails instead of hanging the run."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator


@contextlib.contextmanager
def within(seconds: float) -> Iterator[None]:
    """TimeoutError inside the block once it ran `seconds` (SIGALRM: it interrupts a loop that never awaits,
    which asyncio's own timeouts cannot)."""

    def expire(_: int, __: object) -> None:
        raise TimeoutError(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
