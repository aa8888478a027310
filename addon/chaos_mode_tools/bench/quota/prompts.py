"""The quota benchmark (issue 23): a swarm that would spend the 5-hour quota halfway through its window.

    python -m chaos_mode_tools.bench.quota.prompts [--window 30] [--prompts 200] [--agents 8] [--rounds 1]

The simulator serves a quota of `prompts` per `window` seconds (its 1308 once spent) and the quota endpoint
behind a key; the swarm's agents each ask again as soon as they are answered, until the window ends or
their first refusal, so unpaced they spend the quota in about half the window and stop at the 1308. The
same swarm runs through a proxy without pacing and one with `quota: {pace: true}` (both reading the
quota with the key), one after the other, each on a fresh simulator: answers in the window, refusals
(ours and z.ai's 1308), the quota used, the readings of the quota endpoint, the longest request.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any, Final

import httpx

from chaos_mode.zai.catalog import EARLY_2026_CATALOG, models_block
from chaos_mode_tools.devtools.processes import ProxyProcess
from chaos_mode_tools.devtools.sim_process import SimProcess
from chaos_mode_tools.sim.settings import SimSettings

KEY: Final = "bench0quota0key.NeverShownAnywhere"
VARIABLE: Final = "CHAOS_BENCH_QUOTA_KEY"
HEADERS: Final = {"x-api-key": "sk-bench", "anthropic-version": "2023-06-01"}
BODY: Final = {"model": "claude-haiku-4-5", "max_tokens": 16, "messages": [{"role": "user", "content": "q"}]}


async def run(pace: bool, *, window: float, prompts: int, agents: int) -> dict[str, Any]:
    """One swarm over one window, paced or not; its figures."""
    settings = SimSettings(
        latency_ms=400, quota=prompts, quota_window_seconds=window, quota_key=KEY, output_tokens=8
    )
    config: dict[str, object] = {
        "upstreamHosts": ["127.0.0.1"],
        "chaosMode": {"enabled": True},
        "models": models_block(EARLY_2026_CATALOG),
        "quota": {"pollSeconds": 1, "windowSeconds": window, "pace": pace},
    }
    with SimProcess(settings) as sim:
        proxy = ProxyProcess(
            upstream=sim.base_url,
            config=config,
            extra_args=["--set", f"chaos_key={VARIABLE}"],
            env={VARIABLE: KEY},
        )
        with proxy:
            async with httpx.AsyncClient(trust_env=False, timeout=120) as client:
                await _first_reading(client, proxy)
                end = time.monotonic() + window  # the window opens with the swarm's first prompt

                async def truth() -> dict[str, Any]:  # the quota used, read just before the window ends
                    await asyncio.sleep(max(end - 0.3 - time.monotonic(), 0.0))
                    quota: dict[str, Any] = (await client.get(sim.base_url + "/sim/stats")).json()["quota"]
                    return quota

                reading = asyncio.ensure_future(truth())
                answers, refused, longest, last = await _swarm(client, proxy, agents, end)
                used = await reading
                shown = (await client.get(proxy.status_url)).json()["quota"]
    return {
        "pace": pace,
        "answers": answers,
        "refusedToClients": refused,
        "zai1308": used["refused"],
        "quotaUsed": used["used"],
        "quotaReads": used["reads"],  # of z.ai's quota endpoint, by the proxy (polls and the end game's)
        "longestRequestSeconds": round(longest, 2),
        "lastAnswerSeconds": round(last - (end - window), 1),  # into the window: after it, standing still
        "pacedWaits": shown["pacing"]["pacedWaits"],
    }


async def _first_reading(client: httpx.AsyncClient, proxy: ProxyProcess) -> None:
    """Until the proxy has read the quota once (pacing needs a forecast)."""
    async with asyncio.timeout(15):
        while (await client.get(proxy.status_url)).json()["quota"].get("readAt") is None:
            await asyncio.sleep(0.1)


async def _swarm(
    client: httpx.AsyncClient, proxy: ProxyProcess, agents: int, until: float
) -> tuple[int, dict[str, int], float, float]:
    """(answers within the window, the non-200 statuses by status, the longest request, when the last answer
    in the window came): each agent asks
    again as soon as it is answered, until a second before `until` (monotonic: the window's end) or its
    first refusal."""
    answers, refused, longest, last = 0, dict[str, int](), 0.0, 0.0

    async def agent() -> None:
        nonlocal answers, longest, last
        while time.monotonic() < until - 1.0:
            started = time.monotonic()
            response = await client.post(proxy.url + "/api/anthropic/v1/messages", json=BODY, headers=HEADERS)
            longest = max(longest, time.monotonic() - started)
            if response.status_code != 200:
                refused[str(response.status_code)] = refused.get(str(response.status_code), 0) + 1
                return
            if time.monotonic() <= until:  # answered in the window
                answers += 1
                last = time.monotonic()

    await asyncio.gather(*(agent() for _ in range(agents)))
    return answers, refused, longest, last


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m chaos_mode_tools.bench.quota.prompts", description=__doc__
    )
    parser.add_argument("--window", type=float, default=30.0, help="the simulator's quota window, seconds")
    parser.add_argument("--prompts", type=int, default=200, help="the quota per window")
    parser.add_argument("--agents", type=int, default=8, help="agents in the swarm")
    parser.add_argument("--rounds", type=int, default=1, help="unpaced then paced, this many times")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)
    runs = []
    for _ in range(args.rounds):
        for pace in (False, True):
            figures = await run(pace, window=args.window, prompts=args.prompts, agents=args.agents)
            runs.append(figures)
            print(("paced  " if pace else "unpaced"), json.dumps(figures), flush=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            plan = {"window": args.window, "prompts": args.prompts, "agents": args.agents}
            json.dump({**plan, "runs": runs}, out)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
