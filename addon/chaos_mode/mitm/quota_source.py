"""Where and with what key the addon reads z.ai's quota: the `chaos_key` option names an environment
variable holding the key (never the key itself), and the quota is read from the host the proxy forwards to
(the reverse mode's target, else `https://` and the first of `upstreamHosts`)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from mitmproxy.proxy.mode_specs import ProxyMode, ReverseMode, UpstreamMode

from chaos_mode.forwarding.upstream import Destination

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


def parse_quota_option(value: str) -> str | None:
    """The variable's name; None when off (''). ValueError that never repeats the value (it may be a key
    given by mistake)."""
    value = value.strip()
    if not value:
        return None
    if not _ENV_NAME.fullmatch(value):
        raise ValueError(
            "must be the NAME of an environment variable that holds the key (letters, digits, _), not the "
            "key itself: export ZAI_QUOTA_KEY=... and --set chaos_key=ZAI_QUOTA_KEY"
        )
    return value


def quota_destination(modes: Iterable[ProxyMode], upstream_hosts: Sequence[str]) -> Destination:
    """The z.ai the proxy forwards to: the first reverse mode's target, else the first upstream host over
    HTTPS (through the upstream proxy of `--mode upstream:` when there is one)."""
    proxy = None
    for mode in modes:
        if isinstance(mode, ReverseMode):
            host, port = mode.address
            return Destination(mode.scheme, host, port)
        if isinstance(mode, UpstreamMode) and proxy is None:
            host, port = mode.address
            shown = f"[{host}]" if ":" in host else host
            proxy = f"{mode.scheme}://{shown}:{port}"
    return Destination("https", upstream_hosts[0], 443, proxy)
