"""mitmproxy's own features beside the addon, through a real mitmdump: what a user does in mitmweb (here
played by a second script, loaded after the addon as mitmweb's Intercept addon is)."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import httpx
import pytest

from .conftest import MakeProxy
from .support import OPUS, Sim, idle, poll, routing, status

pytestmark = pytest.mark.e2e

# mitmweb's "kill" on an intercepted flow: `Flow.kill()` marks it killed and never resumes it, so the flow
# never ends and no hook tells the addons.
KILL_WHILE_INTERCEPTED = """
import asyncio

def request(flow):
    flow.intercept()
    asyncio.get_running_loop().call_later(0.2, flow.kill)  # as the user clicks, while mitmproxy waits
"""


async def test_a_flow_killed_while_intercepted_gives_its_slot_back(
    make_proxy: MakeProxy, sim: Sim, http: httpx.AsyncClient, tmp_path: Path
) -> None:
    script = tmp_path / "kill_intercepted.py"
    script.write_text(KILL_WHILE_INTERCEPTED, encoding="utf-8")
    proxy = await make_proxy(upstream=sim.base_url, config=routing(), extra_args=["-s", str(script)])
    body = {"model": OPUS, "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
    url = proxy.url + "/api/anthropic/v1/messages"
    asking = asyncio.create_task(http.post(url, json=body, headers={"x-api-key": "sk-k"}))
    ended = await poll(lambda: status(http, proxy), lambda d: d["requests"]["aborted"] == 1 and idle(d), 5.0)
    assert ended["requests"]["aborted"] == 1 and idle(ended), (
        ended
    )  # routed (a slot taken), killed, given back
    assert (await sim.stats())["requests"] == 0
    asking.cancel()  # mitmproxy never answers a flow killed while intercepted (or cuts its connection)
    with contextlib.suppress(asyncio.CancelledError, httpx.HTTPError):
        await asking
    assert "Traceback" not in proxy.output()
