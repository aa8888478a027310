"""An OpenAI chat-completions body: parsed and rewritten exactly like an Anthropic message, plus what
it says of streaming, usage and its output budget, and its tier."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chaos_mode.config.schema import default_config, parse_config
from chaos_mode.doors.chat import ChatRequest, parse_chat
from chaos_mode.doors.messages import BadRequest, MessageRequest, parse_message
from chaos_mode.routing.pool import ChaosPool, RequestInfo, Ticket
from chaos_mode.routing.tiers import TierClassifier
from support.design_catalog import DESIGN_MODELS
from support.fakes import FakeClock
from support.json_bodies import JSON_VALUES, Case, check_exact_rewrite, message_bodies

DESIGN = parse_config({"modelRouting": {"models": DESIGN_MODELS}})  # the design's (early-2026) catalog


def chat(**fields: Any) -> ChatRequest:
    body = {"model": "glm-4.7", "messages": [{"role": "user", "content": "hi"}], **fields}
    return parse_chat(json.dumps(body).encode(), limit=1 << 20)


def test_a_chat_body_is_a_message_request_from_the_openai_door() -> None:
    request = chat()
    assert isinstance(request, MessageRequest)
    assert request.door == "openai"
    assert parse_message(b'{"model": "m"}', limit=100).door == "anthropic"
    assert request.model == "glm-4.7"


@pytest.mark.parametrize(
    ("fields", "stream", "include_usage"),
    [
        ({}, False, False),
        ({"stream": True}, True, False),
        ({"stream": "true"}, False, False),
        ({"stream": True, "stream_options": {"include_usage": True}}, True, True),
        ({"stream": True, "stream_options": {"include_usage": 1}}, True, False),
        ({"stream": True, "stream_options": None}, True, False),
        ({"stream": True, "stream_options": [True]}, True, False),
        ({"stream_options": {"include_usage": True}}, False, True),  # says so; only a stream has chunks
    ],
)
def test_stream_and_include_usage(fields: dict[str, Any], stream: bool, include_usage: bool) -> None:
    request = chat(**fields)
    assert (request.stream, request.include_usage) == (stream, include_usage)


@pytest.mark.parametrize(
    ("fields", "budget"),
    [
        ({}, 4096),
        ({"max_tokens": 100}, 100),
        ({"max_completion_tokens": 200}, 200),
        ({"max_completion_tokens": 200, "max_tokens": 100}, 200),
        ({"max_completion_tokens": 0, "max_tokens": 100}, 100),
        ({"max_completion_tokens": True, "max_tokens": 100}, 100),
        ({"max_completion_tokens": "200"}, 4096),
        ({"max_completion_tokens": -1}, 4096),
        ({"max_completion_tokens": 2.5}, 4096),
    ],
)
def test_the_output_budget_for_the_cost_guard(fields: dict[str, Any], budget: int) -> None:
    request = chat(**fields)
    assert RequestInfo.estimate(request.size, request.output_budget) == RequestInfo(request.size // 4, budget)


@pytest.mark.parametrize(
    ("model", "tier"),
    [
        ("glm-4.7", "heavy"),
        ("GLM-4.6", "heavy"),
        ("glm-4.5", "medium"),
        ("glm-4.5-air", "medium"),
        ("glm-4.5-flash", "light"),
        ("glm-4.7-flashx", "light"),
        ("claude-opus-4-5", "heavy"),  # the tier rules' patterns apply to other names
        ("gpt-4o", "medium"),  # and the default to the rest
    ],
)
def test_the_tier_is_the_catalog_models_own_else_the_rules(model: str, tier: str) -> None:
    assert TierClassifier(DESIGN).classify(chat(model=model).model) == tier


@pytest.mark.parametrize(
    ("model", "tier"), [("glm-5.4", "heavy"), ("GLM-5.3-Flash", "medium"), ("glm-4.6v", "light")]
)
def test_the_built_in_catalog_models_keep_their_tiers(model: str, tier: str) -> None:
    assert TierClassifier(default_config()).classify(chat(model=model).model) == tier


def test_a_request_for_a_heavy_catalog_model_may_be_served_by_any_heavy_model() -> None:
    config = parse_config({"modelRouting": {"chaosMode": {"enabled": True}, "models": DESIGN_MODELS}})
    pool = ChaosPool(config, clock=FakeClock(0.0), wall_clock=FakeClock(0.0))
    tier = TierClassifier(config).classify(chat(model="glm-4.7").model)
    served = set()
    for _ in range(8):  # the heavy models' 3 + 3 + 2 slots
        selection = pool.admit_now(Ticket(tier))
        assert selection is not None
        served.add(selection.model)
    assert served == {"glm-4.7", "glm-4.6", "glm-4.5-x"}
    assert pool.admit_now(Ticket(tier)) is None  # never a medium or light model


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"[]",
        b'{"messages": []}',
        b'{"model": 4}',
        b'{"model": "a", "model": "b"}',
        b'{"mod\\u0065l": "x"}',
    ],
)
def test_odd_bodies_are_refused_as_for_the_anthropic_door(content: bytes) -> None:
    with pytest.raises(BadRequest):
        parse_chat(content, limit=1 << 20)


def test_a_chat_body_over_the_limit_is_too_large() -> None:
    with pytest.raises(BadRequest, match="too-large"):
        parse_chat(b'{"model": "glm-4.7"}', limit=5)


@st.composite
def chat_bodies(draw: st.DrawFn) -> Case:
    """Chat bodies with `model` also where it must not be touched: tools, messages, response_format."""
    nested = {"model": draw(st.text(max_size=8)), "x": draw(JSON_VALUES)}
    members: dict[str, Any] = {
        "messages": [{"role": "system", "content": draw(st.text(max_size=10))}, {"role": "user", **nested}],
        "stream": draw(st.booleans()),
        "stream_options": {"include_usage": draw(st.booleans()), "model": draw(st.text(max_size=4))},
        "tools": [{"type": "function", "function": {"name": "model", "parameters": nested}}],
        draw(st.sampled_from(["max_tokens", "max_completion_tokens"])): draw(st.integers(-5, 10**6)),
    }
    model = draw(st.text(min_size=1, max_size=20).filter(str.strip))
    items = list(members.items())
    items.insert(draw(st.integers(0, len(items))), ("model", model))
    text = json.dumps(dict(items), ensure_ascii=draw(st.booleans()), indent=draw(st.sampled_from([None, 2])))
    return dict(items), model, text.encode()


@settings(max_examples=300, deadline=None)
@given(message_bodies() | chat_bodies(), st.text(min_size=1, max_size=20).filter(str.strip))
def test_any_object_with_a_top_level_string_model_has_exactly_those_bytes_rewritten(
    case: Case, new_model: str
) -> None:
    check_exact_rewrite(parse_chat, case, new_model)


def test_the_sticky_key_without_a_session_tells_agents_of_one_system_prompt_apart() -> None:
    """OpenAI puts the system prompt in `messages`: agents of one tool share it, so the key takes the
    messages up to the first user message, not the first message alone."""

    def key(*messages: dict[str, object]) -> str | None:
        body = {"model": "gpt-4o", "messages": list(messages)}
        return parse_chat(json.dumps(body).encode(), limit=1 << 20).sticky_key(None)

    system = {"role": "system", "content": "You are a coding agent."}
    one, other = {"role": "user", "content": "fix the bug"}, {"role": "user", "content": "write the docs"}
    answer = {"role": "assistant", "content": "done"}
    assert key(system, one) != key(system, other)  # two agents, one system prompt
    assert key(system, one) == key(system, one, answer, {"role": "user", "content": "thanks"})  # one, later
    assert key(one) != key(other) and key(system) is not None
