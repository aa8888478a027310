"""What the proxy assumes of z.ai and has not checked on the real z.ai, each named once.

Each constant is one assumption: its value is the reading the proxy takes, its docstring what is assumed,
what rests on it and how it could be checked on the real z.ai (docs/zai.md has them as a table). Every
branch that rests on one names it: it uses the constant, or a comment names it in full (`zai.assumptions.`
and the name; tests/test_lint.py keeps the names true and each one referred to outside `zai/`). How long
z.ai takes is `zai.timing`'s; the quota's shape is `zai.quota`'s.
"""

from typing import Final

MAY_QUEUE: Final = True
"""z.ai may hold a request over a limit (its head not sent) until a slot frees, instead of refusing it 1302.
Rests on it: the stall (a head held far longer than its model's quickest counts as a refusal), no attempt left
for 60 s once a held head is served after all, a probe z.ai holds given up at its stall or seated in the
first slot that frees, a clean answer after a stall counted as no evidence of the level it came at. Check:
hold a model full with long streams, send one more: a head that comes when a slot frees, not a 1302 in 3-6
s."""

HEAD_MAY_WAIT_FOR_FIRST_TOKEN: Final = True
"""An accepted stream's head may come only with its first token (or at once: either is read). Rests on it:
the patience read from recent heads, not from a fixed time, and the stall from each model's quickest heads at
its lowest concurrency (`forwarding.head_baseline`: a head held in z.ai's queue looks like a slow one); an
attempt left that z.ai accepted after all is closed at its head, unread; a clean answer counted at what z.ai
serves at once or served when it came, whichever is more. Check: `chaos-mode check`
(`headsWithFirstToken`)."""

HEAD_GROWS_WITH_PROMPT: Final = True
"""When the head comes with the first token, its delay grows with the prompt's size about linearly (the
prefill). Rests on it: the patience and the stall stretched by the recent heads' seconds per byte
(`forwarding.head_patience`). Check: time the heads of prompts from 1 kB to 200 kB on an idle model."""

REFUSED_HOLDS_NO_SLOT: Final = True
"""z.ai holds no slot for a request it is refusing, in the seconds before its 1302. Rests on it: an attempt
with no head within its patience is overdue and rides above its model's and the account's limits, its place
going to the next request; the level of a refusal counts only what z.ai accepted. Check: the three-request
check of docs/learning.md ("Lending an overdue attempt's place"): hold a model full, send one more
(refused), and within its 3-6 s free a slot and send another: answered if the refused one held nothing. The
pool checks it on its own traffic (`routing.lending`: places lent refused far more than the others turn
lending off, fleet-wide); `learning.lendOverdue: false` never lends. The simulator's `refusedHolds` plays the
other reading."""

DROPS_ON_CLOSE: Final = True
"""z.ai drops a request it holds (queued, or refusing while it holds its slot) when the request's connection
closes, and serves nothing for it. Rests on it: a left attempt held past its stall, once z.ai is seen to
queue, is closed so that its request, gone on elsewhere, is not served twice, and once the check of lending
found z.ai holding refused requests, so that its slot frees before its 1302; a probe held past its stall is
closed and its slot given back. Check: with a model held full and z.ai queuing, close one more held request,
free a slot: the next request is served at once, and the quota counts no answer for the closed one; for a
refused one, the three-request check of docs/learning.md with B closed early. The pool checks the second on
its own traffic (`routing.lending`: the places freed refused far more than the others end letting go). The
simulator's `refusedHoldsClosed` plays the other reading."""

ALIAS_SHARES_COUNTER: Final = True
"""A name z.ai serves as another model (an alias) counts on its target's concurrency counter (the safe
reading). Rests on it: the pool counts, sends and learns by the served model; a catalog model served as
another is folded into it. Check: `chaos-mode check` (`aliasCounters`)."""

ANSWERS_NAME_SERVED_MODEL: Final = True
"""Every answer names the model that served it (`model` of the body, of `message_start`, of every OpenAI
chunk), at both doors. Rests on it: aliases learned from answers, and the pool's counting by what serves.
Check: `chaos-mode check` at both doors (`--door openai`): a name they disagree on is named as asked at
one."""

FAMILY_TIERS: Final = True
"""z.ai's model names follow family rules: `*-flash`, `*-flashx` light, `glm-N.Mv*` light and vision, the
rest of `glm-5*` heavy (`zai.catalog.family_tier`). Rests on it: the tier of a served or listed model the
catalog lacks, so which floors it serves. Check: z.ai's models list and pricing pages for each new name."""

LISTING_IS_PARTIAL: Final = True
"""z.ai's models endpoint lists some of the models it serves, not all: the one listing seen (2026-09-16, on
both hosts) left out glm-4.6v, served then. Rests on it: a listed model the catalog lacks is offered, a
catalog model drops out of rotation only once a listing that held it no longer does, never for being left
out from the first. Check: z.ai's models list against `chaos-mode check`'s per-name requests."""

NOISE: Final = 0.05
"""z.ai's random 1302s (a refusal that works again a few seconds later) stay under this share of requests,
at any level. Rests on it: when a level's refusals are a limit rather than noise (`learning.evidence`).
Check: a few hundred requests well under every limit, off-peak and on: the share refused 1302."""

REFUSALS_RISE_WITH_LOAD: Final = True
"""z.ai refuses a request with a probability that depends on what it serves on the limit (a model's, the
account's) when the request comes, never falls as that grows, and does not depend on history (a burst).
Rests on it: the estimator (a refusal at n says every level above is refused, a clean answer that every
level under is served; `learning.evidence`), probes paused after any refusal of their limit. Check: the
share refused at each concurrency, stepped up and down, on a model with a soft band."""

COUNTS_PER_MODEL_AND_ACCOUNT: Final = True
"""z.ai counts concurrency per model and per account, every client and key of the account on the same
counters: a model at its limit refuses whatever the account serves, a full account refuses every model
alike. Rests on it: whose a 1302 is (`learning.limits`), the account's limit, other clients' slots read as
a lower limit. Check: hold one model full and send to another; hold the account full from a second key."""

LIMITS_MOVE_TOGETHER: Final = True
"""z.ai moves its limits plan-wide (off-peak up, peak down), over minutes or more. Rests on it: a change
detected on one limit starts every limit's probe wait over (`learning.explore`), and evidence fades over
`learning.driftSeconds`. Check: probe every model's limit
every few minutes over a day; whether their moves coincide."""

ARRIVAL_ORDER_SECONDS: Final = 0.02
"""z.ai judges a request by what it serves as it reads it, and requests written this far apart or more reach
it in the order written (closer ones in any). Rests on it: which slots a verdict's level counts
(`routing.arrivals`). Check: bursts written at set gaps to a model at its limit: which of them it refuses."""

FILTER_REFUSES_EVERY_MODEL: Final = True
"""A refusal with a load or content code (1303, 1305, 1312, or one z.ai's table lacks) may be the request's
own: z.ai's content filter answers 1305 on every model, at once, while they serve others. Rests on it: such
a refusal judged by `request.refusals` (a second model's same code makes it the request's: nothing cooled).
Check: a filtered phrase in a system prompt, sent to two idle models: 1305 from both, at once."""
