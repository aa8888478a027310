"""z.ai at a distance: the first token of requests on new client connections, through each proxy.

The simulator serves HTTPS behind `devtools.distance` (a round trip of `--rtt-ms` on every handshake and
byte); in front of it, in reverse mode, side by side, rounds alternating their order:
- `plain`: plain mitmdump (`stream_large_bodies=1`, mitmproxy's default `connection_strategy=eager`);
- `addon`: mitmdump with chaos mode (chaos on, least-loaded), which runs with `connection_strategy=lazy`;
- `addon-eager`: the same with mitmproxy's default put back after start: each client connection opens a
  connection (TCP and TLS) to z.ai that no routed request uses, and its request waits for it.
Each proxy has its own relay, so the connections each opened to z.ai are counted apart. Per round: the
first token of `--fresh` requests one after another, each on a new client connection (median), then of
`--burst` requests at once on new connections (the slowest). The report gives each side's median over
rounds and its ratio to plain.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos_mode.zai.catalog import EARLY_2026_CATALOG, models_block
from chaos_mode_tools.bench.cost.overhead import ADDON_MODEL, PLAIN_MODEL, first_token, small_body
from chaos_mode_tools.devtools.certs import make_certs
from chaos_mode_tools.devtools.client import httpx
from chaos_mode_tools.devtools.distance import DistantPort
from chaos_mode_tools.devtools.processes import ProxyProcess
from chaos_mode_tools.devtools.sim_process import SimProcess
from chaos_mode_tools.sim import SimSettings
from chaos_mode_tools.sim.settings import default_limits

SIDES = ("plain", "addon", "addon-eager")
HEADERS = {"x-sim-latency-ms": "0", "x-sim-output-tokens": "2", "x-api-key": "bench-key"}
# mitmproxy's default, put back after chaos mode set its own (scripts run in order: this one after it).
EAGER_SCRIPT = """from mitmproxy import ctx


class Eager:
    def running(self):
        ctx.options.update(connection_strategy="eager")


addons = [Eager()]
"""


@dataclass(frozen=True)
class DistanceOptions:
    rtt_ms: float = 50.0
    rounds: int = 4
    fresh: int = 8
    burst: int = 16  # within the catalog's slots for Sonnet: nobody waits for a slot


@dataclass
class _Side:
    name: str
    model: str
    relay: DistantPort
    proxy: ProxyProcess
    fresh_ms: list[float] = field(default_factory=list)
    burst_ms: list[float] = field(default_factory=list)
    connections: list[int] = field(default_factory=list)
    errors: int = 0


async def _first_tokens(side: _Side, count: int, *, at_once: bool) -> list[float]:
    """Seconds to the first token of `count` requests, each on a new client connection (one client, keeping
    no connection: a client made per request would cost the bench its TLS context each time)."""
    body = small_body(side.model, stream=True)
    limits = httpx.Limits(max_connections=count, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=side.proxy.url, timeout=30.0, limits=limits) as client:

        async def one() -> float | None:
            first, response = await first_token(client, body, HEADERS)
            if response.status_code != 200 or first is None:
                side.errors += 1
                return None
            return first

        if at_once:
            results = await asyncio.gather(*(one() for _ in range(count)))
        else:
            results = [await one() for _ in range(count)]
    return [r for r in results if r is not None]


async def _round(side: _Side, options: DistanceOptions) -> None:
    before = side.relay.connections
    fresh = await _first_tokens(side, options.fresh, at_once=False)
    burst = await _first_tokens(side, options.burst, at_once=True)
    side.connections.append(side.relay.connections - before)
    side.fresh_ms.append(statistics.median(fresh) * 1000 if fresh else float("nan"))
    side.burst_ms.append(max(burst) * 1000 if burst else float("nan"))


def _proxy(side: str, relay: DistantPort, ca: Path, workdir: Path) -> ProxyProcess:
    upstream = f"https://localhost:{relay.port}"
    args = ["--set", f"ssl_verify_upstream_trusted_ca={ca}"]
    if side == "plain":
        return ProxyProcess(
            upstream=upstream, addon=False, extra_args=[*args, "--set", "stream_large_bodies=1"]
        )
    if side == "addon-eager":
        script = workdir / "eager.py"
        script.write_text(EAGER_SCRIPT, encoding="utf-8")
        args += ["-s", str(script)]
    config: dict[str, object] = {
        "chaosMode": {"enabled": True},
        "upstreamHosts": ["localhost"],
        "models": models_block(EARLY_2026_CATALOG),
    }
    return ProxyProcess(upstream=upstream, config=config, extra_args=args)


def _summary(side: _Side, plain: _Side) -> dict[str, Any]:
    fresh, burst = statistics.median(side.fresh_ms), statistics.median(side.burst_ms)
    return {
        "freshMs": [round(x, 1) for x in side.fresh_ms],
        "burstSlowestMs": [round(x, 1) for x in side.burst_ms],
        "connectionsToZai": side.connections,
        "freshMedianMs": round(fresh, 1),
        "burstMedianMs": round(burst, 1),
        "freshRatio": round(fresh / statistics.median(plain.fresh_ms), 3),
        "burstRatio": round(burst / statistics.median(plain.burst_ms), 3),
        "errors": side.errors,
    }


async def measure_distance(options: DistanceOptions, log: Callable[[str], None] = print) -> dict[str, Any]:
    rtt = options.rtt_ms / 1000
    with tempfile.TemporaryDirectory(prefix="chaos-distance-") as tmp:
        certs = make_certs(Path(tmp))
        # Plain mitmdump sends one model: room for all it sends (the addon's are within the catalog).
        limits = {**default_limits(), PLAIN_MODEL: 1000}
        settings = SimSettings(limits=limits, tls_cert=str(certs.cert), tls_key=str(certs.key))
        with SimProcess(settings) as sim:
            async with contextlib.AsyncExitStack() as stack:
                sides = []
                for name in SIDES:
                    model = PLAIN_MODEL if name == "plain" else ADDON_MODEL
                    relay = await stack.enter_async_context(DistantPort(sim.port, rtt))
                    side = _Side(name, model, relay, _proxy(name, relay, certs.ca, Path(tmp)))
                    stack.push_async_callback(asyncio.to_thread, side.proxy.stop)
                    sides.append(side)
                await asyncio.gather(*(asyncio.to_thread(s.proxy.start) for s in sides))
                for side in sides:  # warm: certificates made, the forwarder's first connection opened
                    await _first_tokens(side, 1, at_once=False)
                for round_ in range(options.rounds):
                    order = sides if round_ % 2 == 0 else sides[::-1]
                    for side in order:
                        await _round(side, options)
                    log(
                        f"  round {round_ + 1}/{options.rounds}: "
                        + ", ".join(
                            f"{s.name} {s.fresh_ms[-1]:.0f} ms fresh, {s.burst_ms[-1]:.0f} ms burst, "
                            f"{s.connections[-1]} to z.ai"
                            for s in sides
                        )
                    )
    plain = sides[0]
    return {
        "method": (
            f"HTTPS simulator {options.rtt_ms:g} ms away (devtools.distance); plain mitmdump, the addon, and "
            "the addon with connection_strategy=eager, side by side in reverse mode; first token of requests "
            "on new client connections; medians over rounds"
        ),
        "rttMs": options.rtt_ms,
        "rounds": options.rounds,
        "fresh": options.fresh,
        "burst": options.burst,
        "sides": {s.name: _summary(s, plain) for s in sides},
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m chaos_mode_tools.bench.cost.distance", description=__doc__
    )
    parser.add_argument("--rtt-ms", type=float, default=DistanceOptions.rtt_ms, help="the round trip to z.ai")
    parser.add_argument("--rounds", type=int, default=DistanceOptions.rounds)
    parser.add_argument("--fresh", type=int, default=DistanceOptions.fresh, help="requests one after another")
    parser.add_argument("--burst", type=int, default=DistanceOptions.burst, help="requests at once")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)
    if args.rtt_ms < 0 or min(args.rounds, args.fresh, args.burst) < 1:
        parser.error("--rtt-ms must be at least 0, --rounds, --fresh and --burst at least 1")
    options = DistanceOptions(rtt_ms=args.rtt_ms, rounds=args.rounds, fresh=args.fresh, burst=args.burst)
    results = asyncio.run(measure_distance(options))
    text = json.dumps(results, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
