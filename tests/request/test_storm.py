"""A refusal storm waits: a request refused for capacity by every model it may try (or by as many in a row
as `streams.maxFailovers` allows) goes back into the fair queue with its place until a slot frees, never
our 429 before the queue's timeout (from its first arrival); a refusal of its own still ends it, a model
out of rotation stays out for it. The fake clock never moves on its own: nothing here sleeps."""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

from hypothesis import event, given, settings
from hypothesis import strategies as st

from chaos_mode.config.schema import parse_config
from chaos_mode.doors.messages import parse_message
from chaos_mode.learning.limits import Probe
from chaos_mode.observe.stats import Stats
from chaos_mode.request.failover import Answer, settle
from chaos_mode.request.rate_limited import Reply
from chaos_mode.request.refusals import Refusals
from chaos_mode.request.routed import RoutedRequest
from chaos_mode.routing.pool import ChaosPool, Slot
from support.fakes import FakeClock

TIMEOUT = 60.0
PLAIN = json.dumps({"model": "claude-opus-4-5", "max_tokens": 64, "messages": []}).encode()
FILTERED = json.dumps(
    {"model": "claude-opus-4-5", "max_tokens": 64, "system": "You run on Hermes Agent.", "messages": []}
).encode()


def zai(code: str, status: int = 429) -> Answer:
    body = {"type": "error", "error": {"type": "rate_limit_error", "code": code, "message": f"[{code}]"}}
    return Answer(status, [], json.dumps(body).encode())


BUSY = zai("1302")


class CountingPool(ChaosPool):
    """The real pool, counting slots granted and given back."""

    granted = 0
    returned = 0

    def _take(self, model: str, reason: str, probe: Probe | None, *, awaits_verdict: bool) -> Slot | None:
        slot = super()._take(model, reason, probe, awaits_verdict=awaits_verdict)
        self.granted += slot is not None
        return slot

    def release(self, slot: Slot) -> bool:
        self.returned += 1
        return super().release(slot)


class Rig:
    """Heavy models `a`, `b`, `c` of `limit` slots each, learned limits on, the fair queue on."""

    def __init__(
        self, *, max_failovers: int = 3, limit: int = 2, models: str = "abc", learning: bool = True
    ) -> None:
        routing = {
            "models": {name: {"tier": "HEAVY", "maxConcurrency": limit} for name in models},
            "chaosMode": {"enabled": True},
            "learning": {"enabled": learning},
            "queue": {"timeoutSeconds": TIMEOUT},
            "streams": {"maxFailovers": max_failovers},
        }
        config = parse_config({"modelRouting": routing})
        self.clock = FakeClock()
        self.pool = CountingPool(config, clock=self.clock, wall_clock=self.clock, rng=random.Random(3))
        self.stats = Stats(config, self.clock)
        self.refusals = Refusals(self.clock)

    def request(self, body: bytes = PLAIN, model: str | None = None) -> RoutedRequest:
        """A request holding a slot (on `model`, if given)."""
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
        slot = self.pool.acquire(model) if model else self.pool.admit_now(request.ticket())
        assert slot is not None and request.hold(slot)
        return request

    def fill(self) -> list[RoutedRequest]:
        """Requests answered cleanly on every slot left, still streaming."""
        running = []
        for model in "abc":
            while self.pool.limits.enabled and (slot := self.pool.acquire(model)) is not None:
                request = RoutedRequest(
                    parse_message(PLAIN, limit=1 << 20),
                    "heavy",
                    pool=self.pool,
                    stats=self.stats,
                    later=lambda *_: None,
                    clock=self.clock,
                    refusals=self.refusals,
                )
                assert request.hold(slot)
                request.answered()
                running.append(request)
        return running


async def ticks(n: int = 20) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def refused_by_all(rig: Rig, request: RoutedRequest, answer: Answer = BUSY) -> asyncio.Task[Any]:
    """Refuse each attempt of `request` with `answer` until it is no longer given a slot at once: the
    task of its last `settle`, still running (waiting) or done."""
    while True:
        task = asyncio.ensure_future(settle(request, answer, now=rig.clock()))
        await ticks()
        if not task.done() or not isinstance(task.result(), Slot):
            return task


async def test_refused_for_capacity_by_every_model_it_waits_and_is_served_when_a_slot_frees() -> None:
    rig = Rig()
    others = [rig.request(model=m) for m in "abc"]  # one slot of each model serving others
    request = rig.request()
    rig.clock.advance(5.0)
    waiting = await refused_by_all(rig, request)
    assert request.tried == sorted(request.tried, key=request.tried.index) and len(set(request.tried)) == 3
    assert not waiting.done() and request.rejected is None  # it waits: no 429
    assert rig.pool.in_flight() == 3  # the others' slots only: a waiting request holds none
    rig.clock.advance(TIMEOUT - 10.0)  # 55 s after it came: still within the queue's timeout
    freed = others.pop(0)
    freed.finish("ok")
    verdict = await asyncio.wait_for(waiting, 1)
    assert isinstance(verdict, Slot) and request.slot is verdict
    assert verdict.probe is None  # a slot within the learned limits
    assert request.rejected is None and request.failovers == 3
    request.answered()  # served: its conversation is set back by the time it lost
    for each in (request, *others):
        each.finish("ok")
    assert rig.pool.in_flight() == 0 and rig.pool.granted == rig.pool.returned
    assert rig.pool.spurious_releases == 0


async def test_refused_for_capacity_while_the_others_are_full_it_waits_in_line_for_them() -> None:
    rig = Rig(models="ab", limit=1)
    holder = rig.request(model="b")
    request = rig.request(model="a")
    waiting = asyncio.ensure_future(settle(request, BUSY, now=rig.clock()))
    await ticks()
    assert (
        not waiting.done() and rig.pool.first_in_line()[0] == 1
    )  # in the fair queue, for `b` (`a` refused it)
    holder.finish("ok")
    verdict = await asyncio.wait_for(waiting, 1)
    assert isinstance(verdict, Slot) and verdict.model == "b"
    request.finish("ok")
    assert rig.pool.in_flight() == 0


async def test_max_failovers_bounds_attempts_in_a_row_not_the_requests_life() -> None:
    rig = Rig(max_failovers=1)
    others = [rig.request(model="a")]
    request = rig.request(model="a")
    second = await settle(request, BUSY, now=rig.clock())
    assert isinstance(second, Slot)  # one failover at once
    waiting = asyncio.ensure_future(settle(request, BUSY, now=rig.clock()))
    await ticks()
    # Its burst is spent: it waits for a slot to free, though a model it has not tried has room.
    assert not waiting.done() and rig.pool.in_flight() == 1
    others.pop().finish("ok")
    third = await asyncio.wait_for(waiting, 1)
    assert isinstance(third, Slot)
    fourth = await settle(request, BUSY, now=rig.clock())  # a new burst: a failover at once again
    assert isinstance(fourth, Slot) and request.failovers == 3 > rig.pool.config.streams.max_failovers
    assert request.rejected is None
    request.finish("ok")
    assert rig.pool.in_flight() == 0 and rig.pool.spurious_releases == 0


async def test_the_queue_timeout_counts_from_the_first_arrival() -> None:
    rig = Rig(models="ab", limit=1)
    holder = rig.request(model="b")
    request = rig.request(model="a")
    rig.clock.advance(TIMEOUT)
    # `a` refused it, `b` is full, and the queue's timeout from its first arrival has passed: our 429 now.
    verdict = await asyncio.wait_for(settle(request, BUSY, now=rig.clock()), 1)
    assert isinstance(verdict, Reply) and verdict.status == 429
    holder.finish("ok")
    request.finish("rejected")
    assert rig.pool.in_flight() == 0


async def test_refused_by_every_model_with_nothing_in_flight_it_waits_for_a_cooldown_not_a_trial() -> None:
    """Learning off, each 1302 cools its model down; nothing in flight, nothing will free. Tried at once, a
    cooling model (the trial of an idle pool) is refused as fast as z.ai answers: it waits for the first
    cooldown's end instead, and once its time from its first arrival is up it gets our 429 at once."""
    rig = Rig(learning=False)
    request = rig.request()
    while len(request.tried) < 20:
        task = asyncio.ensure_future(settle(request, BUSY, now=rig.clock()))
        await ticks()
        if not task.done() or not isinstance(task.result(), Slot):
            break
    assert sorted(request.tried) == ["a", "b", "c"]  # each model once, then it waits
    assert not task.done() and rig.pool.in_flight() == 0
    request.finish("aborted")  # its client left: it waits no more
    task.cancel()
    await ticks()
    rig.clock.advance(10.0)  # the cooldowns are over
    late = rig.request()
    rig.clock.advance(TIMEOUT)  # its queue's timeout has passed when its last model refuses it
    verdict = None
    for _ in range(3):
        verdict = await asyncio.wait_for(settle(late, BUSY, now=rig.clock()), 1)
        if not isinstance(verdict, Slot):
            break
    assert isinstance(verdict, Reply) and verdict.status == 429
    late.finish("rejected")
    assert rig.pool.in_flight() == 0 and rig.pool.granted == rig.pool.returned


async def test_a_refusal_of_its_own_still_ends_it_after_a_storm() -> None:
    rig = Rig()
    others = rig.fill()
    others.pop(0).finish("ok")  # the filtered request comes on the slot it frees
    request = rig.request(FILTERED)
    first = request.model
    verdict = await settle(request, zai("1305", 529), now=rig.clock())  # undecided: it fails over
    assert isinstance(verdict, Slot) and verdict.model != first
    assert await settle(request, zai("1305", 529), now=rig.clock()) is None  # its own: z.ai's answer
    assert request.own_refusal is not None and request.rejected is None
    request.finish("error")
    for each in others:
        each.finish("ok")
    assert rig.pool.in_flight() == 0


async def test_a_model_out_of_rotation_stays_out_for_it_after_it_waited() -> None:
    rig = Rig(limit=1)
    holder = rig.request(model="c")
    request = rig.request(model="a")
    second = await settle(request, BUSY, now=rig.clock())
    assert isinstance(second, Slot) and second.model == "b"
    waiting = asyncio.ensure_future(settle(request, zai("1113"), now=rig.clock()))
    await ticks()
    assert not waiting.done()  # b is out, a refused it for capacity: it waits for c, keeping its place
    holder.finish("ok")
    third = await asyncio.wait_for(waiting, 1)
    assert isinstance(third, Slot) and third.model == "c"
    fourth = await settle(request, BUSY, now=rig.clock())  # refused by every model it may try: it waits
    # Nothing held here would free: it goes on at once, `a` and `c` eligible again, never `b`.
    assert isinstance(fourth, Slot) and fourth.model in {"a", "c"}
    assert request.refused == {"b"} and request.rejected is None
    request.finish("ok")
    assert rig.pool.in_flight() == 0 and rig.pool.spurious_releases == 0


# -- whatever the order: slots back exactly once, no 429 before the timeout ------------------------------

REFUSE = st.tuples(st.just("refuse"), st.integers(0, 2), st.sampled_from(["1302"] * 5 + ["1113"]))
STEPS = st.lists(
    st.one_of(
        st.just(("arrive",)),
        REFUSE,
        REFUSE,
        REFUSE,
        st.tuples(st.just("answer"), st.integers(0, 2)),
        st.tuples(st.just("leave"), st.integers(0, 2)),  # the client goes: the flow ends
        st.tuples(st.just("advance"), st.sampled_from([0.5, 5.0, 30.0])),
    ),
    min_size=10,
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(steps=STEPS, max_failovers=st.integers(0, 3), limit=st.integers(1, 2))
def test_a_storm_gives_every_slot_back_once_and_no_429_before_the_timeout(
    steps: list[tuple[Any, ...]], max_failovers: int, limit: int
) -> None:
    asyncio.run(_storm(steps, max_failovers, limit))


async def _storm(steps: list[tuple[Any, ...]], max_failovers: int, limit: int) -> None:
    rig = Rig(max_failovers=max_failovers, limit=limit)
    pool = rig.pool
    requests: list[RoutedRequest] = []
    tasks: dict[int, asyncio.Task[Any]] = {}  # a request's admission or `settle` under way

    async def admitted(request: RoutedRequest) -> Slot | None:
        slot = await pool.admit(request.ticket(), since=request.arrived)
        return slot if slot is not None and request.hold(slot) else None

    def check(index: int) -> None:
        """A finished task: our 429 for a request refused for capacity only once the queue's timeout from
        its first arrival had passed (a model out of rotation may leave nothing to wait for)."""
        task = tasks.pop(index)
        request = requests[index]
        result = task.result()
        refusals = {attempt.refusal for attempt in request.attempts}
        storm = "1302" in refusals and refusals <= {"1302", None} and pool.dead_end("heavy") is None
        if isinstance(result, Reply) or (result is None and request.slot is None and not request.finished):
            # Refused for capacity only, only the queue's timeout from its first arrival ends it.
            assert not storm or rig.clock() - (request.arrived or 0.0) >= TIMEOUT, request.mirror()
            request.finish("rejected")

    for step in steps:
        match step:
            case ("arrive",):
                request = RoutedRequest(
                    parse_message(PLAIN, limit=1 << 20),
                    "heavy",
                    pool=pool,
                    stats=rig.stats,
                    later=lambda *_: None,
                    clock=rig.clock,
                    refusals=rig.refusals,
                )
                request.arrived = rig.clock()
                requests.append(request)
                tasks[len(requests) - 1] = asyncio.ensure_future(admitted(request))
            case ("refuse", i, code) if i < len(requests) and i not in tasks and requests[i].slot:
                request = requests[i]
                request.sent = True
                tasks[i] = asyncio.ensure_future(settle(request, zai(code), now=rig.clock()))
            case ("answer", i) if i < len(requests) and i not in tasks and requests[i].slot:
                requests[i].answered()
                requests[i].finish("ok")
            case ("leave", i) if i < len(requests):
                if i in tasks:
                    tasks.pop(i).cancel()
                requests[i].finish("aborted")
            case ("advance", seconds):
                rig.clock.advance(seconds)
        await ticks()
        for index in [i for i, task in tasks.items() if task.done() and not task.cancelled()]:
            check(index)
        if any(requests[i].attempts and not task.done() for i, task in tasks.items()):
            event("a refused request waits")
        if any(request.failovers > max_failovers for request in requests):
            event("more failovers than maxFailovers in a row")
        held = sum(request.slot is not None for request in requests)
        assert pool.in_flight() == held  # no slot is held but by a request that holds it
    for request in requests:
        request.finish("ok")
    await ticks()
    for task in tasks.values():
        task.cancel()
    await asyncio.gather(*tasks.values(), return_exceptions=True)
    assert pool.in_flight() == 0 and pool.first_in_line()[0] == 0
    assert pool.granted == pool.returned and pool.spurious_releases == 0
