"""The verdict ledger: the pool's held slots, one record each (`routing.slot_record`), and z.ai's verdicts.

A request's owner says here what z.ai did with it, or that no verdict will come. Each verdict is counted at
what z.ai served when its request came (`routing.arrivals`), fed to the learned limits (`learning.limits`),
the cooldowns and the quota, and told to a fleet's other proxies. `limits_changed` (the pool's) follows the
learned limits and says whether they changed; the pool (`routing.pool`) takes and gives back the slots.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from chaos_mode.learning.limits import LearnedLimits, Probe
from chaos_mode.quota.tracker import QuotaTracker
from chaos_mode.routing.arrivals import Arrivals, Beside
from chaos_mode.routing.cooldowns import CooldownState
from chaos_mode.routing.lending import Lending
from chaos_mode.routing.slot_record import Phase, Place, Slot, SlotRecord
from chaos_mode.routing.slots import Kind, ProbeClaim, Seen, SlotStore
from chaos_mode.routing.wait_queue import WaitQueue
from chaos_mode.zai.catalog import ACCOUNT
from chaos_mode.zai.errors import Action, UpstreamError
from chaos_mode.zai.timing import EARLIEST_REFUSAL_SECONDS

RECOUNTED: Final = 256  # the latest verdicts counted while lending is on, to count anew at its turn-off
Verdict = tuple[str, int, int, float | None, str]  # model, level, account level, sent (a refusal), what


class Ledger:
    def __init__(
        self,
        limits: LearnedLimits,
        quota: QuotaTracker,
        queue: WaitQueue[Any, Any],
        limits_changed: Callable[[], bool],
        clock: Callable[[], float],
    ) -> None:
        self.records: dict[int, SlotRecord] = {}  # by slot id
        self.store: SlotStore  # the pool's, as `ChaosPool.use` sets it, and its cooldowns
        self.cooldowns: CooldownState
        self.lending = Lending()  # whether an overdue attempt lends its place (`routing.lending`)
        self._recount: deque[tuple[int, Verdict]] = deque(maxlen=RECOUNTED)  # after how many resets, each
        self._let_go: dict[str, list[float]] = {}  # when requests closed before their verdict freed a place
        self.clock = clock
        self._limits, self._quota, self._queue, self._limits_changed = limits, quota, queue, limits_changed
        # what z.ai served as each slot's request came: its level
        self._arrivals = Arrivals(lambda model: self.store.serving_elsewhere(model))

    def take(
        self, slot_id: int, model: str, probe: Probe | None, above: Callable[[str, int], int], *, awaits: bool
    ) -> SlotRecord:
        """A slot just taken (`awaits`: z.ai's verdict on its request is awaited), with `above` riding above
        the limits (`ChaosPool._above`): its level leaves them out."""
        beside = self._beside(model, [r for r in self.records.values() if not r.ended])
        in_flight = self.store.in_flight(model)
        lent = awaits and probe is None and self._limits.enabled and self._lent(model, in_flight, above)
        if lent is False and awaits and probe is None and self.lending.refusals_hold:
            lent = self._let_go_place(model)
        phase, place = Phase.AWAITING if awaits else Phase.DONE, Place.PROBE if probe else Place.WITHIN
        level = in_flight - above(model, 0)
        record = SlotRecord(slot_id, model, self.clock(), beside, probe, phase, place, lent, level)
        self.records[slot_id] = record
        self._quota.sent(slot_id, model)
        if probe is not None:
            self._limits.probe_sent(probe, model)
        return record

    def _lent(self, model: str, in_flight: int, above: Callable[[str, int], int]) -> bool | None:
        """Whether a slot of `model` just taken (`in_flight` with it) is an overdue attempt's place: something
        rides `above` its model's or the account's limit, and it is over it with the probes left out. None:
        over it only by another proxy's overdue attempts (whether those were refused or served late reaches
        here a notice later: the check leaves it out)."""
        if not above(model, 0) and not above(ACCOUNT, 0):
            return False
        probes, account, elsewhere = self.probes(), self._limits.view().value, self.store.riding_elsewhere()
        over = in_flight - probes[model] - self._limits.limit(model)
        over_account = -1 if account is None else self.store.total() - probes[ACCOUNT] - account
        if over <= 0 and over_account <= 0:
            return False
        return over > elsewhere.get(model, 0) or over_account > elsewhere.get(ACCOUNT, 0) or None

    def _let_go_place(self, model: str) -> bool:
        """Whether a slot of `model` just taken is the place of a request closed before z.ai's verdict, within
        the `EARLIEST_REFUSAL_SECONDS` its refusal would have held it (`Lending.refusals_hold`)."""
        since = self.clock() - EARLIEST_REFUSAL_SECONDS
        freed = [at for at in self._let_go.get(model, ()) if at >= since]
        self._let_go[model] = freed[1:]
        return bool(freed)

    def release(self, slot: Slot) -> SlotRecord | None:
        """`slot` goes back (None: not held here). z.ai served it: the oldest probe z.ai queues on its model
        (else on the account) takes the slot it frees, within its limit from then on (`SlotRecord.held`); z.ai
        held it, so it found no room above: the next probe there waits as after a refusal."""
        if (record := self.records.get(slot.slot_id)) is None:
            return None
        if record.awaiting and self.lending.refusals_hold:  # closed before its verdict: its place is checked
            self._let_go.setdefault(record.model, []).append(self.clock())
        self._settle(record)  # the fleet hears of an overdue one
        del self.records[slot.slot_id]
        self._quota.ended(slot.slot_id)
        if record.phase is not Phase.SERVED:
            return record
        self._limits.served_for(self.clock() - record.taken_at)
        queued = [r for r in self.records.values() if r.place is Place.QUEUED and r.awaiting]
        fits = [r for r in queued if r.limit in (record.model, ACCOUNT)]
        if (first := min(fits, key=lambda r: (r.limit != record.model, r.slot_id), default=None)) is not None:
            if first.probe is not None and not first.stalled:  # a stall judged it already
                self._limits.probe_given_up(first.probe, first.model)
                self._probe_judged(first.model, first.probe)
            first.move(Place.QUEUED, Place.SEATED)
        return record

    def _beside(self, model: str, near: list[SlotRecord], written: tuple[int, float] | None = None) -> Beside:
        serving = {r.slot_id: r.model for r in near if r.phase is Phase.SERVED}
        return self._arrivals.beside(model, [r.slot_id for r in near], serving, written)

    def _levels(self, record: SlotRecord | None, *, clean: bool = False) -> tuple[int, int] | None:
        """What z.ai served as `record`'s request came (`Arrivals.levels`); None: no record of it, or a
        refusal or a stall once lending is off for the check's word that z.ai holds the slot of a request it
        refuses: the requests beside it that z.ai was refusing held its slots too, so it counts at the
        pool's in flight when it was taken (counted at what z.ai served, a 1302 beside held ones said
        "refused at 1": `noisy-held` learned 0 for most models after the turn-off)."""
        if record is None or (not clean and self.lending.off_why is not None):
            return None
        awaited = (
            {} if clean else {r.slot_id: r.model for r in self.records.values() if r.whole and r.awaiting}
        )
        return self._arrivals.levels(record.slot_id, record.beside, clean=clean, awaited=awaited)

    def _settle(self, record: SlotRecord | None, phase: Phase = Phase.DONE) -> None:
        if record is not None and record.settle(phase):
            self.store.overdue_changed()

    def sent(self, slot: Slot, *, whole: bool = False) -> None:
        """`slot`'s request was written to z.ai now: it arrives beside the requests written before it, not
        those taken before it (`routing.arrivals`). A pool never told of one keeps the takings. `whole`:
        its answer comes in one piece, its head with its end."""
        if (record := self.records.get(slot.slot_id)) is None:
            return
        record.whole = whole
        written = [r for r in self.records.values() if r.beside.written_at is not None]
        beside = [r for r in written if r is not record and not r.ended]
        record.beside = self._beside(slot.model, beside, (slot.slot_id, self.clock()))

    def ended(self, slot: Slot) -> None:
        """z.ai sent `slot`'s answer to its end: it serves it no more, though the slot is held until the
        flow ends (a queuing z.ai starts a held request the moment another ends: it must not count)."""
        if (record := self.records.get(slot.slot_id)) is not None:
            record.ended = True

    def overdue(self, slot: Slot, *, lends: bool = True) -> None:
        """`slot`'s request has had no head within its patience (`request.hedging`): the check of lending
        reads it as refused. z.ai is most likely refusing it, holding no slot for it
        (zai.assumptions.REFUSED_HOLDS_NO_SLOT), so it rides above the limits until its verdict, its place
        lent to the next request: when it `lends` (not while another attempt of its request rides), with
        learning and lending on, within the limits and still awaiting its verdict."""
        record = self.records.get(slot.slot_id)
        self._checked(record, refused=True)  # its first word: no head (it may turn lending off)
        on = lends and self._limits.enabled and self.lending.on
        if not on or record is None or not record.move(Place.WITHIN, Place.OVERDUE):
            return
        self._limits.lent_after(self.clock() - record.taken_at)
        self.store.overdue_changed()
        if len(self._queue):
            self._queue.dispatch()

    def queued(self, slot: Slot) -> None:
        """z.ai queues (zai.assumptions.MAY_QUEUE), and `slot`'s probe, unanswered, is held so."""
        if (record := self.records.get(slot.slot_id)) is not None:
            record.move(Place.PROBE, Place.QUEUED)

    def success(self, slot: Slot, *, at_once: bool = True) -> None:
        """A clean answer from z.ai to the request `slot` sent. `at_once`: z.ai served it from its arrival
        (False: z.ai was seen to queue lately, and may have held it until a slot freed)."""
        record = self.records.get(slot.slot_id)
        held, probe = record is not None and record.held, self._judged(slot, record)
        stalled = record is not None and record.awaiting and record.stalled
        # z.ai counted it from its arrival, unless its stall said it held it first (a seated probe: at once)
        self._arrivals.accepted(slot.slot_id, slot.model, held=stalled)
        self._checked(record, refused=False)
        self._settle(record, Phase.SERVED)
        # z.ai served at least what it serves now, or what it served when the request came (heads sent with
        # the first token: zai.assumptions.HEAD_MAY_WAIT_FOR_FIRST_TOKEN); not for a request z.ai may have
        # held (`SlotRecord.held`, not `at_once`): it was full then, and a probe there found no room above
        arrived = (None if held or not at_once else self._levels(record, clean=True)) or (0, 0)
        model, limits, here = slot.model, self._limits, self.serving_here()
        serving = max(here[model] + self.store.serving_elsewhere(model), arrived[0])
        total = max(here.total() + self.store.serving_elsewhere(None), arrived[1])
        self._quota.answered(model, slot.slot_id)
        limits.succeeded(model, serving, total, probe)
        self._counted((model, serving, total, None, "clean"))
        self._note(slot, "clean", serving, total, probe)
        self.cooldowns.succeeded(model)
        changed = self._limits_changed()
        if not changed and len(self._queue) and (limits.can_probe(model) or limits.can_probe(None)):
            self._queue.dispatch()  # the limit ran full cleanly: a waiter may probe above it now

    def stall(self, slot: Slot) -> bool:
        """z.ai holds the head of `slot`'s request far longer than its heads take: a limit passed, as a 1302
        says (zai.assumptions.MAY_QUEUE). Counted once, as its verdict (a 1302 for it later is not). False:
        its verdict came first."""
        record = self.records.get(slot.slot_id)
        probe = self._judged(slot, record)  # before the stall makes it held
        if record is None or not record.awaiting or record.stalled:
            return False
        record.stalled = True
        if self._limits.enabled:
            level, account_level = self._levels(record) or (slot.in_flight, slot.total)
            self._limits.refused(slot.model, level, account_level, probe, record.taken_at, "stall")
            self._counted((slot.model, slot.in_flight, slot.total, record.taken_at, "stall"))
            self._note(slot, "stall", level, account_level, probe)
            self._limits_changed()
        return True

    def no_verdict(self, slot: Slot, *, probe_given_up: bool = False) -> None:
        """No verdict will come for `slot`'s request (it ended first, or its attempt was left). A probe given
        up unanswered (its request took a slot within the limits instead) rides above its limit no more,
        and the next probe there waits as after a 1302 (unless its stall did so already). Idempotent."""
        if (record := self.records.get(slot.slot_id)) is None:
            return
        if probe_given_up and record.probing and (probe := self._judged(slot, record)) is not None:
            self._limits.probe_given_up(probe, slot.model)
            self._probe_judged(slot.model, probe)
        self._settle(record)

    def refused(self, model: str, error: UpstreamError, slot: Slot | None = None) -> None:
        """z.ai's error answer to `slot`'s request on `model` (None: a refusal owed, paid late): its verdict.
        A 1302 counts at what z.ai served when the request came, else at what is held now. What it blocks,
        and the limits followed, are the pool's (`ChaosPool.error`)."""
        record = None if slot is None else self.records.get(slot.slot_id)
        counted = record is not None and record.awaiting and record.stalled  # its stall said so already
        lent, probe = record is not None and record.overdue, self._judged(slot, record)
        if error.action is Action.CONCURRENCY:
            self._checked(record, refused=True)
        self._settle(record)
        if slot is not None and error.action is not Action.UNREACHED:
            self._quota.refused(slot.slot_id)  # z.ai's error answer: not charged
        if error.action is not Action.CONCURRENCY or not self._limits.enabled:
            if probe is not None and error.action in (Action.UNREACHED, Action.FATAL, Action.NONE):
                self._limits.probe_sent(probe, model)  # it tested nothing: the next one waits its turn
            return
        if record is not None:
            self._limits.refusal_took(self.clock() - record.taken_at, lent=lent)
        if counted:
            return
        if slot is None or not slot.in_flight:
            taken = in_flight, total = self.store.in_flight(model), self.store.total()
        else:
            taken = slot.in_flight, slot.total
            in_flight, total = self._levels(record) or taken
        sent = None if record is None else record.taken_at
        self._limits.refused(model, in_flight, total, probe, sent)
        self._counted((model, *taken, sent, "1302"))
        if slot is not None:
            self._note(slot, "refused", in_flight, total, probe)

    def _counted(self, verdict: Verdict) -> None:
        """A verdict the limits took while lending is on, kept at the pool's in flight as its request was
        taken (a clean answer at what z.ai served): what `lending_off` counts anew."""
        if self.lending.on:
            self._recount.append((self._limits.resets, verdict))

    def _judged(self, slot: Slot | None, record: SlotRecord | None) -> Probe | None:
        """What `slot`'s verdict is a probe of: its probe, none once z.ai held it (`SlotRecord.held`)."""
        return None if slot is None or (record is not None and record.held) else slot.probe

    def _checked(self, r: SlotRecord | None, *, refused: bool) -> None:
        """z.ai's first word on `r`'s request, for the check of lending (`routing.lending`): its patience
        passed with no head (`overdue`: as a refusal), its head, or its 1302. Read once, only one awaited, of
        no probe."""
        if r is None or not r.awaiting or r.probe is not None or r.lent is None:
            return
        lent, r.lent, cost = r.lent, None, self._limits.cost
        why = self.lending.verdict(r.model, r.level, r.taken_at, lent=lent, refused=refused, cost=cost)
        if why is not None:
            self.lending_off(why)

    def lending_off(self, why: str, *, heard: bool = False) -> None:
        """z.ai holds the slot of a request it refuses, as the check here (or another proxy's, `heard`) says:
        nothing lends its place from now on, the places lent go back, and a refusal or a stall counts at the
        pool's in flight (`_levels`). The learned limits start over, and the latest verdicts count anew at
        what the pool held (`_counted`): a refusal beside held requests was counted at too low a level, and
        only forgotten, it costs a second round of learning (docs/learning.md). The fleet is told."""
        if not self.lending.turn_off(why):
            return
        resets = self._limits.resets  # what a reset forgot since (`chaos.limits.reset`) stays forgotten
        self._limits.reset()
        for model, level, total, sent, what in (verdict for n, verdict in self._recount if n == resets):
            if what == "clean":
                self._limits.succeeded(model, level, total, None)
            else:
                self._limits.refused(model, level, total, None, sent, what)
        self._recount.clear()
        for record in self.records.values():
            record.move(Place.OVERDUE, Place.WITHIN)
            if record.lent:  # lent before: it says nothing of the places let go from now on
                record.lent = None
        self.store.overdue_changed()
        self._limits_changed()
        if not heard:
            self.cooldowns.lending_off(why)

    @property
    def riding_on(self) -> Mapping[str, int]:
        """Slots riding above each limit (a model's name, or ACCOUNT): read for every request, so cheaply."""
        riding = [k for r in self.records.values() if r.place is not Place.WITHIN for k in r.riding()]
        return Counter(riding) if riding else {}

    def in_flight(self, model: str) -> int:
        return self.store.in_flight(model)

    def unanswered(self, model: str | None = None) -> int:
        """Slots (of `model`; all when None) whose request z.ai has not answered yet."""
        return sum(r.awaiting for r in self.records.values() if model in (None, r.model))

    def serving_here(self) -> Counter[str]:
        """This proxy's slots z.ai serves, per model (answered cleanly, the answer not ended; none: left
        out): what it tells the fleet."""
        return Counter(r.model for r in self.records.values() if not r.awaiting and not r.ended)

    def overdue_here(self) -> Counter[str]:
        """This proxy's attempts riding above the limits, per model: what it tells the fleet."""
        return Counter(r.model for r in self.records.values() if r.rides)

    def probes(self) -> Counter[str]:
        """Probes out and unanswered per limit (a model's name, or ACCOUNT)."""
        return Counter(r.limit for r in self.records.values() if r.probing)

    def claim(self, probe: Probe | None, model: str) -> ProbeClaim | None:
        """A probe's claim on the right to probe its limit, as the fleet holds it now (None: no probe)."""
        limit = ACCOUNT if probe == "account" else model
        return None if probe is None else ProbeClaim(limit, *self._limits.probe_wait(probe, model))

    def _probe_judged(self, model: str, probe: Probe | None) -> None:
        """A probe of `model` has its verdict (or was given up): a fleet holds the right to probe its limit
        as long as this proxy's next probe there waits now (`learning.limits`)."""
        if self.store.confirms and (claim := self.claim(probe, model)) is not None:
            self.store.probe_answered(claim)

    def _note(self, slot: Slot, kind: Kind, level: int, total: int, probe: Probe | None) -> None:
        """A verdict on `slot`'s request as the limits took it (`probe`: its probe): told to the fleet."""
        record = self.records.get(slot.slot_id)
        if self.store.confirms and self._limits.enabled and record is not None:
            age = None if kind == "clean" else self.clock() - record.taken_at
            self.store.verdicts(slot.model, (Seen(kind, level, total, probe, age),))
        self._probe_judged(slot.model, probe)

    def seen_elsewhere(self, model: str, seen: Sequence[Seen]) -> None:
        """z.ai's verdicts on requests of `model` another proxy of the fleet sent: each counts here as if
        this proxy had it, at the levels that proxy counted, a refusal or a stall as sent when it was sent."""
        limits, now = self._limits, self.clock()
        for verdict in seen:
            if verdict.kind == "clean":
                # as evidence only: a probe's clean answer paces the probes here (`probe_answered_elsewhere`);
                # as a verdict, it would undo a wait set since (a refused probe, a refusal), end a probe here
                limits.succeeded(model, verdict.level, verdict.total, None)
            else:
                sent = None if verdict.age is None else now - verdict.age
                what = "1302" if verdict.kind == "refused" else "stall"
                limits.refused(model, verdict.level, verdict.total, verdict.probe, sent, what)
        self._limits_changed()

    def probe_answered_elsewhere(self, limit: str) -> None:
        """Another proxy's probe of `limit` (a model, or ACCOUNT) was answered cleanly, as if here."""
        self._limits.probe_answered_elsewhere("account" if limit == ACCOUNT else "model", limit)
        if len(self._queue):
            self._queue.dispatch()
