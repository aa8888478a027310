"""Samples of the proxy's /api/status while a swarm runs (queue, slots in use, learned and catalog limits),
and the stalls they show: requests waiting while no slot is in use."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from chaos_mode_tools.devtools.client import httpx


def read_sample(status: Mapping[str, Any], t: float) -> dict[str, Any]:
    """One sample at `t` seconds. `learnedLimit`, `catalogLimit` (per model) and `accountLimit` come from a
    pool that learns limits; without them the catalog limit is `capacity` and nothing learned is known.
    `cooldown`: the seconds of cooldown the model has left (0: none)."""
    models = {
        name: {
            "inFlight": int(m.get("inFlight", 0)),
            "learnedLimit": m.get("learnedLimit"),
            "catalogLimit": int(m.get("catalogLimit", m.get("capacity", 0))),
            "cooldown": float(m.get("cooldownRemaining") or 0.0),
        }
        for name, m in status.get("modelDistribution", {}).items()
    }
    return {
        "t": round(t, 3),
        "waiting": int(status.get("queue", {}).get("waiting", 0)),
        "used": int(status.get("usedCapacity", sum(m["inFlight"] for m in models.values()))),
        "totalCapacity": status.get("totalCapacity"),
        "accountLimit": status.get("accountLimit"),
        "models": models,
    }


@contextlib.asynccontextmanager
async def sampling(url: str, interval: float) -> AsyncIterator[list[dict[str, Any]]]:
    """Read `url` every `interval` seconds in the background; yields the list the samples go into, with
    `t` in `time.perf_counter()` seconds. A read that fails is skipped."""
    samples: list[dict[str, Any]] = []
    stop = asyncio.Event()

    async def poll(client: httpx.AsyncClient) -> None:
        start = time.perf_counter()
        tick = 0
        while not stop.is_set():
            with contextlib.suppress(httpx.HTTPError, ValueError, TypeError, AttributeError):
                response = await client.get(url)
                samples.append(read_sample(response.json(), time.perf_counter()))
            tick += 1
            delay = start + tick * interval - time.perf_counter()  # a fixed grid: no drift
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), max(0.0, delay))

    async with httpx.AsyncClient(timeout=5.0) as client:
        task = asyncio.create_task(poll(client))
        try:
            yield samples
        finally:
            stop.set()
            await task


def rebase(samples: Sequence[dict[str, Any]], origin: float) -> list[dict[str, Any]]:
    """The samples from `origin` on, their `t` in seconds since it."""
    return [{**s, "t": round(s["t"] - origin, 3)} for s in samples if s["t"] >= origin]


def stall_figures(samples: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """How often and how long requests waited while the proxy used no slot at all.

    Each sample stands until the next; the longest stall runs from its first stalled sample to the first
    sample after it that is not stalled (to the last sample when the run ends stalled).
    """
    stalled = [s["waiting"] > 0 and s["used"] == 0 for s in samples]
    longest = 0.0
    began: float | None = None
    for sample, stall in zip(samples, stalled, strict=True):
        if stall and began is None:
            began = sample["t"]
        elif not stall and began is not None:
            longest = max(longest, sample["t"] - began)
            began = None
    if began is not None:
        longest = max(longest, samples[-1]["t"] - began)
    return {
        "samples": len(samples),
        "stalledSamples": sum(stalled),
        "stalledShare": round(sum(stalled) / len(samples), 4) if samples else None,
        "longestStallSeconds": round(longest, 3),
        "waitingSamples": sum(1 for s in samples if s["waiting"] > 0),
    }
