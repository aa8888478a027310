"""`python -m chaos_mode_tools.bench.demo`: the benchmark's machinery as a one-command offline demo.

Starts the z.ai simulator and mitmdump with chaos mode on, prints the dashboard's URL, runs a swarm with a
live progress line (requests done, in-flight by model from /api/status), runs the same swarm the way users
call z.ai today (chaos off, glm-4.7 / glm-4.5-air), prints the results table and exits (`--keep`: the
chaos proxy stays up until Ctrl-C, to look at the dashboard).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TextIO

from chaos_mode_tools.bench.swarm.agents import SwarmProgress
from chaos_mode_tools.bench.swarm.figures import add_speedups
from chaos_mode_tools.bench.swarm.report import scenario_table, share_table, workload_line
from chaos_mode_tools.bench.swarm.run import (
    BenchOptions,
    Ideal,
    ideal_for,
    measure_scenario,
    sim_settings,
    start_proxy,
    stop_on_sigterm,
    workload_doc,
)
from chaos_mode_tools.bench.swarm.scenarios import SCENARIOS, Scenario
from chaos_mode_tools.bench.swarm.workload import Workload, WorkloadSpec, make_workload, parse_mix
from chaos_mode_tools.devtools.client import httpx
from chaos_mode_tools.devtools.processes import ProxyProcess
from chaos_mode_tools.devtools.sim_process import SimProcess

Poll = Callable[[], Awaitable[Mapping[str, tuple[int, int]]]]  # model -> (in flight, capacity)


def short(model: str) -> str:
    return model.removeprefix("glm-")


def model_bars(in_flight: Mapping[str, tuple[int, int]]) -> str:
    """`4.7 ██░ 4.6 ███ …`: one cell per slot, filled for each request in flight."""
    return " ".join(
        f"{short(m)} {'█' * min(n, cap)}{'░' * max(cap - n, 0)}" for m, (n, cap) in in_flight.items()
    )


def progress_line(
    label: str, progress: SwarmProgress, in_flight: Mapping[str, tuple[int, int]], width: int
) -> str:
    total = max(progress.total, 1)
    filled = round(20 * progress.done / total)
    busy = sum(n for n, _ in in_flight.values())
    slots = sum(cap for _, cap in in_flight.values())
    line = (
        f"{label:<15} [{'#' * filled}{'.' * (20 - filled)}] {progress.done:>4}/{progress.total} "
        f"{progress.elapsed:5.1f} s  429s {progress.client_429:<4} in flight {busy:>2}/{slots}"
    )
    bars = model_bars(in_flight)
    return f"{line}  {bars}" if len(line) + 2 + len(bars) <= width else line


def status_poll(client: httpx.AsyncClient, url: str) -> Poll:
    """In-flight by model from the addon's /api/status."""

    async def poll() -> Mapping[str, tuple[int, int]]:
        data = (await client.get(url)).json()
        return {m: (int(v["inFlight"]), int(v["capacity"])) for m, v in data["modelDistribution"].items()}

    return poll


def sim_poll(client: httpx.AsyncClient, url: str) -> Poll:
    """In-flight by model from the simulator (chaos off: the addon does not hold slots)."""

    async def poll() -> Mapping[str, tuple[int, int]]:
        data = (await client.get(url + "/sim/stats")).json()
        return {m: (int(v["inFlight"]), int(v["limit"])) for m, v in data["models"].items()}

    return poll


async def show_progress(
    label: str, progress: SwarmProgress, poll: Poll, finished: asyncio.Event, out: TextIO
) -> None:
    """A progress line once a second until `finished` (rewritten in place on a terminal, else one line
    every 2 s), then a last one."""
    tty = out.isatty()
    width = shutil.get_terminal_size((120, 24)).columns - 1 if tty else 200
    in_flight: Mapping[str, tuple[int, int]] = {}
    tick = 0
    while True:
        with contextlib.suppress(httpx.HTTPError, ValueError, KeyError):
            in_flight = await poll()
        line = progress_line(label, progress, in_flight, width)
        if finished.is_set():
            print(("\r" + line + "\x1b[K") if tty else line, file=out, flush=True)
            return
        if tty:
            out.write("\r" + line + "\x1b[K")
            out.flush()
        elif tick % 2 == 0:
            print(line, file=out, flush=True)
        tick += 1
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(finished.wait(), 1.0)


async def run_with_progress(
    scenario: Scenario,
    workload: Workload,
    sim_url: str,
    proxy: ProxyProcess,
    ideal: Ideal,
    out: TextIO,
) -> dict[str, Any]:
    progress = SwarmProgress(total=workload.size)
    finished = asyncio.Event()
    async with httpx.AsyncClient(timeout=2.0) as client:
        poll = status_poll(client, proxy.status_url) if scenario.chaos else sim_poll(client, sim_url)
        ticker = asyncio.create_task(show_progress(scenario.name, progress, poll, finished, out))
        try:
            return await measure_scenario(scenario, workload, sim_url, proxy, ideal, progress=progress)
        finally:
            finished.set()
            await ticker


async def demo(options: BenchOptions, *, strategy: str, baseline: bool, keep: bool, out: TextIO) -> int:
    workload = make_workload(options.workload)
    ideal = ideal_for(workload)
    chaos = SCENARIOS[strategy]
    doc: dict[str, Any] = {"workload": workload_doc(workload, options), "ideal": ideal.doc()}
    print(
        "chaos-mode demo: a z.ai simulator, mitmdump with chaos mode, a swarm of agents (all offline)",
        file=out,
    )
    print(workload_line(doc), file=out)
    scenarios: list[dict[str, Any]] = []
    async with SimProcess(sim_settings(options)) as sim, start_proxy(sim.base_url, chaos) as proxy:
        print(f"simulator:  {sim.anthropic_base_url}", file=out)
        print(f"proxy:      {proxy.url}/api/anthropic  (ANTHROPIC_BASE_URL for a client)", file=out)
        print(f"dashboard:  http://127.0.0.1:{proxy.web_port}/   status JSON: {proxy.status_url}", file=out)
        print("", file=out)
        scenarios.append(await run_with_progress(chaos, workload, sim.base_url, proxy, ideal, out))
        if baseline:
            today = SCENARIOS["baseline"]
            async with start_proxy(sim.base_url, today) as plain:
                scenarios.append(await run_with_progress(today, workload, sim.base_url, plain, ideal, out))
        add_speedups(scenarios, reference="baseline" if baseline else chaos.name)
        doc["scenarios"] = scenarios
        print("", file=out)
        print("\n".join(scenario_table(doc)), file=out)
        print("", file=out)
        print("\n".join(share_table(scenarios)), file=out)
        bad = [f"{s['name']}: {k}" for s in scenarios for k, ok in s["checks"].items() if not ok]
        for line in bad:
            print(f"CHECK FAILED: {line}", file=out)
        if keep:
            print("", file=out)
            print(f"The chaos proxy stays up: http://127.0.0.1:{proxy.web_port}/  (Ctrl-C to stop)", file=out)
            await asyncio.Event().wait()  # until Ctrl-C or SIGTERM; the proxies stop on the way out
    return 1 if bad else 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m chaos_mode_tools.bench.demo", description=__doc__)
    spec = WorkloadSpec()
    p.add_argument("--agents", type=int, default=spec.agents, help=f"concurrent agents ({spec.agents})")
    p.add_argument(
        "--requests", type=int, default=spec.requests, help=f"sequential requests per agent ({spec.requests})"
    )
    p.add_argument("--mix", type=parse_mix, default=spec.mix, help=f"opus:sonnet:haiku weights ({spec.mix})")
    p.add_argument(
        "--latency-ms",
        type=float,
        default=spec.latency_ms,
        help=f"mean time to first token ({spec.latency_ms:g})",
    )
    p.add_argument(
        "--tokens", type=int, default=spec.output_tokens, help=f"mean output tokens ({spec.output_tokens})"
    )
    p.add_argument(
        "--token-interval-ms",
        type=float,
        default=spec.token_interval_ms,
        help=f"time between tokens ({spec.token_interval_ms:g})",
    )
    p.add_argument("--reject-delay-ms", type=float, default=3000.0, help="the upstream's 429 delay (3000)")
    p.add_argument(
        "--strategy", choices=["least-loaded", "round-robin", "weighted-random"], default="least-loaded"
    )
    p.add_argument("--seed", type=int, default=spec.seed)
    p.add_argument(
        "--baseline",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also run today's mapping (on)",
    )
    p.add_argument("--keep", action="store_true", help="keep the chaos proxy up at the end until Ctrl-C")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    spec = WorkloadSpec(
        agents=args.agents,
        requests=args.requests,
        mix=args.mix,
        latency_ms=args.latency_ms,
        output_tokens=args.tokens,
        token_interval_ms=args.token_interval_ms,
        seed=args.seed,
    )
    options = BenchOptions(
        workload=spec, reject_delay_ms=args.reject_delay_ms, overhead=None, pool_bench=None
    )
    try:
        return asyncio.run(
            stop_on_sigterm(
                demo(options, strategy=args.strategy, baseline=args.baseline, keep=args.keep, out=sys.stdout)
            )
        )
    except (KeyboardInterrupt, asyncio.CancelledError):
        print("\nstopped", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
