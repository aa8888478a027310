"""How long z.ai takes, stated once: the rules that wait on z.ai read these.

Measured by others (the Chaos Mode design's sources: "api.z.ai takes 3-6s to return 429"); unchecked here
on the real z.ai. Whether an accepted stream's head comes at once or with the first token is not known: the
rules assume either (`zai.assumptions.HEAD_MAY_WAIT_FOR_FIRST_TOKEN`; an accepted stream's head is much faster
than a refusal, which is what hedging reads).
"""

from typing import Final

REFUSAL_SECONDS: Final = (3.0, 6.0)  # a refusal (429, 1302...) comes this long after the request was sent
# The earliest a refusal comes: an attempt unanswered this long counts as refused for the other limits'
# probing turns (learning), as if it had waited for its refusal.
EARLIEST_REFUSAL_SECONDS: Final = REFUSAL_SECONDS[0]
# An attempt left unanswered (its request went on elsewhere) is awaited this long for z.ai's verdict, a
# margin past the slowest refusal; then it is closed and its slot given back with no verdict (a hung
# upstream, say).
LEFT_VERDICT_SECONDS: Final = REFUSAL_SECONDS[1] + 2.0
