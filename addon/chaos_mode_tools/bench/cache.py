"""The cache benchmark (issue 45): a swarm of Claude Code-like conversations on the simulator's prompt cache.

    python -m chaos_mode_tools.bench.cache [--seconds 20] [--agents 10] [--seeds 2] [--json FILE]

Each agent is one conversation (its own `x-claude-code-session-id`) asking the heavy tier again, streamed,
as soon as it is answered, its prompt long and growing (`start` tokens, `growth` more each turn, as an
agent's history grows). The simulator keeps each prompt warm on the model that read it
(`prompt_cache_seconds`) and counts credits (cached input at its lower weight, `sim.credits`), so a
conversation moved to another model pays its whole prompt again. Three proxies, each on a fresh simulator:

- `least-loaded`: chaos mode, least-loaded, `stickyConversations` off (each turn where there is room);
- `cache-rule`: the same with `stickyConversations` on (`routing.cache_rule`);
- `pinned`: chaos mode off, each agent asking one model by name (agents spread over the heavy models):
  a proxy that never moves a conversation.

Per run: answers, answers per second, credits per answer, the cached share of input tokens, moves (the
rule's), refusals seen by the agents. A 429 is retried after 0.5 s (as the SDK would, shorter).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from typing import Any, Final

import httpx

from chaos_mode.zai.catalog import EARLY_2026_CATALOG, models_block
from chaos_mode_tools.devtools.processes import ProxyProcess
from chaos_mode_tools.devtools.sim_process import SimProcess
from chaos_mode_tools.sim.settings import SimSettings

MODES: Final = ("least-loaded", "cache-rule", "pinned")
HEAVY: Final = [name for name, model in EARLY_2026_CATALOG.items() if model.tier == "HEAVY"]
HEADERS: Final = {"x-api-key": "sk-bench", "anthropic-version": "2023-06-01"}
ANSWER_TOKENS: Final = 60  # the simulator's answers (`output_tokens`)
BYTES_PER_TOKEN: Final = 4  # the simulator counts a request's input tokens as its body's bytes / 4


def _text(rng: random.Random, tokens: int) -> str:
    return "".join(rng.choice("abcdefgh ") for _ in range(tokens * BYTES_PER_TOKEN))


async def run(
    mode: str, *, seconds: float, agents: int, seed: int, start: int, growth: int
) -> dict[str, Any]:
    """One swarm through one proxy for `seconds`; its figures."""
    settings = SimSettings(
        latency_ms=800,  # a long prompt's first token, cold; a warm one sooner (sim.prompt_cache)
        token_interval_ms=10,
        output_tokens=ANSWER_TOKENS,
        prompt_cache_seconds=300,
        credit_caps={"5h": 1e9, "1w": 1e9},  # counted, never spent
        fault_seed=seed,
    )
    config: dict[str, object] = {
        "upstreamHosts": ["127.0.0.1"],
        "chaosMode": {"enabled": mode != "pinned", "stickyConversations": mode == "cache-rule"},
        "models": models_block(EARLY_2026_CATALOG),
        "learning": {"enabled": False},  # the catalog's limits, the simulator's: no probing noise
    }
    rng = random.Random(seed)
    with SimProcess(settings) as sim, ProxyProcess(upstream=sim.base_url, config=config) as proxy:
        async with httpx.AsyncClient(trust_env=False, timeout=120) as client:
            started = time.monotonic()
            until = started + seconds
            counts = await asyncio.gather(
                *(
                    _agent(client, proxy.url, mode, index, rng.random(), until, start, growth)
                    for index in range(agents)
                )
            )
            elapsed = time.monotonic() - started
            truth = (await client.get(sim.base_url + "/sim/stats")).json()
            shown = (await client.get(proxy.status_url)).json()
    answers = sum(answered for answered, _ in counts)
    seen = shown.get("modelDistribution", {}).values()
    cached = sum(m.get("tokensCached", 0) for m in seen)
    read = cached + sum(m.get("tokensIn", 0) for m in seen)
    used = truth["credits"]["windows"]["5h"]["used"]
    return {
        "mode": mode,
        "seed": seed,
        "answers": answers,
        "answersPerSecond": round(answers / elapsed, 3),
        "creditsPerAnswer": round(used / answers, 2) if answers else None,
        "cachedShare": truth["promptCache"]["cachedShare"],
        "cachedShareShown": round(cached / read, 4) if read else None,  # as the proxy's status counts it
        "moves": shown["sticky"]["moves"],
        "moveCredits": round(shown["sticky"].get("moveCredits", 0.0), 1),
        "refusedToAgents": sum(refused for _, refused in counts),
    }


async def _agent(
    client: httpx.AsyncClient,
    url: str,
    mode: str,
    index: int,
    salt: float,
    until: float,
    start: int,
    growth: int,
) -> tuple[int, int]:
    """(answers, refusals) of one conversation asking until `until`, each answer (and a new question)
    growing its history. Answers that end after `until` do not count."""
    rng = random.Random(salt)
    model = HEAVY[index % len(HEAVY)] if mode == "pinned" else "claude-opus-4-5"
    system = f"agent {index}: " + _text(rng, start)
    messages: list[dict[str, str]] = [{"role": "user", "content": _text(rng, 50)}]
    headers = {**HEADERS, "x-claude-code-session-id": f"bench-{index}-{salt}"}
    answers = refused = 0
    while time.monotonic() < until:
        body = {"model": model, "max_tokens": 256, "system": system, "messages": messages, "stream": True}
        response = await client.post(url + "/api/anthropic/v1/messages", json=body, headers=headers)
        if response.status_code != 200:
            refused += 1
            await asyncio.sleep(0.5)
            continue
        if time.monotonic() > until:
            break
        answers += 1  # the answer streamed whole; its text stands in as `ANSWER_TOKENS` of history
        answer = _text(rng, ANSWER_TOKENS)
        messages += [
            {"role": "assistant", "content": answer},
            {"role": "user", "content": _text(rng, growth)},
        ]
    return answers, refused


def table(runs: list[dict[str, Any]]) -> str:
    """The runs side by side, and each mode's mean against the others."""
    lines = [f"{'mode':<14}{'seed':>5}{'answers':>9}{'ans/s':>8}{'cr/answer':>11}{'cached':>8}{'moves':>7}"]
    for r in runs:
        lines.append(
            f"{r['mode']:<14}{r['seed']:>5}{r['answers']:>9}{r['answersPerSecond']:>8.2f}"
            f"{r['creditsPerAnswer'] or 0:>11.2f}{r['cachedShare']:>8.2f}{r['moves']:>7}"
        )
    means = {}
    for mode in MODES:
        mine = [r for r in runs if r["mode"] == mode and r["creditsPerAnswer"]]
        if mine:
            means[mode] = (
                sum(r["answersPerSecond"] for r in mine) / len(mine),
                sum(r["creditsPerAnswer"] for r in mine) / len(mine),
            )
    if {"least-loaded", "cache-rule", "pinned"} <= means.keys():
        rule, least, pinned = means["cache-rule"], means["least-loaded"], means["pinned"]
        lines.append(
            f"cache-rule: credits per answer {rule[1] / pinned[1] - 1:+.1%} against pinned (target <= +15%), "
            f"throughput {rule[0] / least[0] - 1:+.1%} against least-loaded (target >= -5%); "
            f"least-loaded's credits per answer {least[1] / pinned[1] - 1:+.1%} against pinned"
        )
    return "\n".join(lines)


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos_mode_tools.bench.cache", description=__doc__)
    parser.add_argument("--seconds", type=float, default=20.0, help="how long each swarm asks")
    parser.add_argument("--agents", type=int, default=10, help="conversations in the swarm")
    parser.add_argument("--seeds", type=int, default=2, help="runs of each mode")
    parser.add_argument("--start", type=int, default=8000, help="a conversation's first prompt, tokens")
    parser.add_argument("--growth", type=int, default=1500, help="tokens its prompt grows each turn")
    parser.add_argument("--modes", default=",".join(MODES), help="which of " + ", ".join(MODES))
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)
    runs = []
    for seed in range(args.seeds):
        for mode in args.modes.split(","):
            figures = await run(
                mode,
                seconds=args.seconds,
                agents=args.agents,
                seed=seed,
                start=args.start,
                growth=args.growth,
            )
            runs.append(figures)
            print(json.dumps(figures), flush=True)
    print(table(runs))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump({"seconds": args.seconds, "agents": args.agents, "runs": runs}, out)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
