"""Settings of the z.ai simulator: timings, model limits, held slots, refused models, a schedule of limit
changes and random faults; loaded from JSON or the CLI."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from chaos_mode.sim.limits import ScheduledChange, count_value, model_counts
from chaos_mode.sim.state import BROKEN_ANSWERS
from chaos_mode.zai.catalog import DEFAULT_CATALOG


def default_limits() -> dict[str, int]:
    """Concurrency limit of every model of the built-in catalog."""
    return {name: row[1] for name, row in DEFAULT_CATALOG.items()}


ERROR_ENCODINGS: Final = (None, "gzip", "br", "zstd")


@dataclass
class SimSettings:
    """Everything the simulator can be told. Times are in milliseconds unless the name says otherwise."""

    host: str = "127.0.0.1"
    port: int = 0
    latency_ms: float = 300.0
    token_interval_ms: float = 20.0
    output_tokens: int = 30
    reject_delay_ms: float = 1000.0
    abort_detect_ms: float = 200.0
    refuse: list[str] = field(default_factory=list)
    retry_after: float | None = None
    limits: dict[str, int] = field(default_factory=default_limits)
    account_limit: int | None = None
    hold: dict[str, int] = field(default_factory=dict)  # slots held by another client of the account
    schedule: list[ScheduledChange] = field(default_factory=list)  # limit changes, seconds after start
    # code -> share of requests refused with it; `cut` and `hang` break the answer instead (sim.state)
    fault_rates: dict[str, float] = field(default_factory=dict)
    fault_seed: int = 0  # seeds the draw of those random faults
    # PEM certificate (chain) and key: serve HTTPS instead of HTTP (z.ai's TLS, for the HTTPS tests)
    tls_cert: str | None = None
    tls_key: str | None = None
    error_encoding: str | None = None  # gzip, br or zstd: every error body sent so (as a front may send it)
    verbose: bool = False

    @property
    def scheme(self) -> str:
        return "https" if self.tls_cert is not None else "http"

    @property
    def effective_account_limit(self) -> int:
        """The account limit, or the sum of the model limits when none was given."""
        return self.account_limit if self.account_limit is not None else sum(self.limits.values())

    def validate(self) -> None:
        """Raise ValueError naming the first bad setting."""
        for name in ("latency_ms", "token_interval_ms", "reject_delay_ms", "abort_detect_ms"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}: must be >= 0, got {getattr(self, name)!r}")
        if self.output_tokens < 0:
            raise ValueError(f"output_tokens: must be >= 0, got {self.output_tokens!r}")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port: must be 0..65535, got {self.port!r}")
        if self.retry_after is not None and self.retry_after < 0:
            raise ValueError(f"retry_after: must be >= 0, got {self.retry_after!r}")
        if self.account_limit is not None and self.account_limit < 0:
            raise ValueError(f"account_limit: must be >= 0, got {self.account_limit!r}")
        for model, limit in self.limits.items():
            if limit < 0:
                raise ValueError(f"limits.{model}: must be >= 0, got {limit!r}")
        for model, held in self.hold.items():
            if held < 0:
                raise ValueError(f"hold.{model}: must be >= 0, got {held!r}")
        unknown = [m for m in self.hold if m not in self.limits]
        unknown += [m for c in self.schedule for m in sorted(c.change.models()) if m not in self.limits]
        if unknown:
            raise ValueError(f"hold, schedule: unknown model {unknown[0]!r} (no limit for it)")
        for code, rate in self.fault_rates.items():
            if not (code.isdigit() or code in BROKEN_ANSWERS) or not 0 <= rate <= 1:
                raise ValueError(
                    f"fault_rates.{code}: expected a numeric code, cut or hang, and a rate in [0, 1]"
                )
        if sum(self.fault_rates.values()) > 1:
            raise ValueError(f"fault_rates: the rates add up to more than 1: {self.fault_rates!r}")
        if self.tls_key is not None and self.tls_cert is None:
            raise ValueError("tls_key: given without tls_cert")
        if self.error_encoding not in ERROR_ENCODINGS:
            raise ValueError(f"error_encoding: one of gzip, br, zstd, got {self.error_encoding!r}")

    def to_mapping(self) -> dict[str, Any]:
        """A JSON-ready dict that :meth:`from_mapping` reads back."""
        data = dataclasses.asdict(dataclasses.replace(self, schedule=[]))
        data["schedule"] = [change.to_json() for change in self.schedule]
        return data

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], base: SimSettings | None = None) -> SimSettings:
        """Settings from a dict; keys may be snake_case, camelCase or kebab-case. Unknown keys are errors."""
        known = {f.name for f in dataclasses.fields(cls)}
        values = {name: getattr(base, name) for name in known} if base is not None else {}
        for raw_key, value in data.items():
            key = _snake(raw_key)
            if key not in known:
                raise ValueError(f"unknown setting {raw_key!r} (known: {', '.join(sorted(known))})")
            values[key] = value
        settings = cls(**values)
        settings.limits = model_counts("limits", settings.limits)
        settings.hold = model_counts("hold", settings.hold)
        settings.refuse = [str(m) for m in settings.refuse]
        settings.schedule = _schedule(settings.schedule)
        settings.fault_rates = _rates(settings.fault_rates)
        settings.validate()
        return settings

    @classmethod
    def from_file(cls, path: str | Path, base: SimSettings | None = None) -> SimSettings:
        """Settings from a JSON file holding one object."""
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise ValueError(f"{path}: expected a JSON object")
        return cls.from_mapping(data, base)


def parse_limit(text: str) -> tuple[str, int]:
    """Parse ``MODEL=N`` (the ``--limit`` and ``--hold`` options)."""
    model, sep, number = text.rpartition("=")
    if not sep or not model:
        raise ValueError(f"expected MODEL=N, got {text!r}")
    return model, count_value(model, number)


def parse_rate(text: str) -> tuple[str, float]:
    """Parse ``CODE=RATE`` (the ``--fault-rate`` option)."""
    code, sep, rate = text.rpartition("=")
    if not sep or not code:
        raise ValueError(f"expected CODE=RATE, got {text!r}")
    return code, _rates({code: rate})[code]


def _schedule(items: Any) -> list[ScheduledChange]:
    if not isinstance(items, list):
        raise ValueError(f"schedule: expected a list of changes, got {items!r}")
    parsed = [
        item if isinstance(item, ScheduledChange) else _scheduled(i, item) for i, item in enumerate(items)
    ]
    return sorted(parsed, key=lambda change: change.at_seconds)  # stable: equal times keep their order


def _scheduled(index: int, item: Any) -> ScheduledChange:
    return ScheduledChange.from_json(item, where=f"schedule[{index}]: ")


def _rates(rates: Any) -> dict[str, float]:
    if not isinstance(rates, Mapping):
        raise ValueError(f"fault_rates: expected an object of code: rate, got {rates!r}")
    out: dict[str, float] = {}
    for code, rate in rates.items():
        try:
            if isinstance(rate, bool):
                raise TypeError
            out[str(code)] = float(rate)
        except (TypeError, ValueError):
            raise ValueError(f"fault_rates.{code}: expected a number, got {rate!r}") from None
    return out


def _snake(key: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", key).replace("-", "_").lower()
