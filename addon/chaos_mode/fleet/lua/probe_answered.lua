-- KEYS: the right to probe a limit. ARGV: the lease it was taken under, the ms it is held from now (0: it
-- is freed), the prober's refused probes, the ms it is remembered after, the channel every proxy hears, and
-- the notice's tail. Only the proxy whose lease holds it changes it; returns 1 if it changed it.
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
