-- KEYS: the model's leases, the account's, the change number, the fleet, and for a probe's slot the right
-- to probe its limit. ARGV: lease, ttl ms, model cap, account cap, the proxies' channels' prefix, this
-- proxy, the notice's tail, and for a probe the ms the right is held, the prober's refused probes and the
-- ms it is remembered after. Returns taken (0/1), the counts after, the change number, for a probe the ms
-- another proxy holds the right still (0: not held elsewhere), and the limit's refused probes. A lease
-- taken is a change: numbered, and told to the other proxies.
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
    return {0, n, total, tonumber(redis.call('GET', KEYS[3]) or 0), held, refused}
  end
end
if n >= tonumber(ARGV[3]) or total >= tonumber(ARGV[4]) then
  return {0, n, total, tonumber(redis.call('GET', KEYS[3]) or 0), 0, refused}
end
if #KEYS >= 5 then
  redis.call('HSET', KEYS[5], 'lease', ARGV[1], 'free_at', now + tonumber(ARGV[8]), 'refused', refused)
  redis.call('PEXPIRE', KEYS[5], tonumber(ARGV[8]) + tonumber(ARGV[10]))
end
local expiry = now + tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], expiry, ARGV[1])
redis.call('ZADD', KEYS[2], expiry, ARGV[1])
local seq = redis.call('INCR', KEYS[3])
tell(ARGV[5], ARGV[6], seq .. ' + ' .. ARGV[7])
return {1, n + 1, total + 1, seq, 0, refused}
