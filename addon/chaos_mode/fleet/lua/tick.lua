-- KEYS: the account's leases, the fleet, the change number, each live proxy's lease (ms), then every
-- model's leases. ARGV: ttl ms, proxy id, how long this proxy counts as alive unseen (ms), XX (renew only the
-- leases still there: one released meanwhile stays released) or ALL (write them all again: after a
-- reconnection), then (index of the model's key, lease) for each lease held here. Renews this proxy's
-- leases, reaps expired ones and the proxies not seen within their own time, and tallies the fleet: the
-- counts, the account's leases, the live proxies with when each was last seen and its time, the change
-- number, and the time (ms, Redis's clock).
local expiry = now + tonumber(ARGV[1])
redis.call('ZADD', KEYS[2], now, ARGV[2])
redis.call('HSET', KEYS[4], ARGV[2], ARGV[3])
local proxies = {}
local seen = redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')
for i = 1, #seen, 2 do
  local alive = tonumber(redis.call('HGET', KEYS[4], seen[i])) or tonumber(ARGV[3])
  if tonumber(seen[i + 1]) < now - alive then
    redis.call('ZREM', KEYS[2], seen[i])
    redis.call('HDEL', KEYS[4], seen[i])
  else
    proxies[#proxies + 1] = seen[i]
    proxies[#proxies + 1] = seen[i + 1]
    proxies[#proxies + 1] = alive
  end
end
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
for i = 5, #KEYS do
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now)
  counts[#counts + 1] = redis.call('ZCARD', KEYS[i])
end
local seq = tonumber(redis.call('GET', KEYS[3]) or 0)
return {counts, redis.call('ZRANGE', KEYS[1], 0, -1), proxies, seq, now}
