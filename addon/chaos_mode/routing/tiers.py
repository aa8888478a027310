"""Incoming model name -> request tier (opus -> heavy, sonnet -> medium, haiku -> light)."""

from __future__ import annotations

from chaos_mode.config.schema import ModelRouting
from chaos_mode.zai.catalog import RequestTier

_MODEL_TIER_TO_REQUEST: dict[str, RequestTier] = {"HEAVY": "heavy", "MEDIUM": "medium", "LIGHT": "light"}


class TierClassifier:
    """Classify the `model` field of a request, by the config's tier rules.

    A catalog model name maps to its own tier; otherwise the first configured pattern found in the
    lower-cased name decides; anything else (including no name at all) gets the default tier.
    """

    def __init__(self, config: ModelRouting) -> None:
        self._catalog: dict[str, RequestTier] = {
            name.lower(): _MODEL_TIER_TO_REQUEST[spec.tier] for name, spec in config.models.items()
        }
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
        return self.default, False
