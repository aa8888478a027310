"""Prometheus metrics read from the pool and the stats at scrape time, in a registry owned by the addon."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Final, Literal

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from chaos_mode.doors.door import DOORS
from chaos_mode.doors.messages import BAD_KINDS
from chaos_mode.fleet.figures import FleetFigures
from chaos_mode.observe.stats import OTHER_MODEL, OUTCOMES, WAIT_BUCKETS, Stats
from chaos_mode.routing import pool_status
from chaos_mode.routing.pool import ChaosPool
from chaos_mode.routing.pool_status import ModelStatus, PoolStatus, QueueStatus
from chaos_mode.zai.catalog import REQUEST_TIERS
from chaos_mode.zai.errors import KNOWN_CODES

PREFIX: Final = "chaos_"
OTHER: Final = "other"  # the label value every out-of-set value folds into
_HTTP_CODE = re.compile(r"^http-[1-5]\d\d$")

MetricType = Literal["counter", "gauge", "histogram"]


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """One exposed metric: its full name as scraped (counters with `_total`), type, labels, meaning."""

    name: str
    type: MetricType
    labels: tuple[str, ...]
    help: str

    @property
    def family(self) -> str:
        """The family name prometheus_client wants (a counter's name without `_total`)."""
        return self.name.removesuffix("_total") if self.type == "counter" else self.name


def _spec(name: str, kind: MetricType, labels: tuple[str, ...], help_text: str) -> MetricSpec:
    return MetricSpec(PREFIX + name, kind, labels, help_text)


# Every metric the collector exposes, in exposition order. METRICS.md documents exactly these.
METRICS: Final[tuple[MetricSpec, ...]] = (
    _spec("enabled", "gauge", (), "1 when chaos mode routes requests, 0 when it passes them through."),
    _spec("strategy_info", "gauge", ("strategy",), "Always 1; the label names the selection strategy."),
    _spec(
        "capacity",
        "gauge",
        (),
        "Usable slots: the limits in force of the models requests can use, summed, capped by the account "
        "limit (totalCapacity).",
    ),
    _spec(
        "out_capacity",
        "gauge",
        (),
        "Slots of models no request can use now (out of rotation, excluded, no tier): not in capacity.",
    ),
    _spec("in_flight", "gauge", (), "Slots held now, all models together (usedCapacity)."),
    _spec(
        "utilization_ratio",
        "gauge",
        (),
        "Slots held on usable models / capacity, 0 to 1 (currentUtilization).",
    ),
    _spec(
        "account_limit",
        "gauge",
        (),
        "The account's limit: learned from 1302s, or accountConcurrency; no sample while none is known.",
    ),
    _spec("account_probing", "gauge", (), "1 while a request probes one above the account's limit, else 0."),
    _spec(
        "account_pause_seconds",
        "gauge",
        (),
        "Seconds left of an account-wide pause (z.ai 1308, 1310, 1313-1321); 0 when none.",
    ),
    _spec(
        "quota_used_ratio",
        "gauge",
        ("window",),
        "Share of a quota window (5h, 1w) used, 0 to 1: z.ai's reading (chaos_key), else (5h) the "
        "proxy's estimate; no sample while neither knows.",
    ),
    _spec(
        "quota_resets_at_seconds",
        "gauge",
        ("window",),
        "Unix time a quota window resets; no sample while not known (or not started).",
    ),
    _spec(
        "quota_burn_ratio_per_hour",
        "gauge",
        ("window",),
        "Share of a quota window used per hour over the last hour (the forecast's burn).",
    ),
    _spec(
        "quota_runs_out_at_seconds",
        "gauge",
        ("window",),
        "Unix time a quota window runs out at the current burn, before its reset; 0 when it lasts.",
    ),
    _spec(
        "quota_credits",
        "gauge",
        ("window", "figure"),
        "A credit plan's window as z.ai reads it, else (5h) as the proxy's estimate counts it: figure cap, "
        "used (may pass the cap) or left; no sample where neither says.",
    ),
    _spec(
        "quota_source_info",
        "gauge",
        ("source",),
        "Always 1; source zai (a fresh reading of z.ai's quota endpoint) or estimate (the proxy's count).",
    ),
    _spec(
        "quota_counted_prompts",
        "gauge",
        (),
        "What this proxy counted in the current 5-hour window: prompts (each weighted by its model's "
        "quotaWeight), or credits on a credit plan (quota.unit).",
    ),
    _spec(
        "quota_paced_max_concurrency",
        "gauge",
        (),
        "With quota.pace: the most requests pacing lets be in flight now; no sample while it caps nothing.",
    ),
    _spec(
        "quota_paced_budget_prompts",
        "gauge",
        (),
        "With quota.pace: the prompts (weighted) pacing's hard stop still lets go this window, as z.ai's "
        "readings and the proxy's count bound it; no sample while not known.",
    ),
    _spec(
        "quota_paced_waits_total",
        "counter",
        (),
        "Requests that waited in the queue because pacing held the concurrency down (quota.pace).",
    ),
    _spec(
        "quota_read_failures_total",
        "counter",
        (),
        "Readings of z.ai's quota endpoint that failed (not reached, 401, 500, an unreadable body).",
    ),
    _spec("model_info", "gauge", ("model", "tier", "free"), "Always 1; the catalog tier of each model."),
    _spec("model_in_flight", "gauge", ("model",), "Requests holding a slot of the model now."),
    _spec(
        "model_capacity",
        "gauge",
        ("model",),
        "The model's limit in force now: learned, or maxConcurrency when learning is off.",
    ),
    _spec(
        "model_learned_limit",
        "gauge",
        ("model",),
        "The model's learned limit, the one in force (the catalog's while learning is off).",
    ),
    _spec(
        "model_catalog_limit",
        "gauge",
        ("model",),
        "The catalog's maxConcurrency for the model: where learning starts and drifts back to.",
    ),
    _spec(
        "model_probing", "gauge", ("model",), "1 while a request probes one above the model's limit, else 0."
    ),
    _spec(
        "model_overdue",
        "gauge",
        ("model",),
        "Attempts with no head within their patience (most likely being refused), riding above the limits "
        "until z.ai's verdict.",
    ),
    _spec(
        "model_cooldown_seconds",
        "gauge",
        ("model",),
        "Seconds until the model may be used again after a busy answer; 0 when usable.",
    ),
    _spec(
        "model_out_of_rotation",
        "gauge",
        ("model",),
        "1 while the model is out of rotation (1113/1211/1311, or 1304 until the next day).",
    ),
    _spec("model_excluded", "gauge", ("model",), "1 when chaosMode.excludeModels names the model."),
    _spec("model_dispatched_total", "counter", ("model",), "Slots granted on the model (dispatched)."),
    _spec(
        "requests_total",
        "counter",
        ("model", "tier", "outcome", "door"),
        "Finished requests by model (the last one tried), request tier, outcome and door (anthropic: "
        "messages, openai: chat completions).",
    ),
    _spec(
        "upstream_errors_total",
        "counter",
        ("model", "code"),
        "z.ai refusals routing acted on, by model and business code (http-<status> when none came).",
    ),
    _spec(
        "unread_answers_total",
        "counter",
        ("model",),
        "z.ai's answers closed unread, by model: an attempt left for another slot (no head within its "
        "patience) that z.ai accepted after all. Its request was answered elsewhere; its prompt is paid "
        "twice.",
    ),
    _spec(
        "request_refusals_total",
        "counter",
        ("code",),
        "z.ai refusals found the request's own (its content, not a model's load: two models refused it "
        "with the same code while serving others, or its conversation was remembered so), by code; "
        "passed to the client, nothing cooled, not in upstream_errors.",
    ),
    _spec(
        "tokens_total",
        "counter",
        ("model", "direction"),
        "Tokens reported by z.ai's usage, direction input, output or cached (input read from z.ai's prompt "
        "cache: the cached share is cached / (cached + input)).",
    ),
    _spec(
        "estimated_cost_dollars_total",
        "counter",
        ("model",),
        "Estimated spend in US dollars, from the tokens and the catalog's list prices.",
    ),
    _spec("queue_waiting", "gauge", ("tier",), "Requests waiting in the queue for a slot, by request tier."),
    _spec(
        "queue_longest_wait_seconds",
        "gauge",
        (),
        "How long the oldest request in the queue has waited so far; 0 when none waits.",
    ),
    _spec(
        "queue_wait_seconds",
        "histogram",
        ("tier",),
        "Time each routed request waited for a slot (about 0 when one was free), by request tier.",
    ),
    _spec("queue_timeouts_total", "counter", (), "Requests that waited the whole queue timeout in vain."),
    _spec(
        "failovers_total",
        "counter",
        (),
        "Failovers after a z.ai refusal (also those that found no other model and ended in a 429).",
    ),
    _spec(
        "sticky_moves_total",
        "counter",
        (),
        "Conversations moved to a model where their prompt was not cached (routing.cache_rule).",
    ),
    _spec(
        "sticky_move_credits_total",
        "counter",
        (),
        "Credits the moved conversations' prompts cost again, by GLM-5.3's weights (assumed).",
    ),
    _spec("sticky_entries", "gauge", (), "Conversations remembered by the sticky map."),
    _spec(
        "bad_requests_total",
        "counter",
        ("kind",),
        "Requests (either door) passed through unrouted, by kind (docs/METRICS.md lists them).",
    ),
    _spec(
        "spurious_releases_total",
        "counter",
        (),
        "Releases of a slot that was not held (clamped at zero); should stay 0.",
    ),
    _spec(
        "fleet_connected",
        "gauge",
        (),
        "With chaos_state: 1 while Redis answers and slots are counted fleet-wide, 0 while this proxy "
        "serves alone on its share. No sample without chaos_state.",
    ),
    _spec("fleet_proxies", "gauge", (), "With chaos_state: live proxies of the fleet, this one included."),
    _spec(
        "fleet_own_in_flight",
        "gauge",
        (),
        "With chaos_state: slots this proxy holds (chaos_in_flight counts the whole fleet's).",
    ),
    _spec("fleet_outages_total", "counter", (), "With chaos_state: times Redis went away."),
    _spec(
        "fleet_lost_races_total",
        "counter",
        (),
        "With chaos_state: slots taken on this proxy's view that Redis refused (another proxy was first).",
    ),
)

_BY_NAME: Final[dict[str, MetricSpec]] = {spec.family.removeprefix(PREFIX): spec for spec in METRICS}


def code_label(code: str) -> str:
    """A bounded `code` label: a z.ai code of the table, `http-<status>`, or `other`."""
    if code in KNOWN_CODES or _HTTP_CODE.match(code):
        return code
    return OTHER


def _fold[K](counts: Iterable[tuple[K, float]]) -> dict[K, float]:
    totals: dict[K, float] = {}
    for key, value in counts:
        totals[key] = totals.get(key, 0.0) + value
    return totals


_FAMILY_TYPES: Final = {
    "counter": CounterMetricFamily,
    "gauge": GaugeMetricFamily,
    "histogram": HistogramMetricFamily,
}


class _Families:
    """One family per `METRICS` entry for one scrape, in that order (described even without samples)."""

    def __init__(self) -> None:
        self._families: dict[str, Metric] = {
            short: _FAMILY_TYPES[spec.type](spec.family, spec.help, labels=list(spec.labels))
            for short, spec in _BY_NAME.items()
        }

    def counter(self, short: str) -> CounterMetricFamily:
        family = self._families[short]
        assert isinstance(family, CounterMetricFamily)
        return family

    def gauge(self, short: str) -> GaugeMetricFamily:
        family = self._families[short]
        assert isinstance(family, GaugeMetricFamily)
        return family

    def histogram(self, short: str) -> HistogramMetricFamily:
        family = self._families[short]
        assert isinstance(family, HistogramMetricFamily)
        return family

    def in_order(self) -> list[Metric]:
        return list(self._families.values())


class PoolCollector(Collector):
    """Reads `pool_status.status(pool)` and `stats` at every scrape: the pool stays the one source of truth.

    Label values come only from the catalog (unknown models fold into `other`), the request tiers,
    the fixed outcome and kind sets, and the bounded error-code set of `code_label`.
    """

    def __init__(
        self, pool: ChaosPool, stats: Stats, fleet: Callable[[], FleetFigures | None] = lambda: None
    ) -> None:
        self._pool = pool
        self._stats = stats
        self._fleet_figures = fleet  # None: no chaos_state

    def describe(self) -> Iterable[Metric]:
        return []  # names are fixed by METRICS; no collect() at registration time

    def collect(self) -> Iterable[Metric]:
        status = pool_status.status(self._pool)
        f = _Families()
        self._account(f, status)
        self._models(f, status.models)
        self._traffic(f, list(status.models))
        self._queue(f, status.queue)
        self._quota(f, self._pool)
        f.counter("failovers").add_metric([], float(self._stats.failovers))
        f.counter("sticky_moves").add_metric([], float(status.sticky.moves))
        f.counter("sticky_move_credits").add_metric([], status.sticky.move_credits)
        f.gauge("sticky_entries").add_metric([], float(status.sticky.entries))
        kinds: dict[str, float] = dict.fromkeys(BAD_KINDS, 0.0)
        for kind, n in self._stats.bad_requests.items():
            label = kind if kind in kinds else OTHER
            kinds[label] = kinds.get(label, 0.0) + n
        for kind, value in kinds.items():
            f.counter("bad_requests").add_metric([kind], value)
        f.counter("spurious_releases").add_metric([], float(status.spurious_releases))
        fleet = self._fleet_figures()
        if fleet is not None:
            f.gauge("fleet_connected").add_metric([], 1.0 if fleet.connected else 0.0)
            f.gauge("fleet_proxies").add_metric([], float(fleet.proxies))
            f.gauge("fleet_own_in_flight").add_metric([], float(fleet.own_in_flight))
            f.counter("fleet_outages").add_metric([], float(fleet.outages))
            f.counter("fleet_lost_races").add_metric([], float(fleet.lost_races))
        return f.in_order()

    @staticmethod
    def _account(f: _Families, status: PoolStatus) -> None:
        f.gauge("enabled").add_metric([], 1.0 if status.enabled else 0.0)
        f.gauge("strategy_info").add_metric([status.strategy], 1.0)
        f.gauge("capacity").add_metric([], float(status.total_capacity))
        f.gauge("out_capacity").add_metric([], float(status.out_capacity.slots))
        f.gauge("in_flight").add_metric([], float(status.used_capacity))
        f.gauge("utilization_ratio").add_metric([], float(status.utilization))
        account = status.account
        if account.limit is not None:
            f.gauge("account_limit").add_metric([], float(account.limit))
        f.gauge("account_probing").add_metric([], 1.0 if account.probing else 0.0)
        pause = status.account_pause
        f.gauge("account_pause_seconds").add_metric([], float(pause.remaining) if pause else 0.0)

    @staticmethod
    def _models(f: _Families, models: Mapping[str, ModelStatus]) -> None:
        for name, model in models.items():
            free = "true" if model.free else "false"
            f.gauge("model_info").add_metric([name, model.tier or OTHER, free], 1.0)
            f.gauge("model_in_flight").add_metric([name], float(model.in_flight))
            f.gauge("model_capacity").add_metric([name], float(model.capacity))
            limit = model.limit  # None: not a catalog model (one a reload dropped while it was busy)
            if limit is not None and limit.learned_limit is not None:
                f.gauge("model_learned_limit").add_metric([name], float(limit.learned_limit))
                f.gauge("model_catalog_limit").add_metric([name], float(model.catalog_limit))
                f.gauge("model_probing").add_metric([name], 1.0 if limit.probing else 0.0)
                f.gauge("model_overdue").add_metric([name], float(model.overdue))
            cooldown = float(model.cooldown_remaining or 0.0)
            f.gauge("model_cooldown_seconds").add_metric([name], cooldown if math.isfinite(cooldown) else 0.0)
            f.gauge("model_out_of_rotation").add_metric([name], 1.0 if model.out_of_rotation else 0.0)
            f.gauge("model_excluded").add_metric([name], 1.0 if model.excluded else 0.0)
            f.counter("model_dispatched").add_metric([name], float(model.dispatched))

    def _traffic(self, f: _Families, names: list[str]) -> None:
        """Requests, upstream errors, tokens and spend: `Stats` counters, every label re-checked."""
        stats = self._stats
        catalog = set(names)

        def model(name: str) -> str:
            return name if name in catalog else OTHER_MODEL

        def tier(name: str) -> str:
            return name if name in REQUEST_TIERS else OTHER

        requests = _fold(
            ((model(m), tier(t), o if o in OUTCOMES else OTHER, d if d in DOORS else OTHER), float(n))
            for (m, t, o, d), n in stats.requests.items()
        )
        for labels, value in sorted(requests.items()):
            f.counter("requests").add_metric(list(labels), value)
        errors = _fold(((model(m), code_label(c)), float(n)) for (m, c), n in stats.upstream_errors.items())
        for pair, n in sorted(errors.items()):
            f.counter("upstream_errors").add_metric(list(pair), n)
        unread = _fold((model(m), float(n)) for m, n in stats.unread_answers.items())
        for name, n in sorted(unread.items()):
            f.counter("unread_answers").add_metric([name], n)
        own = _fold((code_label(c), float(n)) for c, n in stats.request_refusals.items())
        for code, n in sorted(own.items()):
            f.counter("request_refusals").add_metric([code], n)

        seen = {*stats.input_tokens, *stats.output_tokens, *stats.spend}
        names = [*names, *sorted(seen - catalog)]  # every catalog model, zeros included
        tokens_in = _fold((model(m), float(stats.input_tokens.get(m, 0))) for m in names)
        tokens_out = _fold((model(m), float(stats.output_tokens.get(m, 0))) for m in names)
        tokens_cached = _fold((model(m), float(stats.cached_tokens.get(m, 0))) for m in names)
        spend = _fold((model(m), float(stats.spend.get(m, 0.0))) for m in names)
        for name in tokens_in:
            f.counter("tokens").add_metric([name, "input"], tokens_in[name])
            f.counter("tokens").add_metric([name, "output"], tokens_out[name])
            f.counter("tokens").add_metric([name, "cached"], tokens_cached[name])
            f.counter("estimated_cost_dollars").add_metric([name], spend[name])

    @staticmethod
    def _quota(f: _Families, pool: ChaosPool) -> None:
        quota = pool.quota
        for window in quota.status()["windows"]:
            name, forecast = window["name"], quota.forecast(window["name"])
            if forecast is not None:
                f.gauge("quota_used_ratio").add_metric([name], forecast.used_percent / 100)
                if forecast.resets_at is not None:
                    f.gauge("quota_resets_at_seconds").add_metric([name], forecast.resets_at)
                f.gauge("quota_burn_ratio_per_hour").add_metric([name], forecast.burn_per_hour / 100)
                f.gauge("quota_runs_out_at_seconds").add_metric([name], forecast.runs_out_at or 0.0)
            for figure in ("cap", "used", "left"):
                if window[figure] is not None:
                    f.gauge("quota_credits").add_metric([name, figure], float(window[figure]))
        f.gauge("quota_source_info").add_metric([quota.source], 1.0)
        f.gauge("quota_counted_prompts").add_metric([], quota.estimate.units)
        pacing = pool_status.quota(pool)["pacing"] if pool.config.quota.pace else None
        if pacing is not None and pacing["maxConcurrency"] is not None:
            f.gauge("quota_paced_max_concurrency").add_metric([], float(pacing["maxConcurrency"]))
        if pacing is not None and pacing["budget"] is not None:
            f.gauge("quota_paced_budget_prompts").add_metric([], float(pacing["budget"]))
        f.counter("quota_paced_waits").add_metric([], float(pool.pacer.waits))
        f.counter("quota_read_failures").add_metric([], float(quota.read_failures))

    def _queue(self, f: _Families, queue: QueueStatus) -> None:
        stats = self._stats
        for tier in REQUEST_TIERS:
            f.gauge("queue_waiting").add_metric([tier], float(queue.waiting_by_tier.get(tier, 0)))
        f.gauge("queue_longest_wait_seconds").add_metric([], float(queue.longest_wait))
        for tier in REQUEST_TIERS:  # the tiers are a closed set: anything else was never recorded
            cumulative = stats.wait_buckets.get(tier) or [0] * len(WAIT_BUCKETS)
            buckets = [(repr(float(b)), float(n)) for b, n in zip(WAIT_BUCKETS, cumulative, strict=True)]
            buckets.append(("+Inf", float(stats.wait_count.get(tier, 0))))
            f.histogram("queue_wait_seconds").add_metric([tier], buckets, stats.wait_sum.get(tier, 0.0))
        f.counter("queue_timeouts").add_metric([], float(queue.timeouts))


class ChaosMetrics:
    """Owns a `CollectorRegistry` (mitmproxy re-imports `-s` scripts: never the global one)."""

    def __init__(
        self, pool: ChaosPool, stats: Stats, fleet: Callable[[], FleetFigures | None] = lambda: None
    ) -> None:
        self.pool = pool
        self.stats = stats
        self.registry = CollectorRegistry(auto_describe=True)
        self.collector = PoolCollector(pool, stats, fleet)
        self.registry.register(self.collector)

    def render(self) -> tuple[bytes, str]:
        """(body, content type) of a scrape."""
        return generate_latest(self.registry), CONTENT_TYPE_PLAIN_0_0_4
