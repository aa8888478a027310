"""Arrivals: what z.ai served when a request came, counted from the slots beside it it accepted at once."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from chaos_mode.routing.arrivals import KEEP, Arrivals


def test_only_the_slots_beside_it_that_z_ai_accepted_count_and_itself_on_top() -> None:
    arrivals = Arrivals()
    arrivals.accepted(1, "m")
    arrivals.accepted(2, "other")
    beside = arrivals.beside("m", [1, 2, 3, 4])  # 3 (of m) and 4: verdicts still to come
    assert arrivals.levels(5, beside) == (2, 3)
    arrivals.accepted(3, "m")  # accepted just after: it was there when 5 came
    assert arrivals.levels(5, beside) == (3, 4)


def test_a_slot_z_ai_served_before_counts_even_when_z_ai_held_it_first() -> None:
    """A z.ai that queues serves requests it held: when the next request comes, those are its to serve."""
    arrivals = Arrivals()
    arrivals.accepted(1, "m")
    beside = arrivals.beside("m", [1, 2, 3], {2: "m", 3: "other"})  # 2 and 3 were held, then served
    assert arrivals.levels(5, beside) == (3, 4)
    beside = arrivals.beside("m", [1, 2], {1: "m"})  # served and accepted at once: counted once
    assert arrivals.levels(6, beside) == (2, 2)


def test_a_slot_z_ai_served_after_holding_it_counts_beside_a_refusal_but_not_beside_a_clean_answer() -> None:
    """A z.ai that queues and sends each head with its first token: the request it was serving when this one
    came may have been one it held first, its head still to come. A stall or a refusal counts it (a level
    z.ai may have reached: the side where the verdict says least); a clean answer does not (z.ai may have
    served it only after this one)."""
    arrivals = Arrivals()
    beside = arrivals.beside("m", [1, 2])
    arrivals.accepted(1, "m", held=True)
    arrivals.accepted(2, "other")
    assert arrivals.levels(5, beside) == (2, 3)
    assert arrivals.levels(5, beside, clean=True) == (1, 2)


def test_other_proxies_serving_counts_too_as_they_said_it_then() -> None:
    """A refusal (seconds after its request came) counts what the other proxies said z.ai served when it
    came, or what they say now if more; a clean answer (within ms) only as far as they still say it, since
    a slot just taken elsewhere counts as served until its proxy's next notice."""
    said: dict[str | None, int] = {"m": 2, None: 7}
    arrivals = Arrivals(lambda model: said[model])
    beside = arrivals.beside("m", [])
    said[None] = 9
    assert arrivals.levels(1, beside) == (3, 10)
    said.update({"m": 0, None: 3})
    assert arrivals.levels(1, beside) == (3, 8)  # their requests ended since
    said.update({"m": 2, None: 9})
    assert arrivals.levels(1, beside, clean=True) == (3, 8)
    said.update({"m": 1, None: 7})
    assert arrivals.levels(1, beside, clean=True) == (2, 8)  # one of them said no since
    said.update({"m": 0, None: 0})
    assert arrivals.levels(1, beside, clean=True) == (1, 1)  # alone now


def test_a_refusal_in_a_fleets_first_burst_counts_what_the_others_serve_once_they_say_it() -> None:
    """Three proxies write their first requests on a model at once: when this one's came, the others had
    said nothing (their heads come later), yet z.ai had theirs. Refused, it counts what they say by then:
    the level z.ai refused at (2 served, itself the third), not 1, a level z.ai serves (noise)."""
    said: dict[str | None, int] = {"m": 0, None: 0}
    arrivals = Arrivals(lambda model: said[model])
    beside = arrivals.beside("m", [])
    said.update({"m": 2, None: 2})
    assert arrivals.levels(1, beside) == (3, 3)
    assert arrivals.levels(1, beside, clean=True) == (1, 1)


def test_the_memory_of_accepted_slots_is_bounded() -> None:
    arrivals = Arrivals()
    for slot_id in range(KEEP + 10):
        arrivals.accepted(slot_id, "m" if slot_id < 20 else "other")
    model, account = arrivals.levels(10**6, arrivals.beside("m", range(KEEP + 10)))
    assert model == 11  # the ten oldest were forgotten
    assert account == KEEP + 1


@given(
    beside=st.sets(st.integers(0, 50), max_size=30),
    accepted=st.sets(st.integers(0, 50), max_size=30),
)
def test_a_level_is_at_least_one_and_at_most_what_was_beside(beside: set[int], accepted: set[int]) -> None:
    arrivals = Arrivals()
    for slot_id in accepted | {60}:
        arrivals.accepted(slot_id, "m" if slot_id in beside else "other")
    model, account = arrivals.levels(100, arrivals.beside("m", beside | {60}))
    assert model == len(beside & accepted) + 1
    assert 1 <= model <= account <= len(beside) + 2
