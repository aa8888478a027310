"""The mitmproxy adapter: options, hooks and commands around the pure ChaosPool.

Part of the `mitm/` package, the only one of the runtime that imports mitmproxy (the flow recorder, a
development tool, does too). Each routed flow has one owner, a
`RoutedRequest` (its slot, attempts and outcome), found by the flow in a weak map; a plain-values mirror of
it sits in `flow.metadata["chaos"]`, so saved flows keep it. The request hook admits the request and points
the flow at the forwarder, which sends it to z.ai (failing over while no byte reached the client);
`response` and `error` end it.
"""

from __future__ import annotations

import asyncio
import gc
import hashlib
import logging
import os
import secrets
import socket
import sys
import time
import weakref
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from random import Random
from typing import TYPE_CHECKING, Any, Final

from mitmproxy import command, ctx, exceptions, http
from mitmproxy.proxy.mode_specs import ProxyMode

from chaos_mode.config.file import load_config
from chaos_mode.config.schema import ConfigError, ModelRouting, default_config
from chaos_mode.config.watch import FileWatch
from chaos_mode.doors.door import door_of
from chaos_mode.doors.error_bodies import TRIED_HEADER
from chaos_mode.doors.formats import FORMATS, DoorFormat
from chaos_mode.doors.messages import BadRequest
from chaos_mode.fleet.figures import FleetFigures
from chaos_mode.fleet.slots import pool_slots
from chaos_mode.fleet.state_url import StateUrl, parse_share, parse_state_url
from chaos_mode.forwarding.decoding import OverCap
from chaos_mode.forwarding.forwarder import Forwarder, refusal_body
from chaos_mode.forwarding.quota_poll import PollPlan, QuotaPoller
from chaos_mode.forwarding.upstream import UpstreamClients, UpstreamSettings
from chaos_mode.learning.file import read_state, state_path, write_state
from chaos_mode.mitm.client_watch import client_alive, client_left
from chaos_mode.mitm.flow_bodies import (
    MAX_USAGE_BODY,
    SESSION,
    body_encoder,
    event_stream_coding,
    names_a_credential,
    read_message,
    request_headers,
    set_body,
    stream_feed,
    usage_of,
)
from chaos_mode.mitm.flow_view import META, FlowView
from chaos_mode.mitm.quota_source import parse_quota_option, quota_destination
from chaos_mode.mitm.startup_checks import (
    exposed_listen,
    parse_modes,
    unknown_options,
    unrouted_reverse_targets,
)
from chaos_mode.observe.metrics import ChaosMetrics
from chaos_mode.observe.panel import render_panel
from chaos_mode.observe.stats import Outcome, Stats, chaos_stats
from chaos_mode.observe.web import WebServer, parse_listen
from chaos_mode.request.failover import Answer, reject, settle, unreached
from chaos_mode.request.rate_limited import Reply
from chaos_mode.request.refusals import Refusals
from chaos_mode.request.routed import RoutedRequest
from chaos_mode.routing import pool_status
from chaos_mode.routing.pool import ChaosPool
from chaos_mode.routing.pool_status import served
from chaos_mode.routing.tiers import TierClassifier, UnknownNames
from chaos_mode.zai.errors import UpstreamError

if TYPE_CHECKING:
    from collections.abc import Awaitable

    from chaos_mode.fleet.redis_store import RedisFleet

log = logging.getLogger("chaos_mode")

UPSTREAM_OPTIONS: Final = frozenset(
    {
        "ssl_insecure",
        "ssl_verify_upstream_trusted_ca",
        "ssl_verify_upstream_trusted_confdir",
        "upstream_auth",
        "client_certs",
        "tls_version_server_min",
        "tls_version_server_max",
        "ciphers_server",
    }
)
ENABLED_CHOICES: Final = ("auto", "true", "false")
SESSION_CHARS: Final = 128  # a session header past this (Claude Code's is a UUID) is kept as its digest
SAVE_DELAY: Final = 1.0  # seconds: learned limits that change in a burst are written once
WATCH_SECONDS: Final = 1.0  # how often the chaos_config file's stat is looked at
STATE_OPTIONS: Final = frozenset({"chaos_state", "chaos_state_share", "chaos_state_lease_ms"})
OPTIONS: Final = frozenset(
    {"chaos_config", "chaos_enabled", "chaos_limits_file", "chaos_key", "chaos_web"} | STATE_OPTIONS
)
MIN_LEASE_MS: Final = 300


class ChaosMode:
    """Route every request to z.ai's two doors (Anthropic messages, OpenAI chat completions) onto the best
    GLM model with a free slot, from one pool."""

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
        self.stats = Stats(self.config, wall_clock, self.pool)
        self.refusals = Refusals(clock)  # the conversations z.ai refuses for themselves, and who serves
        self.classifier = TierClassifier(self.config)
        self.unknown_names = UnknownNames()  # each model name the catalog lacks, logged once
        self.metrics = ChaosMetrics(self.pool, self.stats, self._fleet_figures)
        self.web = WebServer(self.chaos_stats, self.metrics.render)
        self.forwarder = Forwarder(UpstreamClients(), wall_clock=wall_clock)
        self.quota_poller = QuotaPoller(self.forwarder.clients, self.pool.quota, self._listed)
        self._quota_env: str | None = None  # chaos_key: the variable holding the key, never the key
        # The owner of each routed flow (and its face in the flow), gone with the flow.
        self._requests: weakref.WeakKeyDictionary[http.HTTPFlow, RoutedRequest] = weakref.WeakKeyDictionary()
        self._views: weakref.WeakKeyDictionary[http.HTTPFlow, FlowView] = weakref.WeakKeyDictionary()
        self._listen: tuple[str, int] | None = None
        self._running = False
        self._loaded = False  # configure() has run once (the script's load)
        self._warned: set[str] = set()
        self._limits_path: Path | None = None
        self._saved_version = (-1, -1)  # the learned limits' and aliases' version last written (or read)
        self._save_timer: asyncio.TimerHandle | None = None
        self._config_watch: FileWatch | None = None  # the chaos_config file, as last read
        self._watch_timer: asyncio.TimerHandle | None = None
        self.fleet: RedisFleet | None = None  # chaos_state: the Redis shared with the other proxies

    # -- options ----------------------------------------------------------------------------------

    def load(self, loader: Any) -> None:
        loader.add_option(
            "chaos_config",
            str,
            "",
            "Path to a YAML or JSON file with a modelRouting block (the catalog, chaosMode, queue, "
            "cooldown...). Empty: the built-in z.ai catalog. Changing it, or editing the file, reloads "
            "without dropping in-flight counts.",
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
            "chaos_state",
            str,
            "",
            "Where slots are counted. Empty: in this process. redis://[user[:password]@]host:port/db (or "
            "rediss:// for TLS, with ?ssl_ca_certs=/path/ca.pem for a private CA): shared with every proxy "
            "naming the same Redis, for several proxies on one z.ai account. The password may come from "
            "the CHAOS_STATE_PASSWORD environment variable instead; it is never logged. Read at start-up.",
        )
        loader.add_option(
            "chaos_state_share",
            str,
            "auto",
            "While the chaos_state Redis cannot be reached, the share of each limit this proxy uses on its "
            "own: a fraction like 0.5, or auto (1 / the number of proxies last seen, 0.5 if none was).",
        )
        loader.add_option(
            "chaos_state_lease_ms",
            int,
            10_000,
            "With chaos_state: how long a slot's lease lives unless renewed (renewed every third of it "
            "while the request runs). A proxy that dies gives its slots back within this time.",
        )
        loader.add_option(
            "chaos_key",
            str,
            "",
            "The NAME of an environment variable holding a z.ai key used only to read the account: its quota "
            "(GET /api/monitor/usage/quota/limit on the host the proxy forwards to, every quota.pollSeconds) "
            "and its models list (every 5 minutes). Empty: off; the quota is then estimated from the proxy's "
            "own traffic. The key is never logged or shown.",
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
            # Loading the script: mitmproxy would print our traceback. Say it plainly instead.
            proxy = ctx.master.addons.get("proxyserver")
            if proxy is not None and not proxy.is_running:
                # Start-up: mitmproxy loads the script on its loop while its servers come up; they say
                # "listening at ..." a turn of the loop later. Out first, as mitmproxy does for bad options.
                sys.stdout.flush()  # mitmproxy's lines before ours, stdout and stderr in one pipe too
                raise SystemExit(f"chaos-mode: {exc}") from None
            log.error("chaos-mode: %s", exc)  # the script reloaded: chaos mode keeps its safe defaults

    def _configure(self, updated: set[str]) -> None:
        enabled = ctx.options.chaos_enabled
        if "chaos_enabled" in updated and enabled not in ENABLED_CHOICES:
            # mitmproxy 12 does not enforce `choices` for --set: without this, "on" would mean off.
            raise exceptions.OptionsError(
                f"chaos_enabled: must be one of {', '.join(ENABLED_CHOICES)}, not {enabled[:40]!r}"
            )
        if "chaos_config" in updated or "chaos_enabled" in updated:
            watch = _watch(ctx.options.chaos_config)
            try:
                config = self._read_config(ctx.options.chaos_config, ctx.options.chaos_enabled)
            except ConfigError as exc:
                raise exceptions.OptionsError(f"chaos_config: {exc}") from None
            self._config_watch = watch
            self._apply(config)
        if "chaos_limits_file" in updated or "confdir" in updated:
            self._limits_path = state_path(ctx.options.chaos_limits_file, ctx.options.confdir)
            self._restore_limits()
        if updated & STATE_OPTIONS:
            self._configure_state()
        if "chaos_key" in updated:
            self._quota_env = _option("chaos_key", parse_quota_option)
            if self._running:
                self._start_quota()
        if "chaos_web" in updated:
            self._listen = _option("chaos_web", parse_listen)
            if self._running:
                self._start_web()
        if updated & UPSTREAM_OPTIONS:
            self.forwarder.clients.reconfigure(
                UpstreamSettings(
                    insecure=bool(ctx.options.ssl_insecure),
                    ca_file=ctx.options.ssl_verify_upstream_trusted_ca or None,
                    ca_path=ctx.options.ssl_verify_upstream_trusted_confdir or None,
                    proxy_auth=ctx.options.upstream_auth or None,
                    read_timeout=self.forwarder.clients.settings.read_timeout,
                    idle_timeout=self.forwarder.clients.settings.idle_timeout,
                    client_certs=ctx.options.client_certs or None,
                    tls_min=ctx.options.tls_version_server_min,
                    tls_max=ctx.options.tls_version_server_max,
                    ciphers=ctx.options.ciphers_server or None,
                )
            )

    def _configure_state(self) -> None:
        """Parse the chaos_state options once; the Redis store is built here and started in running()."""
        url = _option("chaos_state", parse_state_url)
        share = _option("chaos_state_share", parse_share)
        lease_ms = ctx.options.chaos_state_lease_ms
        if lease_ms < MIN_LEASE_MS:
            raise exceptions.OptionsError(f"chaos_state_lease_ms: at least {MIN_LEASE_MS}, not {lease_ms}")
        current = self.fleet
        if current is None and url is None:
            return
        if self._running:
            raise exceptions.OptionsError("chaos_state: read at start-up only; restart mitmdump to change it")
        if url is not None:
            if url.ca_certs and not Path(url.ca_certs).is_file():
                raise exceptions.OptionsError(f"chaos_state: ssl_ca_certs: no such file: {url.ca_certs}")
            self.fleet = self._make_fleet(url, share, lease_ms / 1000)

    def _make_fleet(self, url: StateUrl, share: float | None, lease_seconds: float) -> RedisFleet:
        try:
            from chaos_mode.fleet.redis_store import RedisFleet
        except ModuleNotFoundError as exc:
            raise exceptions.OptionsError(
                f"chaos_state: needs the Python package redis ({exc.name} is missing): "
                "pip install 'chaos-mode[redis]' where mitmproxy runs "
                "(pipx: pipx inject chaos-mode 'redis[hiredis]')"
            ) from None
        slots = pool_slots(_proxy_id(), self.pool, share=share)
        return RedisFleet(
            url, slots, models=lambda: list(self.config.models), lease_seconds=lease_seconds, pool=self.pool
        )

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
        self.forwarder.limit_body(config.streams.max_body_bytes)
        clients = self.forwarder.clients
        clients.reconfigure(replace(clients.settings, idle_timeout=config.streams.idle_seconds))
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
        if self._running:
            self._warn_if_unrouted(parse_modes(ctx.options.mode))
            self._start_quota()  # the poll interval, the upstream hosts may have changed

    # -- learned limits across restarts -------------------------------------------------------------

    def _restore_limits(self) -> None:
        path = self._limits_path
        if path is None:
            return
        try:
            data = read_state(path)
        except ValueError as exc:  # another file of the user's, maybe: never written over
            self._limits_path = None
            log.warning(
                "chaos-mode: learned limits not restored, nor saved over it (chaos_limits_file): %s", exc
            )
            return
        try:
            restored = 0 if data is None else self.pool.learned.restore(data)
        except ValueError as exc:
            log.warning("chaos-mode: learned limits not restored, starting from the catalog: %s", exc)
            return
        self._saved_version = self.pool.learned.version
        if restored:
            log.info("chaos-mode: %d learned limits and aliases restored from %s", restored, path)

    def _limits_touched(self) -> None:
        """Write the learned limits soon after they change (once for a burst of changes)."""
        if self.pool.learned.version == self._saved_version or self._save_timer is not None:
            return
        if self._limits_path is None:
            return
        self._save_timer = asyncio.get_running_loop().call_later(SAVE_DELAY, self._save_limits)

    def _save_limits(self) -> None:
        self._save_timer = None
        path = self._limits_path
        if path is None or self.pool.learned.version == self._saved_version:
            return
        version = self.pool.learned.version
        try:
            write_state(path, self.pool.learned.dump())
        except (OSError, ValueError) as exc:
            self._warn_once("limits-file", f"learned limits could not be written to {path}: {exc}")
            return
        self._saved_version = version

    # -- lifecycle --------------------------------------------------------------------------------

    def running(self) -> None:
        self._running = True
        _RUNNING.add(self)
        self._connect_lazily()
        self._check_startup()
        self._start_web()
        self._start_quota()
        self._watch_config()
        try:
            host, port = self.forwarder.listen()
        except OSError as exc:
            log.error("chaos-mode: the forwarder could not listen (%s); failovers will answer 429", exc)
        else:
            log.debug("chaos-mode: forwarder on %s:%d", host, port)
        if self.fleet is not None:
            self.fleet.start()
            log.info(
                "chaos-mode: slots shared through %s as proxy %s (leases of %g s)",
                self.fleet.url.display,
                self.fleet.slots.proxy_id,
                self.fleet.lease_ms / 1000,
            )
        # What is alive now (mitmproxy's and our modules, classes, the config) lives as long as the
        # process: out of the collector's way, every collection no longer walks it (callgrind: about 2% of
        # mitmdump's instructions per request). `done()` gives it back, so a script reload leaks nothing.
        gc.freeze()

    def done(self) -> Awaitable[None] | None:
        """Stop; with shared slots, the awaitable (mitmproxy awaits it) gives this proxy's leases back."""
        self._running = False
        _RUNNING.discard(self)
        if not ctx.master.should_exit.is_set():  # unloaded while the proxy runs: reloaded, or its file gone
            asyncio.get_running_loop().call_later(UNLOADED_SECONDS, _said_if_unloaded)
        if self._save_timer is not None:
            self._save_timer.cancel()
        if self._watch_timer is not None:
            self._watch_timer.cancel()
        self._save_limits()
        self.web.stop()
        self.quota_poller.stop()
        self.forwarder.close()
        gc.unfreeze()
        return self.fleet.close() if self.fleet is not None else None

    @staticmethod
    def _connect_lazily() -> None:
        """mitmproxy's default `connection_strategy` (eager) opens a connection to the server as each client
        connects (z.ai in reverse mode; the CONNECT's host in regular mode) and reads the client's request
        only once that connection (TCP and TLS) is up. Routed requests go to z.ai through the forwarder, so
        that connection is never used: each new client connection would wait for a handshake with z.ai for
        nothing and hold an idle connection to it. Set once at start; a change made later stands."""
        if "connection_strategy" in ctx.options and ctx.options.connection_strategy == "eager":
            ctx.options.update(connection_strategy="lazy")
            log.info("chaos-mode: connection_strategy=lazy (a client's connection opens none to z.ai)")

    def _check_startup(self) -> None:
        """One warning line for each thing a newcomer gets wrong at start-up (see `startup_checks`)."""
        modes = parse_modes(ctx.options.mode)
        self.stats.exposed_listen = exposed = exposed_listen(modes, ctx.options.listen_host)
        if exposed:
            log.warning(
                "chaos-mode: the proxy listens on %s, not only loopback: anyone who can reach this machine "
                "can send requests through it; add --listen-host 127.0.0.1 unless that is meant",
                ", ".join(exposed),
            )
        for option in unknown_options(ctx.options.deferred, OPTIONS):
            log.warning("chaos-mode: unknown option %s: it is ignored", option)
        if streamed := getattr(ctx.options, "stream_large_bodies", None):  # proxyserver's: absent in tests
            log.warning(
                "chaos-mode: stream_large_bodies=%s: mitmproxy sends a larger request on unread, so it "
                "passes unrouted; the addon streams answers itself: leave the option unset",
                streamed,
            )
        self._warn_if_unrouted(modes)

    def _warn_if_unrouted(self, modes: list[ProxyMode]) -> None:
        """Reverse mode to a host chaos mode does not route: every request would pass untouched."""
        if not self.config.chaos_mode.enabled:
            return
        for host in unrouted_reverse_targets(modes, self.config.upstream_hosts):
            log.warning(
                "chaos-mode: reverse mode forwards to %s, which is not in modelRouting.upstreamHosts (%s): "
                "its requests pass through unrouted; add %s to upstreamHosts in the chaos_config file",
                host,
                ", ".join(self.config.upstream_hosts),
                host,
            )

    def _listed(self, names: list[str]) -> None:
        """z.ai's model list, read with the `chaos_key` key: what it changed in the catalog, a line each."""
        for line in self.pool.learned.listed(names):
            log.info("chaos-mode: %s", line)

    def _start_quota(self) -> None:
        """Read z.ai's quota with the key `chaos_key` names, or stop reading it."""
        tracker, name = self.pool.quota, self._quota_env
        was_on = self.quota_poller.running
        self.quota_poller.stop()
        tracker.reader = "off"
        if name is None:
            return
        if not os.environ.get(name):
            # Not the name: a key given by mistake may look like one, and an unset name is no key to read.
            tracker.failed("chaos_key: the environment variable it names is not set")
            log.warning(
                "chaos-mode: chaos_key names an environment variable that is not set or empty: the quota "
                "is estimated from the traffic"
            )
            return
        destination = quota_destination(parse_modes(ctx.options.mode), self.config.upstream_hosts)
        settings = self.config.quota
        plan = PollPlan(destination, settings.poll_seconds, settings.poll_backoff_max_seconds)
        self.quota_poller.start(plan, lambda: os.environ.get(name, ""))
        tracker.reader = "on"
        if not was_on:
            log.info(
                "chaos-mode: reading the quota from %s every %g s (key from %s)",
                destination.url(b"/"),
                settings.poll_seconds,
                name,
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

    def _door_of(self, request: http.Request) -> DoorFormat | None:
        """The format of the door a request comes through, if it is one chaos mode routes."""
        host = request.host  # `pretty_host` parses the Host header: read only when `host` is not routed
        hosts = (host,) if host.lower() in self.config.upstream_hosts else (host, request.pretty_host)
        door = door_of(request.method, hosts, request.path, self.config)
        return None if door is None else FORMATS[door]

    async def request(self, flow: http.HTTPFlow) -> None:
        if flow.response or flow.error or not flow.live:
            return
        door = self._door_of(flow.request)
        if door is None:
            return
        try:
            await self._route(flow, door)
        except Exception:
            # Never crash the proxy: the flow goes on as it is; a slot taken is released when it ends.
            log.exception("chaos-mode: internal error while routing a request; it goes on unrouted")

    async def _route(self, flow: http.HTTPFlow, door: DoorFormat) -> None:
        request = flow.request
        limit = self.config.streams.max_body_bytes
        headers = request_headers(request)
        try:
            message = read_message(request, headers, limit=limit, parse=door.parse)
        except BadRequest as exc:
            self._pass_bad(flow, exc)
            return
        tier, known = self.classifier.lookup(message.model)
        if not known and (line := self.unknown_names.line(message.model, tier)) is not None:
            log.warning("chaos-mode: %s", line)
        chaos = self.config.chaos_mode
        header = headers.get(SESSION)
        session = (header.decode("utf-8", "replace").strip() if header else "") or None
        if session is not None and len(session) > SESSION_CHARS:  # kept for its conversation's place in line
            session = "sha256:" + hashlib.sha256(session.encode(errors="replace")).hexdigest()[:32]
        view = FlowView(flow)
        routed = RoutedRequest(
            message,
            tier,
            pool=self.pool,
            stats=self.stats,
            later=_call_later,
            clock=self._clock,
            routed=chaos.enabled,
            sticky_key=message.sticky_key(session) if chaos.enabled and chaos.sticky_conversations else None,
            session=session,
            encode=body_encoder(headers),
            view=view,
            refusals=self.refusals,
        )
        self._requests[flow] = routed
        self._views[flow] = view
        if not chaos.enabled:
            view.changed(routed)
            return
        held = await routed.admit(lambda: client_alive(flow))
        if held is None:  # the client left while its request waited
            routed.finish("aborted")
            if flow.killable:
                flow.kill()
            return
        if not held or routed.slot is None:
            flow.response = _response(reject(routed, None, now=self._wall_clock()))
            view.changed(routed)
            return
        set_body(request, message.with_model(routed.slot.model), headers)
        view.sent = request.raw_content
        if (address := self.forwarder.address) is not None:
            view.point_at(self.forwarder, routed, address)
        view.changed(routed)

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        routed = self._requests.get(flow)
        response = flow.response
        if routed is None or response is None:
            return
        view = self._views[flow]
        view.restore()
        routed.sent = True
        if response.status_code != 200:
            return
        if view.from_zai(flow.request):  # not an answer another addon made
            routed.answered()  # the forwarder has done it already; on the direct path, here
        if (coding := event_stream_coding(response)) is None:
            return
        observer = FORMATS[routed.message.door].observer()
        named: str | None = None  # the served model the answer named, told once
        feed, request = stream_feed(coding, observer.feed), flow.request  # not `flow`: held, it lived on

        def observe(chunk: bytes) -> bytes:
            nonlocal named
            if feed(chunk):  # a few events per answer: its start, usage, end
                routed.usage = (observer.input_tokens, observer.output_tokens)
                view.cached = observer.cached_tokens
                routed.stopped = observer.stopped
                if observer.model is not None and observer.model != named:
                    named = observer.model
                    self._served(request, routed, named, view)
                if observer.stopped:  # mid-stream changes show at the end (`finish` shows a cut one's)
                    view.changed(routed)
            return chunk

        response.stream = observe

    async def response(self, flow: http.HTTPFlow) -> None:
        routed = self._requests.get(flow)
        if routed is None or flow.response is None:
            return
        view = self._views[flow]
        self._forget(view)  # answered without the forwarder: by another addon, say
        if routed.finished:
            return
        try:
            view.restore()
            answer = flow.response
            refused = answer.status_code >= 400 and not answer.stream
            if refused and routed.slot is not None and not view.forwarded:
                await self._judge_direct(flow, routed)  # no forwarder: z.ai's refusal is judged here
            self._record(flow, routed, view)
        except Exception:
            log.exception("chaos-mode: internal error while finishing a response")
        finally:
            routed.finish("error")  # a no-op once `_record` finished it; never leaves a slot held
            self._limits_touched()

    async def _judge_direct(self, flow: http.HTTPFlow, routed: RoutedRequest) -> None:
        """z.ai's refusal when the flow went to z.ai directly (no forwarder): counted, our 429 instead of
        a failover (mitmproxy cannot send the request again)."""
        response = flow.response
        assert response is not None
        now = self._wall_clock()
        headers = [(k, v) for k, v in response.headers.items(multi=True)]
        answer: Answer | UpstreamError
        if response.headers.get("server", "").startswith("mitmproxy"):
            answer = unreached(f"HTTP {response.status_code} from the proxy")
        else:
            body = refusal_body(response.raw_content or b"", response.headers.get("content-encoding"))
            answer = Answer(response.status_code, headers, body)
        verdict = await settle(routed, answer, now=now, retry=False)
        if isinstance(verdict, Reply):
            flow.response = _response(verdict)
        self._views[flow].changed(routed)

    def _record(self, flow: http.HTTPFlow, routed: RoutedRequest, view: FlowView) -> None:
        response = flow.response
        assert response is not None
        model = routed.model
        if model and response.status_code == 200:
            usage = routed.usage
            if usage is None and not response.stream:
                usage = self._whole_usage(flow, routed, view)
            if usage:
                routed.usage = usage
                # by the name z.ai gave while the catalog holds it (past the aliases it learns: the asked)
                served = routed.served if routed.served in self.pool.config.models else model
                self.stats.usage(served, usage[0], usage[1], view.cached)
                weights, assumed = self.config.credit_weights(served)
                credits = weights.cost(usage[0], view.cached, usage[1])
                self.pool.quota.charged(served, credits, assumed=assumed)
        if not routed.routed:
            outcome: Outcome = "passthrough"
        elif routed.rejected:
            outcome = "rejected"
        else:
            outcome = "ok" if response.status_code < 400 else "error"
        routed.finish(outcome)

    def _whole_usage(
        self, flow: http.HTTPFlow, routed: RoutedRequest, view: FlowView
    ) -> tuple[int, int] | None:
        """The usage of an answer that arrived whole; none for one that decodes to more than the proxy
        reads for it."""
        response = flow.response
        assert response is not None
        try:
            whole, served = usage_of(response, FORMATS[routed.message.door].observer)
        except OverCap:
            log.warning(
                "chaos-mode: a whole answer of %s decodes to more than %d bytes: no usage counted for it",
                routed.model,
                MAX_USAGE_BODY,
            )
            return None
        self._served(flow.request, routed, served, view)
        if not whole:
            return None
        view.cached = whole[1]
        return whole[0], whole[2]

    def _served(
        self, request: http.Request, routed: RoutedRequest, model: str | None, view: FlowView
    ) -> None:
        """The model z.ai's answer names as the one that served (`routing.aliases`); one warning when an
        answer names none that can be read, or the request's own key (an upstream that echoes it: a name
        learned is shown, logged and saved). An answer not z.ai's to the attempt as routed names nothing."""
        if not view.from_zai(request):
            return
        if model is not None and model != routed.model and names_a_credential(request, model):
            self._warn_once("served-key", "an answer names the request's key as its model: not learned")
            return
        if not routed.served_by(model):
            self._warn_once("served-model", "an answer names no readable model: counted by the name asked")

    def error(self, flow: http.HTTPFlow) -> None:
        routed = self._requests.get(flow)
        if routed is None:
            return
        view = self._views[flow]
        view.restore()
        self._forget(view)
        # The client went away (aborted), or the upstream broke the flow under a waiting client (error).
        left = client_left(flow)
        # A stream the client left may still be counted upstream for a moment: release after a grace.
        grace = self.config.streams.abort_grace_seconds if left else 0.0
        routed.finish("aborted" if left else "error", grace=grace)
        self._limits_touched()

    def _forget(self, view: FlowView) -> None:
        """A flow that ends without the forwarder having taken it leaves no token behind."""
        if view.token is not None and not view.forwarded:
            self.forwarder.forget(view.token)

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
        stats = chaos_stats(served(pool_status.status(self.pool)), self.stats)
        stats["quota"] = pool_status.quota(self.pool)
        stats["fleet"] = None
        if self.fleet is not None:
            from chaos_mode.fleet.redis_store import fleet_status

            stats["fleet"] = fleet_status(self.fleet, self.pool.lost_races)
        return stats

    def _fleet_figures(self) -> FleetFigures | None:
        if self.fleet is None:
            return None
        from chaos_mode.fleet.redis_store import fleet_figures

        return fleet_figures(self.fleet, self.pool.lost_races)

    @command.command("chaos.status")
    def status(self) -> str:
        """The Chaos Mode panel: strategy, utilization, learning, the account limit; each model's in-flight,
        limit in force (catalog→learned, why, probing) and cooldown."""
        return render_panel(self.chaos_stats(), self._wall_clock())

    @command.command("chaos.limits.reset")
    def reset_limits(self) -> None:
        """Forget every learned concurrency limit and alias: back to the catalog's (the saved file too)."""
        self.pool.learned.reset()
        self._saved_version = (-1, -1)
        self._save_limits()
        log.info("chaos-mode: learned limits reset to the catalog's values")

    @command.command("chaos.reload")
    def reload(self) -> None:
        """Read the chaos_config file again; a bad file keeps the config in force and says why."""
        self._reload()

    def _reload(self, because: str = "") -> None:
        self._config_watch = _watch(ctx.options.chaos_config)
        try:
            config = self._read_config(ctx.options.chaos_config, ctx.options.chaos_enabled)
        except ConfigError as exc:
            log.error("chaos-mode: config not reloaded, the old one stays in force: %s", exc)
            return
        if because:
            log.info("chaos-mode: %s", because)
        self._apply(config)

    def _watch_config(self) -> None:
        """About once a second: an edited chaos_config file is read again, as `chaos.reload` does. And a flow
        killed before it reached the forwarder gives its slot back: killed while intercepted (in mitmweb),
        it never ends, and no hook says so."""
        self._watch_timer = asyncio.get_running_loop().call_later(WATCH_SECONDS, self._watch_config)
        watch = self._config_watch
        if watch is not None and watch.changed():
            self._reload(f"{watch.path} changed: config reloaded")
        for flow, routed in list(self._requests.items()):
            view = self._views.get(flow)
            killed = flow.error is not None and flow.error.msg == flow.error.KILLED_MESSAGE
            if killed and not routed.finished and view is not None and view.token and not view.forwarded:
                self.error(flow)


_RUNNING: Final[weakref.WeakSet[ChaosMode]] = weakref.WeakSet()  # the instances running (one, but reloads)
UNLOADED_SECONDS: Final = 3.0  # after an instance's unload, what a reload takes to run the next one


def _said_if_unloaded() -> None:
    """mitmproxy drops a script whose file went missing (a reinstall or an upgrade while it ran) and says
    so only at info level: the proxy runs on, every request unrouted."""
    if not _RUNNING:
        log.error(
            "chaos-mode: the addon was unloaded and not loaded again (its script file went missing: an "
            "upgrade or a reinstall while it ran?); requests now pass unrouted: restart chaos-mode"
        )


def _proxy_id() -> str:
    """This proxy among the fleet's: host, process and a random tag (a restarted process is a new one)."""
    return f"{socket.gethostname()[:40]}:{os.getpid()}:{secrets.token_hex(2)}"


def _watch(path: str) -> FileWatch | None:
    """The chaos_config file's watch, stamped now (before it is read); none for the built-in config."""
    return FileWatch(path) if path else None


def _call_later(delay: float, callback: Callable[[], object]) -> None:
    asyncio.get_running_loop().call_later(delay, callback)


def _response(reply: Reply) -> http.Response:
    return http.Response.make(reply.status, reply.body, [(k.encode(), v.encode()) for k, v in reply.headers])


__all__ = ["META", "TRIED_HEADER", "ChaosMode", "UpstreamError"]


def _option[T](name: str, parse: Callable[[str], T]) -> T:
    """Option `name` read with `parse`; its ValueError as mitmproxy's option error, naming the option."""
    try:
        return parse(getattr(ctx.options, name))
    except ValueError as exc:
        raise exceptions.OptionsError(f"{name}: {exc}") from None
