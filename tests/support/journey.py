"""The folders one request's code passes through: every call into the package, recorded with the folders on
its call stack (a profile hook in every thread), so a test can say which folders hand control on and in
what order. A coroutine resumed by the event loop is a call too, its stack the coroutines awaiting it.

A folder *hands control on* when code in it calls code in another folder that is not one of the facts
(`FACTS`: what z.ai is and what the configuration says, which answer and call nothing back). A folder the
stack leaves and enters again (`forwarding > request > forwarding`) is a return: a callback upward. The
development tools (`chaos_mode_tools`: a simulator in the rig, say) are code outside the package.
"""

from __future__ import annotations

import itertools
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, Final

PACKAGE: Final = "/chaos_mode/"
FACTS: Final = frozenset({"zai", "config"})


def _folder(frame: FrameType) -> str | None:
    path = frame.f_code.co_filename
    if PACKAGE not in path:
        return None
    inside = path.split(PACKAGE, 1)[1]
    return inside.split("/", 1)[0] if "/" in inside else "(package)"


@dataclass
class Journey:
    """The folder chains seen (outermost first, each folder once per run of frames in it)."""

    chains: set[tuple[str, ...]] = field(default_factory=set)
    threads: set[str] = field(default_factory=set)  # the names of the threads the package ran on

    def record(self, frame: FrameType) -> None:
        self.threads.add(threading.current_thread().name)
        chain: list[str] = []
        at: FrameType | None = frame
        while at is not None:
            folder = _folder(at)
            if folder is not None and (not chain or chain[-1] != folder):
                chain.append(folder)
            at = at.f_back
        self.chains.add(tuple(reversed(chain)))

    def returns(self) -> set[tuple[str, ...]]:
        """Chains that enter a folder the stack had left."""
        return {chain for chain in self.chains if len(set(chain)) < len(chain)}

    def calls(self) -> set[tuple[str, str]]:
        """Each (caller, callee) of folders seen, the facts included."""
        return {pair for chain in self.chains for pair in itertools.pairwise(chain)}

    def handing_on(self) -> set[str]:
        """The folders that hand control on to another (not to the facts)."""
        return {
            here for chain in self.chains for here, there in itertools.pairwise(chain) if there not in FACTS
        }

    def facts_calling_on(self) -> set[tuple[str, ...]]:
        """Chains in which a facts folder calls another folder of the package."""
        return {chain for chain in self.chains if any(f in FACTS for f in chain[:-1])}


@contextmanager
def followed() -> Iterator[Journey]:
    """Record every call into the package until the block ends, in every thread."""
    journey = Journey()

    def profile(frame: FrameType, event: str, _arg: Any) -> None:
        if event == "call" and _folder(frame) is not None:
            journey.record(frame)

    previous = sys.getprofile()
    threading.setprofile_all_threads(profile)
    try:
        yield journey
    finally:
        threading.setprofile_all_threads(previous)
