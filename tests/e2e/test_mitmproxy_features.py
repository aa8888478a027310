"""mitmproxy's own features beside the addon, through a real mitmdump: what a user does in mitmweb (here
played by a second script, loaded after the addon as mitmweb's Intercept addon is)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from chaos_mode.mitm.command import SCRIPT
from chaos_mode_tools.devtools.processes import free_port, port_open

from .conftest import MakeProxy
from .support import OPUS, Sim, idle, poll, routing, status

pytestmark = pytest.mark.e2e


async def until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.05)


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


async def test_stream_large_bodies_is_said_at_start_and_a_streamed_body_passes_said_so(
    make_proxy: MakeProxy, sim: Sim, http: httpx.AsyncClient
) -> None:
    """mitmproxy sends a body over `stream_large_bodies` on as it comes, before any addon reads it: such a
    request cannot be routed. Once it passed silently, its one line saying it was over the 32-MiB cap."""
    proxy = await make_proxy(
        upstream=sim.base_url, config=routing(), extra_args=["--set", "stream_large_bodies=1k"]
    )
    padding = "x" * 2000
    body = {"model": OPUS, "max_tokens": 8, "messages": [{"role": "user", "content": padding}]}
    url = proxy.url + "/api/anthropic/v1/messages"
    answer = await http.post(url, json=body, headers={"x-api-key": "sk-k"})
    assert answer.status_code == 400, answer.text  # the simulator knows no Claude name: not routed
    document = await status(http, proxy)
    assert document["badRequests"] == {"too-large": 1}, document["badRequests"]
    output = proxy.output()
    assert "stream_large_bodies=1k: mitmproxy sends a larger request on unread" in output, output
    assert "body over mitmproxy's stream_large_bodies, streamed unread" in output, output


async def test_the_addon_unloaded_for_good_while_the_proxy_runs_is_an_error_line(
    make_proxy: MakeProxy, tmp_path: Path
) -> None:
    """A reinstall or an upgrade while the proxy runs removes the script's file for a moment: mitmproxy
    drops the script for good and says so at info level, and the proxy ran on with every request unrouted."""
    script = tmp_path / "chaos_script.py"
    script.write_bytes(SCRIPT.read_bytes())
    port = free_port()
    proxy = await make_proxy(
        addon=False, extra_args=["-s", str(script), "--set", f"chaos_web=127.0.0.1:{port}"]
    )
    await until(lambda: port_open("127.0.0.1", port))  # the addon runs: its dashboard is up
    script.unlink()
    said = "the addon was unloaded and not loaded again"
    await until(lambda: said in proxy.output())
    assert "Traceback" not in proxy.output()
