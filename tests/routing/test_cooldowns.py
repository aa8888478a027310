"""Per-model cooldowns, burst dampening, out of rotation and account pauses, on a fake clock."""

from __future__ import annotations

import math

import pytest

from chaos_mode.config.schema import CooldownSettings
from chaos_mode.routing.cooldowns import Block, Cooldowns
from support.fakes import FakeClock

SETTINGS = CooldownSettings()  # default 5 s, max 60 s, x2 per recent hit, half-life 30 s, pause 300 s


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def cooldowns(clock: FakeClock) -> Cooldowns:
    return Cooldowns(SETTINGS, clock)


def test_a_hit_gives_the_default_cooldown(cooldowns: Cooldowns, clock: FakeClock) -> None:
    assert cooldowns.hit("m", "busy (1302)") == 5.0
    assert cooldowns.blocked() == {"m"}
    assert cooldowns.block("m") == Block("busy (1302)", clock.now + 5.0, "cooldown")
    assert cooldowns.remaining("m") == 5.0
    assert cooldowns.remaining("other") == 0.0
    assert cooldowns.block("other") is None


@pytest.mark.parametrize(
    ("retry_after", "seconds"),
    [(None, 5.0), (0.0, 5.0), (2.0, 5.0), (12.0, 12.0), (60.0, 60.0), (1000.0, 60.0), (math.inf, 60.0)],
)
def test_retry_after_is_used_and_capped(
    cooldowns: Cooldowns, retry_after: float | None, seconds: float
) -> None:
    assert cooldowns.hit("m", "busy", retry_after) == seconds
    assert cooldowns.remaining("m") == seconds


def hits_after_each_cooldown(cooldowns: Cooldowns, clock: FakeClock, model: str, count: int) -> list[float]:
    """Busy answers that each come as the previous cooldown ends: a run of strikes."""
    seconds = []
    for _ in range(count):
        seconds.append(cooldowns.hit(model, "busy"))
        clock.advance(seconds[-1])
    return seconds


def test_repeated_hits_grow_the_cooldown_up_to_the_cap(clock: FakeClock) -> None:
    cooldowns = Cooldowns(CooldownSettings(decay_seconds=86_400), clock)  # next to no decay meanwhile
    grown = hits_after_each_cooldown(cooldowns, clock, "m", 6)
    assert grown == pytest.approx([5.0, 10.0, 20.0, 40.0, 60.0, 60.0], rel=1e-2)
    # Dampening is per model.
    assert cooldowns.hit("n", "busy") == 5.0


def test_busy_answers_during_a_cooldown_are_one_burst(cooldowns: Cooldowns, clock: FakeClock) -> None:
    # Requests sent before the cooldown began come back busy while it runs: no extra strikes.
    assert [cooldowns.hit("m", "busy") for _ in range(5)] == [5.0] * 5
    clock.advance(2.0)
    cooldowns.hit("m", "busy")
    assert cooldowns.remaining("m") == pytest.approx(5.0, rel=0.1)  # stretched a little, not doubled


def test_a_clean_answer_ends_the_run_of_strikes(clock: FakeClock) -> None:
    cooldowns = Cooldowns(CooldownSettings(decay_seconds=86_400), clock)
    assert hits_after_each_cooldown(cooldowns, clock, "m", 3)[-1] == pytest.approx(20.0, rel=1e-2)
    cooldowns.succeeded("m")
    assert cooldowns.hit("m", "busy") == 5.0
    cooldowns.succeeded("unknown")  # nothing to end: no error


def test_quiet_time_decays_the_dampening(cooldowns: Cooldowns, clock: FakeClock) -> None:
    cooldowns.hit("m", "busy")
    clock.advance(30.0)  # one half-life: 0.5 of a strike left, plus this one
    assert cooldowns.hit("m", "busy") == pytest.approx(5.0 * 2**0.5)
    clock.advance(3600.0)  # long quiet: back to the default
    assert cooldowns.hit("m", "busy") == pytest.approx(5.0, rel=1e-6)


def test_the_multiplier_and_default_come_from_the_settings(clock: FakeClock) -> None:
    settings = CooldownSettings(default_seconds=1, max_seconds=100, burst_multiplier=3, decay_seconds=86_400)
    cooldowns = Cooldowns(settings, clock)
    assert hits_after_each_cooldown(cooldowns, clock, "m", 4) == pytest.approx(
        [1.0, 3.0, 9.0, 27.0], rel=1e-2
    )
    cooldowns.reconfigure(CooldownSettings(default_seconds=2, max_seconds=10, burst_multiplier=5))
    assert cooldowns.hit("fresh", "busy") == 2.0
    assert cooldowns.hit("m", "busy") == 10.0  # capped by the new maximum


def test_a_cooldown_expires_when_the_clock_reaches_it(cooldowns: Cooldowns, clock: FakeClock) -> None:
    cooldowns.hit("m", "busy")
    clock.advance(4.999)
    assert cooldowns.blocked() == {"m"}
    assert cooldowns.remaining("m") == pytest.approx(0.001)
    clock.advance(0.001)
    assert cooldowns.blocked() == frozenset()
    assert cooldowns.block("m") is None
    assert cooldowns.remaining("m") == 0.0


def test_a_shorter_hit_never_shortens_a_longer_cooldown(cooldowns: Cooldowns, clock: FakeClock) -> None:
    cooldowns.hit("m", "long", retry_after=50.0)
    clock.advance(1.0)
    cooldowns.hit("m", "short")
    assert cooldowns.remaining("m") == pytest.approx(49.0)
    assert cooldowns.block("m") == Block("long", clock.now + 49.0, "cooldown")


def test_blocked_sees_every_change(cooldowns: Cooldowns, clock: FakeClock) -> None:
    assert cooldowns.blocked() == frozenset()
    cooldowns.hit("a", "busy")
    assert cooldowns.blocked() == {"a"}
    clock.advance(1.0)
    cooldowns.hit("b", "busy")
    assert cooldowns.blocked() == {"a", "b"}
    cooldowns.take_out("c", "gone")
    assert cooldowns.blocked() == {"a", "b", "c"}
    cooldowns.restore("b")
    assert cooldowns.blocked() == {"a", "c"}
    clock.advance(4.0)  # a ends, b would have ended later
    assert cooldowns.blocked() == {"c"}


def test_take_out_for_good_and_restore(cooldowns: Cooldowns, clock: FakeClock) -> None:
    cooldowns.take_out("m", "no balance (1113)")
    assert cooldowns.block("m") == Block("no balance (1113)", None, "out")
    assert cooldowns.remaining("m") == math.inf
    clock.advance(1e9)
    assert cooldowns.blocked() == {"m"}
    assert cooldowns.restore("m") is True
    assert cooldowns.blocked() == frozenset()
    assert cooldowns.restore("m") is False
    assert cooldowns.restore("never-blocked") is False


def test_take_out_for_a_while(cooldowns: Cooldowns, clock: FakeClock) -> None:
    cooldowns.take_out("m", "daily limit (1304)", seconds=100.0)
    assert cooldowns.block("m") == Block("daily limit (1304)", clock.now + 100.0, "out")
    clock.advance(99.0)
    assert cooldowns.blocked() == {"m"}
    clock.advance(1.0)
    assert cooldowns.blocked() == frozenset()


def test_take_out_with_negative_seconds_is_already_over(cooldowns: Cooldowns) -> None:
    cooldowns.take_out("m", "x", seconds=-5.0)
    assert cooldowns.blocked() == frozenset()


def test_out_of_rotation_outranks_a_cooldown(cooldowns: Cooldowns, clock: FakeClock) -> None:
    cooldowns.take_out("m", "gone")
    cooldowns.hit("m", "busy", retry_after=10.0)
    assert cooldowns.block("m") == Block("gone", None, "out")
    cooldowns.hit("n", "busy")
    cooldowns.take_out("n", "gone")  # and replaces one
    assert cooldowns.block("n") == Block("gone", None, "out")


def test_a_hit_after_a_timed_take_out_ended_cools_down(cooldowns: Cooldowns, clock: FakeClock) -> None:
    cooldowns.take_out("m", "daily limit (1304)", seconds=10.0)
    clock.advance(11.0)  # the daily limit is over; nobody asked blocked() since
    assert cooldowns.hit("m", "busy") == 5.0
    assert cooldowns.remaining("m") == 5.0
    assert cooldowns.blocked() == {"m"}


def test_restore_forgets_the_dampening(cooldowns: Cooldowns) -> None:
    cooldowns.hit("m", "busy")
    cooldowns.hit("m", "busy")
    cooldowns.restore("m")
    assert cooldowns.hit("m", "busy") == 5.0


def test_account_pause_and_its_expiry(cooldowns: Cooldowns, clock: FakeClock) -> None:
    assert cooldowns.account_pause() is None
    cooldowns.pause_account(100.0, "5-hour usage limit (1308)")
    assert cooldowns.account_pause() == (100.0, "5-hour usage limit (1308)")
    cooldowns.pause_account(10.0, "shorter")  # a shorter pause does not shorten it
    clock.advance(40.0)
    assert cooldowns.account_pause() == (60.0, "5-hour usage limit (1308)")
    cooldowns.pause_account(200.0, "longer")  # a longer one extends it
    assert cooldowns.account_pause() == (200.0, "longer")
    clock.advance(200.0)
    assert cooldowns.account_pause() is None
    assert cooldowns.blocked() == frozenset()  # a pause is not a per-model block


def test_resume_account(cooldowns: Cooldowns) -> None:
    cooldowns.pause_account(100.0, "x")
    cooldowns.resume_account()
    assert cooldowns.account_pause() is None


def test_next_expiry(cooldowns: Cooldowns, clock: FakeClock) -> None:
    assert cooldowns.next_expiry() is None
    cooldowns.take_out("gone", "for good")  # never expires: not counted
    assert cooldowns.next_expiry() is None
    cooldowns.hit("a", "busy")
    assert cooldowns.next_expiry() == 5.0
    cooldowns.take_out("b", "daily", seconds=3.0)
    assert cooldowns.next_expiry() == 3.0
    cooldowns.pause_account(2.0, "pause")
    assert cooldowns.next_expiry() == 2.0
    clock.advance(2.5)
    assert cooldowns.next_expiry() == pytest.approx(0.5)
    clock.advance(0.5)
    assert cooldowns.next_expiry() == pytest.approx(2.0)
    clock.advance(2.0)
    assert cooldowns.next_expiry() is None
