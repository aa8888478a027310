"""The simulator's catalogs: which models z.ai serves (with their concurrency limits), which names it routes
to another model (aliases), which it no longer serves (1311), and what its models endpoint lists.

A catalog is a preset of settings (`SimSettings` fields), picked by name (`catalog` in JSON, `--catalog`);
`docs/simulator.md` says what each assumes and where it comes from.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal

from chaos_mode.zai.catalog import DEFAULT_ALIASES, DEFAULT_CATALOG, EARLY_2026_CATALOG

AliasCounters = Literal["shared", "own"]
ALIAS_COUNTERS: Final[tuple[AliasCounters, ...]] = ("shared", "own")
EARLY_2026: Final = "early-2026"
DEC_2026: Final = "2026-12"


def default_limits() -> dict[str, int]:
    """Concurrency limit of every model of the early-2026 catalog (the simulator's default)."""
    return {name: model.limit for name, model in EARLY_2026_CATALOG.items()}


# The Coding Plan of December 2026, as the proxy's built-in catalog assumes it (limits unpublished: assumed).
DEC_2026_LIMITS: Final = {name: model.limit for name, model in DEFAULT_CATALOG.items()}
DEC_2026_ALIASES: Final = dict(DEFAULT_ALIASES)
DEC_2026_RETIRED: Final = ("glm-4.5", "glm-4.5-air", "glm-4.6", "glm-4.5-x", "glm-4.7-flashx")
# What one client saw listed on 2026-09-16 (retired names included), and glm-5.4 since (assumed).
DEC_2026_LISTED: Final = (
    "glm-4.5", "glm-4.5-air", "glm-4.6", "glm-4.7", "glm-5", "glm-5-turbo", "glm-5.1", "glm-5.2", "glm-5.3",
    "glm-5.3-flash", "glm-5.4",
)  # fmt: skip


def catalog_settings(name: str) -> dict[str, Any]:
    """The settings of catalog `name` (fresh copies); ValueError naming the known ones."""
    match name:
        case "early-2026":
            return {"limits": default_limits(), "aliases": {}, "retired": [], "listed": None}
        case "2026-12":
            return {
                "limits": dict(DEC_2026_LIMITS),
                "aliases": dict(DEC_2026_ALIASES),
                "retired": list(DEC_2026_RETIRED),
                "listed": list(DEC_2026_LISTED),
            }
    raise ValueError(f"catalog: one of {EARLY_2026}, {DEC_2026}, got {name!r}")


def model_names(name: str, value: Any) -> list[str]:
    """A list of non-empty model names (``retired``, ``listed``)."""
    if not isinstance(value, list | tuple) or any(not isinstance(m, str) or not m for m in value):
        raise ValueError(f"{name}: expected a list of model names, got {value!r}")
    return list(value)


def alias_map(value: Any) -> dict[str, str]:
    """``{requested name: served model}`` (``aliases``)."""
    if not isinstance(value, Mapping) or any(
        not isinstance(k, str) or not k or not isinstance(v, str) or not v for k, v in value.items()
    ):
        raise ValueError(f"aliases: expected an object of name: served model, got {value!r}")
    return dict(value)


def check_catalog(limits: Mapping[str, int], aliases: Mapping[str, str], retired: list[str]) -> None:
    """Every alias routes to a served model; no name is served, routed and retired at once (ValueError)."""
    for alias, served in aliases.items():
        if served not in limits:
            raise ValueError(f"aliases.{alias}: {served!r} is not a served model (no limit for it)")
        if alias in limits:
            raise ValueError(f"aliases.{alias}: a served model (in limits) cannot be an alias too")
    for name in retired:
        if name in limits or name in aliases:
            raise ValueError(f"retired: {name!r} is served (in limits or aliases)")
