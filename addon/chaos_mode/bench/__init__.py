"""Benchmarks of chaos mode: the pool's per-request cost (and, later, the swarm benchmark and demo)."""
