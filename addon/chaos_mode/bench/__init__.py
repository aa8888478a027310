"""Benchmarks of chaos mode: the swarm benchmark (`python -m chaos_mode.bench`), the demo
(`python -m chaos_mode.bench.demo`) and the pool's per-request cost (`pool_bench`).

Their HTTP client, httpx, is the `tools` extra (`pip install -e '.[tools]'`): the addon never needs it."""

import importlib.util
import sys

if importlib.util.find_spec("httpx") is None:
    sys.exit(
        "chaos_mode.bench needs httpx, the development tools' client: pip install -e '.[tools]' "
        "(or pip install httpx)"
    )
