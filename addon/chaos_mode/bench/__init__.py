"""Benchmarks: the swarm benchmark (`python -m chaos_mode.bench`), its field presets, the fleet, the demo,
the soak, the addon's cost; `docs/benchmarks.md` lists them with their current figures."""
