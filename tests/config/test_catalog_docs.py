"""The catalogs as the docs give them: the early-2026 example config is the design's catalog, and
docs/catalog.md's table is the built-in one."""

from __future__ import annotations

import re
from pathlib import Path

from chaos_mode.config.file import load_config
from chaos_mode.config.schema import parse_config
from chaos_mode.zai.catalog import EARLY_2026_CATALOG, models_block
from support.design_catalog import ALL, CAPS, DEC_2026, DESIGN_MODELS, FREE, PRICES, TIERS

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_the_early_2026_example_is_the_design_catalog() -> None:
    config = load_config(DOCS / "examples" / "early-2026.yaml")
    assert list(config.models) == ALL  # catalog order is the round-robin order
    for name, spec in config.models.items():
        assert (spec.tier, spec.max_concurrency) == (TIERS[name], CAPS[name]), name
        assert (spec.input_price, spec.output_price) == PRICES[name], name
        assert spec.free == (name in FREE) and not spec.vision and spec.quota_weight == 1.0, name
    assert config.aliases == {} and config.replaces_catalog
    assert config.total_capacity == 28
    # The same table as the one the simulator and the benchmarks use, and as DESIGN_MODELS.
    assert (
        config.models == parse_config({"modelRouting": {"models": models_block(EARLY_2026_CATALOG)}}).models
    )
    assert config.models == parse_config({"modelRouting": {"models": DESIGN_MODELS}}).models


def test_the_catalog_page_states_the_built_in_catalog() -> None:
    text = (DOCS / "catalog.md").read_text(encoding="utf-8")
    rows = re.findall(
        r"^\| (glm-[\w.-]+) \| (\w+) \| (\d+) \| ([\d.]+) / ([\d.]+) \| (yes|no) \| (\d+) \|", text, re.M
    )
    stated = {
        name: (tier, int(limit), float(price_in), float(price_out), vision == "yes", float(weight))
        for name, tier, limit, price_in, price_out, vision, weight in rows
    }
    assert stated == DEC_2026


def test_the_configuration_page_links_the_catalog_and_the_example() -> None:
    text = (DOCS / "configuration.md").read_text(encoding="utf-8")
    assert "(catalog.md)" in text and "(examples/early-2026.yaml)" in text
