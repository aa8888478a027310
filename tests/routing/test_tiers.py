"""Incoming model name -> request tier."""

from __future__ import annotations

from typing import Any

import pytest

from chaos_mode.config.schema import default_config, parse_config
from chaos_mode.routing.tiers import TierClassifier, UnknownNames
from support.design_catalog import DESIGN_MODELS

CLASSIFIER = TierClassifier(default_config())
DESIGN = TierClassifier(parse_config({"modelRouting": {"models": DESIGN_MODELS}}))


@pytest.mark.parametrize(
    ("model", "tier"),
    [
        ("claude-opus-4-5-20251101", "heavy"),
        ("claude-opus-4-1", "heavy"),
        ("claude-3-opus-20240229", "heavy"),
        ("claude-sonnet-4-5", "medium"),
        ("claude-sonnet-4-5-20250929", "medium"),
        ("claude-3-7-sonnet-latest", "medium"),
        ("claude-3-5-haiku-latest", "light"),
        ("claude-haiku-4-5", "light"),
        ("  Claude-HAIKU-4-5 ", "light"),  # case and blanks do not matter
        ("anthropic/claude-opus-4", "heavy"),
    ],
)
def test_claude_names(model: str, tier: str) -> None:
    assert CLASSIFIER.classify(model) == tier
    assert CLASSIFIER.is_known(model)


@pytest.mark.parametrize(
    ("model", "tier"),
    [
        ("glm-4.7", "heavy"),
        ("glm-4.6", "heavy"),
        ("glm-4.5-x", "heavy"),
        ("glm-4.5", "medium"),
        ("glm-4.5-air", "medium"),
        ("glm-4.7-flashx", "light"),
        ("glm-4.7-flash", "light"),
        ("GLM-4.5-Flash", "light"),
    ],
)
def test_a_catalog_name_keeps_its_own_tier(model: str, tier: str) -> None:
    assert DESIGN.classify(model) == tier
    assert DESIGN.is_known(model)


@pytest.mark.parametrize(
    ("model", "tier"),
    [("glm-5.4", "heavy"), ("GLM-5.3", "heavy"), ("glm-5.3-flash", "medium"), ("glm-4.6v", "light")],
)
def test_a_built_in_catalog_name_keeps_its_own_tier(model: str, tier: str) -> None:
    assert CLASSIFIER.classify(model) == tier
    assert CLASSIFIER.is_known(model)


@pytest.mark.parametrize(
    "model", ["gpt-4o", "", "glm-9", None, 42, 3.5, ["claude-opus-4"], {"m": 1}, b"opus"]
)
def test_unknown_names_get_the_default(model: Any) -> None:
    assert CLASSIFIER.default == "medium"
    assert CLASSIFIER.classify(model) == "medium"
    assert not CLASSIFIER.is_known(model)


def test_the_default_and_the_patterns_are_configurable() -> None:
    config = parse_config(
        {"modelRouting": {"tierRules": {"patterns": {"GPT-5": "heavy", "mini": "light"}, "default": "light"}}}
    )
    classifier = TierClassifier(config)
    assert classifier.classify("gpt-5-codex") == "heavy"
    assert classifier.classify("o4-mini") == "light"
    assert classifier.classify(None) == "light"
    assert classifier.classify("something-else") == "light"
    # The configured patterns replace the built-in ones; catalog names still map to their own tier.
    assert classifier.classify("claude-opus-4-5") == "light"
    assert classifier.classify("glm-5.3") == "heavy"


def test_a_custom_catalog_model_maps_to_its_tier() -> None:
    config = parse_config(
        {
            "modelRouting": {
                "models": {
                    "big-opus-killer": {"tier": "LIGHT", "maxConcurrency": 1},
                    "h": {"tier": "HEAVY", "maxConcurrency": 1},
                }
            }
        }
    )
    classifier = TierClassifier(config)
    # The catalog wins over a pattern contained in the name.
    assert classifier.classify("big-opus-killer") == "light"
    assert classifier.classify("h") == "heavy"


def test_each_unknown_name_is_named_once_in_a_bounded_set() -> None:
    names = UnknownNames(limit=3)
    assert names.line("glm-5.4", "medium") == (
        "model 'glm-5.4' is not in the catalog: routed as a medium request (tierRules.default)"
    )
    assert names.line(" GLM-5.4 ", "medium") is None  # the same name, said once
    assert (
        names.line(None, "medium")
        == "a request names no model: routed as a medium request (tierRules.default)"
    )
    assert names.line(7, "medium") is None  # no name at all, said once
    last = names.line("x\n" + "y" * 500, "light")
    assert last is not None and "\n" not in last and len(last) < 250
    assert last.endswith("; later unknown names are not logged (3 were)")
    assert names.line("glm-9", "medium") is None  # the set is full: counted elsewhere, not logged


@pytest.mark.parametrize(
    ("model", "tier"),
    [
        ("glm-5.1", "heavy"),  # a built-in alias: the tier of glm-5.3, which serves it
        ("GLM-4.7", "medium"),  # served by glm-5.3-flash
        ("glm-5.9", "heavy"),  # not known at all: z.ai's naming (glm-5*)
        ("glm-9-flash", "light"),
        ("glm-5v-turbo", "light"),
    ],
)
def test_a_name_the_catalog_lacks_takes_its_served_models_tier_else_its_family(model: str, tier: str) -> None:
    assert TierClassifier(default_config()).lookup(model) == (tier, True)
