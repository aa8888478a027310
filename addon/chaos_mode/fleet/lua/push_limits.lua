-- KEYS: the learned limits' hash. ARGV: (field, JSON row) pairs. A row replaces the one there only when it
-- changed later (`changedAt`, wall clock): the last change wins, whichever proxy writes last.
for i = 1, #ARGV, 2 do
  local old = redis.call('HGET', KEYS[1], ARGV[i])
  if not old or cjson.decode(old).changedAt < cjson.decode(ARGV[i + 1]).changedAt then
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
  end
end
return redis.call('HGETALL', KEYS[1])
