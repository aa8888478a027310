"""The fair wait queue, alone and through ChaosPool.admit, on a real asyncio loop."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from chaos_mode.config.schema import ModelRouting, parse_config
from chaos_mode.routing import pool_status
from chaos_mode.routing.pool import ChaosPool, Slot, Ticket
from chaos_mode.routing.pool_status import served
from chaos_mode.routing.wait_queue import WaitQueue
from chaos_mode.zai.errors import UpstreamError, classify_error
from support.design_catalog import FIXED_LIMITS
from support.fakes import FakeClock

SOLO = {"solo": {"tier": "HEAVY", "maxConcurrency": 1}}
HEAVY_AND_LIGHT = {"h": {"tier": "HEAVY", "maxConcurrency": 1}, "l": {"tier": "LIGHT", "maxConcurrency": 1}}


def routing(models: dict[str, Any], **block: Any) -> ModelRouting:
    return parse_config({"modelRouting": {"models": models, **FIXED_LIMITS, **block}})


def busy(code: str = "1302") -> UpstreamError:
    body = json.dumps({"error": {"code": code, "message": "busy"}})
    error = classify_error(429, body, now=time.time())
    assert error is not None
    return error


MakePool = Callable[..., ChaosPool]


@pytest.fixture
def make_pool() -> Iterator[MakePool]:
    """Pools made here must end the test with nothing held and nobody waiting."""
    made: list[ChaosPool] = []

    def make(config: ModelRouting, clock: Callable[[], float] | None = None) -> ChaosPool:
        pool = ChaosPool(config, clock=clock or FakeClock())
        made.append(pool)
        return pool

    yield make
    for pool in made:
        assert pool.in_flight() == 0
        assert pool.first_in_line()[0] == 0


async def settle() -> None:
    """Let every ready task run until it blocks again."""
    for _ in range(5):
        await asyncio.sleep(0)


async def test_a_free_slot_is_taken_at_once(make_pool: MakePool) -> None:
    pool = make_pool(routing(SOLO))
    selection = await pool.admit(Ticket("heavy"))
    assert selection == Slot("solo", "least-loaded")
    assert pool.in_flight("solo") == 1
    queue = served(pool_status.status(pool))["queue"]
    assert (queue["admitted"], queue["rejected"], queue["waiting"], queue["avgWaitMs"]) == (1, 0, 0, 0.0)
    assert selection is not None and pool.release(selection)


async def test_waiters_are_served_in_arrival_order(make_pool: MakePool) -> None:
    clock = FakeClock()
    pool = make_pool(routing(SOLO), clock)
    holder = await pool.admit(Ticket("heavy"))
    assert holder is not None
    tasks = []
    for _ in range(3):
        tasks.append(asyncio.create_task(pool.admit(Ticket("heavy"))))
        await settle()
        clock.advance(1.0)
    assert pool.first_in_line()[0] == 3
    status = served(pool_status.status(pool))["queue"]
    assert status["waitingByTier"] == {"heavy": 3, "medium": 0, "light": 0}
    assert status["longestWait"] == 3.0
    order = []
    async with asyncio.timeout(2):
        pending = set(tasks)
        while pending:
            assert pool.release(holder)
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            assert len(done) == 1
            task = done.pop()
            served_now = task.result()
            assert served_now == Slot("solo", "least-loaded")
            assert served_now is not None
            holder = served_now
            order.append(tasks.index(task))
            assert pool.in_flight("solo") == 1
    assert order == [0, 1, 2]
    queue = served(pool_status.status(pool))["queue"]
    assert queue["admitted"] == 4
    assert queue["avgWaitMs"] == 1000 * (3 + 2 + 1) / 4  # waited 3, 2, 1 s on the fake clock; the first 0
    assert pool.release(holder)


async def test_no_head_of_line_blocking(make_pool: MakePool) -> None:
    pool = make_pool(routing(HEAVY_AND_LIGHT))
    heavy = await pool.admit(Ticket("heavy"))
    assert heavy == Slot("h", "least-loaded")
    heavy_waiter = asyncio.create_task(pool.admit(Ticket("heavy")))
    await settle()
    assert pool.first_in_line()[0] == 1
    light = asyncio.create_task(pool.admit(Ticket("light")))
    await asyncio.sleep(0)  # one step: it never waits for a release
    assert light.done()
    light_slot = light.result()
    assert light_slot == Slot("l", "least-loaded")
    assert not heavy_waiter.done()
    assert pool.first_in_line()[0] == 1
    assert light_slot is not None and pool.release(light_slot)
    assert heavy is not None and pool.release(heavy)
    async with asyncio.timeout(1):
        heavy = await heavy_waiter
        assert heavy == Slot("h", "least-loaded")
    assert pool.release(heavy)


async def test_a_waiter_passed_over_keeps_its_place(make_pool: MakePool) -> None:
    pool = make_pool(routing(HEAVY_AND_LIGHT))
    held_h = pool.try_acquire(Ticket("heavy"))
    held_l = pool.try_acquire(Ticket("light"))
    assert held_h is not None and held_l is not None
    heavy = asyncio.create_task(pool.admit(Ticket("heavy")))
    await settle()
    light = asyncio.create_task(pool.admit(Ticket("light")))
    await settle()
    assert pool.release(held_l)  # only the light waiter can use it
    await settle()
    assert light.done() and light.result() == Slot("l", "least-loaded")
    assert not heavy.done()
    assert pool.release(held_h)  # the heavy waiter, oldest, goes first even though the light one could use h
    await settle()
    assert heavy.done() and heavy.result() == Slot("h", "least-loaded")
    for task in (heavy, light):
        slot = task.result()
        assert slot is not None and pool.release(slot)


async def test_a_timeout_returns_none_and_holds_nothing(make_pool: MakePool) -> None:
    pool = make_pool(routing(SOLO, queue={"timeoutSeconds": 0.01}))
    holder = await pool.admit(Ticket("heavy"))
    assert holder is not None
    async with asyncio.timeout(2):
        assert await pool.admit(Ticket("heavy")) is None  # the config's timeout
        assert await pool.admit(Ticket("heavy"), timeout=0) is None  # an explicit one
    queue = served(pool_status.status(pool))["queue"]
    assert (queue["timeouts"], queue["rejected"], queue["admitted"], queue["waiting"]) == (2, 2, 1, 0)
    assert pool.in_flight() == 1
    assert pool.release(holder)


async def test_a_cancelled_waiter_holds_nothing_and_the_queue_goes_on(make_pool: MakePool) -> None:
    pool = make_pool(routing(SOLO))
    holder = await pool.admit(Ticket("heavy"))
    assert holder is not None
    first = asyncio.create_task(pool.admit(Ticket("heavy")))
    second = asyncio.create_task(pool.admit(Ticket("heavy")))
    await settle()
    assert pool.first_in_line()[0] == 2
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    assert pool.first_in_line()[0] == 1
    assert pool.in_flight() == 1
    assert pool.release(holder)
    async with asyncio.timeout(1):
        holder = await second
        assert holder == Slot("solo", "least-loaded")
    assert pool.in_flight() == 1
    assert pool.release(holder)


async def test_a_slot_granted_to_a_cancelled_waiter_is_given_back(make_pool: MakePool) -> None:
    pool = make_pool(routing(SOLO))
    holder = await pool.admit(Ticket("heavy"))
    assert holder is not None
    first = asyncio.create_task(pool.admit(Ticket("heavy")))
    second = asyncio.create_task(pool.admit(Ticket("heavy")))
    await settle()
    assert pool.release(holder)  # handed to the first waiter at once...
    assert pool.in_flight() == 1
    first.cancel()  # ...which is cancelled before it could run again
    with pytest.raises(asyncio.CancelledError):
        await first
    # The slot went back and on to the next waiter.
    async with asyncio.timeout(1):
        holder = await second
        assert holder == Slot("solo", "least-loaded")
    assert pool.in_flight() == 1
    assert pool.release(holder)
    assert pool.in_flight() == 0
    assert pool.spurious_releases == 0  # the cancelled waiter's slot went back exactly once


async def test_a_slot_granted_as_the_timeout_fires_is_given_back() -> None:
    clock = FakeClock()
    released: list[str] = []
    queue: WaitQueue[str, str] = WaitQueue(
        attempt=lambda ticket: None, release=released.append, group=lambda ticket: ticket, clock=clock
    )
    task = asyncio.create_task(queue.wait("t", timeout=0))
    await asyncio.sleep(0)  # enqueued; the timeout fires on the next loop step
    waiter = queue.waiting()[0]
    waiter.future.set_result("slot")  # granted in the same step
    result = await task
    # Never lost, never twice: either the waiter got the slot or the queue gave it back.
    assert (result == "slot") != (released == ["slot"])
    assert queue.timeouts == (1 if result is None else 0)
    assert len(queue) == 0


async def test_queue_disabled_answers_at_once(make_pool: MakePool) -> None:
    pool = make_pool(routing(SOLO, queue={"enabled": False}))
    holder = await pool.admit(Ticket("heavy"))
    assert holder is not None
    attempt = asyncio.create_task(pool.admit(Ticket("heavy")))
    await asyncio.sleep(0)
    assert attempt.done() and attempt.result() is None
    assert served(pool_status.status(pool))["queue"]["rejected"] == 1
    assert pool.release(holder)


async def test_max_waiting_reached(make_pool: MakePool) -> None:
    pool = make_pool(routing(HEAVY_AND_LIGHT, queue={"maxWaiting": 1}))
    heavy = await pool.admit(Ticket("heavy"))
    assert heavy is not None
    waiter = asyncio.create_task(pool.admit(Ticket("heavy")))
    await settle()
    extra = asyncio.create_task(pool.admit(Ticket("heavy")))
    await asyncio.sleep(0)
    assert extra.done() and extra.result() is None  # no place left to wait
    # With the queue full, a request that can be served now still is.
    light = asyncio.create_task(pool.admit(Ticket("light")))
    await asyncio.sleep(0)
    light_slot = light.result() if light.done() else None
    assert light_slot == Slot("l", "least-loaded")
    assert light_slot is not None and pool.release(light_slot)
    assert pool.release(heavy)
    async with asyncio.timeout(1):
        heavy = await waiter
        assert heavy == Slot("h", "least-loaded")
    assert pool.release(heavy)


async def test_nothing_waits_for_what_cannot_come(make_pool: MakePool) -> None:
    pool = make_pool(routing(HEAVY_AND_LIGHT))
    heavy = await pool.admit(Ticket("heavy"))
    assert heavy is not None
    pool.error("l", busy("1113"))
    attempt = asyncio.create_task(pool.admit(Ticket("heavy", attempted=frozenset({"h"}))))
    await asyncio.sleep(0)
    assert attempt.done() and attempt.result() is None
    pool.error("h", busy("1308"))  # account-wide pause
    paused = asyncio.create_task(pool.admit(Ticket("light")))
    await asyncio.sleep(0)
    assert paused.done() and paused.result() is None
    assert served(pool_status.status(pool))["queue"]["rejected"] == 2
    assert pool.release(heavy)


async def test_a_waiter_that_can_no_longer_be_served_is_told_so_at_the_next_dispatch(
    make_pool: MakePool,
) -> None:
    """Every model its tier may use went out for good while it waited (a 1113 storm): it waited out its
    whole timeout, then got what it could have had at once (the caller's 403)."""
    pool = make_pool(routing({"h": {"tier": "HEAVY", "maxConcurrency": 1}}))
    holder = await pool.admit(Ticket("heavy"))
    assert holder is not None
    waiting = asyncio.create_task(pool.admit(Ticket("heavy"), timeout=30))
    await settle()
    assert not waiting.done()
    pool.error("h", busy("1113"))  # out of rotation for good
    assert pool.release(holder)  # a dispatch: the waiter tries, and is told
    await settle()
    assert waiting.done() and waiting.result() is None
    assert served(pool_status.status(pool))["queue"]["rejected"] == 1


async def test_restore_wakes_a_waiter(make_pool: MakePool) -> None:
    pool = make_pool(routing(HEAVY_AND_LIGHT))
    heavy = await pool.admit(Ticket("heavy"))
    assert heavy is not None
    pool.error("l", busy("1311"))
    waiter = asyncio.create_task(pool.admit(Ticket("light")))
    await settle()
    assert not waiter.done()
    pool.restore("l")
    async with asyncio.timeout(1):
        light = await waiter
        assert light == Slot("l", "least-loaded")
    assert pool.release(light)
    assert pool.release(heavy)


async def test_more_capacity_from_reconfigure_wakes_waiters(make_pool: MakePool) -> None:
    pool = make_pool(routing(SOLO))
    first = await pool.admit(Ticket("heavy"))
    assert first is not None
    waiters = [asyncio.create_task(pool.admit(Ticket("heavy"))) for _ in range(2)]
    await settle()
    pool.reconfigure(routing({"solo": {"tier": "HEAVY", "maxConcurrency": 3}}))
    async with asyncio.timeout(1):
        woken = await asyncio.gather(*waiters)
        assert woken == [Slot("solo", "least-loaded")] * 2
    assert pool.in_flight() == 3
    for slot in (first, *woken):
        assert slot is not None and pool.release(slot)


COOLING = {"solo": {"tier": "HEAVY", "maxConcurrency": 2}}
SHORT_COOLDOWN = {"defaultSeconds": 0.1, "maxSeconds": 1, "trialWhenIdle": False}


async def test_a_cooldown_ending_wakes_a_waiter(make_pool: MakePool) -> None:
    pool = make_pool(routing(COOLING, cooldown=SHORT_COOLDOWN), time.monotonic)
    first = await pool.admit(Ticket("heavy"))
    assert first is not None
    pool.error("solo", busy())  # a free slot, but cooling for 0.1 s
    started = time.monotonic()
    async with asyncio.timeout(1):
        selection = await pool.admit(Ticket("heavy"), timeout=1)
    assert selection == Slot("solo", "least-loaded")
    assert time.monotonic() - started >= 0.09
    assert selection is not None and pool.release(selection)
    assert pool.release(first)


async def test_a_cooldown_reported_while_waiting_wakes_the_waiter_when_it_ends(make_pool: MakePool) -> None:
    # The usual order in the addon: a 429 comes back, the pool hears of it, then the slot is released.
    pool = make_pool(routing(SOLO, cooldown=SHORT_COOLDOWN), time.monotonic)
    first = await pool.admit(Ticket("heavy"))
    assert first is not None
    waiter = asyncio.create_task(pool.admit(Ticket("heavy"), timeout=0.4))
    await settle()
    pool.error("solo", busy())
    assert pool.release(first)  # freed while cooling: the waiter cannot have it yet
    assert not waiter.done()
    selection = await waiter
    assert selection == Slot("solo", "least-loaded")  # woken when the 0.1 s cooldown ended
    assert selection is not None and pool.release(selection)


# -- the queue alone ------------------------------------------------------------------------------


async def test_a_group_that_found_nothing_is_not_tried_again_in_the_same_pass() -> None:
    clock = FakeClock()
    free = {"a": 0, "b": 0}
    attempts: list[str] = []

    def attempt(ticket: str) -> str | None:
        attempts.append(ticket)
        group = ticket[0]
        if free[group] > 0:
            free[group] -= 1
            return f"slot-{group}"
        return None

    queue: WaitQueue[str, str] = WaitQueue(
        attempt=attempt, release=lambda slot: None, group=lambda ticket: ticket[0], clock=clock
    )
    tasks = [asyncio.create_task(queue.wait(t, timeout=10)) for t in ("a1", "a2", "b1", "a3", "b2")]
    await settle()
    assert len(queue) == 5
    attempts.clear()
    free["a"] = 1
    clock.advance(2.0)
    assert queue.dispatch() == 1
    # a1 served; a2 found nothing, so a3 is not tried; b1 found nothing, so b2 is not tried.
    assert attempts == ["a1", "a2", "b1"]
    await settle()
    assert [t.done() for t in tasks] == [True, False, False, False, False]
    assert tasks[0].result() == "slot-a"
    assert (queue.served, queue.total_wait) == (1, 2.0)
    assert len(queue) == 4
    clock.advance(1.0)
    assert queue.oldest_wait() == 3.0  # a2, enqueued first of those left
    free["b"] = 5
    attempts.clear()
    assert queue.dispatch() == 2
    assert attempts == ["a2", "b1", "b2"]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    assert len(queue) == 0
    assert queue.oldest_wait() == 0.0


async def test_a_waiter_whose_attempt_raises_gets_the_error_and_the_others_are_served() -> None:
    """The queue is dispatched from another request's release: a waiter whose own attempt raises once
    something is free (a request whose cost could not be computed) is answered with the error, and it
    stops neither that release nor the waiters behind it."""
    free = 0

    def attempt(ticket: str) -> str | None:
        nonlocal free
        if not free:
            return None
        if ticket == "bad":
            raise OverflowError("int too large to convert to float")
        free -= 1
        return f"slot-{ticket}"

    queue: WaitQueue[str, str] = WaitQueue(
        attempt=attempt, release=lambda slot: None, group=lambda ticket: ticket, clock=FakeClock()
    )
    tasks = {t: asyncio.create_task(queue.wait(t, timeout=10)) for t in ("bad", "a", "b")}
    await settle()
    assert len(queue) == 3
    free = 2
    assert queue.dispatch() == 2  # as a release does: it goes on past the waiter that raised
    await settle()
    with pytest.raises(OverflowError):
        tasks["bad"].result()
    assert (tasks["a"].result(), tasks["b"].result()) == ("slot-a", "slot-b")
    assert len(queue) == 0


async def serve_all(pool: ChaosPool, tasks: list[asyncio.Task[Slot | None]], holder: Slot) -> list[int]:
    """Release the slot held (`holder`, then each waiter's in turn) once per waiter and return the order
    (indices of `tasks`) they were served in."""
    order = []
    async with asyncio.timeout(2):
        pending = set(tasks)
        while pending:
            assert pool.release(holder)
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            assert len(done) == 1
            task = done.pop()
            slot = task.result()
            assert slot is not None
            holder = slot
            order.append(tasks.index(task))
    assert pool.release(holder)
    return order


async def test_a_failover_keeps_its_first_arrival_in_the_queue(make_pool: MakePool) -> None:
    clock = FakeClock()
    pool = make_pool(routing(SOLO), clock)
    holder = await pool.admit(Ticket("heavy"))
    assert holder is not None
    start = clock()
    tasks = []
    for _ in range(2):
        tasks.append(asyncio.create_task(pool.admit(Ticket("heavy"))))
        await settle()
        clock.advance(1.0)
    # A request that came at 0.5 s, was refused elsewhere, and waits again now at 2 s: before the one of 1 s.
    tasks.append(asyncio.create_task(pool.admit(Ticket("heavy"), since=start + 0.5)))
    await settle()
    assert served(pool_status.status(pool))["queue"]["longestWait"] == 2.0
    assert await serve_all(pool, tasks, holder) == [0, 2, 1]


async def test_the_conversation_served_least_goes_first(make_pool: MakePool) -> None:
    clock = FakeClock()
    pool = make_pool(routing(SOLO), clock)
    first = await pool.admit(Ticket("heavy", session="busy"))  # "busy" has had one request already
    assert first is not None
    tasks = []
    for session in ("busy", None, "late", "late"):
        tasks.append(asyncio.create_task(pool.admit(Ticket("heavy", session=session))))
        await settle()
        clock.advance(1.0)
    # Both of "late" (0 served when they joined) first, then "busy" (1) and the one without a conversation
    # (the average conversation's: 1) in the order they came.
    assert await serve_all(pool, tasks, first) == [2, 3, 0, 1]


async def test_a_failover_does_not_count_against_its_conversation(make_pool: MakePool) -> None:
    clock = FakeClock()
    pool = make_pool(routing(SOLO), clock)
    hit = await pool.admit(Ticket("heavy", session="hit"))
    assert hit is not None and pool.release(hit)
    # "hit"'s request was refused upstream and fails over: taking a slot again does not count twice.
    again = await pool.admit(Ticket("heavy", session="hit", counts=False), since=clock() - 3.0)
    assert again is not None
    tasks = []
    for session in ("other", "hit"):
        tasks.append(asyncio.create_task(pool.admit(Ticket("heavy", session=session))))
        await settle()
        clock.advance(1.0)
    assert await serve_all(pool, tasks, again) == [0, 1]  # both "other" (0) and "hit" (1): by level


async def test_a_conversation_set_back_goes_as_far_ahead_as_it_fell_behind(make_pool: MakePool) -> None:
    """A request served only after a refusal lost time: its conversation's next request goes in line as if
    it had come that much earlier, among the conversations served as much as it (never before one served
    less), once."""
    clock = FakeClock()
    pool = make_pool(routing(SOLO), clock)
    for session in ("hit", "ahead", "behind"):
        slot = await pool.admit(Ticket("heavy", session=session))
        assert slot is not None and pool.release(slot)
    pool.shares.fell_behind("hit", 2.5)
    pool.shares.fell_behind(None, 5.0)  # no conversation: nothing to make up
    holder = await pool.admit(Ticket("heavy"))
    assert holder is not None
    tasks = []
    for session in ("ahead", "behind", "hit", "fresh", None):
        tasks.append(asyncio.create_task(pool.admit(Ticket("heavy", session=session))))
        await settle()
        clock.advance(2.0)
    # "fresh" (served none) first; "hit" came at 4 s as if at 1.5 s: after "ahead" (0 s), before "behind"
    # (2 s); the request without a conversation (the average's level, 1) in the order it came
    assert await serve_all(pool, tasks, holder) == [3, 0, 2, 1, 4]
