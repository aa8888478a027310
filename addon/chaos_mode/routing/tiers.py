"""Incoming model name -> request tier (opus -> heavy, sonnet -> medium, haiku -> light)."""

from __future__ import annotations

from typing import Final

from chaos_mode.config.schema import ModelRouting
from chaos_mode.zai.catalog import RequestTier, family_tier

_MODEL_TIER_TO_REQUEST: dict[str, RequestTier] = {"HEAVY": "heavy", "MEDIUM": "medium", "LIGHT": "light"}


class TierClassifier:
    """Classify the `model` field of a request, by the config's tier rules.

    A catalog model name maps to its own tier, an alias to the tier of the model serving it; otherwise the
    first configured pattern found in the lower-cased name decides, then the tier z.ai's naming gives the
    name (`zai.catalog.family_tier`); anything else (including no name at all) gets the default tier.
    """

    def __init__(self, config: ModelRouting) -> None:
        self._catalog: dict[str, RequestTier] = {
            name.lower(): _MODEL_TIER_TO_REQUEST[spec.tier] for name, spec in config.models.items()
        }
        for alias, served in config.aliases.items():
            if served in config.models:
                self._catalog.setdefault(alias.lower(), _MODEL_TIER_TO_REQUEST[config.models[served].tier])
        self._patterns = tuple(config.tier_rules.patterns.items())
        self.default: RequestTier = config.tier_rules.default

    def classify(self, model: object) -> RequestTier:
        return self.lookup(model)[0]

    def is_known(self, model: object) -> bool:
        """True when the name is a catalog model or matches a pattern (not merely the default)."""
        return self.lookup(model)[1]

    def lookup(self, model: object) -> tuple[RequestTier, bool]:
        """(tier, known): known is False when only the default tier applied."""
        if not isinstance(model, str):
            return self.default, False
        name = model.strip().lower()
        if tier := self._catalog.get(name):
            return tier, True
        for pattern, tier in self._patterns:
            if pattern in name:
                return tier, True
        if family := family_tier(name):  # zai.assumptions.FAMILY_TIERS
            return _MODEL_TIER_TO_REQUEST[family[0]], True
        return self.default, False


MAX_NAMED: Final = 256  # unknown model names remembered (each named once in the log)
MAX_NAME: Final = 100  # characters of a client's model name shown in the log


class UnknownNames:
    """Model names the catalog lacks and no pattern matches, each named once in the log; at most `limit`
    remembered (the last one's line says later ones go unnamed). Client input: shown quoted, cut short."""

    def __init__(self, limit: int = MAX_NAMED) -> None:
        self._seen: set[str] = set()
        self._limit = limit

    def line(self, model: object, tier: RequestTier) -> str | None:
        """The log line for a request naming `model` routed as `tier`; None when it was said already."""
        name = model.strip()[:MAX_NAME] if isinstance(model, str) else None
        key = name.lower() if name is not None else ""
        if key in self._seen or len(self._seen) >= self._limit:
            return None
        self._seen.add(key)
        said = f"model {name!r} is not in the catalog" if name is not None else "a request names no model"
        line = f"{said}: routed as a {tier} request (tierRules.default)"
        if len(self._seen) == self._limit:
            line += f"; later unknown names are not logged ({self._limit} were)"
        return line
