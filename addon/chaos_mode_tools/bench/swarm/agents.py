"""A swarm of simulated coding agents: each sends its requests one after another, streamed, like Claude Code
(Anthropic messages) or, for a mixed swarm, like an OpenAI-compatible coding tool (chat completions).

On a 429 an agent waits as Claude Code does (the Anthropic SDK's policy): `Retry-After` when given (at most
60 s), else exponential back-off 0.5 s × 2^n capped at 8 s, minus up to 25 % jitter; then it sends again.

One agent may be filtered (`FilteredAgent`): its system prompt holds a phrase z.ai's content filter refuses;
it tries its first request a few times, as a user's client would, and gives up after it fails.
"""

from __future__ import annotations

import asyncio
import email.utils
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from chaos_mode.zai.catalog import RequestTier
from chaos_mode_tools.bench.swarm.workload import OPENAI_MODELS, Request, Workload
from chaos_mode_tools.devtools.client import httpx

MESSAGES_PATH = "/api/anthropic/v1/messages"
CHAT_PATH = "/api/coding/paas/v4/chat/completions"  # the Coding Plan's OpenAI door
SESSION_HEADER = "x-claude-code-session-id"
MAX_RETRY_AFTER = 60.0
ANSWER_KEPT = 600  # characters kept of the first refused answer of each request
DELTA = b"event: content_block_delta"
STOP = b"event: message_stop"
CHAT_DELTA = b'"delta":{"content":'  # a chunk with text (the first chunk's delta opens with the role)
CHAT_DONE = b"data: [DONE]"


def retry_delay(
    failures: int, retry_after: str | None, rng: random.Random, now: float | None = None
) -> float:
    """Seconds to wait before the next attempt, after `failures` failed ones (>= 1)."""
    if retry_after:
        seconds = parse_retry_after(retry_after, time.time() if now is None else now)
        if seconds is not None:
            return min(seconds, MAX_RETRY_AFTER)
    return min(0.5 * 2.0 ** (failures - 1), 8.0) * (1 - 0.25 * rng.random())


def parse_retry_after(value: str, now: float) -> float | None:
    """`Retry-After` as seconds (a number or an HTTP date); None when unreadable."""
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - now)


@dataclass(frozen=True, slots=True)
class Answer:
    """A refused attempt's answer as the client got it: the status and the start of the body."""

    status: int
    body: str

    def doc(self) -> dict[str, object]:
        return {"status": self.status, "body": self.body}


@dataclass(slots=True)
class RequestRecord:
    """What the client saw of one workload request. Times are seconds since the swarm started."""

    agent: int
    index: int
    tier: RequestTier
    sent_model: str
    sent: float  # first attempt
    door: str = "anthropic"  # anthropic (messages) or openai (chat completions)
    attempts: int = 0
    client_429: int = 0
    other_errors: int = 0
    served_model: str | None = None
    last_sent: float | None = None  # the attempt that succeeded
    headers: float | None = None  # its 200 response headers
    first_token: float | None = None  # its first content_block_delta
    done: float | None = None
    ok: bool = False
    # Streamed (chunked) or in one piece (a Content-Length: how the addon sends a failed-over answer).
    streamed: bool | None = None
    first_refusal: Answer | None = None  # the first answer that was not a 200

    @property
    def ttft(self) -> float | None:
        """First send to first token, retries included."""
        return None if self.first_token is None else self.first_token - self.sent

    @property
    def wait(self) -> float | None:
        """First send to the 200's headers: the time before service began, retries included.

        Through chaos mode this is queue wait + proxy overhead (the simulator sends headers as soon as it
        admits); in the baseline it is the time lost to 429s and back-off.
        """
        return None if self.headers is None else self.headers - self.sent

    @property
    def wait_last_attempt(self) -> float | None:
        """Send of the successful attempt to its headers (the addon's queue wait, without 429s)."""
        if self.headers is None or self.last_sent is None:
            return None
        return self.headers - self.last_sent


@dataclass
class SwarmProgress:
    """Live counters for a progress line; updated in place while the swarm runs."""

    total: int = 0
    done: int = 0
    failed: int = 0
    in_flight: int = 0
    client_429: int = 0
    started: float = field(default_factory=time.perf_counter)

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.started


@dataclass(frozen=True, slots=True)
class FilteredAgent:
    """The agent whose system prompt holds `phrase`: it makes at most `attempts` attempts per request and
    sends no request after one that failed (a user told their prompt was refused stops)."""

    agent: int
    phrase: str
    attempts: int = 7  # one and six retries, as the stand-in's client made in issue 21


@dataclass(frozen=True, slots=True)
class SwarmOptions:
    models: Mapping[RequestTier, str]  # tier -> the model name the agents send
    agent_models: Sequence[str] = ()  # when given: agent -> the one model it sends, whatever the tier
    openai_every: int = 0  # n > 0: every n-th agent speaks OpenAI chat completions (0: none)
    openai_models: Mapping[RequestTier, str] = field(default_factory=lambda: dict(OPENAI_MODELS))
    max_attempts: int = 60
    seed: int = 1
    timeout: float = 180.0
    filtered: FilteredAgent | None = None

    def is_filtered(self, agent: int) -> bool:
        return self.filtered is not None and self.filtered.agent == agent

    def system(self, request: Request) -> str:
        """The agent's system prompt (the filtered agent's holds the phrase)."""
        prompt = f"You are coding agent {request.agent} of a swarm."
        return (
            f"{prompt} {self.filtered.phrase}."
            if self.filtered and self.is_filtered(request.agent)
            else prompt
        )

    def attempts(self, agent: int) -> int:
        return self.filtered.attempts if self.filtered and self.is_filtered(agent) else self.max_attempts


def prompt_text(request: Request) -> str:
    """What an agent asks: a line naming its step, and its prompt's size in filler (4 bytes a token)."""
    text = f"agent {request.agent}, step {request.index}: continue the refactoring of module {request.agent}"
    return text + " " + "code" * request.prompt_tokens if request.prompt_tokens else text


def _message_body(request: Request, model: str, system: str) -> dict[str, object]:
    return {
        "model": model,
        "max_tokens": 1024,
        "stream": True,
        "system": system,
        "messages": [{"role": "user", "content": prompt_text(request)}],
    }


def _chat_body(request: Request, model: str, system: str) -> dict[str, object]:
    return {
        "model": model,
        "max_tokens": 1024,
        "stream": True,
        "stream_options": {"include_usage": True},
        "messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": prompt_text(request)},
        ],
    }


def _sim_headers(request: Request) -> dict[str, str]:
    return {
        "x-sim-latency-ms": f"{request.latency_ms:g}",
        "x-sim-output-tokens": str(request.output_tokens),
        "x-sim-token-interval-ms": f"{request.token_interval_ms:g}",
    }


@dataclass(frozen=True, slots=True)
class AgentDoor:
    """How an agent speaks: where it posts, what, and how it tells its answer's first token and end."""

    name: str
    path: str
    body: Callable[[Request, str, str], dict[str, object]]  # (request, model, system prompt)
    headers: Callable[[Request], dict[str, str]]
    first_token: bytes
    end: bytes


ANTHROPIC_AGENT = AgentDoor(
    "anthropic",
    MESSAGES_PATH,
    _message_body,
    lambda r: {
        "x-api-key": "bench-key",
        "anthropic-version": "2023-06-01",
        SESSION_HEADER: f"bench-agent-{r.agent}",
    },
    DELTA,
    STOP,
)
OPENAI_AGENT = AgentDoor(
    "openai", CHAT_PATH, _chat_body, lambda r: {"authorization": "Bearer bench-key"}, CHAT_DELTA, CHAT_DONE
)


def agent_door(agent: int, options: SwarmOptions) -> AgentDoor:
    """Every `openai_every`-th agent (the 2nd, 4th... for 2) speaks OpenAI; the others Anthropic."""
    every = options.openai_every
    return OPENAI_AGENT if every > 0 and agent % every == every - 1 else ANTHROPIC_AGENT


async def _one(
    client: httpx.AsyncClient,
    request: Request,
    options: SwarmOptions,
    rng: random.Random,
    start: float,
    progress: SwarmProgress,
    records: list[RequestRecord],
) -> RequestRecord:
    """One request, tried until served or out of attempts; its record joins `records` at once (so that an
    agent stopped in the middle leaves what it did)."""
    door = agent_door(request.agent, options)
    if options.agent_models:
        model = options.agent_models[request.agent]
    else:
        model = (options.openai_models if door is OPENAI_AGENT else options.models)[request.tier]
    clock = time.perf_counter
    record = RequestRecord(
        request.agent, request.index, request.tier, model, sent=clock() - start, door=door.name
    )
    records.append(record)
    body = door.body(request, model, options.system(request))
    headers = {**door.headers(request), **_sim_headers(request)}
    failures, attempts = 0, options.attempts(request.agent)
    while record.attempts < attempts:
        record.attempts += 1
        sent = clock() - start
        retry_after: str | None = None
        progress.in_flight += 1
        try:
            async with client.stream("POST", door.path, json=body, headers=headers) as response:
                at_headers = clock() - start
                if response.status_code == 200:
                    first: float | None = None
                    window = b""
                    async for chunk in response.aiter_raw():
                        window = window[-128:] + chunk
                        if first is None and door.first_token in window:
                            first = clock() - start
                    if door.end in window:
                        record.ok = True
                        record.served_model = response.headers.get("x-sim-served-model")
                        record.streamed = "content-length" not in response.headers
                        record.last_sent, record.headers, record.first_token = sent, at_headers, first
                        record.done = clock() - start
                        return record
                    record.other_errors += 1  # a stream that ended without its end (message_stop, [DONE])
                else:
                    text = (await response.aread()).decode(errors="replace")
                    if record.first_refusal is None:
                        record.first_refusal = Answer(response.status_code, text[:ANSWER_KEPT])
                    retry_after = response.headers.get("retry-after")
                    if response.status_code == 429:
                        record.client_429 += 1
                        progress.client_429 += 1
                    else:
                        record.other_errors += 1
        except httpx.HTTPError:
            record.other_errors += 1
        finally:
            progress.in_flight -= 1
        failures += 1
        await asyncio.sleep(retry_delay(failures, retry_after, rng))
    record.done = clock() - start
    return record


async def _agent(
    client: httpx.AsyncClient,
    requests: tuple[Request, ...],
    options: SwarmOptions,
    start: float,
    progress: SwarmProgress,
    records: list[RequestRecord],
) -> None:
    rng = random.Random(f"{options.seed}/{requests[0].agent if requests else 0}")
    for request in requests:
        record = await _one(client, request, options, rng, start, progress, records)
        if record.ok:
            progress.done += 1
        else:
            progress.failed += 1
            if options.is_filtered(request.agent):
                break  # its user read the error and stopped


async def run_swarm(
    base_url: str,
    workload: Workload,
    options: SwarmOptions,
    progress: SwarmProgress | None = None,
    on_start: Callable[[], None] | None = None,
) -> tuple[list[RequestRecord], float]:
    """Run every agent at once against `base_url`; returns the records and the makespan in seconds. The
    filtered agent (if any) is stopped when every other agent is done: the run measures the others."""
    progress = progress if progress is not None else SwarmProgress()
    progress.total = workload.size
    connections = len(workload.agents) + 8
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    timeout = httpx.Timeout(options.timeout, connect=10.0)
    async with httpx.AsyncClient(base_url=base_url, limits=limits, timeout=timeout) as client:
        if on_start is not None:
            on_start()
        start = time.perf_counter()
        progress.started = start
        results: list[list[RequestRecord]] = [[] for _ in workload.agents]
        tasks = [
            asyncio.ensure_future(_agent(client, agent, options, start, progress, results[index]))
            for index, agent in enumerate(workload.agents)
        ]
        try:
            await asyncio.gather(*(t for i, t in enumerate(tasks) if not options.is_filtered(i)))
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        makespan = time.perf_counter() - start
    return [record for agent in results for record in agent], makespan
