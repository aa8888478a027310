"""The built-in z.ai GLM catalog: the Chaos Mode design's tiers, concurrency limits and list prices."""

from __future__ import annotations

import re
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
# Models that read images (`vision: true` in a config): a request carrying one goes to these.
DEFAULT_VISION: Final[frozenset[str]] = frozenset()
# Names z.ai serves as another model (asked -> served): the pool sends and counts the served one.
DEFAULT_ALIASES: Final[dict[str, str]] = {}

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


_FLASH = re.compile(r"-flash(x)?$")
_VISION = re.compile(r"^glm-\d+(\.\d+)?v(-|$)")
_GLM5 = re.compile(r"^glm-5(\.\d+)?(-|$)")


def family_tier(name: str) -> tuple[ModelTier, bool] | None:
    """(tier, vision) that z.ai's naming gives a model the catalog lacks, or None when it gives none.

    The family rules (an assumption: z.ai's names of 2026 follow them): `*-flash` and `*-flashx` are light,
    `glm-N.Mv*` light and vision, the rest of `glm-5*` heavy."""
    name = name.lower()
    if _FLASH.search(name):
        return "LIGHT", False
    if _VISION.match(name):
        return "LIGHT", True
    if _GLM5.match(name):
        return "HEAVY", False
    return None
