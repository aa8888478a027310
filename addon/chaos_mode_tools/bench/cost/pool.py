"""Micro-benchmark of the pool's hot path: `try_acquire` + `release`, in µs per request.

Run `python -m chaos_mode_tools.bench.cost.pool [--repeats N] [--number N] [--json FILE]`. Each case runs
on a pool already half full (so the strategies see uneven load) with light requests (every model
eligible: the most candidates), for the built-in 8-model catalog and a synthetic 64-model one, for each
strategy, with and without a `RequestInfo` (with one, the cost guard is on and every cost is computed
per request).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import timeit
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from chaos_mode.config.schema import ModelRouting, parse_config
from chaos_mode.routing.pool import ChaosPool, RequestInfo, Ticket
from chaos_mode.routing.strategies import STRATEGIES
from chaos_mode.zai.catalog import EARLY_2026_CATALOG, MODEL_TIERS, models_block

REQUEST = RequestInfo(input_tokens=20_000, max_output_tokens=4_096)
MAX_COST = 0.05  # $ per request: filters part of each catalog for REQUEST


def synthetic_catalog(size: int = 64, seed: int = 64) -> dict[str, dict[str, Any]]:
    """`size` models spread over the three tiers, with varied limits and prices (reproducible)."""
    rng = random.Random(seed)
    return {
        f"synth-{i:02d}": {
            "tier": MODEL_TIERS[i % len(MODEL_TIERS)],
            "maxConcurrency": rng.randint(1, 10),
            "inputPrice": round(rng.uniform(0.0, 2.5), 2),
            "outputPrice": round(rng.uniform(0.0, 9.0), 2),
            "free": i % 16 == 15,
        }
        for i in range(size)
    }


CATALOGS: dict[str, dict[str, dict[str, Any]] | None] = {
    "seed-8": None,  # the early-2026 catalog (the design's 8 models)
    "synthetic-64": synthetic_catalog(),
}


def bench_config(catalog: dict[str, dict[str, Any]] | None, strategy: str) -> ModelRouting:
    block: dict[str, Any] = {"chaosMode": {"strategy": strategy, "maxCostPerRequest": MAX_COST}}
    block["models"] = models_block(EARLY_2026_CATALOG) if catalog is None else catalog
    return parse_config({"modelRouting": block})


def half_full_pool(config: ModelRouting) -> ChaosPool:
    pool = ChaosPool(config, rng=random.Random(0))
    for _ in range(config.total_capacity // 2):
        if pool.try_acquire(Ticket("light")) is None:
            break
    return pool


def measure(pool: ChaosPool, request: RequestInfo | None, repeats: int, number: int) -> list[float]:
    """µs per try_acquire + release, one figure per repeat."""
    try_acquire, release = pool.try_acquire, pool.release

    def one() -> None:
        selection = try_acquire(Ticket("light", request=request))
        if selection is None:
            raise RuntimeError("the benchmark pool ran out of slots")
        release(selection)

    timer = timeit.Timer(one)
    timer.timeit(min(number, 1000))  # warm up
    return [total / number * 1e6 for total in timer.repeat(repeat=repeats, number=number)]


def run_pool_bench(repeats: int = 5, number: int = 10_000) -> list[dict[str, Any]]:
    """One row per (catalog, strategy, with/without RequestInfo): min and median µs per request."""
    rows: list[dict[str, Any]] = []
    for catalog_name, catalog in CATALOGS.items():
        for strategy in STRATEGIES:
            config = bench_config(catalog, strategy)
            for request in (None, REQUEST):
                pool = half_full_pool(config)
                held = pool.in_flight()
                figures = measure(pool, request, repeats, number)
                if pool.in_flight() != held:
                    raise RuntimeError("try_acquire/release left the pool changed")
                rows.append(
                    {
                        "catalog": catalog_name,
                        "models": len(config.models),
                        "strategy": strategy,
                        "requestInfo": request is not None,
                        "inFlight": held,
                        "capacity": config.total_capacity,
                        "minUs": round(min(figures), 3),
                        "medianUs": round(statistics.median(figures), 3),
                    }
                )
    return rows


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    header = f"{'catalog':<14} {'strategy':<16} {'request':<8} {'load':>7} {'min µs':>8} {'median µs':>10}"
    lines = [header, "-" * len(header)]
    for row in rows:
        load = f"{row['inFlight']}/{row['capacity']}"
        lines.append(
            f"{row['catalog']:<14} {row['strategy']:<16} {'yes' if row['requestInfo'] else 'no':<8} "
            f"{load:>7} {row['minUs']:>8.2f} {row['medianUs']:>10.2f}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m chaos_mode_tools.bench.cost.pool",
        description="µs per ChaosPool.try_acquire + release, per catalog and strategy",
    )
    parser.add_argument("--repeats", type=int, default=5, help="timeit repeats per case (default 5)")
    parser.add_argument("--number", type=int, default=10_000, help="requests per repeat (default 10000)")
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write the rows as JSON to FILE")
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.number < 1:
        parser.error("--repeats and --number must be at least 1")
    rows = run_pool_bench(args.repeats, args.number)
    print(format_table(rows))
    if args.json is not None:
        args.json.write_text(
            json.dumps({"benchmark": "pool", "unit": "us/request", "rows": rows}, indent=2) + "\n"
        )
        print(f"wrote {args.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
