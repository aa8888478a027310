"""A redis-server of the tests' own on a free loopback port (skipped without one, unless CI is set)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest

from chaos_mode_tools.devtools.processes import RedisProcess


def require_redis_server() -> None:
    """Debian's redis-server; skip without it, but fail when CI is set."""
    if shutil.which("redis-server"):
        return
    why = "redis-server not found: install Debian's redis-server package (apt-get install redis-server)"
    if os.environ.get("CI"):
        pytest.fail(why + " — required when CI is set", pytrace=False)
    pytest.skip(why)


def redis_process(**kwargs: object) -> Iterator[RedisProcess]:
    require_redis_server()
    with RedisProcess(**kwargs) as process:  # type: ignore[arg-type]
        yield process
