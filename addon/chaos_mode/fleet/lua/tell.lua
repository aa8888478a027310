-- tell(prefix, me, message): `message` on the own channel (`prefix` .. id) of every proxy of the fleet
-- (KEYS[4]) but this one (`me`).
local function tell(prefix, me, message)
  for _, proxy in ipairs(redis.call('ZRANGE', KEYS[4], 0, -1)) do
    if proxy ~= me then
      redis.call('PUBLISH', prefix .. proxy, message)
    end
  end
end
