"""``python -m chaos_mode_tools.sim``: run the z.ai simulator until SIGINT/SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any

from chaos_mode_tools.sim.bands import BAND_SHAPES
from chaos_mode_tools.sim.catalog import ALIAS_COUNTERS, DEC_2026, EARLY_2026
from chaos_mode_tools.sim.content_filter import FILTER_SCOPES
from chaos_mode_tools.sim.server import SimServer
from chaos_mode_tools.sim.settings import OVER_LIMIT, SimSettings, parse_limit, parse_rate

READY_PREFIX = "chaos-sim listening on "


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m chaos_mode_tools.sim",
        description="Simulate z.ai's Anthropic and OpenAI endpoints: concurrency limits (hard or soft, "
        "refusing or queuing), z.ai error codes, the content filter, SSE streams.",
    )
    parser.add_argument("--host", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port to bind; 0 picks a free one (default 0)")
    parser.add_argument("--config", metavar="FILE", help="JSON object of settings; options given here win")
    parser.add_argument(
        "--catalog",
        choices=(EARLY_2026, DEC_2026),
        help="the models served, routed (aliases), retired (1311) and listed: z.ai's of early 2026 (the "
        "default) or of December 2026; --config and the options below change it",
    )
    parser.add_argument(
        "--alias",
        metavar="NAME=MODEL",
        action="append",
        help="a name z.ai routes to a served model: answered as MODEL, counted on its slots (repeatable)",
    )
    parser.add_argument(
        "--retire",
        metavar="NAME",
        action="append",
        help="a name the plan no longer serves: 1311 (repeatable)",
    )
    parser.add_argument(
        "--alias-counters",
        choices=ALIAS_COUNTERS,
        help="an alias counts on its target's slots (shared, the default) or on its own, with the same limit",
    )
    parser.add_argument("--latency-ms", type=float, help="time to first token (default 300)")
    parser.add_argument("--token-interval-ms", type=float, help="time between output tokens (default 20)")
    parser.add_argument("--output-tokens", type=int, help="output tokens per answer (default 30)")
    parser.add_argument(
        "--reject-delay-ms", type=float, help="delay before an over-concurrency 429 (default 1000)"
    )
    parser.add_argument(
        "--abort-detect-ms",
        type=float,
        help="how long a stream whose client disconnected still holds its slot (default 200)",
    )
    parser.add_argument(
        "--refuse", metavar="MODEL", action="append", help="model refused by the plan: 429 code 1113"
    )
    parser.add_argument("--retry-after", type=float, metavar="SECONDS", help="send Retry-After on 429s")
    parser.add_argument(
        "--limit", metavar="MODEL=N", action="append", help="concurrency limit of a model (adds unknown ones)"
    )
    parser.add_argument("--account-limit", type=int, help="account-wide limit (default: sum of model limits)")
    parser.add_argument(
        "--hold",
        metavar="MODEL=N",
        action="append",
        help="slots of a model held by another client (count against the model's and the account's limit)",
    )
    parser.add_argument(
        "--fault-rate",
        metavar="CODE=RATE",
        action="append",
        help="refuse this share of requests at random with a z.ai code, e.g. 1305=0.02 (429, after the "
        "reject delay); cut=RATE breaks answers off mid-way, hang=RATE never answers",
    )
    parser.add_argument("--tls-cert", metavar="FILE", help="PEM certificate (chain): serve HTTPS, not HTTP")
    parser.add_argument("--tls-key", metavar="FILE", help="PEM key of --tls-cert (default: in its file)")
    parser.add_argument(
        "--fault-seed", type=int, help="seed of every random draw: faults, bands, lengths (default 0)"
    )
    parser.add_argument(
        "--band",
        metavar="MODEL=N",
        action="append",
        help="soft limit: N levels above the model's limit served only by chance, refused 1302 more often "
        "the higher (beyond them: over the limit)",
    )
    parser.add_argument("--account-band", type=int, help="the same band above the account limit (default 0)")
    parser.add_argument(
        "--band-shape", choices=tuple(BAND_SHAPES), help="how refusals rise across a band (default linear)"
    )
    parser.add_argument(
        "--over-limit",
        choices=OVER_LIMIT,
        help="refuse (1302 after the reject delay, the default) or queue: the request waits inside z.ai, "
        "its head not sent, until a slot frees",
    )
    parser.add_argument(
        "--queue-model",
        metavar="MODEL",
        action="append",
        help="a model that queues over its own limit whatever --over-limit says (repeatable)",
    )
    parser.add_argument(
        "--queue-timeout-ms", type=float, help="with --over-limit queue: refuse 1302 after this long a wait"
    )
    parser.add_argument(
        "--filter-phrase",
        metavar="TEXT",
        action="append",
        help="content filter: a request whose system prompt holds TEXT gets 1305 from every model (529 at "
        "the Anthropic door, 429 at the OpenAI door)",
    )
    parser.add_argument(
        "--filter-scope", choices=FILTER_SCOPES, help="where the filter looks: system (default) or all"
    )
    parser.add_argument(
        "--head-with-first-token",
        action="store_true",
        default=None,
        help="send a stream's response head only with its first token, not at once",
    )
    parser.add_argument(
        "--refused-holds",
        action="store_true",
        default=None,
        help="a request refused 1302 holds a slot of its model and the account until its refusal is sent",
    )
    parser.add_argument(
        "--refused-holds-closed",
        action="store_true",
        default=None,
        help="with --refused-holds: the slot is kept until the refusal is due even once the client closes",
    )
    parser.add_argument(
        "--output-lengths",
        metavar="SHAPE[:PARAM[:CAP]]",
        help="output tokens per answer around --output-tokens: fixed (default), lognormal[:SIGMA[:CAP]] or "
        "pareto[:ALPHA[:CAP]] (seeded; CAP defaults to 20 x the mean)",
    )
    parser.add_argument(
        "--quota", type=float, metavar="PROMPTS", help="prompts per quota window; then 1308 (default: none)"
    )
    parser.add_argument(
        "--quota-window-seconds", type=float, metavar="SECONDS", help="the quota window (default 18000: 5 h)"
    )
    parser.add_argument(
        "--quota-weight", metavar="MODEL=W", action="append", help="what one prompt on MODEL counts (1)"
    )
    parser.add_argument(
        "--credit-plan",
        choices=("lite", "pro", "max"),
        help="count credits over a 5-hour window and a week with this plan's caps (CREDIT_LIMIT rows)",
    )
    parser.add_argument(
        "--prompt-cache-seconds",
        type=float,
        metavar="SECONDS",
        help="keep a conversation's prompt warm on the model that read it this long (cached input tokens)",
    )
    parser.add_argument(
        "--quota-key-env",
        metavar="NAME",
        help="the quota endpoint takes only the key in this environment variable (default: any key)",
    )
    parser.add_argument(
        "--error-encoding", choices=("gzip", "br", "zstd"), help="send every error body compressed so"
    )
    parser.add_argument("--verbose", action="store_true", default=None, help="log one line per request")
    return parser


def settings_from_args(argv: Sequence[str] | None = None) -> SimSettings:
    """Parse the command line (and the --config file) into settings; exits with usage on bad input."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        base = SimSettings.from_mapping({"catalog": args.catalog}) if args.catalog else None
        settings = SimSettings.from_file(args.config, base) if args.config else base or SimSettings()
        overrides: dict[str, Any] = {}
        for name in (
            "host", "port", "latency_ms", "token_interval_ms", "output_tokens", "reject_delay_ms",
            "refused_holds", "refused_holds_closed",
            "abort_detect_ms", "retry_after", "account_limit", "fault_seed", "tls_cert", "tls_key",
            "error_encoding", "verbose", "account_band", "band_shape", "over_limit", "queue_timeout_ms",
            "filter_scope", "head_with_first_token", "output_lengths", "quota", "quota_window_seconds",
            "alias_counters", "credit_plan", "prompt_cache_seconds",
        ):  # fmt: skip
            value = getattr(args, name)
            if value is not None:
                overrides[name] = value
        if args.refuse:
            overrides["refuse"] = [*settings.refuse, *args.refuse]
        if args.alias:
            overrides["aliases"] = {
                **settings.aliases,
                **dict(_alias(text) for text in args.alias),
            }
        if args.retire:
            overrides["retired"] = [*settings.retired, *args.retire]
        if args.queue_model:
            overrides["queue_models"] = [*settings.queue_models, *args.queue_model]
        if args.limit:
            limits = dict(settings.limits)
            limits.update(parse_limit(text) for text in args.limit)
            overrides["limits"] = limits
        if args.hold:
            overrides["hold"] = {**settings.hold, **dict(parse_limit(text) for text in args.hold)}
        if args.band:
            overrides["bands"] = {**settings.bands, **dict(parse_limit(text) for text in args.band)}
        if args.filter_phrase:
            overrides["filter_phrases"] = [*settings.filter_phrases, *args.filter_phrase]
        if args.quota_weight:
            weights = {model: float(n) for model, n in (_pair(text) for text in args.quota_weight)}
            overrides["quota_weights"] = {**settings.quota_weights, **weights}
        if args.quota_key_env:
            overrides["quota_key"] = os.environ.get(args.quota_key_env) or None
            if overrides["quota_key"] is None:
                raise ValueError(f"--quota-key-env: {args.quota_key_env} is not set")
        if args.fault_rate:
            rates = dict(parse_rate(text) for text in args.fault_rate)
            overrides["fault_rates"] = {**settings.fault_rates, **rates}
        return SimSettings.from_mapping(overrides, base=settings)
    except (OSError, ValueError) as exc:
        parser.error(str(exc))


def _alias(text: str) -> tuple[str, str]:
    """``NAME=MODEL`` (the ``--alias`` option)."""
    name, sep, model = text.partition("=")
    if not sep or not name or not model:
        raise ValueError(f"expected NAME=MODEL, got {text!r}")
    return name, model


def _pair(text: str) -> tuple[str, str]:
    """``MODEL=W`` (the ``--quota-weight`` option)."""
    model, sep, value = text.rpartition("=")
    if not sep or not model:
        raise ValueError(f"expected MODEL=W, got {text!r}")
    try:
        float(value)
    except ValueError:
        raise ValueError(f"{model}: expected a number, got {value!r}") from None
    return model, value


async def serve(settings: SimSettings) -> None:
    """Run until SIGINT or SIGTERM, then stop cleanly."""
    server = SimServer(settings)
    await server.start()
    print(READY_PREFIX + server.base_url, flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        await stop.wait()
    finally:
        await server.stop()


def main(argv: Sequence[str] | None = None) -> int:
    settings = settings_from_args(argv)
    if settings.verbose:
        logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(message)s")
    asyncio.run(serve(settings))
    return 0


if __name__ == "__main__":
    sys.exit(main())
