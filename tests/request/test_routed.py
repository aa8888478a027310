"""The owner of one routed request: whatever happens to it, in any order, its slots go back exactly once."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chaos_mode.config.schema import parse_config
from chaos_mode.doors.messages import parse_message
from chaos_mode.learning.limits import Probe
from chaos_mode.observe.stats import OUTCOMES, Stats
from chaos_mode.request.routed import RoutedRequest
from chaos_mode.routing.pool import ChaosPool, Slot
from support.fakes import FakeClock

BODY = json.dumps({"model": "claude-opus-4-5", "max_tokens": 64, "messages": []}).encode()


class Timers:
    """`call_later` that runs only when told (a grace period passing)."""

    def __init__(self) -> None:
        self.due: list[Callable[[], None]] = []

    def later(self, delay: float, callback: Callable[[], None]) -> None:
        self.due.append(callback)

    def run(self) -> None:
        due, self.due = self.due, []
        for callback in due:
            callback()


class CountingPool(ChaosPool):
    """The real pool, counting slots granted and given back."""

    granted = 0
    returned = 0

    def _take(self, model: str, reason: str, probe: Probe | None, *, awaits_verdict: bool) -> Slot | None:
        slot = super()._take(model, reason, probe, awaits_verdict=awaits_verdict)
        self.granted += slot is not None
        return slot

    def release(self, slot: Slot) -> bool:
        self.returned += 1
        return super().release(slot)


def make(learning: bool = True) -> tuple[RoutedRequest, CountingPool, Stats, Timers]:
    routing = {"chaosMode": {"enabled": True}, "learning": {"enabled": learning}}
    config = parse_config({"modelRouting": routing})
    clock = FakeClock()
    pool = CountingPool(config, clock=clock, wall_clock=clock)
    stats = Stats(config, clock)
    timers = Timers()
    request = RoutedRequest(
        parse_message(BODY, limit=1 << 20), "heavy", pool=pool, stats=stats, later=timers.later
    )
    return request, pool, stats, timers


def grant(request: RoutedRequest) -> Slot | None:
    return request.pool.admit_now(request.ticket())


EVENTS = st.one_of(
    st.just(("grant",)),  # the pool grants a slot (first attempt, or a failover)
    st.tuples(st.just("refused"), st.booleans()),  # z.ai refuses the attempt (broken model or busy)
    st.just(("sent",)),
    st.just(("answered",)),
    st.tuples(st.just("release"), st.sampled_from([0.0, 0.5])),
    st.tuples(st.just("finish"), st.sampled_from(OUTCOMES), st.sampled_from([0.0, 0.5])),
    st.just(("reject",)),
    st.just(("timers",)),  # grace periods end
)


@settings(max_examples=400, deadline=None)
@given(st.lists(EVENTS, max_size=30), st.booleans())
def test_every_slot_granted_is_given_back_exactly_once(
    events: list[tuple[object, ...]], learning: bool
) -> None:
    request, pool, stats, timers = make(learning)
    for event in events:
        match event:
            case ("grant",):
                selection = grant(request)
                if selection is not None:
                    request.hold(selection)
            case ("refused", broken):
                request.refused_by("1302", broken=bool(broken))
            case ("sent",):
                request.sent = True
            case ("answered",):
                request.answered()
            case ("release", grace):
                request.release_slot(float(grace))  # type: ignore[arg-type]
            case ("finish", outcome, grace):
                request.finish(outcome, grace=float(grace))  # type: ignore[arg-type]
            case ("reject",):
                request.reject("test")
            case ("timers",):
                timers.run()
        # At any moment the pool counts exactly the slot the request holds, plus those in their grace.
        assert pool.in_flight() == (request.slot is not None) + len(timers.due)
        assert pool.spurious_releases == 0
    request.finish("error")  # the flow ends, whatever ended it
    timers.run()
    assert pool.in_flight() == 0
    assert pool.granted == pool.returned
    assert pool.spurious_releases == 0
    assert sum(stats.outcomes().values()) == 1  # the outcome is counted once
    assert request.slot is None


def test_a_slot_granted_after_the_request_ended_goes_back_at_once() -> None:
    request, pool, _, _ = make()
    request.finish("aborted")
    selection = grant(request)
    assert selection is not None
    assert request.hold(selection) is False
    assert pool.in_flight() == 0 and request.attempts == []


def test_a_second_slot_is_never_held_on_top_of_the_first() -> None:
    request, pool, _, _ = make()
    first, second = grant(request), grant(request)
    assert first is not None and second is not None
    assert request.hold(first) and not request.hold(second)
    assert pool.in_flight() == 1 and request.slot is first
    request.finish("ok")


@pytest.mark.parametrize(("sent", "held_during_grace"), [(True, 1), (False, 0)])
def test_the_abort_grace_applies_only_to_an_attempt_z_ai_has_seen(sent: bool, held_during_grace: int) -> None:
    request, pool, _, timers = make()
    selection = grant(request)
    assert selection is not None and request.hold(selection)
    request.sent = sent
    request.finish("aborted", grace=0.5)
    assert pool.in_flight() == held_during_grace
    timers.run()
    assert pool.in_flight() == 0


def test_a_busy_model_leaves_the_ticket_until_the_request_waits_a_broken_one_for_good() -> None:
    request, pool, _, _ = make(learning=True)
    first = grant(request)
    assert first is not None and request.hold(first)
    request.refused_by("1302", broken=False)  # busy: not tried again before the request waited
    assert request.ticket().attempted == {first.model} and request.busy == {first.model}
    second = grant(request)
    assert second is not None and request.hold(second)
    request.refused_by("1113", broken=True)
    assert request.ticket().attempted == {first.model, second.model}
    assert request.refused == {second.model}  # `fail_over` clears `busy` once it waited; never this
    assert [a.refusal for a in request.attempts] == ["1302", "1113"]
    assert pool.in_flight() == 0
    request.finish("rejected")
    mirror = request.mirror()
    assert mirror["attempted"] == [first.model, second.model] and mirror["failovers"] == 1
    assert mirror["held"] is None and mirror["outcome"] == "rejected"
    json.dumps(mirror)  # plain values: saved flows keep them


class SetBackPool(ChaosPool):
    """The real pool, recording the conversations set back."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.set_backs: list[tuple[str | None, float]] = []
        fell_behind = self.shares.fell_behind

        def set_back(session: str | None, seconds: float) -> None:
            self.set_backs.append((session, seconds))
            fell_behind(session, seconds)

        self.shares.fell_behind = set_back  # type: ignore[method-assign]


def test_a_request_served_only_after_a_refusal_sets_its_conversation_back_by_the_time_it_lost() -> None:
    """From its first attempt to the one served; a request served at once, or never (a refusal of its
    own, passed to the client), sets nothing back."""
    config = parse_config({"modelRouting": {"chaosMode": {"enabled": True}}})
    clock = FakeClock()
    pool = SetBackPool(config, clock=clock, wall_clock=clock)

    def routed(session: str) -> RoutedRequest:
        message = parse_message(BODY, limit=1 << 20)
        stats = Stats(config, clock)
        return RoutedRequest(
            message, "heavy", pool=pool, stats=stats, later=Timers().later, clock=clock, session=session
        )

    lucky, hit, filtered = routed("lucky"), routed("hit"), routed("filtered")
    for request in (lucky, hit, filtered):
        slot = grant(request)
        assert slot is not None and request.hold(slot)
    lucky.answered()
    hit.refused_by("1302", broken=False)
    filtered.refused_by("1305", broken=False)
    clock.advance(2.5)
    for request in (hit, filtered):
        slot = grant(request)
        assert slot is not None and request.hold(slot)
    hit.answered()
    hit.answered()  # once per attempt
    filtered.refused_by("1305", broken=False)
    filtered.finish("rejected")
    assert pool.set_backs == [("hit", 2.5)]


def test_a_probe_given_up_for_a_slot_within_the_limits_is_no_failover() -> None:
    """A probe with no head within its patience tested nothing: its request going on in a slot within the
    limits (the same model, often) is not a failover; a regular attempt left for another slot is one."""
    request, _, stats, _ = make()
    first = grant(request)
    assert first is not None and request.hold(first)
    request.slot = None
    request.attempts.pop()
    probe = replace(first, probe="model")  # the same slot, sent as a probe above its model's limit
    assert request.hold(probe)
    spare = grant(request)
    assert spare is not None and request.switch_to(spare)
    assert request.attempts[0].refusal == "probe given up"
    assert (stats.failovers, list(stats.recent_failovers)) == (0, [])
    other = grant(request)
    assert other is not None and request.switch_to(other)  # the regular attempt left: a failover
    assert stats.failovers == 1 and stats.recent_failovers[-1]["reason"] == "no answer yet"
    request.finish("aborted")


def test_one_attempt_of_a_request_rides_at_a_time_and_each_is_read_at_its_patience() -> None:
    """An attempt with no head within its patience lends its place unless another attempt of its request
    rides already; the check of lending reads both at their patience (`Ledger.overdue`)."""
    request, pool, _, _ = make()
    first = grant(request)
    assert first is not None and request.hold(first)
    request.overdue()
    spare = grant(request)
    assert spare is not None and request.switch_to(spare)
    request.overdue()
    assert first.rides and not spare.rides
    read = re.match(r"on: \d+ of (\d+) lent places refused, \d+ of (\d+) regular", pool.ledger.lending.why)
    assert read is not None and sum(int(n) for n in read.groups()) == 2  # lent or regular, each read once
    request.finish("aborted")


def test_the_served_model_is_told_to_the_pool_once_and_odd_names_are_not() -> None:
    request, pool, _, _ = make()
    assert request.served_by("glm-5.3-flash")  # no slot yet: nothing to say
    slot = grant(request)
    assert slot is not None and request.hold(slot)
    for odd in (None, 7, "", "two words", "x" * 200, "glm-5\x9b31m", "glm-\u202e3.5"):  # C1, bidi
        assert not request.served_by(odd)
    assert request.served is None
    assert request.served_by(slot.model.upper())  # the same model: no alias
    assert request.served is None and pool.aliases.learned() == {}
    assert request.served_by("glm-9-served")
    assert request.served == "glm-9-served" and pool.aliases.learned() == {slot.model: "glm-9-served"}
    assert slot.model not in pool.config.models
    assert request.served_by("glm-other")  # the first name an answer gives is the one kept
    assert pool.aliases.learned() == {slot.model: "glm-9-served"}
    request.finish("ok")
    assert pool.slots.total() == 0
