"""Starting mitmdump with a bad config or option: one plain error line and an exit, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from chaos_mode_tools.devtools.processes import ProxyProcess

pytestmark = pytest.mark.e2e


def refuses_to_start(proxy: ProxyProcess) -> str:
    """Start `proxy`, expect it to exit with an error; its output."""
    with pytest.raises(RuntimeError, match="exited") as raised:
        proxy.start()
    output = str(raised.value)
    assert "Traceback" not in output
    assert proxy.returncode not in (None, 0)
    return output


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"chaosMode": {"strategy": "fastest"}}, "modelRouting.chaosMode.strategy: Input should be"),
        (
            {"chaosMode": {"excludeModels": ["glm-9"]}},
            "modelRouting.chaosMode.excludeModels: not in the catalog",
        ),
        (
            {"models": {"a": {"tier": "HEAVY", "maxConcurrency": 1, "inputPrice": float("inf")}}},
            "modelRouting.models.a.inputPrice: Input should be a finite number",
        ),
        (
            {"models": {"a": {"tier": "HEAVY", "maxConcurrency": True}}},
            "modelRouting.models.a.maxConcurrency: Input should be a valid integer",
        ),
        ({"upstreamHosts": []}, "modelRouting.upstreamHosts: must name at least one host"),
        (
            {"upstreamHosts": ["https://api.z.ai"]},
            "modelRouting.upstreamHosts: 'https://api.z.ai' is a URL; write the host name alone: api.z.ai",
        ),
        ({"models": {"": {"tier": "HEAVY", "maxConcurrency": 1}}}, "modelRouting.models: model name ''"),
    ],
)
def test_a_bad_config_at_start_is_one_clear_line_and_an_exit(config: dict[str, object], message: str) -> None:
    output = refuses_to_start(ProxyProcess(config=config, start_timeout=30))
    assert "chaos-mode: chaos_config: " in output
    assert message in output


def _write(text: str) -> Callable[[Path], None]:
    return lambda path: path.write_text(text, encoding="utf-8")


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (os.mkfifo, "not a regular file"),
        (
            _write("modelRouting:\n  chaosMode: {enabled: true\n  queue: {}\n"),
            "not valid YAML: line 3, column",
        ),
        (_write("modelRouting: " + "[" * 3000 + "]" * 3000 + "\n"), "not valid YAML: nested too deeply"),
        (_write("modelRouting:\n  accountConcurrency: " + "7" * 5000 + "\n"), "line 2: Exceeds the limit"),
    ],
    ids=["fifo", "yaml-syntax", "deep", "digits"],
)
def test_a_bad_config_file_at_start_is_one_line_and_an_exit(
    make: Callable[[Path], None], message: str
) -> None:
    proxy = ProxyProcess(start_timeout=30)
    path = proxy.workdir / "chaos.yaml"
    make(path)
    proxy.extra_args = ["--set", f"chaos_config={path}"]
    output = refuses_to_start(proxy)
    # One error, said where it happened.
    errors = {
        line[line.index("chaos-mode:") :]
        for line in output.splitlines()
        if "chaos-mode: chaos_config: " in line
    }
    assert len(errors) == 1, output
    assert message in errors.pop()


@pytest.mark.parametrize("value", ["maybe", "on", "1"])
def test_an_unknown_chaos_enabled_value_is_refused_at_start(value: str) -> None:
    output = refuses_to_start(ProxyProcess(extra_args=["--set", f"chaos_enabled={value}"], start_timeout=30))
    assert f"chaos-mode: chaos_enabled: must be one of auto, true, false, not '{value}'" in output


class _Entry(ProxyProcess):
    """ProxyProcess's `mitmdump -s chaos_addon.py`, or `chaos-mode` (`python -m chaos_mode`), same options."""

    def __init__(self, entry: str, **kwargs: Any) -> None:
        super().__init__(start_timeout=30, **kwargs)
        self.entry = entry

    def command(self) -> list[str]:
        mitmdump = super().command()
        if self.entry == "mitmdump":
            return mitmdump
        script = mitmdump.index("-s")
        return [sys.executable, "-m", "chaos_mode", *mitmdump[1:script], *mitmdump[script + 2 :]]


@pytest.mark.parametrize("entry", ["mitmdump", "chaos-mode"])
def test_a_bad_config_exits_before_mitmproxy_says_listening(entry: str) -> None:
    """stdout and stderr in one pipe, buffered as a user's `2>&1 | tee` has them: the error comes last."""
    proxy = _Entry(entry, config={"chaosMode": {"enabled": "maybe"}})
    env = {name: value for name, value in proxy.environment().items() if name != "PYTHONUNBUFFERED"}
    try:
        done = subprocess.run(
            proxy.command(),
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=60,
            check=False,
        )
    finally:
        proxy.stop()
    output = done.stdout.decode()
    assert done.returncode != 0, output
    assert "listening" not in output and "Traceback" not in output, output
    last = [line for line in output.splitlines() if line.strip()][-1]
    assert last.startswith("chaos-mode: chaos_config: ") and "modelRouting.chaosMode.enabled" in last, output
    with _Entry(entry, config={"chaosMode": {"enabled": True}}) as good:  # a good one starts
        assert f"listening at 127.0.0.1:{good.port}" in good.output()


def warnings_at_start(proxy: ProxyProcess) -> list[str]:
    """The warning lines of a proxy that started, once it is up."""
    with proxy:
        lines = proxy.output().splitlines()
    return [line for line in lines if "chaos-mode:" in line]


def test_a_misspelt_chaos_option_is_named_with_the_one_meant() -> None:
    proxy = ProxyProcess(extra_args=["--set", "chaos_enabeld=true"], start_timeout=30)
    lines = warnings_at_start(proxy)
    assert any("unknown option chaos_enabeld (did you mean chaos_enabled?)" in line for line in lines), lines


def test_reverse_mode_to_a_host_chaos_mode_does_not_route_says_which_key_to_set() -> None:
    """In front of the simulator with no config: every request would pass untouched, and the log says why."""
    proxy = ProxyProcess(
        upstream="http://127.0.0.1:9", config={"chaosMode": {"enabled": True}}, start_timeout=30
    )
    lines = warnings_at_start(proxy)
    assert any(
        "reverse mode forwards to 127.0.0.1, which is not in modelRouting.upstreamHosts" in line
        and "add 127.0.0.1 to upstreamHosts" in line
        for line in lines
    ), lines
    routed = ProxyProcess(
        upstream="http://127.0.0.1:9",
        config={"chaosMode": {"enabled": True}, "upstreamHosts": ["127.0.0.1"]},
        start_timeout=30,
    )
    assert not any("upstreamHosts" in line for line in warnings_at_start(routed))


_HIDE = """\
import sys


class _Hidden:
    \"\"\"As if {names} were not installed (mitmproxy installed on its own, by pipx or brew).\"\"\"

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {names!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None


sys.meta_path.insert(0, _Hidden())
"""


class _WithoutPackages(ProxyProcess):
    """mitmdump whose Python cannot import `hidden` (a `sitecustomize` on PYTHONPATH hides them)."""

    def __init__(self, hidden: set[str]) -> None:
        super().__init__(start_timeout=30)
        (self.workdir / "sitecustomize.py").write_text(_HIDE.format(names=hidden), encoding="utf-8")

    def environment(self) -> dict[str, str]:
        env = super().environment()
        env["PYTHONPATH"] = os.pathsep.join((str(self.workdir), env["PYTHONPATH"]))
        return env


@pytest.mark.parametrize(
    ("hidden", "package"), [("pydantic", "pydantic"), ("prometheus_client", "prometheus-client")]
)
def test_a_missing_package_is_one_line_that_says_what_to_install(hidden: str, package: str) -> None:
    output = refuses_to_start(_WithoutPackages({hidden}))
    lines = [line for line in output.splitlines() if "chaos-mode cannot load" in line]
    assert len(lines) == 1, output
    assert f"the Python package {package} is not installed" in lines[0]
    assert "pipx inject mitmproxy prometheus-client pydantic" in lines[0]
    assert "ModuleNotFoundError" not in output
