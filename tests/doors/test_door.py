"""Which door a request comes through: a pure function of method, host names, path and the config."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chaos_mode.config.schema import ModelRouting, default_config, parse_config
from chaos_mode.doors.door import door_of

ZAI = ("api.z.ai",)


def routing(**block: Any) -> ModelRouting:
    return parse_config({"modelRouting": block})


@pytest.mark.parametrize(
    ("path", "door"),
    [
        ("/api/anthropic/v1/messages", "anthropic"),
        ("/api/anthropic/v1/messages?beta=true", "anthropic"),
        ("/v1/messages", "anthropic"),
        ("/api/anthropic/v1/messages/count_tokens", None),
        ("/api/anthropic/v1/messages/count_tokens?beta=true", None),
        ("/api/paas/v4/chat/completions", "openai"),
        ("/api/coding/paas/v4/chat/completions", "openai"),
        ("/api/coding/paas/v4/chat/completions?x=1", "openai"),
        ("/api/coding/paas/v4/chat/completions/", "openai"),
        ("/api/paas/v4/chat/completions#frag", "openai"),
        ("/api/paas/v4/embeddings", None),
        ("/api/paas/v4/chat/completions/extra", None),
        ("/prefix/api/paas/v4/chat/completions", None),  # OpenAI paths are matched whole
        ("/api/anthropic/v1/messages/batches", None),
        ("/api/anthropic/v1/models", None),
        ("/", None),
        ("", None),
        ("/api/paas/v4/chat/completions\x00", None),
    ],
)
def test_the_door_of_a_post_to_z_ai_by_path(path: str, door: str | None) -> None:
    assert door_of("POST", ZAI, path, default_config()) == door


@pytest.mark.parametrize("method", ["GET", "PUT", "OPTIONS", "HEAD", ""])
def test_only_posts_are_routed(method: str) -> None:
    for path in ("/api/anthropic/v1/messages", "/api/paas/v4/chat/completions"):
        assert door_of(method, ZAI, path, default_config()) is None
    assert door_of("post", ZAI, "/api/paas/v4/chat/completions", default_config()) == "openai"


def test_only_the_configured_upstream_hosts_are_routed() -> None:
    config = default_config()
    path = "/api/paas/v4/chat/completions"
    assert door_of("POST", ("API.Z.AI",), path, config) == "openai"
    assert door_of("POST", ("open.bigmodel.cn",), path, config) == "openai"
    assert door_of("POST", ("10.0.0.1", "api.z.ai"), path, config) == "openai"  # host or pretty_host
    assert door_of("POST", ("api.openai.com",), path, config) is None
    assert door_of("POST", (), path, config) is None


def test_the_openai_paths_are_configurable_and_may_be_none() -> None:
    custom = routing(openaiPaths=["/v1/chat/completions"], upstreamHosts=["127.0.0.1"])
    assert door_of("POST", ("127.0.0.1",), "/v1/chat/completions", custom) == "openai"
    assert door_of("POST", ("127.0.0.1",), "/api/paas/v4/chat/completions", custom) is None
    off = routing(openaiPaths=[])
    assert door_of("POST", ZAI, "/api/paas/v4/chat/completions", off) is None
    assert door_of("POST", ZAI, "/api/anthropic/v1/messages", off) == "anthropic"


@given(st.text(max_size=40), st.text(max_size=80), st.lists(st.text(max_size=20), max_size=3))
def test_any_input_gives_a_door_or_none_and_never_raises(method: str, path: str, hosts: list[str]) -> None:
    assert door_of(method, hosts, path, default_config()) in (None, "anthropic", "openai")
