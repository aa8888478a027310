"""What a newcomer gets wrong at start-up, said in one line each: an adapter (it reads mitmproxy's modes).

- the proxy listens beyond loopback (mitmproxy's default: every interface): anyone could use its keys;
- reverse mode targets a host that is not one of `modelRouting.upstreamHosts`: every request passes through
  unrouted (in front of the simulator, `127.0.0.1` must be listed);
- a `chaos_*` option mitmproxy does not know (a typo): mitmproxy keeps it aside silently, so the option
  meant stays at its default.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Iterable, Sequence

from mitmproxy.proxy.mode_specs import ProxyMode, ReverseMode

from chaos_mode.observe.web import exposed_hosts

OPTION_PREFIX = "chaos_"


def parse_modes(specs: Sequence[str]) -> list[ProxyMode]:
    """mitmproxy's modes; none when mitmproxy refuses one of them itself (it says why)."""
    try:
        return [ProxyMode.parse(spec) for spec in specs]
    except ValueError:
        return []


def exposed_listen(modes: Iterable[ProxyMode], listen_host: str) -> list[str]:
    """The hosts the proxy listens on that are not loopback."""
    return exposed_hosts([mode.listen_host(listen_host) for mode in modes if mode.type_name != "local"])


def unrouted_reverse_targets(modes: Iterable[ProxyMode], upstream_hosts: Collection[str]) -> list[str]:
    """The hosts reverse modes forward to that chaos mode does not route (not in `upstream_hosts`)."""
    targets = {mode.address[0].lower() for mode in modes if isinstance(mode, ReverseMode)}
    return sorted(host for host in targets if host not in upstream_hosts)


def unknown_options(deferred: Iterable[str], known: Collection[str]) -> list[str]:
    """One line per option mitmproxy set aside that looks like ours, naming the likely one meant."""
    lines = []
    for name in sorted(n for n in deferred if n.startswith(OPTION_PREFIX) and n not in known):
        close = difflib.get_close_matches(name, sorted(known), n=1)
        lines.append(f"{name} (did you mean {close[0]}?)" if close else name)
    return lines
