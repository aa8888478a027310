"""The simulator's messages for z.ai's 2026 codes read as z.ai's do: each quota window names its reset."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from chaos_mode.zai.errors import QUOTA_WINDOW_CODES, Action, classify_error
from chaos_mode_tools.sim.errors import chinese_window_message, default_message, error_body

NOW = dt.datetime(2026, 12, 4, 12, 0, 0, tzinfo=dt.UTC)
WINDOW = {"1308": 5, "1310": 168, "1316": 5, "1317": 168, "1318": 5, "1319": 168, "1320": 5, "1321": 168}


def classify(code: str, message: str) -> tuple[Action, float | None]:
    body = json.dumps(error_body(429, message, code=code, request_id="r"))
    error = classify_error(429, body, now=NOW.timestamp())
    assert error is not None and error.code == code
    return error.action, error.reset_at


@pytest.mark.parametrize("code", sorted(QUOTA_WINDOW_CODES))
def test_every_quota_window_pauses_the_account_until_the_reset_it_names(code: str) -> None:
    action, reset_at = classify(code, default_message(code, NOW))
    assert action is Action.ACCOUNT_PAUSE
    assert reset_at == (NOW + dt.timedelta(hours=WINDOW[code])).timestamp()


def test_the_chinese_wording_names_its_reset_in_beijing_time() -> None:
    reset = NOW + dt.timedelta(days=6)
    message = chinese_window_message("1310", reset)
    assert "将在" in message and message.endswith("重置。]")
    assert classify("1310", message) == (Action.ACCOUNT_PAUSE, reset.timestamp())


@pytest.mark.parametrize("code", ["1311", "1313", "1314", "1315"])
def test_the_other_2026_codes_have_zai_shaped_messages(code: str) -> None:
    message = default_message(code, NOW)
    assert message.startswith(f"[{code}][") and "Simulated" not in message
    assert classify(code, message)[0] in {Action.ACCOUNT_PAUSE, Action.OUT_OF_ROTATION}
