"""JSON parsed with a depth bound (chaos_mode.zai.json_body): too deep is a ValueError, never a
RecursionError; bytes that are not UTF-8 are still read."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chaos_mode.zai import json_body

DEEP = 100_000
NESTED = [b"[" * DEEP + b"]" * DEEP, b'{"a":' * DEEP + b"1" + b"}" * DEEP, b"[" * DEEP]


@pytest.mark.parametrize("data", NESTED, ids=["array", "object", "unclosed"])
def test_json_nested_too_deeply_is_a_value_error(data: bytes) -> None:
    with pytest.raises(ValueError, match="nested too deeply"):
        json_body.loads(data)
    with pytest.raises(ValueError, match="nested too deeply"):
        json_body.loads(data.decode())
    with pytest.raises(ValueError, match="nested too deeply"):
        json_body.raw_decode("x" + data.decode(), 1)


def test_a_byte_that_is_not_utf8_is_replaced_and_the_rest_read() -> None:
    read = json_body.loads(b'{"code": "1302", "message": "\xe9\xa3"}')
    assert read == {"code": "1302", "message": "\ufffd"}


def test_what_is_not_json_is_a_value_error() -> None:
    for data in (b"", b"{", "<html>", b"[1] 2"):
        with pytest.raises(ValueError):
            json_body.loads(data)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
)


@given(JSON)
def test_what_json_reads_it_reads_alike(value: object) -> None:
    text = json.dumps(value)
    assert json_body.loads(text.encode()) == json.loads(text) == json_body.raw_decode(text + " x")[0]
