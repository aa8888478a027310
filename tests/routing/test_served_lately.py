"""ServedLately: requests admitted per conversation, decaying, bounded; the queue's order comes from it."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from chaos_mode.routing.served_lately import ServedLately
from support.fakes import FakeClock


def test_levels_count_admissions_per_conversation() -> None:
    shares = ServedLately(FakeClock())
    for key in ("a", "a", "a", "b"):
        shares.served(key)
    shares.served(None)  # no conversation: nothing to count
    assert (shares.level("a"), shares.level("b"), shares.level("new")) == (3, 1, 0)
    assert shares.level(None) == 2  # the average conversation's
    assert len(shares) == 2


def test_an_admission_taken_back_no_longer_counts() -> None:
    shares = ServedLately(FakeClock())
    shares.served("a")
    shares.served("a")
    shares.unserved("a")
    shares.unserved("never")  # nothing counted: nothing to take back
    shares.unserved(None)
    assert (shares.level("a"), shares.level("never"), len(shares)) == (1, 0, 1)
    shares.unserved("a")
    shares.unserved("a")
    assert shares.level("a") == 0  # never below none


def test_the_time_a_conversation_fell_behind_is_made_up_once() -> None:
    """Kept until the conversation's next admission, whether that request waited or not."""
    shares = ServedLately(FakeClock(), max_entries=2)
    shares.fell_behind("a", 1.5)
    shares.fell_behind("a", 1.0)  # two requests held up before its next one
    shares.fell_behind("b", 0.0)  # nothing lost: nothing kept
    shares.fell_behind(None, 3.0)
    assert (shares.behind("a"), shares.behind("b"), shares.behind(None)) == (2.5, 0.0, 0.0)
    shares.served("a")
    assert shares.behind("a") == 0.0
    for key in ("x", "y", "z"):
        shares.fell_behind(key, 1.0)
    assert (shares.behind("x"), shares.behind("z")) == (0.0, 1.0)  # bounded: the oldest goes


def test_counts_halve_with_each_half_life() -> None:
    clock = FakeClock()
    shares = ServedLately(clock, half_life=60.0)
    for _ in range(8):
        shares.served("a")
    clock.advance(60.0)
    assert shares.level("a") == 4
    clock.advance(120.0)
    assert shares.level("a") == 1
    shares.served("a")
    assert shares.level("a") == 2


def test_only_the_newest_conversations_are_kept() -> None:
    shares = ServedLately(FakeClock(), max_entries=2)
    for key in "abc":
        shares.served(key)
    shares.served("b")
    assert (shares.level("a"), shares.level("b"), shares.level("c")) == (0, 2, 1)


@given(st.lists(st.tuples(st.sampled_from("abc"), st.floats(0, 1000))))
def test_a_level_never_exceeds_the_admissions_counted(steps: list[tuple[str, float]]) -> None:
    clock = FakeClock()
    shares = ServedLately(clock)
    counted = dict.fromkeys("abc", 0)
    for key, later in steps:
        shares.served(key)
        counted[key] += 1
        clock.advance(later)
        assert all(0 <= shares.level(k) <= counted[k] for k in counted)
