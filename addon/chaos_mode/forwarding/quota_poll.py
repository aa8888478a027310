"""Reading the account with the forwarder's own HTTP client: z.ai's model list every `MODELS_SECONDS` (handed
to `listing`: `Learned.listed`), and its quota every `pollSeconds`, twice as long after each
failure (up to `pollBackoffMaxSeconds`), a failure shown in the tracker (`/api/status`) and logged once,
never fatal, whatever it raised; and
at once when the tracker asks (`read_soon`: pacing's hard stop holds and the requests it let go are all
answered, so a reading may lift it), unless readings are failing.

The key goes only into the request's `Authorization` header: no text this module makes holds it (a body
that echoes it has it masked), and the request is no mitmproxy flow (no flow file, no comment).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from chaos_mode.forwarding.decoding import CODINGS, Outcome, coding_of, decode
from chaos_mode.forwarding.upstream import Destination, UpstreamClients, UpstreamFailed
from chaos_mode.quota.reading import masked, read_quota
from chaos_mode.quota.tracker import QuotaTracker
from chaos_mode.routing.aliases import read_listing
from chaos_mode.zai import json_body
from chaos_mode.zai.catalog import MODELS_PATH
from chaos_mode.zai.quota import QUOTA_PATH

log = logging.getLogger("chaos_mode")

READ_SECONDS: Final = (
    20.0  # one reading, connection included, before it counts as failed (at most the interval)
)
MAX_BODY: Final = 256 * 1024  # bytes of a quota answer read, as it came and once decoded
SAID: Final = 200  # characters of an unexpected failure's text shown, the key masked first
MODELS_SECONDS: Final = 300.0  # how often z.ai's model list is read (a failed reading waits as long)


@dataclass(frozen=True, slots=True)
class PollPlan:
    """Where the quota is read and how often."""

    destination: Destination
    every: float
    backoff_max: float


def next_delay(plan: PollPlan, failures: int) -> float:
    """Seconds to the next reading after `failures` failures in a row."""
    factor: float = 2.0 ** min(failures, 30)
    return min(plan.every * factor, max(plan.backoff_max, plan.every))


class QuotaPoller:
    """One task reading the quota into `tracker` while started."""

    def __init__(
        self,
        clients: UpstreamClients,
        tracker: QuotaTracker,
        listing: Callable[[list[str]], None] | None = None,
    ) -> None:
        self._clients = clients
        self._tracker = tracker
        self._listing = listing  # what z.ai's model list names is handed here
        self._models_due = -math.inf  # the loop's time the model list is read next
        self._task: asyncio.Task[None] | None = None
        self._soon = asyncio.Event()  # the tracker asked for a reading before the next poll
        self._warned: set[str] = set()
        self.failures = 0  # in a row
        self.reads = 0

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self, plan: PollPlan, key: Callable[[], str]) -> None:
        """Read now, then on `plan`'s schedule; `key` gives the key at each reading (never stored here)."""
        self.stop()
        self._tracker.read_soon = self._soon.set
        self._task = asyncio.get_running_loop().create_task(self._run(plan, key))

    def stop(self) -> None:
        self._tracker.read_soon = None
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _run(self, plan: PollPlan, key: Callable[[], str]) -> None:
        while True:
            self._soon.clear()  # asked for while this reading is on its way: the next one goes at once
            loop = asyncio.get_running_loop()
            if self._listing is not None and loop.time() >= self._models_due:
                self._models_due = loop.time() + MODELS_SECONDS
                await self._list_guarded(plan, key)
            failed = await self._read_guarded(plan, key)
            self.failures = self.failures + 1 if failed else 0
            delay = next_delay(plan, self.failures)
            if self.failures:
                await asyncio.sleep(delay)
                continue
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._soon.wait()

    async def _read_guarded(self, plan: PollPlan, key: Callable[[], str]) -> bool:
        """`read_once`, anything it raises a failed reading (shown, logged once), never the poller's end."""
        secret = ""
        try:
            secret = key()
            return await self.read_once(plan.destination, secret, timeout=min(READ_SECONDS, plan.every))
        except Exception as exc:  # whatever went wrong, the poller goes on with its backoff
            said = masked(f"{type(exc).__name__}: {exc}", secret)[:SAID]
            error = masked(f"quota not read from {plan.destination.authority}: {said}", secret)
            if error not in self._warned:
                self._warned.add(error)
                log.warning("chaos-mode: %s", error)
            self._tracker.failed(error)
            return True

    async def _list_guarded(self, plan: PollPlan, key: Callable[[], str]) -> None:
        """Read z.ai's model list into `listing`; a failure is logged once (masked) and read again later."""
        secret = ""
        try:
            secret = key()
            timeout = min(READ_SECONDS, plan.every)
            bearer = f"Bearer {secret}"
            status, body, error = await self._fetch(plan.destination, MODELS_PATH, bearer, timeout)
            if error is None and status != 200:
                error = f"HTTP {status}"
            names = None if error is not None else read_listing(json_body.loads(body))
            if names is None:
                raise ValueError(error or "not an OpenAI-style list")
        except Exception as exc:  # whatever went wrong, the quota is still read
            said = masked(f"{exc}", secret)[:SAID]
            self._warn_once(masked(f"model list not read from {plan.destination.authority}: {said}", secret))
            return
        assert self._listing is not None
        self._listing(names)

    async def read_once(self, to: Destination, key: str, *, timeout: float | None = None) -> bool:
        """One reading into the tracker, given up after `timeout` seconds (`READ_SECONDS`); True when it
        failed (the tracker says why)."""
        self.reads += 1
        asked = self._tracker.asked()  # the proxy's count as the reading is asked for (pacing's bounds)
        status, body, error = await self._fetch(
            to, QUOTA_PATH, key, READ_SECONDS if timeout is None else timeout
        )
        if error is None and status != 200:
            error = f"HTTP {status}" + (": the key was refused" if status in (401, 403) else "")
        if error is None:
            result = read_quota(body, key)
            for warning in result.warnings:
                self._warn_once(masked(f"z.ai's quota answer: {warning}", key))
            if result.reading is not None:
                self._tracker.read(result.reading, asked)
                return False
            error = result.warnings[0] if result.warnings else "no reading"
        self._tracker.failed(masked(f"quota not read from {to.authority}: {error}", key))
        return True

    async def _fetch(
        self, to: Destination, path: str, key: str, timeout: float
    ) -> tuple[int, bytes, str | None]:
        headers = [(b"authorization", key.encode("latin-1", "replace")), (b"accept", b"application/json")]
        try:
            async with asyncio.timeout(timeout):
                response = await self._clients.send(to, b"GET", path.encode(), headers, b"")
                try:
                    _, body, complete = await response.read_body(MAX_BODY)
                finally:
                    response.close()
        except TimeoutError:
            return 0, b"", f"no answer within {timeout:g} s"
        except (UpstreamFailed, OSError) as exc:
            return 0, b"", str(exc) or type(exc).__name__
        if not complete:
            return response.status, b"", "the answer broke off or is too large"
        coding = coding_of(response.header(b"content-encoding"))
        if coding in CODINGS:
            decoded = decode(body, coding, cap=MAX_BODY)
            if decoded.outcome is Outcome.OVER_CAP:
                return response.status, b"", f"the answer decodes to more than {MAX_BODY} bytes"
            body = decoded.body if decoded.whole else body  # not what its coding says: read as it came
        return response.status, body, None

    def _warn_once(self, warning: str) -> None:
        if warning not in self._warned:
            self._warned.add(warning)
            log.warning("chaos-mode: %s", warning)
