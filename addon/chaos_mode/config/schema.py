"""The `modelRouting` config block: pydantic models in the design's camelCase keys, and `parse_config`.

Numbers are strict (`maxConcurrency: true` or `1e40` is refused, not read as 1), finite and bounded; a key
left empty (`key:` or `null`) takes its default. Reading files: `config.file`.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Final, Literal

from pydantic import (
    AliasGenerator,
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from chaos_mode.config.hints import unknown_key_hint
from chaos_mode.config.hosts import host_entry
from chaos_mode.zai.catalog import (
    DEFAULT_ALIASES,
    DEFAULT_CATALOG,
    DEFAULT_OPENAI_PATHS,
    DEFAULT_UPSTREAM_HOSTS,
    MESSAGES_SUFFIX,
    REQUEST_TIERS,
    TIER_RANK,
    ModelTier,
    RequestTier,
)
from chaos_mode.zai.quota import CREDIT_UNIT_TOKENS, GLM_5_3_CREDITS, PROMPT_CACHE_SECONDS, WINDOW_SECONDS

StrategyName = Literal["least-loaded", "round-robin", "weighted-random"]


# Strict numbers: a boolean, a string or a float with no fraction is not an int, a boolean not a float.
Int = Annotated[int, Strict()]
Float = Annotated[float, Strict()]
# No spaces, control characters or lone surrogates (not UTF-8: a name is logged, saved, scraped), 1-128 long.
MODEL_NAME = re.compile(r"[^\s\x00-\x1f\x7f\ud800-\udfff]{1,128}")
URL_PATH = re.compile(r"/[!-~]{0,255}")  # printable ASCII, no spaces, 1-256 long


class ConfigError(ValueError):
    """A config file that cannot be used: one line, naming the key as the user wrote it.

    Line breaks (and the indentation around them) become one space; spaces inside a line stay, so a
    key of two spaces is still shown as `'  '`."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(line.strip() for line in message.splitlines() if line.strip()))


class _Base(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        alias_generator=AliasGenerator(validation_alias=to_camel, serialization_alias=to_camel),
        populate_by_name=True,
        frozen=True,
        allow_inf_nan=False,
    )

    @model_validator(mode="before")
    @classmethod
    def _empty_means_default(cls, data: Any) -> Any:
        """`key:` with no value (YAML's null) takes the key's default, as if it were not written."""
        if isinstance(data, dict):
            return {key: value for key, value in data.items() if value is not None}
        return data


class CreditWeights(_Base):
    """What an answer on a model costs on a credit plan: credits per 1,000 tokens of each kind."""

    input: Float = Field(ge=0, le=100_000, description="credits per 1,000 fresh input tokens")
    cached_input: Float = Field(ge=0, le=100_000, description="credits per 1,000 cached input tokens")
    output: Float = Field(ge=0, le=100_000, description="credits per 1,000 output tokens")

    def cost(self, fresh: int, cached: int, output: int) -> float:
        """The credits of an answer with this usage (`quota.credits`)."""
        return (fresh * self.input + cached * self.cached_input + output * self.output) / CREDIT_UNIT_TOKENS


class ModelSpec(_Base):
    """One model of the catalog."""

    tier: ModelTier
    max_concurrency: Int = Field(ge=1, le=10_000)
    input_price: Float = Field(default=0.0, ge=0, le=10_000, description="$ per 1M input tokens")
    output_price: Float = Field(default=0.0, ge=0, le=10_000, description="$ per 1M output tokens")
    free: bool = False
    vision: bool = Field(default=False, description="reads images: a request carrying one goes to these")
    ceiling: Int | None = Field(
        default=None,
        ge=1,
        le=100_000,
        description="the most a learned limit may reach; default: see learning",
    )
    quota_weight: Float = Field(
        default=1.0,
        ge=0,
        le=100,
        description="how many prompts of the 5-hour quota one request counts (the GLM-5 family: about 3)",
    )
    credit_weights: CreditWeights | None = Field(
        default=None,
        description="a credit plan's credits per 1,000 input, cached input and output tokens; default: "
        "the built-in catalog's (GLM-5.3's), else the heaviest of the catalog's",
    )

    @model_validator(mode="after")
    def _ceiling_covers_start(self) -> ModelSpec:
        if self.ceiling is not None and self.ceiling < self.max_concurrency:
            raise ValueError("ceiling: must be at least maxConcurrency")
        return self


def _credit_weights(weights: tuple[float, float, float]) -> CreditWeights:
    fresh, cached, output = weights
    return CreditWeights(input=fresh, cached_input=cached, output=output)


_GLM_5_3_WEIGHTS: Final = _credit_weights(GLM_5_3_CREDITS)


def _default_models() -> dict[str, ModelSpec]:
    return {
        name: ModelSpec(
            tier=m.tier,
            max_concurrency=m.limit,
            input_price=m.input_price,
            output_price=m.output_price,
            free=m.free,
            vision=m.vision,
            quota_weight=m.quota_weight,
            credit_weights=None if m.credits is None else _credit_weights(m.credits),
        )
        for name, m in DEFAULT_CATALOG.items()
    }


class QualityFloor(_Base):
    """The lowest model tier each incoming request tier may be served by."""

    heavy: ModelTier = "HEAVY"
    medium: ModelTier = "MEDIUM"
    light: ModelTier = "LIGHT"

    def for_tier(self, tier: RequestTier) -> ModelTier:
        floor: ModelTier = getattr(self, tier)
        return floor


class ChaosModeSettings(_Base):
    """`modelRouting.chaosMode`: exactly the Chaos Mode design's fields and defaults."""

    enabled: bool = False
    quality_floor: QualityFloor = QualityFloor()
    strategy: StrategyName = "least-loaded"
    exclude_models: tuple[str, ...] = ()
    max_cost_per_request: Float | None = Field(default=None, gt=0, le=10_000)
    include_free_models: bool = True
    sticky_conversations: bool = False  # conversations stay on their cache (routing.cache_rule)


_DEFAULT_PATTERNS: dict[str, RequestTier] = {"opus": "heavy", "sonnet": "medium", "haiku": "light"}


class TierRules(_Base):
    """How an incoming model name maps to a request tier.

    A catalog model name maps to its own tier; otherwise the first pattern contained in the
    (lower-cased) name decides; otherwise `default`.
    """

    patterns: dict[str, RequestTier] = Field(default_factory=lambda: dict(_DEFAULT_PATTERNS))
    default: RequestTier = "medium"

    @field_validator("patterns")
    @classmethod
    def _lowercase(cls, value: dict[str, RequestTier]) -> dict[str, RequestTier]:
        if any(not key.strip() for key in value):
            raise ValueError("a pattern must not be empty")
        return {key.strip().lower(): tier for key, tier in value.items()}


class QueueSettings(_Base):
    """The admission queue: requests wait here for a slot instead of failing."""

    enabled: bool = True
    timeout_seconds: Float = Field(default=60.0, ge=0, le=3600)
    max_waiting: Int = Field(default=1000, ge=0, le=1_000_000)


class CooldownSettings(_Base):
    """Per-model cooldowns after a 429 or overload from z.ai."""

    default_seconds: Float = Field(default=5.0, gt=0, le=3600)
    max_seconds: Float = Field(default=60.0, gt=0, le=86_400)
    burst_multiplier: Float = Field(default=2.0, ge=1, le=10)
    decay_seconds: Float = Field(default=30.0, gt=0, le=86_400)
    account_pause_seconds: Float = Field(
        default=300.0, gt=0, le=7 * 86_400, description="account-wide pause when z.ai gives no reset time"
    )
    max_pause_seconds: Float = Field(
        default=8 * 86_400.0,
        gt=0,
        le=31 * 86_400,
        description="the longest a reset time read from z.ai's message (or Retry-After) may pause anything "
        "(a week's reset, with a margin)",
    )
    trial_when_idle: bool = Field(
        default=True,
        description="when nothing at all is in flight and requests wait, the cooling model that ends first "
        "takes one request instead of the whole pool idling",
    )

    @model_validator(mode="after")
    def _max_covers_default(self) -> CooldownSettings:
        if self.max_seconds < self.default_seconds:
            raise ValueError("maxSeconds: must be at least defaultSeconds")
        return self


class LearningSettings(_Base):
    """Learned limits: the catalog's numbers are starting guesses, z.ai's answers the truth."""

    enabled: bool = Field(default=True, description="false: the catalog's limits are fixed, as before")
    ceiling_factor: Float = Field(
        default=4.0,
        ge=1,
        le=100,
        description="a model's ceiling, unless it sets one: factor x maxConcurrency",
    )
    account_ceiling: Int | None = Field(
        default=None, ge=1, le=1_000_000, description="the account's ceiling; default: the models' summed"
    )
    probe_interval_seconds: Float = Field(
        default=5.0,
        gt=0,
        le=3600,
        description="the base wait of a limit's probes (`learning.explore`): none within this long of an "
        "over-limit answer, and, while z.ai moved lately, none more apart",
    )
    probe_backoff_max_seconds: Float = Field(
        default=60.0,
        gt=0,
        le=86_400,
        description="each failed exploration round doubles the wait before the next probe of that limit, "
        "up to this; a detected change of z.ai's limits starts every wait over",
    )
    refusal_cost_seconds: Float = Field(
        default=3.0,
        ge=0,
        le=3600,
        description="what a refusal costs beyond the time it blocks its slot (a retry, a log line, z.ai's "
        "goodwill), in slot-seconds: the price a level's refusals are weighed at (`learning.evidence`)",
    )
    drift_seconds: Float = Field(
        default=600.0, gt=0, le=30 * 86_400, description="a limit nobody confirmed for this long steps back"
    )
    lend_overdue: bool = Field(
        default=True,
        description="an attempt with no head within its patience lends its place to the next request until "
        "its verdict (zai.assumptions.REFUSED_HOLDS_NO_SLOT), until the pool's check finds the places lent "
        "refused far more than the others (`routing.lending`); false: it keeps its place",
    )


class StickySettings(_Base):
    """Sticky conversations: the models that served a conversation lately, where its prompt is cached."""

    ttl_seconds: Float = Field(
        default=PROMPT_CACHE_SECONDS, gt=0, le=30 * 86_400, description="how long a model stays warm for it"
    )
    max_entries: Int = Field(default=10_000, ge=1, le=10_000_000)


class StreamSettings(_Base):
    """How slots are returned when a stream ends."""

    abort_grace_seconds: Float = Field(
        default=0.5,
        ge=0,
        le=60,
        description="a slot freed by a client that left mid-stream returns to the pool after this grace",
    )
    max_body_bytes: Int = Field(default=32 * 1024 * 1024, ge=1024, le=1 << 30)
    max_failovers: Int = Field(default=3, ge=0, le=10)
    idle_seconds: Float = Field(
        default=120.0,
        gt=0,
        le=3600,
        description="an answer silent this long after its head is cut and its slot given back",
    )


class QuotaSettings(_Base):
    """The Coding Plan's 5-hour quota: read (the `chaos_key` option), estimated, forecast, paced."""

    pace: bool = Field(
        default=False,
        description="when the forecast runs out before the reset: lighter models first, then fewer at once",
    )
    poll_seconds: Float = Field(
        default=60.0, ge=1, le=3600, description="how often z.ai's quota is read (with a chaos_key key)"
    )
    poll_backoff_max_seconds: Float = Field(
        default=900.0, ge=5, le=86_400, description="failed reads wait twice as long each time, up to this"
    )
    window_seconds: Float = Field(
        default=WINDOW_SECONDS,
        ge=1,
        le=31 * 86_400,
        description="the quota's 5-hour window (another length for a simulator's: the week scales alike)",
    )
    unit: Literal["prompts", "credits"] = Field(
        default="prompts",
        description="what the plan's quota counts, for the estimate: prompts (each request its model's "
        "quotaWeight) or credits (each answer's tokens by its model's creditWeights); a reading of credit "
        "rows (chaos_key) says credits",
    )

    @model_validator(mode="after")
    def _backoff_covers_poll(self) -> QuotaSettings:
        if self.poll_backoff_max_seconds < self.poll_seconds:
            raise ValueError("pollBackoffMaxSeconds: must be at least pollSeconds")
        return self


class ModelRouting(_Base):
    """`modelRouting`: the Chaos Mode design's `chaosMode`, plus what it leaves implicit."""

    chaos_mode: ChaosModeSettings = ChaosModeSettings()
    models: dict[str, ModelSpec] = Field(default_factory=_default_models)
    aliases: dict[str, str] = Field(
        default_factory=lambda: dict(DEFAULT_ALIASES),
        description="names z.ai serves as another model (asked -> served): a catalog model named here is "
        "sent and counted as the one serving it; default: the built-in catalog's, none for a catalog of the "
        "config's own",
    )
    upstream_hosts: tuple[str, ...] = DEFAULT_UPSTREAM_HOSTS
    openai_paths: tuple[str, ...] = Field(
        default=DEFAULT_OPENAI_PATHS,
        description="the OpenAI chat-completions paths of the upstream hosts routed like Anthropic messages; "
        "[]: that door passes through unrouted",
    )
    tier_rules: TierRules = TierRules()
    account_concurrency: Int | None = Field(
        default=None,
        ge=1,
        le=1_000_000,
        description="account-wide cap; default: the sum of the catalog's limits",
    )
    queue: QueueSettings = QueueSettings()
    cooldown: CooldownSettings = CooldownSettings()
    sticky: StickySettings = StickySettings()
    streams: StreamSettings = StreamSettings()
    learning: LearningSettings = LearningSettings()
    quota: QuotaSettings = QuotaSettings()

    @field_validator("models")
    @classmethod
    def _some_models(cls, value: dict[str, ModelSpec]) -> dict[str, ModelSpec]:
        if not value:
            raise ValueError("the catalog must hold at least one model")
        bad = [name for name in value if not MODEL_NAME.fullmatch(name) or name.startswith("*")]
        if bad:
            raise ValueError(
                f"model name {bad[0]!r}: must be 1-128 characters with no spaces, control characters or lone "
                "surrogates, not starting with '*'"
            )
        return value

    @field_validator("upstream_hosts")
    @classmethod
    def _hosts_exact(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        hosts = tuple(host_entry(host) for host in value)
        if not hosts:
            raise ValueError("must name at least one host (with none, chaos mode would route nothing)")
        return hosts

    @field_validator("openai_paths")
    @classmethod
    def _paths_exact(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        paths = tuple(path.strip() for path in value)
        for path in paths:
            if not URL_PATH.fullmatch(path) or "?" in path or "#" in path:
                shown = repr(path[:40]) + ("..." if len(path) > 40 else "")
                raise ValueError(
                    f"{shown}: must be a URL path starting with /, at most 256 printable ASCII characters, "
                    "no spaces, query or fragment"
                )
            if path.rstrip("/").endswith(MESSAGES_SUFFIX):
                raise ValueError(f"{path!r}: is the Anthropic door (paths ending in {MESSAGES_SUFFIX})")
        return tuple(dict.fromkeys(path.rstrip("/") or "/" for path in paths))

    @model_validator(mode="before")
    @classmethod
    def _own_catalog_own_aliases(cls, data: Any) -> Any:
        """The built-in aliases name the built-in models: a catalog of the config's own has none unless it
        says so."""
        if isinstance(data, dict) and data.get("models") is not None and data.get("aliases") is None:
            return {**data, "aliases": {}}
        return data

    @model_validator(mode="after")
    def _consistent(self) -> ModelRouting:
        chaos = self.chaos_mode
        for name, served in self.aliases.items():
            for each in (name, served):
                if not MODEL_NAME.fullmatch(each) or each.startswith("*"):
                    raise ValueError(f"aliases: {each[:40]!r} is not a model name")
            if name == served:
                raise ValueError(f"aliases.{name}: names itself")
        unknown = [name for name in chaos.exclude_models if name not in self.models]
        if unknown:
            raise ValueError(f"chaosMode.excludeModels: not in the catalog: {', '.join(unknown)}")
        for tier in REQUEST_TIERS:
            if not self.eligible_models(tier):
                floor = chaos.quality_floor.for_tier(tier)
                raise ValueError(
                    f"chaosMode.qualityFloor.{tier}: {floor} leaves no model to serve {tier} requests "
                    "(after excludeModels and includeFreeModels)"
                )
        return self

    @property
    def replaces_catalog(self) -> bool:
        """Whether the config lists its own `models`: they replace the built-in catalog, not add to it."""
        return "models" in self.model_fields_set

    @property
    def total_capacity(self) -> int:
        """Slots the account may use at once: the account cap, or the catalog's sum."""
        catalog_sum = sum(spec.max_concurrency for spec in self.models.values())
        if self.account_concurrency is None:
            return catalog_sum
        return min(self.account_concurrency, catalog_sum)

    def quota_weight(self, model: str) -> float:
        """What one request on `model` counts of the 5-hour quota (1 for a model not in the catalog)."""
        spec = self.models.get(model)
        return spec.quota_weight if spec is not None else 1.0

    def credit_weights(self, model: str) -> tuple[CreditWeights, bool]:
        """(the credit weights of `model`, whether they are assumed): its own, else the catalog's heaviest
        (each weight the greatest any model has), else GLM-5.3's (`zai.quota`)."""
        spec = self.models.get(model)
        if spec is not None and spec.credit_weights is not None:
            return spec.credit_weights, False
        return self._heaviest_credits(), True

    def _heaviest_credits(self) -> CreditWeights:
        known = [spec.credit_weights for spec in self.models.values() if spec.credit_weights is not None]
        if len(known) < 2:  # read on every answer: no new weights where there is nothing to compare
            return known[0] if known else _GLM_5_3_WEIGHTS
        return CreditWeights(
            input=max(w.input for w in known),
            cached_input=max(w.cached_input for w in known),
            output=max(w.output for w in known),
        )

    def eligible_models(self, tier: RequestTier) -> list[str]:
        """Models that may serve `tier` by configuration alone (floor, exclusions, free models)."""
        chaos = self.chaos_mode
        floor_rank = TIER_RANK[chaos.quality_floor.for_tier(tier)]
        excluded = set(chaos.exclude_models)
        return [
            name
            for name, spec in self.models.items()
            if TIER_RANK[spec.tier] >= floor_rank
            and name not in excluded
            and (chaos.include_free_models or not spec.free)
        ]


class ConfigFile(_Base):
    """A config file: a top-level `modelRouting` key, as in the Chaos Mode design's `config.modelRouting`."""

    model_routing: ModelRouting = ModelRouting()


def default_config() -> ModelRouting:
    """The built-in defaults: the built-in catalog, chaos mode off."""
    return ModelRouting()


_KEYED_MESSAGE = re.compile(r"^(?P<key>[A-Za-z]\w*(?:\.[A-Za-z]\w*)*): (?P<message>.*)$", re.S)


_PLAIN_KEY = re.compile(r"[\w.\-\[\]]+")


def key_step(part: object) -> str:
    """One step of a key path as an error shows it: as written, or quoted when it is empty or holds
    spaces or signs (`'': Extra inputs are not permitted`, not a bare `: ...`)."""
    text = str(part)
    return text if isinstance(part, int) or _PLAIN_KEY.fullmatch(text) else repr(text)


def _format_errors(error: ValidationError) -> str:
    lines = []
    for item in error.errors():
        where = ".".join(key_step(part) for part in item["loc"])
        message = item["msg"].removeprefix("Value error, ")
        # Cross-field checks name the key they are about: "chaosMode.excludeModels: ...".
        if keyed := _KEYED_MESSAGE.match(message):
            where = f"{where}.{keyed['key']}" if where else keyed["key"]
            message = keyed["message"]
        if item["type"] == "extra_forbidden":
            message += unknown_key_hint(ConfigFile, item["loc"])
        where = where or "(top level)"
        lines.append(f"{where}: {message}")
    return "; ".join(lines)


def parse_config(data: Any, *, source: str = "config") -> ModelRouting:
    """Validate already-decoded config data (a mapping with a `modelRouting` key)."""
    if data is None:  # a file caught empty (truncated by its writer) is no config: the one in force stays
        raise ConfigError(
            f"{source}: empty, no modelRouting key (`modelRouting:` alone: the built-in defaults)"
        )
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the top level must be a mapping with a modelRouting key")
    try:
        return ConfigFile.model_validate(data).model_routing
    except ValidationError as exc:
        raise ConfigError(f"{source}: {_format_errors(exc)}") from None
