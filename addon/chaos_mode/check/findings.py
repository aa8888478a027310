"""What the check found on an account, and how it is told: the short report, and the file of findings.

The file (JSON, which YAML readers read too):

    {"host": "https://api.z.ai", "checked": "2026-12-05T07:40:00Z", "door": "anthropic",
     "aliases": {"glm-4.7": "glm-5.3-flash", ...},      # name asked -> model that answered as
     "served": ["glm-5.3", ...],                         # names answered as themselves
     "notServed": {"glm-4.5": "1311", ...},              # names refused for themselves (1311, 1211, 1113)
     "unchecked": {"glm-4.6v": "1305", ...},             # names with no verdict (busy, budget spent)
     "facts": {"aliasCounters": "shared" | "own" | null, # an alias counts on its target's slots, or its own
               "headsWithFirstToken": true | false | null,
               "limits": {"glm-5.3-flash": 5}}}          # held streams a model took before its 1302
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, Literal

NOT_SERVED_CODES: Final = frozenset({"1311", "1211", "1113"})  # not in plan, unknown, not in plan/balance
Counters = Literal["shared", "own"]
# A first token sooner than this after the request says nothing about when the head came.
MIN_FIRST_TOKEN_SECONDS: Final = 0.2


@dataclass(frozen=True)
class NameResult:
    """What a request for one name got: the model that answered, or z.ai's code (or why there is none)."""

    served: str | None = None
    code: str | None = None
    why: str = ""

    @property
    def not_served(self) -> bool:
        return self.served is None and self.code in NOT_SERVED_CODES


@dataclass(frozen=True)
class Verdict[T]:
    """A fact found (`value`), or None with why not; `why` says how it was found either way."""

    value: T | None
    why: str


@dataclass
class Findings:
    host: str
    door: str
    checked: datetime
    names: dict[str, NameResult] = field(default_factory=dict)
    alias_counters: Verdict[Counters] = Verdict(None, "not checked")
    heads_with_first_token: Verdict[bool] = Verdict(None, "not checked")
    limits: dict[str, int] = field(default_factory=dict)
    requests: int = 0
    budget: int = 0

    @property
    def aliases(self) -> dict[str, str]:
        return {n: r.served for n, r in self.names.items() if r.served is not None and r.served != n}

    def document(self) -> dict[str, Any]:
        """The findings as the file holds them (see the module's docstring)."""
        return {
            "host": self.host,
            "checked": self.checked.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "door": self.door,
            "aliases": self.aliases,
            "served": sorted(n for n, r in self.names.items() if r.served == n),
            "notServed": {n: r.code for n, r in self.names.items() if r.not_served},
            "unchecked": {
                n: r.code or r.why for n, r in self.names.items() if r.served is None and not r.not_served
            },
            "facts": {
                "aliasCounters": self.alias_counters.value,
                "headsWithFirstToken": self.heads_with_first_token.value,
                "limits": dict(self.limits),
            },
        }

    def report(self) -> list[str]:
        """The short report, one line a fact."""
        lines = [
            f"chaos-mode check of {self.host} ({self.door} door), "
            f"{self.checked:%Y-%m-%d %H:%M} UTC: {self.requests} requests of {self.budget}"
        ]
        width = max((len(n) for n in self.names), default=0)
        for name, result in sorted(self.names.items(), key=lambda item: _order(*item)):
            lines.append(f"  {name:<{width}}  {_said(name, result)}")
        counters = self.alias_counters
        said = {"shared": "shared with its target", "own": "its own", None: "not found"}[counters.value]
        lines.append(f"alias concurrency counter: {said} ({counters.why})")
        heads = self.heads_with_first_token
        said = {True: "only with the first token", False: "before the first token", None: "not found"}[
            heads.value
        ]
        lines.append(f"stream heads: {said} ({heads.why})")
        return lines


def _said(name: str, result: NameResult) -> str:
    if result.served == name:
        return "served as itself"
    if result.served is not None:
        return f"-> {result.served}"
    if result.not_served:
        return f"not served ({result.code})"
    return f"no verdict ({result.code or result.why})"


def _order(name: str, result: NameResult) -> tuple[int, str, str]:
    """Served models first, each followed by its aliases; then names not served; then the rest."""
    if result.served is not None:
        return 0, result.served, "" if result.served == name else name
    return (1 if result.not_served else 2), name, ""


def alias_to_test(names: Mapping[str, NameResult]) -> tuple[str, str] | None:
    """(alias, target) for the counter test: the target with the most aliases (ties: by name), and its
    first alias; None when no name answered as another model."""
    by_target: dict[str, list[str]] = {}
    for name, result in names.items():
        if result.served is not None and result.served != name:
            by_target.setdefault(result.served, []).append(name)
    if not by_target:
        return None
    target = min(by_target, key=lambda t: (-len(by_target[t]), t))
    return sorted(by_target[target])[0], target


def heads_verdict(samples: Sequence[tuple[float, float]]) -> Verdict[bool]:
    """Whether stream heads come only with the first token, from (head, first token) seconds after each
    request was sent: a head at most a tenth of the time to the first token (or 50 ms) before it came with
    it, one at least a quarter of that time (and 100 ms) before it came before it; the verdict of most
    samples, none on a tie."""
    votes: list[bool] = []
    for head, first in samples:
        gap = first - head
        if first < MIN_FIRST_TOKEN_SECONDS:
            continue
        if gap <= max(0.05, 0.1 * first):
            votes.append(True)
        elif gap >= max(0.1, 0.25 * first):
            votes.append(False)
    if not samples:
        return Verdict(None, "no stream was answered")
    head = statistics.median(h for h, _ in samples)
    first = statistics.median(f for _, f in samples)
    timing = f"head {head:.2f} s, first token {first:.2f} s after the request, median of {len(samples)}"
    with_token = votes.count(True)
    if not votes or with_token * 2 == len(votes):
        return Verdict(None, f"{timing}: too close to tell")
    return Verdict(with_token * 2 > len(votes), timing)
