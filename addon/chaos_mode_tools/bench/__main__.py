"""`python -m chaos_mode_tools.bench`: the swarm benchmark — baseline vs chaos mode vs the ideal bound,
overhead, and the pure core's cost; or (`--field`) chaos mode against true limits unlike the catalog's. Prints
a table, writes JSON (`--json`) and an SVG plot (`--svg`)."""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from chaos_mode_tools.bench.cost.overhead import OverheadOptions
from chaos_mode_tools.bench.field.learning_args import HELP, parse_learning
from chaos_mode_tools.bench.field.presets import PRESETS, parse_presets
from chaos_mode_tools.bench.field.report import render_field
from chaos_mode_tools.bench.field.run import FieldOptions, run_field
from chaos_mode_tools.bench.plot import render_field_svg, render_svg
from chaos_mode_tools.bench.swarm.report import render
from chaos_mode_tools.bench.swarm.run import BenchOptions, agent_models, run_benchmark, stop_on_sigterm
from chaos_mode_tools.bench.swarm.scenarios import KNOWN, SCENARIOS, parse_scenarios
from chaos_mode_tools.bench.swarm.workload import WorkloadSpec, parse_mix

# name: (full run, --quick); an option given on the command line wins over both.
_SPEC = WorkloadSpec()
DEFAULTS: dict[str, tuple[Any, Any]] = {
    "agents": (_SPEC.agents, 12),
    "requests": (_SPEC.requests, 2),
    "mix": (str(_SPEC.mix), "1:2:7"),
    "latency_ms": (_SPEC.latency_ms, 100.0),
    "tokens": (_SPEC.output_tokens, 5),
    "token_interval_ms": (_SPEC.token_interval_ms, 20.0),
    "jitter": (_SPEC.jitter, 0.5),
    "reject_delay_ms": (3000.0, 1000.0),
    "seed": (1, 1),
    "overhead_rounds": (6, 2),
    "overhead_requests": (200, 80),
}


# Options that are WorkloadSpec fields of the same name (--tokens is `output_tokens`).
WORKLOAD_ARGS = ("agents", "requests", "mix", "latency_ms", "token_interval_ms", "jitter", "seed")


def parse_seeds(text: str) -> tuple[int, ...]:
    """Workload seeds, in order, each once: `1,2,3`, `1-5` or both (`1-3,7`)."""
    seeds: list[int] = []
    for part in text.split(","):
        first, dash, last = part.strip().partition("-")
        try:
            span = range(int(first), int(last if dash else first) + 1)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{part.strip()!r} is not a seed or a range of seeds") from None
        if not span or len(span) > 100:
            raise argparse.ArgumentTypeError(f"{part.strip()!r}: a range low-high of at most 100 seeds")
        seeds.extend(seed for seed in span if seed not in seeds)
    return tuple(seeds)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m chaos_mode_tools.bench",
        description=(
            "Start the z.ai simulator (catalog limits) and, per scenario, a fresh mitmdump; run the same "
            "swarm of streamed Anthropic-Messages requests through each; report makespan, throughput, 429s, "
            "TTFT, queue wait, per-model share and the gap to the ideal makespan bound; then the addon's "
            "overhead against plain mitmdump and the pure core's cost."
        ),
    )
    full = {k: v[0] for k, v in DEFAULTS.items()}
    p.add_argument("--agents", type=int, help=f"concurrent agents (default {full['agents']})")
    p.add_argument("--requests", type=int, help=f"sequential requests per agent (default {full['requests']})")
    p.add_argument(
        "--mix", type=parse_mix, help="heavy:medium:light (opus:sonnet:haiku) weights (default 1:2:7)"
    )
    p.add_argument(
        "--latency-ms", type=float, help=f"mean time to first token (default {full['latency_ms']:g})"
    )
    p.add_argument("--tokens", type=int, help=f"mean output tokens per request (default {full['tokens']})")
    p.add_argument(
        "--token-interval-ms", type=float, help=f"time between tokens (default {full['token_interval_ms']:g})"
    )
    p.add_argument("--jitter", type=float, help="latency and tokens vary uniformly by +-this fraction (0.5)")
    p.add_argument(
        "--reject-delay-ms",
        type=float,
        help=f"how long the simulator takes to send a 429, as z.ai (default {full['reject_delay_ms']:g})",
    )
    p.add_argument(
        "--retry-after", type=float, help="Retry-After seconds on the simulator's 429s (default: none)"
    )
    p.add_argument(
        "--scenarios",
        type=parse_scenarios,
        help=f"comma-separated, in order, of {','.join(KNOWN)} (default all: {','.join(SCENARIOS)})",
    )
    p.add_argument(
        "--field",
        type=parse_presets,
        metavar="PRESETS",
        help="instead of the scenarios: chaos mode against a simulator whose true limits differ from the "
        f"catalog's, comma-separated presets of {','.join(PRESETS)} (or all); each has its own swarm "
        "of 1 s streamed requests, which --agents, --requests and the timing options change",
    )
    p.add_argument(
        "--twins",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="after a field preset that has one (noisy, filtered), its twin: the same run without the shape "
        "under test, for comparison (default on)",
    )
    p.add_argument(
        "--field-deadline", type=float, default=150.0, help="seconds one field preset may take (default 150)"
    )
    p.add_argument(
        "--rtt-ms",
        type=float,
        default=0.0,
        help="field presets: z.ai this far from the proxy, a round trip on every handshake and byte "
        "(devtools.distance; default 0: loopback)",
    )
    p.add_argument("--seed", type=int, help="workload seed (default 1)")
    p.add_argument(
        "--seeds",
        type=parse_seeds,
        default=(),
        metavar="SEEDS",
        help="field presets: run each preset (and its twin) once per workload seed, e.g. 1,2,3 or 1-5, and "
        "report the median and range across them (a preset's figure moves with the order its agents' "
        "requests come in)",
    )
    p.add_argument(
        "--learning", action="append", default=[], metavar="KEY=VALUE", help=f"field presets: {HELP}"
    )
    p.add_argument(
        "--max-attempts", type=int, default=60, help="attempts per request before an agent gives up"
    )
    p.add_argument("--json", type=Path, metavar="FILE", help="write the results as JSON")
    p.add_argument(
        "--svg", type=Path, metavar="FILE", help="write a plot: makespan vs the ideal, per-model share"
    )
    p.add_argument("--quick", action="store_true", help="a small, fast run (smaller swarm, shorter timings)")
    p.add_argument(
        "--overhead",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="measure the addon against plain mitmdump (default on)",
    )
    p.add_argument("--overhead-rounds", type=int, help="alternating rounds per proxy (default 6)")
    p.add_argument(
        "--overhead-requests",
        type=int,
        help="small requests per round and proxy (default 200); a quarter as many streams (at least 4)",
    )
    p.add_argument(
        "--pool-bench",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="include the pure core's figure from chaos_mode_tools.bench.cost.pool (default on)",
    )
    return p


def options_from(args: argparse.Namespace, argv: Sequence[str]) -> BenchOptions:
    column = 1 if args.quick else 0

    def pick(name: str) -> Any:
        value = getattr(args, name, None)
        return DEFAULTS[name][column] if value is None else value

    mix = args.mix if args.mix is not None else parse_mix(DEFAULTS["mix"][column])
    spec = WorkloadSpec(
        agents=pick("agents"),
        requests=pick("requests"),
        mix=mix,
        latency_ms=pick("latency_ms"),
        output_tokens=pick("tokens"),
        token_interval_ms=pick("token_interval_ms"),
        jitter=pick("jitter"),
        seed=pick("seed"),
    )
    overhead = None
    if args.overhead:
        requests = pick("overhead_requests")
        rounds = pick("overhead_rounds")
        overhead = OverheadOptions(rounds=rounds, requests=requests, streams=max(4, requests // 4))
    return BenchOptions(
        workload=spec,
        scenarios=args.scenarios or list(SCENARIOS.values()),
        reject_delay_ms=pick("reject_delay_ms"),
        retry_after=args.retry_after,
        max_attempts=args.max_attempts,
        overhead=overhead,
        pool_bench=((2, 1_000) if args.quick else (5, 10_000)) if args.pool_bench else None,
        command=shlex.join(["python", "-m", "chaos_mode_tools.bench", *argv]),
    )


def field_options(args: argparse.Namespace, argv: Sequence[str]) -> FieldOptions:
    """The field run's options: each preset's own workload, changed only by what the command line gives."""
    given = {arg: getattr(args, arg) for arg in (*WORKLOAD_ARGS, "tokens") if getattr(args, arg) is not None}
    overrides = {("output_tokens" if arg == "tokens" else arg): value for arg, value in given.items()}
    return FieldOptions(
        presets=args.field,
        overrides=overrides,
        reject_delay_ms=DEFAULTS["reject_delay_ms"][0]
        if args.reject_delay_ms is None
        else args.reject_delay_ms,
        retry_after=args.retry_after,
        max_attempts=args.max_attempts,
        deadline=args.field_deadline,
        twins=args.twins,
        rtt=args.rtt_ms / 1000,
        seeds=args.seeds,
        learning=args.learning,
        command=shlex.join(["python", "-m", "chaos_mode_tools.bench", *argv]),
    )


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    cli = parser()
    args = cli.parse_args(argv)
    if args.field and args.scenarios:
        cli.error("--field and --scenarios: choose one")
    if args.seeds and (not args.field or args.seed is not None):
        cli.error("--seeds: only with --field, and instead of --seed")
    if args.learning and not args.field:
        cli.error("--learning: only with --field (the scenarios run on the default learning)")
    try:
        args.learning = parse_learning(args.learning)
    except ValueError as exc:
        cli.error(str(exc))
    options = options_from(args, argv)
    try:
        for scenario in options.scenarios:
            agent_models(scenario, options.workload.agents)
    except ValueError as exc:
        cli.error(str(exc))

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    try:
        if args.field:
            doc = asyncio.run(stop_on_sigterm(run_field(field_options(args, argv), log)))
        else:
            doc = asyncio.run(stop_on_sigterm(run_benchmark(options, log)))
    except (KeyboardInterrupt, asyncio.CancelledError):
        log("stopped")
        return 130
    except TimeoutError:
        log(f"stopped: a field preset took longer than --field-deadline {args.field_deadline:g} s")
        return 1
    runs = doc["presets"] if args.field else doc["scenarios"]
    print(render_field(doc) if args.field else render(doc))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
        log(f"wrote {args.json}")
    if args.svg:
        args.svg.parent.mkdir(parents=True, exist_ok=True)
        args.svg.write_text(render_field_svg(doc) if args.field else render_svg(doc), encoding="utf-8")
        log(f"wrote {args.svg}")
    failed = any(not ok for s in runs for ok in s["checks"].values())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
