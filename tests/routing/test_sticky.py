"""Sticky conversations map: LRU with a TTL on a fake clock."""

from __future__ import annotations

import pytest

from chaos_mode.routing.sticky import StickyMap
from support.fakes import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def test_put_and_get(clock: FakeClock) -> None:
    sticky = StickyMap(ttl=60.0, max_entries=10, clock=clock)
    assert sticky.get("conv") is None
    sticky.put("conv", "glm-4.7")
    assert sticky.get("conv") == "glm-4.7"
    sticky.put("conv", "glm-4.5")
    assert sticky.get("conv") == "glm-4.5"
    assert len(sticky) == 1
    assert sticky.moves == 0


def test_entries_expire_after_the_ttl(clock: FakeClock) -> None:
    sticky = StickyMap(ttl=60.0, max_entries=10, clock=clock)
    sticky.put("conv", "glm-4.7")
    clock.advance(59.999)
    assert sticky.get("conv") == "glm-4.7"
    clock.advance(0.001)
    assert sticky.get("conv") is None
    assert len(sticky) == 0  # the expired entry is dropped


def test_put_refreshes_the_ttl(clock: FakeClock) -> None:
    sticky = StickyMap(ttl=60.0, max_entries=10, clock=clock)
    sticky.put("conv", "glm-4.7")
    clock.advance(50.0)
    sticky.put("conv", "glm-4.7")
    clock.advance(50.0)
    assert sticky.get("conv") == "glm-4.7"


def test_least_recently_put_is_evicted_first(clock: FakeClock) -> None:
    sticky = StickyMap(ttl=60.0, max_entries=2, clock=clock)
    sticky.put("a", "m1")
    sticky.put("b", "m2")
    sticky.put("a", "m1")  # a is now the most recent
    sticky.put("c", "m3")
    assert len(sticky) == 2
    assert sticky.get("b") is None
    assert (sticky.get("a"), sticky.get("c")) == ("m1", "m3")


def test_reconfigure_trims_and_changes_the_ttl(clock: FakeClock) -> None:
    sticky = StickyMap(ttl=60.0, max_entries=10, clock=clock)
    for key in "abcde":
        sticky.put(key, f"m-{key}")
    sticky.reconfigure(ttl=5.0, max_entries=2)
    assert len(sticky) == 2
    assert [sticky.get(k) for k in "abcde"] == [None, None, None, "m-d", "m-e"]
    sticky.put("f", "m-f")  # the new TTL applies to new entries
    clock.advance(5.0)
    assert sticky.get("f") is None
