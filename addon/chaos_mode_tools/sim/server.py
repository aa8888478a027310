"""The simulator on a loopback port: a tornado app that plays z.ai's two doors (`handlers.py`, Anthropic,
and `openai_door.py`, OpenAI) on one account, its limits changed on request or on a schedule."""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections import deque
from collections.abc import Callable
from types import TracebackType
from typing import Any

import tornado.httpserver
import tornado.netutil
import tornado.web

from chaos_mode.zai.quota import QUOTA_PATH
from chaos_mode_tools.sim.content_filter import ContentFilter
from chaos_mode_tools.sim.credits import SimCredits
from chaos_mode_tools.sim.handlers import (
    CountTokensHandler,
    FaultsHandler,
    LimitsHandler,
    MessagesHandler,
    NotFoundHandler,
    QuotaHandler,
    ResetHandler,
    SeenHeadersHandler,
    SimQuotaHandler,
    StatsHandler,
)
from chaos_mode_tools.sim.limits import LimitChange, ScheduledChange
from chaos_mode_tools.sim.openai_door import CHAT_PATHS, MODELS_PATHS, ChatCompletionsHandler, ModelsHandler
from chaos_mode_tools.sim.prompt_cache import PromptCache
from chaos_mode_tools.sim.quota import SimQuota
from chaos_mode_tools.sim.settings import SimSettings
from chaos_mode_tools.sim.state import Fault

logger = logging.getLogger("chaos_mode_tools.sim")

SEEN_HEADERS = 64


class SimServer:
    """The simulator on a loopback port: ``port = await server.start()`` ... ``await server.stop()``."""

    def __init__(self, settings: SimSettings | None = None, clock: Callable[[], float] | None = None) -> None:
        """``clock``: seconds, for the schedule and ``limitChanges`` (default: the event loop's)."""
        self.settings = settings if settings is not None else SimSettings()
        self.settings.validate()
        s = self.settings
        self._clock = clock
        self.state = s.new_state(self._time)
        self.refused = frozenset(self.settings.refuse)
        self.retired = frozenset(self.settings.retired)
        self.created = int(time.time())  # the models endpoint's `created` of every model
        self.model_list_reads = 0
        self.quota = self._new_quota()
        self.credits = self._new_credits()
        self.prompt_cache = self._new_prompt_cache()
        self.content_filter = ContentFilter(tuple(s.filter_phrases), s.filter_scope)
        # The headers of the last requests for a model (`GET /sim/headers`), the key's left out: a test
        # checks what reached z.ai on every attempt.
        self.seen_headers: deque[dict[str, str]] = deque(maxlen=SEEN_HEADERS)
        self._started = 0.0
        self._pending: list[ScheduledChange] = []
        self._timer: asyncio.TimerHandle | None = None
        self._http: tornado.httpserver.HTTPServer | None = None
        self._port: int | None = None
        self._active: set[MessagesHandler] = set()
        self._idle = asyncio.Event()
        self._idle.set()
        self._stopping = asyncio.Event()

    # -- lifecycle -------------------------------------------------------------------------------------

    async def start(self) -> int:
        """Bind and start serving; returns the bound port."""
        if self._http is not None:
            raise RuntimeError("simulator already started")
        self._stopping = asyncio.Event()
        sockets = tornado.netutil.bind_sockets(self.settings.port, address=self.settings.host)
        server = tornado.httpserver.HTTPServer(
            self.make_app(), decompress_request=True, ssl_options=self._tls()
        )
        server.add_sockets(sockets)
        self._http = server
        self._port = int(sockets[0].getsockname()[1])
        self._restart_schedule()
        return self._port

    def _tls(self) -> ssl.SSLContext | None:
        """The server side of HTTPS when a certificate is set (the key may sit in the certificate's file)."""
        cert = self.settings.tls_cert
        if cert is None:
            return None
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert, self.settings.tls_key)
        return context

    async def stop(self, timeout: float = 5.0) -> None:
        """Stop listening, close every connection, wait (bounded) for the handlers to finish."""
        server, self._http = self._http, None
        if server is None:
            return
        self._stopping.set()
        self._cancel_timer()
        server.stop()
        try:
            async with asyncio.timeout(timeout):
                await server.close_all_connections()
        except TimeoutError:
            logger.warning("chaos-sim: connections did not close within %.1fs", timeout)
        for handler in list(self._active):
            handler.mark_closed()
        try:
            async with asyncio.timeout(timeout):
                await self._idle.wait()
        except TimeoutError:
            logger.warning("chaos-sim: %d handlers still running after stop", len(self._active))

    async def __aenter__(self) -> SimServer:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("simulator not started")
        return self._port

    @property
    def base_url(self) -> str:
        """``http://HOST:PORT``, ``https://`` with a certificate (the root; the Anthropic base URL is
        :attr:`anthropic_base_url`)."""
        host = self.settings.host
        if ":" in host:
            host = f"[{host}]"
        return f"{self.settings.scheme}://{host}:{self.port}"

    @property
    def anthropic_base_url(self) -> str:
        """``http://HOST:PORT/api/anthropic``, what an Anthropic client takes as ``base_url``."""
        return self.base_url + "/api/anthropic"

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    # -- programmatic control (what the /sim/* endpoints do) -------------------------------------------

    def stats(self) -> dict[str, Any]:
        return {
            **self.state.snapshot(),
            "quota": self.quota.snapshot(),
            "credits": None if self.credits is None else self.credits.snapshot(),
            "promptCache": None if self.prompt_cache is None else self.prompt_cache.snapshot(),
            "modelListReads": self.model_list_reads,
            "elapsedSeconds": round(self.now(), 3),
        }

    def reset(self) -> None:
        """Counters and faults cleared, the first limits back, the schedule started again from now, a
        fresh quota window."""
        self.state.reset()
        self.quota = self._new_quota()
        self.credits = self._new_credits()
        self.prompt_cache = self._new_prompt_cache()
        self.seen_headers.clear()
        self.model_list_reads = 0
        self._restart_schedule()

    def _new_quota(self) -> SimQuota:
        s = self.settings
        return SimQuota(s.quota, s.quota_window_seconds, s.quota_weights)

    def _new_credits(self) -> SimCredits | None:
        s = self.settings
        return SimCredits(s.caps, s.credit_window_seconds, s.credit_weights) if s.caps else None

    def _new_prompt_cache(self) -> PromptCache | None:
        ttl = self.settings.prompt_cache_seconds
        return None if ttl is None else PromptCache(ttl, self._time)

    def now(self) -> float:
        """Seconds since the simulator started (or was last reset)."""
        return self._time() - self._started

    def set_limits(self, change: LimitChange) -> None:
        """Apply a change of limits now (ValueError naming an unknown model; nothing changes then)."""
        self.state.apply(change, self.now())

    def apply_due_changes(self) -> None:
        """Apply every scheduled change whose time has come, in order; wait for the next one."""
        self._cancel_timer()
        while self._pending and self._pending[0].at_seconds <= self.now():
            self.set_limits(self._pending.pop(0).change)
        if self._pending and self._http is not None:
            delay = max(0.0, self._pending[0].at_seconds - self.now())
            self._timer = asyncio.get_running_loop().call_later(delay, self.apply_due_changes)

    def _time(self) -> float:
        return self._clock() if self._clock is not None else asyncio.get_running_loop().time()

    def _restart_schedule(self) -> None:
        self._started = self._time()
        self._pending = list(self.settings.schedule)
        self.apply_due_changes()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def add_fault(self, fault: Fault) -> None:
        self.state.add_fault(fault)

    def make_app(self) -> tornado.web.Application:
        args = {"sim": self}
        return tornado.web.Application(
            [
                (CHAT_PATHS, ChatCompletionsHandler, args),
                (MODELS_PATHS, ModelsHandler, args),
                (r"/sim/stats", StatsHandler, args),
                (r"/sim/faults", FaultsHandler, args),
                (r"/sim/headers", SeenHeadersHandler, args),
                (r"/sim/reset", ResetHandler, args),
                (r"/sim/limits", LimitsHandler, args),
                (r"/sim/quota", SimQuotaHandler, args),
                (QUOTA_PATH, QuotaHandler, args),
                (r".*/v1/messages/count_tokens/?", CountTokensHandler, args),
                (r".*/v1/messages/?", MessagesHandler, args),
            ],
            default_handler_class=NotFoundHandler,
            default_handler_args=args,
            log_function=self._log_request,
            compress_response=False,
        )

    def _log_request(self, handler: tornado.web.RequestHandler) -> None:
        if not self.settings.verbose:
            return
        request = handler.request
        model = handler.model if isinstance(handler, MessagesHandler) else None
        # Never the headers: they carry the client's x-api-key / Authorization.
        logger.info(
            "%s %s -> %d in %.0f ms%s",
            request.method,
            request.path,
            handler.get_status(),
            1000.0 * request.request_time(),
            f" model={model}" if model else "",
        )

    def _handler_started(self, handler: MessagesHandler) -> None:
        self._active.add(handler)
        self._idle.clear()

    def _handler_done(self, handler: MessagesHandler) -> None:
        self._active.discard(handler)
        if not self._active:
            self._idle.set()
