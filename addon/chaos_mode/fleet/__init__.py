"""Several proxies on one account: the state URL, the Redis protocol and store, shared slots and cooldowns."""
