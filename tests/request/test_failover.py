"""Failing over in the pure core: the refused attempt is judged, and the request waits again in the queue
keeping its first arrival, without counting again against its conversation; a refusal that is the
request's own (see `refusals`) goes to the client as z.ai said it, and cools nothing."""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

from hypothesis import event, given, settings
from hypothesis import strategies as st

from chaos_mode.config.schema import parse_config
from chaos_mode.doors.chat import parse_chat
from chaos_mode.doors.messages import parse_message
from chaos_mode.observe.stats import Stats
from chaos_mode.request.failover import Answer, judge, reject, settle
from chaos_mode.request.rate_limited import Reply
from chaos_mode.request.refusals import Refusals
from chaos_mode.request.routed import RoutedRequest
from chaos_mode.routing import pool_status
from chaos_mode.routing.pool import ChaosPool, Slot, Ticket
from chaos_mode.routing.pool_status import served
from chaos_mode.zai.errors import classify_error
from support.design_catalog import FIXED_LIMITS
from support.fakes import FakeClock

BODY = json.dumps({"model": "claude-opus-4-5", "max_tokens": 64, "messages": []}).encode()
REFUSAL = Answer(429, [], json.dumps({"error": {"code": "1302", "message": "busy"}}).encode())
MODELS = {"a": {"tier": "HEAVY", "maxConcurrency": 1}, "b": {"tier": "HEAVY", "maxConcurrency": 1}}


class RecordingPool(ChaosPool):
    """The real pool, keeping each ticket that waits in `admit` and the arrival it waits with."""

    waits: list[tuple[Ticket, float | None]]

    async def admit(
        self, ticket: Ticket, *, since: float | None = None, timeout: float | None = None
    ) -> Slot | None:
        self.waits.append((ticket, since))
        return await super().admit(ticket, since=since, timeout=timeout)


def make_pool(clock: FakeClock) -> tuple[RecordingPool, Stats]:
    config = parse_config(
        {"modelRouting": {"models": MODELS, **FIXED_LIMITS, "chaosMode": {"enabled": True}}}
    )
    pool = RecordingPool(config, clock=clock, wall_clock=clock)
    pool.waits = []
    return pool, Stats(config, clock)


def routed(pool: RecordingPool, stats: Stats, session: str | None, clock: FakeClock) -> RoutedRequest:
    request = RoutedRequest(
        parse_message(BODY, limit=1 << 20),
        "heavy",
        pool=pool,
        stats=stats,
        later=lambda *_: None,
        clock=clock,
        session=session,
    )
    request.arrived = clock()
    return request


async def test_a_failover_keeps_its_first_arrival_and_does_not_count_again() -> None:
    clock = FakeClock()
    pool, stats = make_pool(clock)
    first = routed(pool, stats, "conv", clock)
    selection = pool.admit_now(first.ticket())
    assert selection is not None and first.hold(selection)
    other = pool.admit_now(routed(pool, stats, None, clock).ticket())  # the other model is taken too
    assert other is not None
    clock.advance(1.0)
    later = asyncio.create_task(pool.admit(Ticket("heavy")))  # came at 1 s
    await asyncio.sleep(0)
    clock.advance(2.0)
    # z.ai refuses the first request's attempt at 3 s: it waits again, as if it had come at 0 s.
    failing_over = asyncio.create_task(settle(first, REFUSAL, now=clock()))
    await asyncio.sleep(0)
    assert pool.first_in_line()[0] == 2
    pool.release(other)
    verdict = await asyncio.wait_for(failing_over, 1)
    assert isinstance(verdict, Slot) and verdict.model == other.model
    assert not later.done()
    # It waited as its conversation's, from its first arrival, and not counted as a new admission.
    ticket, since = pool.waits[-1]
    assert (ticket.session, ticket.counts, since) == ("conv", False, first.arrived)
    assert first.mirror()["failovers"] == 1
    first.finish("ok")  # gives `verdict` back: the request that came at 1 s has it
    served_later = await asyncio.wait_for(later, 1)
    assert served_later is not None and pool.release(served_later)
    assert pool.in_flight() == 0 and pool.first_in_line()[0] == 0
    assert pool.spurious_releases == 0


# -- refusals that belong to the request (see `refusals`) -------------------------------------------------

SYSTEM = "You run on Hermes Agent."  # what z.ai's filter refuses, on every model
FILTERED_BODY = json.dumps(
    {
        "model": "claude-opus-4-5",
        "max_tokens": 64,
        "system": SYSTEM,
        "messages": [{"role": "user", "content": "hi"}],
    }
).encode()
PLAIN_BODY = json.dumps(
    {"model": "claude-opus-4-5", "max_tokens": 64, "system": "Be terse.", "messages": []}
).encode()
THREE = {name: {"tier": "HEAVY", "maxConcurrency": 3} for name in ("a", "b", "c")}


def zai(code: str | None, status: int = 529) -> Answer:
    """z.ai's refusal with `code` (None: a bare overloaded 529), as the content filter answers it."""
    if code is None:
        return Answer(status, [], b"")
    body = {
        "type": "error",
        "error": {"type": "overloaded_error", "code": code, "message": f"[{code}][busy]"},
    }
    return Answer(status, [], json.dumps(body).encode())


class Rig:
    """A pool of three heavy models (learned limits on, no queue), the addon's shared memory of refusals."""

    def __init__(self, *, max_failovers: int = 3, models: dict[str, Any] | None = None) -> None:
        routing = {
            "models": models or THREE,
            "chaosMode": {"enabled": True},
            "queue": {"enabled": False},
            "streams": {"maxFailovers": max_failovers},
        }
        config = parse_config({"modelRouting": routing})
        self.clock = FakeClock()
        self.pool = CountingErrors(config, clock=self.clock, wall_clock=self.clock, rng=random.Random(7))
        self.stats = Stats(config, self.clock)
        self.refusals = Refusals(self.clock)

    def request(self, body: bytes = FILTERED_BODY) -> RoutedRequest:
        request = RoutedRequest(
            parse_message(body, limit=1 << 20),
            "heavy",
            pool=self.pool,
            stats=self.stats,
            later=lambda *_: None,
            clock=self.clock,
            refusals=self.refusals,
        )
        request.arrived = self.clock()
        slot = self.pool.admit_now(request.ticket())
        assert slot is not None and request.hold(slot)
        return request

    def serve_others(self, *models: str) -> list[RoutedRequest]:
        """Plain requests on `models` (those with room), answered cleanly and still streaming."""
        served = []
        for model in models:
            request = RoutedRequest(
                parse_message(PLAIN_BODY, limit=1 << 20),
                "heavy",
                pool=self.pool,
                stats=self.stats,
                later=lambda *_: None,
                refusals=self.refusals,
            )
            slot = self.pool.acquire(model)
            if slot is None:
                continue
            assert request.hold(slot)
            request.answered()
            served.append(request)
        return served

    def state(self) -> Any:
        """Everything a refusal could move: cooldowns, out of rotation, pauses, learned limits."""
        status = served(pool_status.status(self.pool))
        keys = ("capacity", "learnedLimit", "limitReason", "limitChangedAt", "cooldownRemaining")
        keys += ("cooldownReason", "outOfRotation", "probing")
        models = {name: [m[k] for k in keys] for name, m in status["models"].items()}
        return models, status["account"], status["accountPause"], self.pool.limits.version


class CountingErrors(ChaosPool):
    """The real pool, counting the verdicts that may cool a model or move a limit."""

    errors = 0

    def error(self, *args: Any, **kwargs: Any) -> float:
        self.errors += 1
        return super().error(*args, **kwargs)


async def test_refused_by_two_models_serving_others_it_gets_zais_answer_and_nothing_is_cooled() -> None:
    rig = Rig()
    others = rig.serve_others("a", "b", "c")
    assert len(others) == 3
    before = rig.state()
    request = rig.request()
    first = request.model
    verdict = await settle(request, zai("1305"), now=rig.clock())
    # Undecided: it fails over (its place kept), the first model's cooldown owed, not applied.
    assert isinstance(verdict, Slot) and verdict.model != first
    assert [owed.model for owed in request.owed] == [first]
    assert rig.state() == before and rig.pool.errors == 0
    rig.clock.advance(0.2)
    assert await settle(request, zai("1305"), now=rig.clock()) is None  # z.ai's own answer, at once
    assert request.owed == [] and request.own_refusal is not None and request.rejected is None
    assert first in request.own_refusal and verdict.model in request.own_refusal
    assert request.finish("error")
    assert rig.state() == before and rig.pool.errors == 0
    assert rig.stats.request_refusals == {"1305": 2} and not rig.stats.upstream_errors
    assert request.mirror()["refusals"] == ["1305", "1305"] and request.mirror()["ownRefusal"]

    # Its retry: remembered, z.ai's answer at once, no failover, nothing cooled, wherever it lands.
    retry = rig.request()
    assert await settle(retry, zai("1305"), now=rig.clock()) is None
    assert retry.failovers == 0 and retry.own_refusal is not None and "remembered" in retry.own_refusal
    assert retry.finish("error")
    assert rig.state() == before and rig.pool.errors == 0
    assert rig.stats.request_refusals == {"1305": 3} and rig.stats.failovers == 1
    for other in others:
        other.finish("ok")
    assert rig.pool.in_flight() == 0 and rig.pool.spurious_releases == 0


async def test_an_undecided_refusal_is_the_models_when_another_model_serves_it() -> None:
    rig = Rig()
    rig.serve_others("a", "b", "c")
    request = rig.request()
    first = request.model
    slot = await settle(request, zai("1305"), now=rig.clock())
    assert isinstance(slot, Slot) and rig.pool.cooldowns.block(first) is None
    request.answered()  # the next model serves it: the first refusal was the first model's, cooled now
    block = rig.pool.cooldowns.block(first)
    assert block is not None and block.kind == "cooldown" and "1305" in block.reason
    assert rig.stats.upstream_errors == {(first, "1305"): 1} and not rig.stats.request_refusals
    assert request.owed == [] and request.finish("ok")
    assert rig.pool.errors == 1  # paid once: finishing pays nothing more


async def test_a_model_that_serves_nobody_and_refuses_others_is_cooled_at_once() -> None:
    rig = Rig(
        models={"a": {"tier": "HEAVY", "maxConcurrency": 3}, "b": {"tier": "HEAVY", "maxConcurrency": 3}}
    )
    someone = rig.request(PLAIN_BODY)  # another conversation, refused by its model
    model = someone.model
    assert isinstance(await settle(someone, zai("1305"), now=rig.clock()), Slot)  # undecided: nobody served
    rig.clock.advance(1.0)
    request = rig.request()
    while request.model != model:  # until the filtered request lands on the model that refused someone
        request.finish("aborted")
        request = rig.request()
    assert isinstance(await settle(request, zai("1305"), now=rig.clock()), Slot)
    block = rig.pool.cooldowns.block(model)
    assert block is not None and block.kind == "cooldown"  # served nobody, refused others: overloaded
    assert request.owed == [] and rig.stats.upstream_errors == {(model, "1305"): 1}
    request.finish("aborted")
    someone.finish("aborted")  # its owed cooldown is paid too: the model had earned it


async def test_refused_by_every_model_before_any_served_anyone_the_models_are_cooled_as_before() -> None:
    rig = Rig(max_failovers=1)
    request = rig.request()
    first = request.model
    second = await settle(request, zai("1305"), now=rig.clock())  # undecided
    assert isinstance(second, Slot)
    reply = await settle(request, zai("1305"), now=rig.clock())  # no failover left: the models', our 429
    assert isinstance(reply, Reply) and reply.status == 429
    assert request.rejected is not None and request.own_refusal is None
    for model in (first, second.model):
        block = rig.pool.cooldowns.block(model)
        assert block is not None and block.kind == "cooldown", model
    retry_after = dict(reply.headers)["retry-after"]
    assert int(retry_after) >= 1  # the owed cooldown was applied before our 429 said when to retry
    assert rig.stats.upstream_errors == {(first, "1305"): 1, (second.model, "1305"): 1}
    request.finish("rejected")


async def test_capacity_account_and_codeless_refusals_are_never_the_requests() -> None:
    for answer in (zai("1302", 429), zai(None), zai("1308", 429)):
        rig = Rig()
        rig.serve_others("a", "b", "c")
        request = rig.request()
        rig.refusals.remember(request.conversation, answer_code(answer) or "none")
        await settle(request, answer, now=rig.clock())
        assert request.own_refusal is None and request.owed == [] and rig.pool.errors == 1, answer


def answer_code(answer: Answer) -> str | None:
    return json.loads(answer.body)["error"]["code"] if answer.body else None


async def test_a_left_attempt_of_a_remembered_conversation_is_only_counted() -> None:
    rig = Rig()
    request = rig.request()
    rig.refusals.remember(request.conversation, "1305")
    left = request.slot
    assert left is not None
    error = classify_error(529, zai("1305").body, now=0.0)
    assert error is not None
    judge(request, error, [], now=rig.clock(), slot=left)
    assert rig.pool.errors == 0 and rig.stats.request_refusals == {"1305": 1}
    assert request.own_refusal is None  # the request went on elsewhere: its own outcome stands
    request.finish("error")


# A request-specific refusal never moves a limit or a cooldown, whatever happened before it.
CONVERSATIONS = [FILTERED_BODY, PLAIN_BODY, FILTERED_BODY.replace(b"hi", b"hello")]
STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("serve"), st.sampled_from(["a", "b", "c"])),
        st.just(("end",)),  # the oldest clean answer still streaming ends
        st.tuples(st.just("advance"), st.sampled_from([0.1, 1.0, 5.0, 11.0, 400.0])),
        st.tuples(
            st.just("refuse"), st.sampled_from(range(3)), st.sampled_from([*["1305"] * 4, "1312", None])
        ),
        st.tuples(st.just("refuse"), st.sampled_from(range(3)), st.just("1302")),
    ),
    max_size=30,
)


@settings(max_examples=300, deadline=None)
@given(
    serving=st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=6),
    steps=STEPS,
    failovers=st.integers(0, 3),
)
def test_a_request_specific_refusal_never_moves_a_limit_or_a_cooldown(
    serving: list[str], steps: list[tuple[Any, ...]], failovers: int
) -> None:
    asyncio.run(_refusals_scenario(serving, steps, failovers))


async def _refusals_scenario(serving: list[str], steps: list[tuple[Any, ...]], failovers: int) -> None:
    rig = Rig(max_failovers=failovers)
    running = rig.serve_others(*serving)
    refused = 0  # z.ai refusals sent, each counted once: the models' or the request's
    for step in steps:
        match step:
            case ("serve", model):
                running += rig.serve_others(model)
            case ("end",):
                if running:
                    running.pop(0).finish("ok")
            case ("advance", seconds):
                rig.clock.advance(seconds)
            case ("refuse", conversation, code):
                request = RoutedRequest(
                    parse_message(CONVERSATIONS[conversation], limit=1 << 20),
                    "heavy",
                    pool=rig.pool,
                    stats=rig.stats,
                    later=lambda *_: None,
                    clock=rig.clock,
                    refusals=rig.refusals,
                )
                if not await request.admit(lambda: True):
                    request.finish("rejected")
                    continue
                verdict: object = request.slot
                while isinstance(verdict, Slot):  # every model refuses it with the same code
                    before, errors = rig.state(), rig.pool.errors
                    verdict = await settle(request, zai(code), now=rig.clock())
                    refused += 1
                    if request.own_refusal is not None:
                        event("the request's own")
                        assert verdict is None
                        assert (rig.state(), rig.pool.errors) == (before, errors)
                if request.own_refusal is not None:
                    before, errors = rig.state(), rig.pool.errors
                    request.finish("error")
                    assert (rig.state(), rig.pool.errors) == (before, errors)
                else:
                    request.finish("rejected" if request.rejected else "error")
                counted = sum(rig.stats.upstream_errors.values()) + sum(rig.stats.request_refusals.values())
                assert counted == refused
    for request in running:
        request.finish("ok")
    assert rig.pool.in_flight() == 0 and rig.pool.spurious_releases == 0


# -- when waiting fixes nothing: our 403, shown at once ----------------------------------------------------


async def test_refused_by_every_model_out_of_rotation_the_client_gets_a_403_naming_why() -> None:
    rig = Rig()
    request = rig.request(PLAIN_BODY)
    verdict: Slot | Reply | None = request.slot
    while isinstance(verdict, Slot):
        verdict = await settle(request, zai("1113", 429), now=rig.clock())
    assert isinstance(verdict, Reply) and verdict.status == 403
    body = json.loads(verdict.body)
    assert body["error"]["type"] == "permission_error"
    assert body["error"]["message"] == (
        "chaos-mode: every model a heavy request may use is out of rotation "
        "(a, b, c: no balance or model not in plan (1113))"
    )
    assert "retry-after" not in dict(verdict.headers)
    assert request.rejected_status == 403 and request.rejected is not None
    request.finish("rejected")
    assert rig.pool.in_flight() == 0
    # The next request is not sent to z.ai at all: our 403 at once.
    later = RoutedRequest(
        parse_message(PLAIN_BODY, limit=1 << 20),
        "heavy",
        pool=rig.pool,
        stats=rig.stats,
        later=lambda *_: None,
    )
    assert rig.pool.admit_now(later.ticket()) is None
    reply = reject(later, None, now=rig.clock())
    assert reply.status == 403 and b"out of rotation" in reply.body


async def test_an_expired_plan_is_our_403_naming_it_not_z_ai_s_429() -> None:
    rig = Rig()
    request = rig.request(PLAIN_BODY)
    verdict = await settle(request, zai("1309", 429), now=rig.clock())
    assert isinstance(verdict, Reply) and verdict.status == 403
    message = json.loads(verdict.body)["error"]["message"]
    assert message == "chaos-mode: z.ai refuses every request: plan expired (1309)"
    request.finish("rejected")
    assert rig.pool.in_flight() == 0


async def test_the_openai_door_s_403_is_shaped_like_openai_s() -> None:
    rig = Rig()
    body = json.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}).encode()
    request = RoutedRequest(
        parse_chat(body, limit=1 << 20), "heavy", pool=rig.pool, stats=rig.stats, later=lambda *_: None
    )
    slot = rig.pool.admit_now(request.ticket())
    assert slot is not None and request.hold(slot)
    verdict = await settle(request, zai("1309", 429), now=rig.clock())
    assert isinstance(verdict, Reply) and verdict.status == 403
    error = json.loads(verdict.body)["error"]
    assert error["type"] == "permission_error" and error["message"].startswith("chaos-mode: z.ai refuses")
    request.finish("rejected")
