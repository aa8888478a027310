"""What a request asks of the pool (`routing.pool`): its `Ticket`, and what the cost guard knows of it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from chaos_mode.routing.strategies import ModelEntry
from chaos_mode.zai.catalog import RequestTier

NO_ATTEMPTS: frozenset[str] = frozenset()
# An output budget over any model's (GLM-5.3 writes 128K at most) counts as this: a JSON integer may have
# 4,300 digits, and the cost guard's float arithmetic overflows on it.
MAX_OUTPUT_TOKENS: Final = 10**7


@dataclass(frozen=True, slots=True)
class RequestInfo:
    """What the cost guard knows of a request: estimated input tokens and the output budget."""

    input_tokens: int
    max_output_tokens: int

    @classmethod
    def estimate(cls, body_size: int, max_tokens: object) -> RequestInfo:
        """About four bytes of JSON per input token; `max_tokens` bounds the output."""
        budget = min(max_tokens, MAX_OUTPUT_TOKENS) if type(max_tokens) is int and max_tokens > 0 else 4096
        return cls(input_tokens=max(body_size, 0) // 4, max_output_tokens=budget)

    def cost(self, entry: ModelEntry) -> float:
        """Estimated $ for this request on `entry`."""
        return (self.input_tokens * entry.input_price + self.max_output_tokens * entry.output_price) / 1e6


@dataclass(frozen=True, slots=True)
class Ticket:
    """One request's claim on the pool: what it may use."""

    tier: RequestTier
    attempted: frozenset[str] = NO_ATTEMPTS
    request: RequestInfo | None = None
    sticky_key: str | None = None
    session: str | None = None  # the conversation: its place in the queue (`shares`), never the model
    counts: bool = True  # admitting it counts toward its conversation's share (a failover's does not)
    may_probe: bool = True  # False: only a slot within the limits, and no trial of a model cooling down
    images: bool = False  # it carries an image: only models that read them, where the catalog has any
