"""The credit-plan benchmark: a swarm that would spend the 5-hour window halfway through it and the week in
its first third.

    python -m chaos_mode_tools.bench.quota.credits [--window 6] [--credits 20] [--agents 8] [--share 1]

The simulator plays a credit plan (`sim.credits`) with Lite's proportions: a 5-hour window of `window`
seconds and `credits` credits, a week 33.6 times as long (7 days against 5 hours) of 5 times the credits;
each answer costs about 1.1 credits (GLM-5.3's weights, 40 output tokens). The agents ask again as soon as
answered and, refused, again a second later, for `share` of the week: unpaced they spend each 5-hour window
in about half of it and the week in about its first seventh, then stand still on 1310. The same swarm runs
through a proxy without pacing and one with `quota: {pace: true}`, both reading the quota with a key every
second, each on a fresh simulator: answers, the week's credits spent, z.ai's 1308s and 1310s, the
proxy's 429s, the longest request.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any, Final

import httpx

from chaos_mode.zai.quota import WINDOW_SECONDS
from chaos_mode_tools.bench.quota.prompts import BODY, HEADERS, KEY, VARIABLE
from chaos_mode_tools.devtools.processes import ProxyProcess
from chaos_mode_tools.devtools.sim_process import SimProcess
from chaos_mode_tools.sim.settings import SimSettings

WEEK_PER_WINDOW: Final = 7 * 86400 / WINDOW_SECONDS  # 33.6
WEEK_CREDITS_PER_WINDOW: Final = 5.0  # Lite: 10,000 a week against 2,000 per 5 hours


async def run(pace: bool, *, window: float, credits: float, agents: int, share: float) -> dict[str, Any]:
    """One swarm over `share` of a week, paced or not; its figures."""
    week = window * WEEK_PER_WINDOW
    settings = SimSettings(
        latency_ms=400,
        output_tokens=40,
        quota_key=KEY,
        credit_caps={"5h": credits, "1w": credits * WEEK_CREDITS_PER_WINDOW},
        credit_window_seconds={"5h": window, "1w": week},
    )
    config: dict[str, object] = {
        "upstreamHosts": ["127.0.0.1"],
        "chaosMode": {"enabled": True},
        "quota": {"pollSeconds": 1, "windowSeconds": window, "pace": pace},
    }
    with SimProcess(settings) as sim:  # the week starts with the simulator
        started = time.monotonic()
        proxy = ProxyProcess(
            upstream=sim.base_url,
            config=config,
            extra_args=["--set", f"chaos_key={VARIABLE}"],
            env={VARIABLE: KEY},
        )
        with proxy:
            async with httpx.AsyncClient(trust_env=False, timeout=300) as client:
                end = started + share * week - 0.5  # the week's end (or the share's), less a margin

                async def truth() -> dict[str, Any]:  # the credits, read just before the week ends
                    await asyncio.sleep(max(end - time.monotonic(), 0.0))
                    stats: dict[str, Any] = (await client.get(sim.base_url + "/sim/stats")).json()["credits"]
                    return stats

                reading = asyncio.ensure_future(truth())
                answers, refused, longest = await _swarm(client, proxy, agents, end)
                counted = await reading
                shown = (await client.get(proxy.status_url)).json()["quota"]
    spent = counted["windows"]["1w"]
    return {
        "pace": pace,
        "seconds": round(time.monotonic() - started, 1),
        "answers": answers,
        "refusedToClients": refused,
        "zai": counted["refused"],
        "weekCreditsUsed": spent["used"],
        "weekCap": spent["cap"],
        "weekSpentAtShare": None  # of the week, when its credits ran out
        if spent["spentAt"] is None
        else round((spent["spentAt"] - spent["windowStart"]) / week, 3),
        "longestRequestSeconds": round(longest, 2),
        "pacedWaits": shown["pacing"]["pacedWaits"],
    }


async def _swarm(
    client: httpx.AsyncClient, proxy: ProxyProcess, agents: int, until: float
) -> tuple[int, dict[str, int], float]:
    """(answers by `until`, the non-200 statuses by status, the longest request): each agent asks again as
    soon as answered, a second after a refusal, until `until` (monotonic)."""
    answers, refused, longest = 0, dict[str, int](), 0.0

    async def agent() -> None:
        nonlocal answers, longest
        while time.monotonic() < until:
            started = time.monotonic()
            response = await client.post(proxy.url + "/api/anthropic/v1/messages", json=BODY, headers=HEADERS)
            longest = max(longest, time.monotonic() - started)
            if response.status_code == 200:
                answers += time.monotonic() <= until
                continue
            refused[str(response.status_code)] = refused.get(str(response.status_code), 0) + 1
            await asyncio.sleep(1.0)

    await asyncio.gather(*(agent() for _ in range(agents)))
    return answers, refused, longest


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m chaos_mode_tools.bench.quota.credits", description=__doc__
    )
    parser.add_argument("--window", type=float, default=6.0, help="the 5-hour window, seconds")
    parser.add_argument("--credits", type=float, default=20.0, help="the 5-hour window's credits")
    parser.add_argument("--agents", type=int, default=8, help="agents in the swarm")
    parser.add_argument("--share", type=float, default=1.0, help="the share of the week the swarm runs")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)
    runs = []
    for pace in (False, True):
        figures = await run(
            pace, window=args.window, credits=args.credits, agents=args.agents, share=args.share
        )
        runs.append(figures)
        print(("paced  " if pace else "unpaced"), json.dumps(figures), flush=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump({**vars(args), "runs": runs}, out)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
