"""JSON from z.ai, a peer or a client parsed with a depth bound: a value nested deeper than json's C scanner
recurses (about 1,500 levels on CPython 3.12) is unreadable, a `ValueError`, never a `RecursionError`."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, cast

_DECODER = json.JSONDecoder()
# The value at an index and where it ends: what `json.loads` runs at its core.
_SCAN = cast(Callable[[str, int], tuple[Any, int]], _DECODER.scan_once)  # type: ignore[attr-defined]


def loads(data: bytes | bytearray | str) -> Any:
    """`json.loads` of `data`, bytes read as UTF-8 (a byte that is not UTF-8 is replaced, so the rest is
    still read); ValueError when it is not JSON or is nested too deeply."""
    text = data.decode("utf-8", "replace") if isinstance(data, bytes | bytearray) else data
    try:
        try:  # the usual text, one value from its first character to its last: read at once
            value, end = _SCAN(text, 0)
        except (StopIteration, ValueError):
            end = -1
        if end == len(text):
            return value
        return json.loads(text)  # anything else as json reads it (space around the value), its errors too
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


def raw_decode(text: str, start: int = 0) -> tuple[Any, int]:
    """The JSON value at `text[start:]` and where it ends, as `JSONDecoder.raw_decode`; ValueError when it
    is not JSON or is nested too deeply."""
    try:
        return _DECODER.raw_decode(text, start)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
