-- KEYS: the right to probe a limit, and for a limit held back its group's turn. ARGV: the lease they were
-- taken under, the ms the right is held from now (0: it is freed), the prober's refused probes, the ms it is
-- remembered after, the channel every proxy hears, the notice's tail, and the ms the turn is held from now
-- (0: it is freed). Only the proxy whose lease holds one changes it; returns 1 if it changed the right.
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
