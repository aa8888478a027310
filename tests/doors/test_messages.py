"""An Anthropic-Messages request body: parse errors, the sticky key, the model rewrite."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chaos_mode.doors.messages import BadRequest, MessageRequest, parse_message
from chaos_mode.routing.pool import RequestInfo
from support.json_bodies import Case, assert_exact_rewrite, check_exact_rewrite, message_bodies

SECRET = "sk-ant-api03-NeverInAnErrorMessage0123"


def parse(body: Any, limit: int = 1 << 20) -> MessageRequest:
    return parse_message(json.dumps(body).encode(), limit=limit)


@pytest.mark.parametrize(
    ("content", "kind"),
    [
        (b"", "not-json"),
        (b"{", "not-json"),
        (b"\xff\xfe\x00", "not-utf8"),
        ('{"model": "m"}'.encode("utf-16"), "not-utf8"),
        ('{"model": "m"}'.encode("utf-16-le"), "not-json"),  # NULs between the characters
        (b'\xef\xbb\xbf{"model": "m"}', "not-json"),  # a byte-order mark is not JSON
        (b'{"model": "\xed\xa0\x80"}', "not-utf8"),  # an encoded surrogate is not UTF-8
        (b'{"model": "m",}', "not-json"),
        (b'{"model": "m"} {}', "not-json"),
        (b'{"model": "m" "x": 1}', "not-json"),
        (b'{"model" "m"}', "not-json"),
        (b'{model: "m"}', "not-json"),
        (b'{"model": "m", "t": NaN}', "not-json"),
        (b'{"model": "m", "t": -Infinity}', "not-json"),
        (b'{"model": "m\n"}', "not-json"),  # a raw control character inside a string
        (b'{"model": "m", "n": 1' + b"0" * 5000 + b"}", "not-json"),  # over Python's int digit limit
        (b'{"model": "m", "deep": ' + b"[" * 10_000 + b"]" * 10_000 + b"}", "too-deep"),
        (b'{"model": "a", "model": "claude-opus-4-5"}', "duplicate-model"),
        (b'{"model": "a", "x": {}, "model": 4}', "duplicate-model"),
        (
            b'{"metadata":{"model":"claude-opus-4-5"},"mod\\u0065l":"claude-opus-4-5","max_tokens":5}',
            "escaped-model-key",
        ),
        (b'{"\\u006dodel": "claude-opus-4-5"}', "escaped-model-key"),
        ('{"model":"claude-opus-ü","a":"\\ud800"}'.encode(), "lone-surrogate"),
        (b'{"model":"claude-opus-4-5","a":"\\udfff\\ud800"}', "lone-surrogate"),
        (b'{"model":"claude-\\udc00"}', "lone-surrogate"),
        (b'{"model":"m","\\ud83d":1}', "lone-surrogate"),
        (b"null", "not-object"),
        (b"[]", "not-object"),
        (b'"claude-opus-4-5"', "not-object"),
        (b"{}", "no-model"),
        (b'{"model": null}', "no-model"),
        (b'{"model": 4}', "no-model"),
        (b'{"model": ""}', "no-model"),
        (b'{"model": " \\t"}', "no-model"),
        (b'{"model": ["claude-opus-4-5"]}', "no-model"),
    ],
)
def test_unroutable_bodies_raise_bad_request_with_a_kind(content: bytes, kind: str) -> None:
    with pytest.raises(BadRequest) as info:
        parse_message(content, limit=1 << 20)
    assert info.value.kind == kind
    assert str(info.value).startswith(f"{kind}: ")
    assert isinstance(info.value, ValueError)


def test_a_body_over_the_limit_is_too_large_before_it_is_parsed() -> None:
    content = b"{" + b" " * 100  # not even JSON: the size is checked first
    with pytest.raises(BadRequest, match="too-large: body of 101 bytes is over the 100-byte limit"):
        parse_message(content, limit=100)
    assert parse_message(b'{"model":"m"}', limit=13).model == "m"  # exactly at the limit is fine


@pytest.mark.parametrize(
    "content", [b"not json " + SECRET.encode(), json.dumps([SECRET]).encode(), b"{" + SECRET.encode()]
)
def test_errors_never_quote_the_body(content: bytes) -> None:
    with pytest.raises(BadRequest) as info:
        parse_message(content, limit=1024)
    assert SECRET not in str(info.value)


def test_a_good_body_is_parsed() -> None:
    message = parse({"model": "claude-opus-4-5", "max_tokens": 1000, "stream": True, "messages": []})
    assert message.model == "claude-opus-4-5"
    assert message.stream is True
    assert message.size == len(json.dumps(message.body))
    assert RequestInfo.estimate(message.size, message.output_budget) == RequestInfo(message.size // 4, 1000)
    assert parse({"model": "x", "stream": "yes"}).stream is False
    assert (
        RequestInfo.estimate(0, parse({"model": "x", "max_tokens": -3}).output_budget).max_output_tokens
        == 4096
    )


def test_sticky_key_is_the_session_header_when_there_is_one() -> None:
    message = parse({"model": "m", "system": "a", "messages": [{"role": "user", "content": "x"}]})
    assert message.sticky_key("abc-123") == "session:abc-123"
    assert message.sticky_key("  abc-123 \n") == "session:abc-123"


def test_sticky_key_without_a_session_is_a_hash_of_the_system_prompt_and_first_message() -> None:
    def key(system: Any, messages: list[dict[str, Any]], model: str = "m") -> str:
        return parse({"model": model, "system": system, "messages": messages}).sticky_key(None)

    first = [{"role": "user", "content": "fix the bug"}]
    later = [*first, {"role": "assistant", "content": "done"}, {"role": "user", "content": "thanks"}]
    base = key("You are Claude Code.", first)
    assert base.startswith("prompt:") and len(base) == len("prompt:") + 32
    assert key("You are Claude Code.", later) == base  # the conversation goes on: same key
    assert key("You are Claude Code.", first, model="other") == base  # the model is not part of it
    assert key("You are a sub-agent.", first) != base
    assert key("You are Claude Code.", [{"role": "user", "content": "other task"}]) != base
    blocks = [{"type": "text", "text": "You are Claude Code."}]
    assert key(blocks, first) == key(list(blocks), first)
    assert parse({"model": "m"}).sticky_key("") == parse({"model": "m"}).sticky_key(None)


@settings(max_examples=60, deadline=None)
@given(
    st.dictionaries(
        st.text(min_size=1, max_size=8).filter(lambda k: k != "model"),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.text(max_size=10),
            lambda inner: (
                st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
            ),
            max_leaves=10,
        ),
        max_size=6,
    ),
    st.text(min_size=1, max_size=20).filter(str.strip),
)
def test_with_model_changes_only_the_model(extra: dict[str, Any], new_model: str) -> None:
    original = {"model": "claude-opus-4-5", **extra}
    message = parse(original)
    rewritten = json.loads(message.with_model(new_model))
    assert rewritten == {**original, "model": new_model}
    assert list(rewritten) == list(original)


def test_with_model_keeps_every_other_byte() -> None:
    raw = b'{ "max_tokens" : 5,\n  "model" :  "claude-opus-4-5", "x": 1.50, "y": "\\u00e9"}'
    message = parse_message(raw, limit=1 << 20)
    assert message.with_model("glm-4.6") == (
        b'{ "max_tokens" : 5,\n  "model" :  "glm-4.6", "x": 1.50, "y": "\\u00e9"}'
    )


def test_with_model_rewrites_only_the_top_level_model_when_it_repeats() -> None:
    body = {
        "messages": [{"role": "user", "content": [{"type": "x", "model": "claude-opus-4-5"}]}],
        "model": "claude-opus-4-5",
    }
    rewritten = json.loads(parse(body).with_model("glm-4.6"))
    assert rewritten["model"] == "glm-4.6"
    assert rewritten["messages"] == body["messages"]


def test_with_model_keeps_a_nested_model_and_an_escaped_name_as_they_are() -> None:
    raw = '{"metadata": {"model": "claude-opus-ü"}, "model": "claude-opus-\\u00fc", "x": "ü"}'.encode()
    message = parse_message(raw, limit=1 << 20)
    assert message.model == "claude-opus-ü"
    assert message.with_model("glm-4.6") == (
        '{"metadata": {"model": "claude-opus-ü"}, "model": "glm-4.6", "x": "ü"}'.encode()
    )


def test_paired_surrogate_escapes_are_text_and_route() -> None:
    raw = b'{"model": "claude-opus-4-5", "emoji": "\\ud83d\\ude00"}'
    assert parse_message(raw, limit=1 << 20).with_model("glm-4.6") == (
        b'{"model": "glm-4.6", "emoji": "\\ud83d\\ude00"}'
    )


def test_with_model_keeps_non_ascii_text_as_it_is() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "héllo 世界"}]}
    message = parse_message(json.dumps(body, ensure_ascii=False).encode(), limit=1 << 20)
    text = message.with_model("glm-4.6").decode()
    assert "héllo 世界" in text
    assert message.body["model"] == "m"  # the parsed body is not changed


# -- the promise, for any body: the top-level model's bytes change and nothing else, or BadRequest -----------


@settings(max_examples=300, deadline=None)
@given(message_bodies(), st.text(min_size=1, max_size=20).filter(str.strip))
def test_a_valid_body_has_exactly_its_model_bytes_rewritten(case: Case, new_model: str) -> None:
    check_exact_rewrite(parse_message, case, new_model)


_SPLICES = st.sampled_from(
    [
        *(b'"model":"x",', b'"mod\\u0065l":"y",', b"\\ud800", b"\\u00fc", "ü".encode()),
        *(b"\xff", b"\xed\xa0\x80"),
        *(b"[", b"{", b"}", b"]", b",", b":", b'"', b"\\", b" ", b"NaN", b"1e400", b"\x00"),
    ]
)


@settings(max_examples=500, deadline=None)
@given(message_bodies(), st.lists(st.tuples(st.integers(0, 10_000), _SPLICES), max_size=3))
def test_any_body_is_either_rewritten_exactly_or_refused(
    case: tuple[dict[str, Any], str, bytes], splices: list[tuple[int, bytes]]
) -> None:
    _, _, raw = case
    for at, piece in splices:
        at %= len(raw) + 1
        raw = raw[:at] + piece + raw[at:]
    try:
        message = parse_message(raw, limit=1 << 20)
    except BadRequest:
        return  # passes through untouched
    original = json.loads(raw)  # what was routed is JSON an ordinary parser reads the same way
    assert isinstance(original, dict)
    assert message.body == original
    assert_exact_rewrite(raw, original, message, "glm-4.6")
    rewritten = message.with_model("glm-4.6")
    rewritten.decode("utf-8")  # still UTF-8, and still parses without Python's extensions
    json.loads(rewritten, parse_constant=lambda name: pytest.fail(f"{name} in a rewritten body"))


def _image_blocks(body: dict[str, Any]) -> bool:
    """The reference: a block of a vision type in a message's content, or in a block's own content
    one level down (a tool's result); deeper ones are not looked for."""
    found = False
    for message in body.get("messages") or []:
        if not isinstance(message, dict):
            continue
        for block in message.get("content") if isinstance(message.get("content"), list) else []:
            if not isinstance(block, dict):
                continue
            inner = block.get("content") if isinstance(block.get("content"), list) else []
            kinds = [block.get("type"), *(b.get("type") for b in inner if isinstance(b, dict))]
            found |= any(kind in ("image", "image_url", "video_url", "file_url") for kind in kinds)
    return found


_SOURCE = {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}
_IMAGE = {"type": "image", "source": _SOURCE}
_RESULT = {"type": "tool_result", "tool_use_id": "t"}


@pytest.mark.parametrize(
    ("content", "images"),
    [
        ("a picture of an image", False),
        ([{"type": "text", "text": "image"}], False),
        ([_IMAGE], True),
        ([{**_RESULT, "content": [_IMAGE]}], True),
        ([{"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}}], True),  # OpenAI's
        ([{"type": "video_url", "video_url": {"url": "https://example.com/a.mp4"}}], True),  # z.ai's GLM-V
        ([{"type": "file_url", "file_url": {"url": "https://example.com/a.pdf"}}], True),
        ([{**_RESULT, "content": [{"type": "x", "content": [_IMAGE]}]}], False),  # deeper: not looked for
        ([{"type": "imagery"}], False),
        ([{"type": ["image"]}, {"type": {"image": 1}}], False),  # a list or an object is no type
        ([{**_RESULT, "content": [{"type": []}]}], False),
    ],
)
def test_an_image_is_found_in_a_message_or_a_tool_result(content: object, images: bool) -> None:
    body = {"model": "claude-opus-4-5", "messages": [{"role": "user", "content": content}]}
    assert parse(body).images is images
    assert _image_blocks(body) is images


def test_an_image_type_spelled_with_an_escape_is_still_an_image() -> None:
    raw = b'{"model": "m", "messages": [{"role": "user", "content": [{"type": "\\u0069mage"}]}]}'
    assert b"image" not in raw
    assert parse_message(raw, limit=1 << 20).images


_KINDS = st.one_of(
    st.sampled_from(["text", "image", "image_url", "video_url", "file_url", "tool_result", "imag"]),
    st.lists(st.just("image"), max_size=1),  # a type that is no string (unhashable)
    st.fixed_dictionaries({"type": st.just("image")}),
)
_BLOCKS = st.recursive(
    st.fixed_dictionaries({"type": _KINDS}),
    lambda inner: st.fixed_dictionaries({"type": _KINDS, "content": st.lists(inner, max_size=3)}),
    max_leaves=8,
)
_CONTENT = st.one_of(st.text(max_size=10), st.lists(st.one_of(_BLOCKS, st.integers()), max_size=4))


_MESSAGES = st.lists(st.fixed_dictionaries({"role": st.just("user"), "content": _CONTENT}), max_size=4)


@settings(max_examples=300, deadline=None)
@given(_MESSAGES, st.booleans())
def test_images_are_found_however_the_body_spells_them(messages: list[dict[str, Any]], escaped: bool) -> None:
    """Whatever the body's spelling (the type's letters escaped or not), the answer is the reference's."""
    body = {"model": "claude-opus-4-5", "messages": messages}
    raw = json.dumps(body).encode()
    if escaped:
        raw = raw.replace(b'"image', b'"\\u0069mage')
    assert parse_message(raw, limit=1 << 20).images is _image_blocks(body)
