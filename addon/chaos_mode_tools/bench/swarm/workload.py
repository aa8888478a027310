"""The swarm's workload: N agents × M sequential requests, tiers drawn from a mix with a seeded RNG, answer
lengths spread evenly around their mean or drawn from a heavy-tailed law (`chaos_mode_tools.sim.lengths`).

The workload is computed once and replayed in every scenario, so all scenarios do the same work.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Final

from chaos_mode.zai.catalog import REQUEST_TIERS, RequestTier
from chaos_mode_tools.sim.lengths import Lengths

# What Claude Code sends for each tier, and what users map each tier to on z.ai today.
CLAUDE_MODELS: Final[dict[RequestTier, str]] = {
    "heavy": "claude-opus-4-5",
    "medium": "claude-sonnet-4-5",
    "light": "claude-3-5-haiku-latest",
}
# What an OpenAI-compatible tool (Cline, Roo Code, OpenCode...) on z.ai sends for each tier of work.
OPENAI_MODELS: Final[dict[RequestTier, str]] = {
    "heavy": "glm-4.7",
    "medium": "glm-4.5",
    "light": "glm-4.5-flash",
}
ZAI_DEFAULT_MODELS: Final[dict[RequestTier, str]] = {
    "heavy": "glm-4.7",
    "medium": "glm-4.7",
    "light": "glm-4.5-air",
}


@dataclass(frozen=True, slots=True)
class Mix:
    """Relative weights of heavy (opus), medium (sonnet) and light (haiku) requests."""

    heavy: float
    medium: float
    light: float

    def weights(self) -> list[float]:
        return [self.heavy, self.medium, self.light]

    def __str__(self) -> str:
        return ":".join(f"{w:g}" for w in self.weights())


def parse_mix(text: str) -> Mix:
    """``"1:2:7"`` -> Mix(1, 2, 7); ValueError for anything else."""
    parts = text.split(":")
    if len(parts) != 3:
        raise ValueError(f"expected heavy:medium:light weights such as 1:2:7, got {text!r}")
    try:
        weights = [float(p) for p in parts]
    except ValueError:
        raise ValueError(f"weights must be numbers, got {text!r}") from None
    if any(w < 0 for w in weights) or sum(weights) <= 0:
        raise ValueError(f"weights must be >= 0 with a positive sum, got {text!r}")
    return Mix(*weights)


@dataclass(frozen=True, slots=True)
class Request:
    """One request of the workload; the timings reach the simulator as x-sim-* headers."""

    agent: int
    index: int
    tier: RequestTier
    latency_ms: float
    output_tokens: int
    token_interval_ms: float
    prompt_tokens: int = 0  # the prompt's size beyond the short default one (the body grows 4 bytes each)

    @property
    def service_seconds(self) -> float:
        """How long the simulator holds a slot for this streamed request once admitted.

        The simulator sends the first token after `latency_ms` and each later one `token_interval_ms`
        after the previous: latency + (tokens - 1) * interval (just latency for zero tokens).
        """
        return (self.latency_ms + max(self.output_tokens - 1, 0) * self.token_interval_ms) / 1000.0


@dataclass(frozen=True, slots=True)
class WorkloadSpec:
    """The benchmark's default workload: 32 agents (more than the catalog's 28 slots) x 6 requests."""

    agents: int = 32
    requests: int = 6
    mix: Mix = Mix(1, 2, 7)
    latency_ms: float = 250.0
    output_tokens: int = 8
    token_interval_ms: float = 30.0
    jitter: float = 0.5  # latency and tokens drawn uniformly in [1 - jitter, 1 + jitter] × the mean
    seed: int = 1
    # Not fixed: output tokens drawn from this law instead of spread evenly (jitter: the latency only).
    lengths: Lengths = field(default_factory=Lengths)
    # Prompts: mean size in tokens (0: the short default), drawn from `prompt_lengths`; each 1000 tokens add
    # `prefill_ms_per_1k` to the time to first token (z.ai reads the prompt first).
    prompt_tokens: int = 0
    prompt_lengths: Lengths = field(default_factory=Lengths)
    prefill_ms_per_1k: float = 0.0


@dataclass(frozen=True, slots=True)
class Workload:
    spec: WorkloadSpec
    agents: tuple[tuple[Request, ...], ...]

    @property
    def requests(self) -> list[Request]:
        return [r for agent in self.agents for r in agent]

    @property
    def size(self) -> int:
        return sum(len(agent) for agent in self.agents)

    def work_by_tier(self) -> dict[RequestTier, float]:
        """W_t: the summed service seconds of each tier's requests."""
        work: dict[RequestTier, float] = dict.fromkeys(REQUEST_TIERS, 0.0)
        for request in self.requests:
            work[request.tier] += request.service_seconds
        return work

    def work_by_agent(self) -> list[float]:
        return [sum(r.service_seconds for r in agent) for agent in self.agents]

    def jobs(self) -> list[list[tuple[RequestTier, float]]]:
        """Each agent's requests in order, as (tier, service seconds): what the ideal queues schedule."""
        return [[(r.tier, r.service_seconds) for r in agent] for agent in self.agents]

    def tier_counts(self) -> dict[RequestTier, int]:
        counts: dict[RequestTier, int] = dict.fromkeys(REQUEST_TIERS, 0)
        for request in self.requests:
            counts[request.tier] += 1
        return counts


def make_workload(spec: WorkloadSpec) -> Workload:
    """The same spec always gives the same workload."""
    if spec.agents < 1 or spec.requests < 1:
        raise ValueError("agents and requests must be >= 1")
    if not 0 <= spec.jitter < 1:
        raise ValueError(f"jitter must be in [0, 1), got {spec.jitter}")
    spec.lengths.validate()
    spec.prompt_lengths.validate("prompt_lengths")
    if spec.prompt_tokens < 0 or spec.prefill_ms_per_1k < 0:
        raise ValueError("prompt_tokens and prefill_ms_per_1k must be >= 0")
    rng = random.Random(spec.seed)
    weights = spec.mix.weights()

    def spread(mean: float) -> float:
        return mean * rng.uniform(1 - spec.jitter, 1 + spec.jitter)

    def tokens() -> int:
        if spec.lengths.shape != "fixed":
            return spec.lengths.draw(spec.output_tokens, rng)
        return max(1, round(spread(spec.output_tokens))) if spec.output_tokens else 0

    prompts = random.Random(f"prompts-{spec.seed}")  # apart: the rest of the workload is as without prompts

    def prompt() -> int:
        return spec.prompt_lengths.draw(spec.prompt_tokens, prompts) if spec.prompt_tokens else 0

    agents = []
    for agent in range(spec.agents):
        requests = []
        for index in range(spec.requests):
            tier = rng.choices(REQUEST_TIERS, weights)[0]
            latency, output, size = spread(spec.latency_ms), tokens(), prompt()
            requests.append(
                Request(
                    agent=agent,
                    index=index,
                    tier=tier,
                    latency_ms=round(latency + size / 1000 * spec.prefill_ms_per_1k, 1),
                    output_tokens=output,
                    token_interval_ms=spec.token_interval_ms,
                    prompt_tokens=size,
                )
            )
        agents.append(tuple(requests))
    return Workload(spec, tuple(agents))
