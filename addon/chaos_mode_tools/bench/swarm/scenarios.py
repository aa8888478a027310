"""The benchmark's scenarios: today's z.ai mapping (chaos off), and chaos mode's variants."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from chaos_mode.config.schema import StrategyName
from chaos_mode.zai.catalog import EARLY_2026_CATALOG, RequestTier, models_block
from chaos_mode_tools.bench.swarm.workload import CLAUDE_MODELS, ZAI_DEFAULT_MODELS


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    description: str
    chaos: bool
    strategy: StrategyName = "least-loaded"
    sticky: bool = False
    pinned: bool = False  # each agent sends one model of its own (see `pinned_models`), whatever the tier
    openai_every: int = 0  # every n-th agent speaks OpenAI chat completions (0: none)
    learning: tuple[tuple[str, Any], ...] = ()  # settings of the proxy's learning block (none: defaults)
    catalog: str = "early-2026"  # the simulator's catalog; the proxy's: its models, or the built-in one

    @property
    def models(self) -> dict[RequestTier, str]:
        """What the agents send: Claude's names through chaos mode, z.ai's default mapping without it."""
        return dict(CLAUDE_MODELS if self.chaos else ZAI_DEFAULT_MODELS)

    def config(self, upstream_host: str = "127.0.0.1") -> dict[str, object]:
        """The `modelRouting` mapping for the proxy (the simulator as upstream): its early-2026 catalog by
        name, or for the simulator's 2026-12 one the built-in catalog (today's)."""
        block: dict[str, object] = {
            "chaosMode": {
                "enabled": self.chaos,
                "strategy": self.strategy,
                "stickyConversations": self.sticky,
            },
            "upstreamHosts": [upstream_host],
        }
        if self.catalog == "early-2026":
            block["models"] = models_block(EARLY_2026_CATALOG)
        if self.learning:
            block["learning"] = dict(self.learning)
        return block


SCENARIOS: Final[dict[str, Scenario]] = {
    s.name: s
    for s in (
        Scenario(
            "baseline",
            "chaos off; opus/sonnet -> glm-4.7, haiku -> glm-4.5-air (z.ai's default mapping)",
            chaos=False,
        ),
        Scenario("least-loaded", "chaos on, least-loaded", chaos=True, strategy="least-loaded"),
        Scenario("round-robin", "chaos on, round-robin", chaos=True, strategy="round-robin"),
        Scenario("weighted-random", "chaos on, weighted-random", chaos=True, strategy="weighted-random"),
        Scenario(
            "sticky",
            "chaos on, least-loaded, stickyConversations (one session id per agent)",
            chaos=True,
            strategy="least-loaded",
            sticky=True,
        ),
        # Both doors on one account (issue 12): the pool counts and routes both.
        Scenario(
            "mixed-doors",
            "chaos on, least-loaded; every second agent speaks OpenAI chat completions on the same account "
            "(glm-4.7 / glm-4.5 / glm-4.5-flash by tier, streamed, include_usage)",
            chaos=True,
            openai_every=2,
        ),
    )
}


# Not in "all": a reference that only makes sense with no more agents than slots (`--agents 28`).
PINNED: Final = Scenario(
    "pinned",
    "chaos off; each agent pinned to a slot of its own, whatever the tier (agents <= slots): the cost of "
    "the stack itself, with no router and no contention",
    chaos=False,
    pinned=True,
)
MIXED_DOORS: Final = SCENARIOS["mixed-doors"]
KNOWN: Final[dict[str, Scenario]] = {**SCENARIOS, PINNED.name: PINNED}


def pinned_models(capacity: Mapping[str, int], agents: int) -> list[str]:
    """The model of each agent of the pinned scenario: one slot each, in catalog order; ValueError when
    there are more agents than slots."""
    slots = [model for model, count in capacity.items() for _ in range(count)]
    if agents > len(slots):
        raise ValueError(f"the pinned scenario needs at most {len(slots)} agents (a slot each), not {agents}")
    return slots[:agents]


def parse_names[T](text: str, known: Mapping[str, T], every: Sequence[T], what: str) -> list[T]:
    """A comma-separated list of names of `known` ("all" = `every`), in the order given."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if names == ["all"]:
        return list(every)
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise ValueError(f"unknown {what}(s) {', '.join(unknown) or '(none)'}; known: {', '.join(known)}")
    return [known[n] for n in names]


def parse_scenarios(text: str) -> list[Scenario]:
    """A comma-separated list of scenario names ("all" = every one but pinned), in the order given."""
    return parse_names(text, KNOWN, list(SCENARIOS.values()), "scenario")
