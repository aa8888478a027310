"""Request outcomes, tokens, spend, failovers and the queue histogram (chaos_mode.observe.stats)."""

from __future__ import annotations

import json

import pytest

from chaos_mode.config.schema import parse_config
from chaos_mode.observe.stats import OTHER_MODEL, OUTCOMES, WAIT_BUCKETS, Stats, chaos_stats
from chaos_mode.routing import pool_status
from chaos_mode.routing.pool import ChaosPool, Ticket
from chaos_mode.routing.pool_status import served
from support.design_catalog import DESIGN_MODELS

CONFIG = parse_config({"modelRouting": {"models": DESIGN_MODELS}})
CATALOG = set(CONFIG.models)
DESIGN_ON = {"modelRouting": {"chaosMode": {"enabled": True}, "models": DESIGN_MODELS}}


def make_stats() -> Stats:
    return Stats(CONFIG, wall_clock=lambda: 1_757_000_000.0)


def test_labels_are_catalog_names_or_other() -> None:
    stats = make_stats()
    assert stats.label("glm-4.6") == "glm-4.6"
    assert stats.label("GLM-4.6") == OTHER_MODEL
    assert stats.label("claude-opus-4-5") == OTHER_MODEL
    assert stats.label(None) == OTHER_MODEL


def test_thousands_of_unknown_model_names_make_one_label() -> None:
    stats = make_stats()
    for i in range(5000):
        name = f"client-invented-model-{i}"
        stats.request_done(name, "medium", "passthrough")
        stats.upstream_error(name, "1211", 400)
        stats.usage(name, 10, 5)
    assert {model for model, _, _, _ in stats.requests} == {OTHER_MODEL}
    assert stats.requests[(OTHER_MODEL, "medium", "passthrough", "anthropic")] == 5000
    assert dict(stats.upstream_errors) == {(OTHER_MODEL, "1211"): 5000}
    assert dict(stats.input_tokens) == {OTHER_MODEL: 50_000}
    assert OTHER_MODEL not in stats.spend  # no price for a model that is not in the catalog
    document = chaos_stats(served(pool_status.status(ChaosPool(CONFIG))), stats)
    assert set(document["modelDistribution"]) == CATALOG
    assert len(json.dumps(document)) < 10_000


def test_error_codes_are_labelled_by_code_or_status() -> None:
    stats = make_stats()
    stats.upstream_error("glm-4.6", "1302", 429)
    stats.upstream_error("glm-4.6", None, 529)
    stats.upstream_error("glm-4.6", "1302", 429)
    assert dict(stats.upstream_errors) == {("glm-4.6", "1302"): 2, ("glm-4.6", "http-529"): 1}


def test_usage_adds_tokens_and_spend_at_list_prices() -> None:
    stats = make_stats()
    stats.usage("glm-4.5-x", 1_000_000, 500_000)
    stats.usage("glm-4.5-x", 0, 500_000)
    stats.usage("glm-4.7-flash", 2_000_000, 1_000_000)
    spec = CONFIG.models["glm-4.5-x"]
    assert stats.input_tokens["glm-4.5-x"] == 1_000_000
    assert stats.output_tokens["glm-4.5-x"] == 1_000_000
    assert stats.spend["glm-4.5-x"] == pytest.approx(spec.input_price + spec.output_price)
    assert stats.spend["glm-4.7-flash"] == 0.0


def test_outcomes_sum_over_models_and_tiers() -> None:
    stats = make_stats()
    stats.request_done("glm-4.6", "heavy", "ok")
    stats.request_done("glm-4.5", "medium", "ok")
    stats.request_done("glm-4.5", "medium", "aborted")
    stats.request_done(None, "light", "rejected")
    outcomes = stats.outcomes()
    assert list(outcomes) == list(OUTCOMES)
    assert outcomes == {"ok": 2, "error": 0, "rejected": 1, "aborted": 1, "passthrough": 0}


def test_requests_per_door_by_outcome_with_both_doors_always_present() -> None:
    stats = make_stats()
    empty = dict.fromkeys(OUTCOMES, 0)
    assert stats.outcomes_by_door() == {"anthropic": empty, "openai": empty}
    stats.request_done("glm-4.6", "heavy", "ok")  # the Anthropic door unless said otherwise
    stats.request_done("glm-4.6", "heavy", "ok", "openai")
    stats.request_done("glm-4.5", "medium", "rejected", "openai")
    stats.request_done("claude-x", "medium", "passthrough", "openai")
    by_door = stats.outcomes_by_door()
    assert by_door["anthropic"] == {**empty, "ok": 1}
    assert by_door["openai"] == {**empty, "ok": 1, "rejected": 1, "passthrough": 1}
    assert stats.outcomes() == {**empty, "ok": 2, "rejected": 1, "passthrough": 1}  # over both doors
    document = chaos_stats(served(pool_status.status(ChaosPool(CONFIG))), stats)
    assert document["requestsByDoor"] == by_door
    assert document["requests"] == stats.outcomes()


def test_queue_wait_buckets_are_cumulative() -> None:
    stats = make_stats()
    for seconds in (0.0, 0.3, 7.0, 500.0):
        stats.queue_wait("heavy", seconds)
    buckets = stats.wait_buckets["heavy"]
    expected = [sum(1 for s in (0.0, 0.3, 7.0, 500.0) if s <= bound) for bound in WAIT_BUCKETS]
    assert buckets == expected
    assert buckets == sorted(buckets)
    assert stats.wait_count["heavy"] == 4
    assert stats.wait_sum["heavy"] == pytest.approx(507.3)
    assert "light" not in stats.wait_buckets


def test_recent_failovers_are_bounded() -> None:
    stats = make_stats()
    for i in range(50):
        stats.failover("glm-4.6", "glm-4.7" if i % 2 else None, "concurrency limit (1302)")
    assert stats.failovers == 50
    assert len(stats.recent_failovers) == 20
    assert stats.recent_failovers[-1] == {
        "at": 1_757_000_000.0,
        "from": "glm-4.6",
        "to": "glm-4.7",
        "reason": "concurrency limit (1302)",
    }


def test_chaos_stats_has_the_seed_keys_and_per_model_extras() -> None:
    pool = ChaosPool(
        parse_config({"modelRouting": {"chaosMode": {"enabled": True}, "models": DESIGN_MODELS}})
    )
    stats = Stats(pool.config)
    assert pool.try_acquire(Ticket("heavy")) is not None
    stats.usage("glm-4.5", 10, 20)
    stats.upstream_error("glm-4.5", "1302", 429)
    stats.unread_answer("glm-4.5")
    stats.bad_requests["not-json"] += 2
    document = chaos_stats(served(pool_status.status(pool)), stats)
    for key in (
        "enabled",
        "strategy",
        "modelDistribution",
        "totalCapacity",
        "usedCapacity",
        "currentUtilization",
        "avgQueueWait",
    ):
        assert key in document
    assert document["enabled"] is True
    assert (document["usedCapacity"], document["totalCapacity"]) == (1, 28)
    row = document["modelDistribution"]["glm-4.5"]
    assert (row["tokensIn"], row["tokensOut"], row["upstreamErrors"]) == (10, 20, {"1302": 1})
    assert row["unreadAnswers"] == 1 and document["modelDistribution"]["glm-4.7"]["unreadAnswers"] == 0
    assert row["estimatedSpend"] == pytest.approx((10 * 0.6 + 20 * 2.2) / 1e6)
    assert document["badRequests"] == {"not-json": 2}
    assert document["requestRefusals"] == {}
    json.dumps(document)  # plain JSON all the way down


def test_refusals_found_the_requests_own_are_counted_apart_from_the_models() -> None:
    pool = ChaosPool(
        parse_config({"modelRouting": {"chaosMode": {"enabled": True}, "models": DESIGN_MODELS}})
    )
    stats = Stats(pool.config)
    stats.request_refusal("1305", 529)
    stats.request_refusal("1305", 429)
    stats.request_refusal("1399", 429)  # a code the table does not know: by its status, never raw
    document = chaos_stats(served(pool_status.status(pool)), stats)
    assert document["requestRefusals"] == {"1305": 2, "http-429": 1}
    assert all(not row["upstreamErrors"] for row in document["modelDistribution"].values())


def test_reconfigure_changes_what_is_a_catalog_label() -> None:
    stats = make_stats()
    assert stats.label("tiny") == OTHER_MODEL
    config = parse_config({"modelRouting": {"models": {"tiny": {"tier": "HEAVY", "maxConcurrency": 1}}}})
    stats.reconfigure(config)
    assert stats.label("tiny") == "tiny"
    assert stats.label("glm-4.6") == OTHER_MODEL


def test_the_cached_share_of_input_per_model() -> None:
    pool = ChaosPool(
        parse_config({"modelRouting": {"chaosMode": {"enabled": True}, "models": DESIGN_MODELS}})
    )
    stats = Stats(pool.config)
    stats.usage("glm-4.7", 1000, 10)  # cold
    stats.usage("glm-4.7", 500, 10, cached_tokens=1500)  # warm: 1,500 read from the cache, 500 fresh
    distribution = chaos_stats(served(pool_status.status(pool)), stats)["modelDistribution"]
    assert distribution["glm-4.7"]["tokensCached"] == 1500
    assert distribution["glm-4.7"]["cachedShare"] == 0.5  # 1,500 of 3,000
    assert distribution["glm-4.6"]["cachedShare"] == 0.0
