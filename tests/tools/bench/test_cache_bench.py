"""The cache benchmark runs: a short swarm through a real proxy on the simulator's prompt cache."""

from __future__ import annotations

from chaos_mode_tools.bench.cache import run, table


async def test_a_short_swarm_with_the_cache_rule() -> None:
    figures = await run("cache-rule", seconds=4.0, agents=3, seed=0, start=2000, growth=500)
    assert figures["answers"] >= 6 and figures["refusedToAgents"] == 0
    assert figures["cachedShare"] > 0.3  # every turn after the first finds its prefix warm
    assert figures["cachedShareShown"] == figures["cachedShare"]  # the proxy's status counts what z.ai says
    assert figures["creditsPerAnswer"] > 0


def test_the_table_sets_the_rule_against_both_baselines() -> None:
    runs = [
        {"mode": mode, "seed": 0, "answers": 10, "answersPerSecond": rate, "creditsPerAnswer": credits,
         "cachedShare": 0.5, "moves": 0}
        for mode, rate, credits in (
            ("least-loaded", 2.0, 60.0), ("cache-rule", 1.9, 44.0), ("pinned", 1.8, 40.0)
        )
    ]  # fmt: skip
    text = table(runs)
    assert "+10.0% against pinned" in text and "-5.0% against least-loaded" in text
