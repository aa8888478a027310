"""z.ai's quota body: its windows read, and every odd shape one warning, never an exception."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chaos_mode.quota.reading import (
    KEY_RUN,
    LEVEL_CHARS,
    MASK,
    QuotaReading,
    WindowReading,
    masked,
    read_quota,
)


def body(*limits: dict[str, Any], **top: Any) -> bytes:
    return json.dumps(
        {"code": 200, "success": True, "data": {"level": "max", "limits": list(limits)}, **top}
    ).encode()


WINDOW = {"type": "TOKENS_LIMIT", "unit": 3, "number": 5, "percentage": 18, "nextResetTime": 1767225600000}
MONTH = {"type": "TIME_LIMIT", "unit": 5, "number": 1, "usage": 4000, "percentage": 2, "nextResetTime": 1}


FIVE = WindowReading("5h", 5 * 3600.0, 18.0, 1767225600.0)
CREDITS_5H = {"type": "CREDIT_LIMIT", "unit": 3, "number": 5, "usage": 2000, "currentValue": 27,
              "remaining": 1972, "percentage": 1, "nextResetTime": 1786717056698}  # fmt: skip
CREDITS_WEEK = {"type": "CREDIT_LIMIT", "unit": 6, "number": 1, "usage": 10000, "currentValue": 27,
                "remaining": 9972, "percentage": 1, "nextResetTime": 1787301777997}  # fmt: skip
WEEK = 7 * 86400.0


def test_the_public_monitors_shape() -> None:
    result = read_quota(body(MONTH, WINDOW))
    assert result.reading == QuotaReading((FIVE,), "max")
    assert result.warnings == ()


def test_a_credit_plan_reads_both_windows_in_credits_whatever_their_order() -> None:
    five = WindowReading("5h", 5 * 3600.0, 1.35, 1786717056.698, 2000.0, 27.0, 1972.0)
    week = WindowReading("1w", WEEK, 0.27, 1787301777.997, 10000.0, 27.0, 9972.0)
    for rows in ((CREDITS_5H, CREDITS_WEEK), (CREDITS_WEEK, MONTH, CREDITS_5H)):
        result = read_quota(body(*rows))
        assert result.warnings == ()
        assert result.reading is not None
        assert result.reading.window("5h") == five and result.reading.window("1w") == week
        assert len(result.reading.windows) == 2


def test_old_and_new_rows_mixed_are_read_by_unit() -> None:
    reading = read_quota(body(CREDITS_WEEK, WINDOW)).reading
    assert reading is not None and reading.window() == FIVE
    assert reading.window("1w") is not None and reading.window("1w").cap == 10000.0  # type: ignore[union-attr]


def test_a_weekly_row_alone_is_the_week_not_the_five_hours() -> None:
    for weekly in (CREDITS_WEEK, {**WINDOW, "unit": 6, "number": 1, "percentage": 70}):
        reading = read_quota(body(weekly)).reading
        assert reading is not None and reading.window() is None
        assert reading.window("1w") is not None and reading.window("1w").seconds == WEEK  # type: ignore[union-attr]


def test_a_window_not_started_is_shown_as_such_without_a_warning() -> None:
    fresh = {k: v for k, v in CREDITS_5H.items() if k != "nextResetTime"} | {
        "currentValue": 0, "remaining": 2000, "percentage": 0}  # fmt: skip
    result = read_quota(body(fresh, CREDITS_WEEK))
    five = result.reading.window() if result.reading is not None else None
    assert five is not None and not five.started and five.resets_at is None and five.used_percent == 0
    assert result.warnings == ()
    assert read_quota(body(CREDITS_5H)).reading.window().started  # type: ignore[union-attr]


def test_an_overshoot_of_the_week_is_read_as_it_is_and_the_percent_clamped() -> None:
    over = {**CREDITS_WEEK, "currentValue": 10480, "remaining": 0, "percentage": 100}
    result = read_quota(body(CREDITS_5H, over))
    week = result.reading.window("1w") if result.reading is not None else None
    assert week is not None and week.used == 10480.0 and week.left == 0.0 and week.used_percent == 100.0
    assert result.warnings == ()


def test_the_percent_serves_where_credits_are_not_given() -> None:
    row = {k: v for k, v in CREDITS_5H.items() if k not in ("usage", "currentValue")}
    five = read_quota(body(row)).reading.window()  # type: ignore[union-attr]
    assert five is not None and five.used_percent == 1.0 and five.cap is None and five.left == 1972.0


@pytest.mark.parametrize(
    ("rows", "warning"),
    [
        ((CREDITS_5H, {**CREDITS_WEEK, "unit": 9}), "unit 9 number 1 is no window known"),
        ((CREDITS_5H, {**CREDITS_WEEK, "unit": "6"}), "no window known"),
        ((CREDITS_5H, {**CREDITS_WEEK, "percentage": "x", "usage": None}), "1w.percentage is missing"),
        ((CREDITS_5H, {**CREDITS_WEEK, "nextResetTime": None}), "1w.nextResetTime is missing"),
        ((CREDITS_5H, CREDITS_5H), "5h comes twice"),
        ((CREDITS_5H, {**CREDITS_WEEK, "nextResetTime": 10**400}), "1w.nextResetTime is missing"),
        ((CREDITS_5H, {**CREDITS_WEEK, "number": 10**400}), "number 100000000000 is no window known"),
        ((CREDITS_5H, {**CREDITS_WEEK, "usage": None, "percentage": -(10**400)}), "1w.percentage is missing"),
    ],
)
def test_an_odd_row_is_one_warning_and_the_rest_is_read(
    rows: tuple[dict[str, Any], ...], warning: str
) -> None:
    result = read_quota(body(*rows))
    assert result.reading is not None and result.reading.window() is not None
    assert len(result.warnings) == 1 and warning in result.warnings[0], result.warnings


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
        (body(MONTH), "no TOKENS_LIMIT or CREDIT_LIMIT entry"),
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
    assert result.reading == QuotaReading((WindowReading("5h", 5 * 3600.0, 18.0, None),), "max")
    assert result.warnings == ("TOKENS_LIMIT 5h.nextResetTime is missing or not a number",)


def test_a_percent_out_of_range_is_clamped_and_said() -> None:
    result = read_quota(body({**WINDOW, "percentage": 130}))
    assert result.reading is not None and result.reading.windows[0].used_percent == 100.0
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
        assert all(0 <= w.used_percent <= 100 for w in result.reading.windows)
    else:
        assert len(result.warnings) == 1


KEYS = st.text(alphabet="0123456789abcdef.ABCDEFGHIJKLMNOP", min_size=KEY_RUN, max_size=64)


def key_runs(key: str) -> set[str]:
    """Every run of `KEY_RUN` characters of `key`."""
    return {key[i : i + KEY_RUN] for i in range(len(key) - KEY_RUN + 1)}


OTHER = st.text(alphabet="xyz -:[]", max_size=120)  # no character of a key


@given(KEYS, OTHER, OTHER)
def test_an_echoed_key_is_masked_before_the_quote_is_cut(key: str, before: str, after: str) -> None:
    """However long the text before it (the quote is cut at 80 characters, the code, unit and number at
    12), no run of the key's first characters long enough to matter survives in the warning."""
    for document in (
        {"code": 1001, "msg": before + key + after, "success": False},
        {"code": key + after, "msg": before, "success": False},
        {"code": 200, "data": {"limits": [{**WINDOW, "unit": before[:6] + key + after}]}},
        {"code": 200, "data": {"limits": [{**WINDOW, "number": before[:6] + key + after}]}},
    ):
        warnings = read_quota(json.dumps(document), key).warnings
        assert len(warnings) == 1
        assert not [run for run in key_runs(key) if run in warnings[0]], warnings


@given(KEYS, OTHER, st.integers(0, 200_000))
def test_the_plan_named_is_masked_and_cut(key: str, before: str, length: int) -> None:
    """The plan's name reaches `/api/status` as read: an echoed key masked, a long name cut."""
    level = (before + key + "x" * length)[: len(before) + len(key) + length]
    reading = read_quota(json.dumps({"code": 200, "data": {"level": level, "limits": [WINDOW]}}), key).reading
    assert reading is not None and reading.level is not None
    assert not [run for run in key_runs(key) if run in reading.level], reading.level
    assert len(reading.level) <= LEVEL_CHARS


def test_masked_hides_the_key_and_any_cut_copy_of_it() -> None:
    key = "5f0c2d9e8b7a41c3a2e1d0f9c8b7a6e5.E2eQuotaKeyNeverShown"
    assert masked(f"a {key} b", key) == f"a {MASK} b"
    assert masked(f"cut {key[:38]}", key) == f"cut {MASK}"
    assert masked(f"{key[:8]} {key[:7]} {key[:9]}x", key) == f"{MASK} {key[:7]} {MASK}x"
    assert masked("no key here", "") == "no key here"
    assert masked("short", "sho") == "short".replace("sho", MASK)


@given(st.permutations([CREDITS_5H, CREDITS_WEEK, MONTH, {"type": "SOMETHING_NEW", "unit": 3, "number": 5}]))
def test_the_windows_read_do_not_depend_on_the_rows_order(rows: list[dict[str, Any]]) -> None:
    result = read_quota(body(*rows))
    assert result.reading is not None and result.warnings == ()
    assert sorted(result.reading.windows, key=lambda w: w.name) == sorted(
        read_quota(body(CREDITS_5H, CREDITS_WEEK)).reading.windows,  # type: ignore[union-attr]
        key=lambda w: w.name,
    )
