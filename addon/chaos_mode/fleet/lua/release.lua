-- KEYS: the model's leases, the account's, the change number, the fleet. ARGV: lease, the proxies' channels'
-- prefix, this proxy, the notice's tail. Returns what confirm.lua does: whether the lease was there, the counts
-- after, the change number.
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
