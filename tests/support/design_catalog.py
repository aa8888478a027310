"""The Chaos Mode design's catalog as the tests state it, independently of chaos_mode.zai.catalog (a change
there shows)."""

from __future__ import annotations

# Concurrency per model: heavy 3+3+2 = 8 slots, medium adds 10+5 = 23, light adds 3+1+1 = 28.
CAPS = {
    "glm-4.7": 3,
    "glm-4.6": 3,
    "glm-4.5-x": 2,
    "glm-4.5": 10,
    "glm-4.5-air": 5,
    "glm-4.7-flashx": 3,
    "glm-4.7-flash": 1,
    "glm-4.5-flash": 1,
}
HEAVY = ["glm-4.7", "glm-4.6", "glm-4.5-x"]
MEDIUM = [*HEAVY, "glm-4.5", "glm-4.5-air"]
ALL = [*MEDIUM, "glm-4.7-flashx", "glm-4.7-flash", "glm-4.5-flash"]
FREE = {"glm-4.7-flash", "glm-4.5-flash"}

# Tests of the fixed-limit policy (the queue, backpressure at the catalog's caps) turn learning off:
# with it on, a request that would wait may go one above a limit to probe it.
FIXED_LIMITS = {"learning": {"enabled": False}}

# List prices, $ per 1M tokens (input, output).
PRICES = {
    "glm-4.7": (0.60, 2.20),
    "glm-4.6": (0.60, 2.20),
    "glm-4.5-x": (2.20, 8.90),
    "glm-4.5": (0.60, 2.20),
    "glm-4.5-air": (0.20, 1.10),
    "glm-4.7-flashx": (0.07, 0.40),
    "glm-4.7-flash": (0.0, 0.0),
    "glm-4.5-flash": (0.0, 0.0),
}
TIERS = {name: "HEAVY" if name in HEAVY else "MEDIUM" if name in MEDIUM else "LIGHT" for name in ALL}

# The design's catalog as a config's `models:` block. The built-in catalog is z.ai's of December 2026: a
# test of the design's (early-2026) catalog says so by putting this in its config.
DESIGN_MODELS: dict[str, dict[str, object]] = {
    name: {
        "tier": TIERS[name],
        "maxConcurrency": CAPS[name],
        "inputPrice": PRICES[name][0],
        "outputPrice": PRICES[name][1],
        **({"free": True} if name in FREE else {}),
    }
    for name in ALL
}

# z.ai's Coding Plan of December 2026 (DESIGN.md, "z.ai in December 2026"), the built-in catalog:
# name: (tier, starting limit, $ in, $ out per 1M tokens, vision, quota weight). Heavy 2+3 = 5 slots,
# medium adds 5 = 10, light adds 2 = 12.
DEC_2026 = {
    "glm-5.4": ("HEAVY", 2, 1.40, 4.40, True, 3.0),
    "glm-5.3": ("HEAVY", 3, 1.40, 4.40, False, 3.0),
    "glm-5.3-flash": ("MEDIUM", 5, 0.15, 0.50, True, 1.0),
    "glm-4.6v": ("LIGHT", 2, 0.30, 0.90, True, 1.0),
}
DEC_2026_HEAVY = ["glm-5.4", "glm-5.3"]
DEC_2026_MEDIUM = [*DEC_2026_HEAVY, "glm-5.3-flash"]
DEC_2026_ALL = [*DEC_2026_MEDIUM, "glm-4.6v"]
# The older names z.ai serves as one of them.
DEC_2026_ALIASES = {
    "glm-5.2": "glm-5.3",
    "glm-5.1": "glm-5.3",
    "glm-5": "glm-5.3",
    "glm-5-turbo": "glm-5.3-flash",
    "glm-4.7": "glm-5.3-flash",
    "glm-4.7-flash": "glm-5.3-flash",
    "glm-4.5-flash": "glm-5.3-flash",
}
