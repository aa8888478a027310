"""What a field run says about the field's shapes, from its samples and records (pure): how soon the learned
limits came within a step of the truth after each change, how low and high they went, which models were
cooled down, what the filtered agent got, the others' makespan, refusals per 50 requests."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from chaos_mode.bench.swarm import RequestRecord

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
