"""In-flight slot counts behind a small interface, so a shared backend can replace the in-memory one."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal, Protocol

from chaos_mode.learning.limits import Probe

Kind = Literal["clean", "refused", "stall"]  # a verdict: a clean answer, a refusal (1302), a stall


@dataclass(frozen=True, slots=True)
class ProbeClaim:
    """A probe's claim on the right to test its limit, fleet-wide (see `learning.limits`): the limit (a
    model's name, or `zai.catalog.ACCOUNT`), how long the right is held from now (seconds: the prober's
    wait before its next probe there; 0 frees it) and the limit's probes refused in a row."""

    limit: str
    seconds: float
    refused: int


@dataclass(frozen=True, slots=True)
class Confirmation:
    """A store's answer to a slot taken here: `taken`, else the slot must be released. For a probe's slot
    not taken because another proxy holds the right to probe its limit: for how many seconds more
    (`probe_held`, 0 otherwise); and the limit's probes refused in a row as the fleet counts them."""

    taken: bool
    probe_held: float = 0.0
    refused_probes: int = 0


CONFIRMED: Final = Confirmation(True)


@dataclass(frozen=True, slots=True)
class Seen:
    """One of z.ai's verdicts on a slot's request, as the pool counted it (`learning.limits`): a clean
    answer, a refusal (1302) or a stall, at `level` on its model and `total` on the account, the probe it
    was (None: none), and for a refusal or a stall `age`: the seconds from the sending of its request to the
    verdict (None: not said). A fleet's proxies learn from each other's."""

    kind: Kind
    level: int
    total: int
    probe: Probe | None = None
    age: float | None = None


class SlotStore(Protocol):
    """Where in-flight counts live. The pool's policy only talks to this. With a fleet it is
    `fleet.slots.SharedSlots`: the pool calls up into `fleet` through it, and it calls the pool back.

    A store shared by several proxies (`confirms` True) counts a slot taken here at once, on its local
    mirror of the fleet's counts, and `confirm` asks the shared store before the slot is used: not taken
    means another proxy took it first, or holds the right to probe the limit a probe's slot claims (the
    slot is still held here and must be released).
    """

    confirms: bool

    def in_flight(self, model: str) -> int: ...

    def total(self) -> int: ...

    def counts(self) -> Mapping[str, int]:
        """In-flight per model, for reading only (the policy reads it once per selection)."""
        ...

    def try_acquire(self, model: str, cap: int, account_cap: int) -> bool:
        """Take a slot of `model` if it has fewer than `cap` and the account fewer than `account_cap`."""
        ...

    def release(self, model: str) -> bool:
        """Give a slot of `model` back; False (and no change) if none was held. z.ai's verdicts on its
        request went to a fleet's other proxies as they came (`verdicts`)."""
        ...

    def snapshot(self) -> dict[str, int]: ...

    async def confirm(self, model: str, probe: ProbeClaim | None = None) -> Confirmation:
        """The fleet agrees to the slot of `model` just taken here (see the class), and a probe's slot
        (`probe`) to the right to probe its limit with it."""
        ...

    def probe_answered(self, claim: ProbeClaim) -> None:
        """A probe sent with the right to probe `claim.limit` has its verdict: the right is held
        `claim.seconds` more (0: freed at once, for the next probe anywhere)."""
        ...

    def fits(self, model: str, cap: int, account_cap: int) -> bool:
        """Whether this proxy may take one more slot of `model` beyond what the counts say (a fleet's store
        that is gone leaves each proxy a share of each limit); asked only when `confirms`."""
        ...

    def hold_back(self) -> float:
        """Seconds to leave a slot just freed to other proxies' waiters before this one's take it (0: at
        once)."""
        ...

    def serving_elsewhere(self, model: str | None) -> int:
        """Slots of `model` (all when None) that the other proxies of a fleet said z.ai answered cleanly and
        still serves, as they last said (none in one process)."""
        ...

    def riding_elsewhere(self) -> Mapping[str, int]:
        """The other proxies' attempts riding above each limit (a model's name, or ACCOUNT), as they last
        said (none in one process)."""
        ...

    def overdue_changed(self) -> None:
        """This proxy's attempts riding above the limits changed (a fleet tells the others)."""
        ...

    def verdicts(self, model: str, seen: Sequence[Seen]) -> None:
        """z.ai's verdicts on a request of `model` held here, as they come (a fleet tells the others)."""
        ...

    def queued(self) -> None:
        """A request began to wait for a slot here."""
        ...


class MemorySlots:
    """The in-memory store for one proxy process: a dict and a total, never negative."""

    __slots__ = ("_counts", "_total")

    confirms = False  # one process: a slot taken is a slot held

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}
        self._total = 0

    def in_flight(self, model: str) -> int:
        return self._counts.get(model, 0)

    def total(self) -> int:
        return self._total

    def counts(self) -> Mapping[str, int]:
        return self._counts

    def try_acquire(self, model: str, cap: int, account_cap: int) -> bool:
        held = self._counts.get(model, 0)
        if held >= cap or self._total >= account_cap:
            return False
        self._counts[model] = held + 1
        self._total += 1
        return True

    def release(self, model: str) -> bool:
        held = self._counts.get(model, 0)
        if held <= 0:
            return False
        self._counts[model] = held - 1
        self._total -= 1
        return True

    def snapshot(self) -> dict[str, int]:
        return {model: n for model, n in self._counts.items() if n}

    async def confirm(self, model: str, probe: ProbeClaim | None = None) -> Confirmation:
        return CONFIRMED

    def probe_answered(self, claim: ProbeClaim) -> None:
        pass

    def fits(self, model: str, cap: int, account_cap: int) -> bool:
        return True

    def hold_back(self) -> float:
        return 0.0

    def serving_elsewhere(self, model: str | None) -> int:
        return 0

    def riding_elsewhere(self) -> Mapping[str, int]:
        return {}

    def overdue_changed(self) -> None:
        pass

    def verdicts(self, model: str, seen: Sequence[Seen]) -> None:
        pass

    def queued(self) -> None:
        pass
