"""Our own 429 speaks Claude Code's language: stop until a quota window's reset, retry anything else."""

from __future__ import annotations

import json

import pytest

from chaos_mode.doors.door import Door
from chaos_mode.request.rate_limited import rate_limited
from support.pool_rig import WALL, Rig, error, routing

UNIFIED = ("anthropic-ratelimit-unified-status", "anthropic-ratelimit-unified-reset")
# 2026-03-01 23:00 Beijing; the week resets 4 days and 2 hours later.
WEEKLY = "[1310][Weekly/Monthly Limit Exhausted. Your limit will reset at 2026-03-06 01:00:00]"
WEEK_SECONDS = 4 * 86_400 + 7200
FIVE_HOURS = "[1308][Usage limit reached for 5 hour. Your limit will reset at 2026-03-02 01:00:00]"


def reply(rig: Rig, door: Door, upstream: list[tuple[str, str]] | None = None) -> dict[str, str]:
    answer, _ = rate_limited(rig.pool, "heavy", ["h"], upstream, WALL, door=door)
    assert answer.status == 429
    assert json.loads(answer.body)["error"]["type"] == "rate_limit_error"
    return {k.lower(): v for k, v in answer.headers}


@pytest.mark.parametrize(
    ("code", "message", "seconds"),
    [
        ("1310", WEEKLY, WEEK_SECONDS),
        ("1308", FIVE_HOURS, 7200),
        ("1317", "[1317][reset at 2026-03-02 00:00:00]", 3600),
    ],
)
def test_a_quota_window_tells_claude_code_to_stop_until_the_reset(
    code: str, message: str, seconds: int
) -> None:
    rig = Rig()
    rig.pool.error("h", error(code, message))
    headers = reply(rig, "anthropic")
    assert headers["retry-after"] == str(seconds)  # the real wait, not capped at 60 s
    assert headers["x-should-retry"] == "false"  # the SDKs would sleep it out
    assert headers["anthropic-ratelimit-unified-status"] == "rejected"
    assert headers["anthropic-ratelimit-unified-reset"] == str(int(WALL) + seconds)


def test_at_the_openai_door_a_quota_window_says_only_retry_after() -> None:
    rig = Rig()
    rig.pool.error("h", error("1310", WEEKLY))
    headers = reply(rig, "openai", upstream=[("anthropic-ratelimit-unified-status", "rejected")])
    assert headers["retry-after"] == str(WEEK_SECONDS) and headers["x-should-retry"] == "false"
    assert not [name for name in headers if name.startswith("anthropic-")], headers


@pytest.mark.parametrize("door", ["anthropic", "openai"])
@pytest.mark.parametrize(
    "cause",
    ["queue", "cooldown", "fair use", "enterprise"],
)
def test_a_transient_429_says_retry_after_within_a_minute_only(door: Door, cause: str) -> None:
    rig = Rig()
    match cause:
        case "cooldown":
            rig.pool.error("h", error("1305"), retry_after=30.0)
        case "fair use":
            rig.pool.error("h", error("1313", "[1313][Fair Usage Policy]"), retry_after=600.0)
        case "enterprise":
            rig.pool.error("h", error("1314", "[1314][enterprise limit]"))  # accountPauseSeconds
    headers = reply(rig, door)
    assert 1 <= int(headers["retry-after"]) <= 60, headers
    assert not set(UNIFIED) & set(headers) and "x-should-retry" not in headers, headers


def test_z_ai_rate_limit_headers_are_kept_beside_ours_at_the_anthropic_door_not_doubled() -> None:
    rig = Rig()
    rig.pool.error("h", error("1310", WEEKLY))
    upstream = [("anthropic-ratelimit-unified-status", "rejected"), ("anthropic-ratelimit-tokens-limit", "9")]
    answer, _ = rate_limited(rig.pool, "heavy", ["h"], upstream, WALL, door="anthropic")
    names = [k.lower() for k, _ in answer.headers]
    assert names.count("anthropic-ratelimit-unified-status") == 1
    assert "anthropic-ratelimit-tokens-limit" in names


@pytest.mark.parametrize("queue", [True, False])
def test_a_429_with_no_model_free_says_whether_it_waited(queue: bool) -> None:
    rig = Rig(routing(queue={"enabled": queue}))
    _, why = rate_limited(rig.pool, "heavy", [], None, WALL)
    assert why.endswith("within the queue timeout" if queue else "(the queue is off)")
