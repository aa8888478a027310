"""Names z.ai serves as another model: the map, the folded catalog, and the pool counting by what serves."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chaos_mode.config.schema import ModelRouting, parse_config
from chaos_mode.routing import pool_status
from chaos_mode.routing.aliases import ROW_PREFIX, Aliases, fold, read_listing
from chaos_mode.routing.pool import ChaosPool, Slot, Ticket
from chaos_mode.routing.pool_status import served
from support.design_catalog import FIXED_LIMITS
from support.fakes import FakeClock

# An older plan's catalog on today's z.ai: glm-4.7 (heavy here) is served by glm-5.3-flash.
MODELS: dict[str, Any] = {
    "glm-4.7": {"tier": "HEAVY", "maxConcurrency": 3},
    "glm-5.1": {"tier": "HEAVY", "maxConcurrency": 2},
    "glm-5.3": {"tier": "HEAVY", "maxConcurrency": 3},
    "glm-4.5-air": {"tier": "MEDIUM", "maxConcurrency": 5},
    "glm-4.5-flash": {"tier": "LIGHT", "maxConcurrency": 1},
}


def config(**block: Any) -> ModelRouting:
    return parse_config({"modelRouting": {"models": MODELS, **FIXED_LIMITS, **block}})


def pool(cfg: ModelRouting | None = None) -> ChaosPool:
    clock = FakeClock()
    return ChaosPool(cfg or config(), clock=clock, wall_clock=FakeClock(1e9), rng=random.Random(1))


def names(slots: list[Slot]) -> set[str]:
    return {slot.model for slot in slots}


def fill(p: ChaosPool, tier: Any, **kwargs: Any) -> list[Slot]:
    taken = []
    while (slot := p.try_acquire(Ticket(tier, **kwargs))) is not None:
        taken.append(slot)
        assert len(taken) < 100
    return taken


# -- the map ------------------------------------------------------------------------------------------


def test_a_learned_alias_resolves_through_chains_and_the_served_model_answers_as_itself() -> None:
    aliases = Aliases(FakeClock(100.0))
    assert aliases.learn("glm-5", "glm-5.1") and aliases.learn("glm-5.1", "glm-5.3")
    assert aliases.served("glm-5") == "glm-5.3" and aliases.served("glm-5.3") == "glm-5.3"
    assert not aliases.learn("glm-5.1", "glm-5.3")  # known: no change
    assert aliases.learn("glm-5.3", "glm-5.4")  # z.ai moved glm-5.3 on
    assert aliases.served("glm-5") == "glm-5.4"
    assert aliases.learn("glm-5.4", "glm-5.3")  # and back: no cycle is kept
    assert aliases.served("glm-5.3") == "glm-5.3" and aliases.served("glm-5") == "glm-5.3"


def test_a_name_that_is_not_a_model_name_is_not_learned() -> None:
    aliases = Aliases(FakeClock(1.0))
    for bad in ("", "has space", "*account", "x" * 129, "glm-4.7"):
        assert not aliases.learn("glm-4.7", bad)
    assert aliases.learned() == {}


def test_rows_round_trip_and_the_newest_wins() -> None:
    here, there = Aliases(FakeClock(10.0)), Aliases(FakeClock(20.0))
    here.learn("glm-4.7", "glm-4.7-flash")
    there.learn("glm-4.7", "glm-5.3-flash")
    rows = there.rows()
    assert rows == {ROW_PREFIX + "glm-4.7": {"servedAs": "glm-5.3-flash", "changedAt": 20.0}}
    assert here.merge(rows) == 1 and here.served("glm-4.7") == "glm-5.3-flash"
    assert there.merge(Aliases(FakeClock(5.0)).rows()) == 0
    older = {ROW_PREFIX + "glm-4.7": {"servedAs": "glm-4.7", "changedAt": 15.0}}
    assert here.merge(older) == 0  # older than ours
    junk = {
        "glm-4.6": {"servedAs": "x", "changedAt": 30.0},  # a limit's row, not an alias
        ROW_PREFIX + "a": {"servedAs": 3, "changedAt": 30.0},
        ROW_PREFIX + "b": {"servedAs": "c", "changedAt": "soon"},
        ROW_PREFIX + "d": "not a row",
    }
    assert here.merge(junk) == 0
    assert here.rows(since=20.0) == {}


# -- the folded catalog -------------------------------------------------------------------------------


def test_rows_are_taken_in_the_order_they_were_learned_not_the_order_of_their_names() -> None:
    """A restart (the file written with sorted keys) or a fleet's merge replayed the rows by name: alpha's
    row, read before omega's, was dropped by it ("the served model answers as itself") though learned after
    it, and the catalog gained a model that is not served."""
    learned = Aliases(FakeClock(1.0))
    learned.learn("omega", "alpha", 1.0)
    learned.learn("alpha", "beta", 2.0)
    learned.learn("zeta", "beta", 3.0)
    again = Aliases(FakeClock(9.0))
    assert again.merge(dict(sorted(learned.rows().items()))) == 3
    assert again.all() == learned.all() == {"omega": "beta", "alpha": "beta", "zeta": "beta"}


def test_fold_drops_a_model_served_as_another_and_judges_the_floor_by_what_serves() -> None:
    aliases = Aliases(FakeClock(1.0))
    aliases.learn("glm-4.7", "glm-5.3-flash")
    aliases.learn("glm-5.1", "glm-5.3")
    folded, gone = fold(config(chaosMode={"excludeModels": ["glm-4.7"]}), aliases)
    assert gone == {"glm-4.7": "glm-5.3-flash", "glm-5.1": "glm-5.3"}
    assert list(folded.models) == ["glm-5.3-flash", "glm-5.3", "glm-4.5-air", "glm-4.5-flash"]
    flash = folded.models["glm-5.3-flash"]
    assert (flash.tier, flash.max_concurrency) == ("LIGHT", 3)  # z.ai's naming: a flash is light
    assert folded.models["glm-5.3"].max_concurrency == 3  # its own spec, not glm-5.1's
    assert folded.eligible_models("heavy") == ["glm-5.3"]
    assert folded.chaos_mode.exclude_models == ()
    assert folded.aliases == {"glm-4.7": "glm-5.3-flash", "glm-5.1": "glm-5.3"}
    same, none = fold(config(), Aliases(FakeClock(1.0)))
    assert none == {} and same.models == config().models


def test_a_served_model_with_no_family_takes_the_lowest_tier() -> None:
    aliases = Aliases(FakeClock(1.0))
    aliases.learn("glm-5.3", "mystery-model")
    folded, _ = fold(config(), aliases)
    assert folded.models["mystery-model"].tier == "LIGHT"


# -- the pool -----------------------------------------------------------------------------------------


def test_an_opus_request_never_goes_to_a_name_found_to_be_served_by_a_flash_model() -> None:
    p = pool()
    first = p.try_acquire(Ticket("heavy"))
    assert first is not None
    heavy = fill(p, "heavy")
    glm47 = next(slot for slot in [first, *heavy] if slot.model == "glm-4.7")
    assert p.learned.served(glm47, "glm-5.3-flash")
    for slot in [first, *heavy]:
        p.release(slot)
    taken = fill(p, "heavy")
    assert names(taken) == {"glm-5.1", "glm-5.3"}
    status = served(pool_status.status(p))
    assert "glm-4.7" not in status["models"]
    assert status["models"]["glm-5.3-flash"]["aliases"] == ["glm-4.7"]
    assert status["models"]["glm-5.3-flash"]["tier"] == "LIGHT"


def test_slots_held_under_the_old_name_count_on_the_served_model() -> None:
    p = pool()
    held = [p.acquire("glm-4.7") for _ in range(3)]
    assert all(held)
    assert p.learned.served(held[0], "glm-5.3-flash")  # glm-5.3-flash: 3, from glm-4.7's spec
    others = frozenset({"glm-5.1", "glm-5.3", "glm-4.5-air"})
    assert p.try_acquire(Ticket("light", attempted=others)) is not None
    assert p.acquire("glm-5.3-flash") is None  # 3 held as glm-4.7 count here
    assert served(pool_status.status(p))["models"]["glm-4.7"]["usable"] is False
    for slot in held:
        assert slot is not None
        p.release(slot)
    assert p.acquire("glm-5.3-flash") is not None


def test_the_same_answer_twice_changes_nothing_and_case_is_not_an_alias() -> None:
    p = pool()
    slot = p.acquire("glm-5.1")
    assert slot is not None
    assert not p.learned.served(slot, "GLM-5.1")
    assert p.learned.served(slot, "glm-5.3")
    assert not p.learned.served(slot, "glm-5.3")
    assert list(p.config.models).count("glm-5.3") == 1


def test_no_model_left_for_a_floor_is_a_dead_end_naming_why() -> None:
    cfg = parse_config(
        {
            "modelRouting": {
                **FIXED_LIMITS,
                "models": {
                    "glm-4.7": {"tier": "HEAVY", "maxConcurrency": 2},
                    "glm-4.5-air": {"tier": "MEDIUM", "maxConcurrency": 2},
                },
            }
        }
    )
    p = pool(cfg)
    slot = p.acquire("glm-4.7")
    assert slot is not None and p.learned.served(slot, "glm-4.7-flash")
    assert p.dead_end("heavy") == (
        "no model of the catalog serves heavy requests at their floor (glm-4.7 is served as glm-4.7-flash)"
    )
    assert p.dead_end("light") is None


def test_learned_aliases_are_kept_with_the_learned_limits() -> None:
    p = pool()
    slot = p.acquire("glm-5.1")
    assert slot is not None and p.learned.served(slot, "glm-5.3")
    data = p.learned.dump()
    again = pool()
    assert again.learned.restore(data) >= 1
    assert "glm-5.1" not in again.config.models
    assert again.learned.version[1] >= 1


@pytest.mark.parametrize("change", [{"format": "another tool's"}, {"version": 0}], ids=["foreign", "old"])
def test_aliases_of_a_file_that_is_not_restored_are_not_taken_either(change: dict[str, object]) -> None:
    p = pool()
    slot = p.acquire("glm-5.1")
    assert slot is not None and p.learned.served(slot, "glm-5.3")
    again = pool()
    with pytest.raises(ValueError):
        again.learned.restore({**p.learned.dump(), **change})
    assert "glm-5.1" in again.config.models and again.learned.version == pool().learned.version


def test_an_image_goes_to_a_model_that_reads_it_where_its_floor_has_one() -> None:
    models = {**MODELS, "glm-5.3": {"tier": "HEAVY", "maxConcurrency": 3, "vision": True}}
    p = pool(config(models=models))
    taken = fill(p, "heavy", images=True)
    assert names(taken) == {"glm-5.3"}
    assert fill(p, "heavy") and True  # the others still serve requests without images
    q = pool()  # no model reads images: every model of the floor stays eligible
    assert names(fill(q, "heavy", images=True)) == {"glm-4.7", "glm-5.1", "glm-5.3"}


# -- a slot counted once, by its served model, whatever the map learns mid-flight -----------------------

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("take"), st.sampled_from(["heavy", "medium", "light"])),
        st.tuples(st.just("release"), st.integers(0, 30)),
        st.tuples(
            st.just("served"),
            st.integers(0, 30),
            st.sampled_from(["glm-5.3", "glm-5.3-flash", "glm-4.5-air", "glm-4.7"]),
        ),
    ),
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(OPS)
def test_each_slot_counts_once_on_the_model_that_serves_it(ops: list[tuple[Any, ...]]) -> None:
    p = pool()
    held: list[Slot] = []
    for op in ops:
        if op[0] == "take":
            before = dict(p._counts())
            slot = p.try_acquire(Ticket(op[1]))
            if slot is not None:
                capacity = p.config.models[slot.model].max_concurrency
                assert before.get(slot.model, 0) < capacity  # never past what serves it
                assert slot.model in p.config.models  # sent under a name that serves as itself
                held.append(slot)
        elif held and op[0] == "release":
            p.release(held.pop(op[1] % len(held)))
        elif held:
            p.learned.served(held[op[1] % len(held)], op[2])
        counts = p._counts()
        assert sum(counts.values()) == len(held) == p.slots.total()
        # by the model that serves: no count under a name found to be served as another
        assert not any(p.aliases.served(name) != name for name in counts)
    for slot in held:
        p.release(slot)
    assert p.slots.total() == 0


# -- what z.ai lists ------------------------------------------------------------------------------------


def test_the_listing_is_read_as_openai_lists_models() -> None:
    document = {
        "object": "list",
        "data": [{"id": "glm-5.3"}, {"id": "glm-5.3"}, {"id": 7}, {"id": "a b"}, "x"],
    }
    assert read_listing(document) == ["glm-5.3"]
    for odd in (None, [], {"data": {}}, {"models": []}):
        assert read_listing(odd) is None


def test_a_listed_model_the_catalog_lacks_is_offered_by_its_family_and_one_no_longer_listed_leaves() -> None:
    """A catalog model left out of z.ai's list from the first stays (z.ai serves glm-4.6v unlisted); one a
    listing held and a later one dropped leaves rotation, until listed again."""
    p = pool()
    p.aliases.learn("glm-5.1", "glm-5.3")
    lines = p.learned.listed(
        ["glm-5.1", "glm-5.3", "glm-5.4", "glm-4.6v", "glm-5.3-flash", "mystery", "glm-4.5-air"]
    )
    assert "glm-5.4: listed by z.ai, offered (LIGHT)" in lines  # until it is seen served as itself
    models = p.config.models
    assert models["glm-5.4"].max_concurrency == 1 and models["glm-4.6v"].vision
    assert models["glm-5.3-flash"].tier == "LIGHT"
    seen = p.acquire("glm-5.4")
    assert seen is not None and p.learned.served(seen, "glm-5.4")
    assert p.config.models["glm-5.4"].tier == "HEAVY" and not p.learned.served(seen, "glm-5.4")
    p.release(seen)
    assert "mystery" not in models and "glm-5.1" not in models  # no family; served as glm-5.3
    out = served(pool_status.status(p))["models"]
    assert out["glm-4.7"]["outOfRotation"] is None  # never listed: it may be served all the same
    assert out["glm-4.5-flash"]["usable"]  # nor this one
    assert "glm-4.7" in names(fill(p, "heavy"))
    assert p.learned.listed(["glm-4.7", "glm-5.3"]) == [
        "glm-5.4: no longer listed by z.ai, withdrawn",
        "glm-4.6v: no longer listed by z.ai, withdrawn",
        "glm-5.3-flash: no longer listed by z.ai, withdrawn",
        "glm-4.5-air: not listed by z.ai's models endpoint, out of rotation",
    ]
    assert p.learned.listed(["glm-4.5-air", "glm-5.3"]) == [
        "glm-4.7: not listed by z.ai's models endpoint, out of rotation",  # listed by the last one
        "glm-4.5-air: listed again, back in rotation",
    ]


def test_a_listing_naming_nothing_the_pool_serves_is_not_taken() -> None:
    p = pool()
    for listing in ([], ["other-model"], ["glm-6"]):
        assert p.learned.listed(listing) == []
    assert all(m["usable"] for m in served(pool_status.status(p))["models"].values())


def test_a_reset_forgets_the_learned_aliases_not_the_configs() -> None:
    p = pool(config(aliases={"glm-5.1": "glm-5.3"}))
    slot = p.acquire("glm-4.7")
    assert slot is not None and p.learned.served(slot, "glm-5.3-flash")
    p.release(slot)
    p.learned.reset()
    assert "glm-4.7" in p.config.models and "glm-5.1" not in p.config.models
