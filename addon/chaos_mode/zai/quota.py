"""z.ai's quota, as public monitors read it (undocumented; unchecked here on the real z.ai).

A Coding Plan account may send about 120 / 600 / 2,400 prompts (Lite / Pro / Max) per 5-hour window, the
GLM-5 family counting about 3 each; once spent, every request is refused 1308 until the window resets. The
account's share of the window used is served at `QUOTA_PATH` (header `Authorization: <key>`) as
`{"code":200,"success":true,"data":{"limits":[{"type":"TOKENS_LIMIT","unit":3,"number":5,"percentage":18,
"nextResetTime":<unix ms>}, {"type":"TIME_LIMIT", ...}]}}`: `TOKENS_LIMIT` with unit 3 and number 5 is the
5-hour window, `TIME_LIMIT` the month's tool calls.

Credit plans (since August 2026) answer rows of type `CREDIT_LIMIT` instead, one per window: unit 3 /
number 5 the 5-hour window, unit 6 / number 1 the weekly one, each with `usage` (the cap in credits),
`currentValue` (spent; the week's may overshoot its cap), `remaining`, `percentage` and `nextResetTime` (a
5-hour window not started yet, which starts at first use, has none). Caps reported: Lite 2,000 / 10,000,
Pro 12,000 / 60,000, Max 28,000 / 140,000 credits. The windows are independent: a spent week refuses every
request 1310 (its reset days away) even after the 5-hour window reset. Which windows a plan has depends on
the plan (a 5-hour row alone, a weekly row alone, or both). The `unit` codes are read as hours (3) and
weeks (6); what else z.ai may send is unknown.

An answer costs credits by its usage and model: GLM-5.3 input 6.9, cached input 1.7, output 24 per unit of
tokens (one source, unverified; `GLM_5_3_CREDITS`). **Assumed**: the unit is a thousand tokens
(`CREDIT_UNIT_TOKENS`), so that a Lite 5-hour window holds a few hundred agent answers; z.ai does not say.
The other models' weights are not published.

z.ai's prompt cache is per model: a conversation's prompt read on a model is cached there for a while
(**assumed** `PROMPT_CACHE_SECONDS`, five minutes, as other providers keep theirs; unchecked on z.ai), and
a conversation moved to another model reads its whole prompt there at the full input weight.
"""

from typing import Final

QUOTA_PATH: Final = "/api/monitor/usage/quota/limit"
WINDOW_SECONDS: Final = 5 * 3600.0
WINDOW_TYPES: Final = ("TOKENS_LIMIT", "CREDIT_LIMIT")  # the rows of a window: prompt plans, credit plans
UNITS: Final = {3: (3600.0, "h"), 6: (7 * 86400.0, "w")}  # a row's `unit`: seconds of one, name's letter
MAX_NUMBER: Final = 10_000  # a row's `number` beyond this is no window known (nor a float's seconds)
FIVE_HOURS: Final = "5h"  # the name of the 5-hour window (unit 3, number 5)
WEEK: Final = "1w"  # the name of the weekly window (unit 6, number 1)
WEEK_SECONDS: Final = 7 * 86400.0
SPENT_CODE: Final = "1308"  # "Usage limit reached for 5 hour. Your limit will reset at ..."
CREDIT_UNIT_TOKENS: Final = 1000.0  # the tokens credit weights are per (assumed)
GLM_5_3_CREDITS: Final = (6.9, 1.7, 24.0)  # credits per unit of input, cached input, output (unverified)
PROMPT_CACHE_SECONDS: Final = 300.0  # how long z.ai keeps a prompt warm on a model (assumed)
WEEK_SPENT_CODE: Final = "1310"  # "...您的限额将在 2026-08-05 15:16:26 重置。" (weekly/monthly)


def window_of(unit: int, number: int) -> tuple[str, float] | None:
    """(name, seconds) of the window a row's `unit` and `number` say ("5h", "1w"); None: not known."""
    known = UNITS.get(unit)
    if known is None or not 0 < number <= MAX_NUMBER:
        return None
    seconds, letter = known
    return f"{number}{letter}", seconds * number
