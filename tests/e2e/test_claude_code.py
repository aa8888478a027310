"""The real Claude Code CLI (`claude -p`) through mitmdump and the simulator: a spent quota window, or a plan
that refuses every model, ends it at once with a clear error; a transient 429 makes it retry and succeed; its
own headers reach z.ai untouched.

Runs when `claude` is on PATH (`npm install -g @anthropic-ai/claude-code`); under CI it must be there.
The CLI runs offline: a throwaway HOME, a token, no telemetry, no updater, nothing but loopback.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import shutil
import time
from pathlib import Path

import httpx
import pytest

from chaos_mode_tools.devtools.processes import ProxyProcess
from chaos_mode_tools.sim import catalog_settings
from chaos_mode_tools.sim.errors import chinese_window_message
from support.design_catalog import DESIGN_MODELS

from .conftest import MakeProxy, MakeSim
from .support import Sim, fault, routing, wait_status_idle

pytestmark = pytest.mark.e2e

CLAUDE = shutil.which("claude")
RUN_TIMEOUT = 60.0  # seconds: a CLI that retries for minutes is cut here, and the test fails
STOPS_WITHIN = 10.0  # a spent quota window, or a plan refusing every model, must end the CLI this fast


@pytest.fixture
def claude() -> str:
    if CLAUDE is None:
        why = "the Claude Code CLI (claude) is not on PATH: npm install -g @anthropic-ai/claude-code"
        if os.environ.get("CI"):
            pytest.fail(why + " — required when CI is set", pytrace=False)
        pytest.skip(why)
    return CLAUDE


async def run_claude(claude: str, proxy: ProxyProcess, home: Path) -> tuple[int, str, float]:
    """(exit code, stdout and stderr, seconds) of `claude -p hi` against `proxy`."""
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": proxy.url + "/api/anthropic",
        "ANTHROPIC_AUTH_TOKEN": "test",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "NO_PROXY": "127.0.0.1,localhost",
    }
    started = time.monotonic()
    process = await asyncio.create_subprocess_exec(
        claude,
        "-p",
        "hi",
        env=env,
        cwd=home,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        output, _ = await asyncio.wait_for(process.communicate(), RUN_TIMEOUT)
    except TimeoutError:
        process.kill()
        await process.wait()
        pytest.fail(f"claude -p still running after {RUN_TIMEOUT:.0f} s: it retries instead of stopping")
    assert process.returncode is not None
    return process.returncode, output.decode(errors="replace"), time.monotonic() - started


async def assert_headers_untouched(sim: Sim) -> None:
    """Every attempt reached z.ai with Claude Code's own identity and beta list, the same on each."""
    seen = await sim.seen_headers()
    assert seen, "the simulator got no request"
    first = seen[0]
    assert first["user-agent"].startswith("claude-cli/"), first
    assert first["anthropic-beta"].startswith("claude-code-"), first
    assert any(name.startswith("x-stainless-") for name in first), first
    same = ("user-agent", "anthropic-beta", "x-stainless-lang", "x-stainless-package-version")
    for attempt in seen:
        assert {k: attempt.get(k) for k in same} == {k: first.get(k) for k in same}, seen


@pytest.mark.parametrize("wording", ["english", "chinese"])
async def test_a_spent_week_ends_claude_code_at_once(
    wording: str, claude: str, make_proxy: MakeProxy, sim: Sim, tmp_path: Path
) -> None:
    proxy = await make_proxy(upstream=sim.base_url, config=routing())
    reset = dt.datetime.now(dt.UTC) + dt.timedelta(days=5)
    message = {"message": chinese_window_message("1310", reset)} if wording == "chinese" else {}
    await sim.add_faults(fault("1310", count=50, **message))  # z.ai: every request, the week is spent
    code, output, seconds = await run_claude(claude, proxy, tmp_path)
    assert code != 0, output
    assert "429" in output and "weekly/monthly limit (1310)" in output, output
    assert seconds < STOPS_WITHIN, (seconds, output)
    await assert_headers_untouched(sim)


async def test_a_transient_429_makes_claude_code_retry_and_succeed(
    claude: str, make_proxy: MakeProxy, sim: Sim, http: httpx.AsyncClient, tmp_path: Path
) -> None:
    # Without the queue a refusal storm is our 429 (with it the request waits for a slot instead).
    proxy = await make_proxy(upstream=sim.base_url, config=routing(queue={"enabled": False}))
    # Every model of the tier refuses once (1302): our own 429, a short retry-after; then z.ai serves.
    await sim.add_faults(fault("1302", count=4))
    code, output, _ = await run_claude(claude, proxy, tmp_path)
    assert code == 0 and output.strip(), output
    rejected = await sim.rejections()
    assert sum(codes.get("1302", 0) for codes in rejected.values()) >= 2, rejected
    stats = await sim.stats()
    assert stats["requests"] > sum(sum(codes.values()) for codes in rejected.values()), stats  # one served
    document = await wait_status_idle(http, proxy)
    assert document["requests"]["rejected"] >= 1 and document["requests"]["ok"] >= 1, document  # retried
    await assert_headers_untouched(sim)


async def test_a_plan_refusing_every_model_ends_claude_code_at_once(
    claude: str, make_sim: MakeSim, make_proxy: MakeProxy, tmp_path: Path
) -> None:
    sim = await make_sim(refuse=list(DESIGN_MODELS))  # 1113 from every model: waiting fixes nothing
    proxy = await make_proxy(upstream=sim.base_url, config=routing())
    code, output, seconds = await run_claude(claude, proxy, tmp_path)
    assert code != 0, output
    assert "403" in output and "out of rotation" in output and "(1113)" in output, output
    assert seconds < STOPS_WITHIN, (seconds, output)


async def test_claude_code_on_the_plan_of_december_2026_is_served_under_served_names(
    claude: str, make_sim: MakeSim, make_proxy: MakeProxy, tmp_path: Path
) -> None:
    """The built-in catalog in front of today's z.ai: the CLI is answered, every request went out under a
    model's own name (none through an alias, none retired or unknown), and its headers reached z.ai."""
    sim = await make_sim(**catalog_settings("2026-12"))
    config = {"upstreamHosts": ["127.0.0.1"], "chaosMode": {"enabled": True}}  # the built-in catalog
    proxy = await make_proxy(upstream=sim.base_url, config=config)
    code, output, _ = await run_claude(claude, proxy, tmp_path)
    assert code == 0 and output.strip(), output
    stats = await sim.stats()
    served = {name for name, m in stats["models"].items() if m["served"]}
    assert served and served <= {"glm-5.4", "glm-5.3", "glm-5.3-flash", "glm-4.6v"}, stats["models"]
    assert stats["aliasedRequests"] == {} and stats["retiredModels"] == {} and stats["unknownModels"] == {}
    await assert_headers_untouched(sim)
