"""Time to first token of a failed-over request, against z.ai's time to say no.

One simulator answers with zero latency; before each failover request a fault makes the first attempt's
model say 1302 after `no_ms` (z.ai's time to say no), so the second attempt serves it. Beside it, plain
mitmdump streaming every body (`stream_large_bodies=1`) serves the same zero-latency stream with no
failover, and the addon serves it with no failover too. Requests go one at a time, rotating the order of the
three (the machine is shared):

    failover TTFT - no_ms - plain TTFT = what the failover added (target: under 5 ms), of which
    addon TTFT - plain TTFT is the forwarder's hop, and the rest the refused attempt's handling

and whether the failed-over answer streamed (chunked) or came in one piece.
Run: `python -m chaos_mode_tools.bench.cost.failover_ttft [--requests 40] [--no-ms 300] [--json FILE]`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos_mode.zai.catalog import EARLY_2026_CATALOG, models_block
from chaos_mode_tools.bench.cost.overhead import (
    ADDON_MODEL,
    PLAIN_MODEL,
    ZERO_LATENCY,
    first_token,
    small_body,
)
from chaos_mode_tools.devtools.client import httpx
from chaos_mode_tools.devtools.processes import ProxyProcess
from chaos_mode_tools.devtools.sim_process import SimProcess
from chaos_mode_tools.sim import SimSettings, default_limits

STREAM_TOKENS = 5
BATCH = 5  # failed-over requests per addon process (the sonnet tier has six models)


async def streamed_first_token(client: httpx.AsyncClient, model: str) -> tuple[float, bool]:
    """(seconds to the first content_block_delta, streamed) of one streamed request."""
    headers = {**ZERO_LATENCY, "x-sim-output-tokens": str(STREAM_TOKENS)}
    first, response = await first_token(client, small_body(model, True), headers)
    if response.status_code != 200 or first is None:
        raise RuntimeError(f"{model}: HTTP {response.status_code}, no first token")
    return first, "chunked" in response.headers.get("transfer-encoding", "")


@dataclass
class Samples:
    failover: list[float] = field(default_factory=list)
    plain: list[float] = field(default_factory=list)
    addon: list[float] = field(default_factory=list)
    one_piece: int = 0
    failovers: int = 0


async def measure(requests: int, no_ms: float, batch: int = BATCH) -> dict[str, Any]:
    settings = SimSettings(latency_ms=0, token_interval_ms=0, reject_delay_ms=0, limits=default_limits())
    samples = Samples()
    with SimProcess(settings) as sim:
        streaming = ("--set", "stream_large_bodies=1")
        with ProxyProcess(upstream=sim.base_url, addon=False, extra_args=streaming) as plain:
            async with httpx.AsyncClient(base_url=plain.url, trust_env=False, timeout=30) as through_plain:
                for first in range(0, requests, batch):
                    # A fresh addon for each batch: every injected 1302 comes at one request in flight,
                    # which teaches the pool that model's limit is 0; a batch smaller than the eligible
                    # models keeps that learning from emptying the pool, which is not what is measured.
                    await _batch(
                        sim, through_plain, range(first, min(requests, first + batch)), no_ms, samples
                    )
    failover_ms = statistics.median(samples.failover) * 1000
    plain_ms = statistics.median(samples.plain) * 1000
    addon_ms = statistics.median(samples.addon) * 1000
    return {
        "requests": requests,
        "zaiNoMs": no_ms,
        "failovers": samples.failovers,
        "batch": batch,
        "onePiece": samples.one_piece,
        "failoverTtftMedianMs": round(failover_ms, 2),
        "failoverTtftMs": [round(s * 1000, 1) for s in samples.failover],
        "plainTtftMedianMs": round(plain_ms, 2),
        "addonTtftMedianMs": round(addon_ms, 2),
        "addedMs": round(failover_ms - no_ms - plain_ms, 2),
        "hopMs": round(addon_ms - plain_ms, 2),
        "refusalMs": round(failover_ms - no_ms - addon_ms, 2),
    }


async def _batch(
    sim: SimProcess, through_plain: httpx.AsyncClient, indices: range, no_ms: float, samples: Samples
) -> None:
    config: dict[str, object] = {
        "upstreamHosts": ["127.0.0.1"],
        "chaosMode": {"enabled": True},
        "models": models_block(EARLY_2026_CATALOG),
    }
    fault = {"model": "*", "code": "1302", "count": 1, "delayMs": no_ms}
    with ProxyProcess(upstream=sim.base_url, config=config) as addon:
        async with (
            httpx.AsyncClient(base_url=addon.url, trust_env=False, timeout=30) as through_addon,
            httpx.AsyncClient(trust_env=False, timeout=10) as control,
        ):
            for _ in range(3):  # warm both (connections, caches)
                await streamed_first_token(through_addon, ADDON_MODEL)
                await streamed_first_token(through_plain, PLAIN_MODEL)
            sides = ("failover", "plain", "addon")
            for i in indices:
                for side in sides[i % 3 :] + sides[: i % 3]:
                    if side == "plain":
                        samples.plain.append((await streamed_first_token(through_plain, PLAIN_MODEL))[0])
                    elif side == "addon":
                        samples.addon.append((await streamed_first_token(through_addon, ADDON_MODEL))[0])
                    else:  # the fault is taken by the addon's first attempt, before any other request
                        (await control.post(sim.base_url + "/sim/faults", json=fault)).raise_for_status()
                        seconds, streamed = await streamed_first_token(through_addon, ADDON_MODEL)
                        samples.failover.append(seconds)
                        samples.one_piece += not streamed
            samples.failovers += (await control.get(addon.status_url)).json()["failovers"]


def render(doc: dict[str, Any]) -> str:
    return (
        f"failover TTFT, {doc['requests']} requests, z.ai says no after {doc['zaiNoMs']:g} ms "
        f"({doc['failovers']} failovers, {doc['onePiece']} answers in one piece):\n"
        f"  failed over through the addon: TTFT p50 {doc['failoverTtftMedianMs']:.2f} ms; "
        f"plain mitmdump streaming, no failover: {doc['plainTtftMedianMs']:.2f} ms\n"
        f"  same request through the addon, no failover: {doc['addonTtftMedianMs']:.2f} ms\n"
        f"  added beyond z.ai's no: {doc['addedMs']:+.2f} ms (target: under 5 ms) = forwarder hop "
        f"{doc['hopMs']:+.2f} ms + handling the refusal {doc['refusalMs']:+.2f} ms"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m chaos_mode_tools.bench.cost.failover_ttft", description=__doc__
    )
    parser.add_argument("--requests", type=int, default=40, help="failed-over requests (default 40)")
    parser.add_argument("--no-ms", type=float, default=300.0, help="z.ai's time to say 1302 (default 300)")
    parser.add_argument("--json", type=Path, help="write the figures as JSON")
    args = parser.parse_args(argv)
    doc = asyncio.run(measure(args.requests, args.no_ms))
    print(render(doc))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
