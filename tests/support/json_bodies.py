"""Any JSON object with a top-level string `model`, in any formatting, and the check of an exact rewrite:
shared by the property tests of both doors' request bodies."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st

from chaos_mode.doors.messages import MessageRequest

Case = tuple[dict[str, Any], str, bytes]  # (the object, its model, its bytes)

_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)
_KEYS = st.sampled_from(["model", "mod\u0065l", "ü", ""]) | st.text(max_size=6)
JSON_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_KEYS, inner, max_size=3),
    max_leaves=12,
)


@st.composite
def message_bodies(draw: st.DrawFn) -> tuple[dict[str, Any], str, bytes]:
    """A JSON object with one top-level string `model` (anywhere among its keys), in any formatting."""
    members = draw(st.dictionaries(_KEYS.filter(lambda k: k != "model"), JSON_VALUES, max_size=6))
    model = draw(st.text(min_size=1, max_size=20).filter(str.strip))
    items = list(members.items())
    items.insert(draw(st.integers(0, len(items))), ("model", model))
    text = json.dumps(
        dict(items),
        ensure_ascii=draw(st.booleans()),
        indent=draw(st.sampled_from([None, 0, 2, "\t"])),
        separators=draw(st.sampled_from([None, (",", ":"), (" ,\n", " :  ")])),
    )
    return dict(items), model, text.encode()


def assert_exact_rewrite(
    raw: bytes, original: dict[str, Any], message: MessageRequest, new_model: str
) -> None:
    start, end = message.model_span
    rewritten = message.with_model(new_model)
    assert json.loads(raw[start:end]) == message.model == original["model"]
    assert rewritten[:start] == raw[:start]
    assert rewritten[len(rewritten) - (len(raw) - end) :] == raw[end:]
    assert json.loads(rewritten[start : len(rewritten) - (len(raw) - end)]) == new_model
    parsed = json.loads(rewritten)
    assert parsed == {**original, "model": new_model}
    assert list(parsed) == list(original)


def check_exact_rewrite(parse: Callable[..., MessageRequest], case: Case, new_model: str) -> None:
    """`parse` reads the body as JSON does, and rewrites exactly the bytes of its top-level model."""
    original, _, raw = case
    request = parse(raw, limit=1 << 20)
    assert request.body == original
    assert_exact_rewrite(raw, original, request, new_model)
