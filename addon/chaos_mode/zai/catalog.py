"""The built-in z.ai GLM catalog: the Chaos Mode design's tiers, concurrency limits and list prices."""

from __future__ import annotations

from typing import Final, Literal

ModelTier = Literal["HEAVY", "MEDIUM", "LIGHT"]
RequestTier = Literal["heavy", "medium", "light"]

MODEL_TIERS: Final[tuple[ModelTier, ...]] = ("HEAVY", "MEDIUM", "LIGHT")
REQUEST_TIERS: Final[tuple[RequestTier, ...]] = ("heavy", "medium", "light")

# Higher rank = higher quality. A floor admits every model whose rank is at least the floor's.
TIER_RANK: Final[dict[ModelTier, int]] = {"HEAVY": 3, "MEDIUM": 2, "LIGHT": 1}

# name: (tier, max concurrency, $ input per 1M tokens, $ output per 1M tokens, free)
DEFAULT_CATALOG: Final[dict[str, tuple[ModelTier, int, float, float, bool]]] = {
    "glm-4.7": ("HEAVY", 3, 0.60, 2.20, False),
    "glm-4.6": ("HEAVY", 3, 0.60, 2.20, False),
    "glm-4.5-x": ("HEAVY", 2, 2.20, 8.90, False),
    "glm-4.5": ("MEDIUM", 10, 0.60, 2.20, False),
    "glm-4.5-air": ("MEDIUM", 5, 0.20, 1.10, False),
    "glm-4.7-flashx": ("LIGHT", 3, 0.07, 0.40, False),
    "glm-4.7-flash": ("LIGHT", 1, 0.0, 0.0, True),
    "glm-4.5-flash": ("LIGHT", 1, 0.0, 0.0, True),
}

# The account (every model's concurrency counted together) where models are named: in learned limits, probes,
# the fleet's rows. No model may be named so (config refuses a name starting with "*").
ACCOUNT: Final = "*account"

DEFAULT_UPSTREAM_HOSTS: Final[tuple[str, ...]] = ("api.z.ai", "open.bigmodel.cn")

# The Anthropic door: any path ending so (the base URL a client is given varies), the query string aside.
MESSAGES_SUFFIX: Final = "/v1/messages"
# z.ai's OpenAI-compatible chat completions: the general API and the Coding Plan's.
DEFAULT_OPENAI_PATHS: Final[tuple[str, ...]] = (
    "/api/paas/v4/chat/completions",
    "/api/coding/paas/v4/chat/completions",
)
