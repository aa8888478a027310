"""One routed request: the one owner of its slot, its attempts, failover, hedging, our 429."""
