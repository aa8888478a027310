"""What the proxies of a fleet write to and read from Redis: the Lua scripts and the notices' format.

The protocol between proxies, versions included: keys (with a prefix, `chaos:` by default)
`slots:{model}` and `account` (sorted sets of lease ids scored by expiry, ms on Redis's clock), `fleet`
(proxy ids scored by when each was last seen), `seq` (the change number), `limits` (a hash of learned
limits); channels `freed:{proxy id}` (the leases the others take and give back), `freed` (what every
proxy hears: a request began to wait, a proxy left) and `blocks` (cooldowns and the like, JSON). Pure
text and parsing; `redis_state` runs it.
"""

from __future__ import annotations

from typing import Final

from chaos_mode.fleet.slots import Notice

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

# KEYS: the model's leases, the account's, the change number, the fleet. ARGV: lease, ttl ms, model cap,
# account cap, the proxies' channels' prefix, this proxy, the notice's tail. A lease taken is a change:
# numbered, and told to the other proxies.
CONFIRM: Final = (
    _NOW
    + _TELL
    + """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
local n = redis.call('ZCARD', KEYS[1])
local total = redis.call('ZCARD', KEYS[2])
if n >= tonumber(ARGV[3]) or total >= tonumber(ARGV[4]) then
  return {0, n, total, tonumber(redis.call('GET', KEYS[3]) or 0)}
end
local expiry = now + tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], expiry, ARGV[1])
redis.call('ZADD', KEYS[2], expiry, ARGV[1])
local seq = redis.call('INCR', KEYS[3])
tell(ARGV[5], ARGV[6], seq .. ' + ' .. ARGV[7])
return {1, n + 1, total + 1, seq}
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
    return (
        f"{notice.proxy} {notice.model} {notice.waiting} {notice.level} {waited} {notice.to or NOBODY_NAMED}"
    )


def parse_notice(text: str) -> Notice | None:
    """`seq op proxy [model waiting level waited_ms to]` from the channel (`* proxy`: it left); None for
    anything else."""
    parts = text.split(" ")
    try:
        if len(parts) == 3:
            return Notice(int(parts[0]), parts[1], parts[2])
        seq, op, proxy, model, waiting, level, waited, to = parts
        to = "" if to == NOBODY_NAMED else to
        return Notice(int(seq), op, proxy, model, int(waiting), int(level), int(waited) / 1000, to)
    except ValueError:
        return None
