"""The chaos_state options of the addon: one-line errors naming the option, the fleet in the status."""

from __future__ import annotations

import pytest
from mitmproxy import exceptions
from mitmproxy.test import taddons

from chaos_mode.fleet.slots import SharedSlots
from chaos_mode.mitm.addon import ChaosMode
from chaos_mode.routing.slots import MemorySlots


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"chaos_state": "http://h:1/0"}, r"^chaos_state: the scheme must be redis:// or rediss://"),
        ({"chaos_state": "redis://:hunter2@h:x/0"}, r"^chaos_state: not a valid URL"),
        (
            {"chaos_state": "rediss://:hunter2@h:1/0?ssl_ca_certs=/nowhere/ca.pem"},
            r"^chaos_state: ssl_ca_certs: no such file: /nowhere/ca.pem$",
        ),
        ({"chaos_state_share": "most"}, r"^chaos_state_share: must be auto or a fraction"),
        ({"chaos_state_lease_ms": 10}, r"^chaos_state_lease_ms: at least 300"),
    ],
)
def test_bad_state_options_are_one_line_naming_the_option(options: dict[str, object], error: str) -> None:
    addon = ChaosMode()
    with taddons.context(addon) as tctx:
        tctx.configure(addon, chaos_web="", chaos_limits_file="off")
        with pytest.raises(exceptions.OptionsError, match=error) as info:
            tctx.configure(addon, **options)
    assert "\n" not in str(info.value) and "hunter2" not in str(info.value)


def test_no_state_option_keeps_the_in_process_store() -> None:
    addon = ChaosMode()
    with taddons.context(addon) as tctx:
        tctx.configure(addon, chaos_web="", chaos_limits_file="off")
        assert isinstance(addon.pool.slots, MemorySlots) and addon.fleet is None
        assert addon.chaos_stats()["fleet"] is None


def test_a_redis_url_shares_the_slots_and_the_status_shows_it_without_the_password() -> None:
    addon = ChaosMode()
    with taddons.context(addon) as tctx:
        tctx.configure(
            addon, chaos_web="", chaos_limits_file="off", chaos_state="redis://:hunter2@127.0.0.1:1/0"
        )
        assert isinstance(addon.pool.slots, SharedSlots)
        fleet = addon.chaos_stats()["fleet"]
        assert fleet["state"] == "redis://:***@127.0.0.1:1/0" and not fleet["connected"]
        assert fleet["share"] is None and "hunter2" not in repr(addon.chaos_stats())
