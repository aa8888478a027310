"""Names z.ai serves as another model, and the catalog they fold into.

z.ai routes older names to newer models silently (`zai.catalog.DEFAULT_ALIASES`) and names the model that
served in every answer. Concurrency belongs to the model that serves (the safe reading of "each model has its
own concurrency limit": whether an alias shares its target's counter is unpublished:
`zai.assumptions.ALIAS_SHARES_COUNTER`), so the pool counts,
sends and learns by the served model: a catalog model found to be served as another is folded into that
one (`fold`), and a request is sent under the served model's own name. A served model the catalog lacks takes
the tier z.ai's naming gives it (`zai.catalog.family_tier`, `zai.assumptions.FAMILY_TIERS`), else the lowest:
a floor is judged by what serves, never by the name asked.

The map holds the config's aliases and the learned ones (asked -> served, each with when it was learned),
kept with the learned limits and shared by a fleet (`rows`, `merge`: the last one learned wins).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, Final

from chaos_mode.config.schema import MODEL_NAME, ModelRouting, ModelSpec
from chaos_mode.zai.catalog import family_tier

ROW_PREFIX: Final = "*alias:"  # a fleet row naming an alias (no model name starts with "*")
MAX_LEARNED: Final = 256  # names remembered: z.ai lists a few dozen


class Aliases:
    """asked -> served: the config's and the learned ones."""

    def __init__(self, wall_clock: Callable[[], float]) -> None:
        self._wall_clock = wall_clock
        self._given: dict[str, str] = {}
        self._learned: dict[str, tuple[str, float]] = {}  # asked -> (served, learned at, wall clock)
        self.confirmed: set[str] = set()  # names seen served as themselves (a listed model's tier is trusted)
        self.version = 0  # grows with every change of the learned map

    def configure(self, given: Mapping[str, str]) -> None:
        self._given = dict(given)

    def served(self, name: str) -> str:
        """The model that serves `name` (itself when no alias is known)."""
        for _ in range(len(self._learned) + len(self._given) + 1):
            learned = self._learned.get(name)
            target = learned[0] if learned is not None else self._given.get(name)
            if target is None or target == name:
                return name
            name = target
        return name  # a cycle: stop where it stands

    def learn(self, asked: str, served: str, at: float | None = None) -> bool:
        """`asked` was answered by `served`; True when the map changed. The served model answers as itself
        from now on (an older alias of it is dropped)."""
        if asked == served or not MODEL_NAME.fullmatch(served) or served.startswith("*"):
            return False
        known = self._learned.get(asked)
        if known is not None and known[0] == served:
            return False
        if known is None and self._given.get(asked) == served:
            return False
        if known is None and len(self._learned) >= MAX_LEARNED:
            return False
        self._learned[asked] = (served, self._wall_clock() if at is None else at)
        self._learned.pop(served, None)
        self.version += 1
        return True

    def forget(self) -> None:
        """Forget what was learned (the config's aliases stay)."""
        self._learned.clear()
        self.confirmed.clear()
        self.version += 1

    def learned(self) -> dict[str, str]:
        return {asked: served for asked, (served, _) in self._learned.items()}

    def all(self) -> dict[str, str]:
        """Every alias known, resolved to the model that serves it."""
        names = {**self._given, **self.learned()}
        return {name: self.served(name) for name in names if self.served(name) != name}

    def rows(self, since: float = -math.inf) -> dict[str, dict[str, Any]]:
        """The aliases learned after `since` (wall clock), as the fleet and the state file keep them."""
        return {
            ROW_PREFIX + asked: {"servedAs": served, "changedAt": at}
            for asked, (served, at) in self._learned.items()
            if at > since
        }

    def merge(self, rows: Mapping[str, Any]) -> int:
        """Take the aliases learned elsewhere (`rows` as `rows` writes them; others are skipped), each only
        when newer than ours; returns how many were taken."""
        found = []
        for key, row in rows.items():
            if not key.startswith(ROW_PREFIX) or not isinstance(row, Mapping):
                continue
            asked, served, at = key[len(ROW_PREFIX) :], row.get("servedAs"), row.get("changedAt")
            if not isinstance(served, str) or not MODEL_NAME.fullmatch(asked):
                continue
            if isinstance(at, bool) or not isinstance(at, int | float) or not math.isfinite(at):
                continue
            found.append((float(at), asked, served))
        taken = 0
        for at, asked, served in sorted(found):  # as they were learned: a later one may drop an earlier
            known = self._learned.get(asked)
            if known is None or known[1] < at:
                taken += self.learn(asked, served, at)
        return taken


def fold(config: ModelRouting, aliases: Aliases) -> tuple[ModelRouting, dict[str, str]]:
    """The catalog as z.ai serves it, and the catalog models folded away (asked -> served).

    Each catalog model served as another leaves the catalog; the model serving it is in the catalog at its
    own place, or takes the folded one's (its limits, prices and weight as starting guesses, its tier from
    z.ai's naming, else the lowest)."""
    models: dict[str, ModelSpec] = {}
    folded: dict[str, str] = {}
    for name, spec in config.models.items():
        served = aliases.served(name)
        if served == name:
            models.setdefault(name, spec)
            continue
        folded[name] = served
        if served in config.models or served in models:
            continue
        tier, vision = family_tier(served) or ("LIGHT", False)  # zai.assumptions.FAMILY_TIERS
        models[served] = spec.model_copy(update={"tier": tier, "vision": vision, "ceiling": None})
    if not folded:
        return config, folded
    chaos = config.chaos_mode
    exclude = tuple(name for name in chaos.exclude_models if name in models)
    return (
        config.model_copy(
            update={
                "models": models,
                "aliases": {**config.aliases, **folded},
                "chaos_mode": chaos.model_copy(update={"exclude_models": exclude}),
            }
        ),
        folded,
    )


NOT_LISTED: Final = "not listed by z.ai's models endpoint"
LISTED_LIMIT: Final = 1  # a model z.ai lists that the catalog lacks starts here; learning finds the rest


def read_listing(document: Any) -> list[str] | None:
    """The model names of z.ai's models list (OpenAI's shape: `{"data": [{"id": name}, ...]}`); None when
    it is not one (names that are not model names are left out)."""
    data = document.get("data") if isinstance(document, dict) else None
    if not isinstance(data, list):
        return None
    names = (item.get("id") for item in data if isinstance(item, dict))
    return list(dict.fromkeys(n for n in names if isinstance(n, str) and MODEL_NAME.fullmatch(n)))[
        :MAX_LEARNED
    ]


def offered(listed: list[str], config: ModelRouting, aliases: Aliases) -> dict[str, ModelSpec]:
    """The models z.ai lists that the catalog lacks and z.ai's naming gives a tier (`family_tier`), each
    starting at `LISTED_LIMIT`: a name known to be served as another is not one of them. Until an answer
    shows it served as itself it is the lowest tier: a listed name may be an alias of a lighter model (z.ai
    lists glm-5-turbo, served by glm-5.3-flash), and a floor is never broken on a name's word."""
    specs = {}
    for name in listed:
        known = name in config.models or aliases.served(name) != name
        family = None if known or name.startswith("*") else family_tier(name)  # zai.assumptions.FAMILY_TIERS
        if family is not None:
            tier = family[0] if name in aliases.confirmed else "LIGHT"
            specs[name] = ModelSpec(tier=tier, vision=family[1], max_concurrency=LISTED_LIMIT)
    return specs
