"""Slots shared by a fleet of proxies on one account: a local mirror of the fleet's counts, leases.

Pure: the shared store itself (Redis) sits behind `Fleet`. The pool selects on the mirror (this proxy's
own slots plus the others' as last seen) with no await; `confirm` then asks the fleet, which admits the
slot as a lease only within the model's and the account's caps. Each held slot is one lease; leases of one
model are interchangeable, so `release(model)` gives back any of this proxy's leases of that model.

Every lease taken or given back is also announced to the fleet (a `Notice`, numbered by the store), so
each mirror follows the others' slots as they change rather than at the next tally, and races lost to a
stale mirror stay rare. A notice carries how many wait at its sender and the place in line of the first
of them (its conversation's recent admissions, see `shares`, then how long it has waited): a slot freed
here goes to the proxy whose first waiter comes first in one queue of the fleet's
(`next_in_fleet_line`), so the fleet serves conversations in about the order one proxy would. The notice of
a slot given back names that proxy: it tries at once, the others only after `HOLD_BACK` (when it could
not use the slot), so one proxy takes a freed slot instead of every proxy racing for it. It also says
which of its sender's slots z.ai answered and still serves (`serving_elsewhere`): what z.ai serves at
once, as a clean answer counts it (see `learning.limits`), is this proxy's own and those, not every
slot of the fleet (a slot z.ai has not answered, a 1302 on its way, is none). z.ai's verdicts on a
request (`Seen`) are told as they come (`verdicts`), and the other proxies count them as their own
(`on_seen`): one body of evidence for the fleet's limits, at the same time on every proxy. And a notice
says its sender's attempts riding above the limits until their verdict (`riding_elsewhere`,
`Ledger.overdue`): z.ai holds no slot for them, so their places are the fleet's, any proxy's
request may take one.

A probe's slot also claims the right to probe its limit, fleet-wide, in the same confirmation (one prober
per limit in the fleet, see `learning.limits`): a slot whose limit's right another proxy holds is refused
like a race lost (not counted as one), with how long the right stays there; the right taken is this
proxy's, under the probe's lease id, until its verdict frees it or holds it for the prober's wait
(`probe_answered`), and a right freed by another proxy's clean answer is heard (`on_probe_answered`).

When the fleet's store is unreachable the proxy serves on its own slots alone, with `share` of each
limit, until the store is back (for `forget_after` seconds, the lease TTL, it also still counts the other
proxies' slots as last seen: those they took beyond their share before the outage are still running);
then every lease held is written again (`leases`) and the mirror is rebuilt from the next tally.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from chaos_mode.routing.slots import CONFIRMED, Confirmation, ProbeClaim, Seen
from chaos_mode.zai.catalog import ACCOUNT

if TYPE_CHECKING:
    from chaos_mode.routing.pool import ChaosPool

FALLBACK_SHARE = 0.5  # of each limit, when Redis went away before any other proxy was seen
HOLD_BACK = 0.02  # seconds a freed slot is left to the proxy it is owed to before the others try
NOBODY = (0, 0, 0.0)  # (waiting, level of the first in line, seconds it waited) when nobody waits


@dataclass(frozen=True, slots=True)
class Tally:
    """The fleet's counts as the shared store saw them: per model, the account, and who holds what."""

    models: Mapping[str, int]
    total: int
    proxies: Mapping[str, int] = field(default_factory=dict)  # live proxy id -> leases it holds
    seq: int = 0  # the store's change number when it was read (see `Notice`)
    silent: frozenset[str] = frozenset()  # live proxies that missed a renewal: likely dead


@dataclass(frozen=True, slots=True)
class Verdict:
    """The shared store's answer to a lease asked for: taken or not, and the counts it saw after."""

    taken: bool
    in_flight: int  # the model's leases, this one included when taken
    total: int  # the account's
    seq: int = 0  # the store's change number after it (see `Notice`)
    probe_held: float = 0.0  # a probe's slot not taken: seconds another proxy holds its limit's right still
    refused_probes: int = 0  # a probe's limit: its probes refused in a row, as the fleet counts them


@dataclass(frozen=True, slots=True)
class Notice:
    """What another proxy told the fleet: a lease of `model` taken (`+`) or given back (`-`), that a
    request began to wait (`=`), that its probe of the limit `model` names (a model, or the account's
    key) was answered cleanly (`!`), or that it left with all its slots (`*`). `waiting`, `level` and
    `waited`: how many wait there, the place in line of the first (its conversation's admissions lately)
    and how long it has waited (seconds). `to`: the proxy a slot given back is owed to ("" for none named:
    anyone may take it at once). `serving`: its slots z.ai answered cleanly and still serves, per model
    (None: not said, as by a proxy leaving). `seen`: what z.ai's verdicts on a request of `model` said,
    for the limits (`learning.limits`), told as they come. `overdue`: its attempts riding above the
    limits until their verdict, per model (`Ledger.overdue`; None: not said). `seq`
    numbers the changes of the store's counts, so a notice already counted by a tally or a verdict read
    after it is not counted twice."""

    seq: int
    op: str
    proxy: str
    model: str = ""
    waiting: int = 0
    level: int = 0
    waited: float = 0.0
    to: str = ""
    serving: Mapping[str, int] | None = None
    seen: tuple[Seen, ...] = ()
    overdue: Mapping[str, int] | None = None


class Fleet(Protocol):
    """The shared store as `SharedSlots` uses it. None from `confirm`: the store cannot answer now."""

    async def confirm(
        self, model: str, lease: str, cap: int, account_cap: int, probe: ProbeClaim | None = None
    ) -> Verdict | None:
        """Take the lease within the caps, and with `probe` the right to probe its limit for
        `probe.seconds` (under the same lease id) unless another proxy holds it."""
        ...

    def probe_answered(self, claim: ProbeClaim, lease: str) -> None:
        """The right to probe `claim.limit`, held under `lease`: held `claim.seconds` more from now, or
        freed (0) and the others told (in the background; it ends with its TTL otherwise)."""
        ...

    def release(self, model: str, lease: str, to: str = "") -> None:
        """Give the lease back (in the background; its TTL ends it if the store cannot be reached); its
        notice names the proxy the slot is owed to (`to`, "" for none). z.ai's verdicts on its request were
        told as they came (`tell_verdicts`)."""
        ...

    def announce(self) -> None:
        """Tell the other proxies what this one holds and waits for (in the background)."""
        ...

    def tell_verdicts(self, model: str, seen: Sequence[Seen]) -> None:
        """Tell the other proxies z.ai's verdicts on a request of `model` held here (in the background)."""
        ...


class SharedSlots:
    """`SlotStore` over a fleet: the local mirror, this proxy's leases, and the share used alone."""

    confirms = True

    def __init__(
        self,
        proxy_id: str,
        *,
        share: float | None = None,
        on_freed: Callable[[float], None] = lambda delay: None,
        on_probe_answered: Callable[[str], None] = lambda limit: None,
        on_seen: Callable[[str, Sequence[Seen]], None] = lambda model, seen: None,
        waiting: Callable[[], tuple[int, int, float]] = lambda: NOBODY,
        serving: Callable[[], Mapping[str, int]] = dict,
        overdue: Callable[[], Mapping[str, int]] = dict,
        clock: Callable[[], float] = time.monotonic,
        forget_after: float = 10.0,
    ) -> None:
        self.proxy_id = proxy_id
        self.fleet: Fleet | None = None  # None: not connected yet, this proxy serves alone
        self.configured_share = share  # None: 1 / the number of proxies last seen
        self.on_freed = on_freed  # the fleet freed capacity: the pool's waiters may use it (after a delay)
        self.on_probe_answered = on_probe_answered  # another proxy's probe of a limit was answered cleanly
        self.on_seen = on_seen  # z.ai's verdicts on a slot another proxy gave back
        self.waiting = waiting  # (requests waiting here, the first's level, its wait): the pool's queue
        self.serving = serving  # this proxy's slots z.ai answered and serves, per model: the pool's
        self.overdue = overdue  # this proxy's attempts riding above the limits, per model: the pool's
        self.clock = clock
        self.forget_after = forget_after  # seconds alone before the others' slots as last seen are forgotten
        self._forget_at: float | None = None
        self._ids = itertools.count(1)
        self._caps: dict[str, tuple[int, int]] = {}  # the caps each model's last slot was taken under
        self._own: dict[str, int] = {}  # slots held here, confirmed or not
        self._leases: dict[str, list[str]] = {}  # confirmed leases held here, per model
        self._refused: dict[str, int] = {}  # slots the fleet refused: their release gives back no lease
        self._releasing: dict[str, int] = {}  # leases given back whose removal the store has not answered
        self._others: dict[str, int] = {}  # the other proxies' slots, as last seen
        self._others_total = 0
        self._counts: dict[str, int] = {}  # own + others: what selection reads
        self._total = 0
        self._alone_share: float | None = None  # the share in force while alone; None: with the fleet
        self._rejoining = False  # alone, but written to the store again: slots are confirmed there too
        self._proxies: dict[str, int] = {}
        self._seqs: dict[str, int] = {}  # per model, the last change of the store the mirror counts
        self._total_seq = 0
        # per model (None: all), the last change of a count read from the store, less `_mine`
        self._read: dict[str | None, int] = {}
        # other proxy -> (waiting, level, since: when its first began to wait, on this clock), last heard
        self._peers: dict[str, tuple[int, int, float]] = {}
        # other proxy -> the store's change number of its last lease notice: a tally read before it, which
        # may not know the proxy yet, does not forget what it said (`apply`)
        self._heard_seq: dict[str, int] = {}
        # Slots freed here and owed to another proxy (`next_in_fleet_line`): until when each is left to it.
        # This proxy's waiters do not see them meanwhile, however they are woken (another slot freed here,
        # say).
        self._promised: dict[str, list[float]] = {}
        self.held_back = 0  # freed slots left to the other proxies' waiters
        # limit -> the lease id its right to probe is held by
        self._probe_rights: dict[str, str] = {}
        # What each other proxy last said z.ai serves of its slots, per model.
        self._serving_there: dict[str, Mapping[str, int]] = {}
        self._overdue_there: dict[str, Mapping[str, int]] = {}  # and its attempts riding above the limits
        self.probes_elsewhere = 0  # probes not sent: another proxy held the right to probe their limit
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

    def serving_elsewhere(self, model: str | None) -> int:
        """What the other proxies last said z.ai serves of their slots (of `model`; all when None), at most
        their slots as the mirror counts them. Said with every notice they send, so an answer counts from
        the next notice of its proxy on (never before), a slot given back at once."""
        return self._said(self._serving_there, model)

    def riding_elsewhere(self) -> Mapping[str, int]:
        """The other proxies' attempts riding above each limit (a model's name, or ACCOUNT), as they last
        said: their places are the fleet's to use, as this proxy uses its own. At most their slots as the
        mirror counts them; none while this proxy serves alone. Read for every request: added up only
        while another proxy says some ride."""
        there = self._overdue_there
        if self._alone_share is not None or not any(there.values()):
            return {}
        said = {model: self._said(there, model) for model in set().union(*there.values())}
        said[ACCOUNT] = self._said(there, None)
        return said

    def _said(self, there: Mapping[str, Mapping[str, int]], model: str | None) -> int:
        """What the other proxies last said (`there`: per proxy, counts per model) of `model` (all when
        None), at most their slots as the mirror counts them."""
        if model is None:
            return min(sum(sum(models.values()) for models in there.values()), self._others_total)
        return min(sum(models.get(model, 0) for models in there.values()), self._others.get(model, 0))

    def verdicts(self, model: str, seen: Sequence[Seen]) -> None:
        """z.ai's verdicts on a request of `model` held here: the other proxies hear them now, as they come
        (with the slot given back, a clean answer would reach them a stream's length later than the
        proxy that had it, and their limits would differ meanwhile). Alone, nobody hears them."""
        if self.fleet is not None and self._alone_share is None and seen:
            self.fleet.tell_verdicts(model, seen)

    def overdue_changed(self) -> None:
        """This proxy's attempts riding above the limits changed: the other proxies hear it now."""
        if self.fleet is not None and self._alone_share is None:
            self.fleet.announce()

    def fits(self, model: str, cap: int, account_cap: int) -> bool:
        if self._alone_share is None:
            return not self._promised or self._free_here(model, cap, account_cap)
        if self._forget_at is not None and self.clock() >= self._forget_at:
            self._forget_others()
        return not self._over_share(model, cap, account_cap, taking=1)

    def _over_share(self, model: str, cap: int, account_cap: int, *, taking: int) -> bool:
        """Alone, whether this proxy's slots (and `taking` more) go over its share of each limit."""
        share = self._alone_share
        if share is None:
            return False
        own = self._own.get(model, 0) + taking
        return own > _part(cap, share) or sum(self._own.values()) + taking > _part(account_cap, share)

    def _free_here(self, model: str, cap: int, account_cap: int) -> bool:
        """Room for this proxy's waiters: the slots promised to another proxy counted as taken."""
        promised = self._promises(model)
        return self._counts.get(model, 0) + promised < cap and self._total + self._promises() < account_cap

    def _promises(self, model: str | None = None) -> int:
        """Slots of `model` (of every model when None) left to another proxy now."""
        now, count = self.clock(), 0
        for name in [model] if model is not None else list(self._promised):
            until = self._promised.get(name)
            while until and until[0] <= now:
                until.pop(0)
            if until:
                count += len(until)
            else:
                self._promised.pop(name, None)
        return count

    def try_acquire(self, model: str, cap: int, account_cap: int) -> bool:
        if not self.fits(model, cap, account_cap):
            return False
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
            if self.fleet is not None and self._sent_to_store():  # else it ends with its TTL
                self._releasing[model] = self._releasing.get(model, 0) + 1
                to = self._freed_for()
                if to not in ("", self.proxy_id):
                    self._promised.setdefault(model, []).append(self.clock() + HOLD_BACK)
                self.fleet.release(model, lease, to)
        return True

    def given_back(self, model: str, counts: Verdict | None = None) -> None:
        """The store answered a release of `model` (or failed to: `counts` None): its lease no longer
        counts as ours. `counts`, the store's after the release, are the mirror's from then on: a tally
        read before the release arrived, applied after this answer, would count the lease as another
        proxy's until the next renewal."""
        if self._releasing.get(model, 0) > 0:
            self._releasing[model] -= 1
        if counts is not None:
            self._seen(model, counts.in_flight, counts.total, counts.seq)

    def _confirmed_late(self, model: str, seq: int) -> None:
        """The store took a lease of `model` here at its change `seq`, answered only now: a count read from
        it since (a tally, the answer to another call: replies come back in any order, a call each on a pool
        of connections) counted the lease as another proxy's, `_mine` knowing nothing of it yet."""
        if seq <= self._read.get(model, -1):
            self._set_others(model, max(self._others.get(model, 0) - 1, 0))
        if seq <= self._read.get(None, -1):
            self._set_others_total(max(self._others_total - 1, 0))

    def _mine(self, model: str) -> int:
        """This proxy's leases of `model` the store may still count: held, or given back unanswered."""
        return len(self._leases.get(model, ())) + self._releasing.get(model, 0)

    def _all_mine(self) -> int:
        return sum(map(len, self._leases.values())) + sum(self._releasing.values())

    async def confirm(self, model: str, probe: ProbeClaim | None = None) -> Confirmation:
        lease = f"{self.proxy_id}#{next(self._ids)}"
        fleet = self.fleet
        if fleet is None or not self._sent_to_store():
            self._hold(model, lease)  # written to the store when it is back (or first reached)
            return CONFIRMED  # and a probe goes on this proxy's own pacing
        cap, account_cap = self._caps.get(model, (0, 0))
        try:
            verdict = await fleet.confirm(model, lease, cap, account_cap, probe)
        except BaseException:
            fleet.release(model, lease)  # cancelled while the store may have taken it (a right: its TTL)
            self._refused[model] = self._refused.get(model, 0) + 1
            raise
        if verdict is None:  # the store went away meanwhile (the fleet said so): serve on this proxy's share
            return Confirmation(self._hold_alone(model, lease))
        if verdict.taken:
            self._hold(model, lease)
            self._confirmed_late(model, verdict.seq)
            if probe is not None:
                self._probe_rights[probe.limit] = lease
        else:
            self._refused[model] = self._refused.get(model, 0) + 1
            if verdict.probe_held > 0.0:
                self.probes_elsewhere += 1
        self._seen(model, verdict.in_flight, verdict.total, verdict.seq)
        return Confirmation(verdict.taken, verdict.probe_held, verdict.refused_probes)

    def probe_answered(self, claim: ProbeClaim) -> None:
        lease = self._probe_rights.get(claim.limit)
        if lease is None or self.fleet is None or not self._sent_to_store():
            return  # not taken in the store (it was away): nothing there to free or hold
        if claim.seconds <= 0.0:
            del self._probe_rights[claim.limit]
        self.fleet.probe_answered(claim, lease)

    def _sent_to_store(self) -> bool:
        """Whether leases taken and given back now go to the store: with the fleet, or rejoining it."""
        return self._alone_share is None or self._rejoining

    def _hold_alone(self, model: str, lease: str) -> bool:
        """Hold a slot the store did not confirm, if it is within this proxy's share (it was taken on the
        fleet's mirror, before the store was found gone); else it is refused like a race lost, and the
        request waits for a slot within the share."""
        cap, account_cap = self._caps.get(model, (0, 0))
        if self._over_share(model, cap, account_cap, taking=0):  # this slot is counted already
            self._refused[model] = self._refused.get(model, 0) + 1
            return False
        self._hold(model, lease)
        return True

    def _hold(self, model: str, lease: str) -> None:
        self._leases.setdefault(model, []).append(lease)

    def leases(self) -> list[tuple[str, str]]:
        """(model, lease) of every slot held here: renewed while held, written again after an outage."""
        return [(model, lease) for model, leases in self._leases.items() for lease in leases]

    # -- what the fleet says ----------------------------------------------------------------------

    def _seen(self, model: str, fleet_in_flight: int, fleet_total: int, seq: int) -> None:
        """One model's and the account's counts, just read from the store (unless a notice of a later
        change was already counted: then the mirror is newer than this answer)."""
        if seq >= self._seqs.get(model, 0):
            self._seqs[model] = self._read[model] = seq
            self._set_others(model, max(fleet_in_flight - self._mine(model), 0))
        if seq >= self._total_seq:
            self._total_seq = self._read[None] = seq
            self._set_others_total(max(fleet_total - self._all_mine(), 0))

    def _set_others_total(self, others_total: int) -> bool:
        """True when the other proxies hold fewer slots in all than was thought."""
        before = self._others_total
        self._others_total = others_total
        self._total += others_total - before
        return others_total < before

    def _set_others(self, model: str, others: int) -> bool:
        """True when the other proxies hold fewer slots of `model` than was thought."""
        old = self._others.get(model, 0)
        self._others[model] = others
        self._counts[model] = self._own.get(model, 0) + others
        return others < old

    def heard(self, notice: Notice) -> None:
        """Another proxy's notice: count its lease taken or freed now (before the next tally), note what
        it holds and waits for; a slot freed lets this proxy's waiters try."""
        if notice.proxy == self.proxy_id or self._alone_share is not None:
            return
        if notice.op == "*":
            self._forget(notice.proxy)
            return
        self._peers[notice.proxy] = (notice.waiting, notice.level, self.clock() - notice.waited)
        if notice.seq > self._heard_seq.get(notice.proxy, 0):
            self._heard_seq[notice.proxy] = notice.seq
        if notice.serving is not None:
            self._serving_there[notice.proxy] = notice.serving
        if notice.overdue is not None:
            self._overdue_there[notice.proxy] = notice.overdue
        if notice.op == "!":
            self.on_probe_answered(notice.model)
            return
        if notice.seen:
            self.on_seen(notice.model, notice.seen)
        step = {"+": 1, "-": -1}.get(notice.op)
        if step is None:
            return
        model = notice.model
        if step > 0 and self._promised.get(model):
            self._promised[model].pop(0)  # another proxy took a slot of it: the one left to it, or as good
        if notice.seq > self._seqs.get(model, 0):
            self._seqs[model] = notice.seq
            self._set_others(model, max(self._others.get(model, 0) + step, 0))
        if notice.seq > self._total_seq:
            self._total_seq = notice.seq
            self._set_others_total(max(self._others_total + step, 0))
        if step < 0:  # owed to another proxy: this one's waiters try only if that one could not use it
            self.on_freed(HOLD_BACK if notice.to not in ("", self.proxy_id) else 0.0)

    def next_in_fleet_line(self) -> str | None:
        """The other proxy a slot freed here is owed to: the one whose first waiter would come first in
        one queue of the fleet's (served least lately, then waiting longest), when it comes before this
        proxy's first; None when this proxy's waiters come first or nobody is known to wait elsewhere."""
        if self._alone_share is not None:
            return None
        best: tuple[int, float, str] | None = None
        for proxy, (waiting, level, since) in self._peers.items():
            if waiting and (best is None or (level, since) < best[:2]):
                best = (level, since, proxy)
        if best is None:
            return None
        waiting, level, waited = self.waiting()
        if waiting and (level, self.clock() - waited) <= best[:2]:
            return None
        return best[2]

    def _freed_for(self) -> str:
        """The proxy a slot given back here is owed to, as its notice names it: another
        (`next_in_fleet_line`), this one when its own waiters come first (the others would only lose the race
        to them), else none."""
        owed = self.next_in_fleet_line()
        if owed is not None:
            return owed
        return self.proxy_id if self._alone_share is None and self.waiting()[0] else ""

    def hold_back(self) -> float:
        """Seconds to leave a slot just freed here to the proxy it is owed to (`next_in_fleet_line`) before
        this proxy's waiters may take what is still free (that proxy's waiters may not fit the model, or its
        notice was stale); 0: this proxy's waiters take it now."""
        if not self.waiting()[0] or self.next_in_fleet_line() is None:
            return 0.0
        self.held_back += 1
        return HOLD_BACK

    def apply(self, tally: Tally) -> None:
        """The fleet's full counts (read on every renewal): rebuild the mirror, but for what notices
        newer than the tally already counted; wake waiters if the others freed anything. What a proxy said
        is forgotten once it is gone or missed a renewal (`silent`): a proxy killed takes its requests with
        it, and what it said z.ai serves would lift clean answers here for a lease's TTL (its leases still
        count until they end; a proxy only late says it all again with its next notice)."""
        freed = False
        for model in set(self._others) | set(tally.models):
            if tally.seq >= self._seqs.get(model, 0):
                self._seqs[model] = self._read[model] = tally.seq
                freed |= self._set_others(model, max(tally.models.get(model, 0) - self._mine(model), 0))
        if tally.seq >= self._total_seq:
            self._total_seq = self._read[None] = tally.seq
            freed |= self._set_others_total(max(tally.total - self._all_mine(), 0))
        self._total = sum(self._own.values()) + self._others_total
        self._proxies = dict(tally.proxies)
        for proxy in set(self._peers) | set(self._serving_there) | set(self._overdue_there):
            gone = proxy not in tally.proxies or proxy in tally.silent
            if gone and self._heard_seq.get(proxy, 0) <= tally.seq:
                self._forget(proxy)
        if freed:
            self.on_freed(0.0)

    def _forget(self, proxy: str) -> None:
        """What another proxy said: it left, or is gone from the fleet."""
        self._peers.pop(proxy, None)
        self._serving_there.pop(proxy, None)
        self._overdue_there.pop(proxy, None)
        self._heard_seq.pop(proxy, None)

    def queued(self) -> None:
        """A request is about to wait here: when it is the first, the other proxies should know (see
        `hold_back`). Behind a first, nothing they read changes until a slot moves, and every lease taken
        or given back here tells them the line as it is then."""
        if self.fleet is not None and self._alone_share is None and not self.waiting()[0]:
            self.fleet.announce()

    def notice(self, op: str, model: str = "", to: str = "", *, seen: Sequence[Seen] = ()) -> Notice:
        """This proxy's notice of `op` on `model` (`seq` is the store's to give). `serving`: the slots z.ai
        answered, not those it may yet refuse (a lease's slot counts from its clean answer, told at once,
        `verdicts`): counted before, a slot z.ai refuses would lift clean answers elsewhere above z.ai's
        while a limit is too high."""
        waiting, level, waited = self.waiting()
        serving, overdue = self.serving(), self.overdue()
        return Notice(0, op, self.proxy_id, model, waiting, level, waited, to, serving, tuple(seen), overdue)

    def connected(self, fleet: Fleet) -> None:
        """The store answers (again): use it. The caller writes `leases()` and applies a tally."""
        self.fleet = fleet
        self._alone_share = None
        self._rejoining = False
        self._forget_at = None
        self._seqs.clear()
        self._total_seq = 0
        self._read.clear()
        self._heard_seq.clear()

    def rejoining(self, on: bool = True) -> None:
        """The store is back and holds this proxy's leases again, but the other proxies may not have
        written theirs yet: until `connected`, slots are still taken on this proxy's share alone, and each
        is also confirmed by the store (within the caps), because a proxy already back counts on it.
        `on` False: the store went away again before that."""
        self._rejoining = on

    def disconnected(self) -> float:
        """The store went away: serve alone on a share of each limit (returned), counting the others'
        slots as last seen for `forget_after` seconds more."""
        share = self.configured_share
        if share is None:
            # This proxy included; a proxy heard from since the last tally counts too (one that joined
            # less than a renewal ago is in no tally here yet, and will take its share as well).
            alive = len(set(self._proxies) | set(self._peers))
            share = 1.0 / alive if alive else FALLBACK_SHARE
        self._alone_share = share
        self._rejoining = False
        self.lost += 1
        self._forget_at = self.clock() + self.forget_after
        self._peers.clear()
        self._releasing.clear()  # the releases under way fail: their leases end with their TTL
        self._seqs.clear()  # Redis may come back empty: its change numbers start again
        self._total_seq = 0
        self._read.clear()
        self._heard_seq.clear()
        self.on_freed(0.0)
        return share

    def _forget_others(self) -> None:
        """Alone long enough: the others' slots taken before the outage have ended, or are within their
        share; only this proxy's count now."""
        self._forget_at = None
        self._others.clear()
        self._others_total = 0
        self._serving_there.clear()
        self._overdue_there.clear()
        self._counts = dict(self._own)
        self._total = sum(self._own.values())
        self.on_freed(0.0)


def pool_slots(
    proxy_id: str, pool: ChaosPool, *, share: float | None = None, clock: Callable[[], float] = time.monotonic
) -> SharedSlots:
    """`pool` on a fleet's slots, wired to it as the addon wires it: its waiters woken by slots freed
    elsewhere, its learning told the fleet's verdicts and probes, the fleet told its queue and its slots."""
    slots = SharedSlots(
        proxy_id,
        share=share,
        on_freed=pool.wake,
        on_probe_answered=pool.ledger.probe_answered_elsewhere,
        on_seen=pool.ledger.seen_elsewhere,
        waiting=pool.first_in_line,
        serving=pool.ledger.serving_here,
        overdue=pool.ledger.overdue_here,
        clock=clock,
    )
    pool.use(slots=slots)
    return slots


def _part(limit: int, share: float) -> int:
    """`share` of a limit, rounded down (two proxies alone on half each never exceed it together)."""
    return limit if limit >= 2**62 else math.floor(limit * share + 1e-9)


__all__: Sequence[str] = (
    "FALLBACK_SHARE",
    "HOLD_BACK",
    "NOBODY",
    "Fleet",
    "Notice",
    "SharedSlots",
    "Tally",
    "Verdict",
)
