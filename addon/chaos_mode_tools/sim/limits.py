"""Changes of the simulator's true limits: the body of ``POST /sim/limits`` and the ``schedule`` setting."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

_CHANGE_KEYS = ("limits", "accountLimit", "hold")


@dataclass(frozen=True, slots=True)
class LimitChange:
    """New limits for the models named (the others keep theirs), held slots, and the account limit.

    ``sets_account_limit`` says whether the account limit changes at all; it then becomes
    ``account_limit``, where None means no account limit of its own (the sum of the model limits).
    """

    limits: dict[str, int] = field(default_factory=dict)
    hold: dict[str, int] = field(default_factory=dict)
    account_limit: int | None = None
    sets_account_limit: bool = False

    @classmethod
    def from_json(cls, data: Any, *, where: str = "") -> LimitChange:
        """Parse ``{"limits": {model: n}, "accountLimit": n | null, "hold": {model: n}}`` (every key
        optional); ValueError naming the bad key."""
        if not isinstance(data, Mapping):
            raise ValueError(f"{where or 'limits change'}: expected a JSON object")
        unknown = sorted(set(data) - set(_CHANGE_KEYS))
        if unknown:
            raise ValueError(f"{where}unknown keys {', '.join(unknown)} (known: {', '.join(_CHANGE_KEYS)})")
        account = data.get("accountLimit")
        if account is not None:
            account = count_value(f"{where}accountLimit", account)
        return cls(
            limits=model_counts(f"{where}limits", data.get("limits", {})),
            hold=model_counts(f"{where}hold", data.get("hold", {})),
            account_limit=account,
            sets_account_limit="accountLimit" in data,
        )

    def models(self) -> set[str]:
        """Every model the change names."""
        return set(self.limits) | set(self.hold)

    def to_json(self) -> dict[str, Any]:
        """The keys that were given, in the shape :meth:`from_json` reads."""
        out: dict[str, Any] = {}
        if self.limits:
            out["limits"] = dict(self.limits)
        if self.sets_account_limit:
            out["accountLimit"] = self.account_limit
        if self.hold:
            out["hold"] = dict(self.hold)
        return out


@dataclass(frozen=True, slots=True)
class ScheduledChange:
    """A :class:`LimitChange` applied ``at_seconds`` after the simulator started (or was reset)."""

    at_seconds: float
    change: LimitChange

    @classmethod
    def from_json(cls, data: Any, *, where: str = "schedule: ") -> ScheduledChange:
        if not isinstance(data, Mapping) or "atSeconds" not in data:
            raise ValueError(f"{where}expected an object with atSeconds, got {data!r}")
        at = data["atSeconds"]
        if isinstance(at, bool) or not isinstance(at, int | float) or not 0 <= at < 1e9:
            raise ValueError(f"{where}atSeconds: expected a number >= 0, got {at!r}")
        rest = {k: v for k, v in data.items() if k != "atSeconds"}
        return cls(float(at), LimitChange.from_json(rest, where=where))

    def to_json(self) -> dict[str, Any]:
        return {"atSeconds": self.at_seconds, **self.change.to_json()}


def model_counts(name: str, value: Any) -> dict[str, int]:
    """``{model: n}`` with every n an integer >= 0."""
    if not isinstance(value, Mapping):
        raise ValueError(f"{name}: expected an object of model: count, got {value!r}")
    return {str(model): count_value(f"{name}.{model}", n) for model, n in value.items()}


def count_value(name: str, value: Any) -> int:
    """An integer >= 0 (a string of digits too, as the CLI gives); ValueError naming ``name``."""
    try:
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise TypeError
        number = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: expected an integer, got {value!r}") from None
    if number < 0:
        raise ValueError(f"{name}: must be >= 0, got {number}")
    return number
