"""Benchmarks of chaos mode: the swarm benchmark (`python -m chaos_mode.bench`), the demo
(`python -m chaos_mode.bench.demo`) and the pool's per-request cost (`pool_bench`)."""
