"""What the proxies of a fleet write to and read from Redis: the Lua scripts and the notices' format.

The protocol between proxies: keys (with a prefix, `chaos:` by default)
`slots:{model}` and `account` (sorted sets of lease ids scored by expiry, ms on Redis's clock), `fleet`
(proxy ids scored by when each was last seen), `seq` (the change number), `limits` (a hash of learned
limits), `probe:{model or *account}` (the right to probe that limit, below); channels `freed:{proxy id}`
(the leases the others take and give back), `freed` (what every proxy hears: a request began to wait, a
probe was answered cleanly, a proxy left) and `blocks` (cooldowns and the like, JSON). The scripts are
the files of `lua/`; the rest is pure text and parsing, and `redis_store` runs it.

**The right to probe a limit is one for the fleet.** `probe:{limit}` is a hash: `lease` (the probe's
lease id, so its proxy's), `free_at` (ms, Redis's clock) and `refused` (the limit's probes refused in a
row). A probe's slot is confirmed by CONFIRM only with the right: held by another proxy until `free_at`,
the slot is refused (nothing is taken) and the answer says for how long; taken, `free_at` is the probe's
interval from now. Its verdict (PROBE_ANSWERED, from the proxy whose lease it holds): answered cleanly,
the key is deleted and every proxy told (`!`), so the next probe anywhere may follow at once; refused or
given up, `free_at` is the prober's wait and `refused` its count. The key outlives `free_at` by
`PROBE_MEMORY_MS`, keeping the count.

**A notice says what z.ai serves of its sender's slots** (`model=n,...`, the slots z.ai answered cleanly
and still streams; the one a lease is taken for only from its clean answer's notice): a clean answer
elsewhere counts them with its own, not the slots z.ai has not answered yet.
**z.ai's verdicts on a request are told as they come**, in a notice `=` on `freed` naming its model
(`c7:20`, `r8:22m~3010`, `s9:26a~250`: clean, refused, stalled, at the levels its proxy counted on the
model and the account, a model's or the account's probe, and for a refusal or a stall the ms since its
request was sent), which every other proxy counts as its own, as sent then; a notice of any kind may
carry them. The learned limits' hash is read by a proxy joining the fleet, and written by all. A notice
has one layout (`parse_notice`); one in any other is ignored, so proxies of different versions follow
each other only at each renewal: upgrade together.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from importlib import resources
from typing import Final, Literal

from chaos_mode.fleet.slots import Notice
from chaos_mode.learning.limits import Probe
from chaos_mode.routing.slots import Seen

PROBE_MEMORY_MS: Final = 600_000  # a limit's refused probes are forgotten this long after its right is free


def _lua(*names: str) -> str:
    """The script made of `lua/{name}.lua` for each name, in order (`now` and `tell` define what the
    others use); each file says its KEYS, ARGV and what it returns."""
    folder = resources.files("chaos_mode.fleet").joinpath("lua")
    return "".join(folder.joinpath(f"{name}.lua").read_text(encoding="utf-8") for name in names)


CONFIRM: Final = _lua("now", "tell", "confirm")
PROBE_ANSWERED: Final = _lua("now", "probe_answered")
RELEASE: Final = _lua("now", "tell", "release")
TICK: Final = _lua("now", "tick")
LEAVE: Final = _lua("leave")
PUSH_LIMITS: Final = _lua("push_limits")


NOBODY_NAMED: Final = "-"  # `to` on the channel when a notice names no proxy (no proxy id is "-")


def notice_tail(notice: Notice) -> str:
    """A notice as the channel carries it, after its change number and op (the scripts add those)."""
    waited = round(notice.waited * 1000)
    to = notice.to or NOBODY_NAMED
    serving = _counts_tail(notice.serving)
    seen = "|".join(_seen_tail(s) for s in notice.seen if s.kind == "clean" or s.age is not None)
    return (
        f"{notice.proxy} {notice.model} {notice.waiting} {notice.level} {waited} {to} "
        f"{serving} {seen or NOBODY_NAMED} {_counts_tail(notice.overdue)}"
    )


def _seen_tail(seen: Seen) -> str:
    """A verdict as `c7:20`, `r8:22m~250`: kind, levels, probe, and for a refusal or a stall the ms since
    its request was sent (`notice_tail` says no refusal or stall whose age is not known)."""
    age = "" if seen.kind == "clean" or seen.age is None else f"~{round(max(seen.age, 0.0) * 1000)}"
    return f"{seen.kind[0]}{seen.level}:{seen.total}{_PROBES.get(seen.probe, '')}{age}"


def _counts_tail(counts: Mapping[str, int] | None) -> str:
    """Counts per model as `model=n,...` (`-` for none)."""
    return ",".join(f"{model}={n}" for model, n in (counts or {}).items() if _plain(model)) or NOBODY_NAMED


def _counts(text: str) -> dict[str, int]:
    counts = {}
    if text != NOBODY_NAMED:
        for pair in text.split(","):
            model, _, count = pair.partition("=")
            counts[model] = int(count)
    return counts


def _seen(text: str) -> tuple[Seen, ...]:
    seen = []
    if text != NOBODY_NAMED:
        for item in text.split("|"):
            match = _SEEN.fullmatch(item)
            if match is None:
                raise ValueError(item)
            kind, level, total, probe, age = match.groups()
            if (kind == "c") != (age is None):  # a clean answer has no age, a refusal or a stall has one
                raise ValueError(item)
            seconds = None if age is None else int(age) / 1000
            seen.append(Seen(_KINDS[kind], int(level), int(total), _PROBE_OF.get(probe), seconds))
    return tuple(seen)


def parse_notice(text: str) -> Notice | None:
    """`seq op proxy model waiting level waited_ms to serving seen overdue` from the channel, or `seq * proxy`
    (it left): `serving` and `overdue` as `model=n,...`; `seen` as `c7:20|s8:22m~250|r3:9a~3010...`: clean,
    stall, refused at a level on its model and on the account, a model's or the account's probe, and for a
    stall or a refusal the ms since its request was sent; `-` for none. None for anything else."""
    parts = text.split(" ")
    try:
        if len(parts) == 3 and parts[1] == "*":
            return Notice(int(parts[0]), parts[1], parts[2])
        if len(parts) != 11:
            return None
        seq, op, proxy, model, waiting, level, waited, to, serving, seen, overdue = parts
        return Notice(
            int(seq),
            op,
            proxy,
            model,
            int(waiting),
            int(level),
            int(waited) / 1000,
            "" if to == NOBODY_NAMED else to,
            _counts(serving),
            _seen(seen),
            _counts(overdue),
        )
    except ValueError:
        return None


_SEEN: Final = re.compile(r"([crs])(\d+):(\d+)([ma]?)(?:~(\d+))?")
_KINDS: Final[dict[str, Literal["clean", "refused", "stall"]]] = {"c": "clean", "r": "refused", "s": "stall"}
_PROBES: Final[dict[Probe | None, str]] = {"model": "m", "account": "a"}
_PROBE_OF: Final[dict[str, Probe]] = {"m": "model", "a": "account"}


def _plain(model: str) -> bool:
    """Whether a model's name can travel in a notice's `serving` (one that cannot is not said: counted as
    not served by the others, which only lowers what their clean answers say)."""
    return bool(model) and not any(c in model for c in " ,=")
