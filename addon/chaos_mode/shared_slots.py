"""Slots shared by a fleet of proxies on one account: a local mirror of the fleet's counts, leases.

Pure: the shared store itself (Redis) sits behind `Fleet`. The pool selects on the mirror (this proxy's
own slots plus the others' as last seen) with no await; `confirm` then asks the fleet, which admits the
slot as a lease only within the model's and the account's caps. Each held slot is one lease; leases of one
model are interchangeable, so `release(model)` gives back any of this proxy's leases of that model.

When the fleet's store is unreachable the proxy serves on its own slots alone, with `share` of each
limit, until the store is back; then every lease held is written again (`leases`) and the mirror is
rebuilt from the next tally.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

FALLBACK_SHARE = 0.5  # of each limit, when Redis went away before any other proxy was seen


@dataclass(frozen=True, slots=True)
class Tally:
    """The fleet's counts as the shared store saw them: per model, the account, and who holds what."""

    models: Mapping[str, int]
    total: int
    proxies: Mapping[str, int] = field(default_factory=dict)  # live proxy id -> leases it holds


@dataclass(frozen=True, slots=True)
class Verdict:
    """The shared store's answer to a lease asked for: taken or not, and the counts it saw after."""

    taken: bool
    in_flight: int  # the model's leases, this one included when taken
    total: int  # the account's


class Fleet(Protocol):
    """The shared store as `SharedSlots` uses it. None from `confirm`: the store cannot answer now."""

    async def confirm(self, model: str, lease: str, cap: int, account_cap: int) -> Verdict | None: ...

    def release(self, model: str, lease: str) -> None:
        """Give the lease back (in the background; its TTL ends it if the store cannot be reached)."""
        ...


class SharedSlots:
    """`SlotStore` over a fleet: the local mirror, this proxy's leases, and the share used alone."""

    confirms = True

    def __init__(
        self,
        proxy_id: str,
        *,
        share: float | None = None,
        on_freed: Callable[[], None] = lambda: None,
    ) -> None:
        self.proxy_id = proxy_id
        self.fleet: Fleet | None = None  # None: not connected yet, this proxy serves alone
        self.configured_share = share  # None: 1 / the number of proxies last seen
        self.on_freed = on_freed  # the fleet freed capacity: the pool's waiters may use it
        self._ids = itertools.count(1)
        self._caps: dict[str, tuple[int, int]] = {}  # the caps each model's last slot was taken under
        self._own: dict[str, int] = {}  # slots held here, confirmed or not
        self._leases: dict[str, list[str]] = {}  # confirmed leases held here, per model
        self._refused: dict[str, int] = {}  # slots the fleet refused: their release gives back no lease
        self._others: dict[str, int] = {}  # the other proxies' slots, as last seen
        self._others_total = 0
        self._counts: dict[str, int] = {}  # own + others: what selection reads
        self._total = 0
        self._alone_share: float | None = None  # the share in force while alone; None: with the fleet
        self._proxies: dict[str, int] = {}
        self.lost = 0  # times the shared store went away

    # -- what the pool reads ----------------------------------------------------------------------

    def in_flight(self, model: str) -> int:
        return self._counts.get(model, 0)

    def total(self) -> int:
        return self._total

    def counts(self) -> Mapping[str, int]:
        return self._counts

    def snapshot(self) -> dict[str, int]:
        return {model: n for model, n in self._counts.items() if n}

    def own(self) -> dict[str, int]:
        """This proxy's slots per model (the mirror shows the fleet's)."""
        return {model: n for model, n in self._own.items() if n}

    @property
    def share(self) -> float | None:
        """The share of each limit this proxy uses alone; None while the fleet's store answers."""
        return self._alone_share

    @property
    def proxies(self) -> Mapping[str, int]:
        """The live proxies of the fleet (id -> leases held), as last seen."""
        return self._proxies

    # -- taking and giving back -------------------------------------------------------------------

    def try_acquire(self, model: str, cap: int, account_cap: int) -> bool:
        share = self._alone_share
        if share is not None:  # alone: only this proxy's slots count, against its share of each limit
            cap, account_cap = _part(cap, share), _part(account_cap, share)
        held = self._counts.get(model, 0)
        if held >= cap or self._total >= account_cap:
            return False
        self._caps[model] = (cap, account_cap)
        self._own[model] = self._own.get(model, 0) + 1
        self._counts[model] = held + 1
        self._total += 1
        return True

    def release(self, model: str) -> bool:
        own = self._own.get(model, 0)
        if own <= 0:
            return False
        self._own[model] = own - 1
        self._counts[model] = self._counts.get(model, 1) - 1
        self._total -= 1
        refused = self._refused.get(model, 0)
        if refused:  # the pool gives back the slot `confirm` could not lease (at once, no await between)
            self._refused[model] = refused - 1
            return True
        leases = self._leases.get(model)
        if leases:
            lease = leases.pop()
            if self.fleet is not None:
                self.fleet.release(model, lease)
        return True

    async def confirm(self, model: str) -> bool:
        lease = f"{self.proxy_id}#{next(self._ids)}"
        fleet = self.fleet
        if fleet is None or self._alone_share is not None:
            self._hold(model, lease)  # written to the store when it is back (or first reached)
            return True
        cap, account_cap = self._caps.get(model, (0, 0))
        try:
            verdict = await fleet.confirm(model, lease, cap, account_cap)
        except BaseException:
            fleet.release(model, lease)  # cancelled while the store may have taken it
            self._refused[model] = self._refused.get(model, 0) + 1
            raise
        if verdict is None:  # the store went away meanwhile: serve on this proxy's share
            self._hold(model, lease)
            return True
        if verdict.taken:
            self._hold(model, lease)
        else:
            self._refused[model] = self._refused.get(model, 0) + 1
        self._seen(model, verdict.in_flight, verdict.total)
        return verdict.taken

    def _hold(self, model: str, lease: str) -> None:
        self._leases.setdefault(model, []).append(lease)

    def leases(self) -> list[tuple[str, str]]:
        """(model, lease) of every slot held here: renewed while held, written again after an outage."""
        return [(model, lease) for model, leases in self._leases.items() for lease in leases]

    # -- what the fleet says ----------------------------------------------------------------------

    def _seen(self, model: str, fleet_in_flight: int, fleet_total: int) -> None:
        """One model's and the account's counts, just read from the store."""
        mine = len(self._leases.get(model, ()))
        before = self._others_total
        self._set_others(model, max(fleet_in_flight - mine, 0))
        self._others_total = max(fleet_total - sum(len(v) for v in self._leases.values()), 0)
        self._total += self._others_total - before

    def _set_others(self, model: str, others: int) -> bool:
        """True when the other proxies hold fewer slots of `model` than was thought."""
        old = self._others.get(model, 0)
        self._others[model] = others
        self._counts[model] = self._own.get(model, 0) + others
        return others < old

    def freed_elsewhere(self, model: str) -> None:
        """Another proxy gave a slot of `model` back (its message): count it free now, before the next
        tally, and let the waiters try."""
        if self._alone_share is not None:
            return
        if self._others.get(model, 0) > 0:
            self._set_others(model, self._others[model] - 1)
        if self._others_total > 0:
            self._others_total -= 1
            self._total -= 1
        self.on_freed()

    def apply(self, tally: Tally) -> None:
        """The fleet's full counts (read on every renewal): rebuild the mirror; wake waiters if the
        others freed anything."""
        freed = False
        for model in set(self._others) | set(tally.models):
            mine = len(self._leases.get(model, ()))
            freed |= self._set_others(model, max(tally.models.get(model, 0) - mine, 0))
        others_total = max(tally.total - len(self.leases()), 0)
        freed |= others_total < self._others_total
        self._others_total = others_total
        self._total = sum(self._own.values()) + others_total
        self._proxies = dict(tally.proxies)
        if freed:
            self.on_freed()

    def connected(self, fleet: Fleet) -> None:
        """The store answers (again): use it. The caller writes `leases()` and applies a tally."""
        self.fleet = fleet
        self._alone_share = None

    def disconnected(self) -> float:
        """The store went away: forget the others, serve alone on a share of each limit (returned)."""
        share = self.configured_share
        if share is None:
            alive = len(self._proxies)  # this proxy included
            share = 1.0 / alive if alive else FALLBACK_SHARE
        self._alone_share = share
        self.lost += 1
        self._others.clear()
        self._others_total = 0
        self._counts = dict(self._own)
        self._total = sum(self._own.values())
        self.on_freed()
        return share


def _part(limit: int, share: float) -> int:
    """`share` of a limit, rounded down (two proxies alone on half each never exceed it together)."""
    return limit if limit >= 2**62 else math.floor(limit * share + 1e-9)


__all__: Sequence[str] = ("FALLBACK_SHARE", "Fleet", "SharedSlots", "Tally", "Verdict")
