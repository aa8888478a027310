"""`upstreamHosts` entries: host names or IP literals as mitmproxy shows a request's host, nothing else.

A request is routed when its host equals an entry (any case), so a URL, a port, a path or a wildcard
would match nothing and every request would pass unrouted; such an entry is refused in one line that
names the fix (`'https://api.z.ai' is a URL; write the host name alone: api.z.ai`).
"""

from __future__ import annotations

import ipaddress
import re
from typing import Final
from urllib.parse import urlsplit

_LABEL: Final = r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?"
HOST_NAME: Final = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")
MAX_NAME: Final = 253
PORT: Final = re.compile(r"[^:]+:[0-9]*")


def host_entry(entry: str) -> str:
    """The entry as matched (stripped, lower-cased); ValueError naming the fix when it is no host."""
    host = entry.strip().lower()
    shown = repr(host[:60]) + ("..." if len(host) > 60 else "")
    if not host:
        raise ValueError("'': an empty entry; write a host name such as api.z.ai, or remove it")
    if any(char.isspace() for char in host):
        raise ValueError(f"{shown} holds a space; write one host name per entry")
    if "://" in host:
        raise ValueError(f"{shown} is a URL; {_alone(_host_of(host))}")
    if "/" in host:
        raise ValueError(f"{shown} has a path; {_alone(_host_of('//' + host))}")
    if host.startswith("["):
        raise ValueError(f"{shown} is in brackets; {_alone(_host_of('//' + host))}")
    if PORT.fullmatch(host):
        raise ValueError(f"{shown} has a port; {_alone(_host_of('//' + host))}")
    if "*" in host:
        raise ValueError(
            f"{shown}: hosts are matched exactly, with no wildcards; list each host name in full"
        )
    if not _is_host(host):
        raise ValueError(
            f"{shown} is not a host name or IP address (letters, digits, '-', '.'; e.g. api.z.ai)"
        )
    return host


def _is_host(host: str) -> bool:
    if ":" in host:
        return _is_ip(host)
    if not (len(host) <= MAX_NAME and HOST_NAME.fullmatch(host)):
        return False
    # A name ending in a number is an IPv4 address or nothing (`10.0.0` is not a name a request goes to).
    return not host.rsplit(".", 1)[-1].isdigit() or _is_ip(host)


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _host_of(text: str) -> str | None:
    """The host of a URL or `host:port`, when it is one `upstreamHosts` could hold."""
    try:
        host = urlsplit(text).hostname
    except ValueError:  # an unclosed bracket, a port out of range
        return None
    return host if host and _is_host(host) else None


def _alone(host: str | None) -> str:
    return f"write the host name alone: {host}" if host else "write the host name alone, e.g. api.z.ai"
