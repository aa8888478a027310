"""A hostile upstream behind a real mitmdump with the addon: every case answered as h11 frames it, or as
mitmproxy alone would answer (502 for an answer that breaks, our 429 when no attempt got an answer h11
reads), never another request's answer, never a stalled proxy, no API key in the log."""

from __future__ import annotations

import asyncio
import itertools
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from chaos_mode_tools.devtools.processes import ProxyProcess
from support.hostile import (
    BAD_CHUNK_SIZES,
    BOMBS,
    HEADER,
    MODES,
    SERVING,
    STRAY,
    STRAY_SETTLE,
    HostileUpstream,
)

from .conftest import MakeProxy
from .support import OPUS, idle, poll, routing, status, wait_status_idle

pytestmark = [pytest.mark.e2e]

TIMEOUT = 15.0  # per request: a proxy that stalls fails the test instead of hanging it
PROMPT = 5.0  # what a healthy proxy needs, at most, for one small answer here
ANSWERED = [
    "ok",
    "ok-chunked",
    "interim",
    "folded",
    "bare-lf",
    "http10",
    "connection-close",
    "idle-bytes",
    "trailing-bytes",
    "late-interim",
    "close-on-reuse",
    "late-answer",
    "trailer",
]
BROKEN = [*BAD_CHUNK_SIZES, "cut-short"]  # the answer breaks: mitmproxy answers 502, as without the addon
UNREAD = [
    "conflicting-length",
    "xchunked",
    "bad-version",
    "endless-interim",
]  # no attempt got an answer h11 reads: our 429
STALLED = ["stall-body", "stall-stream"]  # cut after `IDLE` seconds without a byte: the slot given back
IDLE = 1.0  # streams.idleSeconds of the proxy here
# Odd JSON: relayed (a stream nested too deeply), or read and failed over (a refusal nested too deeply, a
# 1302 that is not UTF-8: every model but SERVING refuses).
ODD_JSON = ["nested-stream", "nested-429", "non-utf8-1302"]
_keys = itertools.count()


def test_every_mode_has_an_expected_outcome() -> None:
    """(The decompression bombs have their own tests: test_hostile_bombs.)"""
    assert sorted(ANSWERED + BROKEN + UNREAD + STALLED + ODD_JSON + sorted(BOMBS)) == sorted(MODES)


@pytest.fixture(scope="module")
def hostile() -> Iterator[HostileUpstream]:
    with HostileUpstream() as upstream:
        yield upstream


@pytest.fixture(scope="module")
def proxy(hostile: HostileUpstream) -> Iterator[ProxyProcess]:
    with ProxyProcess(upstream=hostile.url, config=routing(streams={"idleSeconds": IDLE})) as proxy:
        yield proxy


@pytest.fixture
async def client(proxy: ProxyProcess) -> Iterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=proxy.url, trust_env=False, timeout=TIMEOUT) as client:
        yield client


@dataclass
class Seen:
    key: str
    status: int
    answer_for: str | None  # whose answer it says it is (None: not an answer the upstream wrote)
    text: str


def new_key(mode: str) -> str:
    return f"sk-hostile-{mode}-{next(_keys):04d}"


async def ask(client: httpx.AsyncClient, mode: str, key: str | None = None) -> Seen:
    """One request in `mode` (after a mode that sends stray bytes, once they came: see STRAY_SETTLE)."""
    key = key or new_key(mode)
    body = {"model": OPUS, "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}
    headers = {HEADER: mode, "x-api-key": key, "anthropic-version": "2023-06-01"}
    async with asyncio.timeout(TIMEOUT):
        response = await client.post("/api/anthropic/v1/messages", json=body, headers=headers)
    if mode in STRAY:
        await asyncio.sleep(STRAY_SETTLE)
    answer_for = None
    if response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream"):
        said = re.search(r'"text": "answer for ([^"]*)"', response.text)
        answer_for = said.group(1) if said else None
    elif response.status_code == 200:
        text = json.loads(response.content)["content"][0]["text"]
        answer_for = text.removeprefix("answer for ")
    return Seen(key, response.status_code, answer_for, response.text)


@pytest.mark.parametrize("mode", ANSWERED)
async def test_answers_h11_reads_reach_their_own_client(client: httpx.AsyncClient, mode: str) -> None:
    for _ in range(2):  # twice: the second may come on the connection the first left
        seen = await ask(client, mode)
        assert seen.status == 200 and seen.answer_for == seen.key, seen


@pytest.mark.parametrize("mode", BROKEN)
async def test_an_answer_that_breaks_is_a_502_and_the_proxy_goes_on(
    client: httpx.AsyncClient, proxy: ProxyProcess, mode: str
) -> None:
    """A chunk size h11 refuses (-6 once froze the whole proxy at 100% CPU), or an error answer cut short
    (it reached the client as a complete 400 of the bytes that came)."""
    seen = await ask(client, mode)
    assert seen.status == 502, seen
    async with asyncio.timeout(PROMPT):  # the proxy still answers at once
        after = await ask(client, "ok")
        await status(client, proxy)
    assert after.answer_for == after.key


async def test_a_stalled_stream_never_holds_up_the_others(client: httpx.AsyncClient) -> None:
    stuck = asyncio.ensure_future(ask(client, "negative-chunk"))
    async with asyncio.timeout(PROMPT):
        others = await asyncio.gather(*(ask(client, "ok") for _ in range(4)))
    assert all(s.answer_for == s.key for s in others), others
    assert (await stuck).status == 502


@pytest.mark.parametrize("mode", STALLED)
async def test_a_stalled_answer_is_cut_after_its_idle_time_and_its_slot_given_back(
    client: httpx.AsyncClient, proxy: ProxyProcess, mode: str
) -> None:
    """A whole answer: mitmproxy's 502 naming the cut; a stream: broken where it stalled. Either way within
    its idle time, not z.ai's head timeout (600 s), and its slot back."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    try:
        seen = await ask(client, mode)
        assert seen.status == 502 and "without sending complete message body" in seen.text, seen
    except httpx.RemoteProtocolError as exc:  # the stream's head and first event came: broken after them
        assert mode == "stall-stream" and "incomplete chunked read" in str(exc), exc
    took = loop.time() - started
    assert IDLE <= took < IDLE + PROMPT, took
    assert (await wait_status_idle(client, proxy))["usedCapacity"] == 0


@pytest.mark.parametrize("mode", UNREAD)
async def test_a_head_h11_refuses_is_never_read_as_an_answer(
    client: httpx.AsyncClient, proxy: ProxyProcess, mode: str
) -> None:
    seen = await ask(client, mode)
    assert seen.status == 429 and "not reached" in seen.text, seen
    assert seen.key not in seen.text
    await wait_status_idle(client, proxy)


async def test_a_stream_nested_too_deeply_reaches_its_client_and_gives_its_slot_back(
    client: httpx.AsyncClient, proxy: ProxyProcess
) -> None:
    """An event nested 100,000 deep crashed mitmproxy's connection: the client hung, holding its slot."""
    for _ in range(2):
        async with asyncio.timeout(PROMPT):
            seen = await ask(client, "nested-stream")
        assert seen.status == 200 and seen.answer_for == seen.key, seen
        assert "message_stop" in seen.text, seen
    document = await wait_status_idle(client, proxy)
    assert idle(document), document


@pytest.mark.parametrize(("mode", "code"), [("nested-429", "http-429"), ("non-utf8-1302", "1302")])
async def test_a_refusal_of_odd_json_is_read_for_its_code_and_fails_over(
    make_proxy: MakeProxy, hostile: HostileUpstream, mode: str, code: str
) -> None:
    """A 429 nested 100,000 deep reached its client as a 502, with no failover; a 1302 with a latin-1
    byte was read as a plain busy 429 (it teaches the limits as a 1302). A proxy of its own: the models
    the refusals cool down would change what the other tests' proxy picks first."""
    proxy = await make_proxy(upstream=hostile.url, config=routing())
    async with httpx.AsyncClient(base_url=proxy.url, trust_env=False, timeout=TIMEOUT) as client:
        for _ in range(3):  # until a model that refuses was tried (the first pick may be SERVING)
            seen = await ask(client, mode)
            assert seen.status == 200 and seen.answer_for == seen.key, seen
            document = await wait_status_idle(client, proxy)
            if document["failovers"]:
                break
    assert idle(document) and document["failovers"] >= 1, document
    refused = {
        name: model["upstreamErrors"]
        for name, model in document["modelDistribution"].items()
        if model["upstreamErrors"]
    }
    assert refused and SERVING not in refused and all(errors == {code: 1} for errors in refused.values()), (
        refused
    )


async def test_one_client_after_another_each_gets_its_own_answer_across_interim_answers(
    client: httpx.AsyncClient,
) -> None:
    """The 1xx taken for the answer left every later request on that connection one answer behind."""
    for _ in range(4):
        seen = await ask(client, "interim")
        assert seen.answer_for == seen.key, seen


async def test_a_kept_connection_closed_as_the_request_came_costs_no_failover(
    client: httpx.AsyncClient, proxy: ProxyProcess, hostile: HostileUpstream
) -> None:
    await ask(client, "ok")  # a kept connection to reuse
    before = await status(client, proxy)
    for _ in range(3):
        seen = await ask(client, "close-on-reuse")
        assert seen.answer_for == seen.key, seen
    after = await wait_status_idle(client, proxy)
    assert after["failovers"] == before["failovers"]


async def test_a_new_client_connection_opens_none_to_the_upstream(
    client: httpx.AsyncClient, proxy: ProxyProcess, hostile: HostileUpstream
) -> None:
    """mitmproxy's default (eager) opened one connection to z.ai per client connection and read the request
    only once it was up, never to use it: routed requests go through the forwarder's kept connections."""
    key = new_key("ok")
    await ask(client, "ok", key)  # a kept connection to reuse (its key's: `upstream.PoolKey`)
    before = hostile.connections
    for _ in range(4):
        async with httpx.AsyncClient(base_url=proxy.url, trust_env=False, timeout=TIMEOUT) as fresh:
            seen = await ask(fresh, "ok", key)
        assert seen.answer_for == seen.key, seen
    assert hostile.connections - before <= 1  # at most one, should the kept one have been closed


async def test_clients_with_their_own_keys_never_receive_each_others_unasked_answers(
    hostile: HostileUpstream,
) -> None:
    """30 clients with their own keys, every other answer followed by one nobody asked for, which lands on
    whatever request its connection carries next: never one of another key (`upstream.PoolKey`). A proxy of
    its own: an unasked answer names the model of the request it was for, so the proxy learns aliases that
    are not z.ai's (`routing.aliases`) and would route the module's later tests by them."""

    async def agent(proxy: ProxyProcess, n: int) -> list[Seen]:
        key = f"sk-hostile-agent-{n:02d}-{next(_keys):04d}"
        async with httpx.AsyncClient(base_url=proxy.url, trust_env=False, timeout=TIMEOUT) as own:
            return [await ask(own, "late-answer" if i % 2 else "ok", key) for i in range(10)]

    with ProxyProcess(upstream=hostile.url, config=routing(streams={"idleSeconds": IDLE})) as proxy:
        answers = await asyncio.gather(*(agent(proxy, n) for n in range(30)))
    seen = [one for each in answers for one in each]
    crossed = [one for one in seen if one.answer_for not in (None, one.key)]
    assert not crossed, f"{len(crossed)} of {len(seen)} answers were another key's: {crossed[:3]}"
    assert sum(one.answer_for == one.key for one in seen) >= len(seen) // 2


async def test_two_clients_never_receive_each_others_answers_whatever_the_upstream_sends(
    client: httpx.AsyncClient, proxy: ProxyProcess
) -> None:
    """Every mode, two clients at once (one after the other where the upstream sends stray bytes later: a
    request sent before they come cannot be told from their answer, see STRAY_SETTLE), a few rounds: an
    answer is its own client's or none; and no API key reached the proxy's log."""
    keys: list[str] = []
    for _ in range(2):
        for mode in sorted(set(MODES) - set(STALLED) - BOMBS):
            a, b = new_key(mode), new_key(mode)
            keys += [a, b]
            if mode in STRAY:
                pair = [await ask(client, mode, a), await ask(client, mode, b)]
            else:
                pair = await asyncio.gather(ask(client, mode, a), ask(client, mode, b))
            for seen in pair:
                assert seen.answer_for in (None, seen.key), seen
                assert (a if seen.key == b else b) not in seen.text, seen
    document = await poll(lambda: status(client, proxy), lambda d: d["usedCapacity"] == 0, PROMPT)
    assert document["usedCapacity"] == 0, document
    output = proxy.output()
    assert not [key for key in keys if key in output]
