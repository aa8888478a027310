"""Run the simulator (`chaos_mode_tools.sim`) as a child process on a free port, for end-to-end tests, the
benchmark and the demo."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from chaos_mode_tools.devtools.processes import ChildProcess
from chaos_mode_tools.sim.settings import SimSettings

_READY = re.compile(r"^chaos-sim listening on (https?://\S+)$", re.M)


class SimProcess(ChildProcess):
    """``with SimProcess(settings) as sim: sim.base_url`` (also ``async with``). Stops on exit:
    SIGTERM, then SIGKILL after ``stop_timeout``. Startup waits at most ``start_timeout``."""

    name = "chaos-sim"

    def __init__(
        self,
        settings: SimSettings | None = None,
        *,
        extra_args: Sequence[str] = (),
        start_timeout: float = 15.0,
        stop_timeout: float = 5.0,
        python: str = sys.executable,
    ) -> None:
        super().__init__(start_timeout=start_timeout, stop_timeout=stop_timeout)
        self.settings = settings if settings is not None else SimSettings()
        self.extra_args = list(extra_args)
        self.python = python
        self._base_url: str | None = None

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT`` (``https://`` when the settings name a certificate)."""
        if self._base_url is None:
            raise RuntimeError("simulator process not started")
        return self._base_url

    @property
    def anthropic_base_url(self) -> str:
        return self.base_url + "/api/anthropic"

    @property
    def port(self) -> int:
        return int(self.base_url.rsplit(":", 1)[1])

    def command(self) -> list[str]:
        config = self.workdir / "sim.json"
        config.write_text(json.dumps(self.settings.to_mapping()), encoding="utf-8")
        return [self.python, "-m", "chaos_mode_tools.sim", "--config", str(config), *self.extra_args]

    def ready(self) -> bool:
        match = _READY.search(self.stdout_text())
        if match:
            self._base_url = match.group(1)
        return match is not None


@contextmanager
def sim_subprocess(settings: SimSettings | None = None, *, extra_args: Sequence[str] = ()) -> Iterator[str]:
    """Run the simulator in a child process; yields its base URL (``http://127.0.0.1:PORT``)."""
    with SimProcess(settings, extra_args=extra_args) as sim:
        yield sim.base_url
