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
