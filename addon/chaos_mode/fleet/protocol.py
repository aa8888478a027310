"""What the proxies of a fleet write to and read from Redis: the Lua scripts and the notices' format.

The protocol between proxies, versions included: keys (with a prefix, `chaos:` by default)
`slots:{model}` and `account` (sorted sets of lease ids scored by expiry, ms on Redis's clock), `fleet`
(proxy ids scored by when each was last seen), `seq` (the change number), `limits` (a hash of learned
limits), `probe:{model or *account}` (the right to probe that limit, below), `turn:{group}` (the turn of
the limits held back, below); channels `freed:{proxy id}`
(the leases the others take and give back), `freed` (what every proxy hears: a request began to wait, a
probe was answered cleanly, a proxy left) and `blocks` (cooldowns and the like, JSON). Pure text and
parsing; `redis_state` runs it.

**The right to probe a limit is one for the fleet.** `probe:{limit}` is a hash: `lease` (the probe's
lease id, so its proxy's), `free_at` (ms, Redis's clock) and `refused` (the limit's probes refused in a
row). A probe's slot is confirmed by CONFIRM only with the right: held by another proxy until `free_at`,
the slot is refused (nothing is taken) and the answer says for how long; taken, `free_at` is the probe's
interval from now. Its verdict (PROBE_ANSWERED, from the proxy whose lease it holds): answered cleanly,
the key is deleted and every proxy told (`!`), so the next probe anywhere may follow at once; refused or
given up, `free_at` is the prober's wait and `refused` its count. The key outlives `free_at` by
`PROBE_MEMORY_MS`, keeping the count. **So are the turns of the limits held back** (their last probe
refused, `learning.limits`): `turn:{lowered or highest}`, a hash of `lease` and `free_at`, claimed in the
same CONFIRM by a held-back limit's probe (held elsewhere: the slot is refused, and the answer says for how
long) and held while it is out, then freed by a clean answer or held for the prober's group's share of its
wait (PROBE_ANSWERED). Proxies of the previous version ignore both and probe on their own.

**A notice says what z.ai serves of its sender's slots** (`model=n,...`, the slots z.ai answered cleanly
and still streams; the one a lease is taken for counts as served until the sender's next notice, but a
probe's): a clean answer elsewhere counts them with its own, not the slots z.ai has not answered yet.
**z.ai's verdicts on a request are told as they come**, in a notice `=` on `freed` naming its model
(`c7:20`, `r8:22m~3010`, `s9:26a~250`: clean, refused, stalled, at the levels its proxy counted on the
model and the account, a model's or the account's probe, and for a refusal or a stall the ms since its
request was sent), which every other proxy counts as its own, as sent then; a notice of
any kind may carry them (the previous version sent them with the lease given back). The learned limits'
hash is read by a proxy joining the fleet, and written by all. The previous version's notices (without
either) are read, their sender's slots counted as not served; it reads none of this version's and
follows it only at each renewal: upgrade together.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final, Literal

from chaos_mode.fleet.slots import Notice
from chaos_mode.learning.limits import Probe
from chaos_mode.routing.slots import Seen

_NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

# tell(prefix, me, message): `message` on the own channel (`prefix` .. id) of every proxy of the fleet
# (KEYS[4]) but this one (`me`).
_TELL = """
local function tell(prefix, me, message)
  for _, proxy in ipairs(redis.call('ZRANGE', KEYS[4], 0, -1)) do
    if proxy ~= me then
      redis.call('PUBLISH', prefix .. proxy, message)
    end
  end
end
"""

PROBE_MEMORY_MS: Final = 600_000  # a limit's refused probes are forgotten this long after its right is free

# KEYS: the model's leases, the account's, the change number, the fleet, for a probe's slot the right to
# probe its limit, and for a limit held back its group's turn. ARGV: lease, ttl ms, model cap, account cap,
# the proxies' channels' prefix, this proxy, the notice's tail, for a probe the ms the right is held, the
# prober's refused probes, the ms it is remembered after, and for a turn the ms it is held. Returns taken
# (0/1), the counts after, the change number, for a probe the ms another proxy holds the right still (0:
# not held elsewhere), the limit's refused probes, and the ms another proxy holds the turn still. A lease
# taken is a change: numbered, and told to the other proxies.
CONFIRM: Final = (
    _NOW
    + _TELL
    + """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
local n = redis.call('ZCARD', KEYS[1])
local total = redis.call('ZCARD', KEYS[2])
local refused = 0
local function held_elsewhere(key)
  local holder = redis.call('HMGET', key, 'lease', 'free_at')
  local free_at = tonumber(holder[2]) or 0
  if free_at > now and string.sub(holder[1] or '', 1, #ARGV[6] + 1) ~= ARGV[6] .. '#' then
    return free_at - now
  end
  return 0
end
if #KEYS >= 5 then
  refused = math.max(tonumber(redis.call('HGET', KEYS[5], 'refused')) or 0, tonumber(ARGV[9]))
  local held = held_elsewhere(KEYS[5])
  if held > 0 then
    return {0, n, total, tonumber(redis.call('GET', KEYS[3]) or 0), held, refused, 0}
  end
end
if #KEYS >= 6 then
  local held = held_elsewhere(KEYS[6])
  if held > 0 then
    return {0, n, total, tonumber(redis.call('GET', KEYS[3]) or 0), 0, refused, held}
  end
end
if n >= tonumber(ARGV[3]) or total >= tonumber(ARGV[4]) then
  return {0, n, total, tonumber(redis.call('GET', KEYS[3]) or 0), 0, refused, 0}
end
if #KEYS >= 5 then
  redis.call('HSET', KEYS[5], 'lease', ARGV[1], 'free_at', now + tonumber(ARGV[8]), 'refused', refused)
  redis.call('PEXPIRE', KEYS[5], tonumber(ARGV[8]) + tonumber(ARGV[10]))
end
if #KEYS >= 6 then
  redis.call('HSET', KEYS[6], 'lease', ARGV[1], 'free_at', now + tonumber(ARGV[11]))
  redis.call('PEXPIRE', KEYS[6], tonumber(ARGV[11]) + 1000)
end
local expiry = now + tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], expiry, ARGV[1])
redis.call('ZADD', KEYS[2], expiry, ARGV[1])
local seq = redis.call('INCR', KEYS[3])
tell(ARGV[5], ARGV[6], seq .. ' + ' .. ARGV[7])
return {1, n + 1, total + 1, seq, 0, refused, 0}
"""
)

# KEYS: the right to probe a limit, and for a limit held back its group's turn. ARGV: the lease they were
# taken under, the ms the right is held from now (0: it is freed), the prober's refused probes, the ms it is
# remembered after, the channel every proxy hears, the notice's tail, and the ms the turn is held from now
# (0: it is freed). Only the proxy whose lease holds one changes it; returns 1 if it changed the right.
PROBE_ANSWERED: Final = (
    _NOW
    + """
if #KEYS >= 2 and redis.call('HGET', KEYS[2], 'lease') == ARGV[1] then
  local turn = tonumber(ARGV[7])
  if turn <= 0 then
    redis.call('DEL', KEYS[2])
  else
    redis.call('HSET', KEYS[2], 'free_at', now + turn)
    redis.call('PEXPIRE', KEYS[2], turn + 1000)
  end
end
if redis.call('HGET', KEYS[1], 'lease') ~= ARGV[1] then
  return 0
end
local held = tonumber(ARGV[2])
if held <= 0 then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[5], '0 ! ' .. ARGV[6])
else
  redis.call('HSET', KEYS[1], 'free_at', now + held, 'refused', ARGV[3])
  redis.call('PEXPIRE', KEYS[1], held + tonumber(ARGV[4]))
end
return 1
"""
)

# KEYS: the model's leases, the account's, the change number, the fleet. ARGV: lease, the proxies' channels'
# prefix, this proxy, the notice's tail. Returns what CONFIRM does: whether the lease was there, the counts
# after, the change number.
RELEASE: Final = (
    _NOW
    + _TELL
    + """
local gone = redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
local seq
if gone > 0 then
  seq = redis.call('INCR', KEYS[3])
  tell(ARGV[2], ARGV[3], seq .. ' - ' .. ARGV[4])
else
  seq = tonumber(redis.call('GET', KEYS[3]) or 0)
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
return {gone, redis.call('ZCARD', KEYS[1]), redis.call('ZCARD', KEYS[2]), seq}
"""
)

# KEYS: the account's leases, the fleet, the change number, then every model's leases. ARGV: ttl ms,
# proxy id, how long a silent proxy counts as alive (ms), XX (renew only the leases still there: one
# released meanwhile stays released) or ALL (write them all again: after a reconnection), then (index of
# the model's key, lease) for each lease held here. Renews this proxy's leases, reaps expired ones, and
# tallies the fleet: the counts, the account's leases, the live proxies with when each was last seen, the
# change number, and the time (ms, Redis's clock).
TICK: Final = (
    _NOW
    + """
local expiry = now + tonumber(ARGV[1])
redis.call('ZADD', KEYS[2], now, ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - tonumber(ARGV[3]))
for i = 5, #ARGV, 2 do
  if ARGV[4] == 'XX' then
    redis.call('ZADD', KEYS[tonumber(ARGV[i])], 'XX', expiry, ARGV[i + 1])
    redis.call('ZADD', KEYS[1], 'XX', expiry, ARGV[i + 1])
  else
    redis.call('ZADD', KEYS[tonumber(ARGV[i])], expiry, ARGV[i + 1])
    redis.call('ZADD', KEYS[1], expiry, ARGV[i + 1])
  end
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local counts = {}
for i = 4, #KEYS do
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now)
  counts[#counts + 1] = redis.call('ZCARD', KEYS[i])
end
local seq = tonumber(redis.call('GET', KEYS[3]) or 0)
local proxies = redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')
return {counts, redis.call('ZRANGE', KEYS[1], 0, -1), proxies, seq, now}
"""
)

# KEYS: the account's leases, the fleet, the change number, then the models' leases of ARGV. ARGV: proxy id,
# channel, then (index of the model's key, lease) for each lease held here. A proxy leaving gives
# everything back.
LEAVE: Final = """
redis.call('ZREM', KEYS[2], ARGV[1])
for i = 3, #ARGV, 2 do
  redis.call('ZREM', KEYS[tonumber(ARGV[i])], ARGV[i + 1])
  redis.call('ZREM', KEYS[1], ARGV[i + 1])
end
redis.call('PUBLISH', ARGV[2], '0 * ' .. ARGV[1])
return 1
"""


# KEYS: the learned limits' hash. ARGV: (field, JSON row) pairs. A row replaces the one there only when it
# changed later (`changedAt`, wall clock): the last change wins, whichever proxy writes last.
PUSH_LIMITS: Final = """
for i = 1, #ARGV, 2 do
  local old = redis.call('HGET', KEYS[1], ARGV[i])
  if not old or cjson.decode(old).changedAt < cjson.decode(ARGV[i + 1]).changedAt then
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
  end
end
return redis.call('HGETALL', KEYS[1])
"""


NOBODY_NAMED: Final = "-"  # `to` on the channel when a notice names no proxy (no proxy id is "-")


def notice_tail(notice: Notice) -> str:
    """A notice as the channel carries it, after its change number and op (the scripts add those)."""
    waited = round(notice.waited * 1000)
    to = notice.to or NOBODY_NAMED
    serving = _counts_tail(notice.serving)
    seen = "|".join(_seen_tail(s) for s in notice.seen)
    return (
        f"{notice.proxy} {notice.model} {notice.waiting} {notice.level} {waited} {to} "
        f"{serving} {seen or NOBODY_NAMED} {_counts_tail(notice.overdue)}"
    )


def _seen_tail(seen: Seen) -> str:
    """A verdict as `c7:20`, `r8:22m~250`: kind, levels, probe, and the ms since its request was sent."""
    age = "" if seen.age is None else f"~{round(max(seen.age, 0.0) * 1000)}"
    return f"{seen.kind[0]}{seen.level}:{seen.total}{_PROBES.get(seen.probe, '')}{age}"


def _counts_tail(counts: Mapping[str, int] | None) -> str:
    """Counts per model as `model=n,...` (`-` for none)."""
    return ",".join(f"{model}={n}" for model, n in (counts or {}).items() if _plain(model)) or NOBODY_NAMED


def _counts(text: str) -> dict[str, int]:
    counts = {}
    if text != NOBODY_NAMED:
        for pair in text.split(","):
            model, _, count = pair.partition("=")
            counts[model] = int(count)
    return counts


def parse_notice(text: str) -> Notice | None:
    """`seq op proxy [model waiting level waited_ms to serving seen overdue]` from the channel (`* proxy`: it
    left; `serving` and `overdue` as `model=n,...`; `seen` as `c7:20|s8:22m~250|r3:9a~3010...`: clean, stall,
    refused at a level on its model and on the account, a model's or the account's probe, the ms since its
    request was sent (a verdict without them: not said); `-` for none; earlier
    versions' notices, without `overdue`, or without the last three, are read too); None for anything
    else."""
    parts = text.split(" ")
    try:
        if len(parts) == 3:
            return Notice(int(parts[0]), parts[1], parts[2])
        serving: dict[str, int] | None = None
        overdue: dict[str, int] | None = None
        seen: list[Seen] = []
        if len(parts) == 11:
            overdue = _counts(parts.pop())
        if len(parts) == 10:
            serving = _counts(parts[8])
            if parts[9] != NOBODY_NAMED:
                for item in parts[9].split("|"):
                    match = _SEEN.fullmatch(item)
                    if match is None:
                        raise ValueError(item)
                    kind, level, total, probe, age = match.groups()
                    seconds = None if age is None else int(age) / 1000
                    seen.append(Seen(_KINDS[kind], int(level), int(total), _PROBE_OF.get(probe), seconds))
            parts = parts[:8]
        seq, op, proxy, model, waiting, level, waited, to = parts
        to = "" if to == NOBODY_NAMED else to
        return Notice(
            int(seq),
            op,
            proxy,
            model,
            int(waiting),
            int(level),
            int(waited) / 1000,
            to,
            serving,
            tuple(seen),
            overdue,
        )
    except ValueError:
        return None


_SEEN: Final = re.compile(r"([crs])(\d+):(\d+)([ma]?)(?:~(\d+))?")
_KINDS: Final[dict[str, Literal["clean", "refused", "stall"]]] = {"c": "clean", "r": "refused", "s": "stall"}
_PROBES: Final[dict[Probe | None, str]] = {"model": "m", "account": "a"}
_PROBE_OF: Final[dict[str, Probe]] = {"m": "model", "a": "account"}


def _plain(model: str) -> bool:
    """Whether a model's name can travel in a notice's `serving` (one that cannot is not said: counted as
    not served by the others, which only lowers what their clean answers say)."""
    return bool(model) and not any(c in model for c in " ,=")
