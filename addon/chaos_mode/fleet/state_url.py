"""The `chaos_state` option: where the fleet's shared state lives (a Redis URL), parsed once, redacted.

Pure. The password comes from the URL or, when the URL has none, from the environment variable
PASSWORD_ENV; it never appears in what `display` shows (logs, status, errors).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final
from urllib.parse import parse_qsl, unquote, urlsplit

SCHEMES: Final = ("redis", "rediss")
CA_PARAMETER: Final = "ssl_ca_certs"  # rediss://…?ssl_ca_certs=/path/ca.pem: the CA to check the server by
PASSWORD_ENV: Final = "CHAOS_STATE_PASSWORD"
DEFAULT_PORT: Final = 6379


@dataclass(frozen=True, slots=True)
class StateUrl:
    """A Redis to share state through; `password` is kept out of `repr` and `display`."""

    scheme: str
    host: str
    port: int
    db: int
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    ca_certs: str | None = None  # rediss: a PEM file of the CA(s) to trust instead of the system's

    @property
    def tls(self) -> bool:
        return self.scheme == "rediss"

    @property
    def display(self) -> str:
        """The URL as logs and the status show it: the password as ***."""
        auth = ""
        if self.username or self.password:
            auth = f"{self.username or ''}{':***' if self.password else ''}@"
        host = f"[{self.host}]" if ":" in self.host else self.host
        query = f"?{CA_PARAMETER}={self.ca_certs}" if self.ca_certs else ""
        return f"{self.scheme}://{auth}{host}:{self.port}/{self.db}{query}"


def parse_state_url(text: str, environ: Mapping[str, str] | None = None) -> StateUrl | None:
    """`redis://[user[:password]@]host[:port][/db]`, or rediss:// with an optional `?ssl_ca_certs=PATH`;
    empty: None (in-process state). Raises ValueError with a one-line reason that never repeats the
    password."""
    text = text.strip()
    if not text:
        return None
    environ = os.environ if environ is None else environ
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        raise ValueError("not a valid URL (expected redis://host:port/db)") from None
    if parts.scheme not in SCHEMES:
        raise ValueError(f"the scheme must be redis:// or rediss://, not {parts.scheme or 'none'!r}")
    if not parts.hostname:
        raise ValueError("no host (expected redis://host:port/db)")
    if parts.fragment:
        raise ValueError("no fragment allowed (expected redis://host:port/db)")
    ca_certs = _ca_certs(parts.query, parts.scheme)
    db_text = parts.path.lstrip("/")
    if db_text and not (db_text.isdigit() and len(db_text) <= 5):
        raise ValueError(f"the database must be a number, not {db_text[:20]!r}")
    password = unquote(parts.password) if parts.password else environ.get(PASSWORD_ENV) or None
    return StateUrl(
        scheme=parts.scheme,
        host=parts.hostname,
        port=port or DEFAULT_PORT,
        db=int(db_text or 0),
        username=unquote(parts.username) if parts.username else None,
        password=password,
        ca_certs=ca_certs,
    )


def _ca_certs(query: str, scheme: str) -> str | None:
    """The one query parameter a state URL may have: rediss://…?ssl_ca_certs=PATH."""
    if not query:
        return None
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=True)
    except ValueError:  # a field without "="
        pairs = []
    if len(pairs) != 1 or pairs[0][0] != CA_PARAMETER:
        shown = next((name for name, _ in pairs if name != CA_PARAMETER), query)[:20]
        raise ValueError(f"the only query parameter is {CA_PARAMETER}=PATH (with rediss://), not {shown!r}")
    if scheme != "rediss":
        raise ValueError(f"{CA_PARAMETER} needs rediss:// (TLS)")
    if not pairs[0][1]:
        raise ValueError(f"{CA_PARAMETER}: no path")
    return pairs[0][1]


def parse_share(text: str) -> float | None:
    """`chaos_state_share`: `auto` (None: 1 / the proxies last seen) or a fraction in (0, 1]."""
    text = text.strip().lower()
    if text in ("", "auto"):
        return None
    try:
        share = float(text.rstrip("%")) / (100 if text.endswith("%") else 1)
    except ValueError:
        raise ValueError(f"must be auto or a fraction like 0.5, not {text[:20]!r}") from None
    if not 0 < share <= 1:
        raise ValueError(f"must be auto or a fraction in (0, 1], not {text[:20]!r}")
    return share


def redact(text: str, url: StateUrl | None) -> str:
    """`text` with the password (if any) replaced: for messages that may quote what the client saw."""
    if url is None or not url.password:
        return text
    return text.replace(url.password, "***")
