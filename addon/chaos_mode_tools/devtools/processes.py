"""Child processes for tests, the benchmark and the demo: start, wait until ready, stop in bounded time."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Self

import chaos_mode

ADDON_DIR = str(Path(chaos_mode.__file__).resolve().parent.parent)


_GIVEN: set[int] = set()  # every port free_port handed out in this process
_GIVEN_LOCK = threading.Lock()


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago on `host` (the OS picks it), never one handed out before.

    The OS may offer a port again as soon as the socket that found it closes: two children started side by
    side could then be given the same port before either binds it, and the second one's readiness check
    would find the first one listening there (a test once read one proxy's status page for another's).
    """
    with _GIVEN_LOCK:
        while True:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.bind((host, 0))
                port = int(sock.getsockname()[1])
            if port not in _GIVEN:
                _GIVEN.add(port)
                return port


def port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.2):
            return True
    except OSError:
        return False


class ChildProcess:
    """A child whose stdout and stderr go to temporary files; `start()` polls `ready()` until true.

    Stops with SIGTERM, then SIGKILL after `stop_timeout`. Usable as a (async) context manager.
    """

    name = "child"

    def __init__(self, *, start_timeout: float = 20.0, stop_timeout: float = 5.0) -> None:
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.proc: subprocess.Popen[bytes] | None = None
        self.returncode: int | None = None
        self._tmpdir: tempfile.TemporaryDirectory[str] | None = None
        self._out: IO[bytes] | None = None
        self._err: IO[bytes] | None = None
        self._kept = ("", "")  # (stdout, stderr) once stopped

    @property
    def workdir(self) -> Path:
        """A temporary folder that lives as long as the child (config files go here)."""
        if self._tmpdir is None:
            self._tmpdir = tempfile.TemporaryDirectory(prefix=f"chaos-{self.name}-")
        return Path(self._tmpdir.name)

    def command(self) -> list[str]:
        raise NotImplementedError

    def ready(self) -> bool:
        raise NotImplementedError

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (ADDON_DIR, env.get("PYTHONPATH")) if p)
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def start(self) -> Self:
        if self.proc is not None:
            raise RuntimeError(f"{self.name} already started")
        self._out = open(self.workdir / "stdout.log", "w+b")  # noqa: SIM115 - closed in stop()
        self._err = open(self.workdir / "stderr.log", "w+b")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            self.command(),
            stdin=subprocess.DEVNULL,
            stdout=self._out,
            stderr=self._err,
            env=self.environment(),
            start_new_session=True,
        )
        deadline = time.monotonic() + self.start_timeout
        while not self.ready():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                why = "exited" if self.proc.poll() is not None else f"not ready in {self.start_timeout} s"
                output = self.output()
                self.stop()
                raise RuntimeError(f"{self.name} {why}; its output:\n{output[-4000:]}")
            time.sleep(0.05)
        return self

    @staticmethod
    def _read(file: IO[bytes] | None) -> str | None:
        return None if file is None else Path(file.name).read_text(encoding="utf-8", errors="replace")

    def stdout_text(self) -> str:
        text = self._read(self._out)
        return self._kept[0] if text is None else text

    def stderr_text(self) -> str:
        text = self._read(self._err)
        return self._kept[1] if text is None else text

    def output(self) -> str:
        """What the child printed so far: stdout, then stderr."""
        return self.stdout_text() + self.stderr_text()

    def kill(self) -> None:
        """SIGKILL, as a crash would: no chance to clean up (`stop()` still collects the logs)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=self.stop_timeout)

    def stop(self) -> int | None:
        """Terminate (then kill) the child; returns its exit code. Safe to call twice."""
        proc, self.proc = self.proc, None
        if proc is not None:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=self.stop_timeout)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=self.stop_timeout)
            self.returncode = proc.returncode
        if self._out is not None and self._err is not None:
            self._kept = (self.stdout_text(), self.stderr_text())
            self._out.close()
            self._err.close()
            self._out = self._err = None
        if self._tmpdir is not None:
            self._tmpdir.cleanup()
            self._tmpdir = None
        return self.returncode

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    async def __aenter__(self) -> Self:
        return await asyncio.to_thread(self.start)

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await asyncio.to_thread(self.stop)


def _mitmdump() -> str:
    """The mitmdump of the running interpreter's environment."""
    import sys

    candidate = Path(sys.executable).with_name("mitmdump")
    return str(candidate) if candidate.exists() else "mitmdump"


class ProxyProcess(ChildProcess):
    """`mitmdump -s addon/chaos_addon.py` on a free loopback port, in reverse or regular mode.

    `config` is the `modelRouting` mapping written to a JSON file for `chaos_config` (None: the
    built-in defaults); `addon=False` runs plain mitmdump (for overhead measurements). `web_port` puts
    the addon's server on a given port (perhaps taken: readiness is then the proxy's own port).
    `own_ca=True` gives it its own confdir, so its own CA (`ca_cert`, what a client of an HTTPS
    interception trusts) instead of the user's ~/.mitmproxy.
    """

    name = "mitmdump"

    def __init__(
        self,
        *,
        upstream: str | None = None,
        config: dict[str, object] | None = None,
        addon: bool = True,
        extra_args: Sequence[str] = (),
        listen_host: str = "127.0.0.1",
        web_port: int | None = None,
        own_ca: bool = False,
        env: dict[str, str] | None = None,
        **kwargs: float,
    ) -> None:
        super().__init__(**kwargs)
        self.env = dict(env or {})  # more environment variables for mitmdump (a chaos_key key, say)
        self.upstream = upstream  # reverse mode to this URL; None: regular proxy mode
        self.config = config
        self.addon = addon
        self.extra_args = list(extra_args)
        self.listen_host = listen_host
        self.own_ca = own_ca
        self.port = free_port()
        self.web_port = web_port if web_port is not None else free_port() if addon else 0
        self._ready_on_web = addon and web_port is None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ca_cert(self) -> Path:
        """The CA certificate it signs intercepted TLS with (with `own_ca`; mitmproxy writes it at start)."""
        if not self.own_ca:
            raise RuntimeError("the proxy uses the user's confdir: start it with own_ca=True")
        return self.workdir / "mitmproxy-ca-cert.pem"

    @property
    def status_url(self) -> str:
        return f"http://127.0.0.1:{self.web_port}/api/status"

    def command(self) -> list[str]:
        cmd = [_mitmdump(), "--listen-host", self.listen_host, "-p", str(self.port), "--set", "flow_detail=0"]
        if self.upstream:
            cmd += ["--mode", f"reverse:{self.upstream}"]
        if self.own_ca:
            cmd += ["--set", f"confdir={self.workdir}"]
        if self.addon:
            script = Path(ADDON_DIR) / "chaos_addon.py"
            cmd += ["-s", str(script), "--set", f"chaos_web=127.0.0.1:{self.web_port}"]
            # Learned limits start from the catalog in every run and never touch the user's confdir
            # (mitmdump fails to load the script when an option is set twice: only when not given).
            if not any(arg.startswith("chaos_limits_file=") for arg in self.extra_args):
                cmd += ["--set", f"chaos_limits_file={self.workdir / 'chaos-mode-limits.json'}"]
            if self.config is not None:
                import json

                path = self.workdir / "chaos.json"
                path.write_text(json.dumps({"modelRouting": self.config}), encoding="utf-8")
                cmd += ["--set", f"chaos_config={path}"]
        return cmd + self.extra_args

    def environment(self) -> dict[str, str]:
        return {**super().environment(), **self.env}

    def ready(self) -> bool:
        # The addon's server starts in `running()`, after the proxy listens: one probe tells both.
        return port_open("127.0.0.1", self.web_port if self._ready_on_web else self.port)


class RedisProcess(ChildProcess):
    """redis-server on a loopback port, without persistence, for the fleet's tests and benchmark. The same
    `port` may be given to a new one: Redis stopped and started again where the proxies expect it."""

    name = "redis-server"

    def __init__(
        self,
        *,
        port: int | None = None,
        password: str | None = None,
        tls: tuple[str, str] | None = None,
        **kwargs: float,
    ) -> None:
        super().__init__(**kwargs)
        self.port = port or free_port()
        self.password = password
        self.tls = tls  # (certificate, key) PEM files: TLS only on `port` (rediss://)

    @property
    def url(self) -> str:
        return f"{'rediss' if self.tls else 'redis'}://127.0.0.1:{self.port}/0"

    def command(self) -> list[str]:
        cmd = [shutil.which("redis-server") or "redis-server", "--bind", "127.0.0.1"]
        if self.tls:
            cert, key = self.tls
            cmd += ["--port", "0", "--tls-port", str(self.port), "--tls-auth-clients", "no"]
            cmd += ["--tls-cert-file", cert, "--tls-key-file", key]
        else:
            cmd += ["--port", str(self.port)]
        cmd += ["--save", "", "--appendonly", "no", "--dir", str(self.workdir), "--daemonize", "no"]
        if self.password:
            cmd += ["--requirepass", self.password]
        return cmd

    def ready(self) -> bool:
        return port_open("127.0.0.1", self.port)
