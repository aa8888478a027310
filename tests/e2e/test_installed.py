"""Installed as a user installs it: the wheel built from this checkout, in a fresh venv (its dependencies from
the package index, as `pip install` takes them) and with pipx, no checkout on the path; the wheel holds the
runtime only, and its `chaos-mode` routes a request to the checkout's simulator."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Sequence
from pathlib import Path

import httpx
import pytest

from chaos_mode_tools.devtools.processes import ChildProcess, free_port, port_open

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
INSTALL_TIMEOUT = 180.0  # seconds; about 10-15 here


def _run(*args: str | Path, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(
        [str(arg) for arg in args],
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT,
        check=False,
        env=env,
    )
    assert result.returncode == 0, f"{args}:\n{result.stdout[-3000:]}{result.stderr[-3000:]}"
    return result.stdout


def _clean_env() -> dict[str, str]:
    """The environment without this checkout's PYTHONPATH."""
    return {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}


# What a build leaves in the checkout, or the tools' caches: not copied to the tree the wheel is built from.
NOT_SOURCE = shutil.ignore_patterns(
    ".git", ".venv", "build", "dist", "artifacts", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis"
)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built from a copy of the checkout: setuptools builds in the tree and keeps `build/`, so a
    module deleted since an earlier build would still ship, and this test would pass on it."""
    source, out = tmp_path_factory.mktemp("source") / "chaos-mode", tmp_path_factory.mktemp("wheel")
    shutil.copytree(ROOT, source, ignore=NOT_SOURCE)
    _run(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", out, source)
    (built,) = out.glob("chaos_mode-*.whl")
    return built


def test_the_wheel_holds_the_runtime_only(wheel: Path) -> None:
    """The development tools (`chaos_mode_tools`: the simulator, the benchmarks) stay in the checkout."""
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    packages = {name.split("/")[0] for name in names if not name.endswith("-info/RECORD")}
    assert {name for name in packages if not name.endswith(".dist-info")} == {"chaos_mode"}
    modules = {name for name in names if name.endswith(".py")}
    assert modules == {
        str(p.relative_to(ROOT / "addon")) for p in (ROOT / "addon" / "chaos_mode").rglob("*.py")
    }


class Installed(ChildProcess):
    """An installed command on a loopback port, with no checkout on its path (the test runs elsewhere); or,
    `checkout`, this checkout's own (its simulator, a development tool the wheel leaves out)."""

    def __init__(self, argv: Sequence[str], port: int, *, checkout: bool = False) -> None:
        super().__init__()
        self.name = Path(argv[0]).name
        self.argv = list(argv)
        self.port = port
        self.checkout = checkout

    def command(self) -> list[str]:
        return self.argv

    def environment(self) -> dict[str, str]:
        return {**(dict(os.environ) if self.checkout else _clean_env()), "PYTHONUNBUFFERED": "1"}

    def ready(self) -> bool:
        return port_open("127.0.0.1", self.port)


def _routes_a_request(chaos_mode: Path, workdir: Path) -> None:
    """The checkout's simulator, and the installed `chaos-mode` in front of it as README's "Try it offline": a
    GLM model answers. The installed `chaos-mode sim` finds no simulator: it is not in the wheel."""
    sim = subprocess.run(
        [str(chaos_mode), "sim", "--help"], capture_output=True, text=True, timeout=30, env=_clean_env()
    )
    assert sim.returncode == 1 and "no simulator here: it runs in a checkout's venv" in sim.stderr
    sim_port, port, web_port = free_port(), free_port(), free_port()
    config = workdir / "chaos.yaml"
    config.write_text("modelRouting:\n  chaosMode: {enabled: true}\n  upstreamHosts: [127.0.0.1]\n")
    proxy_args = [
        *("-p", str(port), "--mode", f"reverse:http://127.0.0.1:{sim_port}"),
        *("--set", f"chaos_config={config}", "--set", f"chaos_web=127.0.0.1:{web_port}"),
        *("--set", f"confdir={workdir}", "--set", f"chaos_limits_file={workdir / 'limits.json'}"),
    ]
    with (
        Installed(
            [sys.executable, "-m", "chaos_mode_tools.sim", "--port", str(sim_port), "--catalog", "2026-12"],
            sim_port,
            checkout=True,
        ),
        Installed([str(chaos_mode), *proxy_args], web_port) as proxy,
    ):
        answer = httpx.post(
            f"http://127.0.0.1:{port}/api/anthropic/v1/messages",
            headers={"x-api-key": "test"},
            json={
                "model": "claude-sonnet-4-5",
                "max_tokens": 64,
                "messages": [{"role": "user", "content": "hi"}],
            },
            timeout=30,
        )
        dashboard = httpx.get(f"http://127.0.0.1:{web_port}/", timeout=10)
        output = proxy.output()
    assert answer.status_code == 200, answer.text
    assert answer.json()["model"].startswith("glm-")
    assert f"listening at 127.0.0.1:{port}" in output  # the loopback by default
    assert dashboard.status_code == 200 and "<html" in dashboard.text.lower()  # its static files are inside


def test_a_fresh_venv_runs_chaos_mode_from_the_wheel(
    wheel: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    venv = tmp_path / "venv"
    # The venv's own pip is not under test: this one installs into it (3-4 s less than bootstrapping one).
    _run(sys.executable, "-m", "venv", "--without-pip", venv)
    _run(sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "install", "--quiet", wheel)
    package = (
        venv.resolve()
        / "lib"
        / f"python{sys.version_info[0]}.{sys.version_info[1]}"
        / "site-packages"
        / "chaos_mode"
    )
    assert (
        _run(venv / "bin" / "chaos-mode", "path", env=_clean_env()) == f"{package / 'mitm' / 'script.py'}\n"
    )
    assert (package / "observe" / "grafana" / "chaos-mode.json").is_file()
    # The runtime's dependencies only: the development tools' client stays in the `tools` extra.
    probe = "import importlib.util, sys; sys.exit(importlib.util.find_spec('httpx') is not None)"
    _run(venv / "bin" / "python", "-c", probe, env=_clean_env())
    _routes_a_request(venv / "bin" / "chaos-mode", tmp_path)


def test_pipx_installs_chaos_mode_from_the_wheel(
    wheel: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pipx = shutil.which("pipx")
    if pipx is None:
        why = "pipx not found: install Debian's pipx package (apt-get install pipx)"
        if os.environ.get("CI"):
            pytest.fail(why + " — required when CI is set", pytrace=False)
        pytest.skip(why)
    monkeypatch.chdir(tmp_path)
    env = {**_clean_env(), "PIPX_HOME": str(tmp_path / "pipx"), "PIPX_BIN_DIR": str(tmp_path / "bin")}
    _run(pipx, "install", "--python", sys.executable, wheel, env=env)
    _routes_a_request(tmp_path / "bin" / "chaos-mode", tmp_path)
