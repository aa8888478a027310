"""The forwarder's loopback port inside a real mitmdump, as any local process can reach it: a body without a
token is never read (nor held), a malformed request costs one log line and no traceback."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from chaos_mode_tools.devtools.processes import ProxyProcess

from .support import routing

pytestmark = [pytest.mark.e2e]

TIMEOUT = 30.0
ANNOUNCED = 300 << 20  # 300 MiB
SENT_AT_MOST = 64 << 20  # what the test would go on sending to a server that reads it all
GROWTH_LIMIT = 32 << 20  # what the proxy's memory may grow by meanwhile


@pytest.fixture(scope="module")
def proxy() -> Iterator[ProxyProcess]:
    with ProxyProcess(config=routing(), extra_args=["--set", "termlog_verbosity=debug"]) as proxy:
        yield proxy


def forwarder_port(proxy: ProxyProcess) -> int:
    found = re.search(r"forwarder on 127\.0\.0\.1:(\d+)", proxy.output())
    assert found, proxy.output()[-2000:]
    return int(found[1])


async def read_what_comes(reader: asyncio.StreamReader) -> bytes:
    """What the peer sent until it closed the connection (or reset it, once the rest of our body came)."""
    data = b""
    with contextlib.suppress(ConnectionError):
        while chunk := await reader.read(65536):
            data += chunk
    return data


def resident_bytes(proxy: ProxyProcess) -> int:
    assert proxy.proc is not None
    status = Path(f"/proc/{proxy.proc.pid}/status").read_text()
    found = re.search(r"VmRSS:\s+(\d+) kB", status)
    assert found
    return int(found[1]) * 1024


async def test_a_body_without_a_token_is_refused_before_it_is_read(proxy: ProxyProcess) -> None:
    """300 MiB announced and sent with no token (it once peaked the proxy at 703 MB): a 403 on the head."""
    before = resident_bytes(proxy)
    reader, writer = await asyncio.open_connection("127.0.0.1", forwarder_port(proxy))
    head = b"POST /api/anthropic/v1/messages HTTP/1.1\r\nhost: api.z.ai\r\ncontent-length: %d\r\n\r\n"
    writer.write(head % ANNOUNCED)
    sent, block = 0, b"{" * (1 << 20)
    async with asyncio.timeout(TIMEOUT):
        answer = asyncio.ensure_future(read_what_comes(reader))
        try:
            while sent < SENT_AT_MOST and not answer.done():
                writer.write(block)
                await writer.drain()
                sent += len(block)
        except ConnectionError:
            pass  # the proxy closed the connection on the rest of the body
        data = await answer
    writer.close()
    assert data.startswith(b"HTTP/1.1 403 "), data[:200]
    assert resident_bytes(proxy) - before < GROWTH_LIMIT


@pytest.mark.parametrize(
    "data",
    [
        b"GARBAGE\r\n\r\n",
        b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: -6\r\n\r\n",
        b"POST / HTTP/1.1\r\nhost: x\r\nx-api-key sk-e2e-secret-in-a-bad-line\r\n\r\n",
    ],
)
async def test_a_malformed_request_costs_one_log_line(proxy: ProxyProcess, data: bytes) -> None:
    before = proxy.output()
    reader, writer = await asyncio.open_connection("127.0.0.1", forwarder_port(proxy))
    writer.write(data)
    async with asyncio.timeout(TIMEOUT):
        answer = await reader.read()
    writer.close()
    assert answer.startswith(b"HTTP/1.1 400 "), answer
    await asyncio.sleep(0.2)  # the proxy's log is another process's output
    new = proxy.output()[len(before) :]
    assert new.count("refused a request on loopback") == 1, new
    assert "Traceback" not in new and "secret" not in new, new
