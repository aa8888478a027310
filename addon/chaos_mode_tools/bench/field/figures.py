"""What a field run says about the field's shapes, from its samples and records (pure): how soon the learned
limits came within a step of the truth after each change, how low and high they went, which models were
cooled down, what the filtered agent got, the others' makespan, refusals per 50 requests."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from chaos_mode_tools.bench.swarm.agents import RequestRecord

Sample = Mapping[str, Any]


def per_50(count: int, requests: int) -> float | None:
    """`count` per 50 requests of the workload."""
    return round(50 * count / requests, 2) if requests else None


def _learned(sample: Sample, model: str) -> float | None:
    value = sample["models"].get(model, {}).get("learnedLimit")
    return float(value) if isinstance(value, int | float) else None


def _within(sample: Sample, model: str, true: int, step: int) -> bool:
    learned = _learned(sample, model)
    return learned is not None and abs(learned - true) <= step


def convergence(
    samples: Sequence[Sample], slots: Sequence[Mapping[str, Any]], step: int = 1
) -> list[dict[str, Any]]:
    """Per change of the true slots (every one after the first): seconds from it to the first sample where
    each model's learned limit was within `step` of its new true slots (`byModel`), and every model's at
    once (`seconds`); None when that did not happen before the next change (or the end of the run)."""
    out = []
    for index, change in enumerate(slots[1:], start=1):
        start = float(change["at"])
        end = float(slots[index + 1]["at"]) if index + 1 < len(slots) else math.inf
        window = [s for s in samples if start <= float(s["t"]) < end]
        truth: Mapping[str, int] = change["models"]
        out.append(
            {
                "at": round(start, 3),
                "seconds": _first_within(window, truth, list(truth), step, start),
                "byModel": {model: _first_within(window, truth, [model], step, start) for model in truth},
            }
        )
    return out


def _first_within(
    window: Sequence[Sample], truth: Mapping[str, int], models: Sequence[str], step: int, start: float
) -> float | None:
    hit = next((s for s in window if all(_within(s, m, truth[m], step) for m in models)), None)
    return None if hit is None else round(float(hit["t"]) - start, 3)


def waits_once_known(
    log: Sequence[Sequence[Any]], samples: Sequence[Sample], slots: Sequence[Mapping[str, Any]], lead: float
) -> dict[str, Any]:
    """The waits inside z.ai of requests that came once their model's level was known (for limits that stay
    as they began): from the first sample where its learned limit was its true one and z.ai had shown it
    that level (the first of its requests z.ai held had its head: before that the proxy has only the
    catalog's word), `knownAt` per model (None: never). `log`: the simulator's [model, began (since its
    reset), seconds]; `lead`: its reset to the swarm start."""
    truth: Mapping[str, int] = slots[0]["models"] if slots else {}
    shown: dict[str, float] = {}
    for model, began, seconds in sorted(log, key=lambda entry: float(entry[1]) + float(entry[2])):
        shown.setdefault(str(model), float(began) + float(seconds) - lead)
    known: dict[str, float | None] = {}
    for model, true in truth.items():
        after = shown.get(model, -math.inf)
        hit = next((s for s in samples if float(s["t"]) >= after and _within(s, model, true, 0)), None)
        known[model] = None if hit is None else float(hit["t"])
    waits = sorted(
        (float(seconds), str(model), round(float(began) - lead, 3))
        for model, began, seconds in log
        if (at := known.get(str(model))) is not None and float(began) - lead >= at
    )
    return {
        "knownAt": {m: None if t is None else round(t, 3) for m, t in known.items()},
        "waited": len(waits),
        "maxSeconds": round(waits[-1][0], 3) if waits else 0.0,
        "over1s": sum(1 for w in waits if w[0] > 1.0),
        "longest": [[model, began, seconds] for seconds, model, began in waits[-3:]],  # [model, began, s]
    }


def learned_ranges(samples: Sequence[Sample]) -> dict[str, dict[str, float | None]]:
    """Per model: the lowest, the highest and the last learned limit sampled (None: none reported)."""
    models = sorted({m for s in samples for m in s["models"]})
    out: dict[str, dict[str, float | None]] = {}
    for model in models:
        values = [v for v in (_learned(s, model) for s in samples) if v is not None]
        out[model] = {
            "min": min(values) if values else None,
            "max": max(values) if values else None,
            "last": values[-1] if values else None,
        }
    return out


def cooled_models(samples: Sequence[Sample]) -> dict[str, float]:
    """The models sampled in a cooldown, with the longest cooldown left seen (seconds)."""
    cooled: dict[str, float] = {}
    for sample in samples:
        for model, figures in sample["models"].items():
            if figures.get("cooldown", 0.0) > 0:
                cooled[model] = max(cooled.get(model, 0.0), float(figures["cooldown"]))
    return dict(sorted(cooled.items()))


def makespan_of_others(records: Sequence[RequestRecord], agent: int) -> float | None:
    """When the last request of every agent but `agent` ended (seconds since the swarm started)."""
    ends = [r.done for r in records if r.agent != agent and r.done is not None]
    return round(max(ends), 3) if ends else None


def filtered_agent(records: Sequence[RequestRecord], agent: int) -> dict[str, Any]:
    """What the filtered agent sent and got: its requests, attempts, and its first request's first
    refused answer (status and body, as the client got it); whether it was still trying at the end."""
    own = [r for r in records if r.agent == agent]
    first = own[0] if own else None
    return {
        "agent": agent,
        "requests": len(own),
        "attempts": sum(r.attempts for r in own),
        "served": sum(1 for r in own if r.ok),
        "client429": sum(r.client_429 for r in own),
        "firstAnswer": first.first_refusal.doc() if first and first.first_refusal else None,
        "gaveUpAfterSeconds": round(first.done, 3) if first and first.done is not None else None,
        "stoppedWithOthers": any(r.done is None for r in own),  # still trying when the others were done
    }
