"""Prometheus metrics: values read from a real ChaosPool and Stats at scrape time, bounded labels, docs."""

from __future__ import annotations

import asyncio
import json
import random
import re
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import prometheus_client
import pytest
from prometheus_client.parser import text_string_to_metric_families

import chaos_mode
from chaos_mode.config.schema import ModelRouting, parse_config
from chaos_mode.doors.messages import BAD_KINDS
from chaos_mode.fleet.figures import FleetFigures
from chaos_mode.observe.metrics import KNOWN_CODES, METRICS, ChaosMetrics, code_label
from chaos_mode.observe.stats import OUTCOMES, WAIT_BUCKETS, Stats
from chaos_mode.quota.reading import QuotaReading, WindowReading
from chaos_mode.routing.pool import ChaosPool, Slot, Ticket
from chaos_mode.zai.catalog import REQUEST_TIERS
from chaos_mode.zai.errors import BEIJING, UpstreamError, classify_error
from support.design_catalog import ALL, CAPS, DESIGN_MODELS, FIXED_LIMITS, FREE, TIERS
from support.fakes import FakeClock
from support.learned import learn_account_limit, lower_glm_4_7, probe_glm_4_7
from support.quota_readings import five_hours

PACKAGE = Path(chaos_mode.__file__).resolve().parent
ROOT = Path(__file__).resolve().parents[2]
WALL_START = datetime(2026, 3, 1, 15, 0, 0, tzinfo=UTC).timestamp()


class Harness:
    """A pool, its stats and their metrics on fake clocks that move together."""

    def __init__(self, config: ModelRouting | None = None) -> None:
        config = config or routing(chaosMode={"enabled": True})
        self.clock = FakeClock(1000.0)
        self.wall = FakeClock(WALL_START)
        self.pool = ChaosPool(config, clock=self.clock, wall_clock=self.wall, rng=random.Random(0))
        self.stats = Stats(config, self.wall)
        self.metrics = ChaosMetrics(self.pool, self.stats)

    def advance(self, seconds: float) -> None:
        self.clock.now += seconds
        self.wall.now += seconds

    def value(self, name: str, **labels: str) -> float | None:
        return self.metrics.registry.get_sample_value(name, labels)

    def error(self, code: str, status: int = 429, message: str = "x") -> UpstreamError:
        body = json.dumps(
            {"type": "error", "error": {"type": "rate_limit_error", "code": code, "message": message}}
        )
        error = classify_error(status, body, now=self.wall())
        assert error is not None
        return error

    def scrape(self) -> dict[str, Any]:
        """Family name -> parsed family, from the text a scraper would read."""
        body, _ = self.metrics.render()
        return {family.name: family for family in text_string_to_metric_families(body.decode())}


def routing(**block: Any) -> ModelRouting:
    """A config over the design's (early-2026) catalog unless `block` gives its own `models`."""
    return parse_config({"modelRouting": {**FIXED_LIMITS, "models": DESIGN_MODELS, **block}})


@pytest.fixture
def h() -> Harness:
    return Harness()


# -- shape ---------------------------------------------------------------------------------------


def test_exposes_exactly_the_documented_metrics_with_one_prefix(h: Harness) -> None:
    families = h.scrape()
    expected = {spec.family: spec for spec in METRICS}
    assert set(families) == set(expected)
    for name, family in families.items():
        spec = expected[name]
        assert name.startswith("chaos_")
        assert family.type == spec.type
        for sample in family.samples:
            assert set(sample.labels) - {"le"} == set(spec.labels), sample
            if spec.type == "counter":
                assert sample.name.endswith("_total"), sample.name


def test_content_type_is_the_prometheus_text_format(h: Harness) -> None:
    body, content_type = h.metrics.render()
    assert content_type == "text/plain; version=0.0.4; charset=utf-8"
    assert b"# TYPE chaos_requests_total counter" in body


def test_account_gauges(h: Harness) -> None:
    assert h.value("chaos_enabled") == 1.0
    assert h.value("chaos_strategy_info", strategy="least-loaded") == 1.0
    assert h.value("chaos_capacity") == 28.0
    assert h.value("chaos_in_flight") == 0.0
    assert h.value("chaos_utilization_ratio") == 0.0
    off = Harness(routing(chaosMode={"enabled": False, "strategy": "round-robin"}, accountConcurrency=20))
    assert off.value("chaos_enabled") == 0.0
    assert off.value("chaos_strategy_info", strategy="round-robin") == 1.0
    assert off.value("chaos_strategy_info", strategy="least-loaded") is None
    assert off.value("chaos_capacity") == 20.0


def test_model_info_carries_the_catalog_tier(h: Harness) -> None:
    for name in ALL:
        free = str(name in FREE).lower()
        assert h.value("chaos_model_info", model=name, tier=TIERS[name], free=free) == 1.0


# -- read from the pool at scrape time ------------------------------------------------------------


def test_in_flight_capacity_and_dispatched_follow_the_pool(h: Harness) -> None:
    for name, capacity in CAPS.items():
        assert h.value("chaos_model_capacity", model=name) == capacity
        assert h.value("chaos_model_in_flight", model=name) == 0.0
        assert h.value("chaos_model_dispatched_total", model=name) == 0.0
    first = h.pool.acquire("glm-4.7")
    assert first
    assert h.pool.acquire("glm-4.7")
    other = h.pool.acquire("glm-4.5")
    assert other
    assert h.value("chaos_model_in_flight", model="glm-4.7") == 2.0
    assert h.value("chaos_model_in_flight", model="glm-4.5") == 1.0
    assert h.value("chaos_in_flight") == 3.0
    assert h.value("chaos_utilization_ratio") == pytest.approx(3 / 28, abs=1e-4)
    assert h.pool.release(first)
    assert h.pool.release(other)
    assert h.value("chaos_model_in_flight", model="glm-4.7") == 1.0
    assert h.value("chaos_model_in_flight", model="glm-4.5") == 0.0
    assert h.value("chaos_in_flight") == 1.0
    assert h.value("chaos_model_dispatched_total", model="glm-4.7") == 2.0
    assert h.value("chaos_model_dispatched_total", model="glm-4.5") == 1.0


def test_spurious_release_is_counted(h: Harness) -> None:
    slot = h.pool.acquire("glm-4.6")
    assert slot is not None and h.pool.release(slot)
    assert h.value("chaos_spurious_releases_total") == 0.0
    assert not h.pool.release(slot)  # given back already
    assert h.value("chaos_spurious_releases_total") == 1.0
    assert h.value("chaos_model_in_flight", model="glm-4.6") == 0.0


def test_cooldown_seconds_count_down_with_the_clock(h: Harness) -> None:
    assert h.value("chaos_model_cooldown_seconds", model="glm-4.7") == 0.0
    assert h.pool.error("glm-4.7", h.error("1302")) == 5.0
    assert h.value("chaos_model_cooldown_seconds", model="glm-4.7") == 5.0
    h.advance(2.0)
    assert h.value("chaos_model_cooldown_seconds", model="glm-4.7") == pytest.approx(3.0)
    assert h.value("chaos_model_out_of_rotation", model="glm-4.7") == 0.0
    h.advance(3.5)
    assert h.value("chaos_model_cooldown_seconds", model="glm-4.7") == 0.0


def test_out_of_rotation_is_a_zero_one_gauge_without_a_reason_label(h: Harness) -> None:
    h.pool.error("glm-4.5-x", h.error("1113"))
    assert h.value("chaos_model_out_of_rotation", model="glm-4.5-x") == 1.0
    assert h.value("chaos_model_cooldown_seconds", model="glm-4.5-x") == 0.0  # out is not a countdown
    assert h.value("chaos_model_out_of_rotation", model="glm-4.7") == 0.0
    # Its slots leave the usable capacity and are shown apart (issue 13).
    assert (h.value("chaos_capacity"), h.value("chaos_out_capacity")) == (26.0, 2.0)
    assert h.pool.restore("glm-4.5-x")
    assert h.value("chaos_model_out_of_rotation", model="glm-4.5-x") == 0.0
    assert (h.value("chaos_capacity"), h.value("chaos_out_capacity")) == (28.0, 0.0)


def test_excluded_models() -> None:
    h = Harness(routing(chaosMode={"enabled": True, "excludeModels": ["glm-4.5-x"]}))
    assert h.value("chaos_model_excluded", model="glm-4.5-x") == 1.0
    assert h.value("chaos_model_excluded", model="glm-4.7") == 0.0
    assert (h.value("chaos_capacity"), h.value("chaos_out_capacity")) == (26.0, 2.0)


def test_account_pause_seconds(h: Harness) -> None:
    assert h.value("chaos_account_pause_seconds") == 0.0
    h.pool.error("glm-4.7", h.error("1308", message="[1308][Usage limit reached]"), retry_after=120.0)
    assert h.value("chaos_account_pause_seconds") == pytest.approx(120.0)
    h.advance(20.0)
    assert h.value("chaos_account_pause_seconds") == pytest.approx(100.0)


async def test_queue_length_by_tier_longest_wait_and_timeouts(h: Harness) -> None:
    held: dict[str, list[Slot]] = {}
    for model in ("glm-4.7", "glm-4.6", "glm-4.5-x"):
        while slot := h.pool.acquire(model):
            held.setdefault(model, []).append(slot)
    waiters = [asyncio.create_task(h.pool.admit(Ticket("heavy"), timeout=60)) for _ in range(2)]
    await asyncio.sleep(0)  # let them join the queue
    assert h.value("chaos_queue_waiting", tier="heavy") == 2.0
    assert h.value("chaos_queue_waiting", tier="medium") == 0.0
    assert h.value("chaos_queue_waiting", tier="light") == 0.0
    h.advance(1.5)
    assert h.value("chaos_queue_longest_wait_seconds") == pytest.approx(1.5)
    assert h.pool.release(held["glm-4.7"].pop())
    assert h.pool.release(held["glm-4.6"].pop())
    assert [s.model for s in await asyncio.gather(*waiters) if s] == ["glm-4.7", "glm-4.6"]
    assert h.value("chaos_queue_waiting", tier="heavy") == 0.0
    assert h.value("chaos_queue_longest_wait_seconds") == 0.0
    assert await h.pool.admit(Ticket("heavy"), timeout=0) is None
    assert h.value("chaos_queue_timeouts_total") == 1.0


def test_sticky_gauges() -> None:
    h = Harness(routing(chaosMode={"enabled": True, "stickyConversations": True}))
    assert h.pool.try_acquire(Ticket("light", sticky_key="conv-a")) is not None
    assert h.value("chaos_sticky_entries") == 1.0
    assert h.value("chaos_sticky_moves_total") == 0.0


# -- learned limits --------------------------------------------------------------------------------


def learning(**block: Any) -> Harness:
    """A harness whose pool learns limits (the other tests fix them at the catalog's values)."""
    return Harness(
        parse_config({"modelRouting": {"chaosMode": {"enabled": True}, "models": DESIGN_MODELS, **block}})
    )


def test_learned_limits_follow_a_1302_and_an_answered_probe() -> None:
    h = learning()
    for name, capacity in CAPS.items():
        assert h.value("chaos_model_learned_limit", model=name) == capacity
        assert h.value("chaos_model_catalog_limit", model=name) == capacity
        assert h.value("chaos_model_probing", model=name) == 0.0
    lower_glm_4_7(h.pool, h.error("1302"))  # z.ai: 3 at once is too many
    assert h.value("chaos_model_learned_limit", model="glm-4.7") == 2.0
    assert h.value("chaos_model_capacity", model="glm-4.7") == 2.0  # the limit in force
    assert h.value("chaos_model_catalog_limit", model="glm-4.7") == 3.0  # the starting guess stays
    assert h.value("chaos_model_learned_limit", model="glm-4.6") == 3.0
    assert h.value("chaos_capacity") == 27.0

    h.advance(10.0)  # the probe interval after the 1302
    probe = probe_glm_4_7(h.pool)
    assert h.value("chaos_model_probing", model="glm-4.7") == 1.0
    assert h.value("chaos_model_probing", model="glm-4.6") == 0.0
    assert h.value("chaos_model_learned_limit", model="glm-4.7") == 2.0  # not raised before z.ai answers
    h.pool.ledger.success(probe)
    assert h.value("chaos_model_probing", model="glm-4.7") == 0.0
    assert h.value("chaos_model_learned_limit", model="glm-4.7") == 3.0
    assert h.value("chaos_model_capacity", model="glm-4.7") == 3.0
    assert h.value("chaos_account_probing") == 0.0


def test_an_overdue_attempt_is_counted_until_its_verdict() -> None:
    h = learning()
    slot = h.pool.try_acquire(Ticket("heavy"))
    assert slot is not None and h.value("chaos_model_overdue", model=slot.model) == 0.0
    h.pool.ledger.overdue(slot)
    assert h.value("chaos_model_overdue", model=slot.model) == 1.0
    h.pool.error(slot.model, h.error("1302"), None, slot)
    assert h.value("chaos_model_overdue", model=slot.model) == 0.0
    assert h.pool.release(slot)


def test_account_limit_has_no_sample_until_one_is_learned() -> None:
    h = learning()
    assert h.value("chaos_account_limit") is None
    assert "chaos_account_limit" in h.scrape()  # described all the same
    learn_account_limit(h.pool, h.error("1302"))
    assert h.value("chaos_account_limit") == 3.0
    assert h.value("chaos_model_learned_limit", model="glm-4.5") == 10.0  # the account's fault, not its
    assert h.value("chaos_capacity") == 3.0

    h.advance(10.0)  # the probe interval after the 1302
    probe = h.pool.try_acquire(Ticket("medium"))
    assert probe is not None and (probe.probe, probe.total) == ("account", 4)
    assert h.value("chaos_account_probing") == 1.0
    h.pool.ledger.success(probe)
    assert h.value("chaos_account_probing") == 0.0
    assert h.value("chaos_account_limit") is None  # served at 4 after all: no account limit is known


def test_account_limit_is_the_configured_one_and_fixed_limits_are_the_catalog() -> None:
    configured = learning(accountConcurrency=20)
    assert configured.value("chaos_account_limit") == 20.0
    fixed = Harness(routing(chaosMode={"enabled": True}, accountConcurrency=12))
    assert fixed.value("chaos_account_limit") == 12.0
    assert fixed.pool.acquire("glm-4.7")
    fixed.pool.error("glm-4.7", fixed.error("1302"))  # learning off: a cooldown, no new limit
    assert fixed.value("chaos_model_learned_limit", model="glm-4.7") == 3.0
    assert fixed.value("chaos_model_capacity", model="glm-4.7") == 3.0
    assert fixed.value("chaos_model_cooldown_seconds", model="glm-4.7") == 5.0


# -- read from the stats -------------------------------------------------------------------------


def test_requests_by_model_tier_and_outcome(h: Harness) -> None:
    h.stats.request_done("glm-4.7", "heavy", "ok")
    h.stats.request_done("glm-4.7", "heavy", "ok")
    h.stats.request_done("glm-4.5", "medium", "error")
    h.stats.request_done("claude-sonnet-4-5", "medium", "passthrough")
    assert (
        h.value("chaos_requests_total", model="glm-4.7", tier="heavy", outcome="ok", door="anthropic") == 2.0
    )
    assert (
        h.value("chaos_requests_total", model="glm-4.5", tier="medium", outcome="error", door="anthropic")
        == 1.0
    )
    assert (
        h.value("chaos_requests_total", model="other", tier="medium", outcome="passthrough", door="anthropic")
        == 1.0
    )
    assert (
        h.value("chaos_requests_total", model="glm-4.7", tier="heavy", outcome="error", door="anthropic")
        is None
    )


def test_requests_by_door(h: Harness) -> None:
    h.stats.request_done("glm-4.7", "heavy", "ok", "openai")
    h.stats.request_done("glm-4.7", "heavy", "ok", "anthropic")
    h.stats.request_done("glm-4.5", "medium", "rejected", "openai")
    h.stats.requests[("glm-4.5", "medium", "rejected", "smtp")] += 1  # type: ignore[index]  # never recorded
    assert h.value("chaos_requests_total", model="glm-4.7", tier="heavy", outcome="ok", door="openai") == 1.0
    assert (
        h.value("chaos_requests_total", model="glm-4.7", tier="heavy", outcome="ok", door="anthropic") == 1.0
    )
    assert (
        h.value("chaos_requests_total", model="glm-4.5", tier="medium", outcome="rejected", door="openai")
        == 1.0
    )
    assert (
        h.value("chaos_requests_total", model="glm-4.5", tier="medium", outcome="rejected", door="other")
        == 1.0
    )


def test_upstream_errors_by_model_and_code(h: Harness) -> None:
    h.stats.upstream_error("glm-4.7", "1302", 429)
    h.stats.upstream_error("glm-4.7", "1302", 429)
    h.stats.upstream_error("glm-4.5-x", "1113", 429)
    h.stats.upstream_error("glm-4.5", None, 503)
    assert h.value("chaos_upstream_errors_total", model="glm-4.7", code="1302") == 2.0
    assert h.value("chaos_upstream_errors_total", model="glm-4.5-x", code="1113") == 1.0
    assert h.value("chaos_upstream_errors_total", model="glm-4.5", code="http-503") == 1.0


def test_tokens_and_estimated_cost(h: Harness) -> None:
    assert h.value("chaos_tokens_total", model="glm-4.7", direction="input") == 0.0
    h.stats.usage("glm-4.7", 1_000_000, 500_000)
    h.stats.usage("glm-4.7", 1_000, 0)
    h.stats.usage("glm-4.7-flash", 2_000, 3_000)
    assert h.value("chaos_tokens_total", model="glm-4.7", direction="input") == 1_001_000
    assert h.value("chaos_tokens_total", model="glm-4.7", direction="output") == 500_000
    # $0.60 per 1M in, $2.20 per 1M out.
    assert h.value("chaos_estimated_cost_dollars_total", model="glm-4.7") == pytest.approx(0.6006 + 1.1)
    assert h.value("chaos_tokens_total", model="glm-4.7-flash", direction="output") == 3_000
    assert h.value("chaos_estimated_cost_dollars_total", model="glm-4.7-flash") == 0.0


def test_failovers_total(h: Harness) -> None:
    h.stats.failover("glm-4.7", "glm-4.6", "concurrency limit (1302)")
    h.stats.failover("glm-4.6", None, "concurrency limit (1302)")
    assert h.value("chaos_failovers_total") == 2.0


def test_queue_wait_histogram_by_tier(h: Harness) -> None:
    for seconds in (0.0, 0.3, 0.3, 7.0):
        h.stats.queue_wait("heavy", seconds)
    h.stats.queue_wait("light", 200.0)
    expected_heavy = {0.005: 1, 0.025: 1, 0.1: 1, 0.25: 1, 0.5: 3, 1.0: 3, 2.5: 3, 5.0: 3, 10.0: 4}
    for bound in WAIT_BUCKETS:
        le = repr(float(bound))
        assert h.value("chaos_queue_wait_seconds_bucket", tier="heavy", le=le) == expected_heavy.get(bound, 4)
        assert h.value("chaos_queue_wait_seconds_bucket", tier="light", le=le) == 0.0
        assert h.value("chaos_queue_wait_seconds_bucket", tier="medium", le=le) == 0.0
    assert h.value("chaos_queue_wait_seconds_bucket", tier="heavy", le="+Inf") == 4.0
    assert h.value("chaos_queue_wait_seconds_count", tier="heavy") == 4.0
    assert h.value("chaos_queue_wait_seconds_sum", tier="heavy") == pytest.approx(7.6)
    assert h.value("chaos_queue_wait_seconds_bucket", tier="light", le="+Inf") == 1.0
    assert h.value("chaos_queue_wait_seconds_sum", tier="light") == 200.0


def test_bad_requests_by_kind(h: Harness) -> None:
    assert h.value("chaos_bad_requests_total", kind="not-json") == 0.0
    h.stats.bad_requests["not-json"] += 2
    assert h.value("chaos_bad_requests_total", kind="not-json") == 2.0


def test_unread_answers_by_model(h: Harness) -> None:
    assert h.value("chaos_unread_answers_total", model="glm-4.7") is None  # none yet: no sample
    h.stats.unread_answer("glm-4.7")
    h.stats.unread_answer("glm-9-unknown")
    assert h.value("chaos_unread_answers_total", model="glm-4.7") == 1.0
    assert h.value("chaos_unread_answers_total", model="other") == 1.0


def test_request_refusals_by_code(h: Harness) -> None:
    assert h.value("chaos_request_refusals_total", code="1305") is None  # none yet: no sample
    h.stats.request_refusal("1305", 529)
    h.stats.request_refusal("1305", 429)
    h.stats.request_refusals['1305"} 1\nevil'] += 1  # never a raw label
    assert h.value("chaos_request_refusals_total", code="1305") == 2.0
    assert h.value("chaos_request_refusals_total", code="other") == 1.0


@pytest.mark.parametrize("kind", BAD_KINDS)
def test_every_kind_of_bad_request_has_its_own_label(h: Harness, kind: str) -> None:
    h.stats.bad_requests[kind] += 1
    assert h.value("chaos_bad_requests_total", kind=kind) == 1.0
    assert not h.value("chaos_bad_requests_total", kind="other")  # never folded into other


# -- bounded labels ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "label"),
    [
        ("1302", "1302"),
        ("1113", "1113"),
        ("http-429", "http-429"),
        ("http-503", "http-503"),
        ("9999", "other"),
        ("13020", "other"),
        ("http-999", "other"),
        ("http-42", "other"),
        ("http-429x", "other"),
        ('1302"} 1\nevil', "other"),
        ("", "other"),
    ],
)
def test_code_label(code: str, label: str) -> None:
    assert code_label(code) == label


def test_known_codes_are_the_design_table() -> None:
    assert {
        "1302", "1303", "1304", "1305", "1308", "1309", "1310", "1311", "1312", "1313", "1113", "1211",
        "1314", "1315", "1316", "1317", "1318", "1319", "1320", "1321",
    } == KNOWN_CODES  # fmt: skip


def _series(h: Harness) -> Iterator[tuple[str, dict[str, str]]]:
    for family in h.scrape().values():
        for sample in family.samples:
            yield sample.name, sample.labels


def test_labels_stay_bounded_when_clients_send_thousands_of_model_names(h: Harness) -> None:
    before = sum(1 for _ in _series(h))
    for i in range(5000):
        name = f"claude-sonnet-{i}-{random.Random(i).random()}"
        h.stats.request_done(name, "medium", "ok")
        h.stats.usage(name, 10, 5)
        h.stats.upstream_error(name, str(20000 + i), 429)  # codes not in z.ai's table: fold into http-429
        h.stats.upstream_error(name, None, 400 + i % 200)
        h.stats.queue_wait("medium", 0.001)
    series = list(_series(h))
    allowed_models = {*ALL, "other"}
    codes = set()
    for name, labels in series:
        assert labels.get("model", "other") in allowed_models, (name, labels)
        assert labels.get("tier", "heavy") in {*REQUEST_TIERS, "HEAVY", "MEDIUM", "LIGHT"}
        assert labels.get("outcome", "ok") in OUTCOMES
        if "code" in labels:
            codes.add(labels["code"])
    assert codes <= {*KNOWN_CODES, "other"} | {f"http-{s}" for s in range(400, 600)}
    assert not any(code.isdigit() and code not in KNOWN_CODES for code in codes)
    # Only the series of the catalog, the fixed sets and `other` were added; never one per client name.
    # requests (1), tokens in/out/cached and cost of `other` (4), upstream errors: http-4xx/5xx
    assert len(series) - before <= 1 + 4 + 200
    assert (
        h.value("chaos_requests_total", model="other", tier="medium", outcome="ok", door="anthropic")
        == 5000.0
    )
    assert h.value("chaos_tokens_total", model="other", direction="input") == 50_000.0
    # 5000 unknown codes on 429s, plus the 25 bare 429s of the status sweep.
    assert h.value("chaos_upstream_errors_total", model="other", code="http-429") == 5025.0


def test_a_model_dropped_from_the_catalog_folds_into_other(h: Harness) -> None:
    h.stats.usage("glm-4.5-x", 100, 10)
    h.stats.request_done("glm-4.5-x", "heavy", "ok")
    smaller = routing(chaosMode={"enabled": True}, models={"glm-4.7": {"tier": "HEAVY", "maxConcurrency": 3}})
    h.pool.reconfigure(smaller)
    h.stats.reconfigure(smaller)
    models = {labels["model"] for _, labels in _series(h) if "model" in labels}
    assert models == {"glm-4.7", "other"}
    assert h.value("chaos_requests_total", model="other", tier="heavy", outcome="ok", door="anthropic") == 1.0


# -- one registry per instance -------------------------------------------------------------------


def test_registry_per_instance_and_never_the_global_one() -> None:
    a, b = Harness(), Harness()
    assert a.metrics.registry is not b.metrics.registry
    assert a.pool.acquire("glm-4.7")
    a.stats.request_done("glm-4.7", "heavy", "ok")
    assert a.value("chaos_model_in_flight", model="glm-4.7") == 1.0
    assert b.value("chaos_model_in_flight", model="glm-4.7") == 0.0
    assert (
        b.value("chaos_requests_total", model="glm-4.7", tier="heavy", outcome="ok", door="anthropic") is None
    )
    for name in ("chaos_capacity", "chaos_in_flight", "chaos_enabled"):
        assert prometheus_client.REGISTRY.get_sample_value(name) is None
    # A re-imported script builds a new instance: no "Duplicated timeseries" from the old one.
    again = ChaosMetrics(a.pool, a.stats)
    assert again.registry.get_sample_value("chaos_model_in_flight", {"model": "glm-4.7"}) == 1.0


# -- docs ----------------------------------------------------------------------------------------


def test_metrics_reference_documents_exactly_the_exposed_metrics() -> None:
    text = (ROOT / "docs" / "METRICS.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\|\s*`(chaos_\w+)`\s*\|\s*(\w+)\s*\|([^|]*)\|", text, re.M)
    documented = {name: (kind, {label.strip(" `") for label in labels.split(",") if label.strip(" `—")})
                  for name, kind, labels in rows}  # fmt: skip
    assert documented == {spec.name: (spec.type, set(spec.labels)) for spec in METRICS}


def test_grafana_dashboard_plots_only_exposed_metrics() -> None:
    dashboard = json.loads((PACKAGE / "observe" / "grafana" / "chaos-mode.json").read_text(encoding="utf-8"))
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    assert len(exprs) >= 10
    exposed = {spec.name for spec in METRICS}
    exposed |= {
        spec.name + suffix
        for spec in METRICS
        if spec.type == "histogram"
        for suffix in ("_bucket", "_sum", "_count")
    }
    exprs += [v["definition"] for v in variables.values() if "definition" in v]
    used = {name for expr in exprs for name in re.findall(r"\bchaos_\w+", expr)}
    assert used <= exposed, used - exposed
    assert {spec.name for spec in METRICS if spec.type != "histogram"} - used <= {
        "chaos_spurious_releases_total", "chaos_model_excluded", "chaos_sticky_entries",
    }  # fmt: skip
    for panel in dashboard["panels"]:
        if panel.get("type") != "row":
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}


def test_grafana_dashboard_plots_learned_against_catalog_limits() -> None:
    dashboard = json.loads((PACKAGE / "observe" / "grafana" / "chaos-mode.json").read_text(encoding="utf-8"))
    plotted = {
        panel["title"]: {name for t in panel["targets"] for name in re.findall(r"\bchaos_\w+", t["expr"])}
        for panel in dashboard["panels"]
        if panel["type"] == "timeseries"
    }
    both = [
        title
        for title, names in plotted.items()
        if {"chaos_model_learned_limit", "chaos_model_catalog_limit"} <= names
    ]
    assert both == ["Learned vs catalog limit by model"]
    assert any("chaos_account_limit" in names for names in plotted.values())


def test_fleet_figures_only_with_a_fleet() -> None:
    alone = Harness()
    assert alone.value("chaos_fleet_connected") is None and alone.value("chaos_fleet_proxies") is None
    figures = FleetFigures(connected=True, proxies=3, own_in_flight=2, outages=1, lost_races=7)
    h = Harness()
    h.metrics = ChaosMetrics(h.pool, h.stats, lambda: figures)
    assert h.value("chaos_fleet_connected") == 1
    assert h.value("chaos_fleet_proxies") == 3 and h.value("chaos_fleet_own_in_flight") == 2
    assert h.value("chaos_fleet_outages_total") == 1 and h.value("chaos_fleet_lost_races_total") == 7
    figures = replace(figures, connected=False, proxies=0, outages=2)
    assert h.value("chaos_fleet_connected") == 0 and h.value("chaos_fleet_outages_total") == 2


# -- the 5-hour quota ------------------------------------------------------------------------------


def test_the_quota_gauges_follow_the_estimate(h: Harness) -> None:
    assert (
        h.value("chaos_quota_used_ratio", window="5h") is None
        and h.value("chaos_quota_resets_at_seconds", window="5h") is None
    )
    assert h.value("chaos_quota_source_info", source="estimate") == 1.0
    for _ in range(4):
        slot = h.pool.try_acquire(Ticket("light"))
        assert slot is not None
        h.pool.ledger.success(slot)
        h.pool.release(slot)
        h.advance(60)
    assert h.value("chaos_quota_counted_prompts") == 4.0
    assert h.value("chaos_quota_used_ratio", window="5h") is None  # no scale yet
    reset = datetime.fromtimestamp(h.wall() + 3600, UTC).astimezone(BEIJING).strftime("%Y-%m-%d %H:%M:%S")
    h.pool.error("glm-4.5", h.error("1308", message=f"[1308][Your limit will reset at {reset}]"))
    assert h.value("chaos_quota_used_ratio", window="5h") == 1.0
    assert h.value("chaos_quota_resets_at_seconds", window="5h") == pytest.approx(h.wall() + 3600, abs=1)
    assert h.value("chaos_quota_runs_out_at_seconds", window="5h") == h.wall()  # spent now
    assert h.value("chaos_quota_burn_ratio_per_hour", window="5h") == pytest.approx(1.0 / (4 * 60) * 3600)


def test_quota_read_failures_are_counted(h: Harness) -> None:
    assert h.value("chaos_quota_read_failures_total") == 0.0
    h.pool.quota.failed("HTTP 500")
    h.pool.quota.failed("HTTP 500")
    assert h.value("chaos_quota_read_failures_total") == 2.0


def test_the_pacing_metrics() -> None:
    h = Harness(routing(chaosMode={"enabled": True}, quota={"pace": True}))
    assert h.value("chaos_quota_paced_max_concurrency") is None
    assert h.value("chaos_quota_paced_waits_total") == 0.0
    held = [h.pool.try_acquire(Ticket("light")) for _ in range(6)]
    h.advance(100)
    h.pool.quota.read(five_hours(60.0, h.wall() + 5 * 3600 - 1.5 * 3600))  # 40%/h, 3.5 h to go
    h.pool.try_acquire(Ticket("light"))  # the plan is worked out at a selection
    assert h.value("chaos_quota_paced_max_concurrency") == 1.0  # 6 x 10.6 / 40
    for slot in held:
        assert slot is not None
        h.pool.release(slot)


def test_every_window_read_has_its_gauges_and_credits(h: Harness) -> None:
    now = h.wall()
    h.pool.quota.read(
        QuotaReading(
            (
                WindowReading("5h", 5 * 3600.0, 0.0, None, 2000.0, 0.0, 2000.0),  # not started
                WindowReading("1w", 7 * 86400.0, 40.0, now + 6 * 86400, 10000.0, 4000.0, 6000.0),
            )
        )
    )
    assert h.value("chaos_quota_used_ratio", window="5h") == 0.0
    assert h.value("chaos_quota_resets_at_seconds", window="5h") is None  # starts at first use
    assert h.value("chaos_quota_used_ratio", window="1w") == 0.4
    assert h.value("chaos_quota_resets_at_seconds", window="1w") == now + 6 * 86400
    assert h.value("chaos_quota_runs_out_at_seconds", window="1w") == pytest.approx(now + 1.5 * 86400)
    assert h.value("chaos_quota_credits", window="1w", figure="used") == 4000.0
    assert h.value("chaos_quota_credits", window="5h", figure="left") == 2000.0


def test_the_estimate_in_credits_has_its_credit_gauges() -> None:
    h = Harness(routing(chaosMode={"enabled": True}, quota={"unit": "credits"}))
    assert h.value("chaos_quota_credits", window="5h", figure="used") == 0.0
    h.pool.quota.charged("glm-4.5", 12.5)
    assert h.value("chaos_quota_counted_prompts") == 12.5  # credits, on a credit plan
    assert h.value("chaos_quota_credits", window="5h", figure="used") == 12.5
    assert h.value("chaos_quota_credits", window="5h", figure="cap") is None  # no scale yet
    h.pool.quota.spent(h.wall() + 3600)
    assert h.value("chaos_quota_credits", window="5h", figure="cap") == 12.5
    assert h.value("chaos_quota_credits", window="5h", figure="left") == 0.0
