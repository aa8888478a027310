"""Decompression bombs from a hostile z.ai behind a real mitmdump with the addon: a br, gzip and zstd body
that decodes to 1 GiB, as a 1302 refusal, as a whole 200 answer and as the quota answer. The proxy decodes
each only as far as its cap: its memory stays within +50 MiB, every other request is answered within a
second meanwhile, the refusal is still read as a 1302 and fails over, and the client gets the compressed
bytes untouched."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from chaos_mode.forwarding.quota_poll import MAX_BODY
from chaos_mode_tools.devtools.processes import ProxyProcess
from support.hostile import (
    ANSWER_HEAD,
    BOMB_CODINGS,
    HEADER,
    QUOTA_HEAD,
    REFUSAL_HEAD,
    HostileUpstream,
    bomb,
)

from .support import OPUS, poll, routing, status, wait_status_idle

pytestmark = [pytest.mark.e2e]

ROUND = 60.0  # the whole round of bombs (unbounded, each took seconds of CPU: the test fails, in time)
PROMPT = 1.0  # an unrelated request's answer, at most, while bombs are being decoded
RSS_GROWTH = 50 << 20
QUOTA_VARIABLE = "CHAOS_E2E_BOMB_QUOTA"
_keys = itertools.count()


def memory(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (its peak) of a process, in bytes."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            fields[name] = int(value.split()[0]) * 1024
    return fields


@pytest.fixture(scope="module")
def hostile() -> Iterator[HostileUpstream]:
    for coding in BOMB_CODINGS:  # built once before any request (seconds of CPU)
        bomb(coding, REFUSAL_HEAD, b"\0"), bomb(coding, ANSWER_HEAD), bomb(coding, QUOTA_HEAD)
    with HostileUpstream() as upstream:
        yield upstream


@pytest.fixture(scope="module")
def proxy(hostile: HostileUpstream) -> Iterator[ProxyProcess]:
    """The quota read with the key `bomb-quota`: the hostile z.ai's quota answer is a bomb after the first."""
    config = routing(quota={"pollSeconds": 2, "pollBackoffMaxSeconds": 5})
    extra = ["--set", f"chaos_key={QUOTA_VARIABLE}"]
    env = {QUOTA_VARIABLE: "bomb-quota"}
    with ProxyProcess(upstream=hostile.url, config=config, extra_args=extra, env=env) as proxy:
        yield proxy


@pytest.fixture
async def client(proxy: ProxyProcess) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=proxy.url, trust_env=False, timeout=ROUND) as client:
        yield client


async def ask(client: httpx.AsyncClient, mode: str) -> tuple[str, httpx.Response, bytes]:
    """One request in `mode`: (its key, the response, its body's bytes as they came, never decoded)."""
    key = f"sk-bomb-{mode}-{next(_keys):04d}"
    body = {"model": OPUS, "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}
    headers = {HEADER: mode, "x-api-key": key, "anthropic-version": "2023-06-01"}
    async with client.stream("POST", "/api/anthropic/v1/messages", json=body, headers=headers) as response:
        raw = b"".join([data async for data in response.aiter_raw()])
    return key, response, raw


async def test_bombs_are_decoded_only_as_far_as_their_caps(
    client: httpx.AsyncClient, proxy: ProxyProcess, hostile: HostileUpstream
) -> None:
    assert proxy.proc is not None
    pid = proxy.proc.pid
    for _ in range(3):  # the proxy's own warm-up: connections, the first routed request
        assert (await ask(client, "ok"))[1].status_code == 200
    before = memory(pid)["VmRSS"]
    bombing = True
    waits: list[float] = []

    async def others() -> None:
        """Unrelated requests, one after another, while the bombs go."""
        while bombing:
            began = time.monotonic()
            key, response, raw = await ask(client, "ok")
            waits.append(time.monotonic() - began)
            assert response.status_code == 200 and key.encode() in raw
            await asyncio.sleep(0.05)

    async def bombs() -> None:
        for coding in BOMB_CODINGS:
            key, response, raw = await ask(client, f"bomb-refusal-{coding}")
            assert response.status_code == 200 and key.encode() in raw  # another attempt's answer
            models = [seen.model for seen in hostile.seen if seen.key == key]
            assert len(models) == 2 and models[0] != models[1], models
            key, response, raw = await ask(client, f"bomb-answer-{coding}")
            assert response.status_code == 200 and response.headers["content-encoding"] == coding
            assert raw == bomb(coding, ANSWER_HEAD)  # the client's bytes untouched
        # the quota read in each coding (once the proxy read it as it was at its start)
        quota = lambda: sum(1 for seen in hostile.seen if seen.key == "bomb-quota")  # noqa: E731
        while quota() < 1 + len(BOMB_CODINGS):
            await asyncio.sleep(0.1)

    async with asyncio.timeout(ROUND):
        others_task = asyncio.ensure_future(others())
        try:
            await bombs()
        finally:
            bombing = False
        await others_task
    after = memory(pid)
    document = await wait_status_idle(client, proxy)
    assert document["usedCapacity"] == 0
    assert max(waits) <= PROMPT, sorted(waits)[-5:]
    assert after["VmRSS"] - before <= RSS_GROWTH, (before, after)
    assert after["VmHWM"] - before <= RSS_GROWTH, (before, after)  # not even for a moment
    read = await poll(
        lambda: status(client, proxy), lambda d: "decodes to more" in (d["quota"]["error"] or ""), 5.0
    )
    assert f"decodes to more than {MAX_BODY} bytes" in read["quota"]["error"], read["quota"]
    output = proxy.output()
    assert output.count("no usage counted") == len(BOMB_CODINGS)
    assert "Traceback" not in output
    refusals = [m["upstreamErrors"] for m in document["modelDistribution"].values()]
    assert sum(errors.get("1302", 0) for errors in refusals) == len(BOMB_CODINGS), refusals  # read as 1302s
