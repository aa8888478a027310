"""Starting mitmdump with a bad config or option: one plain error line and an exit, never a traceback."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from chaos_mode.devtools.processes import ProxyProcess

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
    # One error, said where it happened and again as the last line (mitmproxy's start-up check repeats it).
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


def test_the_config_error_is_the_last_thing_printed_before_the_exit() -> None:
    """mitmproxy brings its servers up while the script loads ("listening at ..."): the error comes last."""
    output = refuses_to_start(ProxyProcess(config={"chaosMode": {"enabled": "maybe"}}, start_timeout=30))
    last = [line for line in output.splitlines() if line.strip()][-1]
    assert "chaos-mode: chaos_config: " in last and "modelRouting.chaosMode.enabled" in last, output


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
