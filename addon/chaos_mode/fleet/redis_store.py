"""The fleet's shared slots in Redis: leases in sorted sets, taken and renewed by Lua scripts.

An adapter (redis-py's asyncio client) under `SharedSlots`: it runs `protocol` (the keys, the
scripts, the notices) against one Redis. Every call has a timeout; when one fails the proxy serves alone
(see `SharedSlots`), reconnects with backoff and jitter, then writes its leases again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from chaos_mode.fleet.cooldowns import BlockNotice, SharedCooldowns, heard_block
from chaos_mode.fleet.figures import FleetFigures
from chaos_mode.fleet.protocol import (
    CONFIRM,
    LEAVE,
    PROBE_ANSWERED,
    PROBE_MEMORY_MS,
    PUSH_LIMITS,
    RELEASE,
    TICK,
    notice_tail,
    parse_notice,
)
from chaos_mode.fleet.slots import SharedSlots, Tally, Verdict
from chaos_mode.fleet.state_url import StateUrl, redact
from chaos_mode.routing.cooldowns import Cooldowns
from chaos_mode.routing.pool import ChaosPool
from chaos_mode.routing.slots import ProbeClaim, Seen
from chaos_mode.zai import json_body

log = logging.getLogger("chaos_mode")

CALL_TIMEOUT: Final = 0.5  # seconds: a Redis slower than this counts as gone (the proxy serves alone)
BACKOFF: Final = (0.1, 5.0)  # seconds: first and longest wait between reconnection attempts
REJOIN_POLL: Final = 0.1  # seconds between tallies while back from an outage, waiting for the others
SILENT_TICKS: Final = 1.5  # renewals (a third of a lease each, ±10 %) a live proxy is never silent for


def _text(value: object) -> str:
    """A reply or a message as text: a byte that is not UTF-8 (a message not of this fleet's) is replaced."""
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


class RedisFleet:
    """The `Fleet` of `SharedSlots` in one Redis: connects, confirms, releases, renews, listens."""

    def __init__(
        self,
        url: StateUrl,
        slots: SharedSlots,
        *,
        models: Callable[[], Sequence[str]],
        lease_seconds: float,
        prefix: str = "chaos:",
        timeout: float = CALL_TIMEOUT,
        rng: random.Random | None = None,
        pool: ChaosPool | None = None,
    ) -> None:
        self.url = url
        self.slots = slots
        self.models = models  # the catalog's model names (the configuration may change)
        self.lease_ms = max(int(lease_seconds * 1000), 100)
        self.prefix = prefix
        self.timeout = timeout
        self._rng = rng or random.Random()
        self._channel = f"{prefix}freed"  # what every proxy hears: "=" (a request waits) and "*" (one left)
        self._inboxes = f"{prefix}freed:"  # + a proxy id: the leases the others take and give back
        self._inbox = self._inboxes + slots.proxy_id
        self._account = f"{prefix}account"
        self._fleet = f"{prefix}fleet"  # sorted set: live proxy -> when last seen (ms, Redis's clock)
        self._alive = f"{prefix}fleet:alive"  # hash: live proxy -> how long it counts as alive unseen (ms)
        self._seq = f"{prefix}seq"
        self._blocks = f"{prefix}blocks"  # channel: cooldowns, models out of rotation, pauses (JSON)
        self._limits = f"{prefix}limits"  # hash: model (or *account) -> its learned limit (JSON row)
        self.pool = pool
        self.cooldowns: SharedCooldowns | None = None
        self._pushed = -math.inf  # the learned limits changed after this (wall clock) are told at renewal
        self._joined_limits = False  # the fleet's limits were taken since this proxy last (re)joined it
        if pool is not None and isinstance(pool.cooldowns, Cooldowns):
            self.cooldowns = SharedCooldowns(pool.cooldowns, self._tell_block)
            pool.use(cooldowns=self.cooldowns)
        self._client: aioredis.Redis = aioredis.Redis(
            host=url.host,
            port=url.port,
            db=url.db,
            username=url.username,
            password=url.password,
            ssl=url.tls,
            ssl_ca_certs=url.ca_certs,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            retry=Retry(NoBackoff(), 0),  # no retries inside a call: our own reconnection has the backoff
        )
        slots.fleet = self  # the first requests wait for the first connection (bounded by `timeout`)
        slots.forget_after = lease_seconds  # alone, the others' slots as last seen count one lease more
        self._started = asyncio.Event()  # the first connection attempt ended, either way
        self._confirm = self._client.register_script(CONFIRM)
        self._release = self._client.register_script(RELEASE)
        self._tick = self._client.register_script(TICK)
        self._leave = self._client.register_script(LEAVE)
        self._push_limits = self._client.register_script(PUSH_LIMITS)
        self._probe_answered = self._client.register_script(PROBE_ANSWERED)
        self._announcing = False
        self._connection = 0  # bumped on every (re)connection
        self._top_seq = 0  # the highest change number Redis answered on this connection
        self._runner: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[Any]] = set()
        self._up = False
        self._rejoining = False  # back after an outage, written again, waiting for the others to be back
        self._seen: dict[str, int] = {}  # live proxy -> when it was last seen (ms, Redis's clock), last tally
        self._leases: dict[str, int] = {}  # live proxy -> its lease (ms), last tally
        self._redis_now = 0  # Redis's clock at the last tally (ms)
        self._told = False  # the outage going on was logged
        self._wake = asyncio.Event()
        self.last_error: str | None = None
        self.confirms = 0
        self.joined_at: float | None = None  # wall clock when this proxy last began to count on Redis

    def key(self, model: str) -> str:
        return f"{self.prefix}slots:{model}"

    def probe_key(self, limit: str) -> str:
        """The right to probe `limit` (a model, or ACCOUNT)."""
        return f"{self.prefix}probe:{limit}"

    def _lease_keys(self, model: str) -> tuple[str, str, str, str]:
        """The keys CONFIRM and RELEASE touch for a lease of `model`."""
        return (self.key(model), self._account, self._seq, self._fleet)

    @property
    def up(self) -> bool:
        return self._up

    @property
    def tick_seconds(self) -> float:
        """How often leases are renewed (and the fleet tallied): a third of their TTL."""
        return self.lease_ms / 3000

    # -- the Fleet protocol -------------------------------------------------------------------------

    async def confirm(
        self, model: str, lease: str, cap: int, account_cap: int, probe: ProbeClaim | None = None
    ) -> Verdict | None:
        if not self._up and not self._started.is_set() and self._runner is not None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.timeout):
                    await self._started.wait()
            if not self._started.is_set():  # the first connection is slower than a call may be: alone
                self._call_failed(TimeoutError(f"no connection within {self.timeout:g} s"))
        if not self._up and not self._rejoining:
            return None
        tail = notice_tail(self.slots.notice("+", model))
        keys: tuple[str, ...] = self._lease_keys(model)
        args: tuple[str | int, ...] = (
            lease,
            self.lease_ms,
            cap,
            min(account_cap, 2**53),
            self._inboxes,
            self.slots.proxy_id,
            tail,
        )
        if probe is not None:
            keys += (self.probe_key(probe.limit),)
            args += (_ms(probe.seconds), probe.refused, PROBE_MEMORY_MS)
        connection = self._connection
        try:
            async with asyncio.timeout(self.timeout):
                taken, in_flight, total, seq, held_ms, refused = await self._confirm(keys=keys, args=args)
        except (RedisError, OSError, TimeoutError) as exc:
            self._call_failed(exc, connection)
            return None
        self.confirms += 1
        self._top_seq = max(self._top_seq, int(seq))
        held = int(held_ms) / 1000
        return Verdict(bool(taken), int(in_flight), int(total), int(seq), held, int(refused))

    def probe_answered(self, claim: ProbeClaim, lease: str) -> None:
        if self._up or self._rejoining:
            self._spawn(self._answer_probe(claim, lease))

    async def _answer_probe(self, claim: ProbeClaim, lease: str) -> None:
        connection = self._connection
        tail = notice_tail(self.slots.notice("!", claim.limit))
        keys = (self.probe_key(claim.limit),)
        args = (
            lease,
            _ms(claim.seconds),
            claim.refused,
            PROBE_MEMORY_MS,
            self._channel,
            tail,
        )
        try:
            async with asyncio.timeout(self.timeout):
                await self._probe_answered(keys=keys, args=args)
        except (RedisError, OSError, TimeoutError) as exc:
            self._call_failed(exc, connection)  # the right ends with its TTL

    def release(self, model: str, lease: str, to: str = "") -> None:
        if self._up or self._rejoining:
            self._spawn(self._give_back(model, lease, to))

    async def _give_back(self, model: str, lease: str, to: str) -> None:
        connection = self._connection
        counts = None
        try:
            async with asyncio.timeout(self.timeout):
                tail = notice_tail(self.slots.notice("-", model, to))
                gone, in_flight, total, seq = await self._release(
                    keys=self._lease_keys(model), args=(lease, self._inboxes, self.slots.proxy_id, tail)
                )
            counts = Verdict(bool(gone), int(in_flight), int(total), int(seq))
            self._top_seq = max(self._top_seq, int(seq))
        except (RedisError, OSError, TimeoutError) as exc:
            self._call_failed(exc, connection)  # the lease ends with its TTL
        finally:
            self.slots.given_back(model, counts)

    def announce(self) -> None:
        if self._up and not self._announcing:  # one at a time: it reads the figures when it is sent
            self._announcing = True
            self._spawn(self._announce())

    async def _announce(self) -> None:
        connection = self._connection
        try:
            async with asyncio.timeout(self.timeout):
                await self._client.publish(self._channel, "0 = " + notice_tail(self.slots.notice("=")))
        except (RedisError, OSError, TimeoutError) as exc:
            self._call_failed(exc, connection)
        finally:
            self._announcing = False

    def tell_verdicts(self, model: str, seen: Sequence[Seen]) -> None:
        if self._up:
            self._spawn(self._tell_verdicts(model, seen))

    async def _tell_verdicts(self, model: str, seen: Sequence[Seen]) -> None:
        connection = self._connection
        try:
            async with asyncio.timeout(self.timeout):
                tail = notice_tail(self.slots.notice("=", model, seen=seen))
                await self._client.publish(self._channel, "0 = " + tail)
        except (RedisError, OSError, TimeoutError) as exc:
            self._call_failed(exc, connection)

    # -- life ---------------------------------------------------------------------------------------

    def start(self) -> None:
        if self._runner is None:
            self._runner = asyncio.get_running_loop().create_task(self._run(), name="chaos-state")

    async def close(self) -> None:
        """Stop, giving this proxy's leases back (best effort: otherwise they end with their TTL)."""
        if self._runner is not None:
            self._runner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._runner
            self._runner = None
        for task in list(self._background):
            task.cancel()
        if self._up:
            keys, args = self._lease_args(self.slots.leases())
            with contextlib.suppress(RedisError, OSError, TimeoutError):
                async with asyncio.timeout(self.timeout):
                    await self._leave(keys=keys, args=(self.slots.proxy_id, self._channel, *args))
        self._up = False
        with contextlib.suppress(RedisError, OSError, TimeoutError):
            async with asyncio.timeout(self.timeout):
                await self._client.aclose()

    async def _run(self) -> None:
        delay = BACKOFF[0]
        while True:
            try:
                if self.slots.lost:  # pooled connections to a Redis that went away fail on first use
                    async with asyncio.timeout(self.timeout):
                        await self._client.connection_pool.disconnect()
                pubsub = self._client.pubsub()
                try:
                    async with asyncio.timeout(self.timeout):
                        await pubsub.subscribe(self._channel, self._inbox, self._blocks)
                    self._connection += 1  # the calls made from here on are this connection's
                    self._top_seq = 0  # Redis may be another one, or come back empty
                    if self.slots.lost:
                        # Back after an outage: Redis may have come back empty. From the first write of
                        # this proxy's leases on (a slot taken while it is on its way included), its
                        # slots are confirmed by Redis too: a proxy back earlier counts on it. It stays
                        # alone until the other proxies have written theirs, so that it never counts on a
                        # Redis that misses the slots of a proxy still alone.
                        self._rejoining = True
                        self.slots.rejoining()
                    tally = await self.tick(renew_only=False)  # every lease held here, again: reconciled
                    if self.slots.lost:
                        tally = await self._until_the_others_are_back(tally)
                    self._rejoining = False
                    self._up = True
                    self.joined_at = time.time()
                    self._started.set()
                    self.slots.connected(self)
                    self.slots.apply(tally)
                    self._joined_limits = False
                    self.announce()  # here: the others count this proxy before their next tally does
                    if self._told:
                        self._told = False
                        log.info(
                            "chaos-mode: shared state at %s answers; slots are counted fleet-wide",
                            self.url.display,
                        )
                    self.last_error = None
                    delay = BACKOFF[0]
                    async with asyncio.TaskGroup() as group:
                        group.create_task(self._listen(pubsub))
                        group.create_task(self._renew())
                finally:
                    with contextlib.suppress(Exception):
                        async with asyncio.timeout(self.timeout):
                            await pubsub.aclose()  # type: ignore[no-untyped-call, unused-ignore]  # typed from redis 8.2
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._call_failed(exc)
            await asyncio.sleep(delay * (0.5 + self._rng.random()))
            # At most half a renewal (with jitter, 3/4): every live proxy has written its leases again
            # within that of Redis's return (then waits for the others, see above): the counts are right
            # within one lease.
            delay = min(delay * 2, BACKOFF[1], self.tick_seconds / 2)

    async def _until_the_others_are_back(self, tally: Tally) -> Tally:
        """Back after an outage: tally again, writing this proxy's leases each time, until every proxy
        alive before the outage (or still in Redis's fleet: a proxy never seen here, this one having come
        up during the outage) has been seen since this one came back (it wrote its leases again, or never
        lost Redis and renewed them), or for one lease at most (one that died meanwhile never comes, and
        its leases have ended). Returns the last tally."""
        since = self._redis_now
        others = (set(self.slots.proxies) | set(self._seen)) - {self.slots.proxy_id}
        deadline = time.monotonic() + max(self._leases.values(), default=self.lease_ms) / 1000
        while time.monotonic() < deadline and any(self._seen.get(p, -1) < since for p in others):
            await asyncio.sleep(min(REJOIN_POLL, self.tick_seconds))
            tally = await self.tick(renew_only=False)
        return tally

    async def _renew(self) -> None:
        while self._up:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.tick_seconds * (0.9 + 0.2 * self._rng.random())):
                    await self._wake.wait()
            self._wake.clear()
            self.slots.apply(await self.tick())
            await self.share_limits()
        raise ConnectionError(self.last_error or "shared state lost")

    async def _listen(self, pubsub: Any) -> None:
        me = self.slots.proxy_id
        while self._up:
            message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=self.tick_seconds)
            if message is not None and _text(message["channel"]) == self._blocks:
                self._heard_block(_text(message["data"]))
                continue
            notice = None if message is None else parse_notice(_text(message["data"]))
            if notice is None or notice.proxy == me:
                continue
            if notice.op == "*":  # a proxy left with all its slots: tally now
                self._wake.set()
            self.slots.heard(notice)
        raise ConnectionError(self.last_error or "shared state lost")

    def _tell_block(self, notice: BlockNotice) -> None:
        """A block set here: to every proxy (in the background; lost while Redis is away)."""
        if self._up:
            seconds = notice.seconds if notice.seconds is None or math.isfinite(notice.seconds) else None
            body = {"proxy": self.slots.proxy_id, "kind": notice.kind, "model": notice.model}
            self._spawn(
                self._publish(self._blocks, json.dumps({**body, "seconds": seconds, "reason": notice.reason}))
            )

    async def _publish(self, channel: str, message: str) -> None:
        connection = self._connection
        try:
            async with asyncio.timeout(self.timeout):
                await self._client.publish(channel, message)
        except (RedisError, OSError, TimeoutError) as exc:
            self._call_failed(exc, connection)

    def _heard_block(self, text: str) -> None:
        if self.cooldowns is None or self.pool is None:
            return
        try:
            data = json_body.loads(text)
            if data["proxy"] == self.slots.proxy_id or data["kind"] not in (
                "cooldown",
                "out",
                "restore",
                "pause",
                "lending",
            ):
                return
            seconds = data["seconds"]
            notice = BlockNotice(
                data["kind"],
                str(data["model"]),
                None if seconds is None else float(seconds),
                str(data["reason"])[:200],
            )
        except (ValueError, KeyError, TypeError, OverflowError):  # OverflowError: 400 digits of seconds
            return
        heard_block(self.pool, self.cooldowns, notice)

    async def share_limits(self) -> None:
        """Write the learned limits that changed here since the last time, read everyone's, and, once
        after joining the fleet (or coming back to it), take the newer ones (the last change of each limit
        wins): from then on every proxy learns from the fleet's verdicts (the notices' `seen`), and
        taking another's limit would replace that evidence with the limit's value."""
        if self.pool is None:
            return
        rows = self.pool.learned.rows(since=self._pushed)
        args = [part for name, row in rows.items() for part in (name, json.dumps(row))]
        async with asyncio.timeout(self.timeout):
            flat = await self._push_limits(keys=(self._limits,), args=args)
        if rows:
            self._pushed = max(row["changedAt"] for row in rows.values())
        fleet_rows = {}
        for name, row in zip(flat[::2], flat[1::2], strict=True):
            with contextlib.suppress(ValueError):
                fleet_rows[_text(name)] = json_body.loads(_text(row))
        # an alias is a fact of z.ai's, not evidence: taken as it comes
        self.pool.learned.adopt_aliases(fleet_rows)
        if not self._joined_limits:
            self._joined_limits = True
            self.pool.learned.adopt_limits(fleet_rows)

    async def tick(self, *, renew_only: bool = True) -> Tally:
        """Renew this proxy's leases (`renew_only` False: write them again, Redis may have lost them), say
        it is alive, and read the fleet's counts."""
        models = list(self.models())
        keys, args = self._lease_args(self.slots.leases(), models)
        mode = "XX" if renew_only else "ALL"
        floor = self._top_seq  # changes answered before the tick was sent: Redis made them before it reads
        async with asyncio.timeout(self.timeout):
            counts, members, proxies, seq, now = await self._tick(
                keys=keys, args=(self.lease_ms, self.slots.proxy_id, self.lease_ms, mode, *args)
            )
        if int(seq) < floor:  # as after a restart: its leases written again, once every proxy is back
            raise ConnectionError(
                f"Redis lost the fleet's keys (emptied, or evicted): change {seq} < {floor}"
            )
        self._top_seq = max(self._top_seq, int(seq))
        self._redis_now = int(now)
        rows = [
            (_text(p), int(float(seen)), int(lease))
            for p, seen, lease in zip(*[iter(proxies)] * 3, strict=True)
        ]
        self._seen = {p: seen for p, seen, _ in rows}
        self._leases = {p: lease for p, _, lease in rows}
        self.slots.forget_after = max(self._leases.values(), default=self.lease_ms) / 1000  # the longest
        held: dict[str, int] = dict.fromkeys(self._seen, 0)
        for member in members:
            owner = _text(member).rpartition("#")[0]
            held[owner] = held.get(owner, 0) + 1
        return Tally(
            models={model: int(n) for model, n in zip(models, counts, strict=True)},
            total=len(members),
            proxies=held,
            seq=int(seq),
            # not seen for one and a half of its renewals (a third of its lease each): it missed one
            silent=frozenset(
                p for p, seen, lease in rows if seen < self._redis_now - SILENT_TICKS * lease / 3
            ),
        )

    def _lease_args(
        self, leases: list[tuple[str, str]], models: list[str] | None = None
    ) -> tuple[list[str], list[str | int]]:
        """Keys (account, fleet, change number, the proxies' times, each model's) and the (key index, lease)
        pairs of `leases`."""
        names = list(models if models is not None else self.models())
        names += sorted({model for model, _ in leases} - set(names))
        index = {model: i + 5 for i, model in enumerate(names)}  # Lua counts from 1; four keys first
        keys = [self._account, self._fleet, self._seq, self._alive, *(self.key(model) for model in names)]
        args: list[str | int] = []
        for model, lease in leases:
            args += [index[model], lease]
        return keys, args

    def _call_failed(self, exc: BaseException, connection: int | None = None) -> None:
        """A call failed: serve alone on a share of each limit; said once per outage. A call made on an
        earlier connection (`connection`) that failed after a new one was made changes nothing."""
        if connection is not None and connection != self._connection:
            return
        self.last_error = redact(_describe(exc), self.url)
        was_up, self._up = self._up, False
        self._wake.set()
        self._started.set()  # the first requests no longer wait for a first connection: alone
        if self._rejoining:  # gone again before this proxy counted on it: alone on its share, as it was
            self._rejoining = False
            self.slots.rejoining(False)
        if not was_up and self._told:
            return  # already alone, already said
        share = self.slots.disconnected()
        if not self._told:
            self._told = True
            log.warning(
                "chaos-mode: shared state at %s unreachable (%s); serving on this proxy's own slots with "
                "%.2f of each limit, reconnecting",
                self.url.display,
                self.last_error,
                share,
            )

    def _spawn(self, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)


def _ms(seconds: float) -> int:
    """Seconds as the scripts' whole milliseconds, a positive time at least 1 ms (0 stays 0: freed)."""
    return max(math.ceil(seconds * 1000), 1) if seconds > 0 else 0


def _describe(exc: BaseException) -> str:
    """One line for an error, unwrapping a task group's."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}"[:200] if text else type(exc).__name__


def fleet_figures(fleet: RedisFleet, lost_races: int) -> FleetFigures:
    """This proxy in its fleet, as the metrics read it."""
    slots = fleet.slots
    return FleetFigures(
        connected=fleet.up,
        proxies=len(slots.proxies) if fleet.up else 0,
        own_in_flight=sum(slots.own().values()),
        outages=slots.lost,
        lost_races=lost_races,
    )


def fleet_status(fleet: RedisFleet, lost_races: int) -> dict[str, Any]:
    """The fleet as status pages show it (camelCase): where, whether it answers, who holds what; the
    figures the metrics read too."""
    slots = fleet.slots
    figures = fleet_figures(fleet, lost_races)
    proxies = slots.proxies if figures.connected else {}
    return {
        "state": fleet.url.display,
        "connected": figures.connected,
        "share": slots.share,  # None while Redis answers; else the share of each limit used alone
        "lastError": fleet.last_error,
        "outages": figures.outages,
        "joinedAt": fleet.joined_at,  # epoch seconds: when it last began to count on Redis (after an outage)
        "leaseSeconds": fleet.lease_ms / 1000,
        "proxy": slots.proxy_id,
        "ownInFlight": figures.own_in_flight,
        "leases": [lease for _, lease in slots.leases()],  # this proxy's, as Redis should hold them
        "heldBack": slots.held_back,
        "probesElsewhere": slots.probes_elsewhere,  # probes not sent: another proxy held the right
        "blocksHeard": fleet.cooldowns.heard_count if fleet.cooldowns is not None else 0,
        "own": slots.own(),
        "alive": figures.proxies,
        "proxies": [
            {"id": proxy, "held": held, "self": proxy == slots.proxy_id} for proxy, held in proxies.items()
        ],
        "lostRaces": figures.lost_races,
    }
