"""`--learning KEY=VALUE`: settings of the proxy's `learning` block for a benchmark run (the field benchmark,
`field.virtual`), each value JSON, checked against the config's schema before anything starts."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from chaos_mode.config.schema import ConfigError, parse_config

HELP = (
    "a key of the proxy's learning block and its value as JSON (e.g. ceilingFactor=1, "
    "probeIntervalSeconds=3); repeatable"
)


def parse_learning(settings: Iterable[str]) -> dict[str, Any]:
    """The `learning` block the settings give; ValueError, with a message for the command line, when one is
    not KEY=VALUE, its value not JSON, or the block not one the config accepts."""
    learning: dict[str, Any] = {}
    for setting in settings:
        key, sep, value = setting.partition("=")
        if not sep or not key:
            raise ValueError(f"--learning {setting}: expected KEY=VALUE")
        try:
            learning[key] = json.loads(value)
        except json.JSONDecodeError:
            raise ValueError(f"--learning {setting}: the value is not JSON") from None
    try:
        parse_config({"modelRouting": {"learning": learning}})
    except ConfigError as exc:
        raise ValueError(f"--learning: {exc}") from None
    return learning
