"""Settings of the z.ai simulator: timings, model limits, refused models; loaded from JSON or the CLI."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos_mode.catalog import DEFAULT_CATALOG


def default_limits() -> dict[str, int]:
    """Concurrency limit of every model of the built-in catalog."""
    return {name: row[1] for name, row in DEFAULT_CATALOG.items()}


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
    verbose: bool = False

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

    def to_mapping(self) -> dict[str, Any]:
        """A JSON-ready dict that :meth:`from_mapping` reads back."""
        return dataclasses.asdict(self)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], base: SimSettings | None = None) -> SimSettings:
        """Settings from a dict; keys may be snake_case, camelCase or kebab-case. Unknown keys are errors."""
        known = {f.name for f in dataclasses.fields(cls)}
        values = dataclasses.asdict(base) if base is not None else {}
        for raw_key, value in data.items():
            key = _snake(raw_key)
            if key not in known:
                raise ValueError(f"unknown setting {raw_key!r} (known: {', '.join(sorted(known))})")
            values[key] = value
        settings = cls(**values)
        settings.limits = {str(k): _as_int(f"limits.{k}", v) for k, v in dict(settings.limits).items()}
        settings.refuse = [str(m) for m in settings.refuse]
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
    """Parse ``MODEL=N`` (the ``--limit`` option)."""
    model, sep, number = text.rpartition("=")
    if not sep or not model:
        raise ValueError(f"expected MODEL=N, got {text!r}")
    return model, _as_int(model, number)


def _as_int(name: str, value: Any) -> int:
    try:
        if isinstance(value, bool):
            raise TypeError
        return int(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: expected an integer, got {value!r}") from None


def _snake(key: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", key).replace("-", "_").lower()
