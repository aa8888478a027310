"""Micro-benchmark of the limit learner: `LevelEvidence.limit` on a 30-level account, in µs per call.

Run `python -m chaos_mode_tools.bench.cost.learner [--number N] [--against FILE]`. Each shape is 600 verdicts
spread over the 30 levels (20 per second); `limit` is what the pool calls on every verdict. `--against` loads
another version of `learning/evidence.py` (another checkout's) and times both side by side, interleaved, in
the same process: a shared machine's load then weighs on both alike.
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import sys
import timeit
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

from chaos_mode.learning import evidence

LEVELS = 30
COST = 3.0  # a refusal's cost in slot-times: 3-s refusals, 1-s requests
SHAPES: dict[str, Callable[[int], float]] = {  # the refusal rate at each level
    "all clean": lambda level: 0.0,
    "3% noise, a band from 26": lambda level: 0.03 if level < 26 else 0.3,
    "10% at every level": lambda level: 0.1,
}


def table(module: ModuleType, rate: Callable[[int], float]) -> Any:
    """An account's evidence (no configured limit) after 600 verdicts at random levels."""
    limit = module.LevelEvidence(None, LEVELS, 600.0)
    rng = random.Random(1)
    for step in range(600):
        level = rng.randint(1, LEVELS)
        limit.observe(level, refused=rng.random() < rate(level), now=step * 0.05)
    return limit


def load(path: Path) -> ModuleType:
    """Another version of `learning/evidence.py`, as a module of its own."""
    spec = importlib.util.spec_from_file_location("evidence_against", path)
    if spec is None or spec.loader is None:
        raise ValueError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def run(modules: dict[str, ModuleType], number: int, repeats: int = 15) -> list[str]:
    """One line per shape: the least µs per `limit` call of each module, and the limit it gives."""
    lines = []
    for shape, rate in SHAPES.items():
        limits = {name: table(module, rate) for name, module in modules.items()}
        best = dict.fromkeys(modules, float("inf"))
        for _ in range(repeats):  # interleaved
            for name, limit in limits.items():
                seconds = timeit.timeit(partial(limit.limit, 30.0, COST), number=number)
                best[name] = min(best[name], seconds / number * 1e6)
        figures = ", ".join(
            f"{name} {best[name]:.1f} µs (limit {limits[name].limit(30.0, COST)})" for name in limits
        )
        lines.append(f"{shape:<26} {figures}")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m chaos_mode_tools.bench.cost.learner", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--number", type=int, default=1000, help="calls per repeat (default 1000)")
    parser.add_argument("--against", type=Path, metavar="FILE", help="another evidence.py to time alongside")
    args = parser.parse_args(argv)
    modules = {"this": evidence}
    if args.against is not None:
        modules["against"] = load(args.against)
    print("\n".join(run(modules, max(args.number, 1))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
