"""SharedCooldowns and the limits' merge, pure: a block set here is told once, one heard is applied and
not told again; a learned limit is taken from another proxy only when it changed later."""

from __future__ import annotations

from chaos_mode.config.schema import CooldownSettings
from chaos_mode.fleet.cooldowns import BlockNotice, SharedCooldowns
from chaos_mode.routing.cooldowns import Cooldowns
from chaos_mode.zai.catalog import ACCOUNT
from support.fakes import FakeClock
from support.pool_rig import Rig, error


def shared(clock: FakeClock) -> tuple[SharedCooldowns, list[BlockNotice]]:
    told: list[BlockNotice] = []
    return SharedCooldowns(Cooldowns(CooldownSettings(), clock), told.append), told


def test_blocks_set_here_are_told_with_the_seconds_left() -> None:
    clock = FakeClock()
    cooldowns, told = shared(clock)
    assert cooldowns.hit("m", "busy (1305)", retry_after=20.0) == 20.0
    cooldowns.take_out("n", "not in plan (1113)")
    cooldowns.pause_account(300.0, "weekly limit (1310)")
    assert not cooldowns.restore("x")  # nothing to put back: nothing told
    assert cooldowns.restore("n")
    assert told == [
        BlockNotice("cooldown", "m", 20.0, "busy (1305)"),
        BlockNotice("out", "n", None, "not in plan (1113)"),
        BlockNotice("pause", "", 300.0, "weekly limit (1310)"),
        BlockNotice("restore", "n", None, "restored"),
    ]


def test_blocks_heard_are_applied_on_this_clock_and_not_told_again() -> None:
    clock = FakeClock()
    cooldowns, told = shared(clock)
    cooldowns.heard(BlockNotice("cooldown", "m", 12.0, "busy (1305)"))
    cooldowns.heard(BlockNotice("out", "n", None, "not in plan (1113)"))
    assert cooldowns.blocked() == frozenset({"m", "n"}) and cooldowns.remaining("m") == 12.0
    cooldowns.heard(BlockNotice("cooldown", "m", 3.0, "busy (1305)"))  # a shorter one: the longer stays
    cooldowns.heard(BlockNotice("cooldown", "n", 3.0, "busy (1305)"))  # out of rotation outranks it
    assert cooldowns.remaining("m") == 12.0 and cooldowns.block("n").kind == "out"  # type: ignore[union-attr]
    cooldowns.heard(BlockNotice("restore", "n", None, "restored"))
    clock.advance(12.0)
    assert cooldowns.blocked() == frozenset() and told == [] and cooldowns.heard_count == 5


def test_a_learned_limit_is_taken_from_another_proxy_only_when_newer() -> None:
    here, there = Rig(), Rig()
    first, second = there.take(), there.take()
    there.pool.ledger.success(first)  # z.ai served one of "h", and refuses a second, twice
    there.pool.error("h", error("1302"), 30.0, second)
    there.pool.error("h", error("1302"), 30.0, second)
    rows = there.pool.limits.rows()
    assert set(rows) == {"h"}
    assert here.pool.learned.adopt_limits(rows) == 1 and here.pool.limits.limit("h") == 1
    assert here.pool.learned.adopt_limits(rows) == 0  # the same change again: nothing newer
    here.wall.advance(5.0)
    here.pool.learned.reset()  # a later change here wins over the older one there
    assert here.pool.learned.adopt_limits(rows) == 0 and here.pool.limits.limit("h") == 2
    assert there.pool.limits.rows(since=rows["h"]["changedAt"]) == {}
    assert ACCOUNT not in rows  # no account limit learned yet
    there.pool.release(first)
    there.pool.release(second)


def test_lending_turned_off_here_is_told_and_a_pool_hearing_it_lends_no_more() -> None:
    clock = FakeClock()
    cooldowns, told = shared(clock)
    cooldowns.lending_off("off: lent places refused")
    assert told == [BlockNotice("lending", "", None, "off: lent places refused")]
    rig = Rig()
    first, late = rig.take(), rig.take()
    rig.pool.ledger.overdue(late)
    assert late.rides  # lent
    rig.pool.ledger.lending_off("off: lent places refused (another proxy of the fleet)", heard=True)
    assert not late.rides and not rig.pool.ledger.lending.on  # its place back: nothing lent any more
    assert "another proxy" in rig.pool.ledger.lending.why
    for selection in (first, late):
        assert rig.pool.release(selection)
