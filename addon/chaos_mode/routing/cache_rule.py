"""Conversations stay on their cache (`stickyConversations`): z.ai's prompt cache is per model, so a
conversation served by a model where its prompt is cold reads it all again at the full input weight.

The rule, for a request of a conversation the pool remembers (`routing.sticky`: the models that served it
within z.ai's cache time, the latest first), applied where `_select` has the models free within the limits:

1. **Warm**: the latest of those models that is free within the limits serves it.
2. **Wait** for one while that costs less than going cold: when a warm model is usable but full, the request
   waits in the queue if `expected wait x WAIT_CREDITS_PER_SECOND < prompt tokens x (input - cached
   input weight)`, the expected wait being the least over those models of `mean answer seconds / limit`.
3. **Cold** otherwise: the strategy picks among the free models, and the move is counted with the credits
   its prompt costs again.

**Assumed**: answers end independently, so a full model with limit `c` and answers of `m` seconds on average
frees a slot every `m / c` seconds (memoryless: a wait already long is no nearer its end, so the estimate
does not change while the request waits); and a second waited is worth what a slot spends in a second,
`OUTPUT_TOKENS_PER_SECOND` of output at GLM-5.3's output weight (`zai.quota`). Until a model has ended an
answer its expected wait is 0: the request waits for it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final, Literal

from chaos_mode.routing.strategies import ModelEntry
from chaos_mode.zai.quota import CREDIT_UNIT_TOKENS, GLM_5_3_CREDITS

OUTPUT_TOKENS_PER_SECOND: Final = 50.0  # a streamed answer's pace (assumed)
WAIT_CREDITS_PER_SECOND: Final = OUTPUT_TOKENS_PER_SECOND * GLM_5_3_CREDITS[2] / CREDIT_UNIT_TOKENS
REREAD_CREDITS_PER_TOKEN: Final = (GLM_5_3_CREDITS[0] - GLM_5_3_CREDITS[1]) / CREDIT_UNIT_TOKENS
SMOOTHING: Final = 0.2  # weight of the latest answer in a model's mean answer time

WAIT: Final = "wait"
Step = str | Literal["wait"] | None  # a warm model, WAIT, or None: go cold


def reread_credits(prompt_tokens: int) -> float:
    """What reading a prompt cold costs more than reading it warm, in credits."""
    return max(prompt_tokens, 0) * REREAD_CREDITS_PER_TOKEN


class CacheRule:
    """The rule above, with each model's mean answer time (`ended`, from the pool's slots)."""

    def __init__(self) -> None:
        self._answer_seconds: dict[str, float] = {}

    def ended(self, model: str, seconds: float) -> None:
        """A slot of `model` was held `seconds`."""
        mean = self._answer_seconds.get(model)
        seconds = max(seconds, 0.0)
        self._answer_seconds[model] = seconds if mean is None else mean + SMOOTHING * (seconds - mean)

    def expected_wait(self, entry: ModelEntry) -> float:
        """Seconds until a slot of a full `entry` frees, as the docstring's assumption has it."""
        return self._answer_seconds.get(entry.name, 0.0) / max(entry.capacity, 1)

    def step(
        self,
        warm: Sequence[str],
        free: Sequence[ModelEntry],
        usable: Sequence[ModelEntry],
        held: Callable[[str, int], int],
        prompt_tokens: int,
    ) -> Step:
        """`warm`: the conversation's models, latest first; `free`: those free within the limits (what the
        request may take); `usable`: those it may use at all (eligible, not cooling); `held`: in flight."""
        names = {entry.name for entry in free}
        for model in warm:
            if model in names:
                return model
        full = {entry.name: entry for entry in usable if held(entry.name, 0) >= entry.capacity}
        waits = [self.expected_wait(full[model]) for model in warm if model in full]
        if waits and min(waits) * WAIT_CREDITS_PER_SECOND < reread_credits(prompt_tokens):
            return WAIT
        return None
