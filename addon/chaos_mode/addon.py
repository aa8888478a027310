"""The mitmproxy adapter: options, hooks and commands around the pure ChaosPool.

With resend.py, flow_bodies.py, waiting.py and rejection.py, the only modules of the package proper
that import mitmproxy (the flow recorder, a development tool, does too). Facts about one flow live in
`flow.metadata["chaos"]` (plain values, so they survive in saved flow files), never on `self`.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
import uuid
from collections.abc import Callable
from random import Random
from typing import TYPE_CHECKING, Any, Final

from mitmproxy import command, ctx, exceptions, http
from mitmproxy.connection import ConnectionState
from mitmproxy.proxy.mode_specs import ProxyMode

from .config import ConfigError, ModelRouting, default_config
from .config_file import load_config
from .flow_bodies import SESSION, is_event_stream, read_message, request_headers, set_body, usage_of
from .limit_file import read_state, state_path, write_state
from .message_request import BadRequest
from .metrics import ChaosMetrics
from .panel import render_panel
from .pool import NO_ATTEMPTS, ChaosPool, RequestInfo, Selection, Ticket
from .rejection import rate_limited
from .replies import TRIED_HEADER
from .resend import Resender, ResendFailed
from .sse import SseObserver
from .stats import Outcome, Stats, chaos_stats
from .tiers import TierClassifier
from .waiting import CLIENT_GONE, acquire_while_connected
from .web import WebServer, exposed_hosts, parse_listen
from .zai_errors import Action, UpstreamError, classify_error, parse_retry_after

if TYPE_CHECKING:
    from pathlib import Path

log = logging.getLogger("chaos_mode")

META: Final = "chaos"
MESSAGES_SUFFIX: Final = "/v1/messages"
CLIENT_DISCONNECTED: Final = "Client disconnected."  # mitmproxy's flow.error.msg when the client left
ENABLED_CHOICES: Final = ("auto", "true", "false")
SAVE_DELAY: Final = 1.0  # seconds: learned limits that change in a burst are written once


class ChaosMode:
    """Route every Anthropic-Messages request to z.ai onto the best GLM model with a free slot."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        rng: Random | None = None,
    ) -> None:
        self._clock = clock
        self._wall_clock = wall_clock
        self.config: ModelRouting = default_config()
        self.pool = ChaosPool(self.config, clock=clock, wall_clock=wall_clock, rng=rng)
        self.stats = Stats(self.config, wall_clock)
        self.classifier = TierClassifier(self.config)
        self.metrics = ChaosMetrics(self.pool, self.stats)
        self.web = WebServer(self.chaos_stats, self.metrics.render)
        self.resender = Resender()
        self._listen: tuple[str, int] | None = None
        self._running = False
        self._loaded = False  # configure() has run once (the script's load)
        self._token = uuid.uuid4().hex[:12]  # marks the slots this instance holds (scripts reload)
        self._warned: set[str] = set()
        self._limits_path: Path | None = None
        self._saved_version = -1  # the learned limits' version last written (or read)
        self._save_timer: asyncio.TimerHandle | None = None

    # -- options ----------------------------------------------------------------------------------

    def load(self, loader: Any) -> None:
        loader.add_option(
            "chaos_config",
            str,
            "",
            "Path to a YAML or JSON file with a modelRouting block (the catalog, chaosMode, queue, "
            "cooldown...). Empty: the built-in z.ai catalog. Changing it reloads without dropping "
            "in-flight counts.",
        )
        loader.add_option(
            "chaos_enabled",
            str,
            "auto",
            "Turn chaos mode on or off, overriding chaosMode.enabled of the config; auto: the config "
            "decides (off by default).",
            choices=list(ENABLED_CHOICES),
        )
        loader.add_option(
            "chaos_limits_file",
            str,
            "",
            "Where learned concurrency limits are kept across restarts (JSON, written atomically). Empty: "
            "chaos-mode-limits.json in mitmproxy's confdir; off: nowhere. A corrupt or foreign file is "
            "ignored with one warning.",
        )
        loader.add_option(
            "chaos_web",
            str,
            "127.0.0.1:9464",
            "Listen address (HOST:PORT) of the chaos-mode server: the dashboard (/), /api/status, "
            "/api/events and Prometheus /metrics. Empty: off.",
        )

    def configure(self, updated: set[str]) -> None:
        first, self._loaded = not self._loaded, True
        try:
            self._configure(updated)
        except exceptions.OptionsError as exc:
            if not first:
                raise  # mitmproxy rolls the option back; the config in force stays
            # Loading the script: mitmproxy would print our traceback. Say it plainly instead; an error
            # logged at start-up makes mitmdump exit, and meanwhile chaos mode keeps its safe defaults.
            log.error("chaos-mode: %s", exc)

    def _configure(self, updated: set[str]) -> None:
        enabled = ctx.options.chaos_enabled
        if "chaos_enabled" in updated and enabled not in ENABLED_CHOICES:
            # mitmproxy 12 does not enforce `choices` for --set: without this, "on" would mean off.
            raise exceptions.OptionsError(
                f"chaos_enabled: must be one of {', '.join(ENABLED_CHOICES)}, not {enabled[:40]!r}"
            )
        if "chaos_config" in updated or "chaos_enabled" in updated:
            try:
                config = self._read_config(ctx.options.chaos_config, ctx.options.chaos_enabled)
            except ConfigError as exc:
                raise exceptions.OptionsError(f"chaos_config: {exc}") from None
            self._apply(config)
        if "chaos_limits_file" in updated or "confdir" in updated:
            self._limits_path = state_path(ctx.options.chaos_limits_file, ctx.options.confdir)
            self._restore_limits()
        if "chaos_web" in updated:
            try:
                self._listen = parse_listen(ctx.options.chaos_web)
            except ValueError as exc:
                raise exceptions.OptionsError(f"chaos_web: {exc}") from None
            if self._running:
                self._start_web()

    @staticmethod
    def _read_config(path: str, enabled: str) -> ModelRouting:
        config = load_config(path) if path else default_config()
        if enabled != "auto":
            chaos = config.chaos_mode.model_copy(update={"enabled": enabled == "true"})
            config = config.model_copy(update={"chaos_mode": chaos})
        return config

    def _apply(self, config: ModelRouting) -> None:
        self.config = config
        self.pool.reconfigure(config)
        self.stats.reconfigure(config)
        self.classifier = TierClassifier(config)
        chaos = config.chaos_mode
        log.info(
            "chaos mode %s: %s over %d models%s, %d slots%s",
            "on" if chaos.enabled else "off",
            chaos.strategy,
            len(config.models),
            " (the config's models replace the built-in catalog)" if config.replaces_catalog else "",
            config.total_capacity,
            " to start with (limits learned from z.ai's answers)" if config.learning.enabled else " (fixed)",
        )

    # -- learned limits across restarts -------------------------------------------------------------

    def _restore_limits(self) -> None:
        path = self._limits_path
        if path is None:
            return
        try:
            data = read_state(path)
            restored = 0 if data is None else self.pool.limits.restore(data)
        except ValueError as exc:
            log.warning("chaos-mode: learned limits not restored, starting from the catalog: %s", exc)
            return
        self._saved_version = self.pool.limits.version
        if restored:
            self.pool.reconfigure(self.config)  # re-derive what selection reads from the restored limits
            self._saved_version = self.pool.limits.version
            log.info("chaos-mode: %d learned limits restored from %s", restored, path)

    def _limits_touched(self) -> None:
        """Write the learned limits soon after they change (once for a burst of changes)."""
        if self.pool.limits.version == self._saved_version or self._save_timer is not None:
            return
        if self._limits_path is None:
            return
        self._save_timer = asyncio.get_running_loop().call_later(SAVE_DELAY, self._save_limits)

    def _save_limits(self) -> None:
        self._save_timer = None
        path = self._limits_path
        if path is None or self.pool.limits.version == self._saved_version:
            return
        version = self.pool.limits.version
        try:
            write_state(path, self.pool.limits.dump())
        except (OSError, ValueError) as exc:
            self._warn_once("limits-file", f"learned limits could not be written to {path}: {exc}")
            return
        self._saved_version = version

    # -- lifecycle --------------------------------------------------------------------------------

    def running(self) -> None:
        self._running = True
        self._warn_if_exposed()
        self._start_web()
        # What is alive now (mitmproxy's and our modules, classes, the config) lives as long as the
        # process: out of the collector's way, every collection no longer walks it (callgrind: about 2% of
        # mitmdump's instructions per request). `done()` gives it back, so a script reload leaks nothing.
        gc.freeze()

    def done(self) -> None:
        self._running = False
        if self._save_timer is not None:
            self._save_timer.cancel()
        self._save_limits()
        self.web.stop()
        self.resender.close()
        gc.unfreeze()

    def _warn_if_exposed(self) -> None:
        """One warning line when the proxy listens beyond loopback (mitmproxy's default: every interface)."""
        try:
            modes = [ProxyMode.parse(spec) for spec in ctx.options.mode]
        except ValueError:
            return  # mitmproxy refuses the mode itself
        hosts = [mode.listen_host(ctx.options.listen_host) for mode in modes if mode.type_name != "local"]
        self.stats.exposed_listen = exposed = exposed_hosts(hosts)
        if exposed:
            log.warning(
                "chaos-mode: the proxy listens on %s, not only loopback: anyone who can reach this machine "
                "can send requests through it; add --listen-host 127.0.0.1 unless that is meant",
                ", ".join(exposed),
            )

    def _start_web(self) -> None:
        self.web.stop()
        if self._listen is None:
            return
        try:
            host, port = self.web.start(*self._listen)
        except OSError as exc:
            # The proxy goes on without its dashboard: routing matters more than the page.
            host, port = self._listen
            shown = f"[{host}]" if ":" in host else host
            log.warning(
                "chaos-mode: dashboard not started, cannot listen on %s:%d (%s); the proxy runs without it. "
                "Choose another address with --set chaos_web=%s:%d, or --set chaos_web= for none",
                shown,
                port,
                exc.strerror or exc,
                shown,
                port + 1 if port < 65535 else port - 1,
            )
            return
        log.info("chaos-mode dashboard on http://%s:%d/ (Prometheus: /metrics)", host, port)

    # -- hooks ------------------------------------------------------------------------------------

    def _is_messages_call(self, request: http.Request) -> bool:
        if request.method != "POST" or not request.path.split("?", 1)[0].endswith(MESSAGES_SUFFIX):
            return False
        hosts = self.config.upstream_hosts
        return request.host.lower() in hosts or request.pretty_host.lower() in hosts

    async def request(self, flow: http.HTTPFlow) -> None:
        if flow.response or flow.error or not flow.live or not self._is_messages_call(flow.request):
            return
        try:
            await self._route(flow)
        except Exception:
            # Never crash the proxy: the flow goes on as it is; a slot taken is released when it ends.
            log.exception("chaos-mode: internal error while routing a request; it goes on unrouted")

    async def _route(self, flow: http.HTTPFlow) -> None:
        request = flow.request
        limit = self.config.streams.max_body_bytes
        headers = request_headers(request)
        try:
            message = read_message(request, headers, limit=limit)
        except BadRequest as exc:
            self._pass_bad(flow, exc)
            return
        tier, known = self.classifier.lookup(message.model)
        if not known:
            self._warn_once("unknown-model", f"unknown model names are routed as {tier} requests")
        meta: dict[str, Any] = {
            "owner": self._token,
            "originalModel": message.model,
            "tier": tier,
            "held": None,
            "attempted": [],
            "failovers": 0,
        }
        flow.metadata[META] = meta
        chaos = self.config.chaos_mode
        if not chaos.enabled:
            meta["mode"] = "off"
            return
        header = headers.get(SESSION)
        session = header.decode("utf-8", "replace").strip() if header else None
        sticky = message.sticky_key(session) if chaos.sticky_conversations else None
        meta["sticky"] = sticky
        meta["session"] = session or None
        info = message.info
        meta["request"] = [info.input_tokens, info.max_output_tokens]
        started = self._clock()
        meta["arrived"] = started
        ticket = Ticket(tier, NO_ATTEMPTS, info, sticky, meta["session"])
        # The common case, a free slot and nobody waiting, takes no coroutine.
        selection = self.pool.admit_now(ticket) or await acquire_while_connected(self.pool, flow, ticket)
        waited = self._clock() - started
        meta["waited"] = round(waited, 3)
        self.stats.queue_wait(tier, waited)
        if selection is CLIENT_GONE:
            self._finish(meta, "aborted")
            if flow.killable:
                flow.kill()
            return
        if selection is None:
            self._reject(flow, meta, [])
            return
        assert isinstance(selection, Selection)
        self._hold(meta, selection)
        set_body(request, message.with_model(selection.model), headers)
        wait_note = f" · waited {waited:.1f} s" if waited >= 0.05 else ""
        flow.comment = f"{message.model} → {selection.model} · {selection.reason}{wait_note}"

    def _hold(self, meta: dict[str, Any], selection: Selection) -> None:
        meta["held"] = selection.model
        meta["model"] = selection.model
        meta["reason"] = selection.reason
        meta["admitted"] = [selection.in_flight, selection.total, selection.probe]
        meta["attempted"] = [*meta["attempted"], selection.model]

    @staticmethod
    def _selection(meta: dict[str, Any]) -> Selection:
        """The slot the flow's current attempt was sent with, as the pool gave it."""
        in_flight, total, probe = meta["admitted"]
        return Selection(meta["model"], meta["reason"], in_flight, total, probe)

    def _answered(self, meta: dict[str, Any]) -> None:
        """z.ai answered the current attempt with a 200: what it was sent with held. Once per attempt."""
        if meta.get("answered") == len(meta["attempted"]):
            return
        meta["answered"] = len(meta["attempted"])
        self.pool.report_success(self._selection(meta))
        self._limits_touched()

    def _reject(self, flow: http.HTTPFlow, meta: dict[str, Any], tried: list[str]) -> None:
        """Answer with our own 429: nothing eligible could take the request in time."""
        flow.response, why = rate_limited(self.pool, meta["tier"], tried, flow.response, self._wall_clock())
        meta["rejected"] = why
        flow.comment = f"{meta['originalModel']} → 429 from chaos-mode · {why}"
        flow.marked = ":no_entry:"

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        meta = flow.metadata.get(META)
        response = flow.response
        if meta is None or response is None or response.status_code != 200:
            return
        if meta.get("held") and meta.get("owner") == self._token:
            self._answered(meta)
        if not is_event_stream(response):
            return
        observer = SseObserver()

        def observe(chunk: bytes) -> bytes:
            if observer.feed(chunk):
                meta["usage"] = [observer.input_tokens, observer.output_tokens]
                meta["stopped"] = observer.stopped
            return chunk

        response.stream = observe

    async def response(self, flow: http.HTTPFlow) -> None:
        meta = flow.metadata.get(META)
        if meta is None or meta.get("owner") != self._token or flow.response is None:
            return
        if meta.get("outcome"):  # already finished (a second response, or one after an error)
            return
        try:
            answer = flow.response
            if meta.get("held") and answer.status_code >= 400 and not answer.stream:
                await self._settle(flow, meta)  # an error z.ai sent whole: perhaps a failover
                if meta.get("held") and flow.response is not None and flow.response.status_code == 200:
                    self._answered(meta)  # a failed-over answer, fetched by the addon
            self._record(flow, meta)
        except Exception:
            log.exception("chaos-mode: internal error while finishing a response")
        finally:
            self._release(meta)

    async def _settle(self, flow: http.HTTPFlow, meta: dict[str, Any]) -> None:
        """Read z.ai's verdict; fail over to another model while no byte has reached the client."""
        while True:
            response = flow.response
            assert response is not None
            if response.status_code < 400 or response.stream:
                return
            now = self._wall_clock()
            proxy_made = response.headers.get("server", "").startswith("mitmproxy")
            content = response.get_content(strict=False)
            error = classify_error(response.status_code, content, now=now, proxy_made=proxy_made)
            if error is None:
                return
            model = meta["held"]
            retry_after = parse_retry_after(response.headers.get("retry-after"), now=now)
            self.pool.report_error(model, error, retry_after, self._selection(meta))
            self._limits_touched()
            self.stats.upstream_error(model, error.code, response.status_code)
            flow.marked = ":warning:"
            if error.action is Action.FATAL:
                log.error("z.ai refuses every request: %s", error.reason)
            if not error.fails_over or meta["failovers"] >= self.config.streams.max_failovers:
                if error.fails_over:
                    self._reject(flow, meta, list(meta["attempted"]))
                return
            if not await self._failover(flow, meta, error):
                return

    async def _failover(self, flow: http.HTTPFlow, meta: dict[str, Any], error: UpstreamError) -> bool:
        """Move the request to another eligible model and send it again; False when it ended here."""
        failed = meta["held"]
        self._release(meta)
        tried = list(meta["attempted"])
        if error.action is not Action.CONCURRENCY or not self.pool.limits.enabled:
            # With learned limits, a full model is not a broken one: within its new limit it may serve.
            meta["refused"] = [*meta.get("refused", []), failed]
        info = RequestInfo(*meta["request"]) if meta.get("request") else None
        session = meta.get("session")
        refused = frozenset(meta.get("refused", ()))
        ticket = Ticket(meta["tier"], refused, info, meta.get("sticky"), session, counts=False)
        selection = await acquire_while_connected(self.pool, flow, ticket, since=meta.get("arrived"))
        if selection is CLIENT_GONE:
            return False
        if selection is None:
            self.stats.failover(failed, None, error.reason)
            self._reject(flow, meta, tried)
            return False
        assert isinstance(selection, Selection)
        self._hold(meta, selection)
        meta["failovers"] += 1
        self.stats.failover(failed, selection.model, error.reason)
        flow.comment = (
            f"{meta['originalModel']} → {selection.model} · failover from {failed} "
            f"({error.code or error.reason}) · {selection.reason}"
        )
        try:
            headers = request_headers(flow.request)
            message = read_message(flow.request, headers, limit=self.config.streams.max_body_bytes)
            set_body(flow.request, message.with_model(selection.model), headers)
            flow.response = await self.resender.send(flow.request, insecure=bool(ctx.options.ssl_insecure))
        except (ResendFailed, BadRequest) as exc:
            log.warning("chaos-mode: failover to %s failed: %s", selection.model, exc)
            self._reject(flow, meta, list(meta["attempted"]))
            return False
        return True

    def _record(self, flow: http.HTTPFlow, meta: dict[str, Any]) -> None:
        response = flow.response
        assert response is not None
        model = meta.get("model")
        if model and response.status_code == 200:
            usage = meta.get("usage")
            if usage is None and not response.stream:
                usage = usage_of(response)
            if usage:
                self.stats.usage(model, usage[0], usage[1])
        if meta.get("mode") == "off":
            outcome: Outcome = "passthrough"
        elif meta.get("rejected"):
            outcome = "rejected"
        else:
            outcome = "ok" if response.status_code < 400 else "error"
        self._finish(meta, outcome)

    def _finish(self, meta: dict[str, Any], outcome: Outcome) -> None:
        if meta.get("outcome"):
            return
        meta["outcome"] = outcome
        self.stats.request_done(meta.get("model") or meta.get("originalModel"), meta["tier"], outcome)

    def error(self, flow: http.HTTPFlow) -> None:
        meta = flow.metadata.get(META)
        if meta is None or meta.get("owner") != self._token:
            return
        # The client went away (aborted), or the upstream broke the flow under a waiting client (error).
        client_left = flow.client_conn.state is ConnectionState.CLOSED or (
            flow.error is not None and flow.error.msg in (CLIENT_DISCONNECTED, flow.error.KILLED_MESSAGE)
        )
        self._finish(meta, "aborted" if client_left else "error")
        # A stream the client left may still be counted upstream for a moment: release after a grace.
        grace = self.config.streams.abort_grace_seconds if client_left and flow.response is not None else 0.0
        self._release(meta, grace)

    def _release(self, meta: dict[str, Any], grace: float = 0.0) -> None:
        """Give the flow's slot back, exactly once."""
        model = meta.get("held")
        if not model or meta.get("owner") != self._token:
            return
        meta["held"] = None
        if grace > 0:
            asyncio.get_running_loop().call_later(grace, self.pool.release, model)
        else:
            self.pool.release(model)

    # -- bad input ---------------------------------------------------------------------------------

    def _pass_bad(self, flow: http.HTTPFlow, exc: BadRequest) -> None:
        self.stats.bad_requests[exc.kind] += 1
        flow.comment = f"chaos-mode: passed through untouched ({exc})"
        self._warn_once(exc.kind, f"a request passed through untouched: {exc}")

    def _warn_once(self, kind: str, message: str) -> None:
        if kind in self._warned:
            return
        self._warned.add(kind)
        log.warning("chaos-mode: %s (later ones are counted in /api/status, not logged)", message)

    # -- status and commands ------------------------------------------------------------------------

    def chaos_stats(self) -> dict[str, Any]:
        return chaos_stats(self.pool.get_status(), self.stats)

    @command.command("chaos.status")
    def status(self) -> str:
        """The Chaos Mode panel: strategy, utilization, learning, the account limit; each model's in-flight,
        limit in force (catalog→learned, why, probing) and cooldown."""
        return render_panel(self.chaos_stats())

    @command.command("chaos.limits.reset")
    def reset_limits(self) -> None:
        """Forget every learned concurrency limit: back to the catalog's values (and the saved file too)."""
        self.pool.reset_limits()
        self._saved_version = -1
        self._save_limits()
        log.info("chaos-mode: learned limits reset to the catalog's values")

    @command.command("chaos.reload")
    def reload(self) -> None:
        """Read the chaos_config file again; a bad file keeps the config in force and says why."""
        try:
            config = self._read_config(ctx.options.chaos_config, ctx.options.chaos_enabled)
        except ConfigError as exc:
            log.error("chaos-mode: config not reloaded, the old one stays in force: %s", exc)
            return
        self._apply(config)


__all__ = ["META", "TRIED_HEADER", "ChaosMode", "UpstreamError"]
