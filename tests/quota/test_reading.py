"""z.ai's quota body: the 5-hour window read, and every odd shape one warning, never an exception."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chaos_mode.quota.reading import KEY_RUN, MASK, QuotaReading, masked, read_quota


def body(*limits: dict[str, Any], **top: Any) -> bytes:
    return json.dumps(
        {"code": 200, "success": True, "data": {"level": "max", "limits": list(limits)}, **top}
    ).encode()


WINDOW = {"type": "TOKENS_LIMIT", "unit": 3, "number": 5, "percentage": 18, "nextResetTime": 1767225600000}
MONTH = {"type": "TIME_LIMIT", "unit": 5, "number": 1, "usage": 4000, "percentage": 2, "nextResetTime": 1}


def test_the_public_monitors_shape() -> None:
    result = read_quota(body(MONTH, WINDOW))
    assert result.reading == QuotaReading(18.0, 1767225600.0, "max")
    assert result.warnings == ()


def test_the_five_hour_entry_is_preferred_over_another_tokens_limit() -> None:
    weekly = {**WINDOW, "unit": 6, "number": 1, "percentage": 70}
    assert read_quota(body(weekly, WINDOW)).reading == QuotaReading(18.0, 1767225600.0, "max")
    assert read_quota(body(weekly)).reading == QuotaReading(70.0, 1767225600.0, "max")


@pytest.mark.parametrize(
    ("raw", "warning"),
    [
        (b"<html>502</html>", "not JSON"),
        (b"\xff\xfe", "not JSON"),
        (b'{"data":' * 100_000 + b"0" + b"}" * 100_000, "not JSON"),  # nested too deeply
        (b"[1, 2]", "not a JSON object"),
        (
            json.dumps({"code": 401, "msg": "token expired", "success": False}).encode(),
            "code 401: token expired",
        ),
        (json.dumps({"code": 200, "data": {}}).encode(), "no data.limits list"),
        (json.dumps({"code": 200, "data": None}).encode(), "no data.limits list"),
        (body(MONTH), "no TOKENS_LIMIT entry"),
        (body({**WINDOW, "percentage": "18%"}), "percentage is missing or not a number"),
        (body({**WINDOW, "percentage": True}), "percentage is missing or not a number"),
        (body({k: v for k, v in WINDOW.items() if k != "percentage"}), "percentage is missing"),
    ],
)
def test_an_unusable_body_is_one_warning_and_no_reading(raw: bytes, warning: str) -> None:
    result = read_quota(raw)
    assert result.reading is None
    assert len(result.warnings) == 1 and warning in result.warnings[0]


def test_a_missing_reset_still_reads_the_percent() -> None:
    result = read_quota(body({k: v for k, v in WINDOW.items() if k != "nextResetTime"}))
    assert result.reading == QuotaReading(18.0, None, "max")
    assert result.warnings == ("TOKENS_LIMIT.nextResetTime is missing or not a number",)


def test_a_percent_out_of_range_is_clamped_and_said() -> None:
    result = read_quota(body({**WINDOW, "percentage": 130}))
    assert result.reading is not None and result.reading.used_percent == 100.0
    assert "outside 0-100" in result.warnings[0]


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
        lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
    )
)
def test_any_json_is_read_without_an_exception(document: Any) -> None:
    result = read_quota(
        json.dumps({"code": 200, "data": {"limits": [document, WINDOW | {"percentage": document}]}})
    )
    if result.reading is not None:
        assert 0 <= result.reading.used_percent <= 100
    else:
        assert len(result.warnings) == 1


KEYS = st.text(alphabet="0123456789abcdef.ABCDEFGHIJKLMNOP", min_size=KEY_RUN, max_size=64)


def key_runs(key: str) -> set[str]:
    """Every run of `KEY_RUN` characters of `key`."""
    return {key[i : i + KEY_RUN] for i in range(len(key) - KEY_RUN + 1)}


OTHER = st.text(alphabet="xyz -:[]", max_size=120)  # no character of a key


@given(KEYS, OTHER, OTHER)
def test_an_echoed_key_is_masked_before_the_quote_is_cut(key: str, before: str, after: str) -> None:
    """However long the text before it (the quote is cut at 80 characters, the code at 12), no run of the
    key's first characters long enough to matter survives in the warning."""
    for document in (
        {"code": 1001, "msg": before + key + after, "success": False},
        {"code": key + after, "msg": before, "success": False},
    ):
        warnings = read_quota(json.dumps(document), key).warnings
        assert len(warnings) == 1
        assert not [run for run in key_runs(key) if run in warnings[0]], warnings


def test_masked_hides_the_key_and_any_cut_copy_of_it() -> None:
    key = "5f0c2d9e8b7a41c3a2e1d0f9c8b7a6e5.E2eQuotaKeyNeverShown"
    assert masked(f"a {key} b", key) == f"a {MASK} b"
    assert masked(f"cut {key[:38]}", key) == f"cut {MASK}"
    assert masked(f"{key[:8]} {key[:7]} {key[:9]}x", key) == f"{MASK} {key[:7]} {MASK}x"
    assert masked("no key here", "") == "no key here"
    assert masked("short", "sho") == "short".replace("sho", MASK)
