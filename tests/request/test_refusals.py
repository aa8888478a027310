"""The rule of refusals that belong to a request, and its memory: pure, on an injected clock and a fake
pool (what it holds of each model and what of that z.ai has not answered yet)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from chaos_mode.request.refusals import (
    MAX_REMEMBERED,
    REMEMBER_SECONDS,
    SERVED_LATELY_SECONDS,
    Refusal,
    Refusals,
    Whose,
    of_kind,
)
from chaos_mode.zai.errors import classify_error
from support.fakes import FakeClock

R = "prompt:filtered"  # the refused request's conversation
OTHER = "prompt:someone-else"


@dataclass
class Pool:
    """What the rule reads of the pool: slots held per model, and of those the ones z.ai has not answered."""

    held: dict[str, int] = field(default_factory=dict)
    waiting: dict[str, int] = field(default_factory=dict)

    def in_flight(self, model: str) -> int:
        return self.held.get(model, 0)

    def unanswered(self, model: str) -> int:
        return self.waiting.get(model, 0)

    def send(self, model: str) -> None:
        """A request goes to `model`: it holds a slot awaiting z.ai's verdict."""
        self.held[model] = self.held.get(model, 0) + 1
        self.waiting[model] = self.waiting.get(model, 0) + 1


def make(clock: FakeClock | None = None, **options: Any) -> tuple[Refusals, Pool, FakeClock]:
    clock = clock or FakeClock()
    return Refusals(clock, **options), Pool(), clock


# -- which refusals may be the request's --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "code", "kind"),
    [
        (529, "1305", True),  # the content filter at the Anthropic door
        (429, "1305", True),  # ... and at the OpenAI one
        (429, "1303", True),
        (429, "1312", True),
        (429, "1399", True),  # a code the table does not know, on a busy status
        (429, "1302", False),  # capacity: the learned limits' evidence
        (429, "1308", False),  # account-wide
        (429, "1310", False),
        (429, "1313", False),
        (429, "1304", False),  # the model's day
        (429, "1113", False),  # out of rotation
        (400, "1211", False),
        (429, "1311", False),
        (429, "1309", False),  # the plan
        (529, None, False),  # a bare 529 is load, as a bare 429 is
        (429, None, False),
    ],
)
def test_only_load_or_content_codes_may_be_the_requests(status: int, code: str | None, kind: bool) -> None:
    body = b"" if code is None else b'{"error": {"code": "%s", "message": "m"}}' % code.encode()
    error = classify_error(status, body, now=0.0)
    assert error is not None and of_kind(error) is kind


def test_529_reads_like_429() -> None:
    for status in (429, 529):
        load = classify_error(status, b"", now=0.0)
        full = classify_error(status, b'{"error": {"code": "1302", "message": "busy"}}', now=0.0)
        assert load is not None and load.action == "cooldown" and load.code is None
        assert full is not None and full.action == "concurrency"


# -- whether a model serves --------------------------------------------------------------------------------


def test_a_model_serves_for_the_window_after_a_clean_answer() -> None:
    memory, pool, clock = make()
    assert not memory.serves("a", pool)
    memory.answered("a")
    clock.advance(SERVED_LATELY_SECONDS)
    assert memory.serves("a", pool)
    clock.advance(0.01)
    assert not memory.serves("a", pool)


def test_a_model_with_an_answered_request_still_running_serves() -> None:
    memory, pool, _ = make()
    pool.held["a"], pool.waiting["a"] = 2, 1  # one answered and streaming, one not answered yet
    assert memory.serves("a", pool)
    pool.waiting["a"] = 2  # nothing answered: held is not served
    assert not memory.serves("a", pool)


# -- the rule ----------------------------------------------------------------------------------------------


def test_a_first_refusal_by_a_model_serving_others_is_undecided() -> None:
    memory, pool, _ = make()
    memory.answered("a")
    pool.send("a")  # the refused request's own slot
    assert memory.whose(Refusal(R, "1305", "a"), pool) is Whose.UNDECIDED


def test_a_first_refusal_by_an_idle_model_is_undecided() -> None:
    """Nobody else was sent to it: no evidence of load (at a proxy's start nothing has been served)."""
    memory, pool, _ = make()
    pool.send("a")
    assert memory.whose(Refusal(R, "1305", "a"), pool) is Whose.UNDECIDED


def test_a_model_that_serves_nobody_and_refuses_others_is_the_models() -> None:
    memory, pool, clock = make()
    memory.refused("a", OTHER)
    clock.advance(1.0)
    pool.send("a")
    assert memory.whose(Refusal(R, "1305", "a"), pool) is Whose.MODEL
    # The same model serving meanwhile is not overloaded: undecided again.
    memory.answered("a")
    assert memory.whose(Refusal(R, "1305", "a"), pool) is Whose.UNDECIDED


def test_refusals_of_the_same_conversation_or_long_ago_are_no_sign_of_load() -> None:
    memory, pool, clock = make()
    memory.refused("a", R)  # its own retry refused before: not another request
    assert memory.whose(Refusal(R, "1305", "a"), pool) is Whose.UNDECIDED
    memory.refused("a", OTHER)
    clock.advance(SERVED_LATELY_SECONDS + 0.01)
    assert memory.whose(Refusal(R, "1305", "a"), pool) is Whose.UNDECIDED
    memory.refused("a", None)  # a request whose conversation cannot be told counts as another
    assert memory.whose(Refusal(R, "1305", "a"), pool) is Whose.MODEL


def test_refusals_found_the_requests_own_are_no_sign_of_load() -> None:
    memory, pool, _ = make()
    memory.refused("a", R)
    memory.refused("b", OTHER)
    memory.remember(R, "1305")  # R's refusals were its own, not a's load
    assert not memory.overloaded("a", "prompt:third", pool)
    assert memory.overloaded("b", "prompt:third", pool)  # b's refusal of another stays evidence


def test_a_refusal_with_no_failover_left_is_the_models() -> None:
    memory, pool, _ = make()
    memory.answered("a")
    assert memory.whose(Refusal(R, "1305", "a", may_fail_over=False), pool) is Whose.MODEL


def test_two_models_serving_others_refusing_it_with_the_same_code_make_it_the_requests() -> None:
    memory, pool, clock = make()
    memory.answered("b")
    clock.advance(0.5)  # a refused it first, served someone after
    memory.answered("a")
    assert memory.whose(Refusal(R, "1305", "b", earlier=["a"]), pool) is Whose.REQUEST
    assert memory.remembered(R, "1305") and len(memory) == 1
    assert not memory.remembered(R, "1312") and not memory.remembered(OTHER, "1305")


def test_a_second_refusal_is_not_the_requests_unless_both_models_serve() -> None:
    memory, pool, _ = make()
    memory.answered("b")  # a serves nobody
    assert memory.whose(Refusal(R, "1305", "b", earlier=["a"]), pool) is Whose.UNDECIDED
    memory, pool, _ = make()
    memory.answered("a")  # b serves nobody
    assert memory.whose(Refusal(R, "1305", "b", earlier=["a"]), pool) is Whose.UNDECIDED
    memory.answered("b")  # an earlier refusal by the same model does not count as a second
    assert memory.whose(Refusal(R, "1305", "b", earlier=["b"]), pool) is Whose.UNDECIDED
    assert len(memory) == 0


def test_a_remembered_conversation_is_the_requests_at_once_on_any_model() -> None:
    memory, pool, _ = make()
    memory.remember(R, "1305")
    pool.send("idle")
    assert memory.whose(Refusal(R, "1305", "idle"), pool) is Whose.REQUEST
    assert memory.whose(Refusal(R, "1305", "idle", may_fail_over=False), pool) is Whose.REQUEST
    assert memory.whose(Refusal(R, "1312", "idle"), pool) is Whose.UNDECIDED  # another code: not known
    assert memory.whose(Refusal(None, "1305", "idle"), pool) is Whose.UNDECIDED  # nothing to remember by


# -- the memory: a TTL, and bounded -------------------------------------------------------------------------


def test_a_conversation_is_remembered_for_its_ttl_from_when_it_was_found() -> None:
    memory, _, clock = make()
    memory.remember(R, "1305")
    clock.advance(REMEMBER_SECONDS - 1)
    assert memory.remembered(R, "1305")  # a hit does not lengthen it
    clock.advance(1.0)
    assert memory.remembered(R, "1305")
    clock.advance(0.01)
    assert not memory.remembered(R, "1305") and len(memory) == 0
    memory.remember(R, "1305")  # found again: remembered afresh
    assert memory.remembered(R, "1305")


def test_the_memory_is_bounded_the_least_recently_refused_going_first() -> None:
    memory, _, _ = make(max_remembered=2)
    memory.remember("one", "1305")
    memory.remember("two", "1305")
    assert memory.remembered("one", "1305")  # refused again: "two" is now the least recent
    memory.remember("three", "1305")
    assert len(memory) == 2
    assert memory.remembered("one", "1305") and memory.remembered("three", "1305")
    assert not memory.remembered("two", "1305")


def test_the_default_memory_holds_max_remembered() -> None:
    memory, _, _ = make()
    for i in range(MAX_REMEMBERED + 10):
        memory.remember(f"c{i}", "1305")
    assert len(memory) == MAX_REMEMBERED
    assert not memory.remembered("c0", "1305") and memory.remembered(f"c{MAX_REMEMBERED + 9}", "1305")
