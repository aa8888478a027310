"""Benchmarks: the swarm (`python -m chaos_mode_tools.bench`), the field presets, the fleet, the addon's cost,
the soak, the quota, the prompt cache, the demo; `docs/benchmarks.md` lists them with their figures."""
