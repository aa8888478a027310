"""The Redis store of the fleet's slots against a real redis-server: the scripts, two pools sharing one
account, an outage and the reconciliation after it, and an invariant under any sequence (hypothesis)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chaos_mode.config.schema import parse_config
from chaos_mode.fleet.protocol import PROBE_MEMORY_MS, notice_tail, parse_notice
from chaos_mode.fleet.redis_store import RedisFleet, fleet_status
from chaos_mode.fleet.slots import Notice, SharedSlots, Tally, pool_slots
from chaos_mode.fleet.state_url import parse_state_url
from chaos_mode.routing.pool import ChaosPool, Slot, Ticket
from chaos_mode.routing.slots import ProbeClaim, Seen
from chaos_mode.zai.catalog import ACCOUNT
from chaos_mode.zai.errors import classify_error
from chaos_mode_tools.devtools.certs import make_certs
from chaos_mode_tools.devtools.processes import RedisProcess
from support.design_catalog import DESIGN_MODELS
from support.fakes import FakeClock
from support.learned import as_on_the_benchmark
from support.pool_rig import error, routing
from support.redis_support import redis_process, require_redis_server

CONFIG = parse_config({"modelRouting": {"models": DESIGN_MODELS}})  # the design's (early-2026) catalog
MODELS = list(CONFIG.models)


@pytest.fixture(scope="module")
def server() -> Iterator[RedisProcess]:
    yield from redis_process()


@pytest.fixture
async def client(server: RedisProcess) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis(port=server.port)
    await client.flushall()
    yield client
    await client.aclose()


def make_fleet(
    url: str, name: str, *, lease_seconds: float = 5.0, pool: ChaosPool | None = None
) -> RedisFleet:
    """A proxy's fleet as the addon makes it (with `pool`, that pool's store)."""
    slots = SharedSlots(name) if pool is None else pool_slots(name, pool)
    parsed = parse_state_url(url, {})
    assert parsed is not None
    models = list(pool.config.models) if pool is not None else MODELS
    return RedisFleet(parsed, slots, models=lambda: models, lease_seconds=lease_seconds, pool=pool)


async def until(condition: object, timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():  # type: ignore[operator]
            await asyncio.sleep(0.01)


async def test_the_confirm_script_keeps_both_caps_and_reaps_expired_leases(
    server: RedisProcess, client: aioredis.Redis
) -> None:
    fleet = make_fleet(server.url, "p")
    fleet._up = True
    assert await fleet.confirm("glm-4.7", "p#1", 2, 3) is not None
    assert (await fleet.confirm("glm-4.7", "p#2", 2, 3)).taken  # type: ignore[union-attr]
    refused = await fleet.confirm("glm-4.7", "p#3", 2, 3)
    assert refused is not None and (refused.taken, refused.in_flight, refused.total) == (False, 2, 2)
    assert (await fleet.confirm("glm-4.6", "p#4", 3, 3)).taken  # type: ignore[union-attr]
    full = await fleet.confirm("glm-4.6", "p#5", 3, 3)
    assert full is not None and not full.taken and full.total == 3  # the account's cap
    # a lease whose expiry passed (a dead proxy's) counts no more
    await client.zadd("chaos:slots:glm-4.7", {"p#1": 0})
    await client.zadd("chaos:account", {"p#1": 0})
    again = await fleet.confirm("glm-4.7", "p#6", 2, 3)
    assert again is not None and again.taken and (again.in_flight, again.total) == (2, 3)
    await fleet.close()


async def test_the_right_to_probe_is_taken_with_the_lease_and_only_its_holder_answers_for_it(
    server: RedisProcess, client: aioredis.Redis
) -> None:
    p, q = make_fleet(server.url, "p"), make_fleet(server.url, "q")
    p._up = q._up = True
    await client.zadd("chaos:fleet", {"p": 1, "q": 1})
    pubsub = client.pubsub()
    await pubsub.subscribe("chaos:freed")
    taken = await p.confirm("glm-4.7", "p#1", 4, 10, ProbeClaim("glm-4.7", 10.0, 1))
    assert taken is not None and taken.taken and taken.refused_probes == 1
    assert (await right(client, "glm-4.7"))["lease"] == "p#1"
    held = await q.confirm("glm-4.7", "q#1", 4, 10, ProbeClaim("glm-4.7", 10.0, 0))
    assert held is not None and not held.taken and 9.0 < held.probe_held <= 10.0
    assert (held.in_flight, held.refused_probes) == (1, 1)  # nothing taken; the fleet's count told
    assert await client.zcard("chaos:slots:glm-4.7") == 1
    again = await p.confirm("glm-4.7", "p#2", 4, 10, ProbeClaim("glm-4.7", 10.0, 1))
    assert again is not None and again.taken  # its holder's next probe (after its own wait)
    plain = await q.confirm("glm-4.7", "q#2", 4, 10)
    assert plain is not None and plain.taken  # a slot within the limit needs no right
    await q._answer_probe(ProbeClaim("glm-4.7", 0.0, 0), "q#1")  # not q's to free
    await p._answer_probe(ProbeClaim("glm-4.7", 20.0, 2), "p#1")  # nor p's older lease's
    assert (await right(client, "glm-4.7"))["lease"] == "p#2"
    await p._answer_probe(ProbeClaim("glm-4.7", 20.0, 2), "p#2")  # refused: held for the wait
    held_for = await right(client, "glm-4.7")
    assert held_for["refused"] == 2 and 19_000 < float(held_for["free_in"]) <= 20_000
    assert 0 < await client.pttl("chaos:probe:glm-4.7") - 20_000 <= PROBE_MEMORY_MS  # the count outlives it
    await client.hset("chaos:probe:glm-4.7", "free_at", 0)  # the wait over
    late = await q.confirm("glm-4.7", "q#3", 4, 10, ProbeClaim("glm-4.7", 10.0, 0))
    assert late is not None and late.taken and late.refused_probes == 2  # counted as the fleet counts
    await q._answer_probe(ProbeClaim("glm-4.7", 0.0, 0), "q#3")  # answered cleanly: freed, all told
    assert await right(client, "glm-4.7") == {}
    message = None
    for _ in range(3):  # the subscription's confirmation (read as None), then the notice
        message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=0.2) or message
    assert message is not None and parse_notice(message["data"].decode()) == Notice(
        0, "!", "q", "glm-4.7", serving={}, overdue={}
    )
    await pubsub.aclose()
    for fleet in (p, q):
        await fleet.close()


async def test_release_removes_the_lease_and_tells_the_other_proxies(
    server: RedisProcess, client: aioredis.Redis
) -> None:
    fleet = make_fleet(server.url, "p")
    fleet._up = True
    await client.zadd("chaos:fleet", {"p": 1, "q": 1})  # live proxies: this one and another
    pubsub = client.pubsub()
    await pubsub.subscribe("chaos:freed:q", "chaos:freed:p", "chaos:freed")
    await fleet.confirm("glm-4.5", "p#1", 5, 10)
    fleet.release("glm-4.5", "p#1")
    await asyncio.gather(*fleet._background)
    assert await client.zcard("chaos:slots:glm-4.5") == 0 and await client.zcard("chaos:account") == 0
    messages = []
    for _ in range(6):  # three subscriptions confirmed (read as None), then what was published, if anything
        message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=0.2)
        if message is not None:
            messages.append((message["channel"], message["data"]))
    # the lease taken and given back, numbered, on the other proxy's own channel only: a proxy does not
    # read its own notices back, and what every proxy hears (the shared channel) is not for them
    assert messages == [
        (b"chaos:freed:q", b"1 + p glm-4.5 0 0 0 - - - -"),  # the slot just taken: not served till answered
        (b"chaos:freed:q", b"2 - p glm-4.5 0 0 0 - - - -"),
    ]
    await pubsub.aclose()
    await fleet.close()


async def test_two_pools_share_the_account_and_a_slot_freed_on_one_serves_a_waiter_of_the_other(
    server: RedisProcess, client: aioredis.Redis
) -> None:
    pools = [ChaosPool(CONFIG), ChaosPool(CONFIG)]
    fleets = [make_fleet(server.url, f"p{i}", pool=pool) for i, pool in enumerate(pools)]
    for fleet in fleets:
        fleet.start()
    await until(lambda: all(f.up for f in fleets))
    held = []
    for i in range(8):  # the heavy tier's 8 slots, alternating proxies
        selection = await pools[i % 2].admit(Ticket("heavy"), timeout=1)
        assert selection is not None
        held.append((i % 2, selection))
    assert await client.zcard("chaos:account") == 8
    waiter = asyncio.ensure_future(pools[1].admit(Ticket("heavy"), timeout=5))
    await asyncio.sleep(0.05)
    assert not waiter.done()
    owner, freed = next((o, s) for o, s in held if o == 0)
    assert pools[owner].release(freed)
    selection = await asyncio.wait_for(waiter, 2)  # woken by the message, not by the 5 s timeout
    assert selection is not None and selection.model == freed.model
    status = fleet_status(fleets[1], pools[1].lost_races)
    assert status["connected"] and status["ownInFlight"] == 5
    for fleet in fleets:
        await fleet.close()
    assert await client.zcard("chaos:account") == 0  # leaving gives every lease back


def test_a_notice_goes_through_the_channel_whole() -> None:
    seen = (
        Seen("clean", 4, 20),
        Seen("stall", 5, 22, "model", 0.25),
        Seen("refused", 9, 28, "account", 3.01),
        Seen("refused", 9, 28, None, 0.0),
    )
    notice = Notice(
        0,
        "-",
        "host:12:ab",
        "glm-4.5",
        3,
        2,
        0.25,
        "host:13:cd",
        {"glm-4.5": 4, "glm-4.7": 1},
        seen,
        {"glm-4.7": 1},
    )
    assert notice_tail(notice).endswith(" glm-4.5=4,glm-4.7=1 c4:20|s5:22m~250|r9:28a~3010|r9:28~0 glm-4.7=1")
    assert parse_notice("7 - " + notice_tail(notice)) == replace(notice, seq=7)
    nothing_said = Notice(8, "+", "p", "m", serving={}, overdue={})
    assert parse_notice("8 + " + notice_tail(Notice(0, "+", "p", "m"))) == nothing_said
    assert notice_tail(Notice(0, "+", "p", "m", serving={"a b": 1, "c": 2})) == "p m 0 0 0 - c=2 - -"
    # a refusal whose age is not known is not said; a clean answer's age is not said
    told = (Seen("refused", 9, 28), Seen("clean", 4, 20, None, 1.0))
    assert notice_tail(Notice(0, "=", "p", "m", seen=told)) == "p m 0 0 0 - - c4:20 -"
    assert parse_notice("0 * p") == Notice(0, "*", "p")


@pytest.mark.parametrize(
    "text",
    [
        "9 - p m 1 2 250 q m=1 -",  # without overdue
        "9 - p m 1 2 250 q",  # without serving, seen and overdue
        "9 - p m 1 2 250 q - r4:5 -",  # a refusal without its age
        "9 - p m 1 2 250 q - s4:5m -",  # a stall without its age
        "9 - p m 1 2 250 q - c4:5~250 -",  # a clean answer with an age
        "9 - p m 1 2 250 q m=1 - - -",  # a field too many
        "9 + p",  # a short form only a proxy leaving sends
        "9 - p m 1 2",
        "9 - p m 1 2 250 q m=1 - m=x",
        "9 - p m 1 2 250 q m=x - -",
        "9 - p m 1 2 250 q - x4:5 -",
        "9 - p m 1 2 250 q - r4:5~ -",
        "9 - p m 1 2 250 q - r4:5~-1 -",
        "x - p m 1 2 250 q - - -",
        "x * p",
    ],
)
def test_a_notice_in_another_layout_or_malformed_is_ignored(text: str) -> None:
    assert parse_notice(text) is None


async def test_a_slot_freed_goes_to_the_proxy_it_is_owed_to_and_the_others_do_not_race_for_it(
    server: RedisProcess, client: aioredis.Redis
) -> None:
    pools = [ChaosPool(CONFIG) for _ in range(3)]
    fleets = [make_fleet(server.url, f"p{i}", pool=pool) for i, pool in enumerate(pools)]
    for fleet in fleets:
        fleet.start()
    await until(lambda: all(f.up for f in fleets))
    held = [await pools[0].admit(Ticket("heavy"), timeout=1) for _ in range(8)]  # the heavy tier's slots
    try:
        await until(lambda: all(f.slots.total() == 8 for f in fleets))  # their notices reached p1 and p2
        first = asyncio.ensure_future(pools[1].admit(Ticket("heavy", session="first"), timeout=5))
        await until(lambda: fleets[0].slots.next_in_fleet_line() == "p1")
        second = asyncio.ensure_future(pools[2].admit(Ticket("heavy", session="second"), timeout=5))
        await until(lambda: pools[2].first_in_line()[0] == 1 and fleets[1].slots.proxies is not None)
        await asyncio.sleep(0.05)  # p2's announce reached p0 (p1's first came earlier, at the same level)
        assert fleets[0].slots.next_in_fleet_line() == "p1"
        selection = held.pop()
        assert selection is not None
        pools[0].release(selection)
        got = await asyncio.wait_for(first, 2)
        assert got is not None and not second.done()
        assert pools[1].lost_races == pools[2].lost_races == 0  # p2 did not try for it at once
        pools[1].release(got)
        got = await asyncio.wait_for(second, 2)
        assert got is not None
        pools[2].release(got)
    finally:
        for selection in held:
            if selection is not None:
                pools[0].release(selection)
        for fleet in fleets:
            await fleet.close()


async def test_a_proxy_that_dies_gives_its_slots_back_within_the_lease(
    server: RedisProcess, client: aioredis.Redis
) -> None:
    pool = ChaosPool(CONFIG)
    survivor = make_fleet(server.url, "alive", lease_seconds=0.6, pool=pool)
    survivor.start()
    await until(lambda: survivor.up)
    for i in range(3):  # a dead proxy's leases on glm-4.7: never renewed
        await client.eval(
            "local t = redis.call('TIME') local now = t[1] * 1000 + math.floor(t[2] / 1000) "
            "redis.call('ZADD', KEYS[1], now + 600, ARGV[1]) redis.call('ZADD', KEYS[2], now + 600, ARGV[1])",
            2,
            "chaos:slots:glm-4.7",
            "chaos:account",
            f"dead#{i}",
        )
    survivor._wake.set()
    await until(lambda: pool.in_flight("glm-4.7") == 3, 2)
    await until(lambda: pool.in_flight("glm-4.7") == 0, 2)  # within the lease (0.6 s) and a tick
    await survivor.close()


async def test_an_outage_serves_alone_says_so_once_and_the_leases_come_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "chaos_mode")
    first = RedisProcess(password="hunter2").start()
    port = first.port
    pool = ChaosPool(CONFIG)
    fleet = make_fleet(f"redis://:hunter2@127.0.0.1:{port}/0", "p", lease_seconds=0.9, pool=pool)
    fleet.start()
    try:
        await until(lambda: fleet.up)
        held = [await pool.admit(Ticket("medium"), timeout=1) for _ in range(3)]
        assert all(held)
        await asyncio.to_thread(first.stop)
        more = [await pool.admit(Ticket("medium"), timeout=1) for _ in range(2)]  # no request fails
        assert all(more) and not fleet.up and fleet.slots.share == 1.0  # it was alone in the fleet
        await asyncio.sleep(0.5)  # a few reconnection attempts: still one warning
        second = RedisProcess(port=port, password="hunter2").start()
        try:
            await until(lambda: fleet.up, 10)
            check = aioredis.Redis(port=port, password="hunter2")
            assert await check.zcard("chaos:account") == 5  # written again on reconnection
            await check.aclose()
            assert fleet_status(fleet, pool.lost_races)["alive"] == 1
        finally:
            for selection in held + more:
                assert selection is not None
                pool.release(selection)
            await fleet.close()
            await asyncio.to_thread(second.stop)
    finally:
        first.stop()
    warnings = [r.getMessage() for r in caplog.records if "unreachable" in r.getMessage()]
    assert len(warnings) == 1 and "redis://:***@127.0.0.1" in warnings[0]
    assert any("answers; slots are counted fleet-wide" in r.getMessage() for r in caplog.records)
    assert "hunter2" not in caplog.text


async def test_an_unreachable_redis_at_start_serves_alone_on_the_fallback_share() -> None:
    from chaos_mode_tools.devtools.processes import free_port

    pool = ChaosPool(CONFIG)
    fleet = make_fleet(f"redis://127.0.0.1:{free_port()}/0", "p", pool=pool)
    fleet.start()
    selection = await pool.admit(Ticket("heavy"), timeout=1)
    assert selection is not None
    await until(lambda: fleet.slots.share == 0.5)
    pool.release(selection)
    async with asyncio.timeout(1.0):  # alone, no admission waits for a connection (0.5 s each, before)
        for _ in range(5):
            more = await pool.admit(Ticket("light"), timeout=1)
            assert more is not None
            pool.release(more)
    await fleet.close()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(0, 2), st.sampled_from(["heavy", "medium", "light"]), st.booleans())))
async def test_leases_never_exceed_the_caps_and_come_back_to_zero(
    server: RedisProcess, steps: list[tuple[int, str, bool]]
) -> None:
    client = aioredis.Redis(port=server.port)
    await client.flushall()
    pools = [ChaosPool(CONFIG) for _ in range(3)]
    fleets = [make_fleet(server.url, f"p{i}", pool=pool) for i, pool in enumerate(pools)]
    for fleet in fleets:
        fleet.start()
    await until(lambda: all(f.up for f in fleets))
    held: list[tuple[int, Slot]] = []
    for proxy, tier, release in steps:
        if release and held:
            owner, slot = held.pop(proxy % len(held))
            assert pools[owner].release(slot)
        else:
            selection = await pools[proxy].admit(Ticket(tier), timeout=0)  # type: ignore[arg-type]
            if selection is not None:
                held.append((proxy, selection))
        for model, spec in CONFIG.models.items():
            assert await client.zcard(f"chaos:slots:{model}") <= spec.max_concurrency
        assert await client.zcard("chaos:account") <= CONFIG.total_capacity
    for owner, slot in held:
        assert pools[owner].release(slot)
    for fleet in fleets:
        await asyncio.gather(*fleet._background)
    assert await client.zcard("chaos:account") == 0
    assert all(pool.spurious_releases == 0 and pool.first_in_line()[0] == 0 for pool in pools)
    for fleet in fleets:
        await fleet.close()
    await client.aclose()


def zai_error(code: str):  # type: ignore[no-untyped-def]
    body = json.dumps({"type": "error", "error": {"code": code, "message": f"error {code}"}})
    error = classify_error(429, body, now=time.time())
    assert error is not None
    return error


async def two_pools(
    server: RedisProcess, lease_seconds: float = 0.6
) -> tuple[list[ChaosPool], list[RedisFleet]]:
    pools = [ChaosPool(CONFIG), ChaosPool(CONFIG)]
    fleets = [
        make_fleet(server.url, f"p{i}", pool=pool, lease_seconds=lease_seconds)
        for i, pool in enumerate(pools)
    ]
    for fleet in fleets:
        fleet.start()
    await until(lambda: all(f.up for f in fleets))
    return pools, fleets


async def test_a_1113_on_one_proxy_takes_the_model_out_on_the_other_and_a_restore_puts_it_back(
    server: RedisProcess, client: aioredis.Redis
) -> None:
    (a, b), fleets = await two_pools(server)
    try:
        a.error("glm-4.7", zai_error("1113"))
        await until(lambda: "glm-4.7" in b.cooldowns.blocked(), 2)
        block = b.cooldowns.block("glm-4.7")
        assert block is not None and block.kind == "out" and "1113" in block.reason
        a.error("glm-4.6", zai_error("1305"), retry_after=20.0)
        await until(lambda: "glm-4.6" in b.cooldowns.blocked(), 2)
        assert 15 < b.cooldowns.remaining("glm-4.6") <= 20  # the seconds left travel, not a clock
        a.restore("glm-4.7")
        await until(lambda: "glm-4.7" not in b.cooldowns.blocked(), 2)
        assert "glm-4.7" not in a.cooldowns.blocked() and "glm-4.6" in a.cooldowns.blocked()
    finally:
        for fleet in fleets:
            await fleet.close()


async def test_a_message_not_of_this_fleet_on_its_channels_is_ignored_without_an_outage(
    server: RedisProcess, client: aioredis.Redis
) -> None:
    """A byte that is not UTF-8, or a block whose seconds overflow a float, ended the listener: every
    proxy served alone, reconnecting, for as long as such messages came."""
    pools, fleets = await two_pools(server)
    try:
        held = await pools[0].admit(Ticket("heavy"), timeout=1)
        assert held is not None
        block = {"proxy": "rogue", "kind": "cooldown", "model": "glm-4.7", "seconds": 10**400, "reason": "x"}
        for channel in ("chaos:freed", "chaos:blocks", "chaos:freed:p1"):
            await client.publish(channel, b"\xff\xfe 1 + p9 glm-4.7")
        await client.publish("chaos:blocks", json.dumps(block))
        await client.publish("chaos:freed", notice_tail(fleets[0].slots.notice("=")))  # after them all
        await asyncio.sleep(0.3)
        assert all(f.up and f.slots.lost == 0 for f in fleets), [f.last_error for f in fleets]
        assert "glm-4.7" not in pools[1].cooldowns.blocked()
        assert fleets[1].slots.total() == 1  # the mirror still counts the other's slot
        pools[0].release(held)
    finally:
        for fleet in fleets:
            await fleet.close()


async def test_a_redis_emptied_under_the_fleet_gets_its_leases_back_and_the_mirrors_start_over(
    server: RedisProcess, client: aioredis.Redis
) -> None:
    """FLUSHDB (or keys evicted) with the connections kept: renewals touch only the leases still there,
    and change numbers start again under what the mirrors counted, so leases were lost for good and the
    mirrors froze. A change number gone back is taken as a restart: each proxy writes its leases again."""
    pools, fleets = await two_pools(server)
    try:
        held = [await pools[i % 2].admit(Ticket("heavy"), timeout=1) for i in range(4)]
        assert all(held)
        await until(lambda: all(f.slots.total() == 4 for f in fleets))
        await client.flushdb()
        await until(lambda: all(f.slots.lost == 1 and f.up for f in fleets), 5)
        await until(lambda: all(f.slots.total() == 4 for f in fleets), 3)
        assert await client.zcard("chaos:account") == 4  # written again
        for i, each in enumerate(held):
            assert each is not None
            pools[i % 2].release(each)
        await until(lambda: all(f.slots.total() == 0 for f in fleets), 3)
        assert await client.zcard("chaos:account") == 0
    finally:
        for fleet in fleets:
            await fleet.close()


async def test_the_verdicts_on_a_slot_one_proxy_gives_back_count_on_the_other_as_its_own(
    server: RedisProcess, client: aioredis.Redis
) -> None:
    """One body of evidence for the fleet: z.ai's refusals of a's request lower the limit on b too, with
    the same reason, as they come (told at once, before a gives its slot back)."""
    (a, b), fleets = await two_pools(server, lease_seconds=0.3)  # renewals every 0.1 s
    try:
        await until(lambda: all(f._joined_limits for f in fleets))  # each took the fleet's limits on joining
        for pool in (a, b):
            as_on_the_benchmark(pool)
        first = await a.admit(Ticket("heavy"), timeout=1)
        assert first is not None
        model = first.model
        a.ledger.success(first)  # z.ai serves one of it...
        held = []
        while (selection := await a.admit(Ticket("heavy"), timeout=1)) and selection.model != model:
            held.append(selection)  # (the least loaded heavy models first)
        assert selection is not None
        for _ in range(2):  # ...and refuses a second beside it, twice
            a.error(model, zai_error("1302"), slot=selection)
        lowered = a.limits.limit(model)
        assert lowered < CONFIG.models[model].max_concurrency
        await until(lambda: b.limits.limit(model) == lowered, 2)  # a still holds the slot
        assert b.limits.view(model).reason == a.limits.view(model).reason == "1302 at 2 in flight"
        await asyncio.sleep(0.3)  # renewals: a's row is in Redis, and b's limit is its own evidence's
        assert await client.hexists("chaos:limits", model)
        assert a.release(selection)
        for slot in (first, *held):
            assert a.release(slot)
    finally:
        for fleet in fleets:
            await fleet.close()


async def test_a_proxy_joining_the_fleet_takes_the_limits_it_learned_so_far(
    server: RedisProcess, client: aioredis.Redis
) -> None:
    (a, _), fleets = await two_pools(server, lease_seconds=0.3)
    late = ChaosPool(CONFIG)
    fleets.append(make_fleet(server.url, "late", pool=late, lease_seconds=0.3))
    try:
        selection = await a.admit(Ticket("heavy"), timeout=1)
        assert selection is not None
        model = selection.model
        for _ in range(2):
            a.error(model, zai_error("1302"), slot=replace(selection, in_flight=2))
        assert a.release(selection)
        await until(lambda: not fleets[0]._background)
        await asyncio.sleep(0.2)  # a renewal: its row is in Redis
        fleets[2].start()
        await until(lambda: late.limits.limit(model) == a.limits.limit(model), 2)  # its first renewal's
    finally:
        for fleet in fleets:
            await fleet.close()


async def test_a_call_that_fails_after_an_announce_still_takes_the_proxy_alone(server: RedisProcess) -> None:
    """A notice sent while a confirm was under way does not make that confirm's failure look like one of
    an earlier connection: the proxy serves alone on its share, not on Redis it cannot reach."""
    pool = ChaosPool(CONFIG)
    fleet = make_fleet(server.url, "p", pool=pool)
    fleet.start()
    try:
        await until(lambda: fleet.up)
        gate = asyncio.Event()

        async def failing_confirm(**_: object) -> object:
            await gate.wait()
            raise ConnectionError("Redis went away")  # as redis-py raises it

        fleet._confirm = failing_confirm  # type: ignore[assignment]  # the one call that fails
        admitting = asyncio.create_task(pool.admit(Ticket("medium"), timeout=1))
        await asyncio.sleep(0)
        fleet.announce()
        await until(lambda: not fleet._announcing)
        gate.set()
        selection = await admitting
        assert selection is not None  # no request fails
        assert not fleet.up and fleet.slots.share == 1.0  # alone, on its share: not counted as connected
        pool.release(selection)
    finally:
        await fleet.close()


@contextlib.asynccontextmanager
async def restarted_with_one_proxy_late(
    lease_seconds: float,
) -> AsyncIterator[tuple[RedisFleet, RedisFleet, asyncio.Event, RedisProcess]]:
    """Two proxies on one Redis, one holding a slot; Redis restarted empty, and the other (`late`) kept
    from reaching it until the event is set. Yields the one back first, the late one, the event and the
    new Redis; closes both proxies and stops both Redis processes after."""
    servers = [RedisProcess().start()]
    url = f"redis://127.0.0.1:{servers[0].port}/0"
    pools = [ChaosPool(CONFIG), ChaosPool(CONFIG)]
    back, late = (make_fleet(url, f"p{i}", pool=p, lease_seconds=lease_seconds) for i, p in enumerate(pools))
    try:
        for fleet in (back, late):
            fleet.start()
        await until(lambda: all(len(f.slots.proxies) == 2 for f in (back, late)))  # each saw the other
        assert await pools[1].admit(Ticket("heavy"), timeout=1) is not None
        gate = asyncio.Event()
        tick = late._tick

        async def kept_away(**kwargs: object) -> object:
            if not gate.is_set():
                raise ConnectionError("kept away")  # redis-py's, for a Redis it cannot reach
            return await tick(**kwargs)

        late._tick = kept_away  # type: ignore[assignment]
        await asyncio.to_thread(servers[0].stop)
        servers.append(await asyncio.to_thread(RedisProcess(port=servers[0].port).start))
        yield back, late, gate, servers[1]
    finally:
        for fleet in (back, late):
            await fleet.close()
        for server in servers:
            await asyncio.to_thread(server.stop)


async def test_a_proxy_back_from_an_outage_counts_on_redis_once_the_others_wrote_their_leases_again() -> None:
    """Redis came back empty: the proxy back first stays alone (on its share, its slots confirmed by Redis
    too) while a proxy it knew has not written its leases again, however many renewals that takes, and
    counts on Redis as soon as that one has: never on a Redis that misses a slot still held."""
    async with restarted_with_one_proxy_late(lease_seconds=3.0) as (back, late, gate, second):
        await until(lambda: back._rejoining)
        tallies = 0
        tick = back.tick

        async def counted(*, renew_only: bool = True) -> Tally:
            nonlocal tallies
            tallies += 1
            return await tick(renew_only=renew_only)

        back.tick = counted  # type: ignore[method-assign]
        await until(lambda: tallies >= 12)  # over a renewal (1 s) of polls, 0.1 s apart
        assert not back.up and back.slots.share == 0.5  # still alone, on its share
        gate.set()
        await until(lambda: back.up and late.up, 3)
        check = aioredis.Redis(port=second.port)
        assert await check.zcard("chaos:account") == 1  # the late proxy's slot, written again
        await check.aclose()
        assert back.slots.in_flight(late.slots.leases()[0][0]) == 1  # and counted by the other


async def test_a_proxy_back_from_an_outage_waits_one_lease_at_most_for_a_proxy_gone_meanwhile() -> None:
    async with restarted_with_one_proxy_late(lease_seconds=1.5) as (back, late, _, _):
        await until(lambda: back._rejoining)
        rejoining = time.monotonic()
        await until(lambda: back.up, 4)
        assert time.monotonic() - rejoining >= 1.4  # the lease (1.5 s), less a poll's rounding
        assert not late.up


async def test_a_fleet_over_tls_trusts_the_ca_its_url_names_and_no_other(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """rediss:// to a redis-server serving TLS only, its certificate signed by a private CA: the URL that
    names the CA (`?ssl_ca_certs=`) shares slots through it; the same URL without it is refused the
    connection (the certificate is checked against the system's CAs) and its proxy serves alone, saying why
    without the password."""
    require_redis_server()
    certs = make_certs(tmp_path)
    with RedisProcess(password="hunter2", tls=(str(certs.cert), str(certs.key))) as server:
        url = f"rediss://:hunter2@127.0.0.1:{server.port}/0"
        pool = ChaosPool(CONFIG)
        trusting = make_fleet(f"{url}?ssl_ca_certs={certs.ca}", "p", pool=pool)
        doubting = make_fleet(url, "q")
        for fleet in (trusting, doubting):
            fleet.start()
        try:
            await until(lambda: trusting.up and doubting.last_error is not None)
            selection = await pool.admit(Ticket("heavy"), timeout=1)
            assert selection is not None
            check = aioredis.Redis(port=server.port, password="hunter2", ssl=True, ssl_ca_certs=str(certs.ca))
            assert await check.zcard("chaos:account") == 1  # the lease went through TLS
            pool.release(selection)
            await asyncio.gather(*trusting._background)
            assert await check.zcard("chaos:account") == 0
            await check.aclose()
            assert not doubting.up and "CERTIFICATE_VERIFY_FAILED" in (doubting.last_error or "")
        finally:
            for fleet in (trusting, doubting):
                await fleet.close()
    assert "hunter2" not in caplog.text


async def test_a_slot_taken_while_a_proxy_writes_its_leases_again_is_confirmed_by_redis() -> None:
    """Back from an outage, a proxy's slots are confirmed by Redis from the first write of its leases on:
    one taken while that write's answer is on its way is in Redis too, where the proxy back first, which
    counts on Redis once this one was seen, finds it."""
    async with restarted_with_one_proxy_late(lease_seconds=3.0) as (back, late, gate, second):
        tick = late._tick  # the real script once the gate opens
        written, answer = asyncio.Event(), asyncio.Event()

        async def slow_answer(**kwargs: object) -> object:
            result = await tick(**kwargs)
            written.set()
            await answer.wait()
            return result

        late._tick = slow_answer  # type: ignore[assignment]
        gate.set()
        await until(written.is_set)  # its leases are in Redis again; it has not read the answer yet
        assert late.pool is not None
        selection = await late.pool.admit(Ticket("light"), timeout=1)
        assert selection is not None
        check = aioredis.Redis(port=second.port)
        assert await check.zcard("chaos:account") == 2  # the slot it held, and this one
        await check.aclose()
        answer.set()
        await until(lambda: back.up and late.up, 3)


async def test_a_proxy_that_joined_just_before_redis_went_away_counts_in_the_others_share() -> None:
    """The second proxy joins less than a renewal before Redis goes away: the first one's last tally
    lists only itself, but the newcomer announced itself, so each serves alone on half, not the first on
    the whole limit beside the second's half."""
    first = RedisProcess().start()
    url = f"redis://127.0.0.1:{first.port}/0"
    early, late = (make_fleet(url, name, lease_seconds=30.0) for name in ("early", "late"))  # 10 s renewals
    try:
        early.start()
        await until(lambda: early.up)
        late.start()
        await until(lambda: late.up)
        assert set(early.slots.proxies) == {early.slots.proxy_id}  # no renewal since: its tally had one
        await asyncio.to_thread(first.stop)
        await until(lambda: early.slots.share is not None and late.slots.share is not None)
        assert early.slots.share == 0.5 and late.slots.share == 0.5
    finally:
        for fleet in (early, late):
            await fleet.close()
        first.stop()


# -- the right to probe a limit, one for the fleet -----------------------------------------------------

INTERVAL = 5.0  # learning.probeIntervalSeconds, the default
WAIT = 2 * INTERVAL  # a probe's wait after its first failed round


@contextlib.asynccontextmanager
async def sharing(
    server: RedisProcess, count: int = 2
) -> AsyncIterator[tuple[list[ChaosPool], list[RedisFleet]]]:
    """`count` pools on fake clocks sharing Redis, each connected; closed after."""
    pools = [ChaosPool(routing(), clock=FakeClock(), rng=random.Random(i)) for i in range(count)]
    fleets = [make_fleet(server.url, f"p{i}", pool=pool) for i, pool in enumerate(pools)]
    for fleet in fleets:
        fleet.start()
    try:
        await until(lambda: all(f.up for f in fleets))
        yield pools, fleets
    finally:
        for fleet in fleets:
            await fleet.close()


@contextlib.asynccontextmanager
async def probing(
    server: RedisProcess, count: int = 2
) -> AsyncIterator[tuple[list[ChaosPool], list[RedisFleet]]]:
    """`count` pools on fake clocks sharing Redis, "h" (limit 2) served cleanly at its limit on each: a
    request that would wait probes above it. The two slots of "h" are held (by the first two pools)."""
    async with sharing(server, count) as (pools, fleets):
        held = [await pools[i % 2].admit(Ticket("heavy"), timeout=1) for i in range(2)]
        await until(lambda: all(pool.in_flight("h") == 2 for pool in pools))
        for i, slot in enumerate(held):
            assert slot is not None
            pools[i % 2].ledger.success(slot)
        for pool in pools:  # each proxy saw "h" full, served cleanly (the others' answers once they say so)
            pool.limits.succeeded("h", 2, 2, None)
        assert all(pool.limits.can_probe("h") for pool in pools)
        yield pools, fleets


async def right(client: aioredis.Redis, limit: str = "h") -> dict[str, float | str]:
    """The right to probe `limit` as Redis holds it: whose lease, ms until it is free, refused probes."""
    fields = {k.decode(): v.decode() for k, v in (await client.hgetall(f"chaos:probe:{limit}")).items()}
    if not fields:
        return {}
    seconds, micros = await client.time()
    now = seconds * 1000 + micros // 1000
    return {
        "lease": fields["lease"],
        "free_in": int(fields["free_at"]) - now,
        "refused": int(fields["refused"]),
    }


async def test_a_clean_answer_reaches_the_other_proxies_as_it_comes_not_with_its_slot_given_back(
    server: RedisProcess,
) -> None:
    async with sharing(server) as ((a, b), _):
        held = [await a.admit(Ticket("heavy"), timeout=1) for _ in range(2)]
        await until(lambda: b.in_flight("h") == 2)
        assert not b.limits.can_probe("h")  # nobody saw z.ai serve "h" at its limit yet
        for slot in held:
            assert slot is not None
            a.ledger.success(slot)  # z.ai serves both: "h" full, cleanly
        await until(lambda: b.limits.can_probe("h"), 2)
        assert b.in_flight("h") == 2  # heard while both slots are still held
        for slot in held:
            assert slot is not None and a.release(slot)


async def test_two_proxies_probing_a_limit_at_once_send_one_probe_and_its_clean_answer_frees_the_other(
    server: RedisProcess, client: aioredis.Redis
) -> None:
    async with probing(server) as ((a, b), fleets):
        # both pick a probe of "h" on their mirrors before either hears of the other's: Redis gives the
        # right to one; the other's slot is refused, not as a race lost, and it waits for the right
        first, second = await asyncio.gather(
            a.admit(Ticket("heavy"), timeout=0.2), b.admit(Ticket("heavy"), timeout=0.2)
        )
        assert (first is None) != (second is None)
        probe = first or second
        assert probe is not None and probe.probe == "model"
        prober, other = (a, b) if first is not None else (b, a)
        others_fleet = fleets[1] if other is b else fleets[0]
        assert others_fleet.slots.probes_elsewhere == 1 and other.lost_races == 0
        assert not other.limits.can_probe("h") and other.limits.next_probe() == pytest.approx(
            INTERVAL, abs=0.5
        )
        held = await right(client)
        assert str(held["lease"]).startswith(f"p{0 if prober is a else 1}#")
        assert INTERVAL * 1000 - 1000 < float(held["free_in"]) <= INTERVAL * 1000
        prober.ledger.success(probe)  # answered cleanly: the next probe anywhere may follow at once
        await until(lambda: other.limits.can_probe("h"), 2)
        assert await right(client) == {}
        assert prober.release(probe)


async def test_a_refused_probe_holds_the_right_for_the_probers_wait_and_the_next_prober_waits_as_one_would(
    server: RedisProcess, client: aioredis.Redis
) -> None:
    async with probing(server) as ((a, b), fleets):
        probe = await a.admit(Ticket("heavy"), timeout=0.2)
        assert probe is not None and probe.probe == "model"
        a.error("h", zai_error("1302"), slot=probe)  # refused: a waits twice the base wait
        assert a.release(probe)
        await until(lambda: not fleets[0]._background)
        held = await right(client)
        assert held["refused"] == 1 and WAIT * 1000 - 1000 < float(held["free_in"]) <= WAIT * 1000
        # the refusal came to b with a's slot: b waits as a does, counting it as its own refused probe
        await until(lambda: b.limits.probe_wait("model", "h") == (WAIT, 1))
        assert await b.admit(Ticket("heavy"), timeout=0.1) is None and fleets[1].slots.probes_elsewhere == 0
        b_clock = b._clock
        assert isinstance(b_clock, FakeClock)
        b_clock.advance(WAIT)  # past b's own wait, not a's right (Redis's clock): no probe goes
        assert await b.admit(Ticket("heavy"), timeout=0.1) is None and fleets[1].slots.probes_elsewhere == 1
        wait = b.limits.next_probe()
        assert wait is not None and WAIT - 1.0 < wait <= WAIT  # what is left of the right's hold
        # the right's wait over (on Redis's clock, and on b's): b probes, a's refusal counted as its own
        await client.hset("chaos:probe:h", "free_at", 0)
        b_clock.advance(wait)
        second = await b.admit(Ticket("heavy"), timeout=0.2)
        assert second is not None and second.probe == "model"
        b.error("h", zai_error("1302"), slot=second)
        assert b.limits.probe_wait("model", "h") == (pytest.approx(2 * WAIT), 2)  # the fleet's second
        assert b.release(second)
        await until(lambda: not fleets[1]._background)
        held = await right(client)
        assert str(held["lease"]).startswith("p1#") and held["refused"] == 2
        assert 2 * WAIT * 1000 - 1000 < float(held["free_in"]) <= 2 * WAIT * 1000


ACTIONS = ["take", "take", "take", "clean", "refuse", "release", "later"]
STEPS = st.lists(
    st.tuples(st.integers(0, 2), st.sampled_from(ACTIONS), st.booleans()), min_size=20, max_size=60
)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(STEPS)
async def test_the_fleet_probes_each_limit_as_one_proxy_would(
    server: RedisProcess, steps: list[tuple[int, str, bool]]
) -> None:
    """Three proxies taking, answering (cleanly or 1302) and giving back slots in any order, their clocks
    moving past their own waits: a probe goes only while no other proxy holds the right to probe its
    limit. A proxy holds it from its probe on until one of its probes there is answered cleanly (a refusal
    holds it for the prober's wait, an unanswered probe for the interval: longer than an example takes on
    Redis's clock); the prober itself may probe again after its own wait, as one proxy does."""
    client = aioredis.Redis(port=server.port)
    await client.flushall()
    pools = [ChaosPool(routing(), clock=FakeClock(), rng=random.Random(i)) for i in range(3)]
    fleets = [make_fleet(server.url, f"p{i}", pool=pool) for i, pool in enumerate(pools)]
    for fleet in fleets:
        fleet.start()
    out: list[tuple[int, Slot]] = []  # slots sent, no verdict yet
    answered: list[tuple[int, Slot]] = []  # slots with their verdict, still held
    holder: dict[str, int] = {}  # limit -> the proxy that holds the right to probe it
    try:
        await until(lambda: all(f.up for f in fleets))
        for pool in pools:  # z.ai served both models at their limits: probes are due everywhere
            pool.limits.succeeded("h", 2, 5, None)
            pool.limits.succeeded("l", 3, 5, None)
        for proxy, action, heavy in steps:
            pool = pools[proxy]
            if action == "take":
                slot = await pool.admit(Ticket("heavy" if heavy else "light"), timeout=0)
                if slot is not None:
                    out.append((proxy, slot))
                    if slot.probe is not None:
                        limit = ACCOUNT if slot.probe == "account" else slot.model
                        assert holder.setdefault(limit, proxy) == proxy, f"{limit}: p{holder[limit]}'s right"
            elif action in ("clean", "refuse") and out:
                owner, slot = out.pop(proxy % len(out))
                if action == "clean":
                    pools[owner].ledger.success(slot)
                    limit = ACCOUNT if slot.probe == "account" else slot.model
                    if slot.probe is not None and holder.get(limit) == owner:
                        del holder[limit]  # freed (once Redis has it: until then, still refused)
                else:
                    pools[owner].error(slot.model, zai_error("1302"), slot=slot)
                answered.append((owner, slot))
            elif action == "release" and answered:
                owner, slot = answered.pop(proxy % len(answered))
                assert pools[owner].release(slot)
            elif action == "later":  # past every wait of this proxy's own (not Redis's)
                clock = pool._clock
                assert isinstance(clock, FakeClock)
                clock.advance(2 * INTERVAL)
            await asyncio.sleep(0)  # the proxies' notices
        for owner, slot in out + answered:
            assert pools[owner].release(slot)
        assert all(pool.spurious_releases == 0 for pool in pools)
    finally:
        for fleet in fleets:
            await fleet.close()
        await client.aclose()


async def test_an_overdue_attempt_lends_its_place_to_the_whole_fleet_until_its_verdict(
    server: RedisProcess, client: aioredis.Redis
) -> None:
    """An attempt z.ai is most likely refusing holds no slot at z.ai: its place is the fleet's, so another
    proxy may take it (the store's caps raised by it, as the proxy says), until its verdict."""
    async with sharing(server) as ((a, b), fleets):
        held = [await a.admit(Ticket("heavy"), timeout=1) for _ in range(2)]  # "h": 2 of 2, fleet-wide
        assert held[0] is not None and held[1] is not None
        await until(lambda: fleets[1].slots.in_flight("h") == 2)
        assert await b.admit(Ticket("heavy", may_probe=False), timeout=0.05) is None
        a.ledger.overdue(held[1])
        await until(lambda: fleets[1].slots.riding_elsewhere() == {"h": 1, ACCOUNT: 1})
        lent = await b.admit(Ticket("heavy", may_probe=False), timeout=1)  # a's place, on b
        assert lent is not None and lent.model == "h" and await client.zcard("chaos:slots:h") == 3
        assert await b.admit(Ticket("heavy", may_probe=False), timeout=0.05) is None  # one place, no more
        a.error("h", error("1302"), None, held[1])  # its verdict: it rides no more
        await until(lambda: not fleets[1].slots.riding_elsewhere().get("h"))
        for pool, slot in ((a, held[0]), (a, held[1]), (b, lent)):
            assert pool.release(slot)
        await until(lambda: all(f.slots.total() == 0 for f in fleets))


async def test_a_clean_answer_counts_the_other_proxies_slots_z_ai_serves_not_those_it_has_not_answered(
    server: RedisProcess, client: aioredis.Redis
) -> None:
    """What z.ai serves at once, fleet-wide: a slot another proxy sent and z.ai has not answered (a 1302
    takes seconds) is no sign that z.ai serves it; its clean answer, told at once, is."""
    async with sharing(server) as ((a, b), fleets):
        unanswered = await a.admit(Ticket("heavy"), timeout=1)
        assert unanswered is not None
        await until(lambda: fleets[1].slots.in_flight("h") == 1)  # b counts a's lease...
        assert fleets[1].slots.serving_elsewhere("h") == 0  # ...not as served
        served = await b.admit(Ticket("heavy"), timeout=1)
        assert served is not None
        b.ledger.success(served)  # z.ai served one of "h" at once, not two
        assert not b.limits.view("h").evidence.answered_at(2, 1000.0)
        await until(lambda: fleets[0].slots.serving_elsewhere("h") == 1)  # b's clean answer, told at once
        a.ledger.success(unanswered)  # now a's answer counts b's: two at once
        assert a.limits.view("h").evidence.answered_at(2, 1000.0)
        for pool, slot in ((a, unanswered), (b, served)):
            assert pool.release(slot)
        await until(lambda: fleets[0].slots.serving_elsewhere(None) == 0)  # given back: said at once


def test_lending_turned_off_by_another_proxy_is_off_here() -> None:
    pool = ChaosPool(CONFIG)
    fleet = make_fleet("redis://127.0.0.1:1", "a", pool=pool)
    body = {"proxy": "b", "kind": "lending", "model": "", "seconds": None, "reason": "off: held"}
    fleet._heard_block(json.dumps({**body, "proxy": "a"}))  # its own: nothing
    assert pool.ledger.lending.on
    fleet._heard_block(json.dumps(body))
    assert not pool.ledger.lending.on and pool.ledger.lending.why == "off: held (another proxy of the fleet)"


def test_a_notice_nested_too_deeply_is_ignored() -> None:
    fleet = make_fleet("redis://127.0.0.1:1", "a", pool=ChaosPool(CONFIG))
    assert fleet.cooldowns is not None
    fleet._heard_block('{"kind":' * 100_000 + "1" + "}" * 100_000)
    assert not fleet.cooldowns.blocked()


async def test_a_tally_names_the_live_proxies_that_missed_a_renewal(
    server: RedisProcess, client: aioredis.Redis
) -> None:
    """A proxy seen in the fleet less than a lease ago but more than one and a half renewals ago (a third
    of a lease each) is likely dead: what it said stops counting (`SharedSlots.apply`)."""
    fleet = make_fleet(server.url, "p", lease_seconds=3.0)
    fleet._up = True
    seconds, micros = await client.time()
    now = seconds * 1000 + micros // 1000
    await client.zadd("chaos:fleet", {"q": now - 500, "r": now - 1600})  # q renewed lately, r not
    tally = await fleet.tick()
    assert set(tally.proxies) == {"p", "q", "r"} and tally.silent == {"r"}
    await fleet.close()


async def test_each_proxy_counts_as_alive_for_its_own_lease_not_for_the_tallying_ones(
    server: RedisProcess, client: aioredis.Redis
) -> None:
    """Proxies may run with different `chaos_state_lease_ms`: one renewing every second (a lease of 3 s) is
    neither dropped nor silent for one whose lease is 0.3 s, and one gone longer than its own lease is."""
    fleet = make_fleet(server.url, "p", lease_seconds=0.3)
    fleet._up = True
    seconds, micros = await client.time()
    now = seconds * 1000 + micros // 1000
    await client.zadd("chaos:fleet", {"slow": now - 1000, "gone": now - 1000, "dead": now - 1800})
    await client.hset("chaos:fleet:alive", mapping={"slow": 3000, "gone": 900, "dead": 3000})
    tally = await fleet.tick()
    assert set(tally.proxies) == {"p", "slow", "dead"} and tally.silent == {"dead"}
    assert set(await client.hkeys("chaos:fleet:alive")) == {b"p", b"slow", b"dead"}
    assert fleet.slots.forget_after == 3.0  # alone, the others' slots count for the longest lease
    await fleet.close()
