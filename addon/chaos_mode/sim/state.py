"""The simulator's bookkeeping: per-model and account concurrency slots, slots held by another client,
limit changes, counters, queued and random faults."""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from chaos_mode.sim.errors import default_message
from chaos_mode.sim.limits import LimitChange

Verdict = Literal["ok", "model", "account"]

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


class SimState:
    """Counters and slots. Every method is synchronous: check-and-take cannot interleave on one loop."""

    def __init__(
        self,
        limits: Mapping[str, int],
        account_limit: int | None,
        hold: Mapping[str, int] | None = None,
        *,
        fault_rates: Mapping[str, float] | None = None,
        fault_seed: int = 0,
    ) -> None:
        """``account_limit`` None: the account allows the sum of the model limits, whatever they become."""
        self._initial = (dict(limits), account_limit, dict(hold or {}))
        self.models: dict[str, ModelCounters] = {m: ModelCounters(limit=n) for m, n in limits.items()}
        self.account_cap = account_limit
        self.account_in_flight = 0
        self.account_peak = 0
        self.account_rejected = 0
        self.requests = 0
        self.aborted = 0
        self.unknown_models: dict[str, int] = {}
        self.broken: dict[str, int] = {}  # answers cut or never given, by BROKEN_ANSWERS kind
        self.faults: list[Fault] = []
        self.fault_rates = dict(fault_rates or {})
        self._seed = fault_seed
        self._rng = random.Random(fault_seed)
        self.limit_changes: list[dict[str, Any]] = []
        self.restore_limits()

    @property
    def account_limit(self) -> int:
        """The account limit in force: its own, or the sum of the model limits."""
        if self.account_cap is not None:
            return self.account_cap
        return sum(c.limit for c in self.models.values())

    @property
    def account_held(self) -> int:
        return sum(c.held for c in self.models.values())

    def try_acquire(self, model: str) -> Verdict:
        """Take a slot of ``model`` and of the account, or say which limit is full."""
        counters = self.models[model]
        if counters.in_flight + counters.held >= counters.limit:
            return "model"
        if self.account_in_flight + self.account_held >= self.account_limit:
            return "account"
        counters.in_flight += 1
        counters.peak = max(counters.peak, counters.in_flight)
        counters.served += 1
        self.account_in_flight += 1
        self.account_peak = max(self.account_peak, self.account_in_flight)
        return "ok"

    def apply(self, change: LimitChange, at: float) -> None:
        """Change limits, held slots and the account limit at once (``at``: seconds since the start, for
        ``limitChanges``). Requests in flight keep running; only new ones see the new limits.
        ValueError, and nothing changed, when the change names a model the simulator does not know."""
        unknown = sorted(change.models() - set(self.models))
        if unknown:
            raise ValueError(f"unknown model(s) {', '.join(unknown)} (known: {', '.join(self.models)})")
        for model, limit in change.limits.items():
            self.models[model].limit = limit
        for model, held in change.hold.items():
            self.models[model].held = held
        if change.sets_account_limit:
            self.account_cap = change.account_limit
        self.limit_changes.append({"at": round(at, 3), **self.limits_doc()})

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
        """The code of a random fault for this request (drawn with the seeded RNG), or None."""
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

    def count_rejection(self, model: str, code: str) -> None:
        counters = self.models.get(model)
        if counters is not None:
            counters.rejected[code] = counters.rejected.get(code, 0) + 1

    def count_broken(self, kind: str) -> None:
        self.broken[kind] = self.broken.get(kind, 0) + 1

    def count_unknown(self, model: str) -> None:
        self.unknown_models[model] = self.unknown_models.get(model, 0) + 1

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
        """Clear faults and counters, restore the first limits; slots in use stay so (peaks restart
        from them)."""
        self.faults.clear()
        self.restore_limits()
        self._rng.seed(self._seed)
        for counters in self.models.values():
            counters.peak = counters.in_flight
            counters.served = 0
            counters.rejected = {}
        self.account_peak = self.account_in_flight
        self.account_rejected = 0
        self.requests = 0
        self.aborted = 0
        self.unknown_models = {}
        self.broken = {}

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
                    "hold": c.held,
                }
                for name, c in self.models.items()
            },
            "account": {
                "inFlight": self.account_in_flight,
                "peakInFlight": self.account_peak,
                "limit": self.account_limit,
                "hold": self.account_held,
                "rejected": self.account_rejected,
            },
            "requests": self.requests,
            "aborted": self.aborted,
            "unknownModels": dict(self.unknown_models),
            "brokenAnswers": dict(self.broken),
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
