"""The modelRouting config: the design's defaults, camelCase keys, files, and errors that name the key."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from chaos_mode.config.schema import ConfigError, ModelRouting, default_config, parse_config
from support.design_catalog import (
    DEC_2026,
    DEC_2026_ALIASES,
    DEC_2026_ALL,
    DEC_2026_HEAVY,
    DEC_2026_MEDIUM,
    DESIGN_MODELS,
)

# The Chaos Mode design's catalog, written out (not imported) so the built-in table is checked against it.
SEED_CATALOG: dict[str, tuple[str, int, float, float, bool]] = {
    "glm-4.7": ("HEAVY", 3, 0.60, 2.20, False),
    "glm-4.6": ("HEAVY", 3, 0.60, 2.20, False),
    "glm-4.5-x": ("HEAVY", 2, 2.20, 8.90, False),
    "glm-4.5": ("MEDIUM", 10, 0.60, 2.20, False),
    "glm-4.5-air": ("MEDIUM", 5, 0.20, 1.10, False),
    "glm-4.7-flashx": ("LIGHT", 3, 0.07, 0.40, False),
    "glm-4.7-flash": ("LIGHT", 1, 0.0, 0.0, True),
    "glm-4.5-flash": ("LIGHT", 1, 0.0, 0.0, True),
}
HEAVY_MODELS = ["glm-4.7", "glm-4.6", "glm-4.5-x"]
ONLY_FREE_LIGHT = {"a": {"tier": "LIGHT", "maxConcurrency": 1, "free": True}}


def routing(**block: Any) -> ModelRouting:
    return parse_config({"modelRouting": block})


def design(**block: Any) -> ModelRouting:
    """A config over the design's (early-2026) catalog."""
    return routing(models=DESIGN_MODELS, **block)


def test_defaults_equal_the_seed() -> None:
    config = default_config()
    chaos = config.chaos_mode
    assert chaos.enabled is False
    assert (chaos.quality_floor.heavy, chaos.quality_floor.medium, chaos.quality_floor.light) == (
        "HEAVY",
        "MEDIUM",
        "LIGHT",
    )
    assert chaos.strategy == "least-loaded"
    assert chaos.exclude_models == ()
    assert chaos.max_cost_per_request is None
    assert chaos.include_free_models is True
    assert chaos.sticky_conversations is False
    assert config.upstream_hosts == ("api.z.ai", "open.bigmodel.cn")
    assert config.account_concurrency is None


def test_the_built_in_catalog_is_the_coding_plan_of_december_2026() -> None:
    config = default_config()
    catalog = {
        name: (
            spec.tier,
            spec.max_concurrency,
            spec.input_price,
            spec.output_price,
            spec.vision,
            spec.quota_weight,
        )
        for name, spec in config.models.items()
    }
    assert catalog == DEC_2026
    assert list(config.models) == list(DEC_2026)  # catalog order is the round-robin order
    assert not any(spec.free for spec in config.models.values())
    assert config.aliases == DEC_2026_ALIASES
    assert not config.replaces_catalog
    assert config.total_capacity == 12


def test_the_design_catalog_as_a_config_equals_the_seed() -> None:
    config = design()
    catalog = {
        name: (spec.tier, spec.max_concurrency, spec.input_price, spec.output_price, spec.free)
        for name, spec in config.models.items()
    }
    assert catalog == SEED_CATALOG
    assert list(config.models) == list(SEED_CATALOG)
    assert not any(spec.vision for spec in config.models.values())
    assert config.aliases == {}  # a catalog of the config's own has no built-in aliases
    assert config.total_capacity == 28


@pytest.mark.parametrize("data", [{}, {"modelRouting": {}}, {"modelRouting": None}])
def test_empty_input_gives_the_defaults(data: Any) -> None:
    assert parse_config(data) == default_config()


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ([1, 2], r"^config: the top level must be a mapping with a modelRouting key$"),
        (None, r"^config: empty, no modelRouting key \(`modelRouting:` alone: the built-in defaults\)$"),
        ("text", r"the top level must be a mapping"),
        ({"modelRouting": 3}, r"^config: modelRouting: Input should be a valid dictionary"),
        ({"chaosMode": {}}, r"^config: chaosMode: Extra inputs"),  # forgot the modelRouting level
    ],
)
def test_top_level_errors(data: Any, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        parse_config(data)


def test_camel_case_keys_reach_the_python_fields() -> None:
    config = routing(
        chaosMode={
            "enabled": True,
            "qualityFloor": {"heavy": "MEDIUM", "medium": "LIGHT", "light": "LIGHT"},
            "strategy": "weighted-random",
            "excludeModels": ["glm-4.5-x"],
            "maxCostPerRequest": 0.05,
            "includeFreeModels": False,
            "stickyConversations": True,
        },
        models={"big": {"tier": "HEAVY", "maxConcurrency": 4, "inputPrice": 1, "outputPrice": 2}}
        | {name: {"tier": t, "maxConcurrency": c} for name, (t, c, *_) in SEED_CATALOG.items()},
        upstreamHosts=[" API.Example.COM "],
        tierRules={"patterns": {" Opus ": "heavy"}, "default": "light"},
        accountConcurrency=12,
        queue={"enabled": False, "timeoutSeconds": 5, "maxWaiting": 7},
        cooldown={"defaultSeconds": 2, "maxSeconds": 9, "burstMultiplier": 3, "decaySeconds": 4},
        sticky={"ttlSeconds": 60, "maxEntries": 3},
        streams={"abortGraceSeconds": 0, "maxFailovers": 1},
    )
    chaos = config.chaos_mode
    assert chaos.enabled and chaos.sticky_conversations and not chaos.include_free_models
    assert chaos.quality_floor.for_tier("heavy") == "MEDIUM"
    assert chaos.strategy == "weighted-random"
    assert chaos.exclude_models == ("glm-4.5-x",)
    assert chaos.max_cost_per_request == 0.05
    assert config.models["big"].max_concurrency == 4
    assert (config.models["big"].input_price, config.models["big"].output_price) == (1.0, 2.0)
    assert config.upstream_hosts == ("api.example.com",)
    assert config.tier_rules.patterns == {"opus": "heavy"}
    assert config.tier_rules.default == "light"
    assert config.account_concurrency == 12
    assert config.total_capacity == 12
    assert (config.queue.enabled, config.queue.timeout_seconds, config.queue.max_waiting) == (False, 5, 7)
    assert (config.cooldown.default_seconds, config.cooldown.max_seconds) == (2, 9)
    assert (config.cooldown.burst_multiplier, config.cooldown.decay_seconds) == (3, 4)
    assert (config.sticky.ttl_seconds, config.sticky.max_entries) == (60, 3)
    assert (config.streams.abort_grace_seconds, config.streams.max_failovers) == (0, 1)
    # Serialising gives the file's spelling back.
    dumped = config.model_dump(by_alias=True)
    assert dumped["chaosMode"]["maxCostPerRequest"] == 0.05
    assert "accountConcurrency" in dumped


def test_account_cap_above_the_catalog_sum_is_the_catalog_sum() -> None:
    assert design(accountConcurrency=1000).total_capacity == 28
    assert routing(accountConcurrency=1000).total_capacity == 12


@pytest.mark.parametrize(
    ("block", "match"),
    [
        ({"chaosMode": {"stickyConversation": True}}, r"modelRouting\.chaosMode\.stickyConversation: Extra"),
        ({"bogus": 1}, r"modelRouting\.bogus: Extra inputs"),
        ({"chaosMode": {"strategy": "fastest"}}, r"modelRouting\.chaosMode\.strategy: Input should be"),
        ({"chaosMode": {"excludeModels": ["gpt-5"]}}, r"chaosMode\.excludeModels: not in the catalog: gpt-5"),
        (
            {"chaosMode": {"excludeModels": DEC_2026_HEAVY}},
            r"modelRouting\.chaosMode\.qualityFloor\.heavy: HEAVY leaves no model to serve heavy",
        ),
        (
            {"models": ONLY_FREE_LIGHT, "chaosMode": {"includeFreeModels": False}},
            r"chaosMode\.qualityFloor\.heavy: HEAVY leaves no model",
        ),
        (
            {
                "models": ONLY_FREE_LIGHT,
                "chaosMode": {
                    "includeFreeModels": False,
                    "qualityFloor": {"heavy": "LIGHT", "medium": "LIGHT"},
                },
            },
            r"qualityFloor\.heavy: LIGHT leaves no model .*includeFreeModels",
        ),
        (
            {"models": {"a": {"tier": "LIGHT", "maxConcurrency": 0}}},
            r"modelRouting\.models\.a\.maxConcurrency: Input should be greater than or equal to 1",
        ),
        ({"models": {}}, r"modelRouting\.models: the catalog must hold at least one model"),
        ({"models": {"a": {"tier": "HUGE", "maxConcurrency": 1}}}, r"modelRouting\.models\.a\.tier: "),
        ({"chaosMode": {"maxCostPerRequest": 0}}, r"chaosMode\.maxCostPerRequest: Input should be greater"),
        ({"accountConcurrency": 0}, r"modelRouting\.accountConcurrency: Input should be greater"),
        ({"cooldown": {"defaultSeconds": 10, "maxSeconds": 5}}, r"cooldown\.maxSeconds: must be at least"),
        ({"chaos_mode": {"strategy": "x"}}, r"modelRouting\.chaos_mode\.strategy: "),  # snake_case as written
    ],
)
def test_errors_name_the_key_as_written(block: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        routing(**block)


def test_config_error_is_a_value_error() -> None:
    assert issubclass(ConfigError, ValueError)


def test_config_objects_are_frozen() -> None:
    config = default_config()
    with pytest.raises(ValidationError, match="frozen"):
        config.chaos_mode.strategy = "round-robin"  # type: ignore[misc]
    with pytest.raises(ValidationError, match="frozen"):
        config.account_concurrency = 3  # type: ignore[misc]
    with pytest.raises(ValidationError, match="frozen"):
        config.models["glm-5.3"].max_concurrency = 99  # type: ignore[misc]


@pytest.mark.parametrize(
    ("tier", "models", "slots"),
    [
        ("heavy", HEAVY_MODELS, 8),
        ("medium", [*HEAVY_MODELS, "glm-4.5", "glm-4.5-air"], 23),
        ("light", list(SEED_CATALOG), 28),
    ],
)
def test_quality_floor_matrix(tier: Any, models: list[str], slots: int) -> None:
    config = design()
    eligible = config.eligible_models(tier)
    assert eligible == models
    assert sum(config.models[name].max_concurrency for name in eligible) == slots


@pytest.mark.parametrize(
    ("tier", "models", "slots"),
    [("heavy", DEC_2026_HEAVY, 5), ("medium", DEC_2026_MEDIUM, 10), ("light", DEC_2026_ALL, 12)],
)
def test_quality_floor_matrix_of_the_built_in_catalog(tier: Any, models: list[str], slots: int) -> None:
    config = default_config()
    eligible = config.eligible_models(tier)
    assert eligible == models
    assert sum(config.models[name].max_concurrency for name in eligible) == slots


def test_eligible_models_apply_exclusions_and_free_models() -> None:
    config = design(chaosMode={"excludeModels": ["glm-4.5"], "includeFreeModels": False})
    assert config.eligible_models("medium") == [*HEAVY_MODELS, "glm-4.5-air"]
    assert config.eligible_models("light") == [*HEAVY_MODELS, "glm-4.5-air", "glm-4.7-flashx"]


def test_a_lowered_floor_admits_lower_tiers() -> None:
    config = design(chaosMode={"qualityFloor": {"heavy": "MEDIUM"}})
    assert config.eligible_models("heavy") == [*HEAVY_MODELS, "glm-4.5", "glm-4.5-air"]
    assert (
        routing(chaosMode={"qualityFloor": {"heavy": "MEDIUM"}}).eligible_models("heavy") == DEC_2026_MEDIUM
    )


@pytest.mark.parametrize(
    ("block", "match"),
    [
        (
            {"models": {"a": {"tier": "HEAVY", "maxConcurrency": True}}},
            r"models\.a\.maxConcurrency: Input should",
        ),
        (
            {"models": {"a": {"tier": "HEAVY", "maxConcurrency": 3.0}}},
            r"models\.a\.maxConcurrency: Input should",
        ),
        (
            {"models": {"a": {"tier": "HEAVY", "maxConcurrency": "3"}}},
            r"models\.a\.maxConcurrency: Input should",
        ),
        (
            {"models": {"a": {"tier": "HEAVY", "maxConcurrency": 1e40}}},
            r"models\.a\.maxConcurrency: Input should",
        ),
        (
            {"models": {"a": {"tier": "HEAVY", "maxConcurrency": 10**40}}},
            r"models\.a\.maxConcurrency: Input should be less than or equal to 10000",
        ),
        (
            {"models": {"a": {"tier": "HEAVY", "maxConcurrency": 1, "inputPrice": float("inf")}}},
            r"models\.a\.inputPrice: Input should be a finite number",
        ),
        (
            {"models": {"a": {"tier": "HEAVY", "maxConcurrency": 1, "outputPrice": float("nan")}}},
            r"models\.a\.outputPrice: Input should be a finite number",
        ),
        (
            {"models": {"a": {"tier": "HEAVY", "maxConcurrency": 1, "inputPrice": True}}},
            r"models\.a\.inputPrice: Input should be a valid number",
        ),
        (
            {"models": {"a": {"tier": "HEAVY", "maxConcurrency": 1, "inputPrice": 1e40}}},
            r"models\.a\.inputPrice: Input should be less than or equal to 10000",
        ),
        (
            {"sticky": {"ttlSeconds": float("inf")}},
            r"modelRouting\.sticky\.ttlSeconds: Input should be a finite",
        ),
        ({"sticky": {"ttlSeconds": 1e40}}, r"modelRouting\.sticky\.ttlSeconds: Input should be less than"),
        ({"sticky": {"maxEntries": 10**40}}, r"modelRouting\.sticky\.maxEntries: Input should be less than"),
        (
            {"queue": {"timeoutSeconds": float("inf")}},
            r"modelRouting\.queue\.timeoutSeconds: Input should be a",
        ),
        ({"queue": {"maxWaiting": 10**12}}, r"modelRouting\.queue\.maxWaiting: Input should be less than"),
        (
            {"queue": {"maxWaiting": False}},
            r"modelRouting\.queue\.maxWaiting: Input should be a valid integer",
        ),
        ({"accountConcurrency": True}, r"modelRouting\.accountConcurrency: Input should be a valid integer"),
        ({"accountConcurrency": 10**40}, r"modelRouting\.accountConcurrency: Input should be less than"),
        ({"streams": {"maxBodyBytes": 10**40}}, r"modelRouting\.streams\.maxBodyBytes: Input should be less"),
        (
            {"chaosMode": {"maxCostPerRequest": float("inf")}},
            r"chaosMode\.maxCostPerRequest: Input should be",
        ),
        (
            {"models": {"": {"tier": "HEAVY", "maxConcurrency": 1}}},
            r"modelRouting\.models: model name '': must",
        ),
        (
            {"models": {" a": {"tier": "HEAVY", "maxConcurrency": 1}}},
            r"modelRouting\.models: model name ' a'",
        ),
        (
            {"models": {"glm-5.3\ud800": {"tier": "HEAVY", "maxConcurrency": 1}}},
            r"modelRouting\.models: model name 'glm-5\.3\\ud800': must .*lone surrogates",
        ),
        ({"aliases": {"glm-4.7": "glm-5.3\udfff"}}, r"modelRouting\.aliases: 'glm-5\.3\\udfff' is not"),
        (
            {"models": {"*account": {"tier": "HEAVY", "maxConcurrency": 1}}},
            r"modelRouting\.models: model name '\*account': .*not starting with '\*'",
        ),
        ({"upstreamHosts": []}, r"modelRouting\.upstreamHosts: must name at least one host"),
        ({"openaiPaths": "/api/paas/v4/chat/completions"}, r"modelRouting\.openaiPaths: Input should be"),
        ({"openaiPaths": ["api/paas"]}, r"modelRouting\.openaiPaths: 'api/paas': must be a URL path"),
        ({"openaiPaths": ["/a b"]}, r"modelRouting\.openaiPaths: '/a b': must be a URL path"),
        ({"openaiPaths": ["/chat?x=1"]}, r"modelRouting\.openaiPaths: '/chat\?x=1': must be a URL path"),
        ({"openaiPaths": ["/" + "a" * 300]}, r"modelRouting\.openaiPaths: '/a+'\.\.\.: must be a URL path"),
        ({"openaiPaths": [4]}, r"modelRouting\.openaiPaths\.0: Input should be a valid string"),
        (
            {"openaiPaths": ["/api/anthropic/v1/messages"]},
            r"openaiPaths: '/api/anthropic/v1/messages': is",
        ),
    ],
)
def test_wrong_values_are_refused_naming_the_key(block: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match) as raised:
        routing(**block)
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("https://api.z.ai", "'https://api.z.ai' is a URL; write the host name alone: api.z.ai"),
        ("HTTP://API.Z.AI:80/x", "'http://api.z.ai:80/x' is a URL; write the host name alone: api.z.ai"),
        ("https://", "'https://' is a URL; write the host name alone, e.g. api.z.ai"),
        ("api.z.ai:443", "'api.z.ai:443' has a port; write the host name alone: api.z.ai"),
        ("127.0.0.1:8700", "'127.0.0.1:8700' has a port; write the host name alone: 127.0.0.1"),
        ("api.z.ai/v1/messages", "'api.z.ai/v1/messages' has a path; write the host name alone: api.z.ai"),
        ("[::1]", "'[::1]' is in brackets; write the host name alone: ::1"),
        ("[::1]:8700", "'[::1]:8700' is in brackets; write the host name alone: ::1"),
        ("api.z.ai open.bigmodel.cn", "'api.z.ai open.bigmodel.cn' holds a space; write one host name per"),
        ("", "'': an empty entry; write a host name such as api.z.ai, or remove it"),
        ("  ", "'': an empty entry"),
        ("*.z.ai", "'*.z.ai': hosts are matched exactly, with no wildcards; list each host name in full"),
        ("api.z.ai.", "'api.z.ai.' is not a host name or IP address"),
        ("-api.z.ai", "'-api.z.ai' is not a host name or IP address"),
        ("api..z.ai", "'api..z.ai' is not a host name or IP address"),
        ("10.0.0", "'10.0.0' is not a host name or IP address"),
        ("256.0.0.1", "'256.0.0.1' is not a host name or IP address"),
        ("::1::2", "'::1::2' is not a host name or IP address"),
        ("api.z.ai:x", "'api.z.ai:x' is not a host name or IP address"),
        ("zß.ai", "'zß.ai' is not a host name or IP address"),
        ("a" * 64 + ".ai", "is not a host name or IP address"),
        ("a." * 127 + "ai", "'... is not a host name or IP address"),
    ],
)
def test_an_upstream_host_matching_nothing_is_refused_naming_the_fix(entry: str, message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        routing(upstreamHosts=["api.z.ai", entry])
    text = str(raised.value)
    assert text.startswith("config: modelRouting.upstreamHosts: '") and message in text
    assert "\n" not in text


def test_upstream_hosts_are_names_and_ip_literals_as_mitmproxy_shows_a_request_s_host() -> None:
    hosts = ["API.Z.AI", " open.bigmodel.cn ", "localhost", "my_service", "127.0.0.1", "::1", "FE80::1"]
    hosts.append("a" * 63)
    assert routing(upstreamHosts=hosts).upstream_hosts == (
        "api.z.ai",
        "open.bigmodel.cn",
        "localhost",
        "my_service",
        "127.0.0.1",
        "::1",
        "fe80::1",
        "a" * 63,
    )


@pytest.mark.parametrize(
    "data",
    [
        {"modelRouting": None},
        {"modelRouting": {"chaosMode": None, "models": None, "queue": None, "upstreamHosts": None}},
        {"modelRouting": {"chaosMode": {"strategy": None, "maxCostPerRequest": None}}},
    ],
)
def test_an_empty_key_takes_its_default(data: dict[str, Any]) -> None:
    assert parse_config(data) == default_config()


def test_openai_paths_default_to_both_z_ai_doors_and_are_normalised() -> None:
    assert default_config().openai_paths == (
        "/api/paas/v4/chat/completions",
        "/api/coding/paas/v4/chat/completions",
    )
    paths = routing(openaiPaths=[" /v1/chat/completions/ ", "/v1/chat/completions", "/"]).openai_paths
    assert paths == ("/v1/chat/completions", "/")
    assert routing(openaiPaths=[]).openai_paths == ()


def test_whole_numbers_may_be_written_for_seconds_and_prices() -> None:
    spec = routing(models={"a": {"tier": "HEAVY", "maxConcurrency": 2, "inputPrice": 1}}).models["a"]
    assert spec.input_price == 1.0 and isinstance(spec.input_price, float)


@given(name=st.text(st.characters(categories=["L", "N", "P", "Zs", "Cc", "Cs"]), min_size=1, max_size=6))
def test_a_model_name_taken_is_utf_8_text(name: str) -> None:
    """A name is logged, saved and scraped as UTF-8: a lone surrogate (JSON's "\\ud800") is refused."""
    try:
        config = routing(models={name: {"tier": "HEAVY", "maxConcurrency": 1}}, aliases={"x": name})
    except ConfigError as exc:
        str(exc).encode("utf-8")  # the refusal is printed too
        return
    for taken in (*config.models, *config.aliases.values()):
        taken.encode("utf-8")


def test_a_config_error_is_one_line() -> None:
    with pytest.raises(ConfigError) as raised:
        routing(models={"a\nb": {"tier": "HUGE", "maxConcurrency": 1}})
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize(
    ("block", "where"),
    [({"": 1}, "modelRouting.'': Extra inputs"), ({"a\nb": 1}, "modelRouting.'a\\nb': Extra inputs")],
)
def test_an_empty_or_odd_key_is_quoted_in_the_error(block: dict[str, object], where: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_config({"modelRouting": block})
    assert str(raised.value) == f"config: {where} are not permitted"


def test_the_quota_section_and_weights() -> None:
    config = default_config()
    assert (config.quota.pace, config.quota.poll_seconds, config.quota.window_seconds) == (
        False,
        60.0,
        18000.0,
    )
    assert config.quota_weight("glm-4.7") == 1.0 and config.quota_weight("not-in-catalog") == 1.0
    paced = routing(
        quota={"pace": True, "pollSeconds": 30},
        models={"glm-5": {"tier": "HEAVY", "maxConcurrency": 2, "quotaWeight": 3}},
    )
    assert paced.quota.pace and paced.quota.poll_seconds == 30.0 and paced.quota_weight("glm-5") == 3.0


@pytest.mark.parametrize(
    ("block", "match"),
    [
        ({"quota": {"pollSeconds": 0.5}}, r"modelRouting\.quota\.pollSeconds: Input should be greater"),
        (
            {"quota": {"pollSeconds": 600, "pollBackoffMaxSeconds": 60}},
            "pollBackoffMaxSeconds: must be at least",
        ),
        ({"quota": {"pace": "maybe"}}, r"modelRouting\.quota\.pace"),
        (
            {"models": {"a": {"tier": "HEAVY", "maxConcurrency": 1, "quotaWeight": -1}}},
            r"modelRouting\.models\.a\.quotaWeight",
        ),
    ],
)
def test_quota_values_are_refused_naming_the_key(block: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        routing(**block)


@pytest.mark.parametrize(
    ("data", "line"),
    [
        (
            {"chaosMode": {"enabled": True}},  # forgot the modelRouting level
            "config: chaosMode: Extra inputs are not permitted"
            " (a key of modelRouting: write it under modelRouting:)",
        ),
        (
            {"modelRoutng": {}},
            "config: modelRoutng: Extra inputs are not permitted (did you mean modelRouting?)",
        ),
        (
            {"modelRouting": {"chaosMod": {}}},
            "config: modelRouting.chaosMod: Extra inputs are not permitted (did you mean chaosMode?)",
        ),
        (
            {"modelRouting": {"chaosMode": {"enabld": True}}},
            "config: modelRouting.chaosMode.enabld: Extra inputs are not permitted (did you mean enabled?)",
        ),
        (
            {"modelRouting": {"models": {"m": {"tier": "HEAVY", "maxConcurrency": 1, "outputPrise": 1.0}}}},
            "config: modelRouting.models.m.outputPrise: Extra inputs are not permitted"
            " (did you mean outputPrice?)",
        ),
        ({"modelRouting": {"zzzzzz": 1}}, "config: modelRouting.zzzzzz: Extra inputs are not permitted"),
    ],
)
def test_an_unknown_key_gets_the_closest_known_one_or_the_block_it_belongs_under(
    data: Any, line: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_config(data)
    assert str(raised.value) == line
