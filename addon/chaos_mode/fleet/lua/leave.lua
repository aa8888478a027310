-- KEYS: the account's leases, the fleet, the change number, the live proxies' times, then the models' leases
-- of ARGV. ARGV: proxy id, channel, then (index of the model's key, lease) for each lease held here. A proxy
-- leaving gives everything back.
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[4], ARGV[1])
for i = 3, #ARGV, 2 do
  redis.call('ZREM', KEYS[tonumber(ARGV[i])], ARGV[i + 1])
  redis.call('ZREM', KEYS[1], ARGV[i + 1])
end
redis.call('PUBLISH', ARGV[2], '0 * ' .. ARGV[1])
return 1
