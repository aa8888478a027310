"""What the addon costs per request, in CPU instructions (valgrind's callgrind), not time.

Time is noisy on a shared machine; the instructions a process executes are not. One simulator answers
with zero latency; for each side, "plain" (`mitmdump --mode reverse:SIM`, no script) and "addon" (the
same plus `-s chaos_addon.py`, chaos on with the built-in catalog and `upstreamHosts: [127.0.0.1]`, the
status server on a free port as `ProxyProcess` runs it, idle during the run), and for two request
counts N1 < N2, one run of

    valgrind --tool=callgrind --callgrind-out-file=OUT PYTHON mitmdump ...

gets 20 warm-up requests, then N small requests from 8 concurrent workers (every reply must be 200),
then SIGINT; the total instructions I(N) are the `totals:` (or `summary:`) line of OUT. Start-up,
warm-up and shut-down are the same in both runs of a side, so the difference cancels them:

    instructions per request = (I(N2) - I(N1)) / (N2 - N1)
    addon cost (%)           = (addon - plain) / plain * 100

The runs go two at a time (a 2-core machine). `--stream` also measures streamed requests (5 tokens),
with a third side: plain mitmdump buffers a whole SSE answer that the addon streams, so "plain-streaming"
(`--set stream_large_bodies=1`) is the plain mitmdump that streams too.
Run: `python -m chaos_mode_tools.bench.cost.instructions [--small 50] [--large 250] [--repeat K]
[--json FILE]`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chaos_mode_tools.bench.cost.overhead import ADDON_MODEL, PLAIN_MODEL, ZERO_LATENCY, small_body
from chaos_mode_tools.bench.swarm.agents import MESSAGES_PATH
from chaos_mode_tools.bench.swarm.run import stop_on_sigterm
from chaos_mode_tools.bench.swarm.scenarios import SCENARIOS
from chaos_mode_tools.devtools.client import httpx
from chaos_mode_tools.devtools.processes import ProxyProcess
from chaos_mode_tools.devtools.sim_process import SimProcess
from chaos_mode_tools.sim import SimSettings, default_limits

WARMUP = 20
CONCURRENCY = 8
STREAM_TOKENS = 5
START_TIMEOUT = 240.0  # mitmdump under callgrind takes a minute or more to listen
EXIT_TIMEOUT = 300.0
SIDES = {"plain": PLAIN_MODEL, "addon": ADDON_MODEL}
# On streams plain mitmdump buffers a whole SSE answer while the addon streams it: a third side streams too.
STREAMING = "plain-streaming"
STREAMING_ARGS = ("--set", "stream_large_bodies=1")


def sides(stream: bool) -> dict[str, str]:
    """The sides of one variant, by name, with the model each sends."""
    return {**SIDES, STREAMING: PLAIN_MODEL} if stream else dict(SIDES)


def callgrind_total(text: str) -> int:
    """The total of the first event (Ir: instructions) from a callgrind out file's text."""
    found: int | None = None
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in ("totals", "summary") and rest.split():
            found = int(rest.split()[0])
            if key == "totals":
                return found
    if found is None:
        raise ValueError("no 'totals:' or 'summary:' line in the callgrind output")
    return found


def per_request(small: tuple[int, int], large: tuple[int, int]) -> float:
    """(I(N2) - I(N1)) / (N2 - N1) from two (N, I(N)) pairs."""
    (n1, i1), (n2, i2) = small, large
    if n2 <= n1:
        raise ValueError(f"the large count must exceed the small one ({n2} <= {n1})")
    return (i2 - i1) / (n2 - n1)


def cost_percent(plain: float, addon: float) -> float:
    return (addon - plain) / plain * 100


class CallgrindProxy(ProxyProcess):
    """`ProxyProcess`'s mitmdump run by the interpreter under callgrind; `finish()` stops it with SIGINT
    and returns the instructions it executed."""

    name = "callgrind-mitmdump"

    def command(self) -> list[str]:
        mitmdump, *args = super().command()
        out = f"--callgrind-out-file={self.workdir / 'callgrind.out'}"
        mitmdump = shutil.which(mitmdump) or mitmdump
        return ["valgrind", "--tool=callgrind", out, sys.executable, mitmdump, *args]

    def finish(self) -> int:
        if self.proc is None:
            raise RuntimeError("not started")
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=EXIT_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"valgrind did not exit in {EXIT_TIMEOUT:g} s after SIGINT") from None
        out = self.workdir / "callgrind.out"
        if not out.exists():
            raise RuntimeError(f"no callgrind output; the run printed:\n{self.output()[-3000:]}")
        return callgrind_total(out.read_text(encoding="utf-8", errors="replace"))


async def _send(client: httpx.AsyncClient, model: str, count: int, stream: bool) -> None:
    body = small_body(model, stream)
    headers = {**ZERO_LATENCY, "x-sim-output-tokens": str(STREAM_TOKENS if stream else 1)}
    remaining = count
    bad: list[str] = []

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            async with client.stream("POST", MESSAGES_PATH, json=body, headers=headers) as response:
                text = await response.aread()
            if response.status_code != 200:
                bad.append(f"{response.status_code} {text[:200]!r}")

    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    if bad:
        raise RuntimeError(f"{len(bad)} of {count} replies were not 200, e.g. {bad[0]}")


async def measure_run(sim_url: str, side: str, count: int, stream: bool) -> int:
    """One callgrind run of mitmdump: warm-up, `count` requests, SIGINT; its total instructions."""
    config = SCENARIOS["least-loaded"].config() if side == "addon" else None
    extra = STREAMING_ARGS if side == STREAMING else ()
    proxy = CallgrindProxy(
        upstream=sim_url, config=config, addon=side == "addon", extra_args=extra, start_timeout=START_TIMEOUT
    )
    try:
        await asyncio.to_thread(proxy.start)
        limits = httpx.Limits(max_connections=CONCURRENCY, max_keepalive_connections=CONCURRENCY)
        async with httpx.AsyncClient(base_url=proxy.url, limits=limits, timeout=120.0) as client:
            await _send(client, sides(stream)[side], WARMUP, stream)
            await _send(client, sides(stream)[side], count, stream)
        return await asyncio.to_thread(proxy.finish)
    finally:
        await asyncio.to_thread(proxy.stop)


@dataclass(frozen=True, slots=True)
class Options:
    small: int = 50
    large: int = 250
    repeat: int = 1
    stream: bool = False
    parallel: int = 2


async def measure(options: Options, log: Callable[[str], None] = print) -> dict[str, Any]:
    """All runs (`parallel` at a time); per variant and side: I(N) per repeat and instructions/request."""
    variants = [False, True] if options.stream else [False]
    jobs = [
        (stream, rep, side, count)
        for stream in variants
        for rep in range(options.repeat)
        for count in (options.small, options.large)
        for side in sides(stream)
    ]
    totals: dict[tuple[bool, int, str, int], int] = {}
    gate = asyncio.Semaphore(options.parallel)
    settings = SimSettings(latency_ms=0, token_interval_ms=0, output_tokens=1)
    settings.limits = {model: 1000 for model in default_limits()}  # parallel runs never hit a 429

    async with SimProcess(settings) as sim:

        async def job(key: tuple[bool, int, str, int]) -> None:
            async with gate:
                started = time.monotonic()
                totals[key] = await measure_run(sim.base_url, key[2], key[3], key[0])
                kind = "streamed" if key[0] else "non-streamed"
                log(
                    f"  {key[2]:15} N={key[3]:<4} {kind} run {key[1] + 1}: "
                    f"{totals[key]:,} instructions ({time.monotonic() - started:.0f} s)"
                )

        try:
            async with asyncio.TaskGroup() as group:  # a failed run cancels the others
                for key in jobs:
                    group.create_task(job(key))
        except ExceptionGroup as failed:
            raise failed.exceptions[0] from None

    doc: dict[str, Any] = {}
    for stream in variants:
        result: dict[str, Any] = {}
        for side, model in sides(stream).items():
            figures = [
                per_request(
                    (options.small, totals[stream, rep, side, options.small]),
                    (options.large, totals[stream, rep, side, options.large]),
                )
                for rep in range(options.repeat)
            ]
            result[side] = {
                "model": model,
                "totals": [
                    {n: totals[stream, rep, side, n] for n in (options.small, options.large)}
                    for rep in range(options.repeat)
                ],
                "perRequest": [round(x) for x in figures],
                "perRequestMedian": round(statistics.median(figures)),
            }
        plain, addon = result["plain"]["perRequestMedian"], result["addon"]["perRequestMedian"]
        result["costPercent"] = round(cost_percent(plain, addon), 2)
        if STREAMING in result:  # against a plain mitmdump that streams too
            streaming = result[STREAMING]["perRequestMedian"]
            result["costPercentVsStreaming"] = round(cost_percent(streaming, addon), 2)
        doc["streamed" if stream else "nonStreamed"] = result
    return doc


def render(doc: dict[str, Any]) -> str:
    lines = []
    for variant in ("nonStreamed", "streamed"):
        if (result := doc.get(variant)) is None:
            continue
        lines.append(f"{variant}:")
        for side in sides(variant == "streamed"):
            row = result[side]
            each = ", ".join(f"{x / 1e6:.2f}" for x in row["perRequest"])
            lines.append(
                f"  {side:15} ({row['model']}): {row['perRequestMedian'] / 1e6:.2f} M instructions/request"
                + (f" (runs: {each})" if len(row["perRequest"]) > 1 else "")
            )
        lines.append(f"  addon cost: {result['costPercent']:+.1f} %")
        if "costPercentVsStreaming" in result:
            lines.append(f"  addon cost against {STREAMING}: {result['costPercentVsStreaming']:+.1f} %")
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m chaos_mode_tools.bench.cost.instructions",
        description="The addon's cost per request in CPU instructions (callgrind): plain mitmdump vs "
        "mitmdump with the addon, each run with two request counts; per request = (I(N2)-I(N1))/(N2-N1).",
    )
    p.add_argument("--small", type=int, default=50, help="N1, requests of the short run (default 50)")
    p.add_argument("--large", type=int, default=250, help="N2, requests of the long run (default 250)")
    p.add_argument("--repeat", type=int, default=1, help="repeat every run K times; medians (default 1)")
    p.add_argument(
        "--stream",
        action="store_true",
        help="also measure streamed requests (5 tokens), with a plain mitmdump that streams too",
    )
    p.add_argument("--parallel", type=int, default=2, help="valgrind runs at a time (default 2)")
    p.add_argument("--json", type=Path, metavar="FILE", help="write the figures as JSON")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if shutil.which("valgrind") is None:
        print("valgrind not found: apt-get install valgrind", file=sys.stderr)
        return 2
    if not 0 <= args.small < args.large or args.repeat < 1 or args.parallel < 1:
        print("need 0 <= --small < --large, --repeat >= 1, --parallel >= 1", file=sys.stderr)
        return 2
    options = Options(args.small, args.large, args.repeat, args.stream, args.parallel)
    started = time.monotonic()
    try:
        doc = asyncio.run(stop_on_sigterm(measure(options)))
    except (RuntimeError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except (KeyboardInterrupt, asyncio.CancelledError):
        print("interrupted", file=sys.stderr)
        return 130
    wall = time.monotonic() - started
    doc = {
        "method": "callgrind Ir of mitmdump; per request = (I(N2) - I(N1)) / (N2 - N1)",
        "small": options.small,
        "large": options.large,
        "warmup": WARMUP,
        "concurrency": CONCURRENCY,
        "repeat": options.repeat,
        **doc,
        "wallSeconds": round(wall),
    }
    print(render(doc))
    print(f"wall time: {wall:.0f} s")
    if args.json is not None:
        args.json.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
