"""`chaos-mode` builds mitmproxy's arguments, the loopback by default; the script loads afresh each time."""

from __future__ import annotations

import runpy
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from mitmproxy.addons.script import load_script
from mitmproxy.tools import main as mitmproxy_main

import chaos_mode
from chaos_mode.mitm import command as command_module
from chaos_mode.mitm.addon import ChaosMode
from chaos_mode.mitm.command import LOOPBACK, SCRIPT, Launch, launch, main, names_listen_host
from chaos_mode_tools.devtools.processes import ADDON_DIR

OURS = ("-s", str(SCRIPT))


def test_mitmdump_with_the_script_on_the_loopback_then_the_users_arguments() -> None:
    argv = ["-p", "8080", "--set", "chaos_enabled=true", "~d api.z.ai"]
    assert launch(argv) == Launch("mitmdump", (*OURS, "--listen-host", LOOPBACK, *argv))


def test_web_runs_mitmweb_without_passing_the_flag_on() -> None:
    assert launch(["--web", "-p", "8080"]) == Launch(
        "mitmweb", (*OURS, "--listen-host", LOOPBACK, "-p", "8080")
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["--listen-host", "0.0.0.0"],
        ["--listen-host=::"],
        ["--listen-h", "0.0.0.0"],  # mitmproxy's parser takes an unambiguous abbreviation
        ["--set", "listen_host=10.0.0.2"],
        ["--set=listen_host=10.0.0.2"],
    ],
)
def test_a_listen_host_given_is_the_users(argv: list[str]) -> None:
    assert names_listen_host(argv)
    assert launch(argv) == Launch("mitmdump", (*OURS, *argv))


@pytest.mark.parametrize(
    "argv", [["--listen-port", "8080"], ["--set", "listen_port=8080"], ["--listen-", "x"], ["listen_host=x"]]
)
def test_other_arguments_name_no_listen_host(argv: list[str]) -> None:
    assert not names_listen_host(argv)


@given(st.lists(st.text(max_size=12), max_size=6))
def test_every_argument_reaches_mitmproxy_in_order_after_ours(argv: list[str]) -> None:
    plan = launch(argv)
    if argv[:1] in (["sim"], ["check"]):
        assert plan == Launch(argv[0], tuple(argv[1:]))  # type: ignore[arg-type]
    elif argv in (["path"], ["--version"]):
        assert plan.args == ()
    elif argv and not argv[0].startswith("-"):  # mitmdump's filter would take it and every word after
        assert plan == Launch("unknown", (argv[0],))
    else:
        rest = [arg for arg in argv if arg != "--web"]
        assert plan.tool == ("mitmweb" if "--web" in argv else "mitmdump")
        assert plan.args[:2] == OURS
        assert list(plan.args[len(plan.args) - len(rest) :]) == rest
        assert names_listen_host(plan.args)


def test_sim_and_check_take_the_rest() -> None:
    assert launch(["sim", "--port", "8700"]) == Launch("sim", ("--port", "8700"))
    assert launch(["check", "--budget", "9"]) == Launch("check", ("--budget", "9"))


def test_version_and_path_print_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert (
        capsys.readouterr().out == f"chaos-mode {chaos_mode.__version__} (mitmproxy {version('mitmproxy')})\n"
    )
    assert main(["path"]) == 0
    assert capsys.readouterr().out == f"{SCRIPT}\n"
    assert SCRIPT.is_file() and SCRIPT.parent == Path(chaos_mode.__file__).resolve().parent / "mitm"


def test_python_m_chaos_mode_is_the_command(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", ["chaos_mode", "path"])
    with pytest.raises(SystemExit) as exit_:
        runpy.run_module("chaos_mode", run_name="__main__")
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"{SCRIPT}\n"


@pytest.mark.parametrize("tool", ["mitmdump", "mitmweb"])
def test_main_runs_mitmproxys_own_entry_point(monkeypatch: pytest.MonkeyPatch, tool: str) -> None:
    called: list[tuple[str, list[str]]] = []
    for name in ("mitmdump", "mitmweb"):
        monkeypatch.setattr(mitmproxy_main, name, lambda args, name=name: called.append((name, args)))
    argv = ["-p", "8080"] + (["--web"] if tool == "mitmweb" else [])
    assert main(argv) == 0
    assert called == [(tool, [*OURS, "--listen-host", LOOPBACK, "-p", "8080"])]


@pytest.mark.parametrize(
    "argv",
    [
        ["--set", "chaos_web=", "--set", "chaos_web=127.0.0.1:9"],
        ["--set=chaos_key=A", "-p", "1", "--set", "chaos_key=B"],
    ],
)
def test_an_addon_option_given_twice_is_one_line_not_a_proxy_without_the_addon(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    """mitmproxy fails to load a script whose option is set twice, and says nothing: the proxy would run
    with every request unrouted."""
    monkeypatch.setattr(mitmproxy_main, "mitmdump", lambda args: pytest.fail("mitmdump started"))
    assert main(argv) == 2
    assert "is given twice: give it once" in capsys.readouterr().err


def test_options_given_once_or_mitmproxys_own_twice_start_the_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    called: list[list[str]] = []
    monkeypatch.setattr(mitmproxy_main, "mitmdump", called.append)
    assert (
        main(["--set", "chaos_web=", "--set", "flow_detail=1", "--set", "flow_detail=2", "chaos_web=x"]) == 0
    )
    assert len(called) == 1


@pytest.mark.parametrize("argv", [["version"], ["chek", "-p", "1"], ["path", "x"]])
def test_a_word_that_is_no_command_is_one_line_not_a_proxy_filtering_by_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    """mitmdump would take the word for a filter expression, and every argument after it (`-p` too)."""
    monkeypatch.setattr(mitmproxy_main, "mitmdump", lambda args: pytest.fail("mitmdump started"))
    assert main(argv) == 2
    assert f"no command {argv[0]!r}" in capsys.readouterr().out


def test_sim_without_the_tools_says_where_it_runs(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(command_module, "find_spec", lambda name: None)  # installed from the wheel
    monkeypatch.setattr(command_module.os, "execv", lambda *args: pytest.fail("exec'd"))
    assert main(["sim", "--help"]) == 1
    assert "no simulator here: it runs in a checkout's venv" in capsys.readouterr().err


def test_help_names_our_words_before_mitmproxys(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(mitmproxy_main, "mitmdump", lambda args: print("mitmdump's help"))
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert out.index("chaos-mode sim") < out.index("chaos-mode path") < out.index("mitmdump's help")


@pytest.mark.parametrize("script", [SCRIPT, Path(ADDON_DIR) / "chaos_addon.py"], ids=["package", "checkout"])
def test_each_load_of_the_script_makes_a_fresh_addon(script: Path) -> None:
    """mitmproxy loads the script again when it changes: a new addon each time, never the old one."""
    first, second = load_script(str(script)), load_script(str(script))
    assert first is not None and second is not None
    assert [type(addon) for addon in first.addons] == [ChaosMode]
    assert first.addons[0] is not second.addons[0]
