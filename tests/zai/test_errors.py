"""z.ai error bodies -> what the pool should do (the code table of DESIGN.md)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chaos_mode.zai.errors import (
    QUOTA_WINDOW_CODES,
    QUOTA_WINDOW_REASONS,
    Action,
    UpstreamError,
    classify_error,
    extract_code,
    next_beijing_midnight,
    parse_reset_time,
    parse_retry_after,
)

NOW = datetime(2026, 9, 11, 12, 0, 0, tzinfo=UTC).timestamp()

# DESIGN.md's table, written out here.
CODE_TABLE: dict[str, Action] = {
    "1302": Action.CONCURRENCY,
    "1303": Action.COOLDOWN,
    "1305": Action.COOLDOWN,
    "1312": Action.COOLDOWN,
    "1304": Action.MODEL_DAY,
    "1308": Action.ACCOUNT_PAUSE,
    "1310": Action.ACCOUNT_PAUSE,
    "1313": Action.ACCOUNT_PAUSE,
    "1314": Action.ACCOUNT_PAUSE,
    "1315": Action.ACCOUNT_PAUSE,
    "1316": Action.ACCOUNT_PAUSE,
    "1317": Action.ACCOUNT_PAUSE,
    "1318": Action.ACCOUNT_PAUSE,
    "1319": Action.ACCOUNT_PAUSE,
    "1320": Action.ACCOUNT_PAUSE,
    "1321": Action.ACCOUNT_PAUSE,
    "1113": Action.OUT_OF_ROTATION,
    "1309": Action.FATAL,
    "1311": Action.OUT_OF_ROTATION,
    "1211": Action.OUT_OF_ROTATION,
}

ANTHROPIC_1308 = (
    '{"type":"error","error":{"type":"rate_limit_error","code":"1308","message":"[1308][Usage limit '
    'reached for 5 hour. Your limit will reset at 2026-09-12 00:35:41]"},"request_id":"req_1"}'
)
ANTHROPIC_OLD_1113 = (
    '{"type":"error","error":{"type":"1113","message":"Insufficient balance or no resource package. '
    'Please recharge."}}'
)
OPENAI_1302 = (
    '{"error":{"code":"1302","message":"High concurrency usage of this API, please reduce concurrency '
    'or contact customer service to increase limits"}}'
)
MESSAGE_ONLY_1302 = '{"type":"error","error":{"type":"rate_limit_error","message":"[1302]High concurrency"}}'


def anthropic_body(code: str, message: str = "x") -> str:
    return json.dumps(
        {"type": "error", "error": {"type": "rate_limit_error", "code": code, "message": message}}
    )


@pytest.mark.parametrize(
    ("body", "code", "action"),
    [
        (ANTHROPIC_1308, "1308", Action.ACCOUNT_PAUSE),
        (ANTHROPIC_OLD_1113, "1113", Action.OUT_OF_ROTATION),
        (OPENAI_1302, "1302", Action.CONCURRENCY),
        (MESSAGE_ONLY_1302, "1302", Action.CONCURRENCY),
        ('{"error":{"code":1312,"message":"overloaded"}}', "1312", Action.COOLDOWN),  # a JSON number
        (ANTHROPIC_1308.encode(), "1308", Action.ACCOUNT_PAUSE),  # bytes as well as str
    ],
)
def test_body_shapes(body: str | bytes, code: str, action: Action) -> None:
    error = classify_error(429, body, now=NOW)
    assert error is not None
    assert (error.code, error.action, error.status) == (code, action, 429)


@pytest.mark.parametrize(("code", "action"), CODE_TABLE.items())
def test_every_code_maps_to_its_action(code: str, action: Action) -> None:
    for body in (anthropic_body(code), json.dumps({"error": {"code": code, "message": "m"}})):
        error = classify_error(429, body, now=NOW)
        assert error is not None
        assert error.action is action
        assert error.code == code
        assert f"({code})" in error.reason
    # The code decides, whatever the HTTP status (z.ai sometimes answers 400).
    error = classify_error(400, anthropic_body(code), now=NOW)
    assert error is not None and error.action is action


@pytest.mark.parametrize(
    ("action", "fails_over"),
    [
        (Action.COOLDOWN, True),
        (Action.MODEL_DAY, True),
        (Action.OUT_OF_ROTATION, True),
        (Action.ACCOUNT_PAUSE, False),
        (Action.FATAL, False),
        (Action.NONE, False),
    ],
)
def test_fails_over(action: Action, fails_over: bool) -> None:
    assert UpstreamError(429, None, action, "r").fails_over is fails_over


def test_1308_reset_time_is_beijing_time() -> None:
    error = classify_error(429, ANTHROPIC_1308, now=NOW)
    assert error is not None
    # 2026-09-12 00:35:41 in UTC+8 is 2026-09-11 16:35:41 UTC.
    assert error.reset_at == datetime(2026, 9, 11, 16, 35, 41, tzinfo=UTC).timestamp()
    assert error.reason == "5-hour usage limit (1308)"


def test_1310_reset_time_and_a_pause_without_one() -> None:
    with_time = classify_error(
        429, anthropic_body("1310", "[1310] limit; reset at 2026-10-01T08:00:00"), now=NOW
    )
    assert with_time is not None
    assert with_time.reset_at == datetime(2026, 10, 1, 0, 0, 0, tzinfo=UTC).timestamp()
    without = classify_error(429, anthropic_body("1313", "[1313] fair use"), now=NOW)
    assert without is not None and without.action is Action.ACCOUNT_PAUSE and without.reset_at is None


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ("Your limit will reset at 2026-01-01 00:00:00", datetime(2025, 12, 31, 16, 0, tzinfo=UTC)),
        # z.ai's Chinese 1310 (Beijing time), days away
        (
            "每周限额已用完，您的限额将在 2026-08-05 15:16:26 重置。",
            datetime(2026, 8, 5, 7, 16, 26, tzinfo=UTC),
        ),
        ("您的限额将于 2026-09-18 08:00:00 重置", datetime(2026, 9, 18, 0, 0, tzinfo=UTC)),
        (
            "[1310][Weekly/Monthly Limit Exhausted. Your limit will reset at 2026-07-14 07:49:08]",
            datetime(2026, 7, 13, 23, 49, 8, tzinfo=UTC),
        ),
        # a time that carries its own offset is read in it
        ("... Resets at 2026-08-07T05:00:00Z", datetime(2026, 8, 7, 5, 0, tzinfo=UTC)),
        ("reset at 2026-08-07 13:00:00+08:00", datetime(2026, 8, 7, 5, 0, tzinfo=UTC)),
        ("reset at 2026-08-07 13:00 UTC+8", datetime(2026, 8, 7, 5, 0, tzinfo=UTC)),
        ("reset at 2026-13-01 00:00:00", None),  # month 13
        ("将在 2026-02-30 00:00:00 重置", None),  # 30 February
        ("no time here", None),
        ("", None),
    ],
)
def test_parse_reset_time(message: str, expected: datetime | None) -> None:
    assert parse_reset_time(message) == (expected.timestamp() if expected else None)


@given(st.text(alphabet=st.sampled_from("reset at将在重置 0123456789-:TZ+UTC.")))
def test_parse_reset_time_never_raises(message: str) -> None:
    result = parse_reset_time(message)
    assert result is None or isinstance(result, float)


@pytest.mark.parametrize(
    ("code", "message", "reset"),
    [
        ("1316", "[1316][5-hour limit reached. Your limit will reset at 2026-09-11 22:00:00]", (14, 0)),
        ("1317", "[1317][7-day limit reached. Your limit will reset at 2026-09-11 23:00:00]", (15, 0)),
        ("1321", "[1321][您的限额将在 2026-09-11 21:30:00 重置。]", (13, 30)),
    ],
)
def test_the_2026_quota_codes_pause_the_account_until_their_reset(
    code: str, message: str, reset: tuple[int, int]
) -> None:
    error = classify_error(429, anthropic_body(code, message), now=NOW)
    assert error is not None and error.action is Action.ACCOUNT_PAUSE and not error.fails_over
    assert error.reset_at == datetime(2026, 9, 11, *reset, tzinfo=UTC).timestamp()
    assert error.reason in QUOTA_WINDOW_REASONS


def test_quota_windows_are_the_quota_codes_and_only_them() -> None:
    assert set(QUOTA_WINDOW_CODES) == {"1308", "1310", "1316", "1317", "1318", "1319", "1320", "1321"}
    for code in ("1313", "1314", "1315", "1302", "1305"):  # a throttle or an enterprise cap: transient
        error = classify_error(429, anthropic_body(code), now=NOW)
        assert error is not None and error.reason not in QUOTA_WINDOW_REASONS


def test_1311_takes_the_model_out_of_rotation_at_once() -> None:
    error = classify_error(
        400, anthropic_body("1311", "[1311][The current plan does not include access to this model]"), now=NOW
    )
    assert error is not None and error.action is Action.OUT_OF_ROTATION and error.fails_over


@pytest.mark.parametrize(
    ("now", "midnight"),
    [
        # 23:30 in Beijing -> midnight half an hour later.
        (datetime(2026, 1, 1, 15, 30, tzinfo=UTC), datetime(2026, 1, 1, 16, 0, tzinfo=UTC)),
        # 00:30 in Beijing (still the 1st in UTC) -> the following midnight, almost a day away.
        (datetime(2026, 1, 1, 16, 30, tzinfo=UTC), datetime(2026, 1, 2, 16, 0, tzinfo=UTC)),
        # Exactly midnight in Beijing -> the next one.
        (datetime(2026, 1, 1, 16, 0, tzinfo=UTC), datetime(2026, 1, 2, 16, 0, tzinfo=UTC)),
        # 07:59 UTC = 15:59 Beijing.
        (datetime(2026, 2, 28, 7, 59, tzinfo=UTC), datetime(2026, 2, 28, 16, 0, tzinfo=UTC)),
    ],
)
def test_next_beijing_midnight(now: datetime, midnight: datetime) -> None:
    assert next_beijing_midnight(now.timestamp()) == midnight.timestamp()


def test_1304_resets_at_the_next_beijing_midnight() -> None:
    now = datetime(2026, 1, 1, 15, 30, tzinfo=UTC).timestamp()
    error = classify_error(429, anthropic_body("1304", "[1304] daily limit"), now=now)
    assert error is not None
    assert error.action is Action.MODEL_DAY
    assert error.reset_at == datetime(2026, 1, 1, 16, 0, tzinfo=UTC).timestamp()


@pytest.mark.parametrize(
    ("status", "body", "reason"),
    [
        (429, "<html>Too Many Requests</html>", "HTTP 429"),
        (429, None, "HTTP 429"),
        (429, b"\xff\xfe not utf-8", "HTTP 429"),
        (429, '{"error": "busy"}', "HTTP 429"),
        (503, "", "HTTP 503"),
        (529, '{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}', "HTTP 529"),
        (429, anthropic_body("9999"), "HTTP 429 (9999)"),  # an unknown code on a busy status
    ],
)
def test_busy_status_without_a_known_code_cools_down(
    status: int, body: str | bytes | None, reason: str
) -> None:
    error = classify_error(status, body, now=NOW)
    assert error is not None
    assert error.action is Action.COOLDOWN
    assert error.reason == reason
    assert error.reset_at is None


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (400, '{"type":"error","error":{"type":"invalid_request_error","message":"bad"}}'),
        (400, anthropic_body("9999")),
        (401, '{"error":{"code":"1000","message":"auth"}}'),
        (500, None),
        (200, ANTHROPIC_1308),
        (204, None),
        (399, anthropic_body("1302")),
    ],
)
def test_not_a_routing_matter(status: int, body: str | None) -> None:
    assert classify_error(status, body, now=NOW) is None


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        (None, (None, "")),
        ([], (None, "")),
        ({"error": "x"}, (None, "")),
        ({"error": {"code": True, "message": 5}}, (None, "")),  # a bool is not a code
        ({"error": {"code": "", "type": "1113", "message": "m"}}, ("1113", "m")),
        ({"error": {"message": "  [1305] busy"}}, ("1305", "  [1305] busy")),
        ({"error": {"message": "busy [1305]"}}, (None, "busy [1305]")),  # only a leading code counts
    ],
)
def test_extract_code(payload: object, expected: tuple[str | None, str]) -> None:
    assert extract_code(payload) == expected


HTTP_DATE_NOW = datetime(2015, 10, 21, 7, 27, 30, tzinfo=UTC).timestamp()


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("5", 5.0),
        (" 120 ", 120.0),
        ("0", 0.0),
        ("2.5", 2.5),
        ("Wed, 21 Oct 2015 07:28:00 GMT", 30.0),
        ("Wed, 21 Oct 2015 07:27:00 GMT", 0.0),  # in the past: retry now
        ("-5", 0.0),  # negative: retry now
        ("soon", None),
        ("", None),
        (None, None),
        ("nan", None),
        ("inf", None),  # not delta-seconds: must not become an endless pause
    ],
)
def test_parse_retry_after(value: str | None, seconds: float | None) -> None:
    assert parse_retry_after(value, now=HTTP_DATE_NOW) == seconds


def openai_body(code: str | int, message: str = "x") -> str:
    """z.ai's OpenAI door: `{"error": {"code", "message"}}`."""
    return json.dumps({"error": {"code": code, "message": message}})


@pytest.mark.parametrize(("code", "action"), CODE_TABLE.items())
def test_every_code_in_the_openai_shape_is_classified_as_in_the_anthropic_shape(
    code: str, action: Action
) -> None:
    for status in (429, 400):
        from_openai = classify_error(status, openai_body(code), now=NOW)
        from_anthropic = classify_error(status, anthropic_body(code), now=NOW)
        assert from_openai is not None and from_openai.action is action
        assert from_openai == from_anthropic


def test_the_openai_shape_gives_the_reset_time_of_a_1308_and_takes_a_numeric_code() -> None:
    message = "Usage limit reached for 5 hour. Your limit will reset at 2026-09-12 00:35:41"
    error = classify_error(429, openai_body(1308, message), now=NOW)
    assert error is not None and error.code == "1308"
    assert error.reset_at == datetime(2026, 9, 11, 16, 35, 41, tzinfo=UTC).timestamp()


@pytest.mark.parametrize(
    ("status", "body", "action"),
    [
        (
            429,
            '{"error":{"code":"rate_limit_exceeded","type":"requests","message":"slow down"}}',
            Action.COOLDOWN,
        ),
        (429, '{"error":{"code":null,"message":"[1313] fair use"}}', Action.ACCOUNT_PAUSE),
        (429, '{"error":{"code":"1399","message":"new"}}', Action.COOLDOWN),  # an unknown 13xx: this model
        (400, '{"error":{"code":"1214","message":"bad messages"}}', None),  # a bad request: pass it on
        (400, '{"error":{"code":null,"type":"invalid_request_error","message":"bad"}}', None),
    ],
)
def test_other_openai_shaped_answers(status: int, body: str, action: Action | None) -> None:
    error = classify_error(status, body, now=NOW)
    assert (error.action if error is not None else None) is action


def test_a_429_nested_too_deeply_is_a_busy_answer() -> None:
    nested = b'{"error":' * 100_000 + b"1" + b"}" * 100_000
    error = classify_error(429, nested, now=NOW)
    assert error is not None and (error.action, error.code, error.fails_over) == (Action.COOLDOWN, None, True)


@pytest.mark.parametrize("odd", [b"\xe9", b"\x81\x30", b"\xff\xfe"], ids=["latin-1", "gbk", "invalid"])
def test_a_1302_whose_body_is_not_utf8_is_read_for_its_code(odd: bytes) -> None:
    body = b'{"error":{"code":"1302","message":"High concurrency ' + odd + b'"}}'
    error = classify_error(429, body, now=NOW)
    assert error is not None and (error.code, error.action) == ("1302", Action.CONCURRENCY)
