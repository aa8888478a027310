"""`python -m chaos_mode_tools.bench.soak.run`: thousands of requests with a fault mix through a real
mitmdump, then what it left behind: slots still held, tracebacks and errors in its log, memory growth.

Faults: clients leaving while queued and mid-stream; the simulator's random 1302, 1305, 1308, answers cut
mid-way and requests never answered (`fault_rates`); 1113 from the models the Coding Plan refuses
(glm-4.5-x, glm-4.7-flashx: out of rotation at their first request); the upstream killed (SIGKILL) and
started again on the same port. Bounded in requests and in time.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import re
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Final

from chaos_mode.zai.catalog import EARLY_2026_CATALOG, models_block
from chaos_mode_tools.bench.soak.client import CLIENT_FAULTS, OUTCOMES, plan_request, send
from chaos_mode_tools.devtools.client import httpx
from chaos_mode_tools.devtools.processes import ProxyProcess, free_port
from chaos_mode_tools.devtools.sim_process import SimProcess
from chaos_mode_tools.sim import SimSettings

REFUSED: Final = ("glm-4.5-x", "glm-4.7-flashx")
# Shares of the fault budget: what the client does, and what the simulator does at random.
CLIENT_SHARE: Final = 0.4
UPSTREAM_SHARES: Final = {"1302": 0.2, "1305": 0.15, "cut": 0.15, "hang": 0.08, "1308": 0.02}
PROXY_CONFIG: Final[dict[str, Any]] = {
    "upstreamHosts": ["127.0.0.1"],
    "chaosMode": {"enabled": True},
    "models": models_block(EARLY_2026_CATALOG),
    # Short pauses and cooldowns: a soak is about what is left behind, not about waiting out a 1308.
    "cooldown": {"defaultSeconds": 0.5, "maxSeconds": 2, "maxPauseSeconds": 1, "accountPauseSeconds": 1},
    "streams": {"abortGraceSeconds": 0.2},
}
RETRY_CAP: Final = 1.0  # seconds: a client honours our Retry-After up to this
BACKOFF: Final = 0.2  # seconds a client waits after an answer that broke or failed, as agents back off
SETTLE_SECONDS: Final = 10.0
TRACEBACK: Final = re.compile(r"^Traceback \(most recent call last\):$", re.M)

Log = Callable[[str], None]
DESCRIPTION: Final = "Drive requests with a fault mix through a real mitmdump; report what was left behind."


@dataclass(frozen=True)
class SoakOptions:
    requests: int = 5000
    concurrency: int = 40
    fault_share: float = 0.10
    restarts: int = 2  # times the upstream is killed and started again, evenly over the run
    max_seconds: float = 900.0
    read_timeout: float = 5.0  # a client gives up on an answer that has not come (a hung upstream)
    seed: int = 0


def sim_settings(options: SoakOptions, port: int) -> SimSettings:
    budget = options.fault_share * (1 - CLIENT_SHARE)
    return SimSettings(
        port=port,
        latency_ms=40,
        token_interval_ms=5,
        output_tokens=5,
        reject_delay_ms=50,
        abort_detect_ms=100,
        refuse=list(REFUSED),
        fault_rates={code: budget * share for code, share in UPSTREAM_SHARES.items()},
        fault_seed=options.seed,
    )


def rss_bytes(pid: int) -> int | None:
    """Resident memory of a process (Linux /proc), else None."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    match = re.search(r"^VmRSS:\s+(\d+) kB$", status, re.M)
    return int(match[1]) * 1024 if match else None


def traceback_kinds(log: str) -> Counter[str]:
    """Each traceback in `log` by its last line (the exception) and the deepest chaos_mode frame."""
    kinds: Counter[str] = Counter()
    for match in TRACEBACK.finditer(log):
        lines = log[match.end() :].splitlines()[1:]
        frames = [line for line in lines if line.startswith("  File ")]
        end = next((line for line in lines if line and not line.startswith(" ")), "?")
        ours = [f for f in frames if "chaos_mode" in f] or frames or ["?"]
        where = re.sub(r'^\s*File "(?:[^"]*/)?([^/"]+)", line (\d+), in (\S+).*', r"\1:\2 \3", ours[-1])
        kinds[f"{end[:100]} (at {where})"] += 1
    return kinds


class _Upstream:
    """The simulator on a fixed port, killed and started again on demand; its counts summed over lives."""

    def __init__(self, settings: SimSettings) -> None:
        self.settings = settings
        self.process = SimProcess(settings)
        self.totals: Counter[str] = Counter()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.settings.port}"

    async def count(self, http: httpx.AsyncClient) -> None:
        stats = (await http.get(self.base_url + "/sim/stats")).json()
        for model in stats["models"].values():
            self.totals.update(model["rejected"])
        self.totals.update(stats["brokenAnswers"])

    async def kill_and_restart(self, http: httpx.AsyncClient, down_seconds: float = 0.3) -> None:
        await self.count(http)
        proc = self.process.proc
        if proc is not None:
            proc.kill()  # SIGKILL: connections drop mid-answer, nothing closes cleanly
        await asyncio.to_thread(self.process.stop)
        await asyncio.sleep(down_seconds)  # requests meanwhile find nobody listening
        # A new life draws new faults (the same seed would repeat the first life's sequence).
        self.settings = replace(self.settings, fault_seed=self.settings.fault_seed + 1)
        self.process = SimProcess(self.settings)
        await asyncio.to_thread(self.process.start)
        self.totals["upstream killed and restarted"] += 1


async def _settled(http: httpx.AsyncClient, proxy: ProxyProcess) -> dict[str, Any]:
    """The proxy's status once nothing is held or waiting (or SETTLE_SECONDS later)."""
    deadline = time.monotonic() + SETTLE_SECONDS
    while True:
        status: dict[str, Any] = (await http.get(proxy.status_url)).json()
        idle = status["usedCapacity"] == 0 and status["queue"]["waiting"] == 0
        if idle or time.monotonic() > deadline:
            return status
        await asyncio.sleep(0.1)


async def run_soak(options: SoakOptions, log: Log = lambda _: None) -> dict[str, Any]:
    upstream = _Upstream(sim_settings(options, free_port()))
    await asyncio.to_thread(upstream.process.start)
    proxy = ProxyProcess(upstream=upstream.base_url, config=PROXY_CONFIG, start_timeout=30)
    try:
        await asyncio.to_thread(proxy.start)
        return await _drive(options, upstream, proxy, log)
    finally:
        await asyncio.to_thread(proxy.stop)
        await asyncio.to_thread(upstream.process.stop)


async def _drive(options: SoakOptions, upstream: _Upstream, proxy: ProxyProcess, log: Log) -> dict[str, Any]:
    assert proxy.proc is not None
    pid = proxy.proc.pid
    outcomes: Counter[str] = Counter(dict.fromkeys(OUTCOMES, 0))
    client_faults: Counter[str] = Counter()
    started = time.monotonic()
    warmup = max(1, options.requests // 10)
    restart_at = {options.requests * (k + 1) // (options.restarts + 1) for k in range(options.restarts)}
    memory: dict[str, int | None] = {"start": None}
    issued = 0
    timeout = httpx.Timeout(10.0, read=options.read_timeout)
    limits = httpx.Limits(
        max_connections=options.concurrency * 2, max_keepalive_connections=options.concurrency
    )
    async with (
        httpx.AsyncClient(trust_env=False, timeout=timeout, limits=limits) as client,
        httpx.AsyncClient(trust_env=False, timeout=10.0) as http,
    ):

        async def worker() -> None:
            nonlocal issued
            while issued < options.requests and time.monotonic() - started < options.max_seconds:
                index, issued = issued, issued + 1
                if index in restart_at:
                    log(f"{index} requests sent: killing the upstream and starting it again")
                    await upstream.kill_and_restart(http)
                if index == warmup:
                    memory["start"] = rss_bytes(pid)
                plan = plan_request(
                    random.Random(options.seed * 1_000_003 + index), CLIENT_SHARE * options.fault_share
                )
                if plan.behaviour in CLIENT_FAULTS:
                    client_faults[plan.behaviour] += 1
                seen = await send(client, proxy.url, plan)
                outcomes[seen.outcome] += 1
                if seen.retry_after or seen.outcome in ("broken", "upstream-error", "timeout"):
                    await asyncio.sleep(min(seen.retry_after, RETRY_CAP) or BACKOFF)

        await asyncio.gather(*(worker() for _ in range(options.concurrency)))
        elapsed = time.monotonic() - started
        status = await _settled(http, proxy)
        await upstream.count(http)
    end_rss = rss_bytes(pid)
    output = proxy.output()
    faults = Counter({**client_faults, **upstream.totals})
    start_rss = memory["start"]
    return {
        "options": options.__dict__,
        "sent": sum(outcomes.values()),
        "seconds": round(elapsed, 1),
        "outcomes": dict(outcomes),
        "faults": dict(sorted(faults.items())),
        "proxyOutcomes": status["requests"],
        "slotsLeaked": status["usedCapacity"],
        "waitingLeft": status["queue"]["waiting"],
        "spuriousReleases": status.get("spuriousReleases", 0),
        "tracebacks": dict(traceback_kinds(output)),
        "logLines": Counter(_kind(line) for line in output.splitlines() if line.strip()).most_common(8),
        "rss": {"start": start_rss, "end": end_rss},
        "rssGrowth": None if not start_rss or not end_rss else round(end_rss / start_rss - 1, 4),
    }


def _kind(line: str) -> str:
    """A log line without its timestamp, addresses and numbers: lines of one kind count together."""
    line = re.sub(r"^\[[\d:.]+\]\s*", "", line)
    return re.sub(r"\d+", "N", line)[:90]


def render(doc: Mapping[str, Any]) -> str:
    growth = doc["rssGrowth"]
    rss = doc["rss"]
    lines = [
        f"requests sent: {doc['sent']} in {doc['seconds']} s",
        "client saw:     " + ", ".join(f"{k} {v}" for k, v in doc["outcomes"].items()),
        "proxy counted:  " + ", ".join(f"{k} {v}" for k, v in doc["proxyOutcomes"].items()),
        "faults:         " + ", ".join(f"{k} {v}" for k, v in doc["faults"].items()),
        f"slots leaked:   {doc['slotsLeaked']} (still waiting: {doc['waitingLeft']}, "
        f"spurious releases: {doc['spuriousReleases']})",
        f"tracebacks:     {sum(doc['tracebacks'].values())}",
        *(f"  {n} x {kind}" for kind, n in doc["tracebacks"].items()),
        "memory (RSS):   "
        + (
            f"{rss['start'] / 2**20:.1f} MiB after warm-up -> {rss['end'] / 2**20:.1f} MiB at the end "
            f"({100 * growth:+.1f}%)"
            if growth is not None
            else "not measured"
        ),
        "log lines, most frequent kinds:",
        *(f"  {n} x {kind}" for kind, n in doc["logLines"]),
    ]
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    """One option per `SoakOptions` field, with its default."""
    helps = {
        "fault_share": "share of requests with a fault (default %(default)s)",
        "restarts": "times the upstream is killed and started again (default %(default)s)",
        "max_seconds": "no request starts after this many seconds (default %(default)s)",
        "read_timeout": "seconds a client waits for an answer that does not come (default %(default)s)",
    }
    p = argparse.ArgumentParser(prog="python -m chaos_mode_tools.bench.soak.run", description=DESCRIPTION)
    for option in fields(SoakOptions):
        default = option.default
        flag = "--" + option.name.replace("_", "-")
        p.add_argument(
            flag, type=type(default), default=default, help=helps.get(option.name, "(default %(default)s)")
        )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    options = SoakOptions(**vars(parser().parse_args(argv)))
    doc = asyncio.run(run_soak(options, log=lambda line: print(line, file=sys.stderr, flush=True)))
    print(render(doc))
    clean = doc["slotsLeaked"] == 0 and not doc["tracebacks"] and (doc["rssGrowth"] or 0) < 0.10
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())
