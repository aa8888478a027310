"""The simulator's bookkeeping: per-model and account concurrency slots (hard, or soft with a band above the
limit), slots held by another client, limit changes, counters, queued and random faults, requests held
inside z.ai over the limit (stalls), and the random draws, each repeatable from `fault_seed`. Slots count
on the served model: a name z.ai routes to another model (an alias) counts on its target's, or, with
`alias_counters` "own", on a counter of its own that has its target's limit."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from chaos_mode_tools.sim.bands import refusal_probability
from chaos_mode_tools.sim.catalog import AliasCounters
from chaos_mode_tools.sim.errors import default_message
from chaos_mode_tools.sim.lengths import Lengths
from chaos_mode_tools.sim.limits import LimitChange
from chaos_mode_tools.sim.stalls import Stalls, Waiter

Verdict = Literal["ok", "model", "account"]
OverLimit = Literal["refuse", "queue"]
# Why a request was refused: over the model's or the account's limit, by chance in a soft band (the
# model's or the account's), at random within every limit, or after waiting inside z.ai too long.
Reason = Literal["model", "account", "band", "accountBand", "random", "timeout"]
Outcome = Literal["served", "cut", "hang", "refused", "queued"]

# Faults that are not z.ai error codes, usable wherever a code is (random rates, queued faults):
CUT = "cut"  # the answer starts, then the connection closes in the middle of it
HANG = "hang"  # the request is never answered (until the client leaves or the simulator stops)
BROKEN_ANSWERS = (CUT, HANG)


@dataclass
class ModelCounters:
    limit: int
    held: int = 0  # by another client of the account: counts against this limit and the account's
    in_flight: int = 0
    peak: int = 0
    served: int = 0
    rejected: dict[str, int] = field(default_factory=dict)


@dataclass
class Fault:
    """The next ``count`` requests for ``model`` ("*" = any) fail with this status and code."""

    model: str
    code: str
    status: int = 429
    count: int = 1
    message: str | None = None
    retry_after: float | None = None
    delay_ms: float = 0.0
    error_type: str | None = None

    @classmethod
    def from_json(cls, data: Any) -> Fault:
        """Parse the ``POST /sim/faults`` body (one object); raise ValueError on bad input."""
        if not isinstance(data, dict):
            raise ValueError("a fault must be a JSON object")
        allowed = {"model", "code", "status", "count", "message", "retryAfter", "delayMs", "type"}
        unknown = set(data) - allowed
        if unknown:
            raise ValueError(f"unknown fault keys: {', '.join(sorted(unknown))}")
        model = data.get("model", "*")
        code = data.get("code")
        if not isinstance(model, str) or not model:
            raise ValueError("model: expected a non-empty string")
        if isinstance(code, bool) or not isinstance(code, str | int) or str(code) == "":
            raise ValueError("code: required, a string or an integer")
        status = _number(data, "status", 429, int)
        count = _number(data, "count", 1, int)
        if not 100 <= status <= 599:
            raise ValueError(f"status: expected an HTTP status, got {status}")
        if count < 1:
            raise ValueError(f"count: must be >= 1, got {count}")
        message = data.get("message")
        if message is not None and not isinstance(message, str):
            raise ValueError("message: expected a string")
        err_type = data.get("type")
        if err_type is not None and not isinstance(err_type, str):
            raise ValueError("type: expected a string")
        retry_after = data.get("retryAfter")
        if retry_after is not None:
            retry_after = _number(data, "retryAfter", 0.0, float)
        delay_ms = _number(data, "delayMs", 0.0, float)
        if delay_ms < 0 or (retry_after is not None and retry_after < 0):
            raise ValueError("delayMs and retryAfter must be >= 0")
        return cls(
            model=model,
            code=str(code),
            status=status,
            count=count,
            message=message,
            retry_after=retry_after,
            delay_ms=delay_ms,
            error_type=err_type,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "code": self.code,
            "status": self.status,
            "count": self.count,
            "message": self.message if self.message is not None else default_message(self.code),
            "retryAfter": self.retry_after,
            "delayMs": self.delay_ms,
            "type": self.error_type,
        }


@dataclass(frozen=True, slots=True)
class Admission:
    """What z.ai does with a request: `served` (a slot taken), `cut` (a slot taken; the answer will break
    off), `hang` (no slot, no answer), `refused` (with `code`, for `reason`), `queued` (`waiter` waits
    inside z.ai for a slot). A refused one `holds` a slot of its model and of the account until its 1302 is
    sent, with `refused_holds`: the caller releases it then."""

    outcome: Outcome
    code: str | None = None
    reason: Reason | None = None
    waiter: Waiter | None = None
    holds: bool = False  # a refused request that holds a slot until its refusal is sent (`refused_holds`)


class SimState:
    """Counters and slots. Every method is synchronous: check-and-take cannot interleave on one loop.

    Admission of a request (`admit`), in order: over the top of its model's limit or of the account's
    (limit + band) it is queued or refused 1302 (`over_limit`; a model of `queue_models` queues over its
    own limit whatever it says); in a soft band it is refused 1302 by chance
    (`chaos_mode_tools.sim.bands`); within every limit a random fault may still refuse or break it
    (`fault_rates`); else it takes a slot. A queued request gets a slot within the limits (not in a band)
    as soon as one frees, first come first served. With `refused_holds`, a request refused 1302 takes a slot
    of its model and of the account all the same (not counted served), which its caller gives back when the
    1302 is sent (a queue with a timeout, as z.ai may be). Every draw comes from a RNG of its own, seeded from
    `fault_seed`, so one shape turned on does not change another's draws.
    """

    def __init__(
        self,
        limits: Mapping[str, int],
        account_limit: int | None,
        hold: Mapping[str, int] | None = None,
        *,
        fault_rates: Mapping[str, float] | None = None,
        fault_seed: int = 0,
        bands: Mapping[str, int] | None = None,
        account_band: int = 0,
        band_shape: str = "linear",
        over_limit: OverLimit = "refuse",
        queue_models: Iterable[str] = (),
        lengths: Lengths | None = None,
        clock: Callable[[], float] = time.monotonic,
        aliases: Mapping[str, str] | None = None,
        alias_counters: AliasCounters = "shared",
        refused_holds: bool = False,
    ) -> None:
        """``account_limit`` None: no account limit of its own (it allows what the models allow: the sum of
        their limits, whatever they become, reported as its limit).
        ``clock``: seconds, for how long requests wait inside z.ai.
        ``aliases``: requested name -> served model (one of ``limits``); with ``alias_counters`` "own" each
        alias is counted on a counter of its own (in ``models``), whose limit follows its target's."""
        self._initial = (dict(limits), account_limit, dict(hold or {}))
        self.aliases = dict(aliases or {})
        self.own_counters = dict(self.aliases) if alias_counters == "own" else {}
        self.models: dict[str, ModelCounters] = {m: ModelCounters(limit=n) for m, n in limits.items()}
        for alias, served in self.own_counters.items():
            self.models[alias] = ModelCounters(limit=limits[served])
        self.account_cap = account_limit
        self.account_in_flight = 0
        self.account_peak = 0
        self.account_rejected = 0
        self.requests = 0
        self.aborted = 0
        self.unknown_models: dict[str, int] = {}
        self.retired_models: dict[str, int] = {}  # requests refused 1311, by the name asked for
        self.aliased: dict[str, int] = {}  # requests for an alias (past the catalog's checks), by name
        self.broken: dict[str, int] = {}  # answers cut or never given, by BROKEN_ANSWERS kind
        self.reasons: dict[str, int] = {}  # refusals by Reason
        self.filtered: dict[str, int] = {}  # requests the content filter refused, by model
        self.faults: list[Fault] = []
        self.fault_rates = dict(fault_rates or {})
        self.bands = dict(bands or {})
        self.account_band = account_band
        self.band_shape = band_shape
        self.over_limit: OverLimit = over_limit
        self.queue_models = frozenset(queue_models)  # they queue over their own limit whatever over_limit
        self.refused_holds = refused_holds
        self.lengths = lengths if lengths is not None else Lengths()
        self.stalls = Stalls()
        self._clock = clock
        self._seed = fault_seed
        self._rng = random.Random()  # random faults
        self._band_rng = random.Random()
        self._lengths_rng = random.Random()
        self._reseed()
        self.limit_changes: list[dict[str, Any]] = []
        self.restore_limits()

    def _reseed(self) -> None:
        self._rng.seed(self._seed)
        self._band_rng.seed(f"{self._seed}/bands")
        self._lengths_rng.seed(f"{self._seed}/lengths")

    def served(self, name: str) -> str:
        """The model that serves a request for ``name`` (itself unless it is an alias)."""
        return self.aliases.get(name, name)

    def counter(self, name: str) -> str:
        """Whose slots a request for ``name`` counts on: the served model's, or the alias's own."""
        return name if name in self.own_counters else self.served(name)

    def _served_limits(self) -> dict[str, ModelCounters]:
        return {m: c for m, c in self.models.items() if m not in self.own_counters}

    @property
    def account_limit(self) -> int:
        """The account limit in force: its own, or the sum of the (served) model limits."""
        if self.account_cap is not None:
            return self.account_cap
        return sum(c.limit for c in self._served_limits().values())

    @property
    def account_held(self) -> int:
        return sum(c.held for c in self.models.values())

    # -- admission ---------------------------------------------------------------------------------------

    def over(self, model: str) -> Literal["model", "account"] | None:
        """Which limit a request for ``model`` would go over the top of (limit + band), if any."""
        counters = self.models[model]
        if counters.in_flight + counters.held >= counters.limit + self._band(model):
            return "model"
        # With no limit of its own the account refuses nothing the models would not, even while a model
        # runs over a limit just lowered (its requests of before end normally, and fill no other model's).
        cap = self.account_cap
        if cap is not None and self.account_in_flight + self.account_held >= cap + self.account_band:
            return "account"
        return None

    def try_acquire(self, model: str) -> Verdict:
        """Take a slot of ``model`` and of the account, or say which limit is full (no draw, no queue)."""
        verdict = self.over(model)
        if verdict is not None:
            return verdict
        self._take(model)
        return "ok"

    def admit(
        self, model: str, *, broken: str | None = None, wake: Callable[[], None] | None = None
    ) -> Admission:
        """Decide a request for ``model`` (see the class). ``broken``: a queued fault (cut or hang) that
        stands in for the random draw; ``wake``: called once a queued request got its slot (without it, a
        request over the limit is refused even when z.ai queues)."""
        admission = self._decide(model, broken, wake)
        if self.refused_holds and admission.outcome == "refused" and admission.code == "1302":
            self._take(model, served=False)
            return Admission("refused", admission.code, admission.reason, holds=True)
        return admission

    def _decide(self, model: str, broken: str | None, wake: Callable[[], None] | None) -> Admission:
        verdict = self.over(model)
        if verdict is not None:
            queues = self.over_limit == "queue" or (
                verdict == "model" and self.served(model) in self.queue_models
            )
            if queues and wake is not None:
                waiter = Waiter(model, self._clock(), wake)
                self.stalls.add(waiter)
                return Admission("queued", waiter=waiter)
            return self.refuse(model, "1302", verdict)
        band = self._band_refusal(model)
        if band is not None:
            return self.refuse(model, "1302", band)
        code = broken or self.random_fault()  # z.ai refuses a few requests within every limit
        if code == HANG:
            return Admission("hang")
        if code is not None and code != CUT:
            return self.refuse(model, code, "random")
        self._take(model)
        return Admission("cut" if code == CUT else "served")

    def _band_refusal(self, model: str) -> Literal["band", "accountBand"] | None:
        counters = self.models[model]
        concurrency = counters.in_flight + counters.held + 1
        if self._by_chance(concurrency, counters.limit, self._band(model)):
            return "band"
        concurrency = self.account_in_flight + self.account_held + 1
        if self.account_cap is not None and self._by_chance(concurrency, self.account_cap, self.account_band):
            return "accountBand"
        return None

    def _band(self, model: str) -> int:
        return self.bands.get(self.served(model), 0)

    def _by_chance(self, concurrency: int, limit: int, width: int) -> bool:
        chance = refusal_probability(concurrency, limit, width, self.band_shape)
        return chance > 0 and self._band_rng.random() < chance

    def refuse(self, model: str, code: str, reason: Reason) -> Admission:
        """Count a refusal of a request for ``model`` with ``code``."""
        self.count_rejection(model, code)
        self.reasons[reason] = self.reasons.get(reason, 0) + 1
        if reason == "account":
            self.account_rejected += 1
        return Admission("refused", code, reason)

    def time_out(self, waiter: Waiter) -> Admission:
        """A queued request waited its longest (and got no slot): out of the queue, refused 1302."""
        self.stalls.leave(waiter, self._clock(), "timeout")
        return self.refuse(waiter.model, "1302", "timeout")

    def leave(self, waiter: Waiter) -> None:
        """A queued request's client went away: out of the queue (nothing if it got its slot already)."""
        self.stalls.leave(waiter, self._clock(), "left")

    def _take(self, model: str, *, served: bool = True) -> None:
        counters = self.models[model]
        counters.in_flight += 1
        counters.peak = max(counters.peak, counters.in_flight)
        counters.served += served
        self.account_in_flight += 1
        self.account_peak = max(self.account_peak, self.account_in_flight)

    def _fits(self, model: str) -> bool:
        """Whether a slot of ``model`` within its limit (and the account's), bands left out, is free."""
        counters = self.models[model]
        cap = self.account_cap
        return counters.in_flight + counters.held < counters.limit and (
            cap is None or self.account_in_flight + self.account_held < cap
        )

    def _serve_waiting(self) -> None:
        """Give every queued request whose slot is free its slot, in order."""
        if not self.stalls.waiting:
            return
        now = self._clock()
        for waiter in list(self.stalls.waiting):
            if self._fits(waiter.model):
                self._take(waiter.model)
                self.stalls.admitted(waiter, now)

    def output_tokens(self, mean: float) -> int:
        """An answer's output tokens, drawn from `lengths` around ``mean``."""
        return self.lengths.draw(mean, self._lengths_rng)

    # -- limits --------------------------------------------------------------------------------------------

    def apply(self, change: LimitChange, at: float) -> None:
        """Change limits, held slots and the account limit at once (``at``: seconds since the start, for
        ``limitChanges``). Requests in flight keep running; only new ones see the new limits (and queued
        ones that now fit get their slots). ValueError, and nothing changed, when the change names a model
        the simulator does not know."""
        unknown = sorted(change.models() - set(self.models))
        if unknown:
            raise ValueError(f"unknown model(s) {', '.join(unknown)} (known: {', '.join(self.models)})")
        for model, limit in change.limits.items():
            self.models[model].limit = limit
        for alias, served in self.own_counters.items():
            if served in change.limits:
                self.models[alias].limit = change.limits[served]
        for model, held in change.hold.items():
            self.models[model].held = held
        if change.sets_account_limit:
            self.account_cap = change.account_limit
        self.limit_changes.append({"at": round(at, 3), **self.limits_doc()})
        self._serve_waiting()

    def restore_limits(self) -> None:
        """Back to the limits the state was made with; ``limitChanges`` restarts from them at 0 s."""
        limits, account, hold = self._initial
        self.limit_changes = []
        held = {m: hold.get(m, 0) for m in self.models}
        self.apply(LimitChange(limits=limits, hold=held, account_limit=account, sets_account_limit=True), 0.0)

    def limits_doc(self) -> dict[str, Any]:
        """The limits in force (the account's as a number, whether its own or the models' sum)."""
        return {
            "limits": {m: c.limit for m, c in self.models.items()},
            "accountLimit": self.account_limit,
            "hold": {m: c.held for m, c in self.models.items() if c.held},
        }

    def random_fault(self) -> str | None:
        """The code of a random fault for this request (from the faults' RNG, seeded by `fault_seed`), or
        None."""
        if not self.fault_rates:
            return None
        draw = self._rng.random()
        for code, rate in self.fault_rates.items():
            if draw < rate:
                return code
            draw -= rate
        return None

    def release(self, model: str) -> None:
        counters = self.models[model]
        if counters.in_flight <= 0 or self.account_in_flight <= 0:
            raise RuntimeError(f"release of {model} without a slot")
        counters.in_flight -= 1
        self.account_in_flight -= 1
        self._serve_waiting()

    def count_rejection(self, model: str, code: str) -> None:
        counters = self.models.get(model)
        if counters is not None:
            counters.rejected[code] = counters.rejected.get(code, 0) + 1

    def count_filtered(self, model: str) -> None:
        """A request the content filter refused (counted apart from the refusals for load)."""
        self.filtered[model] = self.filtered.get(model, 0) + 1

    def count_broken(self, kind: str) -> None:
        self.broken[kind] = self.broken.get(kind, 0) + 1

    def count_unknown(self, model: str) -> None:
        self.unknown_models[model] = self.unknown_models.get(model, 0) + 1

    def count_retired(self, name: str) -> None:
        self.retired_models[name] = self.retired_models.get(name, 0) + 1

    def count_aliased(self, name: str) -> None:
        self.aliased[name] = self.aliased.get(name, 0) + 1

    def add_fault(self, fault: Fault) -> None:
        self.faults.append(fault)

    def take_fault(self, model: str) -> Fault | None:
        """The oldest queued fault matching ``model`` (or "*"), one use consumed."""
        for index, fault in enumerate(self.faults):
            if fault.model in (model, "*"):
                fault.count -= 1
                if fault.count <= 0:
                    del self.faults[index]
                return fault
        return None

    @property
    def in_flight(self) -> int:
        return self.account_in_flight

    def reset(self) -> None:
        """Clear faults and counters, restore the first limits, restart every random draw from `fault_seed`;
        slots in use and requests waiting stay so (peaks restart from them)."""
        self.faults.clear()
        self.restore_limits()
        self._reseed()
        for counters in self.models.values():
            counters.peak = counters.in_flight
            counters.served = 0
            counters.rejected = {}
        self.account_peak = self.account_in_flight
        self.account_rejected = 0
        self.requests = 0
        self.aborted = 0
        self.unknown_models = {}
        self.retired_models = {}
        self.aliased = {}
        self.broken = {}
        self.reasons = {}
        self.filtered = {}
        self.stalls.clear_counts(self._clock())

    def snapshot(self) -> dict[str, Any]:
        """The ``GET /sim/stats`` document."""
        return {
            "models": {
                name: {
                    "inFlight": c.in_flight,
                    "peakInFlight": c.peak,
                    "served": c.served,
                    "rejected": dict(c.rejected),
                    "limit": c.limit,
                    "band": self._band(name),
                    "hold": c.held,
                }
                for name, c in self.models.items()
            },
            "account": {
                "inFlight": self.account_in_flight,
                "peakInFlight": self.account_peak,
                "limit": self.account_limit,
                "band": self.account_band,
                "hold": self.account_held,
                "rejected": self.account_rejected,
            },
            "requests": self.requests,
            "aborted": self.aborted,
            "unknownModels": dict(self.unknown_models),
            "retiredModels": dict(self.retired_models),
            "aliasedRequests": {
                name: {"servedBy": self.served(name), "requests": n} for name, n in self.aliased.items()
            },
            "brokenAnswers": dict(self.broken),
            "refusalReasons": dict(sorted(self.reasons.items())),
            "filtered": {"requests": sum(self.filtered.values()), "byModel": dict(self.filtered)},
            "zaiWaits": self.stalls.doc(self._clock()),
            "pendingFaults": [f.to_json() for f in self.faults],
            "faultRates": dict(self.fault_rates),
            "limitChanges": list(self.limit_changes),
        }


def _number[T: (int, float)](data: dict[str, Any], key: str, default: T, kind: type[T]) -> T:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{key}: expected a number, got {value!r}")
    if kind is int and not float(value).is_integer():
        raise ValueError(f"{key}: expected an integer, got {value!r}")
    return kind(value)
