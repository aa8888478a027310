"""Request outcomes, tokens, spend and failovers; `chaos_stats()` joins them with the pool's status."""

from __future__ import annotations

import time
from bisect import bisect_left
from collections import Counter, deque
from collections.abc import Callable, Mapping
from itertools import accumulate
from typing import Any, Literal, Protocol

from chaos_mode.config.schema import ModelRouting, ModelSpec
from chaos_mode.doors.door import DOORS, Door
from chaos_mode.zai.errors import KNOWN_CODES

Outcome = Literal["ok", "error", "rejected", "aborted", "passthrough"]
OUTCOMES: tuple[Outcome, ...] = ("ok", "error", "rejected", "aborted", "passthrough")
OTHER_MODEL = "other"  # the label of every model name that is not in the catalog
WAIT_BUCKETS: tuple[float, ...] = (0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


class Serving(Protocol):
    """What serves the catalog (the pool): its config, the served models folded as `routing.aliases` folds
    them."""

    @property
    def config(self) -> ModelRouting: ...


class Stats:
    """Counters the pool does not keep. Labels come only from the catalog and fixed sets: the catalog the
    pool serves (`serving`), else the config's."""

    def __init__(
        self,
        config: ModelRouting,
        wall_clock: Callable[[], float] = time.time,
        serving: Serving | None = None,
    ) -> None:
        self._wall_clock = wall_clock
        self._serving = serving
        self.requests: Counter[tuple[str, str, Outcome, Door]] = Counter()  # (model, tier, outcome, door)
        self.upstream_errors: Counter[tuple[str, str]] = Counter()  # (model, code)
        self.request_refusals: Counter[str] = Counter()  # z.ai's refusals found the request's own, by code
        # z.ai's answers closed unread, by model: an attempt left for another slot that z.ai accepted after
        # all (its request was answered elsewhere; its prompt is paid twice)
        self.unread_answers: Counter[str] = Counter()
        self.input_tokens: Counter[str] = Counter()
        self.output_tokens: Counter[str] = Counter()
        self.cached_tokens: Counter[str] = Counter()  # input from z.ai's prompt cache
        self.spend: dict[str, float] = {}  # estimated $
        self.failovers = 0
        self.probes_given_up = 0  # probes left unanswered for a slot within the limits: no failover
        self.recent_failovers: deque[dict[str, Any]] = deque(maxlen=20)
        self.bad_requests: Counter[str] = Counter()  # by BadRequest.kind
        self.exposed_listen: list[str] = []  # the proxy's listen hosts that are not loopback
        # Queue wait of every routed request, by tier: hits per bucket of WAIT_BUCKETS, then over all.
        self._wait_hits: dict[str, list[int]] = {}
        self.wait_sum: dict[str, float] = {}
        self.wait_count: Counter[str] = Counter()
        self.reconfigure(config)

    def reconfigure(self, config: ModelRouting) -> None:
        self._config = config

    @property
    def models(self) -> Mapping[str, ModelSpec]:
        return (self._config if self._serving is None else self._serving.config).models

    def label(self, model: str | None) -> str:
        """A metrics-safe model label: a catalog name, or `other`."""
        return model if model is not None and model in self.models else OTHER_MODEL

    def queue_wait(self, tier: str, seconds: float) -> None:
        hits = self._wait_hits.setdefault(tier, [0] * (len(WAIT_BUCKETS) + 1))
        hits[bisect_left(WAIT_BUCKETS, seconds)] += 1  # the last cell: over every bound
        self.wait_sum[tier] = self.wait_sum.get(tier, 0.0) + seconds
        self.wait_count[tier] += 1

    @property
    def wait_buckets(self) -> dict[str, list[int]]:
        """Per tier, how many waits were at most each bound of WAIT_BUCKETS (cumulative, as Prometheus)."""
        return {tier: list(accumulate(hits[:-1])) for tier, hits in self._wait_hits.items()}

    def request_done(self, model: str | None, tier: str, outcome: Outcome, door: Door = "anthropic") -> None:
        self.requests[(self.label(model), tier, outcome, door)] += 1

    def upstream_error(self, model: str, code: str | None, status: int) -> None:
        label = code if code in KNOWN_CODES else f"http-{status}"  # bounded: never a raw code
        self.upstream_errors[(self.label(model), label)] += 1

    def request_refusal(self, code: str | None, status: int) -> None:
        """A refusal found the request's own (see `request.refusals`): counted apart from the models'."""
        self.request_refusals[code if code in KNOWN_CODES else f"http-{status}"] += 1

    def unread_answer(self, model: str) -> None:
        self.unread_answers[self.label(model)] += 1

    def failover(self, from_model: str, to_model: str | None, reason: str) -> None:
        self.failovers += 1
        self.recent_failovers.append(
            {"at": self._wall_clock(), "from": from_model, "to": to_model, "reason": reason}
        )

    def usage(self, model: str, input_tokens: int, output_tokens: int, cached_tokens: int = 0) -> None:
        label = self.label(model)
        self.input_tokens[label] += input_tokens
        self.output_tokens[label] += output_tokens
        if cached_tokens:
            self.cached_tokens[label] += cached_tokens
        spec = self.models.get(model)
        if spec is not None:
            cost = (input_tokens * spec.input_price + output_tokens * spec.output_price) / 1e6
            self.spend[label] = self.spend.get(label, 0.0) + cost

    def outcomes(self) -> dict[str, int]:
        totals: dict[str, int] = dict.fromkeys(OUTCOMES, 0)
        for (_, _, outcome, _), n in self.requests.items():
            totals[outcome] += n
        return totals

    def outcomes_by_door(self) -> dict[Door, dict[str, int]]:
        """Finished requests per door (both always present), by outcome."""
        totals: dict[Door, dict[str, int]] = {door: dict.fromkeys(OUTCOMES, 0) for door in DOORS}
        for (_, _, outcome, door), n in self.requests.items():
            totals[door][outcome] += n
        return totals


def chaos_stats(status: dict[str, Any], stats: Stats) -> dict[str, Any]:
    """What `/api/status` serves, from the pool's served status (`served(status(pool))`): the Chaos Mode
    design's `chaosStats` keys, plus per-model errors, tokens and spend, the queue and failovers, and the
    refusals found the request's own (`requestRefusals`, by code: not in any model's `upstreamErrors`)."""
    errors: dict[str, dict[str, int]] = {}
    for (model, code), n in stats.upstream_errors.items():
        errors.setdefault(model, {})[code] = n
    distribution = {
        name: {
            **model,
            "upstreamErrors": errors.get(name, {}),
            "unreadAnswers": stats.unread_answers.get(name, 0),
            "tokensIn": stats.input_tokens.get(name, 0),
            "tokensOut": stats.output_tokens.get(name, 0),
            "tokensCached": stats.cached_tokens.get(name, 0),
            "cachedShare": _share(stats.cached_tokens.get(name, 0), stats.input_tokens.get(name, 0)),
            "estimatedSpend": round(stats.spend.get(name, 0.0), 6),
        }
        for name, model in status["models"].items()
    }
    return {
        "enabled": status["enabled"],
        "strategy": status["strategy"],
        "modelDistribution": distribution,
        "totalCapacity": status["totalCapacity"],
        "accountLimit": status["accountLimit"],
        "account": status["account"],
        "learning": status["learning"],
        "usedCapacity": status["usedCapacity"],
        "inLimits": status["inLimits"],
        "aboveLimits": status["aboveLimits"],
        "outCapacity": status["outCapacity"],
        "currentUtilization": status["utilization"],
        "avgQueueWait": status["queue"]["avgWaitMs"],
        "queue": status["queue"],
        "accountPause": status["accountPause"],
        "sticky": status["sticky"],
        "requests": stats.outcomes(),
        "requestsByDoor": stats.outcomes_by_door(),
        "badRequests": dict(stats.bad_requests),
        "requestRefusals": dict(stats.request_refusals),
        "exposedListen": list(stats.exposed_listen),
        "failovers": stats.failovers,
        "probesGivenUp": stats.probes_given_up,
        "recentFailovers": list(stats.recent_failovers),
    }


def _share(cached: int, fresh: int) -> float:
    """The share of a model's input read from the prompt cache (`fresh`: the input counted beside it)."""
    return round(cached / (cached + fresh), 4) if cached else 0.0
