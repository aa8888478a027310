"""What the pool learned of z.ai beside its slots, and the catalog it serves from it: the learned limits
(`learning.limits`), the names z.ai serves as other models and the models its endpoint lists
(`routing.aliases`). A fleet's proxies exchange it (`rows`, `adopt_*`) and the state file keeps it (`dump`,
`restore`); whatever changes the catalog makes the pool take its config again (`refold`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from chaos_mode.config.schema import ModelRouting, ModelSpec
from chaos_mode.learning.limits import LearnedLimits
from chaos_mode.routing.aliases import NOT_LISTED, Aliases, fold, offered
from chaos_mode.routing.cooldowns import CooldownState

if TYPE_CHECKING:
    from chaos_mode.routing.pool import Slot


class Learned:
    def __init__(
        self,
        limits: LearnedLimits,
        aliases: Aliases,
        *,
        refold: Callable[[], None],
        limits_changed: Callable[[], bool],
        cooldowns: Callable[[], CooldownState],
    ) -> None:
        self.limits, self.aliases = limits, aliases
        self._refold, self._limits_changed, self._cooldowns = refold, limits_changed, cooldowns
        self._listed: list[str] | None = None  # what z.ai's models endpoint listed last (None: not read)
        self._dropped: set[str] = set()  # catalog models a listing dropped: out until listed again
        self._offered: dict[str, ModelSpec] = {}  # models it lists that the catalog lacks, offered
        self.folded: dict[str, str] = {}  # catalog names z.ai serves as another: asked -> served
        self._models: Mapping[str, ModelSpec] = {}  # the catalog served now

    def catalog(self, given: ModelRouting) -> ModelRouting:
        """The catalog the pool serves for the config `given`: as z.ai serves it (`routing.aliases.fold`),
        with the models its endpoint lists offered."""
        self.aliases.configure(given.aliases)
        self._offered = {} if self._listed is None else offered(self._listed, given, self.aliases)
        if self._offered:
            given = given.model_copy(update={"models": {**given.models, **self._offered}})
        config, self.folded = fold(given, self.aliases)
        self._models = config.models
        return config

    @property
    def version(self) -> tuple[int, int]:
        """Grows whenever what was learned (limits, aliases) changes: when to write it again."""
        return self.limits.version, self.aliases.version

    def rows(self, since: float = -math.inf) -> dict[str, dict[str, Any]]:
        """What was learned after `since` (wall clock): the limits' rows and the aliases' (a fleet's)."""
        return {**self.limits.rows(since), **self.aliases.rows(since)}

    def adopt_limits(self, rows: Mapping[str, Any]) -> int:
        """Take the limits other proxies learned, where newer than ours (see `LearnedLimits.merge`)."""
        taken = self.limits.merge(rows)
        self._limits_changed()
        return taken

    def adopt_aliases(self, rows: Mapping[str, Any]) -> int:
        """Take the aliases other proxies (or an earlier run) learned, where newer than ours."""
        taken = self.aliases.merge(rows)
        if taken:
            self._refold()
        return taken

    def dump(self) -> dict[str, Any]:
        """What was learned, as the state file keeps it (`restore` takes it back)."""
        return {**self.limits.dump(), "aliases": self.aliases.rows()}

    def restore(self, data: Any) -> int:
        """Take back what `dump` wrote; how many limits and aliases were restored. `ValueError` for data
        that is not ours (see `LearnedLimits.restore`)."""
        restored = self.limits.restore(data)  # first: data not ours is refused before anything is taken
        rows = data.get("aliases")
        taken = self.adopt_aliases(rows) if isinstance(rows, Mapping) else 0
        if restored:
            self._refold()  # re-derive what selection reads from the restored limits
        return taken + restored

    def reset(self) -> None:
        """Forget every learned limit and alias: back to the catalog's (and the config's) values."""
        self.aliases.forget()
        self._refold()
        self.limits.reset()
        self._limits_changed()

    def listed(self, names: list[str]) -> list[str]:
        """z.ai's models endpoint listed `names`: a model it lists that the catalog lacks is offered where
        its naming gives it a tier (`routing.aliases.offered`); a catalog model it no longer lists (listed
        by an earlier reading) leaves rotation, and comes back once listed again. One never listed stays:
        z.ai serves models it does not list (glm-4.6v, zai.assumptions.LISTING_IS_PARTIAL). A list naming
        no model the pool serves is not taken (another host's, or a broken one). Returns what changed, a
        line each."""
        serving = [name for name in self._models if name not in self.folded]
        if not names or not any(self.aliases.served(n) in serving or n in serving for n in names):
            return []
        before, ever = list(self._models), set(self._listed or ()) | self._dropped
        self._listed = names
        self._refold()
        models = self._models
        lines = [
            f"{name}: listed by z.ai, offered ({models[name].tier})" for name in models if name not in before
        ]
        lines += [f"{name}: no longer listed by z.ai, withdrawn" for name in before if name not in models]
        listed, cooldowns = set(names), self._cooldowns()
        for name in self._models:
            block = cooldowns.block(name)
            if name not in listed and name in ever and block is None:
                self._dropped.add(name)
                cooldowns.take_out(name, NOT_LISTED)
                lines.append(f"{name}: {NOT_LISTED}, out of rotation")
            elif name in listed and block is not None and block.reason == NOT_LISTED:
                cooldowns.restore(name)
                lines.append(f"{name}: listed again, back in rotation")
        return lines

    def served(self, slot: Slot, served: str) -> bool:
        """z.ai named the model that served `slot`'s request (zai.assumptions.ANSWERS_NAME_SERVED_MODEL): a
        catalog model served as another is folded into it (zai.assumptions.ALIAS_SHARES_COUNTER) from now on,
        a listed model served as itself takes its family's tier (`routing.aliases`). True when the catalog
        changed."""
        if served.lower() == slot.model.lower():
            if slot.model not in self._offered or slot.model in self.aliases.confirmed:
                return False
            self.aliases.confirmed.add(slot.model)  # a listed model served as itself: its family's tier
        elif not self.aliases.learn(slot.model, served):
            return False
        self._refold()
        return True
