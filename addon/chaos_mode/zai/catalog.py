"""The built-in z.ai GLM catalogs (December 2026, the default; early 2026, the design's): tiers, starting
concurrency limits, list prices and the names z.ai serves as another model."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from chaos_mode.zai.quota import GLM_5_3_CREDITS

ModelTier = Literal["HEAVY", "MEDIUM", "LIGHT"]
RequestTier = Literal["heavy", "medium", "light"]

MODEL_TIERS: Final[tuple[ModelTier, ...]] = ("HEAVY", "MEDIUM", "LIGHT")
REQUEST_TIERS: Final[tuple[RequestTier, ...]] = ("heavy", "medium", "light")

# Higher rank = higher quality. A floor admits every model whose rank is at least the floor's.
TIER_RANK: Final[dict[ModelTier, int]] = {"HEAVY": 3, "MEDIUM": 2, "LIGHT": 1}


@dataclass(frozen=True, slots=True)
class CatalogModel:
    """One model of a built-in catalog: its tier, starting concurrency limit and list prices ($ per 1M
    tokens)."""

    tier: ModelTier
    limit: int
    input_price: float
    output_price: float
    free: bool = False
    vision: bool = False  # reads images
    quota_weight: float = 1.0  # prompts of the 5-hour quota one request counts
    credits: tuple[float, float, float] | None = None  # a credit plan's (input, cached, output) weights


# The Coding Plan of December 2026 (docs/catalog.md gives each row's source): the models every plan serves.
# The limits are unpublished: starting guesses (the simulator's `2026-12` preset assumes the same) that
# learning corrects.
DEFAULT_CATALOG: Final[dict[str, CatalogModel]] = {
    "glm-5.4": CatalogModel("HEAVY", 2, 1.40, 4.40, vision=True, quota_weight=3.0),
    "glm-5.3": CatalogModel("HEAVY", 3, 1.40, 4.40, quota_weight=3.0, credits=GLM_5_3_CREDITS),
    "glm-5.3-flash": CatalogModel("MEDIUM", 5, 0.15, 0.50, vision=True),
    "glm-4.6v": CatalogModel("LIGHT", 2, 0.30, 0.90, vision=True),
}
# Models that read images (`vision: true` in a config): a request carrying one goes to these.
DEFAULT_VISION: Final[frozenset[str]] = frozenset(name for name, m in DEFAULT_CATALOG.items() if m.vision)
# Names z.ai serves as another model (asked -> served): the pool sends and counts the served one.
DEFAULT_ALIASES: Final[dict[str, str]] = {
    "glm-5.2": "glm-5.3",
    "glm-5.1": "glm-5.3",
    "glm-5": "glm-5.3",
    "glm-5-turbo": "glm-5.3-flash",
    "glm-4.7": "glm-5.3-flash",
    "glm-4.7-flash": "glm-5.3-flash",  # assumed: glm-4.7-flash's own route is not published
    "glm-4.5-flash": "glm-5.3-flash",  # by way of glm-4.7-flash (routed there from 2026-01-30)
}

# The Chaos Mode design's catalog: z.ai's Coding Plan of early 2026, eight GLM-4.x models each served as
# itself. No longer the default: the simulator's `early-2026` preset and docs/examples/early-2026.yaml.
EARLY_2026_CATALOG: Final[dict[str, CatalogModel]] = {
    "glm-4.7": CatalogModel("HEAVY", 3, 0.60, 2.20),
    "glm-4.6": CatalogModel("HEAVY", 3, 0.60, 2.20),
    "glm-4.5-x": CatalogModel("HEAVY", 2, 2.20, 8.90),
    "glm-4.5": CatalogModel("MEDIUM", 10, 0.60, 2.20),
    "glm-4.5-air": CatalogModel("MEDIUM", 5, 0.20, 1.10),
    "glm-4.7-flashx": CatalogModel("LIGHT", 3, 0.07, 0.40),
    "glm-4.7-flash": CatalogModel("LIGHT", 1, 0.0, 0.0, free=True),
    "glm-4.5-flash": CatalogModel("LIGHT", 1, 0.0, 0.0, free=True),
}


def models_block(catalog: Mapping[str, CatalogModel]) -> dict[str, dict[str, Any]]:
    """`catalog` as a config's `models:` mapping (camelCase keys, defaults left out)."""
    block: dict[str, dict[str, Any]] = {}
    for name, m in catalog.items():
        row: dict[str, Any] = {
            "tier": m.tier,
            "maxConcurrency": m.limit,
            "inputPrice": m.input_price,
            "outputPrice": m.output_price,
        }
        row |= {"free": True} if m.free else {}
        row |= {"vision": True} if m.vision else {}
        row |= {"quotaWeight": m.quota_weight} if m.quota_weight != 1.0 else {}
        if m.credits is not None:
            fresh, cached, output = m.credits
            row["creditWeights"] = {"input": fresh, "cachedInput": cached, "output": output}
        block[name] = row
    return block


# The account (every model's concurrency counted together) where models are named: in learned limits, probes,
# the fleet's rows. No model may be named so (config refuses a name starting with "*").
ACCOUNT: Final = "*account"

DEFAULT_UPSTREAM_HOSTS: Final[tuple[str, ...]] = ("api.z.ai", "open.bigmodel.cn")

# The Anthropic door: any path ending so (the base URL a client is given varies), the query string aside.
MESSAGES_SUFFIX: Final = "/v1/messages"
# z.ai's list of the Coding Plan's model names (OpenAI's shape; `Authorization: Bearer <key>`). Listed is not
# served as itself: a retired name may be listed and answer 1311 (a client saw glm-4.5 listed, 2026-09-16).
MODELS_PATH: Final = "/api/coding/paas/v4/models"
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

    The family rules (`zai.assumptions.FAMILY_TIERS`: z.ai's names of 2026 follow them): `*-flash` and
    `*-flashx` are light, `glm-N.Mv*` light and vision, the rest of `glm-5*` heavy."""
    name = name.lower()
    if _FLASH.search(name):
        return "LIGHT", False
    if _VISION.match(name):
        return "LIGHT", True
    if _GLM5.match(name):
        return "HEAVY", False
    return None
