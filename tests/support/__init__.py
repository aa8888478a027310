"""Helpers the tests share: fake clocks, the seed catalog as the tests state it, JSON bodies, certificates,
Redis processes."""
