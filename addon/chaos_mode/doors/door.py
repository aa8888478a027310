"""Which door a request comes through: Anthropic Messages, OpenAI chat completions, or none.

Pure: the adapter passes the method, the names of the host the request goes to and its path. Both doors
lead to one account, so both are routed by one pool. Anything else, `count_tokens` included (it holds no
slot on z.ai), is not ours: it passes byte for byte.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final, Literal

from chaos_mode.config.schema import ModelRouting
from chaos_mode.zai.catalog import MESSAGES_SUFFIX

Door = Literal["anthropic", "openai"]
DOORS: Final[tuple[Door, ...]] = ("anthropic", "openai")


def door_of(method: str, hosts: Iterable[str], path: str, config: ModelRouting) -> Door | None:
    """The door of a request to one of the configured upstream hosts, or None when it is not ours to see.

    `hosts`: the names the request goes to (mitmproxy's `host` and `pretty_host`, any case); `path` as
    sent, a query string included (Claude Code adds `?beta=true`): it is matched without it.
    """
    if method.upper() != "POST" or not any(host.lower() in config.upstream_hosts for host in hosts):
        return None
    path = path.split("?", 1)[0].split("#", 1)[0]
    if path.endswith(MESSAGES_SUFFIX):
        return "anthropic"
    if (path.rstrip("/") or "/") in config.openai_paths:
        return "openai"
    return None
