"""Settings of the z.ai simulator: timings, the catalog (served models and their limits, hard or soft with a
band; names routed to another model; names retired), held slots, refused models, a schedule of limit
changes, random faults, queuing over the limit, the content filter, when heads are sent and how long answers
are; loaded from JSON or the CLI. `docs/simulator.md` says what each assumes of z.ai and where that comes
from."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from chaos_mode_tools.sim.bands import BAND_SHAPES
from chaos_mode_tools.sim.catalog import (
    ALIAS_COUNTERS,
    AliasCounters,
    alias_map,
    catalog_settings,
    check_catalog,
    default_limits,
    model_names,
)
from chaos_mode_tools.sim.content_filter import FILTER_SCOPES
from chaos_mode_tools.sim.credits import PLANS, check_credits
from chaos_mode_tools.sim.lengths import Lengths
from chaos_mode_tools.sim.limits import ScheduledChange, count_value, model_counts
from chaos_mode_tools.sim.state import BROKEN_ANSWERS, OverLimit, SimState

__all__ = ["OVER_LIMIT", "SimSettings", "default_limits", "parse_limit", "parse_rate"]

ERROR_ENCODINGS: Final = (None, "gzip", "br", "zstd")
OVER_LIMIT: Final = ("refuse", "queue")


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
    limits: dict[str, int] = field(default_factory=default_limits)  # of the served models
    # The catalog beyond `limits` (sim.catalog; the `catalog` key of a mapping sets all four at once):
    # names z.ai routes to a served model (answered as that model), names it answers 1311 (model not in
    # plan), what its models endpoint lists (None: the served models), and whether an alias counts on its
    # target's slots ("shared") or on a counter of its own with its target's limit ("own").
    aliases: dict[str, str] = field(default_factory=dict)
    retired: list[str] = field(default_factory=list)
    listed: list[str] | None = None
    alias_counters: AliasCounters = "shared"
    account_limit: int | None = None
    hold: dict[str, int] = field(default_factory=dict)  # slots held by another client of the account
    schedule: list[ScheduledChange] = field(default_factory=list)  # limit changes, seconds after start
    # code -> share of requests refused with it; `cut` and `hang` break the answer instead (sim.state)
    fault_rates: dict[str, float] = field(default_factory=dict)
    fault_seed: int = 0  # seeds every random draw: faults, soft bands, answer lengths (each its own RNG)
    # Soft limits (sim.bands): per model (and for the account, when it has a limit of its own) a band of
    # levels above the limit, served only by chance (refused 1302 more often the higher), in `band_shape`.
    bands: dict[str, int] = field(default_factory=dict)
    account_band: int = 0
    band_shape: str = "linear"
    # Over the limit (above the band): "refuse" with 1302 after reject_delay_ms, or "queue": the request
    # waits inside z.ai, its head not sent, until a slot frees (sim.stalls); refused 1302 after
    # queue_timeout_ms of waiting when that is set.
    over_limit: OverLimit = "refuse"
    queue_timeout_ms: float | None = None
    # Models that queue over their own limit whatever `over_limit` says (a z.ai where one model queues,
    # the field's GLM-5.2 holding heads 45 s, while the others refuse 1302).
    queue_models: list[str] = field(default_factory=list)
    # The content filter (sim.content_filter): a phrase in the system prompt ("all": or in any message)
    # gets 1305 from every model at once, 529 at the Anthropic door, 429 at the OpenAI door.
    filter_phrases: list[str] = field(default_factory=list)
    filter_scope: str = "system"
    head_with_first_token: bool = False  # a stream's head (and first events) only with its first token
    # A request refused 1302 holds a slot of its model and of the account until its refusal is sent
    # (reject_delay_ms), as a queue with a timeout would; default: it holds none.
    refused_holds: bool = False
    # With `refused_holds`: the slot is kept until the 1302 is due even once the client closes the request
    # (z.ai dropping it then or not: zai.assumptions.DROPS_ON_CLOSE); default: closing gives it back.
    refused_holds_closed: bool = False
    # How many output tokens an answer has around `output_tokens` when the request does not say
    # (x-sim-output-tokens): fixed, or lognormal / pareto, capped (sim.lengths).
    output_lengths: Lengths = field(default_factory=Lengths)
    # PEM certificate (chain) and key: serve HTTPS instead of HTTP (z.ai's TLS, for the HTTPS tests)
    tls_cert: str | None = None
    tls_key: str | None = None
    # The 5-hour quota (sim.quota): prompts per window (None: none), weighted by model (1 unless named),
    # the window's length, and the key its endpoint takes (None: any Authorization header).
    quota: float | None = None
    quota_window_seconds: float = 5 * 3600.0
    quota_weights: dict[str, float] = field(default_factory=dict)
    quota_key: str | None = None
    # A credit plan (sim.credits): the plan's caps (lite, pro, max), or credits per window by name (5h,
    # 1w; each overrides the plan's), a window's length if not z.ai's (tests), credit weights by model.
    credit_plan: str | None = None
    credit_caps: dict[str, float] = field(default_factory=dict)
    credit_window_seconds: dict[str, float] = field(default_factory=dict)
    credit_weights: dict[str, list[float]] = field(default_factory=dict)
    # The prompt cache (sim.prompt_cache): seconds a conversation's prompt stays warm on the model that
    # read it (None: no cache, no cached tokens).
    prompt_cache_seconds: float | None = None
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
        check_catalog(self.limits, self.aliases, self.retired)
        if self.alias_counters not in ALIAS_COUNTERS:
            raise ValueError(f"alias_counters: shared or own, got {self.alias_counters!r}")
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
        self._validate_shapes()
        if self.tls_key is not None and self.tls_cert is None:
            raise ValueError("tls_key: given without tls_cert")
        self._validate_quota()
        if self.prompt_cache_seconds is not None and not self.prompt_cache_seconds > 0:
            raise ValueError(f"prompt_cache_seconds: must be > 0, got {self.prompt_cache_seconds!r}")
        if self.error_encoding not in ERROR_ENCODINGS:
            raise ValueError(f"error_encoding: one of gzip, br, zstd, got {self.error_encoding!r}")

    def _validate_quota(self) -> None:
        if self.quota is not None and (isinstance(self.quota, bool) or not self.quota > 0):
            raise ValueError(f"quota: must be > 0 prompts per window, got {self.quota!r}")
        if isinstance(self.quota_window_seconds, bool) or not self.quota_window_seconds > 0:
            raise ValueError(f"quota_window_seconds: must be > 0, got {self.quota_window_seconds!r}")
        for model, weight in self.quota_weights.items():
            if isinstance(weight, bool) or not isinstance(weight, int | float) or weight < 0:
                raise ValueError(f"quota_weights.{model}: expected a number >= 0, got {weight!r}")
        if self.quota_key is not None and not self.quota_key:
            raise ValueError("quota_key: must not be empty")
        if self.credit_plan is not None and self.credit_plan not in PLANS:
            raise ValueError(f"credit_plan: one of {', '.join(PLANS)}, got {self.credit_plan!r}")
        check_credits(self.caps, self.credit_window_seconds, self.credit_weights)

    @property
    def caps(self) -> dict[str, float]:
        """The credit windows' caps: the plan's, then `credit_caps` (empty: no credit plan)."""
        return {**PLANS.get(self.credit_plan or "", {}), **self.credit_caps}

    def _validate_shapes(self) -> None:
        for model, width in self.bands.items():
            if model not in self.limits:
                raise ValueError(f"bands: unknown model {model!r} (no limit for it)")
            if width < 0:
                raise ValueError(f"bands.{model}: must be >= 0, got {width!r}")
        if count_value("account_band", self.account_band) and self.account_limit is None:
            raise ValueError(
                "account_band: only with an account_limit (without one the account has the models' bands)"
            )
        if self.band_shape not in BAND_SHAPES:
            raise ValueError(f"band_shape: one of {', '.join(BAND_SHAPES)}, got {self.band_shape!r}")
        if self.over_limit not in OVER_LIMIT:
            raise ValueError(f"over_limit: one of {', '.join(OVER_LIMIT)}, got {self.over_limit!r}")
        for model in self.queue_models:
            if model not in self.limits:
                raise ValueError(f"queue_models: unknown model {model!r} (no limit for it)")
        if self.queue_timeout_ms is not None:
            if self.over_limit != "queue" and not self.queue_models:
                raise ValueError("queue_timeout_ms: only with over_limit queue or queue_models (z.ai queues)")
            if isinstance(self.queue_timeout_ms, bool) or not self.queue_timeout_ms >= 0:
                raise ValueError(f"queue_timeout_ms: must be >= 0, got {self.queue_timeout_ms!r}")
        if any(not isinstance(p, str) or not p for p in self.filter_phrases):
            raise ValueError(f"filter_phrases: expected non-empty strings, got {self.filter_phrases!r}")
        if self.filter_scope not in FILTER_SCOPES:
            raise ValueError(f"filter_scope: one of {', '.join(FILTER_SCOPES)}, got {self.filter_scope!r}")
        for name in ("head_with_first_token", "refused_holds", "refused_holds_closed"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name}: expected a boolean, got {getattr(self, name)!r}")
        self.output_lengths.validate()

    def new_state(self, clock: Callable[[], float]) -> SimState:
        """z.ai's bookkeeping on these settings (limits, held slots, bands, faults, draws); `clock`: seconds,
        for how long requests wait inside z.ai."""
        return SimState(
            self.limits,
            self.account_limit,
            self.hold,
            fault_rates=self.fault_rates,
            fault_seed=self.fault_seed,
            bands=self.bands,
            account_band=self.account_band,
            band_shape=self.band_shape,
            over_limit=self.over_limit,
            queue_models=self.queue_models,
            lengths=self.output_lengths,
            clock=clock,
            aliases=self.aliases,
            alias_counters=self.alias_counters,
            refused_holds=self.refused_holds,
        )

    def to_mapping(self) -> dict[str, Any]:
        """A JSON-ready dict that :meth:`from_mapping` reads back."""
        data = dataclasses.asdict(dataclasses.replace(self, schedule=[]))
        data["schedule"] = [change.to_json() for change in self.schedule]
        return data

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], base: SimSettings | None = None) -> SimSettings:
        """Settings from a dict; keys may be snake_case, camelCase or kebab-case. Unknown keys are errors.
        A ``catalog`` key (`sim.catalog`) sets limits, aliases, retired and listed first; the others win."""
        known = {f.name for f in dataclasses.fields(cls)}
        values = {name: getattr(base, name) for name in known} if base is not None else {}
        keys = {_snake(raw_key): raw_key for raw_key in data}
        if "catalog" in keys:
            values.update(catalog_settings(data[keys["catalog"]]))
        for raw_key, value in data.items():
            key = _snake(raw_key)
            if key == "catalog":
                continue
            if key not in known:
                raise ValueError(
                    f"unknown setting {raw_key!r} (known: {', '.join(sorted({*known, 'catalog'}))})"
                )
            values[key] = value
        settings = cls(**values)
        settings.limits = model_counts("limits", settings.limits)
        settings.hold = model_counts("hold", settings.hold)
        settings.refuse = [str(m) for m in settings.refuse]
        settings.aliases = alias_map(settings.aliases)
        settings.retired = model_names("retired", settings.retired)
        if settings.listed is not None:
            settings.listed = model_names("listed", settings.listed)
        settings.queue_models = [str(m) for m in settings.queue_models]
        settings.schedule = _schedule(settings.schedule)
        settings.fault_rates = _rates(settings.fault_rates)
        settings.bands = model_counts("bands", settings.bands)
        settings.output_lengths = Lengths.from_json(settings.output_lengths)
        if not isinstance(settings.filter_phrases, list):
            raise ValueError(f"filter_phrases: expected a list of strings, got {settings.filter_phrases!r}")
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
