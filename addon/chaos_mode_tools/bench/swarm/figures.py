"""Per-scenario figures from the client's records, the simulator's stats and the proxy's status (pure)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from chaos_mode_tools.bench.swarm.agents import RequestRecord
from chaos_mode_tools.bench.swarm.ideal import LowerBound


def percentile(values: Iterable[float], q: float) -> float | None:
    """The q-th percentile (0..100) with linear interpolation between closest ranks; None when empty."""
    data = sorted(values)
    if not data:
        return None
    if len(data) == 1:
        return data[0]
    rank = (len(data) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(data) - 1)
    return data[low] + (data[high] - data[low]) * (rank - low)


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value * 1000.0, 1)


def _spread(values: Sequence[float]) -> dict[str, float | None]:
    return {"p50": _ms(percentile(values, 50)), "p99": _ms(percentile(values, 99))}


def sim_rejected(sim_stats: Mapping[str, Any]) -> int:
    """Every refusal the simulator answered (429s with a z.ai code, and 1211 for unknown models)."""
    models = sim_stats.get("models", {})
    return sum(sum(m.get("rejected", {}).values()) for m in models.values())


def sent_upstream(attempts: int, proxy_status: Mapping[str, Any] | None) -> int:
    """The requests the proxy sent z.ai for the client's `attempts`: one each, less those it refused itself
    (its own 429: none sent, or none after a failover that found no slot), plus one per failover and per
    probe given up for a slot within the limits (no failover, `RoutedRequest.switch_to`). The proxy's
    other calls to z.ai (quota, model list) are not requests to a model."""
    if proxy_status is None:
        return attempts
    refused_here = int(proxy_status.get("requests", {}).get("rejected", 0))
    extra = int(proxy_status.get("failovers", 0)) + int(proxy_status.get("probesGivenUp", 0))
    return attempts - refused_here + extra


def served_twice(proxy_status: Mapping[str, Any] | None) -> dict[str, int]:
    """Per model, the requests z.ai served twice: an attempt left for another slot that z.ai served after
    all, its answer closed unread (`unreadAnswers`; `docs/learning.md`)."""
    models: Mapping[str, Any] = proxy_status.get("modelDistribution", {}) if proxy_status else {}
    return {m: int(v["unreadAnswers"]) for m, v in models.items() if v.get("unreadAnswers")}


def summarize(
    name: str,
    description: str,
    records: Sequence[RequestRecord],
    makespan: float,
    sim_stats: Mapping[str, Any],
    proxy_status: Mapping[str, Any] | None,
    ideal: LowerBound,
) -> dict[str, Any]:
    """The figures of one scenario, JSON-ready (times in seconds or milliseconds as named)."""
    done = [r for r in records if r.ok]
    attempts = sum(r.attempts for r in records)
    served = Counter(r.served_model or "?" for r in done)
    by_tier: dict[str, Counter[str]] = {}
    for r in done:
        by_tier.setdefault(r.tier, Counter())[r.served_model or "?"] += 1
    sim_models: Mapping[str, Any] = sim_stats.get("models", {})
    sim_served = {m: int(v.get("served", 0)) for m, v in sim_models.items() if v.get("served")}
    failovers = int(proxy_status.get("failovers", 0)) if proxy_status else 0
    sim_requests = int(sim_stats.get("requests", 0))
    client_429 = sum(r.client_429 for r in records)
    upstream_429 = sim_rejected(sim_stats)
    twice = served_twice(proxy_status)
    checks = {
        "allCompleted": len(done) == len(records),
        "simServedEqualsCompleted": sum(sim_served.values()) == len(done) + sum(twice.values()),
        "simRequestsEqualsAttemptsPlusFailovers": sim_requests == sent_upstream(attempts, proxy_status),
        "clientModelsMatchSim": dict(served + Counter(twice)) == sim_served,
        "servedOnce": not twice,
    }
    summary: dict[str, Any] = {
        "name": name,
        "description": description,
        "makespanSeconds": round(makespan, 3),
        "requests": len(records),
        "completed": len(done),
        "failed": len(records) - len(done),
        "attempts": attempts,
        "requestsPerSecond": round(len(done) / makespan, 2) if makespan > 0 else None,
        "client429": client_429,
        "clientOtherErrors": sum(r.other_errors for r in records),
        "unstreamed": sum(1 for r in done if r.streamed is False),  # answers that came in one piece
        "upstream429": upstream_429,
        "doors": _doors(records),
        "simRequests": sim_requests,
        "servedTwice": dict(sorted(twice.items())),
        "simAborted": int(sim_stats.get("aborted", 0)),  # answers cut short: unread ones, closed ones served
        "ttftMs": _spread([r.ttft for r in done if r.ttft is not None]),
        "queueWaitMs": _spread([r.wait for r in done if r.wait is not None]),
        "lastAttemptWaitMs": _spread([r.wait_last_attempt for r in done if r.wait_last_attempt is not None]),
        "share": {m: round(n / len(done), 4) for m, n in sorted(served.items())} if done else {},
        "servedByTier": {t: dict(sorted(c.items())) for t, c in sorted(by_tier.items())},
        "simServed": sim_served,
        "simPeakInFlight": {m: int(v.get("peakInFlight", 0)) for m, v in sim_models.items()},
        "idealSeconds": round(ideal.seconds, 3),
        "vsIdeal": round(makespan / ideal.seconds, 3) if ideal.seconds > 0 else None,
        "utilization": round(ideal.seconds / makespan, 3) if makespan > 0 else None,
        "checks": checks,
    }
    if proxy_status is not None:
        summary["proxy"] = {
            "enabled": proxy_status.get("enabled"),
            "strategy": proxy_status.get("strategy"),
            "avgQueueWaitMs": proxy_status.get("avgQueueWait"),
            "requests": proxy_status.get("requests"),
            "failovers": failovers,
            "probesGivenUp": proxy_status.get("probesGivenUp"),
            "requestRefusals": proxy_status.get("requestRefusals"),
            "queue": proxy_status.get("queue"),
            "sticky": proxy_status.get("sticky"),
            "learning": proxy_status.get("learning"),  # on or off, and its pacing (`--learning`)
        }
    return summary


def _doors(records: Sequence[RequestRecord]) -> dict[str, dict[str, int]]:
    """Per door the agents spoke: requests, completed, client 429s."""
    doors: dict[str, dict[str, int]] = {}
    for r in records:
        door = doors.setdefault(r.door, {"requests": 0, "completed": 0, "client429": 0})
        door["requests"] += 1
        door["completed"] += r.ok
        door["client429"] += r.client_429
    return doors


def add_speedups(scenarios: list[dict[str, Any]], reference: str = "baseline") -> None:
    """`speedup`: each scenario's requests/s over the reference scenario's (when it ran)."""
    base = next((s for s in scenarios if s["name"] == reference), None)
    for s in scenarios:
        if base and base["requestsPerSecond"] and s["requestsPerSecond"]:
            s["speedup"] = round(s["requestsPerSecond"] / base["requestsPerSecond"], 2)
        else:
            s["speedup"] = None
