"""z.ai's prompt quota, as public monitors read it (undocumented; unchecked here on the real z.ai).

A Coding Plan account may send about 120 / 600 / 2,400 prompts (Lite / Pro / Max) per 5-hour window, the
GLM-5 family counting about 3 each; once spent, every request is refused 1308 until the window resets. The
account's share of the window used is served at `QUOTA_PATH` (header `Authorization: <key>`) as
`{"code":200,"success":true,"data":{"limits":[{"type":"TOKENS_LIMIT","unit":3,"number":5,"percentage":18,
"nextResetTime":<unix ms>}, {"type":"TIME_LIMIT", ...}]}}`: `TOKENS_LIMIT` with unit 3 and number 5 is the
5-hour window, `TIME_LIMIT` the month's tool calls.
"""

from typing import Final

QUOTA_PATH: Final = "/api/monitor/usage/quota/limit"
WINDOW_SECONDS: Final = 5 * 3600.0
WINDOW_TYPE: Final = "TOKENS_LIMIT"
WINDOW_UNIT: Final = (3, 5)  # (unit, number) of the 5-hour window's entry
SPENT_CODE: Final = "1308"  # "Usage limit reached for 5 hour. Your limit will reset at ..."
