"""`chaos-mode`: mitmdump (mitmweb with `--web`) with the addon loaded; other arguments go to mitmproxy.

`chaos-mode sim ...` runs a checkout's z.ai simulator, `chaos-mode check ...` checks what z.ai does on the
user's account (chaos_mode.check), `chaos-mode path` prints the script mitmproxy loads
(`mitmdump -s "$(chaos-mode path)"`), `chaos-mode --version` the versions.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.metadata import version
from importlib.util import find_spec
from pathlib import Path
from typing import Literal

import chaos_mode

SCRIPT: Path = Path(__file__).resolve().with_name("script.py")
LOOPBACK = "127.0.0.1"  # the proxy carries the agents' API keys: off the network unless asked

USAGE = """chaos-mode [--web] [mitmproxy's options]: mitmdump (mitmweb with --web) with the addon loaded
chaos-mode sim [options]: the z.ai simulator, in a checkout's venv only (chaos-mode sim --help)
chaos-mode check [options]: what z.ai does on your account (chaos-mode check --help)
chaos-mode path: the script mitmproxy loads; chaos-mode --version: the versions
mitmproxy's options:
"""

Tool = Literal["mitmdump", "mitmweb", "sim", "check", "path", "version", "unknown"]


@dataclass(frozen=True)
class Launch:
    """What `chaos-mode` runs, and with which arguments."""

    tool: Tool
    args: tuple[str, ...] = ()


def names_listen_host(args: Sequence[str]) -> bool:
    """Whether mitmproxy's arguments set the listen host (`--listen-host`, an abbreviation of it that
    mitmproxy accepts, or `--set listen_host=`)."""
    for previous, arg in zip(["", *args], args, strict=False):
        name = arg.split("=", 1)[0]
        if len(name) > len("--listen-") and "--listen-host".startswith(name):
            return True
        if arg.startswith("--set=listen_host=") or (previous == "--set" and arg.startswith("listen_host=")):
            return True
    return False


def set_twice(args: Sequence[str]) -> str | None:
    """An addon option (`chaos_*`) given twice with `--set`: mitmproxy then fails to load the script, and
    says nothing (the proxy runs without the addon)."""
    seen: set[str] = set()
    for previous, arg in zip(["", *args], args, strict=False):
        setting = (
            arg.removeprefix("--set=") if arg.startswith("--set=") else arg if previous == "--set" else ""
        )
        name = setting.split("=", 1)[0]
        if name.startswith("chaos_"):
            if name in seen:
                return name
            seen.add(name)
    return None


def launch(argv: Sequence[str]) -> Launch:
    """What `chaos-mode argv` runs: the addon's script first (mitmdump's filter expression, a positional
    argument, takes every argument after it), the loopback unless the listen host is given."""
    if argv[:1] in (["sim"], ["check"]):
        return Launch("sim" if argv[0] == "sim" else "check", tuple(argv[1:]))
    if list(argv) in (["path"], ["--version"]):
        return Launch("path" if argv[0] == "path" else "version")
    if argv and not argv[0].startswith("-"):  # mitmdump would take it for a filter, and every word after it
        return Launch("unknown", (argv[0],))
    rest = [arg for arg in argv if arg != "--web"]
    ours = ["-s", str(SCRIPT)] + ([] if names_listen_host(rest) else ["--listen-host", LOOPBACK])
    return Launch("mitmweb" if len(rest) < len(argv) else "mitmdump", (*ours, *rest))


def main(argv: Sequence[str] | None = None) -> int:
    plan = launch(sys.argv[1:] if argv is None else argv)
    if plan.tool == "version":
        print(f"chaos-mode {chaos_mode.__version__} (mitmproxy {version('mitmproxy')})")
        return 0
    if plan.tool == "path":
        print(SCRIPT)
        return 0
    if plan.tool == "unknown":
        print(f"chaos-mode: no command {plan.args[0]!r}: sim, check, path, --version, or mitmproxy's options")
        return 2
    if plan.tool == "check":
        from chaos_mode.check.run import main as check

        return check(plan.args)
    if plan.tool == "sim":  # a development tool, never imported here: not in the wheel, in a checkout's venv
        if find_spec("chaos_mode_tools") is None:
            print("chaos-mode sim: no simulator here: it runs in a checkout's venv", file=sys.stderr)
            return 1
        os.execv(sys.executable, [sys.executable, "-m", "chaos_mode_tools.sim", *plan.args])
    if {"-h", "--help"} & set(plan.args):
        print(USAGE)
    elif (twice := set_twice(plan.args)) is not None:
        print(f"chaos-mode: --set {twice} is given twice: give it once", file=sys.stderr)
        return 2
    from mitmproxy.tools import main as mitmproxy

    (mitmproxy.mitmweb if plan.tool == "mitmweb" else mitmproxy.mitmdump)(list(plan.args))
    return 0
