"""Soft limits: a model's (or the account's) limit is its clean level, and a band of `width` levels above it
is served only by chance, the more rarely the higher; beyond the band every request is over the limit.

    c = what the request would make in flight (itself and the held slots included)
    c <= limit                    never refused for this limit
    limit < c <= limit + width    refused with probability shape((c - limit) / (width + 1))
    c > limit + width             over the limit: refused with 1302 (or queued, `SimSettings.over_limit`)

`linear` rises evenly (1/(w+1), 2/(w+1), ... w/(w+1)), `logistic` stays low near the clean level and rises
steeply in the middle of the band. A width of 0 is a hard limit. The measured glm-4.7 (RicherTunes/ai-proxy,
Coding Plan): clean to 9, sporadic 429s at 11-15, consistent from 19: limit 9, width 9.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Final


def _linear(x: float) -> float:
    return x


def _logistic(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-10.0 * (x - 0.5)))


BAND_SHAPES: Final[dict[str, Callable[[float], float]]] = {"linear": _linear, "logistic": _logistic}


def refusal_probability(concurrency: int, limit: int, width: int, shape: str = "linear") -> float:
    """The chance that z.ai refuses a request that would make `concurrency` in flight (see the module)."""
    if concurrency <= limit:
        return 0.0
    if concurrency > limit + width:
        return 1.0
    return BAND_SHAPES[shape]((concurrency - limit) / (width + 1))
